// Package deploy holds what docker compose needs besides the Dockerfile and
// docker-compose.yml at the root of the repository: the MySQL first-start
// script (mysql/init.sh: one schema and one user per service, ALL
// PRIVILEGES on its own schema only) and the RabbitMQ entrypoint
// (rabbitmq/entrypoint.sh: one user per service on vhost "/", imported as
// definitions at boot).
//
// It has no Go code to run. Its tests check the compose stack without a
// Docker engine: they parse docker-compose.yml, the Dockerfile and
// .dockerignore, run the two scripts in their print modes, and hold the
// result against .env.example, scripts/up.sh and the services'
// configuration loader, so that `docker compose up` and `scripts/up.sh`
// build the same system.
package deploy
