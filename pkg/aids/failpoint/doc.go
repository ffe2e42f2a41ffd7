// Package failpoint puts named fault-injection points at the dangerous
// moments of the system, so a test or a demo can stop, fail or kill a process
// exactly there.
//
// # Why named points, not sleeps
//
// The failure windows of an outbox, an inbox or a saga step are a few
// microseconds wide: between the broker's confirm and the UPDATE that marks the
// row sent, between the inbox commit and the ack. A sleep edited into the code
// only makes such a window likely to be hit, and only on the machine it was
// tuned on. A named point makes it certain: the test arms
// "outbox.dispatch.after-confirm-before-mark", the code reaches it, and the
// fault happens there and nowhere else, every run. Hits tells the test the
// window really was reached, so a test cannot pass by missing it.
//
// Names read <service-or-pkg>.<operation>.<moment>; the known ones are listed
// in points.go (and in docs/operations.md).
//
// # Three actions
//
//   - error: Inject returns an error wrapping ErrInjected, for the next N hits
//     or every hit. The caller handles it like any other error: its transaction
//     rolls back, its message is redelivered.
//   - pause: Inject blocks until the Gate is released (or its context ends).
//     Tests use it to hold one goroutine inside a window while another acts, or
//     to release N goroutines together.
//   - crash: the process kills itself with SIGKILL at the next hit. No deferred
//     function runs, no buffer is flushed, no shutdown happens: what a power
//     cut or the OOM killer would do, and what recovery must survive.
//
// # Three ways to arm
//
//   - Tests build their own Registry, arm it and carry it in the context with
//     WithRegistry, so parallel tests never see each other's faults.
//   - The FAILPOINTS environment variable, parsed by Default.ArmFromSpec at
//     start: FAILPOINTS='outbox.dispatch.after-confirm-before-mark=crash;inbox.after-effect-before-commit=error*1'.
//   - In demo mode only, the JSON admin API from Registry.Handler, to arm,
//     list, release and disarm points while the system runs.
//
// Everything is off by default. Inject with nothing armed costs one context
// lookup and one atomic load, with no lock and no allocation, so the points
// stay in production code.
package failpoint
