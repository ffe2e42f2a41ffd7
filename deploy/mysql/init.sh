# shellcheck shell=bash
# MySQL first-start provisioning for docker compose: runs the SQL of
# deploy/provision.sh (the schemas and the service users, the same as
# scripts/up.sh creates on a local server), which docker-compose.yml mounts
# at /usr/local/lib/ordersaga/provision.sh.
#
# The mysql image runs every *.sh in /docker-entrypoint-initdb.d once, when
# the data directory is empty, against a temporary server that listens on
# its socket only. It sources a file that is not executable (this one is
# shipped so), which gives it the image's docker_process_sql: the client as
# root on that socket. A failure stops the first start (the entrypoint
# exits): better than a server without the users the services need.
#
# Changed a password in .env later? This does not run again on an existing
# data directory: docker compose down -v, then up (or ALTER USER).
ordersaga_sql=$(bash "${ORDERSAGA_PROVISION:-/usr/local/lib/ordersaga/provision.sh}" mysql) || exit 1
# Through stdin: passwords never appear on a command line.
printf '%s\n' "$ordersaga_sql" | docker_process_sql --database=mysql || exit 1
unset ordersaga_sql
printf 'ordersaga init: schemas order_service, inventory_service, payment_service and their users are ready\n'
