package order

import "testing"

// Every answer payment can give at the order's payment deadline, before
// and after the wait for an unknown outcome is over.
func TestAtPaymentDeadline(t *testing.T) {
	t.Parallel()
	tests := []struct {
		outcome     string
		before, end DeadlineAction // while waiting; once the wait is over
	}{
		{OutcomeSucceeded, DeadlineWait, DeadlineWait}, // a paid order is never cancelled by its deadline
		{OutcomeDeclined, DeadlineCancel, DeadlineCancel},
		{OutcomeRefunded, DeadlineCancel, DeadlineCancel},
		{OutcomeNotCharged, DeadlineCancel, DeadlineCancel},
		{OutcomeNoPayment, DeadlineCancel, DeadlineCancel},
		{OutcomeUnknown, DeadlineWait, DeadlineCancel},
		{OutcomeNotAsked, DeadlineWait, DeadlineCancel},
		{"an answer from a newer payment service", DeadlineWait, DeadlineCancel},
	}
	for _, tt := range tests {
		for _, giveUp := range []bool{false, true} {
			want := tt.before
			if giveUp {
				want = tt.end
			}
			got := AtPaymentDeadline(tt.outcome, giveUp)
			if got.Action != want || got.Why == "" {
				t.Errorf("AtPaymentDeadline(%q, give up %v) = %+v, want %s with a why", tt.outcome, giveUp, got, want)
			}
			if (got.Action == DeadlineCancel) != (got.Reason != "") {
				t.Errorf("AtPaymentDeadline(%q, %v): a cancel needs a reason, and only a cancel: %+v", tt.outcome, giveUp, got)
			}
		}
	}
}
