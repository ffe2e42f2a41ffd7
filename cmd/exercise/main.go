// Command exercise runs the graded exercises (docs/exercises.md):
// scripts/exercise.sh runs it.
//
//	go run ./cmd/exercise list      the exercises
//	go run ./cmd/exercise start 3   plant exercise 3's defect on a new branch, exercise-3
//	go run ./cmd/exercise hint 3    its hint
//	go run ./cmd/exercise grade 3   run the tests that catch the defect: pass or fail
//	go run ./cmd/exercise reset 3   back to the branch it started from; exercise-3 is deleted
//
// -zh (or LANG, LC_ALL, LC_MESSAGES starting with zh) answers in Chinese,
// -en in English. grade exits 1 when the defect is still there.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"

	"github.com/relmsg/ordersaga/internal/exercise"
	"github.com/relmsg/ordersaga/pkg/base/program"
)

func main() {
	program.Main("exercise", func(ctx context.Context) error {
		switch err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); {
		case errors.Is(err, errGradeFailed):
			return program.Exit{Code: 1}
		case errors.Is(err, errRefused):
			return program.Exit{Code: 2}
		case err != nil:
			return program.Exit{Code: 2, Err: err}
		}
		return nil
	})
}

// errGradeFailed: grade said fail; errRefused: start or reset refused
// and changed nothing. Both are explained already.
var (
	errGradeFailed = errors.New("grade failed")
	errRefused     = errors.New("refused; nothing was changed")
)

func run(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	lang := language(getenv)
	var rest []string
	for _, a := range args {
		switch a {
		case "-zh", "--zh":
			lang = "zh"
		case "-en", "--en":
			lang = "en"
		default:
			rest = append(rest, a)
		}
	}
	p := printer{out: out, lang: lang}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	if len(rest) == 1 && rest[0] == "list" {
		return list(p, root)
	}
	if len(rest) != 2 {
		p.say(msgUsage)
		return errors.New("usage: list | start N | hint N | grade N | reset N")
	}
	n, err := strconv.Atoi(rest[1])
	if err != nil {
		return fmt.Errorf("%q is not an exercise number", rest[1])
	}
	if rest[0] == "reset" {
		return reset(p, root, n)
	}
	e, err := exercise.Find(root, n)
	if err != nil {
		return err
	}
	switch rest[0] {
	case "start":
		return start(p, root, e)
	case "hint":
		return hint(p, e)
	case "grade":
		return grade(ctx, p, root, e)
	}
	p.say(msgUsage)
	return fmt.Errorf("unknown command %q", rest[0])
}

// language is zh when the locale says Chinese, else en.
func language(getenv func(string) string) string {
	for _, k := range []string{"LC_ALL", "LC_MESSAGES", "LANG"} {
		if v := getenv(k); v != "" {
			if strings.HasPrefix(strings.ToLower(v), "zh") {
				return "zh"
			}
			return "en"
		}
	}
	return "en"
}

func repoRoot() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", errors.New("run it inside the repository's clone (git rev-parse --show-toplevel failed)")
	}
	return strings.TrimSpace(string(out)), nil
}

func list(p printer, root string) error {
	all, err := exercise.Load(root)
	if err != nil {
		return err
	}
	p.say(msgListHead)
	for _, e := range all {
		p.printf("  %d  %s\n", e.Number, e.Title.In(p.lang))
		p.printf("     %s %d · 「%s」\n", p.t(msgUnit), e.Unit, e.Section)
	}
	p.say(msgListFoot)
	return nil
}

func start(p printer, root string, e exercise.Exercise) error {
	st, err := exercise.Start(root, e)
	var d *exercise.Detail
	errors.As(err, &d)
	switch {
	case errors.Is(err, exercise.ErrDirty):
		p.say(msgDirty, e.Number)
		for _, l := range d.Lines {
			p.printf("    %s\n", l)
		}
		return errRefused
	case errors.Is(err, exercise.ErrOnExercise):
		n := strings.TrimPrefix(d.Branch, "exercise-")
		p.say(msgOnExercise, d.Branch, n)
		return errRefused
	case errors.Is(err, exercise.ErrBranchExists):
		p.say(msgBranchExists, d.Branch, d.Branch, e.Number)
		return errRefused
	case errors.Is(err, exercise.ErrDoesNotApply):
		p.say(msgDoesNotApply, e.Number)
		for _, l := range d.Lines {
			p.printf("    %s\n", l)
		}
		return errRefused
	case err != nil:
		return err
	}
	p.say(msgStarted, e.Number, e.Title.In(p.lang), st.Branch, st.From)
	p.printf("\n%s\n\n", wrap(e.Symptom.In(p.lang), "  ", 100))
	p.say(msgStartedLook, e.Look.In(p.lang), e.Section)
	p.say(msgStartedNext, e.Number, e.Number, e.Number, st.From, e.Name)
	return nil
}

func hint(p printer, e exercise.Exercise) error {
	p.say(msgHintHead, e.Number, e.Title.In(p.lang), e.Section)
	p.printf("%s\n", e.Hint.In(p.lang))
	return nil
}

func grade(ctx context.Context, p printer, root string, e exercise.Exercise) error {
	p.say(msgGradeHead, e.Number, e.Title.In(p.lang))
	if cur, err := exec.Command("git", "-C", root, "rev-parse", "--abbrev-ref", "HEAD").Output(); err == nil {
		if b := strings.TrimSpace(string(cur)); b != e.Branch() {
			p.say(msgGradeElsewhere, b, e.Branch())
		}
	}
	rep, err := exercise.Grade(ctx, root, e, exercise.GradeOptions{Progress: p.out})
	if err != nil {
		return err
	}
	p.printf("  (%s, %s)\n", rep.Command, rep.Elapsed.Round(100_000_000))
	for _, r := range rep.Failed() {
		p.printf("\n  %s %s (%s): %s\n", p.t(msgGradeTest), r.Test, r.Package, p.t("status."+r.Status))
		printHead(p, essential(withoutLogs(r.Output), 40), 40)
	}
	if !rep.Passed() && len(rep.BuildOutput) > 0 {
		p.printf("\n")
		printHead(p, rep.BuildOutput, 40)
	}
	if rep.Passed() {
		p.say(msgGradePass, e.Number, e.Section, e.Number)
		return nil
	}
	if len(rep.BuildOutput) > 0 && !anyRan(rep) {
		p.say(msgGradeNoBuild)
		return errGradeFailed
	}
	p.say(msgGradeFail, e.Section, e.Number)
	return errGradeFailed
}

// anyRan: some test the exercise names ran (passed, failed or skipped).
func anyRan(rep exercise.Report) bool {
	for _, r := range rep.Results {
		if r.Status != exercise.StatusMissing {
			return true
		}
	}
	return false
}

// printHead prints the first max lines, and how many more there are: a
// test says what failed first, then why.
func printHead(p printer, lines []string, max int) {
	more := 0
	if len(lines) > max {
		more, lines = len(lines)-max, lines[:max]
	}
	for _, l := range lines {
		p.printf("    %s\n", strings.TrimPrefix(l, "    "))
	}
	if more > 0 {
		p.printf("    ... (%d more lines: run the go test command above to see them)\n", more)
	}
}

// essential is lines when they are few; else the lines that say what
// failed: a test's own messages (file_test.go:NN: ...), the lab's failed
// checks and verdicts (an experiment's report is long).
func essential(lines []string, max int) []string {
	if len(lines) <= max {
		return lines
	}
	var key []string
	for _, l := range lines {
		if keyLine.MatchString(l) {
			key = append(key, l)
		}
	}
	if len(key) == 0 {
		return lines
	}
	return append(key, fmt.Sprintf("    (%d lines in all: run the go test command above to see them)", len(lines)))
}

var keyLine = regexp.MustCompile(`\[FAIL\] |^\s*verdict \(|_test\.go:[0-9]+: \S`)

// withoutLogs drops the services' log lines (JSON) and their headings
// from a test's output: an experiment's test logs its stack's last lines
// after the report that says what failed.
func withoutLogs(lines []string) []string {
	var out []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "{") || strings.Contains(t, "---- last log lines of") {
			continue
		}
		out = append(out, l)
	}
	return out
}

func reset(p printer, root string, n int) error {
	res, err := exercise.ResetTo(root, n)
	switch {
	case errors.Is(err, exercise.ErrNotStarted):
		p.say(msgNotStarted, n, res.Branch)
		return errRefused
	case errors.Is(err, exercise.ErrNoOrigin):
		p.say(msgNoOrigin, res.Branch, res.Branch)
		return errRefused
	case err != nil:
		return err
	}
	p.say(msgReset, res.From)
	if res.Stashed {
		p.say(msgResetStashed, exercise.StashMessage(n))
	}
	if res.Kept {
		p.say(msgResetKept, res.Branch, res.Commits, res.Branch)
	} else {
		p.say(msgResetDeleted, res.Branch)
	}
	return nil
}
