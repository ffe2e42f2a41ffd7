package program

import (
	"errors"
	"fmt"
	"testing"
)

// A failed run exits 1 and prints its error; an Exit chooses the code and
// prints its Err, nothing when the program has told its outcome already.
func TestExitOf(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for _, c := range []struct {
		err    error
		code   int
		report error
	}{
		{boom, 1, boom},
		{Exit{Code: 2, Err: boom}, 2, boom},
		{Exit{Code: 1}, 1, nil},
		{fmt.Errorf("grade: %w", Exit{Code: 3}), 3, nil},
	} {
		code, report := exitOf(c.err)
		if code != c.code || report != c.report {
			t.Errorf("exitOf(%v) = %d, %v; want %d, %v", c.err, code, report, c.code, c.report)
		}
	}
}
