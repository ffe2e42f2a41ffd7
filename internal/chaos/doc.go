// Package chaos is the chaos run: a bounded mixed load against a running
// stack while seeded faults hit its processes, its broker and its database;
// then a heal, a wait until the system is at rest, and a consistency report
// (docs/chaos.md).
//
// One file per part:
//
//	plan.go        the seeded plan: every request, the scarce waves, the faults
//	load.go        the load's client: first POSTs on a timetable, retries of unknown answers, cancels, replays
//	faults.go      the fault kinds and their injector; Processes, Broker, Database are what they act on
//	procs.go       process discovery (scripts/up.sh's .run/ pid files) and a supervisor for the test harness
//	broker.go      the stack's own broker node, or the shared one (only the stack's connections; no restart unless allowed)
//	database.go    KILL of a service's sessions, the read lock, the account lock, the self-test's wrong row
//	observe.go     what the run sees, through HTTP only: readiness, stock, orders, metrics
//	gather.go      the snapshot of each order at rest (reservation, payment, PSP books, history, outboxes)
//	leftovers.go   what a service still holds at rest, minus what it held before the run
//	run.go         the run, start to report, and the rest detection
//	snapshot.go    the snapshot: everything the checks read
//	check.go       the checks: a pure function of a snapshot
//	report.go      the figures and the text report
//	selftest.go    a consistent sample snapshot and one planted violation per rule
//	live.go        the self-test's live part: a wrong row planted into the stack, read and caught, put back
//	bus.go         the broker over AMQP: the five consumers, queue depths, taking and publishing copies
//	failpoints.go  arming, disarming and reading the stack's failpoints (demo mode)
//	copytake.go    the copy-take fault: a delivery and its copy in one take, at every consumer
//	outage.go      the db-outage fault: a database gone past the retry budget, the give-ups it reached
//	retryflight.go the node kill of a retry tier's leader, with retries waiting there
//	checkfaults.go the faults check: what each fault reached, processes that exited unkilled
//
// The run never reads a service's tables: it sees the system as an
// operator does, through the public endpoints, /admin, /metrics and the
// demo endpoints, with the failure lab's client (internal/lab). The
// database's root connection is used only to inject faults (and by the
// self-test's wrong row, put back before it returns); the broker over AMQP
// only by the faults that publish copies or find a retry tier, and by the
// rest detection, which reads queue depths.
package chaos
