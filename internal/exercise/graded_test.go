package exercise

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Every exercise is graded as scripts/exercise.sh grade grades it, with
// its defect, where each of the tests it names must fail (not be skipped:
// a skip is not a catch). The reference fix is the code as it is, where
// each must pass: the suite runs every one of them there. The defect is
// applied as a go build overlay of the files it changes, so the tree is
// never touched and the packages it does not change come from the build
// cache the rest of the suite filled. The exercises run one after the
// other.
//
// A change to the code a defect patches makes git apply refuse it, and
// this test names the exercise: update its defect.patch.
func TestEachDefectIsCaught(t *testing.T) {
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
	// Without the defects, the named tests pass: that is the suite itself,
	// which runs every one of them on the reference code (running them a
	// second time here cost the suite half a minute). What the grader makes
	// of a pass is TestGraderReadsEveryOutcome.
	t.Logf("defects graded in %s", time.Since(start).Round(100*time.Millisecond))
}

// The grader reads go test -json: a named test that passed, failed or was
// skipped is reported so (a subtest's verdict is not its test's), one that
// never ran is missing, and a package's own output is kept only when it
// fails outside the named tests.
func TestGraderReadsEveryOutcome(t *testing.T) {
	e := Exercise{Name: "x", Grade: []Selection{{Package: "./pkg/a", Tests: []string{"TestPass", "TestFail", "TestSkip", "TestGone"}}}}
	c := newCollector("example.com/m", e, nil)
	for _, l := range []string{
		`{"Action":"run","Package":"example.com/m/pkg/a","Test":"TestPass"}`,
		`{"Action":"fail","Package":"example.com/m/pkg/a","Test":"TestPass/sub","Elapsed":0.1}`,
		`{"Action":"pass","Package":"example.com/m/pkg/a","Test":"TestPass","Elapsed":0.5}`,
		`{"Action":"output","Package":"example.com/m/pkg/a","Test":"TestFail","Output":"    a_test.go:9: want 1, got 2\n"}`,
		`{"Action":"fail","Package":"example.com/m/pkg/a","Test":"TestFail","Elapsed":0.2}`,
		`{"Action":"skip","Package":"example.com/m/pkg/a","Test":"TestSkip"}`,
		`{"Action":"pass","Package":"example.com/m/pkg/a","Test":"TestOther"}`,
		`{"Action":"output","Package":"example.com/m/pkg/a","Output":"ok\n"}`,
	} {
		c.line([]byte(l))
	}
	got := map[string]string{}
	for _, r := range c.results() {
		got[r.Test] = r.Status
	}
	want := map[string]string{"TestPass": StatusPass, "TestFail": StatusFail, "TestSkip": StatusSkip, "TestGone": StatusMissing}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	if r := c.results()[1]; len(r.Output) != 1 || !strings.Contains(r.Output[0], "want 1, got 2") {
		t.Errorf("the failed test's output = %q, want its one line", r.Output)
	}
	if len(c.build) != 0 {
		t.Errorf("a package that passed left output %q", c.build)
	}
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
