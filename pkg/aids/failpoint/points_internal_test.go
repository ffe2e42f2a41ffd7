package failpoint

import (
	"slices"
	"strings"
	"testing"
)

func TestCorePoints(t *testing.T) {
	required := []string{
		"order.create.after-order-insert",
		"outbox.dispatch.after-claim",
		"outbox.dispatch.after-publish-before-confirm",
		"outbox.dispatch.after-confirm-before-mark",
		"inbox.after-claim",
		"inbox.after-effect-before-commit",
		"inbox.after-commit-before-ack",
		"psp.charge.after-charge-before-response",
	}
	seen := make(map[string]bool)
	for _, p := range Points {
		if !validName.MatchString(p.Name) {
			t.Errorf("point %q: got a bad name, want lower-case words joined by dots", p.Name)
		}
		if seen[p.Name] {
			t.Errorf("point %q: listed twice", p.Name)
		}
		seen[p.Name] = true
		if strings.TrimSpace(p.Description) == "" {
			t.Errorf("point %q: got no description, want one line", p.Name)
		}
	}
	for _, name := range required {
		if !seen[name] {
			t.Errorf("Points: got no %q, want it listed", name)
		}
	}
}

func TestValidName(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"inbox.after-claim", true},
		{"outbox.dispatch.after-confirm-before-mark", true},
		{"psp2.charge.x", true},
		{"single", false},
		{"", false},
		{"Order.create.x", false},
		{"order..x", false},
		{".order.x", false},
		{"order.x.", false},
		{"order.x=error", false},
		{"order/x.y", false},
		{"order.x y", false},
	}
	for _, tt := range tests {
		if got := validName.MatchString(tt.name); got != tt.want {
			t.Errorf("validName(%q): got %v, want %v", tt.name, got, tt.want)
		}
	}
}

// Not parallel: Register changes the process-wide list.
func TestRegister(t *testing.T) {
	saved := slices.Clone(Points)
	t.Cleanup(func() {
		pointsMu.Lock()
		Points = saved
		pointsMu.Unlock()
	})

	const name = "inventory.reserve.after-lock"
	if err := checkKnown(name); err == nil {
		t.Fatalf("checkKnown(%q) before Register: got nil, want an error", name)
	}
	Register(name, "rows locked, reservation not yet written")
	if err := checkKnown(name); err != nil {
		t.Fatalf("checkKnown(%q) after Register: got %v, want nil", name, err)
	}
	r := NewRegistry()
	if err := r.ArmFromSpec(name + "=error*1"); err != nil {
		t.Fatalf("ArmFromSpec of a registered point: got %v, want nil", err)
	}

	for _, bad := range []string{name, "inbox.after-claim", "no-dot", "Bad.Name"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q): got no panic, want one (duplicate or bad name)", bad)
				}
			}()
			Register(bad, "x")
		}()
	}
}
