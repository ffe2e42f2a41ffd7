package exercise

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// root is the repository, seen from this package's directory.
const root = "../.."

// The course has at least six exercises, numbered from 1 without a gap,
// each complete in both languages, each in a unit of the learning path
// and naming a section of the chapter by its heading (a "## " heading of
// docs/course-map.md, which follows the chapter), with a defect in the
// right path: never in a wrong way's code (wrongway.go, pkg/aids/wrongway),
// so that no wrong-way switch can fix it.
func TestExercisesAreComplete(t *testing.T) {
	all, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 6 {
		t.Fatalf("%d exercises, want at least six", len(all))
	}
	var sections []string
	for _, line := range strings.Split(readFile(t, "docs/course-map.md"), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			sections = append(sections, strings.TrimSpace(h))
		}
	}
	units := map[int]bool{}
	for i, e := range all {
		if e.Number != i+1 {
			t.Errorf("exercise %s is number %d, want %d: numbered from 1 without a gap", e.Name, e.Number, i+1)
		}
		if !slices.Contains(sections, e.Section) {
			t.Errorf("exercise %s names the section %q, which is no section of the chapter (docs/course-map.md)", e.Name, e.Section)
		}
		units[e.Unit] = true
		files, err := e.Files()
		if err != nil {
			t.Errorf("exercise %s: %v", e.Name, err)
		}
		for _, f := range files {
			if filepath.Base(f) == "wrongway.go" || strings.HasPrefix(f, "pkg/aids/wrongway/") || strings.HasSuffix(f, "_test.go") {
				t.Errorf("exercise %s changes %s: a defect lives in the right path, not in a wrong way or a test", e.Name, f)
			}
		}
	}
	for u := 1; u <= 6; u++ {
		if !units[u] {
			t.Errorf("no exercise for unit %d of the learning path", u)
		}
	}
}

// Start plants the defect on a new branch and commits it, from a clean
// tree only; Reset goes back, keeping what the reader wrote: uncommitted
// changes in the stash, a branch with the reader's commits kept. Run on a
// small repository of its own made of the files the exercise changes.
func TestStartAndResetKeepTheReadersWork(t *testing.T) {
	all, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	e := all[0]
	r := newRepo(t, e)
	mustGit(t, r, "checkout", "--quiet", "-b", "mine")
	head := mustGit(t, r, "rev-parse", "HEAD")

	files, _ := e.Files()
	write(t, r, files[0], "edited\n")
	if _, err := Start(r.dir, e); !isDetail(err, ErrDirty) {
		t.Fatalf("start on a dirty tree: %v, want ErrDirty", err)
	}
	if b, _, _ := r.head(); b != "mine" || r.branchExists(e.Branch()) {
		t.Fatalf("a refused start changed the repository: on %s, branch %s exists: %v", b, e.Branch(), r.branchExists(e.Branch()))
	}
	mustGit(t, r, "checkout", "--quiet", "--", files[0])

	st, err := Start(r.dir, e)
	if err != nil || st.From != "mine" || st.Branch != e.Branch() {
		t.Fatalf("start = %+v, %v; want from mine to %s", st, err, e.Branch())
	}
	if changed, _ := r.changed(); len(changed) != 0 {
		t.Fatalf("after start the tree is not clean: %q", changed)
	}
	diff := mustGit(t, r, "diff", "--stat", head, "HEAD")
	for _, f := range files {
		if !strings.Contains(diff, f) {
			t.Errorf("the planted commit does not change %s: %s", f, diff)
		}
	}
	if _, err := Start(r.dir, e); !isDetail(err, ErrOnExercise) {
		t.Errorf("a second start on the exercise's branch: %v, want ErrOnExercise", err)
	}

	// The reader's fix, not committed: reset saves it in the stash.
	write(t, r, files[0], "my fix\n")
	res, err := ResetTo(r.dir, e.Number)
	if err != nil || res.From != "mine" || !res.Stashed || res.Kept {
		t.Fatalf("reset = %+v, %v; want back on mine, changes stashed, branch deleted", res, err)
	}
	if b, _, _ := r.head(); b != "mine" || r.branchExists(e.Branch()) {
		t.Fatalf("after reset: on %s, %s exists %v; want on mine, deleted", b, e.Branch(), r.branchExists(e.Branch()))
	}
	if got := mustGit(t, r, "rev-parse", "HEAD"); got != head {
		t.Fatalf("after reset HEAD is %s, want the reader's %s", got, head)
	}
	if list := mustGit(t, r, "stash", "list"); !strings.Contains(list, StashMessage(e.Number)) {
		t.Fatalf("stash list %q, want the reader's changes saved", list)
	}
	if fix := mustGit(t, r, "stash", "show", "-p"); !strings.Contains(fix, "+my fix") {
		t.Fatalf("the stash does not hold the reader's fix:\n%s", fix)
	}

	// A committed fix: reset goes back and keeps the branch.
	if _, err := Start(r.dir, e); err != nil {
		t.Fatal(err)
	}
	write(t, r, files[0], "my committed fix\n")
	mustGit(t, r, append(commitArgs, "-am", "my fix")...)
	res, err = ResetTo(r.dir, e.Number)
	if err != nil || !res.Kept || res.Commits != 1 || res.Stashed {
		t.Fatalf("reset = %+v, %v; want the branch kept with 1 commit of the reader's", res, err)
	}
	if b, _, _ := r.head(); b != "mine" || !r.branchExists(e.Branch()) {
		t.Fatalf("after reset: on %s, want mine with %s kept", b, e.Branch())
	}
	if _, err := ResetTo(r.dir, e.Number); !isDetail(err, ErrNoOrigin) {
		t.Errorf("reset of a kept branch: %v, want ErrNoOrigin (the reader deletes it)", err)
	}
	mustGit(t, r, "branch", "-D", e.Branch())
	if _, err := ResetTo(r.dir, e.Number); !isDetail(err, ErrNotStarted) {
		t.Errorf("reset without the branch: %v, want ErrNotStarted", err)
	}
}

// newRepo is a repository of its own holding, at its first commit, the
// files e's defect changes (as the tree has them) and e's directory.
func newRepo(t *testing.T, e Exercise) repo {
	t.Helper()
	dir := t.TempDir()
	r := repo{dir}
	mustGit(t, r, "init", "--quiet", "-b", "main")
	files, err := e.Files()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		write(t, r, f, readFile(t, f))
	}
	for _, f := range []string{"exercise.json", "hint.en.md", "hint.zh.md", "defect.patch"} {
		rel := filepath.Join(Dir, e.Name, f)
		write(t, r, rel, readFile(t, rel))
	}
	mustGit(t, r, "add", ".")
	mustGit(t, r, append(commitArgs, "-m", "the tree")...)
	return r
}

func mustGit(t *testing.T, r repo, args ...string) string {
	t.Helper()
	out, err := r.git(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func write(t *testing.T, r repo, rel, text string) {
	t.Helper()
	p := filepath.Join(r.dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func isDetail(err, want error) bool {
	d, ok := err.(*Detail)
	return ok && d.Err == want
}

// The exercise pages list every exercise under a heading "## N. title",
// with its chapter section, its start and grade commands and the tests
// grade runs; the learning path sends the reader to it from its unit. In
// both languages.
func TestThePagesListEveryExercise(t *testing.T) {
	all, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, lang := range []struct{ code, page, path, unit string }{
		{"en", "docs/exercises.md", "docs/learning-path.md", "## Unit %d:"},
		{"zh", "docs/zh/exercises.md", "docs/zh/learning-path.md", "## 第 %d 单元"},
	} {
		page := headed(readFile(t, lang.page))
		path := headed(readFile(t, lang.path))
		for _, e := range all {
			heading := fmt.Sprintf("## %d. %s", e.Number, e.Title.In(lang.code))
			body, ok := page[heading]
			if !ok {
				t.Errorf("%s: no heading %q", lang.page, heading)
				continue
			}
			want := []string{e.Section, fmt.Sprintf("`scripts/exercise.sh start %d`", e.Number),
				fmt.Sprintf("`scripts/exercise.sh grade %d`", e.Number)}
			for _, s := range e.Grade {
				for _, name := range s.Tests {
					want = append(want, "`"+name+"`")
				}
			}
			for _, w := range want {
				if !strings.Contains(body, w) {
					t.Errorf("%s, %s: %s is not named", lang.page, heading, w)
				}
			}
			unit := ""
			for h, b := range path {
				if strings.HasPrefix(h, fmt.Sprintf(lang.unit, e.Unit)) {
					unit = b
				}
			}
			if start := fmt.Sprintf("`scripts/exercise.sh start %d`", e.Number); !strings.Contains(unit, start) {
				t.Errorf("%s, unit %d: does not send the reader to exercise %d (%s)", lang.path, e.Unit, e.Number, start)
			}
		}
	}
}

// headed splits a markdown page at its "## " headings: heading -> body.
func headed(text string) map[string]string {
	out := map[string]string{}
	cur := ""
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "## ") {
			cur = strings.TrimSpace(line)
			out[cur] = ""
			continue
		}
		if cur != "" {
			out[cur] += line + "\n"
		}
	}
	return out
}
