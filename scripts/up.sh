#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Run the three services on this machine against the local MariaDB/MySQL and
# RabbitMQ (no docker needed; with docker use `docker compose up` instead).
#
# Usage:
#   scripts/up.sh [-q]   start, wait until every /readyz answers, follow the
#                        logs as "[order] ..."; Ctrl-C stops all three
#   scripts/up.sh -d     detach: start, wait until ready, return; the services
#                        keep running (pids in .run/<service>.pid)
#   scripts/up.sh down   stop services started by up.sh (SIGTERM, SIGKILL after 15 s)
#   scripts/up.sh setup  only create the schemas and the MySQL/RabbitMQ users
#
#   -q  quiet: do not copy the service logs to the terminal
#
# Every start: make sure MariaDB and RabbitMQ run (starting them when they are
# installed here), create the schemas order_service, inventory_service and
# payment_service and one MySQL user per service with ALL PRIVILEGES on its own
# schema and nothing else, one RabbitMQ user per service (vhost "/"), build
# bin/order, bin/inventory, bin/payment-fake and start them with logs in
# .run/<service>.log (the previous run's log is kept as .log.1). All of it is
# idempotent; passwords are reset to the configured ones.
#
# Settings: .env if present, else .env.example (KEY=VALUE lines); variables
# set in the environment win over the file. Services listen on
# $UP_HTTP_HOST:8081/8082/8083, UP_HTTP_HOST defaulting to 127.0.0.1 because
# demo mode exposes fault-injection endpoints (UP_HTTP_HOST=0.0.0.0 for all
# interfaces). Other service knobs can be set in the environment: the
# services inherit it.
#
# Re-running: up.sh never reuses a running service (it could be an old build).
# When something already listens on 8081-8083 it stops with an error naming
# the process; `scripts/up.sh down` stops the ones a previous up.sh started.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd -P)

# unescape: \\ \" \n \t inside a double-quoted value, as docker compose reads them.
unescape() {
	local s=$1 out="" c i
	for ((i = 0; i < ${#s}; i++)); do
		c=${s:i:1}
		if [[ $c == "\\" && $((i + 1)) -lt ${#s} ]]; then
			i=$((i + 1))
			c=${s:i:1}
			case $c in n) c=$'\n' ;; t) c=$'\t' ;; esac
		fi
		out+=$c
	done
	printf '%s' "$out"
}

# load_settings FILE: KEY=VALUE lines ("export " prefix, single or double
# quotes, comments) as docker compose reads them, upper-case keys only. A
# variable that is already set (the environment) keeps its value. Runs before
# lib.sh so that settings such as MYSQL_HOST reach its defaults.
load_settings() {
	local file=$1 line key val n=0
	while IFS= read -r line || [[ -n $line ]]; do
		n=$((n + 1))
		line=${line%$'\r'}
		[[ $line =~ ^[[:space:]]*(#|$) ]] && continue
		line=${line#"${line%%[![:space:]]*}"}
		line=${line#export }
		if ! [[ $line =~ ^([A-Z][A-Z0-9_]*)[[:space:]]*=[[:space:]]*(.*)$ ]]; then
			printf '[up] error: %s:%d: expected KEY=VALUE with an upper-case KEY\n' "$file" "$n" >&2
			exit 1
		fi
		key=${BASH_REMATCH[1]}
		val=${BASH_REMATCH[2]}
		if [[ $val =~ ^\"(.*)\"[[:space:]]*$ ]]; then
			val=$(unescape "${BASH_REMATCH[1]}")
		elif [[ $val =~ ^\'(.*)\'[[:space:]]*$ ]]; then
			val=${BASH_REMATCH[1]}
		else
			val=${val%%[[:space:]]#*}
			val=${val%"${val##*[![:space:]]}"}
		fi
		[[ -n ${!key+set} ]] && continue
		printf -v "$key" '%s' "$val"
	done <"$file"
}

if [[ -f .env ]]; then SETTINGS_FILE=.env; else SETTINGS_FILE=.env.example; fi
load_settings "$SETTINGS_FILE"

# shellcheck source=lib.sh
. scripts/lib.sh

SERVICES=(order inventory payment-fake)
RUN_DIR=$ROOT/.run
READY_TIMEOUT=${UP_READY_TIMEOUT:-60}
# Services shut down within their SHUTDOWN_TIMEOUT (15 s by default).
STOP_TIMEOUT=${UP_STOP_TIMEOUT:-25}
UP_HTTP_HOST=${UP_HTTP_HOST:-127.0.0.1}

svc_port() {
	case $1 in order) echo 8081 ;; inventory) echo 8082 ;; payment-fake) echo 8083 ;; esac
}
# svc_key: prefix of the service's settings (ORDER_DB_USER, ...).
svc_key() {
	case $1 in order) echo ORDER ;; inventory) echo INVENTORY ;; payment-fake) echo PAYMENT ;; esac
}
svc_db() {
	case $1 in order) echo order_service ;; inventory) echo inventory_service ;; payment-fake) echo payment_service ;; esac
}
# setting NAME: value of a setting, empty when unset.
setting() { printf '%s' "${!1:-}"; }

# usage [STATUS]: the header of this file.
usage() {
	sed -n '3,14p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit "${1:-2}"
}

# ------------------------------------------------------------------ settings

check_settings() {
	local svc key kind name bad=() seen=" "
	for kind in DB AMQP; do
		seen=" "
		for svc in "${SERVICES[@]}"; do
			key=$(svc_key "$svc")
			name=$(setting "${key}_${kind}_USER")
			[[ $name =~ ^[A-Za-z0-9_.-]{1,32}$ ]] || bad+=("${key}_${kind}_USER must be 1-32 of A-Z a-z 0-9 _ . - (got '$name')")
			[[ -n $(setting "${key}_${kind}_PASSWORD") ]] || bad+=("${key}_${kind}_PASSWORD is empty")
			[[ $seen == *" $name "* ]] && bad+=("${key}_${kind}_USER=$name is shared with another service: each needs its own")
			seen+="$name "
		done
	done
	if ((${#bad[@]})); then
		log "bad settings in $SETTINGS_FILE or the environment:"
		printf '    %s\n' "${bad[@]}" >&2
		exit 1
	fi
}

# ------------------------------------------------------------- provisioning

# sql_str: a quoted SQL string literal.
sql_str() {
	local s=$1
	s=${s//\\/\\\\}
	s=${s//\'/\'\'}
	printf "'%s'" "$s"
}

setup_mysql() {
	mariadb_root_ok
	local svc key db user pw host sql=""
	for svc in "${SERVICES[@]}"; do
		key=$(svc_key "$svc")
		db=$(svc_db "$svc")
		user=$(sql_str "$(setting "${key}_DB_USER")")
		pw=$(sql_str "$(setting "${key}_DB_PASSWORD")")
		sql+="CREATE DATABASE IF NOT EXISTS \`$db\` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
ALTER DATABASE \`$db\` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
"
		for host in "'%'" "'localhost'"; do
			# REVOKE first so the user ends with exactly one grant, whatever
			# it had before. The "\_" keeps "_" from being a GRANT wildcard.
			sql+="CREATE USER IF NOT EXISTS $user@$host IDENTIFIED BY $pw;
ALTER USER $user@$host IDENTIFIED BY $pw;
REVOKE ALL PRIVILEGES, GRANT OPTION FROM $user@$host;
GRANT ALL PRIVILEGES ON \`${db//_/\\_}\`.* TO $user@$host;
"
		done
	done
	# Through stdin: passwords never appear on a command line.
	printf '%s' "$sql" | mysql_root || die "creating the schemas and MySQL users failed"
	log "MySQL: schemas $(svc_db order), $(svc_db inventory), $(svc_db payment-fake) and their users are ready"
}

setup_rabbitmq() {
	have rabbitmqctl || die "rabbitmqctl not found: create the RabbitMQ users ${ORDER_AMQP_USER:-}, ${INVENTORY_AMQP_USER:-}, ${PAYMENT_AMQP_USER:-} yourself (permissions '.*' '.*' '.*' on vhost /)"
	local tmp svc key user pw out perms bg=()
	tmp=$(mktemp -d)
	# rabbitmqctl starts an Erlang VM (about 0.5 s a call): run the checks
	# side by side and change only what differs.
	for svc in "${SERVICES[@]}"; do
		key=$(svc_key "$svc")
		(
			if rabbitmqctl -q authenticate_user "$(setting "${key}_AMQP_USER")" "$(setting "${key}_AMQP_PASSWORD")" >/dev/null 2>&1; then
				echo ok >"$tmp/$key"
			fi
		) &
		bg+=($!)
	done
	(
		rc=0
		rabbitmqctl -s list_permissions -p / >"$tmp/perms" 2>&1 || rc=$?
		echo "$rc" >"$tmp/perms.rc"
	) &
	bg+=($!)
	wait "${bg[@]}"

	if [[ $(cat "$tmp/perms.rc") != 0 ]]; then
		out=$(cat "$tmp/perms")
		rm -rf "$tmp"
		die "rabbitmqctl cannot talk to the broker (run as root or the rabbitmq user, who can read the Erlang cookie): $out"
	fi
	for svc in "${SERVICES[@]}"; do
		key=$(svc_key "$svc")
		user=$(setting "${key}_AMQP_USER")
		pw=$(setting "${key}_AMQP_PASSWORD")
		if [[ ! -f $tmp/$key ]]; then
			if out=$(rabbitmqctl -q add_user "$user" "$pw" 2>&1); then
				log "RabbitMQ: created user $user"
			elif [[ $out == *"already exists"* ]]; then
				rabbitmqctl -q change_password "$user" "$pw" >/dev/null || die "RabbitMQ: could not set the password of $user"
				log "RabbitMQ: reset the password of $user"
			else
				rm -rf "$tmp"
				die "RabbitMQ: could not create user $user: $out"
			fi
		fi
		perms=$(awk -v u="$user" -F '\t' '$1 == u { print $2 " " $3 " " $4 }' "$tmp/perms")
		if [[ $perms != ".* .* .*" ]]; then
			rabbitmqctl -q set_permissions -p / "$user" '.*' '.*' '.*' >/dev/null ||
				die "RabbitMQ: could not set the permissions of $user"
			log "RabbitMQ: granted $user '.*' '.*' '.*' on vhost /"
		fi
	done
	rm -rf "$tmp"
	log "RabbitMQ: users ${ORDER_AMQP_USER:-}, ${INVENTORY_AMQP_USER:-}, ${PAYMENT_AMQP_USER:-} are ready"
}

# ---------------------------------------------------------------- processes

urlencode() {
	local LC_ALL=C s=$1 out="" c i
	for ((i = 0; i < ${#s}; i++)); do
		c=${s:i:1}
		case $c in
		[A-Za-z0-9._~-]) out+=$c ;;
		*)
			printf -v c '%%%02X' "'$c"
			out+=$c
			;;
		esac
	done
	printf '%s' "$out"
}

# alive PID: the process exists and is not a zombie (a zombie has exited; some
# container inits are slow to reap it).
alive() {
	local stat
	kill -0 "$1" 2>/dev/null || return 1
	stat=$(ps -o stat= -p "$1" 2>/dev/null) || return 0
	[[ $stat != Z* ]]
}

pid_file() { printf '%s/%s.pid' "$RUN_DIR" "$1"; }
log_file() { printf '%s/%s.log' "$RUN_DIR" "$1"; }

# running_pid SVC: the pid in .run/SVC.pid when that process is still our
# binary; removes a stale pid file.
running_pid() {
	local f pid args
	f=$(pid_file "$1")
	[[ -f $f ]] || return 1
	pid=$(cat "$f")
	# Our process is the supervisor running our binary (or, from an older
	# up.sh, the binary itself).
	if [[ $pid =~ ^[0-9]+$ ]] && args=$(ps -p "$pid" -o args= 2>/dev/null) &&
		[[ $args == *"scripts/supervise.sh $ROOT/bin/$1" || ${args%% *} == "$ROOT/bin/$1" ]]; then
		echo "$pid"
		return 0
	fi
	rm -f "$f"
	return 1
}

check_ports_free() {
	local svc port pid busy=0
	for svc in "${SERVICES[@]}"; do
		port=$(svc_port "$svc")
		tcp_open 127.0.0.1 "$port" || continue
		busy=1
		if pid=$(running_pid "$svc"); then
			log "$svc is already running on :$port (pid $pid, started by scripts/up.sh)"
		else
			log "port $port ($svc) is in use by another process (see: ss -ltnp 'sport = :$port')"
		fi
	done
	((busy == 0)) || die "not starting over running services: stop them first (scripts/up.sh down)"
}

# Parallel to SERVICES: pids of the services we started, and of the log
# followers.
PIDS=()
FOLLOWERS=()
DETACHED=false

start_service() {
	local svc=$1 key port log
	key=$(svc_key "$svc")
	port=$(svc_port "$svc")
	log=$(log_file "$svc")
	[[ -f $log ]] && mv -f "$log" "$log.1"
	local dsn amqp failpoints
	dsn="$(setting "${key}_DB_USER"):$(setting "${key}_DB_PASSWORD")@tcp($MYSQL_HOST:$MYSQL_PORT)/$(svc_db "$svc")"
	amqp="amqp://$(urlencode "$(setting "${key}_AMQP_USER")"):$(urlencode "$(setting "${key}_AMQP_PASSWORD")")@$RABBITMQ_HOST:$RABBITMQ_PORT/"
	failpoints=$(setting "${key}_FAILPOINTS")
	(
		export HTTP_ADDR="$UP_HTTP_HOST:$port" MYSQL_DSN="$dsn" AMQP_URL="$amqp"
		export MYSQL_CREATE_DATABASE=false FAILPOINTS="${failpoints:-${FAILPOINTS:-}}"
		export DEMO_MODE="${DEMO_MODE:-true}" LOG_LEVEL="${LOG_LEVEL:-info}"
		export ADMIN_TOKEN="${ADMIN_TOKEN:-}" OUTBOX_LEASE="${OUTBOX_LEASE:-5s}"
		case $svc in
		order) export INVENTORY_URL=http://127.0.0.1:8082 PAYMENT_URL=http://127.0.0.1:8083 ;;
		payment-fake) export PSP_URL=http://127.0.0.1:8083/psp ;;
		esac
		# Own session: Ctrl-C in the terminal reaches only this script,
		# which then stops the services with SIGTERM; a closed terminal
		# does not stop detached services.
		trap '' HUP
		# Under a supervisor that restarts a crashed service (the failure
		# lab crashes them on purpose), as docker compose does.
		if have setsid; then exec setsid "$ROOT/scripts/supervise.sh" "$ROOT/bin/$svc"; else exec "$ROOT/scripts/supervise.sh" "$ROOT/bin/$svc"; fi
	) </dev/null >>"$log" 2>&1 &
	PIDS+=($!)
	echo "$!" >"$(pid_file "$svc")"
}

# follow SVC PID: copy the log to the terminal as "[svc] line" until the
# service exits (GNU tail --pid; elsewhere the logs stay in .run/).
follow() {
	local svc=$1 pid=$2 prefix
	prefix=$(printf '%-15s' "[$svc]")
	(
		trap '' INT
		tail -n +1 -s 0.3 -F --pid="$pid" "$(log_file "$svc")" 2>/dev/null |
			awk -v p="$prefix" '{ print p $0; fflush() }'
	) &
	FOLLOWERS+=($!)
}

can_follow() { tail --pid=1 -n 0 /dev/null >/dev/null 2>&1; }

# ready_status SVC: HTTP status of /readyz (000 when nothing answers).
ready_status() {
	curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$(svc_port "$1")/readyz" 2>/dev/null || true
}

show_log_tail() {
	local f
	f=$(log_file "$1")
	log "last lines of ${f#"$ROOT"/}:"
	tail -n 30 "$f" 2>/dev/null | sed 's/^/    /' >&2 || true
}

# wait_ready: every service answers 200 on /readyz within READY_TIMEOUT.
wait_ready() {
	local start=$SECONDS next_note=5 i svc pid rc code pending still
	pending=("${SERVICES[@]}")
	while :; do
		still=()
		for svc in "${pending[@]}"; do
			code=$(ready_status "$svc")
			if [[ $code == 200 ]]; then
				log "$svc is ready ($((SECONDS - start))s)"
				continue
			fi
			for i in "${!SERVICES[@]}"; do [[ ${SERVICES[i]} == "$svc" ]] && pid=${PIDS[i]}; done
			if ! kill -0 "$pid" 2>/dev/null; then
				rc=0
				wait "$pid" || rc=$?
				log "$svc exited with status $rc before it was ready"
				show_log_tail "$svc"
				return 1
			fi
			still+=("$svc:$code")
		done
		((${#still[@]})) || return 0
		pending=("${still[@]%%:*}")
		if ((SECONDS - start >= READY_TIMEOUT)); then
			log "not ready after ${READY_TIMEOUT}s (/readyz status): ${still[*]}"
			for svc in "${pending[@]}"; do show_log_tail "$svc"; done
			return 1
		fi
		if ((SECONDS - start >= next_note)); then
			log "waiting for /readyz: ${still[*]} ($((SECONDS - start))s/${READY_TIMEOUT}s)"
			next_note=$((next_note + 5))
		fi
		sleep 0.3
	done
}

# stop_pids NAME=PID...: SIGTERM to all, SIGKILL to those still alive after
# STOP_TIMEOUT seconds.
stop_pids() {
	local item pid still polls=$((STOP_TIMEOUT * 5))
	for item in "$@"; do
		kill -TERM "${item#*=}" 2>/dev/null || true
	done
	while :; do
		still=()
		for item in "$@"; do
			if alive "${item#*=}"; then still+=("$item"); fi
		done
		((${#still[@]})) || break
		if (((polls -= 1) < 0)); then
			for item in "${still[@]}"; do
				log "${item%=*} did not stop within ${STOP_TIMEOUT}s: SIGKILL"
				kill -KILL "${item#*=}" 2>/dev/null || true
			done
			break
		fi
		sleep 0.2
	done
	for item in "$@"; do
		pid=${item#*=}
		wait "$pid" 2>/dev/null || true # reap our own children
	done
}

# stop_started: stop the services this run started (reverse order), then let
# the log followers print the last lines.
stop_started() {
	local i items=() f
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
		kill -0 "${PIDS[i]}" 2>/dev/null && items+=("${SERVICES[i]}=${PIDS[i]}")
	done
	if ((${#items[@]})); then
		log "stopping ${items[*]%=*}"
		stop_pids "${items[@]}"
		log "stopped"
	fi
	for ((i = 0; i < ${#PIDS[@]}; i++)); do rm -f "$(pid_file "${SERVICES[i]}")"; done
	PIDS=()
	for f in "${FOLLOWERS[@]+"${FOLLOWERS[@]}"}"; do
		# tail --pid notices the exit within 0.3 s.
		for i in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$f" 2>/dev/null && sleep 0.2; done
		kill "$f" 2>/dev/null || true
	done
	FOLLOWERS=()
}

# shellcheck disable=SC2317 # called from traps
on_exit() {
	local rc=$?
	if [[ $DETACHED == false ]] && ((${#PIDS[@]})); then stop_started; fi
	exit "$rc"
}

# shellcheck disable=SC2317 # called from traps
on_signal() {
	trap '' INT TERM HUP
	log "$1: stopping the services (SIGKILL after ${STOP_TIMEOUT}s)"
	stop_started
	exit 0
}

cmd_down() {
	local svc pid items=()
	for svc in "${SERVICES[@]}"; do
		if pid=$(running_pid "$svc"); then items+=("$svc=$pid"); fi
	done
	if ((${#items[@]} == 0)); then
		log "no service started by scripts/up.sh is running"
	else
		log "stopping ${items[*]}"
		stop_pids "${items[@]}"
		for svc in "${items[@]}"; do rm -f "$(pid_file "${svc%=*}")"; done
		log "stopped"
	fi
	for svc in "${SERVICES[@]}"; do
		tcp_open 127.0.0.1 "$(svc_port "$svc")" &&
			log "note: port $(svc_port "$svc") is still in use by a process up.sh did not start"
	done
	return 0
}

print_banner() {
	local svc
	echo
	for svc in "${SERVICES[@]}"; do
		printf '  %-13s http://127.0.0.1:%s   log .run/%s.log\n' "$svc" "$(svc_port "$svc")" "$svc"
	done
	cat <<EOF
  fake PSP      http://127.0.0.1:8083/psp
  every service: /healthz /readyz /metrics

  Try:
    curl -s -X POST http://127.0.0.1:8081/orders \\
      -H 'Content-Type: application/json' -H 'Idempotency-Key: demo-1' \\
      -d '{"customer_id":"c-1","items":[{"sku":"SKU-1","quantity":2}]}'
    curl -s http://127.0.0.1:8081/orders/<order_id>
    curl -s http://127.0.0.1:8082/stock

EOF
}

# --------------------------------------------------------------------- main

detach=false quiet=false
while getopts ":dqh" opt; do
	case $opt in
	d) detach=true ;;
	q) quiet=true ;;
	h) usage 0 ;;
	*)
		log "unknown option -$OPTARG"
		usage
		;;
	esac
done
shift $((OPTIND - 1))
command=${1:-up}
(($# <= 1)) || usage

case $command in
down)
	cmd_down
	exit 0
	;;
setup | up) ;;
*)
	log "unknown command $command"
	usage
	;;
esac

check_settings

if [[ $command == up ]]; then
	check_ports_free
fi
t0=$SECONDS
ensure_mariadb
ensure_rabbitmq
setup_mysql
setup_rabbitmq
[[ $command == setup ]] && exit 0

ensure_go
log "go build -o bin/ ./services/..."
go build -o bin/ ./services/...
missing=()
for svc in "${SERVICES[@]}"; do [[ -x bin/$svc ]] || missing+=("bin/$svc"); done
((${#missing[@]} == 0)) || die "the build produced no ${missing[*]} (is ./services/<name> a main package?)"

mkdir -p "$RUN_DIR"
trap on_exit EXIT
trap 'on_signal SIGINT' INT
trap 'on_signal SIGTERM' TERM
trap 'on_signal SIGHUP' HUP
for svc in "${SERVICES[@]}"; do start_service "$svc"; done
follow_logs=false
if [[ $quiet == false && $detach == false ]]; then
	if can_follow; then
		follow_logs=true
		for i in "${!SERVICES[@]}"; do follow "${SERVICES[i]}" "${PIDS[i]}"; done
	else
		log "logs: .run/<service>.log (this tail cannot follow a pid)"
	fi
fi
log "started ${SERVICES[*]}; waiting for /readyz (up to ${READY_TIMEOUT}s)"
wait_ready || die "the services did not become ready; stopping them"
log "all ready in $((SECONDS - t0))s"
print_banner

if [[ $detach == true ]]; then
	DETACHED=true
	echo "  Running in the background; stop with: scripts/up.sh down"
	exit 0
fi
echo "  Ctrl-C stops all three."
[[ $follow_logs == true ]] || echo "  Logs: .run/<service>.log"

# Foreground: a crashed service is restarted by its supervisor; stop
# everything if a supervisor itself dies.
while :; do
	for i in "${!SERVICES[@]}"; do
		if ! kill -0 "${PIDS[i]}" 2>/dev/null; then
			rc=0
			wait "${PIDS[i]}" || rc=$?
			log "${SERVICES[i]} exited on its own (status $rc); stopping the others"
			[[ $follow_logs == true ]] || show_log_tail "${SERVICES[i]}"
			exit 1
		fi
	done
	sleep 1 &
	wait $! || true
done
