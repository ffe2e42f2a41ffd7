#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# experiment.sh: run the failure lab against a running stack.
#
#   scripts/experiment.sh list                     the experiments
#   scripts/experiment.sh duplicate-window         one experiment
#   scripts/experiment.sh -wrong-way atomic-commit the same, with the mistake the mechanism prevents
#   scripts/experiment.sh all                      every experiment
#   scripts/experiment.sh -instance order-2 claim-crash
#                                                  on a stack of several instances (up.sh -n 2):
#                                                  failpoints and switches on that instance only
#                                                  (default all: every instance of the service)
#
# delta-overdue waits for the inventory service's PARK_DEADLINE (5m by
# default): start the stack with PARK_DEADLINE=20s scripts/up.sh -d to see
# it in half a minute.
#
# Start the stack first with scripts/up.sh (or docker compose up). The lab
# talks to the services over HTTP (ORDER_URL, INVENTORY_URL, PAYMENT_URL;
# ADMIN_TOKEN, from .env or .env.example like scripts/up.sh) and publishes
# duplicates through RabbitMQ (LAB_AMQP_URL, default
# amqp://guest:guest@127.0.0.1:5672/).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib.sh
. scripts/lib.sh
load_settings
ensure_go
exec go run ./cmd/lab "$@"
