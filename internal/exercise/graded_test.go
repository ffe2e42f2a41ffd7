package exercise

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Every exercise is graded as scripts/exercise.sh grade grades it, twice:
// with its defect, where each of the tests it names must fail (not be
// skipped: a skip is not a catch), and with the reference fix, the code
// as it is, where each must pass. The defect is applied as a go build
// overlay of the files it changes, so the tree is never touched and the
// packages it does not change come from the build cache the rest of the
// suite filled. The exercises run one after the other; the fixed code is
// graded once for all of them.
//
// A change to the code a defect patches makes git apply refuse it, and
// this test names the exercise: update its defect.patch.
func TestEachDefectIsCaughtAndTheFixPasses(t *testing.T) {
	if testing.Short() {
		t.Skip("grades every exercise with go test against MariaDB and RabbitMQ")
	}
	all, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	for _, e := range all {
		t.Run(e.Name, func(t *testing.T) {
			overlay, err := Overlay(root, e, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			rep, err := Grade(ctx, root, e, GradeOptions{Overlay: overlay})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("with the defect: %s in %s", summary(rep), rep.Elapsed.Round(100*time.Millisecond))
			for _, r := range rep.Results {
				if r.Status != StatusFail {
					t.Errorf("with the defect, %s (%s) %s: want it to fail, it is named as a test that catches the defect%s",
						r.Test, r.Package, r.Status, buildNote(rep))
				}
			}
		})
	}
	t.Logf("defects graded in %s", time.Since(start).Round(100*time.Millisecond))

	// The fix: every exercise's tests, in one go test run.
	fixed := Exercise{Name: "the reference fixes"}
	for _, e := range all {
		fixed.Grade = append(fixed.Grade, e.Grade...)
	}
	rep, err := Grade(ctx, root, fixed, GradeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("without the defects: %s in %s (%s)", summary(rep), rep.Elapsed.Round(100*time.Millisecond), rep.Command)
	for _, r := range rep.Failed() {
		t.Errorf("without the defect, %s (%s) %s, want it to pass%s\n%s", r.Test, r.Package, r.Status, buildNote(rep),
			strings.Join(r.Output, "\n"))
	}
	t.Logf("all exercises graded in %s", time.Since(start).Round(100*time.Millisecond))
}

func summary(rep Report) string {
	n := map[string]int{}
	for _, r := range rep.Results {
		n[r.Status]++
	}
	return fmt.Sprintf("%d tests: %d fail, %d pass, %d skip, %d missing", len(rep.Results),
		n[StatusFail], n[StatusPass], n[StatusSkip], n[StatusMissing])
}

func buildNote(rep Report) string {
	if len(rep.BuildOutput) == 0 {
		return ""
	}
	return "; go said:\n" + strings.Join(rep.BuildOutput, "\n")
}
