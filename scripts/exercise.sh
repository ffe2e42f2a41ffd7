#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# exercise.sh: the graded exercises (docs/exercises.md, docs/zh/exercises.md).
#
#   scripts/exercise.sh list          the exercises
#   scripts/exercise.sh start 3       plant exercise 3's defect in the code, committed on a
#                                     new branch exercise-3 (from a clean tree only)
#   scripts/exercise.sh hint 3        its hint
#   scripts/exercise.sh grade 3       run the tests that catch the defect: PASS or FAIL
#                                     (exit 1), with the chapter section to read again
#   scripts/exercise.sh reset 3       back to the branch you started from; exercise-3 is
#                                     deleted, your uncommitted changes saved in the stash
#
# -zh answers in Chinese (so does a LANG, LC_ALL or LC_MESSAGES starting
# with zh), -en in English.
#
# grade runs go test against MariaDB and RabbitMQ, as scripts/test.sh does:
# started here when installed and stopped, installed when missing (see
# scripts/lib.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib.sh
. scripts/lib.sh
ensure_go
for arg in "$@"; do
	if [[ $arg == grade ]]; then
		# go test -race needs cgo, and cgo a C compiler.
		if ! have "$(go env CC)"; then
			install_packages "go test -race needs cgo, which needs a C compiler" gcc libc6-dev || die "no C compiler for -race"
		fi
		ensure_mariadb
		ensure_rabbitmq
	fi
done
# Built, then run, so that its exit status is its own (go run adds a line).
mkdir -p .run
go build -o .run/exercise ./cmd/exercise
exec .run/exercise "$@"
