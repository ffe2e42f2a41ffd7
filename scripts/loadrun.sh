#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# One measured load run of the whole saga, the unit of the A/B comparisons in
# docs/performance.md: a clean start, cmd/loadgen at a fixed rate, and what
# the database did per order. Builds are compared by running this script
# against two trees, alternated run by run.
#
# Usage:
#   scripts/loadrun.sh [-shapes] TREE LABEL RATE DURATION [KEY=VALUE...]
#
#   TREE      a checkout whose scripts/up.sh starts the build under test
#             (this tree, or `git worktree add --detach /tmp/ab-old <commit>`)
#   LABEL     a name for the run, copied into the result
#   RATE      orders per second offered (cmd/loadgen -rate)
#   DURATION  how long to send (cmd/loadgen -duration); the drain is 60 s
#   KEY=VALUE settings for the services (CONSUMER_BATCH=1, ...)
#   -shapes   also log every statement (general_log) and count the
#             services' statements per order by verb and table
#
# Every run, so that runs compare: stops what scripts/up.sh started (in this
# tree, in TREE and in the tree of the previous run), deletes
# the broker's queues (a queue outlives its consumers and would hand the next
# run the last one's leftovers) except the tests' t-*, drops the three
# schemas, starts TREE's stack, then sends. The load generator is built from
# this tree, so both builds meet the same one.
#
# Prints one JSON object on stdout: cmd/loadgen's summary with a "db" member
# (statements and explicit COMMITs per completed order for the three service
# users, from USER_STATISTICS and Com_commit) and "label"/"tree"/"settings".
# Progress goes to stderr. Needs root on the local MariaDB (userstat,
# general_log) and rabbitmqctl: it is a development tool, not for a shared
# server.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib.sh
. scripts/lib.sh

shapes=false
if [[ ${1:-} == -shapes ]]; then
	shapes=true
	shift
fi
[[ $# -ge 4 ]] || die "usage: scripts/loadrun.sh [-shapes] TREE LABEL RATE DURATION [KEY=VALUE...]"
tree=$(cd "$1" && pwd) label=$2 rate=$3 duration=$4
shift 4
settings=("$@")
here=$PWD
out=${TMPDIR:-/tmp}/loadrun-$$
mkdir -p "$out"
chmod 777 "$out" # the general log is written by the database server's user

ensure_go
log "building the load generator from $here"
go build -o "$out/loadgen" ./cmd/loadgen

log "resetting: stacks down, queues deleted, schemas dropped"
# The previous run may have started the other build: stop that one too.
last=${TMPDIR:-/tmp}/loadrun.last-tree
for t in "$here" "$(cat "$last" 2>/dev/null || true)" "$tree"; do
	[[ -n $t && -d $t ]] || continue
	(cd "$t" && scripts/up.sh down >/dev/null 2>&1) || true
done
echo "$tree" >"$last"
rabbitmqctl list_queues name -q 2>/dev/null | grep -v -e '^name$' -e '^t-' |
	xargs -r -n1 rabbitmqctl delete_queue -q >/dev/null 2>&1 || true
mysql_root -e 'DROP DATABASE IF EXISTS order_service; DROP DATABASE IF EXISTS inventory_service; DROP DATABASE IF EXISTS payment_service'

log "starting $tree ${settings[*]}"
(cd "$tree" && env "${settings[@]}" scripts/up.sh -d -q >"$out/up.log" 2>&1) || {
	tail -20 "$out/up.log" >&2
	die "scripts/up.sh failed in $tree"
}

status() { mysql_root -N -e "SHOW GLOBAL STATUS WHERE Variable_name = '$1'" | awk '{print $2}'; }
mysql_root -e 'SET GLOBAL userstat = 1; FLUSH USER_STATISTICS'
if [[ $shapes == true ]]; then
	mysql_root -e "SET GLOBAL general_log_file = '$out/general.log'; SET GLOBAL log_output = 'FILE'; SET GLOBAL general_log = 1"
fi
commits0=$(status Com_commit)

log "load: $rate/s for $duration"
"$out/loadgen" -rate "$rate" -duration "$duration" -drain 60s -run-dir "$tree/.run" -json >"$out/summary.json"

commits1=$(status Com_commit)
[[ $shapes == true ]] && mysql_root -e 'SET GLOBAL general_log = 0'
stmts=$(mysql_root -N -e "SELECT COALESCE(SUM(SELECT_COMMANDS + UPDATE_COMMANDS + OTHER_COMMANDS), 0)
	FROM information_schema.USER_STATISTICS WHERE USER LIKE '%svc'")
db_cpu=$(mysql_root -N -e "SELECT COALESCE(SUM(CPU_TIME), 0) FROM information_schema.USER_STATISTICS WHERE USER LIKE '%svc'")
mysql_root -e 'SET GLOBAL userstat = 0'

shapes_json='null'
if [[ $shapes == true ]]; then
	# The statements of every connection but the admin's (this script's
	# own mysql client), grouped by their first verb and the first table
	# they name; a pooled connection opened before the log started has no
	# "Connect" line and counts as a service's.
	shapes_json=$(awk '
		function count() { if (verb != "") n[verb " " table]++; verb = "" }
		function scan(from, w) {
			for (j = from; j <= NF; j++) {
				w = $j; gsub(/[`(,;]/, "", w)
				if (toupper(prev) ~ /^(FROM|INTO|UPDATE)$/) { table = w; return 1 }
				prev = w
			}
			return 0
		}
		# An entry starts with an optional timestamp, tabs, the connection
		# id and a command; other lines continue a multi-line statement.
		/^[0-9: ]*\t+ *[0-9]+ [A-Z][a-z]+( [A-Z][a-z]+)?\t/ {
			count()
			for (i = 1; i <= NF; i++) if ($i ~ /^(Connect|Query)$/) break
			if ($i == "Connect") { admin[$(i - 1)] = ($(i + 1) ~ /^root@/); next }
			if (i > NF || admin[$(i - 1)]) next
			verb = toupper($(i + 1)); table = ""; prev = ""
			if (verb == "UPDATE") { table = $(i + 2); gsub(/[`(,;]/, "", table) } else if (scan(i + 2)) prev = ""
			found = (table != "")
			next
		}
		verb != "" && !found { if (scan(1)) found = 1 }
		END {
			count(); sep = ""; printf "{"
			for (k in n) { printf "%s\"%s\":%d", sep, k, n[k]; sep = "," }
			printf "}"
		}' "$out/general.log")
fi

terminal=$(grep -o '"terminal": *[0-9]*' "$out/summary.json" | head -1 | grep -o '[0-9]*$')
[[ ${terminal:-0} -gt 0 ]] || terminal=1
settings_json=$(printf '"%s",' "${settings[@]}")
settings_json="[${settings_json%,}]"
[[ ${#settings[@]} -eq 0 ]] && settings_json='[]'
db=$(printf '{"statements": %s, "statements_per_order": %s, "commits_per_order": %s, "db_cpu_ms_per_order": %s, "shapes": %s}' \
	"$stmts" "$(awk -v s="$stmts" -v n="$terminal" 'BEGIN{printf "%.1f", s / n}')" \
	"$(awk -v a="$commits0" -v b="$commits1" -v n="$terminal" 'BEGIN{printf "%.2f", (b - a) / n}')" \
	"$(awk -v c="$db_cpu" -v n="$terminal" 'BEGIN{printf "%.2f", c * 1000 / n}')" "$shapes_json")
# Splice the extra members in front of the summary's closing brace.
sed '$d' "$out/summary.json" | sed '$s/$/,/'
printf '  "label": "%s", "tree": "%s", "settings": %s,\n  "db": %s\n}\n' "$label" "$tree" "$settings_json" "$db"
rm -rf "$out"
