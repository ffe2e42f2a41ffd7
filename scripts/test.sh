#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Run the whole test suite the way CI does: shellcheck on every shell script,
# go vet, then every test with the race detector against the real
# MariaDB/MySQL and RabbitMQ (started here when they are installed locally
# and stopped; installed first when missing, see scripts/lib.sh). shellcheck,
# the C compiler that -race needs and the Chromium the viewer's browser tests
# drive are installed the same way.
#
# Usage: scripts/test.sh [go test flags] [packages]
#
#   scripts/test.sh                                  go vet -race ./... && go test -race -count=1 -p 4 -parallel 4 -timeout 20m -vet=off ./...
#                                                    (with GOFLAGS=-trimpath -ldflags=-w and -o TEST_BIN_DIR/,
#                                                    see below)
#   scripts/test.sh -run TestWithTx ./pkg/base/sqldb/  one test in one package
#   scripts/test.sh -v -short                        unit tests only (no servers needed)
#
# Argument rule: a flag takes its value as -flag=value or as the next argument
# (-run TestX); the boolean flags below (-v, -short, -race, ...) take none.
# Every other argument is a package pattern ("pkg/outbox" is read as
# "./pkg/outbox"); when there is none, the packages are ./... . `go vet` runs
# on the same packages. Everything from -args on goes to the test binaries.
# Our defaults come first, so `-timeout 40m` or `-count=3` override them.
#
# Environment:
#   TEST_MYSQL_DSN          server the tests use (default root@tcp(127.0.0.1:3306)/)
#   TEST_AMQP_URL           broker the tests use (default amqp://guest:guest@127.0.0.1:5672/)
#   TEST_DB_STALE_MINUTES   leftover test databases older than this are dropped (30)
#   TEST_BIN_DIR            where the test binaries are kept between runs
#                           (${TMPDIR:-/tmp}/ordersaga-testbin-<uid>, one per package;
#                           safe to delete: the next run links them again)
#
# Before the tests, databases left behind by killed runs are dropped: only
# names matching ^t_(order|inventory|payment)_[0-9a-f]{12}$ whose newest table
# is older than TEST_DB_STALE_MINUTES (longer than the 20 min test timeout, so
# a run going on in another terminal keeps its databases). Such databases that
# have no table at all (age unknown) are dropped at the end of this run if they
# are still empty then.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=lib.sh
. scripts/lib.sh

MODULE=github.com/relmsg/ordersaga
STALE_MINUTES=${TEST_DB_STALE_MINUTES:-30}
TEST_NAME_RE='^t_(order|inventory|payment)_[0-9a-f]{12}$'

# go test and build flags that take no value.
is_bool_flag() {
	local f=${1#-}
	case -${f#-} in
	-v | -short | -race | -failfast | -json | -cover | -benchmem | -a | -n | -x | -work | \
		-trimpath | -msan | -asan | -fullpath | -modcacherw | -buildvcs | -linkshared) return 0 ;;
	*) return 1 ;;
	esac
}

flags=() pkgs=() binargs=()
while (($#)); do
	a=$1
	shift
	case $a in
	-args | --args)
		binargs=("$a" "$@")
		break
		;;
	-*=*) flags+=("$a") ;;
	-*)
		flags+=("$a")
		if ! is_bool_flag "$a" && (($#)); then
			flags+=("$1")
			shift
		fi
		;;
	./* | ../* | . | .. | /* | "$MODULE" | "$MODULE"/*) pkgs+=("$a") ;;
	*)
		if [[ -d ${a%/...} ]]; then pkgs+=("./$a"); else pkgs+=("$a"); fi
		;;
	esac
done
# The whole suite (no package named) also runs the comparison peer's tests,
# a module of its own under bench/peers/ (./... does not enter it).
peers=()
((${#pkgs[@]})) || {
	pkgs=(./...)
	peers=(bench/peers/watermill)
}

short=false
for f in "${flags[@]+"${flags[@]}"}"; do
	[[ $f == -short || $f == --short || $f == -short=true ]] && short=true
done

# Point the helpers at the test servers when TEST_MYSQL_DSN or TEST_AMQP_URL
# name other ones: user[:password]@tcp(host[:port])/..., amqp://...@host[:port]/
if [[ -n ${TEST_MYSQL_DSN:-} ]]; then
	if [[ $TEST_MYSQL_DSN =~ ^([^:@]*)(:(.*))?@tcp\(([^\)]*)\)/ ]]; then
		MYSQL_ROOT_USER=${BASH_REMATCH[1]}
		MYSQL_ROOT_PASSWORD=${BASH_REMATCH[3]}
		addr=${BASH_REMATCH[4]}
		MYSQL_HOST=${addr%:*}
		[[ $addr == *:* ]] && MYSQL_PORT=${addr##*:}
	else
		log "warning: TEST_MYSQL_DSN is not user:pw@tcp(host:port)/...; the checks below use $MYSQL_HOST:$MYSQL_PORT"
	fi
fi
if [[ ${TEST_AMQP_URL:-} =~ ^amqps?://([^@/]*@)?([^:/]+)(:([0-9]+))? ]]; then
	RABBITMQ_HOST=${BASH_REMATCH[2]}
	RABBITMQ_PORT=${BASH_REMATCH[4]:-5672}
fi

t0=$SECONDS
shellcheck_s=- vet_s=- test_s=- result=FAIL
empty_dbs=()

# test_databases prints "name state" for each test database: state is empty
# (no table), stale (newest table older than STALE_MINUTES) or live.
test_databases() {
	mysql_root -N -B -e "
SELECT s.SCHEMA_NAME,
       CASE WHEN COUNT(t.TABLE_NAME) = 0 THEN 'empty'
            WHEN MAX(t.CREATE_TIME) < NOW() - INTERVAL $STALE_MINUTES MINUTE THEN 'stale'
            ELSE 'live' END
  FROM information_schema.SCHEMATA s
  LEFT JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = s.SCHEMA_NAME
 WHERE s.SCHEMA_NAME LIKE 't\\_%'
 GROUP BY s.SCHEMA_NAME"
}

drop_databases() {
	local name
	for name in "$@"; do
		[[ $name =~ $TEST_NAME_RE ]] || continue # never anything else
		mysql_root -e "DROP DATABASE IF EXISTS \`$name\`" || log "warning: could not drop $name"
	done
}

# drop_stale_databases drops stale test databases now and remembers empty ones.
drop_stale_databases() {
	local rows name state stale=()
	rows=$(test_databases) || {
		log "warning: could not list leftover test databases"
		return 0
	}
	while read -r name state; do
		[[ -n $name && $name =~ $TEST_NAME_RE ]] || continue
		case $state in
		stale) stale+=("$name") ;;
		empty) empty_dbs+=("$name") ;;
		esac
	done <<<"$rows"
	if ((${#stale[@]})); then
		log "dropping ${#stale[@]} leftover test database(s) older than ${STALE_MINUTES}m: ${stale[*]}"
		drop_databases "${stale[@]}"
	fi
}

# drop_still_empty drops the databases that were empty at the start and still
# are: a live test migrates its database within a second of creating it.
# shellcheck disable=SC2317 # only called from the EXIT trap
drop_still_empty() {
	((${#empty_dbs[@]})) || return 0
	local rows name state drop=() e
	rows=$(test_databases) || return 0
	while read -r name state; do
		[[ $state == empty ]] || continue
		for e in "${empty_dbs[@]}"; do
			[[ $e == "$name" ]] && drop+=("$name")
		done
	done <<<"$rows"
	if ((${#drop[@]})); then
		log "dropping ${#drop[@]} empty leftover test database(s): ${drop[*]}"
		drop_databases "${drop[@]}"
	fi
}

# shellcheck disable=SC2317 # only called from the EXIT trap
fmt_dur() {
	local s=$1
	if [[ $s == - ]]; then echo -; elif ((s >= 60)); then echo "$((s / 60))m$((s % 60))s"; else echo "${s}s"; fi
}

# shellcheck disable=SC2317 # only called from the EXIT trap
finish() {
	local rc=$?
	if [[ $short == false ]]; then drop_still_empty || true; fi
	((rc == 0)) && result=PASS
	log "$result: shellcheck $(fmt_dur "$shellcheck_s"), go vet $(fmt_dur "$vet_s"), go test $(fmt_dur "$test_s"), total wall time $(fmt_dur $((SECONDS - t0)))"
	exit "$rc"
}
trap finish EXIT

# check_scripts: shellcheck on every shell script of the repository; a
# missing shellcheck is a failure.
check_scripts() {
	if ! have shellcheck; then
		install_packages "scripts/test.sh checks every shell script with shellcheck" shellcheck ||
			die "shellcheck is missing"
	fi
	local scripts
	mapfile -t scripts < <(find scripts deploy -name '*.sh' | sort; echo .ci/run)
	log "shellcheck ${scripts[*]}"
	shellcheck -x "${scripts[@]}"
}

ensure_go
# go test -race needs cgo, and cgo a C compiler.
if ! have "$(go env CC)"; then
	install_packages "go test -race needs cgo, which needs a C compiler" gcc libc6-dev || die "no C compiler for -race"
fi
t=$SECONDS
check_scripts
shellcheck_s=$((SECONDS - t))
if [[ $short == true ]]; then
	log "-short: integration tests are skipped, not checking MariaDB/RabbitMQ"
else
	ensure_mariadb
	ensure_rabbitmq
	mariadb_root_ok
	# The viewer's tests drive a real browser (internal/viewer).
	if ! have chromium && ! have chromium-browser && [[ -z ${VIEWER_CHROME:-} ]]; then
		install_packages "the saga viewer's tests drive a real headless Chromium" chromium ||
			die "chromium is missing"
	fi
	# The suite runs several three-service stacks at once, each with its own
	# databases and pools; the server's default of 151 connections is too
	# few next to a running scripts/up.sh stack.
	mysql_root -N -e 'SET GLOBAL max_connections = GREATEST(@@global.max_connections, 1000)' ||
		log "warning: could not raise max_connections; parallel tests may hit 'Too many connections'"
	drop_stale_databases
fi

# Build flags for vet, the tests, the service binaries the tests build and
# the exercise grader's own go test (through GOFLAGS, which they inherit);
# a flag the caller's GOFLAGS already sets is left as the caller set it.
#
# -trimpath: no checkout path in what is compiled, so a fresh clone of code
# this machine has built before (CI's clean checkout, a reader's second
# clone) takes the compiled packages from the build cache instead of
# compiling all of them again (docs/operations.md, "Tests"). Stack traces
# and race reports name files by import path (github.com/relmsg/ordersaga/
# pkg/outbox/dispatcher.go:123), not by absolute path.
#
# -ldflags=-w: no DWARF in the test binaries. Linking the suite's sixty
# race-built test binaries is most of its build time when the packages are
# cached; without DWARF it is a tenth less. Stack traces and race reports
# still name file and line (they read the binary's own line tables, not
# DWARF); a debugger wants scripts/test.sh -ldflags= ... or plain go test.
if [[ " ${GOFLAGS:-} " != *" -trimpath"* ]]; then
	export GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath"
fi
if [[ " ${GOFLAGS:-} " != *" -ldflags"* ]]; then
	export GOFLAGS="${GOFLAGS:+$GOFLAGS }-ldflags=-w"
fi

# go vet with -race: vet compiles the packages it reads, and with the
# tests' flags those are the very compilations go test then takes from the
# cache, not a second, uninstrumented set.
log "GOFLAGS=$GOFLAGS go vet -race ${pkgs[*]}"
t=$SECONDS rc=0
go vet -race "${pkgs[@]}" || rc=$?
vet_s=$((SECONDS - t))
((rc == 0)) || exit "$rc"

# Four packages and four tests of a package at once, not go test's default
# of one per core: the integration tests mostly wait (for a broker node to
# boot, a lease to expire, a service to restart), and on two cores the
# default left the machine half idle (docs/operations.md, "Tests").
#
# -vet=off: go test would vet every package again with a subset of the
# analyzers the go vet above ran on the same packages (and their tests);
# on a fresh clone that is about 10 s of CPU for nothing new.
# (GOFLAGS: see go vet above.)
cmd=(go test -race -count=1 -p 4 -parallel 4 -timeout 20m -vet=off "${flags[@]+"${flags[@]}"}")

# The test binaries are kept between runs, in one folder per user of the
# machine (TEST_BIN_DIR), and go test -o DIR/ links again only those whose
# code changed: relinking every race-built test binary was most of the
# build of a run whose packages were cached, and with -trimpath a fresh
# clone's binaries are those of any other clone of the same code. go test
# -o writes one binary per last element of the import path, so packages
# that share it (cmd/chaos and internal/chaos) run in turns, each turn in
# a folder of its own. Packages without test files are not listed (go vet
# above has compiled them). Not with -c or -o of the caller's own, and not
# while another run holds the folder: its go test could replace a binary
# between this one's check and its start.
bin_dir=${TEST_BIN_DIR:-${TMPDIR:-/tmp}/ordersaga-testbin-$(id -u)}
turns=()
mkdir -p "$bin_dir"
exec {bin_lock}>"$bin_dir/.lock"
if ! flock -n "$bin_lock"; then
	log "another run uses $bin_dir: this one links its test binaries afresh"
elif [[ " ${flags[*]+"${flags[*]}"} " != *" -c "* && " ${flags[*]+"${flags[*]}"} " != *" -o"* ]] &&
	listed=$(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' "${pkgs[@]}") &&
	[[ -n $listed ]]; then
	declare -A turn_of=()
	while read -r p; do
		[[ -n $p ]] || continue
		k=${turn_of[${p##*/}]:-0}
		turn_of[${p##*/}]=$((k + 1))
		turns[k]="${turns[k]:-} $p"
	done <<<"$listed"
fi

t=$SECONDS rc=0
if ((${#turns[@]})); then
	for k in "${!turns[@]}"; do
		read -r -a these <<<"${turns[k]}"
		run=("${cmd[@]}" -o "$bin_dir/$k/" "${these[@]}" "${binargs[@]+"${binargs[@]}"}")
		if ((k == 0)); then
			log "GOFLAGS=$GOFLAGS ${cmd[*]} -o $bin_dir/$k/ ${pkgs[*]} (of them with tests: ${#these[@]})"
		else
			log "GOFLAGS=$GOFLAGS ${run[*]}"
		fi
		# The lock stays with this shell: a process a test leaves behind
		# must not hold it.
		"${run[@]}" {bin_lock}>&- || rc=$?
	done
else
	run=("${cmd[@]}" "${pkgs[@]}" "${binargs[@]+"${binargs[@]}"}")
	log "GOFLAGS=$GOFLAGS ${run[*]}"
	"${run[@]}" {bin_lock}>&- || rc=$?
fi
for peer in "${peers[@]+"${peers[@]}"}"; do
	log "go -C $peer vet ./... && go -C $peer test -race -count=1 ./..."
	go -C "$peer" vet ./... || rc=1
	go -C "$peer" test -race -count=1 -timeout 10m "${flags[@]+"${flags[@]}"}" ./... || rc=1
done
test_s=$((SECONDS - t))
exit "$rc"
