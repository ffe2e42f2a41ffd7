package exercise

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// GradeOptions tune a grading run.
type GradeOptions struct {
	// Overlay is a go build overlay file (the tests' Overlay writes one):
	// the tree is graded as the overlay changes it. Empty: as it is.
	Overlay string
	// Progress, when set, gets one line per test as it ends.
	Progress io.Writer
	// Timeout bounds the go test run [10m].
	Timeout time.Duration
}

// Result is what became of one test the exercise names.
type Result struct {
	Package string // as the exercise names it: "./pkg/inbox"
	Test    string
	Status  string // StatusPass, StatusFail, StatusSkip or StatusMissing
	Elapsed time.Duration
	Output  []string // the test's output lines, its subtests' included
}

// The statuses of a Result. Missing: the test did not run (no test of
// that name, or its package did not build).
const (
	StatusPass    = "pass"
	StatusFail    = "fail"
	StatusSkip    = "skip"
	StatusMissing = "missing"
)

// Report is the outcome of grading one exercise.
type Report struct {
	Command string   // the go test command run, for the reader to run again
	Results []Result // one per test the exercise names, in its order
	// BuildOutput is what go printed about packages that did not build
	// (or that failed outside any test).
	BuildOutput []string
	Elapsed     time.Duration
}

// Passed reports whether every test the exercise names ran and passed: a
// skipped or missing test is not a pass.
func (r Report) Passed() bool {
	if len(r.Results) == 0 {
		return false
	}
	for _, res := range r.Results {
		if res.Status != StatusPass {
			return false
		}
	}
	return true
}

// Failed are the results that are not passes.
func (r Report) Failed() []Result {
	var out []Result
	for _, res := range r.Results {
		if res.Status != StatusPass {
			out = append(out, res)
		}
	}
	return out
}

// Args is the go test command line that grades e (the overlay aside):
// the named tests of the named packages, with the race detector, never
// from the test cache.
func (e Exercise) Args() []string {
	var names, pkgs []string
	seen := map[string]bool{}
	for _, s := range e.Grade {
		if !seen[s.Package] {
			seen[s.Package] = true
			pkgs = append(pkgs, s.Package)
		}
		for _, t := range s.Tests {
			if !seen[t] {
				seen[t] = true
				names = append(names, t)
			}
		}
	}
	args := []string{"test", "-race", "-count=1", "-run", "^(" + strings.Join(names, "|") + ")$"}
	return append(args, pkgs...)
}

// Grade runs the tests that catch e's defect in the tree at root and
// reports each. An error is a run that could not be made at all (no go,
// a cancelled ctx); a test that fails or a package that does not build is
// a Report that has not passed.
func Grade(ctx context.Context, root string, e Exercise, opt GradeOptions) (Report, error) {
	if opt.Timeout <= 0 {
		opt.Timeout = 10 * time.Minute
	}
	module, err := modulePath(root)
	if err != nil {
		return Report{}, err
	}
	args := e.Args()
	rep := Report{Command: "go " + quoteArgs(args)}
	args = append(args[:1:1], append([]string{"-json", "-timeout", opt.Timeout.String()}, args[1:]...)...)
	if opt.Overlay != "" {
		args = append(args[:1:1], append([]string{"-overlay", opt.Overlay}, args[1:]...)...)
	}
	ctx, cancel := context.WithTimeout(ctx, opt.Timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return rep, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return rep, fmt.Errorf("go test: %w", err)
	}
	c := newCollector(module, e, opt.Progress)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		c.line(sc.Bytes())
	}
	waitErr := cmd.Wait()
	rep.Elapsed = time.Since(start)
	if ctx.Err() != nil {
		return rep, fmt.Errorf("go test: %w", ctx.Err())
	}
	var exit *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exit) {
		return rep, fmt.Errorf("go test: %w", waitErr)
	}
	rep.Results = c.results()
	rep.BuildOutput = append(c.build, nonEmptyLines(stderr.String())...)
	return rep, nil
}

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output, build-fail
	Test       string
	Elapsed    float64
	Output     string
}

// collector gathers the results of the tests an exercise names from go
// test -json.
type collector struct {
	progress io.Writer
	byKey    map[string]*Result // import path + " " + test
	order    []string
	output   map[string][]string // package-level output, until the package is known to fail
	build    []string
}

func newCollector(module string, e Exercise, progress io.Writer) *collector {
	c := &collector{progress: progress, byKey: map[string]*Result{}, output: map[string][]string{}}
	for _, s := range e.Grade {
		imp := module + strings.TrimSuffix(strings.TrimPrefix(s.Package, "."), "/")
		for _, t := range s.Tests {
			k := imp + " " + t
			c.byKey[k] = &Result{Package: s.Package, Test: t, Status: StatusMissing}
			c.order = append(c.order, k)
		}
	}
	return c
}

func (c *collector) line(b []byte) {
	var ev event
	if err := json.Unmarshal(b, &ev); err != nil || ev.Action == "" {
		c.build = append(c.build, string(b))
		return
	}
	pkg := ev.Package
	if pkg == "" {
		pkg = ev.ImportPath
	}
	top, _, _ := strings.Cut(ev.Test, "/")
	res := c.byKey[pkg+" "+top]
	switch {
	case ev.Action == "build-output":
		c.build = append(c.build, strings.TrimRight(ev.Output, "\n"))
	case ev.Test == "" && ev.Action == "output":
		c.output[pkg] = append(c.output[pkg], strings.TrimRight(ev.Output, "\n"))
	case ev.Test == "" && ev.Action == "fail":
		// A package that fails outside the tests it ran (it did not
		// build, or a test it did not name failed): show what it said.
		for _, l := range c.output[pkg] {
			if l != "FAIL" && !strings.HasPrefix(l, "FAIL\t") && !strings.HasPrefix(l, "=== ") {
				c.build = append(c.build, l)
			}
		}
	case res == nil:
	case ev.Action == "output":
		if l := strings.TrimRight(ev.Output, "\n"); !noise.MatchString(l) {
			res.Output = append(res.Output, l)
		}
	case ev.Test == top && (ev.Action == "pass" || ev.Action == "fail" || ev.Action == "skip"):
		res.Status, res.Elapsed = ev.Action, time.Duration(ev.Elapsed*float64(time.Second))
		if c.progress != nil {
			fmt.Fprintf(c.progress, "  %-4s  %s (%s, %s)\n", strings.ToUpper(ev.Action), res.Test,
				strings.TrimPrefix(res.Package, "./"), res.Elapsed.Round(10*time.Millisecond))
		}
	}
}

// noise: go test's own lines around a test's output.
var noise = regexp.MustCompile(`^(=== (RUN|PAUSE|CONT|NAME)\s|\s*--- (PASS|FAIL|SKIP): )`)

func (c *collector) results() []Result {
	out := make([]Result, len(c.order))
	for i, k := range c.order {
		out[i] = *c.byKey[k]
	}
	return out
}

// modulePath reads the module path of the go.mod at root.
func modulePath(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`), nil
		}
	}
	return "", errors.New("go.mod: no module line")
}

func quoteArgs(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, "^$|()* ") {
			a = "'" + a + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}
