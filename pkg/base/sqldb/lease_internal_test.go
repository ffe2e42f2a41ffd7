package sqldb

import (
	"database/sql"
	"errors"
	"testing"
)

// GET_LOCK answers 1 (taken), 0 (held elsewhere after the wait) or NULL
// (an error on the server: a session killed while it waited, no lock
// name). Only 0 means another holder; NULL is an error of its own.
func TestLockAnswer(t *testing.T) {
	tests := []struct {
		name     string
		got      sql.NullInt64
		wantErr  bool
		wantHeld bool
	}{
		{"taken", sql.NullInt64{Int64: 1, Valid: true}, false, false},
		{"held by another session", sql.NullInt64{Int64: 0, Valid: true}, true, true},
		{"NULL", sql.NullInt64{}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := lockAnswer("reconciler", "s.reconciler", tt.got)
			if (err != nil) != tt.wantErr || errors.Is(err, ErrLeaseHeld) != tt.wantHeld {
				t.Fatalf("lockAnswer(%v) = %v; want error %v, ErrLeaseHeld %v", tt.got, err, tt.wantErr, tt.wantHeld)
			}
		})
	}
}
