package failpoint_test

import (
	"strings"
	"testing"

	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
)

func TestArmFromSpec(t *testing.T) {
	tests := []struct {
		name string
		spec string
		want []failpoint.Status
	}{
		{"empty", "", nil},
		{"only separators", " ; ;", nil},
		{"one crash", mark + "=crash", []failpoint.Status{
			{Name: mark, Action: failpoint.ActionCrash, Remaining: 1},
		}},
		{"crash*1", mark + "=crash*1", []failpoint.Status{
			{Name: mark, Action: failpoint.ActionCrash, Remaining: 1},
		}},
		{"the documented example", mark + "=crash;" + effect + "=error*1", []failpoint.Status{
			{Name: effect, Action: failpoint.ActionError, Remaining: 1},
			{Name: mark, Action: failpoint.ActionCrash, Remaining: 1},
		}},
		{"spaces and trailing separator", " " + claim + " = pause * 2 ; " + effect + "=error ;", []failpoint.Status{
			{Name: effect, Action: failpoint.ActionError, Remaining: -1},
			{Name: claim, Action: failpoint.ActionPause, Remaining: 2},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := failpoint.NewRegistry()
			t.Cleanup(r.DisableAll)
			if err := r.ArmFromSpec(tt.spec); err != nil {
				t.Fatalf("ArmFromSpec(%q): got %v, want nil", tt.spec, err)
			}
			wantArmed(t, r, tt.want)
		})
	}
}

func TestArmFromSpecRejects(t *testing.T) {
	tests := []struct {
		name string
		spec string
		want []string // each must appear in the error
	}{
		{"unknown name lists known ones", "outbox.dispatch.after-clam=error", []string{`"outbox.dispatch.after-clam=error"`, "unknown failpoint", claim}},
		{"no action", claim, []string{"want name=action[*count]"}},
		{"empty action", claim + "=", []string{"want name=action[*count]"}},
		{"empty name", "=error", []string{"want name=action[*count]"}},
		{"unknown action", claim + "=explode", []string{`unknown action "explode"`}},
		{"zero count", claim + "=error*0", []string{`count "0" must be a positive integer`}},
		{"negative count", claim + "=error*-1", []string{`count "-1"`}},
		{"count not a number", claim + "=pause*x", []string{`count "x"`}},
		{"crash twice", mark + "=crash*2", []string{"crash fires once"}},
		{"named twice", claim + "=error;" + claim + "=pause", []string{"named twice"}},
		{"every bad entry at once", "nope.x=error;" + claim + "=boom;" + effect + "=error*1;" + mark + "=crash*3",
			[]string{`"nope.x=error"`, `"` + claim + `=boom"`, `"` + mark + `=crash*3"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := failpoint.NewRegistry()
			t.Cleanup(r.DisableAll)
			err := r.ArmFromSpec(tt.spec)
			if err == nil {
				t.Fatalf("ArmFromSpec(%q): got nil, want an error", tt.spec)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error: got %q, want it to contain %q", err, w)
				}
			}
			if got := r.Armed(); len(got) != 0 {
				t.Errorf("armed after a bad spec: got %+v, want none (all or nothing)", got)
			}
		})
	}
}
