#!/usr/bin/env bash
# experiment.sh: run the failure lab against a running stack.
#
#   scripts/experiment.sh list                     the experiments
#   scripts/experiment.sh duplicate-window         one experiment
#   scripts/experiment.sh -wrong-way atomic-commit the same, with the mistake the mechanism prevents
#   scripts/experiment.sh all                      every experiment
#
# Start the stack first with scripts/up.sh (or docker compose up). The lab
# talks to the services over HTTP (ORDER_URL, INVENTORY_URL, PAYMENT_URL;
# ADMIN_TOKEN if set) and publishes duplicates through RabbitMQ
# (LAB_AMQP_URL, default amqp://guest:guest@127.0.0.1:5672/).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
ensure_go
if [[ -z ${ADMIN_TOKEN:-} && -f .env ]]; then
	ADMIN_TOKEN=$(sed -n 's/^ADMIN_TOKEN=//p' .env | tail -n 1)
	export ADMIN_TOKEN
fi
exec go run ./cmd/lab "$@"
