#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Run the three services on this machine against the local MariaDB/MySQL and
# RabbitMQ (no docker needed; with docker use `docker compose up` instead).
#
# Usage:
#   scripts/up.sh [-q]   start, wait until every /readyz answers, follow the
#                        logs as "[order] ..."; Ctrl-C stops all three
#   scripts/up.sh -d     detach: start, wait until ready, return; the services
#                        keep running (.run/stack.json lists them)
#   scripts/up.sh down   stop services started by up.sh (SIGTERM, SIGKILL after 25 s)
#   scripts/up.sh setup  only create the schemas and the MySQL/RabbitMQ users
#
#   -q  quiet: do not copy the service logs to the terminal
#
# Every start:
#   1. settings: .env if present, else .env.example (plain KEY=VALUE lines,
#      see there); variables exported in the environment win over the file;
#   2. MariaDB and RabbitMQ: started when installed here and stopped,
#      installed first when missing (with apt on Debian/Ubuntu as root or
#      with password-less sudo; elsewhere the commands are printed);
#   3. provisioning, by deploy/provision.sh (docker compose runs the same):
#      the schemas order_service, inventory_service and payment_service, one
#      MySQL user per service with ALL PRIVILEGES on its own schema and
#      nothing else, one RabbitMQ user per service (vhost "/"); idempotent,
#      passwords reset to the configured ones;
#   4. go build -o bin/ ./services/... ./cmd/stack ./cmd/viewer;
#   5. bin/stack up (cmd/stack): starts bin/order, bin/inventory and
#      bin/payment-fake, then in demo mode bin/viewer (the saga viewer on
#      :8080), with logs in .run/<name>.log (the previous run's
#      kept as .log.1) and pids in .run/<service>.pid, starts a service
#      again when it dies by itself (the failure lab crashes them, as
#      docker compose's restart policy does), and writes .run/stack.json,
#      every process with its pid, URL and log, for the tools that read it.
#
# Services listen on $UP_HTTP_HOST:8081/8082/8083 (the viewer on :8080),
# UP_HTTP_HOST defaulting to 127.0.0.1 because demo mode exposes fault-injection endpoints
# (UP_HTTP_HOST=0.0.0.0 for all interfaces). UP_READY_TIMEOUT (60) and
# UP_STOP_TIMEOUT (25) are in seconds. Other service knobs can be set in the
# environment: the services inherit it.
#
# Re-running: up.sh never reuses a running service (it could be an old build).
# When something already listens on 8081-8083 it stops with an error naming
# the process; `scripts/up.sh down` stops the ones a previous up.sh started.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=lib.sh
. scripts/lib.sh

# usage [STATUS]: the usage lines at the top of this file.
usage() {
	sed -n '6,14p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit "${1:-2}"
}

# setup: the servers running, the schemas and users in place.
setup() {
	bash deploy/provision.sh check || die "fix the settings in $SETTINGS_FILE or the environment"
	ensure_mariadb
	ensure_rabbitmq
	mariadb_root_ok
	# Through stdin: passwords never appear on a command line.
	bash deploy/provision.sh mysql | mysql_root || die "creating the schemas and MySQL users failed"
	log "MySQL: schemas order_service, inventory_service, payment_service and their users are ready"

	have rabbitmqctl || die "rabbitmqctl not found: import the users yourself: deploy/provision.sh rabbitmq | rabbitmqctl import_definitions"
	local out
	if ! out=$(bash deploy/provision.sh rabbitmq | rabbitmqctl -q import_definitions 2>&1); then
		die "RabbitMQ: importing the users failed (run as root or the rabbitmq user, who can read the Erlang cookie): $out"
	fi
	log "RabbitMQ: users $ORDER_AMQP_USER, $INVENTORY_AMQP_USER, $PAYMENT_AMQP_USER are ready"
}

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
	ensure_go
	go build -o bin/ ./cmd/stack
	exec bin/stack down
	;;
setup | up) ;;
*)
	log "unknown command $command"
	usage
	;;
esac

load_settings
setup
[[ $command == setup ]] && exit 0

ensure_go
log "go build -o bin/ ./services/... ./cmd/stack ./cmd/viewer"
go build -o bin/ ./services/... ./cmd/stack ./cmd/viewer
args=()
if [[ $detach == true ]]; then args+=(-d); fi
if [[ $quiet == true ]]; then args+=(-q); fi
export MYSQL_HOST MYSQL_PORT RABBITMQ_HOST RABBITMQ_PORT
exec bin/stack up "${args[@]}"
