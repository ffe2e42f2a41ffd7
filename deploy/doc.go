// Package deploy holds what runs the system besides the Go code: the
// provisioning of the schemas and users (provision.sh: one schema and one
// MySQL user per service, ALL PRIVILEGES on its own schema only, one
// RabbitMQ user per service), used by scripts/up.sh on a local server and by
// docker compose through mysql/init.sh (the MySQL first start) and
// rabbitmq/entrypoint.sh (definitions imported at boot); and Prometheus and
// Grafana for compose's observability profile.
//
// It has no Go code to run. Its tests check the compose stack without a
// Docker engine: they load docker-compose.yml with compose-go, parse the
// Dockerfile and .dockerignore, run the scripts with stand-ins for the
// images' tools, and hold the result against .env.example, the local stack
// (internal/stack) and the services' configuration loader, so that `docker
// compose up` and `scripts/up.sh` build the same system. They also check
// the least privilege of the service users on the real server, the .env
// format that bash and docker compose both read, and what scripts/lib.sh
// installs on which system.
package deploy
