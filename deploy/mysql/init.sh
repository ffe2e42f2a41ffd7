# shellcheck shell=bash
# MySQL first-start provisioning for docker compose: the compose twin of
# setup_mysql in scripts/up.sh.
#
# The mysql image runs every *.sh in /docker-entrypoint-initdb.d once, when
# the data directory is empty, against a temporary server that listens on
# its socket only. It sources a file that is not executable (as this one is
# shipped) and executes one that is; this script works either way.
#
# For each service it creates the schema (utf8mb4, utf8mb4_bin) and one user
# with ALL PRIVILEGES on that schema and nothing else. Names and passwords
# come from the container's environment, which docker-compose.yml fills from
# .env with the demo defaults of .env.example: ORDER_DB_USER,
# ORDER_DB_PASSWORD, INVENTORY_DB_USER, ... The services apply their own
# migrations at start (MYSQL_CREATE_DATABASE=false).
#
# The users are created for host '%' only: MySQL 8.4 has no anonymous
# accounts, so '%' also matches connections from inside the container
# (scripts/up.sh adds 'localhost' because a MariaDB install may have an
# anonymous ''@'localhost' that would win over '%').
#
# Changed a password in .env later? This script does not run again on an
# existing data directory: docker compose down -v, then up (or ALTER USER).
#
# ORDERSAGA_INIT_DRY_RUN=1 prints the SQL instead of running it (the tests
# in deploy/ use it).

# The schema of each service and the prefix of its settings.
ordersaga_services=(
	"order_service ORDER"
	"inventory_service INVENTORY"
	"payment_service PAYMENT"
)

# ordersaga_sql_str VALUE: VALUE as a quoted SQL string literal.
ordersaga_sql_str() {
	local s=$1
	s=${s//\\/\\\\}
	s=${s//\'/\'\'}
	printf "'%s'" "$s"
}

# ordersaga_init_sql: the provisioning SQL on stdout; fails on bad settings
# (the same rules as check_settings in scripts/up.sh).
ordersaga_init_sql() {
	local entry db key user pw seen=" " bad=()
	for entry in "${ordersaga_services[@]}"; do
		db=${entry% *}
		key=${entry#* }
		user=${key}_DB_USER
		user=${!user:-}
		pw=${key}_DB_PASSWORD
		pw=${!pw:-}
		[[ $user =~ ^[A-Za-z0-9_.-]{1,32}$ ]] ||
			bad+=("${key}_DB_USER must be 1-32 of A-Z a-z 0-9 _ . - (got '$user')")
		[[ -n $pw ]] || bad+=("${key}_DB_PASSWORD is empty")
		[[ $seen == *" $user "* ]] && bad+=("${key}_DB_USER=$user is shared with another service: each needs its own")
		seen+="$user "
	done
	if ((${#bad[@]})); then
		printf 'ordersaga init: bad settings:\n' >&2
		printf '    %s\n' "${bad[@]}" >&2
		return 1
	fi
	for entry in "${ordersaga_services[@]}"; do
		db=${entry% *}
		key=${entry#* }
		user=${key}_DB_USER
		user=$(ordersaga_sql_str "${!user}")
		pw=${key}_DB_PASSWORD
		pw=$(ordersaga_sql_str "${!pw}")
		# "\_" keeps "_" from being a wildcard in the GRANT's schema name.
		cat <<-EOSQL
			CREATE DATABASE IF NOT EXISTS \`$db\` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
			CREATE USER IF NOT EXISTS $user@'%' IDENTIFIED BY $pw;
			ALTER USER $user@'%' IDENTIFIED BY $pw;
			GRANT ALL PRIVILEGES ON \`${db//_/\\_}\`.* TO $user@'%';
		EOSQL
	done
}

# ordersaga_run_sql: stdin to the temporary server as root.
ordersaga_run_sql() {
	if declare -F docker_process_sql >/dev/null; then
		# Sourced by the image's entrypoint: its helper knows the socket
		# and the root password.
		docker_process_sql --database=mysql
	else
		local pw=${MYSQL_ROOT_PASSWORD:-}
		pw=${pw//\\/\\\\}
		pw=${pw//\"/\\\"}
		mysql --defaults-extra-file=<(printf '[client]\nuser=root\npassword="%s"\n' "$pw") \
			--protocol=socket -hlocalhost --database=mysql
	fi
}

ordersaga_init() {
	local sql
	sql=$(ordersaga_init_sql) || return 1
	if [[ ${ORDERSAGA_INIT_DRY_RUN:-} == 1 ]]; then
		printf '%s\n' "$sql"
		return 0
	fi
	# Through stdin: passwords never appear on a command line.
	printf '%s\n' "$sql" | ordersaga_run_sql || return 1
	printf 'ordersaga init: schemas order_service, inventory_service, payment_service and their users are ready\n'
}

# A failure stops the first start (the entrypoint exits): better than a
# server that runs without the users the services need.
ordersaga_init || exit 1
