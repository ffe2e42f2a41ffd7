// Package chaos is the chaos run: a bounded mixed load against a running
// stack while seeded faults hit its processes, its broker and its database;
// then a heal, a wait until the system is at rest, and a consistency report
// (docs/chaos.md).
//
// One file per part:
//
//	plan.go       the seeded plan: every request, the scarce waves, the faults
//	load.go       the load's client: first POSTs on a timetable, retries of unknown answers, cancels, replays
//	faults.go     the fault kinds and their injector; Processes, Broker, Database are what they act on
//	procs.go      process discovery (scripts/up.sh's .run/ pid files) and a supervisor for the test harness
//	broker.go     the stack's own broker node, or the shared one (only the stack's connections; no restart unless allowed)
//	database.go   KILL of a service's sessions, the read lock
//	observe.go    what the run sees, through HTTP only: readiness, stock, orders, metrics
//	gather.go     the snapshot of each order at rest (reservation, payment, PSP books, history, outboxes)
//	leftovers.go  what a service still holds at rest, minus what it held before the run
//	run.go        the run, start to report, and the rest detection
//	snapshot.go   the snapshot: everything the checks read
//	check.go      the checks: a pure function of a snapshot
//	report.go     the figures and the text report
//	selftest.go   a consistent sample snapshot and one planted violation per rule
//
// The run never reads a service's tables: it sees the system as an
// operator does, through the public endpoints, /admin, /metrics and the
// demo endpoints, with the failure lab's client (internal/lab). The
// database's root connection is used only to inject faults.
package chaos
