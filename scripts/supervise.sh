#!/usr/bin/env bash
# supervise.sh COMMAND...: run a service and start it again whenever it dies
# by itself (a crash failpoint of the failure lab, a panic), like docker
# compose's "restart: unless-stopped". SIGTERM or SIGINT stop the service
# gracefully and end the loop. scripts/up.sh runs each service under it.
set -u
child=0
stopping=false
stop() {
	stopping=true
	if ((child > 0)); then kill -TERM "$child" 2>/dev/null || true; fi
}
trap stop TERM INT
while :; do
	"$@" &
	child=$!
	rc=0
	wait "$child" || rc=$?
	# A trapped signal ends wait early: wait again for the child itself.
	while kill -0 "$child" 2>/dev/null; do
		rc=0
		wait "$child" || rc=$?
	done
	if $stopping; then exit "$rc"; fi
	printf '{"level":"WARN","msg":"supervisor: service exited with status %s; restarting in 1s"}\n' "$rc"
	sleep 1
done
