#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Run the three services on this machine against the local MariaDB/MySQL and
# RabbitMQ (no docker needed; with docker use `docker compose up` instead).
#
# Usage:
#   scripts/up.sh [-q]   start, wait until every /readyz answers, follow the
#                        logs as "[order] ..."; Ctrl-C stops everything
#   scripts/up.sh -d     detach: start, wait until ready, return; the services
#                        keep running (.run/stack.json lists them)
#   scripts/up.sh -d -n 2 --rabbit-cluster 3
#                        two instances of every service and a local
#                        three-node RabbitMQ cluster (either flag alone works)
#   scripts/up.sh -d --tracing
#                        also run Jaeger (bin/jaeger, built from
#                        tools/jaeger; the first build takes minutes):
#                        every service exports its spans to it over
#                        OTLP/HTTP (:4318), its query API answers on :16686
#                        and the viewer draws each order's trace from it
#                        (docs/tracing.md); UP_TRACING=true in the
#                        environment does the same (scripts/loadrun.sh)
#   scripts/up.sh down   stop what up.sh started, broker nodes included
#                        (SIGTERM, SIGKILL after 25 s)
#   scripts/up.sh setup  only create the schemas and the MySQL/RabbitMQ users
#
#   -q  quiet: do not copy the service logs to the terminal
#   -n N                 N instances of every service (1-9): instance k
#                        listens on the service's port + 100*(k-1), so the
#                        second is on 8181/8182/8183; its log and pid file
#                        are .run/<service>-k.log and .pid (the first keeps
#                        .run/order.log). Instances of a service share its
#                        schema and its queues (competing consumers).
#   --rabbit-cluster N   start a local RabbitMQ cluster of N private nodes
#                        (internal/rabbitnode: ordersaga-1@localhost ... on
#                        ports 5701..., data under .run/rabbit/) with the
#                        service users of deploy/provision.sh, and point
#                        every service at all of them (AMQP_URL lists the
#                        nodes, rotated per instance); the machine's broker
#                        is left alone (it only provides the programs)
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
#   4. go build -o bin/ ./services/... ./cmd/supervisor ./cmd/viewer;
#   5. bin/supervisor up (cmd/supervisor): starts the cluster's nodes if asked, then
#      the fake PSP (bin/psp, one process on :8084 whatever -n), then
#      every instance of bin/order, bin/inventory and bin/payment-fake, then
#      in demo mode bin/viewer (the saga viewer on :8080, showing the first
#      instances), with logs in .run/<name>.log (the previous run's kept as
#      .log.1) and pids in .run/<name>.pid, starts a service or a node again
#      when it dies by itself (the failure lab crashes them, as docker
#      compose's restart policy does), and writes .run/stack.json, every
#      process and node with its pid, URL or port and log, for the tools
#      that read it; and prints the viewer's URL with its token.
#
# Tokens (docs/security.md): unless set, a fresh viewer token (VIEWER_TOKEN,
# or ADMIN_TOKEN when that is set) and a fresh PSP key (PSP_TOKEN, given to
# the PSP and the payment service only) are made at each start; the
# banner's viewer URL carries the token (http://127.0.0.1:8080/?token=...),
# and .run/stack.json, readable by you only, keeps it (viewer_url).
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
	sed -n '6,39p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit "${1:-2}"
}

# setup: the servers running, the schemas and users in place. With a local
# cluster (cluster > 0) the machine's broker is neither started nor
# provisioned: only its package is needed, and bin/supervisor provisions the
# cluster's nodes itself.
setup() {
	bash deploy/provision.sh check || die "fix the settings in $SETTINGS_FILE or the environment"
	ensure_mariadb
	if ((cluster == 0)); then ensure_rabbitmq; else ensure_rabbitmq_installed; fi
	mariadb_root_ok
	# Through stdin: passwords never appear on a command line.
	bash deploy/provision.sh mysql | mysql_root || die "creating the schemas and MySQL users failed"
	log "MySQL: schemas order_service, inventory_service, payment_service and their users are ready"
	((cluster == 0)) || return 0

	have rabbitmqctl || die "rabbitmqctl not found: import the users yourself: deploy/provision.sh rabbitmq | rabbitmqctl import_definitions"
	local out
	if ! out=$(bash deploy/provision.sh rabbitmq | rabbitmqctl -q import_definitions 2>&1); then
		die "RabbitMQ: importing the users failed (run as root or the rabbitmq user, who can read the Erlang cookie): $out"
	fi
	log "RabbitMQ: users $ORDER_AMQP_USER, $INVENTORY_AMQP_USER, $PAYMENT_AMQP_USER are ready"
}

detach=false quiet=false instances=1 cluster=0 tracing=${UP_TRACING:-false}
# The long option first (getopts has none), then the short ones.
rest=()
while (($#)); do
	case $1 in
	--rabbit-cluster)
		(($# >= 2)) || usage
		cluster=$2
		shift 2
		;;
	--rabbit-cluster=*)
		cluster=${1#*=}
		shift
		;;
	--tracing)
		tracing=true
		shift
		;;
	--help) usage 0 ;;
	*)
		rest+=("$1")
		shift
		;;
	esac
done
set -- "${rest[@]+"${rest[@]}"}"
while getopts ":dqhn:" opt; do
	case $opt in
	d) detach=true ;;
	q) quiet=true ;;
	n) instances=$OPTARG ;;
	h) usage 0 ;;
	:)
		log "option -$OPTARG needs a number"
		usage
		;;
	*)
		log "unknown option -$OPTARG"
		usage
		;;
	esac
done
shift $((OPTIND - 1))
[[ $instances =~ ^[1-9]$ ]] || die "-n $instances: want 1 to 9 instances"
[[ $cluster =~ ^[0-9]$ ]] || die "--rabbit-cluster $cluster: want 1 to 9 nodes"
command=${1:-up}
(($# <= 1)) || usage

case $command in
down)
	ensure_go
	go build -o bin/ ./cmd/supervisor
	exec bin/supervisor down
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
log "go build -o bin/ ./services/... ./cmd/supervisor ./cmd/viewer"
go build -o bin/ ./services/... ./cmd/supervisor ./cmd/viewer
args=(-n "$instances" -rabbit-cluster "$cluster")
if [[ $tracing == true ]]; then
	# A module of its own: Jaeger's dependencies stay out of go.mod.
	log "go build -o bin/jaeger (tools/jaeger; the first build takes minutes)"
	(cd tools/jaeger && go build -o ../../bin/jaeger github.com/jaegertracing/jaeger/cmd/jaeger) ||
		die "building Jaeger failed (tools/jaeger)"
	args+=(-tracing)
fi
if [[ $detach == true ]]; then args+=(-d); fi
if [[ $quiet == true ]]; then args+=(-q); fi
export MYSQL_HOST MYSQL_PORT RABBITMQ_HOST RABBITMQ_PORT
exec bin/supervisor up "${args[@]}"
