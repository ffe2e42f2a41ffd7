// Package exercise runs the graded exercises of scripts/exercise.sh. Each
// exercise is data in exercises/NN-name/: a realistic defect as a patch of
// the real code (defect.patch, applied with git apply, which refuses when
// the code it changes has moved), the tests that catch it (exercise.json),
// the chapter section it breaks, and a hint in English and Chinese
// (hint.en.md, hint.zh.md). The reference fix is the code without the
// patch.
//
// Start plants the defect on a branch of the reader's clone and commits
// it; Grade runs the catching tests and says pass or fail; Reset goes back
// to the branch the reader came from. A defect is never a wrong-way switch
// (pkg/aids/wrongway): it is in the right path itself, so no switch fixes it.
// The suite proves every exercise: with its defect (as a go build overlay,
// the tree untouched) each of its tests fails, and without it each passes.
package exercise

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Dir is where the exercises live, below the repository root.
const Dir = "exercises"

// Text is a string in the two languages of the course.
type Text struct {
	En string `json:"en"`
	Zh string `json:"zh"`
}

// In returns t in lang ("zh" for Chinese; anything else is English).
func (t Text) In(lang string) string {
	if lang == "zh" {
		return t.Zh
	}
	return t.En
}

// Selection is the tests of one package that catch a defect.
type Selection struct {
	Package string   `json:"package"` // a directory below the root: "./pkg/inbox"
	Tests   []string `json:"tests"`   // top-level test names
}

// Exercise is one exercise, as exercises/NN-name/ holds it.
type Exercise struct {
	Number int    `json:"-"`
	Name   string `json:"-"` // the directory: "04-ack-before-commit"
	Dir    string `json:"-"` // the directory, absolute

	Title Text `json:"title"`
	// Unit is the unit of the learning path (docs/learning-path.md) the
	// exercise belongs to.
	Unit int `json:"unit"`
	// Section is the heading of the chapter section the defect breaks,
	// as the chapter writes it.
	Section string `json:"section"`
	// Symptom is what goes wrong, told when the exercise starts.
	Symptom Text `json:"symptom"`
	// Look says where to look: a package, a step of the code path.
	Look Text `json:"look"`
	// Grade lists the tests that catch the defect: each fails with it
	// and passes without it.
	Grade []Selection `json:"grade"`

	Hint Text `json:"-"` // hint.en.md, hint.zh.md
}

// Branch is the branch Start makes for the exercise.
func (e Exercise) Branch() string { return "exercise-" + strconv.Itoa(e.Number) }

// Patch is the path of the defect's patch.
func (e Exercise) Patch() string { return filepath.Join(e.Dir, "defect.patch") }

// Files are the files the defect changes, relative to the root.
func (e Exercise) Files() ([]string, error) {
	b, err := os.ReadFile(e.Patch())
	if err != nil {
		return nil, err
	}
	return patchFiles(string(b))
}

var dirName = regexp.MustCompile(`^([0-9]{2})-[a-z0-9-]+$`)

// Load reads every exercise below root, in number order.
func Load(root string) ([]Exercise, error) {
	ents, err := os.ReadDir(filepath.Join(root, Dir))
	if err != nil {
		return nil, fmt.Errorf("exercises: %w", err)
	}
	var out []Exercise
	for _, ent := range ents {
		m := dirName.FindStringSubmatch(ent.Name())
		if !ent.IsDir() || m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		e, err := load(filepath.Join(root, Dir, ent.Name()))
		if err != nil {
			return nil, fmt.Errorf("exercise %s: %w", ent.Name(), err)
		}
		e.Number, e.Name = n, ent.Name()
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	for i := 1; i < len(out); i++ {
		if out[i].Number == out[i-1].Number {
			return nil, fmt.Errorf("exercises %s and %s have one number", out[i-1].Name, out[i].Name)
		}
	}
	return out, nil
}

// Find returns exercise n of root.
func Find(root string, n int) (Exercise, error) {
	all, err := Load(root)
	if err != nil {
		return Exercise{}, err
	}
	for _, e := range all {
		if e.Number == n {
			return e, nil
		}
	}
	return Exercise{}, fmt.Errorf("%w: %d (scripts/exercise.sh list shows them)", ErrNoSuchExercise, n)
}

// ErrNoSuchExercise: no exercise has this number.
var ErrNoSuchExercise = errors.New("no exercise")

func load(dir string) (Exercise, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Exercise{}, err
	}
	e := Exercise{Dir: abs}
	b, err := os.ReadFile(filepath.Join(dir, "exercise.json"))
	if err != nil {
		return e, err
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return e, fmt.Errorf("exercise.json: %w", err)
	}
	for lang, dst := range map[string]*string{"en": &e.Hint.En, "zh": &e.Hint.Zh} {
		h, err := os.ReadFile(filepath.Join(dir, "hint."+lang+".md"))
		if err != nil {
			return e, err
		}
		*dst = strings.TrimSpace(string(h))
	}
	if _, err := os.Stat(e.Patch()); err != nil {
		return e, err
	}
	return e, e.check()
}

// check refuses an exercise with something missing.
func (e Exercise) check() error {
	var missing []string
	for what, t := range map[string]Text{"title": e.Title, "symptom": e.Symptom, "look": e.Look, "hint": e.Hint} {
		if strings.TrimSpace(t.En) == "" || strings.TrimSpace(t.Zh) == "" {
			missing = append(missing, what+" in both languages")
		}
	}
	if e.Unit < 1 || e.Section == "" {
		missing = append(missing, "a unit and a chapter section")
	}
	if len(e.Grade) == 0 {
		missing = append(missing, "tests that catch the defect")
	}
	for _, s := range e.Grade {
		if !strings.HasPrefix(s.Package, "./") || len(s.Tests) == 0 {
			missing = append(missing, fmt.Sprintf("a ./package and its tests (got %q, %q)", s.Package, s.Tests))
		}
		for _, t := range s.Tests {
			if !testName.MatchString(t) {
				missing = append(missing, fmt.Sprintf("a test name (got %q)", t))
			}
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("needs %s", strings.Join(missing, "; "))
	}
	return nil
}

var testName = regexp.MustCompile(`^Test[A-Za-z0-9_]*$`)

// patchFiles lists the files a unified diff of git changes, from its
// "diff --git a/X b/X" lines.
func patchFiles(patch string) ([]string, error) {
	var files []string
	for _, line := range strings.Split(patch, "\n") {
		rest, ok := strings.CutPrefix(line, "diff --git a/")
		if !ok {
			continue
		}
		a, b, ok := strings.Cut(rest, " b/")
		if !ok || a != b {
			return nil, fmt.Errorf("patch: %q: a defect changes files, it does not rename them", line)
		}
		files = append(files, a)
	}
	if len(files) == 0 {
		return nil, errors.New("patch: no file changed")
	}
	return files, nil
}
