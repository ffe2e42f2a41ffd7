#!/usr/bin/env bash
# RabbitMQ entrypoint for docker compose: the compose twin of setup_rabbitmq
# in scripts/up.sh.
#
# Writes a definitions file from the container's environment, points the
# node at it (definitions.local.path: imported at every boot, which also
# resets the users' passwords to the configured ones), then hands over to
# the image's own entrypoint. The definitions hold:
#   - the vhost "/" (a node that imports definitions at boot skips its
#     default vhost and user);
#   - one user per service (ORDER_AMQP_USER/ORDER_AMQP_PASSWORD,
#     INVENTORY_AMQP_*, PAYMENT_AMQP_*) with configure/write/read ".*" on
#     "/": each service declares its own queues and publishes to the shared
#     exchanges;
#   - an administrator for the management UI and the failure lab
#     (RABBITMQ_ADMIN_USER/RABBITMQ_ADMIN_PASSWORD, guest/guest by default;
#     the image allows guest from outside the container).
# Exchanges, queues and bindings are not here: the services declare them.
#
#   entrypoint.sh rabbitmq-server      what docker-compose.yml runs
#   entrypoint.sh print-definitions    print the definitions and exit (tests)
set -euo pipefail

# The prefix of each service's settings.
SERVICE_KEYS=(ORDER INVENTORY PAYMENT)

# The image's configuration directory (the tests in deploy/ point
# ORDERSAGA_RABBITMQ_ETC at a temporary one).
ETC=${ORDERSAGA_RABBITMQ_ETC:-/etc/rabbitmq}
CONF_FILE=$ETC/conf.d/90-ordersaga.conf
DEFINITIONS_FILE=$ETC/ordersaga-definitions.json

die() {
	printf 'ordersaga rabbitmq init: %s\n' "$*" >&2
	exit 1
}

setting() { printf '%s' "${!1:-}"; }

# json_str VALUE: VALUE as a JSON string literal.
json_str() {
	local s=$1
	s=${s//\\/\\\\}
	s=${s//\"/\\\"}
	printf '"%s"' "$s"
}

# check_settings: the same rules as check_settings in scripts/up.sh.
check_settings() {
	local key name pw seen=" " bad=()
	for key in "${SERVICE_KEYS[@]}" RABBITMQ_ADMIN; do
		if [[ $key == RABBITMQ_ADMIN ]]; then
			name=$(setting RABBITMQ_ADMIN_USER)
			pw=$(setting RABBITMQ_ADMIN_PASSWORD)
			key=RABBITMQ_ADMIN_USER
		else
			name=$(setting "${key}_AMQP_USER")
			pw=$(setting "${key}_AMQP_PASSWORD")
			key=${key}_AMQP_USER
		fi
		[[ $name =~ ^[A-Za-z0-9_.-]{1,32}$ ]] || bad+=("$key must be 1-32 of A-Z a-z 0-9 _ . - (got '$name')")
		[[ -n $pw ]] || bad+=("the password of $key is empty")
		[[ $pw == *[[:cntrl:]]* ]] && bad+=("the password of $key has a control character")
		[[ $seen == *" $name "* ]] && bad+=("$key=$name is shared with another user: each needs its own")
		seen+="$name "
	done
	if ((${#bad[@]})); then
		printf 'ordersaga rabbitmq init: bad settings:\n' >&2
		printf '    %s\n' "${bad[@]}" >&2
		exit 1
	fi
}

# user_json NAME PASSWORD TAGS: one entry of "users".
user_json() {
	printf '{"name": %s, "password": %s, "tags": [%s]}' "$(json_str "$1")" "$(json_str "$2")" "$3"
}

perm_json() {
	printf '{"user": %s, "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}' "$(json_str "$1")"
}

definitions() {
	local key users=() perms=() admin
	admin=$(setting RABBITMQ_ADMIN_USER)
	users+=("$(user_json "$admin" "$(setting RABBITMQ_ADMIN_PASSWORD)" '"administrator"')")
	perms+=("$(perm_json "$admin")")
	for key in "${SERVICE_KEYS[@]}"; do
		users+=("$(user_json "$(setting "${key}_AMQP_USER")" "$(setting "${key}_AMQP_PASSWORD")" '')")
		perms+=("$(perm_json "$(setting "${key}_AMQP_USER")")")
	done
	local IFS=,
	printf '{\n  "vhosts": [{"name": "/"}],\n  "users": [%s],\n  "permissions": [%s]\n}\n' "${users[*]}" "${perms[*]}"
}

check_settings

if [[ ${1:-} == print-definitions ]]; then
	definitions
	exit 0
fi

# Written as root (the image's entrypoint steps down to the rabbitmq user
# afterwards), readable by that user only: the file holds passwords.
(
	umask 077
	definitions >"$DEFINITIONS_FILE"
	printf 'definitions.import_backend = local_filesystem\ndefinitions.local.path = %s\n' "$DEFINITIONS_FILE" >"$CONF_FILE"
)
if [[ $(id -u) == 0 ]] && id rabbitmq >/dev/null 2>&1; then
	chown rabbitmq:rabbitmq "$DEFINITIONS_FILE" "$CONF_FILE"
fi
printf 'ordersaga rabbitmq init: users %s, %s, %s (vhost /) and %s (administrator) are defined\n' \
	"$(setting ORDER_AMQP_USER)" "$(setting INVENTORY_AMQP_USER)" "$(setting PAYMENT_AMQP_USER)" "$(setting RABBITMQ_ADMIN_USER)"

exec docker-entrypoint.sh "$@"
