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
# For a cluster (docker compose --profile ha: rabbitmq, rabbitmq-2 and
# rabbitmq-3) every node gets the Erlang cookie RABBITMQ_CLUSTER_COOKIE
# (nodes talk to each other only with the same cookie), and quorum queues
# grow to a member on each of three nodes by themselves (continuous
# membership reconciliation): the services may declare them on the first
# node before the others have joined.
#
#   entrypoint.sh rabbitmq-server      what docker-compose.yml runs
set -euo pipefail

PROVISION=${ORDERSAGA_PROVISION:-/usr/local/lib/ordersaga/provision.sh}
# The image's configuration directory (the tests in deploy/ point
# ORDERSAGA_RABBITMQ_ETC at a temporary one).
ETC=${ORDERSAGA_RABBITMQ_ETC:-/etc/rabbitmq}
CONF_FILE=$ETC/conf.d/90-ordersaga.conf
DEFINITIONS_FILE=$ETC/ordersaga-definitions.json

# The rabbitmq user's HOME, where Erlang reads its cookie.
COOKIE_FILE=${ORDERSAGA_RABBITMQ_HOME:-/var/lib/rabbitmq}/.erlang.cookie

# Written as root (the image's entrypoint steps down to the rabbitmq user
# afterwards), readable by that user only: the file holds passwords.
(
	umask 077
	bash "$PROVISION" rabbitmq >"$DEFINITIONS_FILE"
	printf '%s\n' \
		'definitions.import_backend = local_filesystem' \
		"definitions.local.path = $DEFINITIONS_FILE" \
		'quorum_queue.continuous_membership_reconciliation.enabled = true' \
		'quorum_queue.continuous_membership_reconciliation.target_group_size = 3' >"$CONF_FILE"
	if [[ -n ${RABBITMQ_CLUSTER_COOKIE:-} ]]; then
		# Erlang refuses a cookie others can read.
		rm -f "$COOKIE_FILE"
		printf '%s' "$RABBITMQ_CLUSTER_COOKIE" >"$COOKIE_FILE"
		chmod 400 "$COOKIE_FILE"
	fi
)
if [[ $(id -u) == 0 ]] && id rabbitmq >/dev/null 2>&1; then
	chown rabbitmq:rabbitmq "$DEFINITIONS_FILE" "$CONF_FILE"
	if [[ -n ${RABBITMQ_CLUSTER_COOKIE:-} ]]; then chown rabbitmq:rabbitmq "$COOKIE_FILE"; fi
fi
printf 'ordersaga rabbitmq init: users %s, %s, %s (vhost /) and %s (administrator) are defined\n' \
	"$ORDER_AMQP_USER" "$INVENTORY_AMQP_USER" "$PAYMENT_AMQP_USER" "$RABBITMQ_ADMIN_USER"

exec docker-entrypoint.sh "$@"
