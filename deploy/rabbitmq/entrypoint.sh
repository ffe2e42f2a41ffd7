#!/usr/bin/env bash
# RabbitMQ entrypoint for docker compose: writes the definitions of
# deploy/provision.sh (vhost "/", one user per service, the administrator
# RABBITMQ_ADMIN_USER for the management UI and the failure lab: the same
# users scripts/up.sh imports into a local broker), points the node at them
# (definitions.local.path: imported at every boot, which also resets the
# passwords to the configured ones; a node that imports definitions skips
# its default vhost and user), then hands over to the image's entrypoint.
# docker-compose.yml mounts provision.sh at /usr/local/lib/ordersaga/.
#
#   entrypoint.sh rabbitmq-server      what docker-compose.yml runs
set -euo pipefail

PROVISION=${ORDERSAGA_PROVISION:-/usr/local/lib/ordersaga/provision.sh}
# The image's configuration directory (the tests in deploy/ point
# ORDERSAGA_RABBITMQ_ETC at a temporary one).
ETC=${ORDERSAGA_RABBITMQ_ETC:-/etc/rabbitmq}
CONF_FILE=$ETC/conf.d/90-ordersaga.conf
DEFINITIONS_FILE=$ETC/ordersaga-definitions.json

# Written as root (the image's entrypoint steps down to the rabbitmq user
# afterwards), readable by that user only: the file holds passwords.
(
	umask 077
	bash "$PROVISION" rabbitmq >"$DEFINITIONS_FILE"
	printf 'definitions.import_backend = local_filesystem\ndefinitions.local.path = %s\n' "$DEFINITIONS_FILE" >"$CONF_FILE"
)
if [[ $(id -u) == 0 ]] && id rabbitmq >/dev/null 2>&1; then
	chown rabbitmq:rabbitmq "$DEFINITIONS_FILE" "$CONF_FILE"
fi
printf 'ordersaga rabbitmq init: users %s, %s, %s (vhost /) and %s (administrator) are defined\n' \
	"$ORDER_AMQP_USER" "$INVENTORY_AMQP_USER" "$PAYMENT_AMQP_USER" "$RABBITMQ_ADMIN_USER"

exec docker-entrypoint.sh "$@"
