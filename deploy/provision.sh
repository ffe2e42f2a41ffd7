#!/usr/bin/env bash
# The schemas and users of the three services: one source for the local
# setup (scripts/up.sh, on this machine's servers) and for docker compose
# (deploy/mysql/init.sh and deploy/rabbitmq/entrypoint.sh, in the
# containers). It prints; the callers run what it prints.
#
#   provision.sh check      check every setting below; exit 1 naming each bad one
#   provision.sh mysql      the SQL to run as the MySQL/MariaDB administrator
#   provision.sh rabbitmq   the RabbitMQ definitions (JSON), imported by
#                           `rabbitmqctl import_definitions` or at boot
#   provision.sh mysql-root the SQL that lets root log in over TCP from this
#                           machine with MYSQL_ROOT_PASSWORD (empty by
#                           default), for a MariaDB that scripts/lib.sh has
#                           just installed (Debian's lets root in through
#                           the socket only)
#
# For each service: its schema (utf8mb4, utf8mb4_bin) and one MySQL user with
# ALL PRIVILEGES on that schema and nothing else, for hosts '%' and
# 'localhost' (a MariaDB install may have an anonymous ''@'localhost' that
# would win over '%'); one RabbitMQ user with configure/write/read ".*" on
# vhost "/" (each service declares its own queues and publishes to the
# shared exchanges). The administrator RABBITMQ_ADMIN_USER is added when it
# is set (docker compose sets it for the management UI; a local broker has
# guest already). Exchanges and queues are not here: the services declare
# them. Running the output again resets the passwords and leaves each user
# exactly one grant.
#
# Settings come from the environment: ORDER_DB_USER, ORDER_DB_PASSWORD,
# ORDER_AMQP_USER, ORDER_AMQP_PASSWORD and the same for INVENTORY_ and
# PAYMENT_ (scripts/up.sh exports them from .env or .env.example;
# docker-compose.yml passes them to the containers).
set -euo pipefail

# The schema of each service and the prefix of its settings.
SERVICES=(
	"order_service ORDER"
	"inventory_service INVENTORY"
	"payment_service PAYMENT"
)

setting() { printf '%s' "${!1:-}"; }

# users KIND: the settings naming the users of KIND (DB or AMQP), one
# "USER_VAR PASSWORD_VAR" a line; AMQP has the administrator when it is set.
users() {
	local entry key
	for entry in "${SERVICES[@]}"; do
		key=${entry#* }
		echo "${key}_$1_USER ${key}_$1_PASSWORD"
	done
	if [[ $1 == AMQP && -n ${RABBITMQ_ADMIN_USER:-} ]]; then
		echo "RABBITMQ_ADMIN_USER RABBITMQ_ADMIN_PASSWORD"
	fi
}

# check KIND...: every user of KIND has a name of 1-32 of A-Z a-z 0-9 _ . -
# that no other user of its KIND has, and a password without control
# characters.
check() {
	local kind user pw name seen bad=()
	for kind in "$@"; do
		seen=" "
		while read -r user pw; do
			name=$(setting "$user")
			[[ $name =~ ^[A-Za-z0-9_.-]{1,32}$ ]] || bad+=("$user must be 1-32 of A-Z a-z 0-9 _ . - (got '$name')")
			[[ $seen == *" $name "* ]] && bad+=("$user=$name is shared with another user: each needs its own")
			seen+="$name "
			[[ -n $(setting "$pw") ]] || bad+=("$pw is empty")
			[[ $(setting "$pw") == *[[:cntrl:]]* ]] && bad+=("$pw has a control character")
		done < <(users "$kind")
	done
	if ((${#bad[@]})); then
		printf 'bad settings:\n' >&2
		printf '    %s\n' "${bad[@]}" >&2
		exit 1
	fi
}

# sql_str VALUE: a quoted SQL string literal.
sql_str() {
	local s=$1
	s=${s//\\/\\\\}
	s=${s//\'/\'\'}
	printf "'%s'" "$s"
}

# shellcheck disable=SC2016 # the backticks quote SQL names
mysql_sql() {
	local entry db key user pw host
	for entry in "${SERVICES[@]}"; do
		db=${entry% *} key=${entry#* }
		user=$(sql_str "$(setting "${key}_DB_USER")")
		pw=$(sql_str "$(setting "${key}_DB_PASSWORD")")
		printf 'CREATE DATABASE IF NOT EXISTS `%s` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;\n' "$db"
		printf 'ALTER DATABASE `%s` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;\n' "$db"
		for host in "'%'" "'localhost'"; do
			# REVOKE first, so that the user ends with exactly one grant
			# whatever it had before. "\_" keeps "_" from being a GRANT
			# wildcard.
			printf 'CREATE USER IF NOT EXISTS %s@%s IDENTIFIED BY %s;\n' "$user" "$host" "$pw"
			printf 'ALTER USER %s@%s IDENTIFIED BY %s;\n' "$user" "$host" "$pw"
			printf 'REVOKE ALL PRIVILEGES, GRANT OPTION FROM %s@%s;\n' "$user" "$host"
			printf 'GRANT ALL PRIVILEGES ON `%s`.* TO %s@%s;\n' "${db//_/\\_}" "$user" "$host"
		done
	done
}

# json_str VALUE: a JSON string literal (check has refused control characters).
json_str() {
	local s=$1
	s=${s//\\/\\\\}
	s=${s//\"/\\\"}
	printf '"%s"' "$s"
}

# Both root@127.0.0.1 and root@localhost: with host name resolution on, a
# connection from 127.0.0.1 may be taken for one from localhost; the socket
# login stays.
mysql_root_sql() {
	local pw
	pw=$(sql_str "${MYSQL_ROOT_PASSWORD:-}")
	printf "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY %s;\n" "$pw"
	printf "GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;\n"
	printf "ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD(%s);\n" "$pw"
}

rabbitmq_definitions() {
	local user pw tags name entries=() perms=()
	while read -r user pw; do
		tags=''
		[[ $user == RABBITMQ_ADMIN_USER ]] && tags='"administrator"'
		name=$(json_str "$(setting "$user")")
		entries+=("$(printf '{"name": %s, "password": %s, "tags": [%s]}' "$name" "$(json_str "$(setting "$pw")")" "$tags")")
		perms+=("$(printf '{"user": %s, "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}' "$name")")
	done < <(users AMQP)
	local IFS=,
	printf '{\n  "vhosts": [{"name": "/"}],\n  "users": [%s],\n  "permissions": [%s]\n}\n' "${entries[*]}" "${perms[*]}"
}

case ${1:-} in
check) check DB AMQP ;;
mysql)
	check DB
	mysql_sql
	;;
rabbitmq)
	check AMQP
	rabbitmq_definitions
	;;
mysql-root) mysql_root_sql ;;
*)
	sed -n '7,15p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
