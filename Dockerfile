# syntax=docker/dockerfile:1
#
# One image recipe for the three services and the saga viewer. The build
# argument PACKAGE names the Go package to build (./services/order,
# ./services/inventory, ./services/payment-fake, ./services/payment-fake/cmd/psp
# or ./cmd/viewer);
# docker-compose.yml builds it once for each:
#
#   docker build --build-arg PACKAGE=./services/order -t ordersaga-order .
#
# Stage 1 compiles a static binary (CGO_ENABLED=0: the MySQL driver and
# amqp091-go are pure Go, the goose migrations are embedded). Stage 2 is a
# small Alpine image: busybox wget for the compose healthcheck (GET /readyz),
# tini as PID 1 and a non-root user.

FROM golang:1.26 AS build
# The image pins GOTOOLCHAIN=local; go.mod asks for a patch release
# (go 1.26.x) that an older cached golang:1.26 may predate: let the go
# command fetch that toolchain instead of failing.
ENV GOTOOLCHAIN=auto
WORKDIR /src

# Dependencies first: this layer is reused until go.mod or go.sum changes.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download

COPY . .
ARG PACKAGE
RUN case "${PACKAGE}" in ./services/*|./cmd/*) ;; *) false ;; esac && [ -f "${PACKAGE}/main.go" ] || { \
		echo "build argument PACKAGE=${PACKAGE:-<unset>}: want ./services/order, ./services/inventory, ./services/payment-fake, ./services/payment-fake/cmd/psp or ./cmd/viewer" >&2; \
		exit 1; \
	}
RUN --mount=type=cache,target=/go/pkg/mod \
	--mount=type=cache,target=/root/.cache/go-build \
	CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags='-s -w' \
		-o /out/service "${PACKAGE}"

FROM alpine:3.22
# tini is PID 1 and the service its child. The failure lab's "crash"
# failpoint kills the process with SIGKILL from inside: the kernel drops
# that signal when the sender is the PID 1 of its own namespace, so a
# service running as PID 1 could not crash on purpose. tini also forwards
# SIGTERM (docker stop) so shutdown stays graceful.
RUN apk add --no-cache tini \
	&& addgroup -S -g 10001 app \
	&& adduser -S -D -H -u 10001 -G app -s /sbin/nologin app
ARG PACKAGE
LABEL org.opencontainers.image.title="ordersaga" org.opencontainers.image.description="ordersaga ${PACKAGE}"
COPY --from=build /out/service /usr/local/bin/service
USER 10001:10001
ENTRYPOINT ["/sbin/tini", "--", "/usr/local/bin/service"]
