package exercise

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// Errors of Start and Reset, each carrying what the reader needs to know.
var (
	// ErrDirty: the working tree has uncommitted changes to tracked files.
	ErrDirty = errors.New("the working tree has uncommitted changes")
	// ErrOnExercise: the reader is on an exercise branch already.
	ErrOnExercise = errors.New("already on an exercise branch")
	// ErrBranchExists: the exercise's branch exists from an earlier start.
	ErrBranchExists = errors.New("the exercise's branch exists")
	// ErrDoesNotApply: the code the defect changes has moved.
	ErrDoesNotApply = errors.New("the defect does not apply to this code")
	// ErrNotStarted: there is no branch of this exercise.
	ErrNotStarted = errors.New("the exercise was not started")
	// ErrNoOrigin: nothing says which branch the exercise started from.
	ErrNoOrigin = errors.New("the branch the exercise started from is not known")
)

// Detail is an error with the lines that explain it (files, git's words).
type Detail struct {
	Err    error
	Branch string   // the branch concerned
	Lines  []string // files, or what git said
}

func (d *Detail) Error() string {
	if len(d.Lines) == 0 {
		return d.Err.Error()
	}
	return d.Err.Error() + ": " + strings.Join(d.Lines, "; ")
}

func (d *Detail) Unwrap() error { return d.Err }

// repo runs git in a repository.
type repo struct{ dir string }

func (r repo) git(args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = r.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return strings.TrimSpace(out.String()), fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// head is the current branch, or the commit when HEAD is detached.
func (r repo) head() (name string, branch bool, err error) {
	if b, err := r.git("symbolic-ref", "--quiet", "--short", "HEAD"); err == nil {
		return b, true, nil
	}
	sha, err := r.git("rev-parse", "HEAD")
	return sha, false, err
}

func (r repo) branchExists(b string) bool {
	_, err := r.git("rev-parse", "--verify", "--quiet", "refs/heads/"+b)
	return err == nil
}

// changed lists the tracked files with uncommitted changes.
func (r repo) changed() ([]string, error) {
	out, err := r.git("status", "--porcelain", "--untracked-files=no")
	if err != nil || out == "" {
		return nil, err
	}
	return strings.Split(out, "\n"), nil
}

func configKey(n int, key string) string { return "exercise." + strconv.Itoa(n) + "." + key }

// identity is what git needs to make a commit for the reader (a stash)
// in a clone where no name or email is configured: the tool's.
func (r repo) identity() []string {
	var out []string
	if name, _ := r.git("config", "user.name"); name == "" {
		out = append(out, "-c", "user.name=scripts/exercise.sh")
	}
	if email, _ := r.git("config", "user.email"); email == "" {
		out = append(out, "-c", "user.email=exercise@localhost")
	}
	return out
}

// The commits of an exercise are the tool's, not the reader's: made
// without hooks or signing, under a name of their own.
var commitArgs = []string{"-c", "user.name=scripts/exercise.sh", "-c", "user.email=exercise@localhost",
	"-c", "commit.gpgsign=false", "commit", "--quiet", "--no-verify"}

// Started is what Start did.
type Started struct {
	From   string // the branch (or commit) the reader was on
	Branch string // the exercise's branch
}

// Start plants e's defect in the repository at root: from a clean tree,
// on a new branch exercise-N, committed there, so that the reader sees a
// clean tree and has to find the defect. The branch it started from is
// kept in the repository's config for Reset. It changes nothing when it
// refuses.
func Start(root string, e Exercise) (Started, error) {
	r := repo{root}
	from, onBranch, err := r.head()
	if err != nil {
		return Started{}, err
	}
	st := Started{From: from, Branch: e.Branch()}
	if onBranch && strings.HasPrefix(from, "exercise-") {
		return st, &Detail{Err: ErrOnExercise, Branch: from}
	}
	if r.branchExists(st.Branch) {
		return st, &Detail{Err: ErrBranchExists, Branch: st.Branch}
	}
	files, err := r.changed()
	if err != nil {
		return st, err
	}
	if len(files) > 0 {
		return st, &Detail{Err: ErrDirty, Lines: files}
	}
	if _, err := r.git("apply", "--check", e.Patch()); err != nil {
		return st, &Detail{Err: ErrDoesNotApply, Lines: []string{err.Error()}}
	}
	if _, err := r.git("checkout", "--quiet", "-b", st.Branch); err != nil {
		return st, err
	}
	undo := func(cause error) error {
		_, _ = r.git("checkout", "--quiet", "--force", from)
		_, _ = r.git("branch", "--quiet", "-D", st.Branch)
		return cause
	}
	if _, err := r.git("apply", "--index", e.Patch()); err != nil {
		return st, undo(&Detail{Err: ErrDoesNotApply, Lines: []string{err.Error()}})
	}
	msg := fmt.Sprintf("exercise %d (scripts/exercise.sh start %d)", e.Number, e.Number)
	if _, err := r.git(append(commitArgs, "-m", msg)...); err != nil {
		return st, undo(err)
	}
	planted, err := r.git("rev-parse", "HEAD")
	if err == nil {
		_, err = r.git("config", configKey(e.Number, "from"), from)
	}
	if err == nil {
		_, err = r.git("config", configKey(e.Number, "planted"), planted)
	}
	if err != nil {
		return st, undo(err)
	}
	return st, nil
}

// Reset is what Reset did.
type Reset struct {
	From   string // the branch (or commit) the reader is back on
	Branch string // the exercise's branch
	// Stashed: the reader's uncommitted changes on the exercise branch
	// were saved with git stash (the message is StashMessage).
	Stashed bool
	// Kept: the exercise's branch has commits of the reader's after the
	// planted one, so it was kept; Commits counts them.
	Kept    bool
	Commits int
}

// StashMessage is the message of the stash Reset saves a reader's
// uncommitted changes in.
func StashMessage(n int) string {
	return fmt.Sprintf("exercise %d: your changes, saved by scripts/exercise.sh reset %d", n, n)
}

// ResetTo leaves exercise n: back to the branch Start left, then the
// exercise's branch is deleted. Nothing of the reader's is lost:
// uncommitted changes on the exercise's branch are stashed first, and a
// branch with commits of the reader's is kept.
func ResetTo(root string, n int) (Reset, error) {
	r := repo{root}
	res := Reset{Branch: "exercise-" + strconv.Itoa(n)}
	if !r.branchExists(res.Branch) {
		return res, &Detail{Err: ErrNotStarted, Branch: res.Branch}
	}
	from, _ := r.git("config", "--get", configKey(n, "from"))
	planted, _ := r.git("config", "--get", configKey(n, "planted"))
	if from == "" || planted == "" {
		return res, &Detail{Err: ErrNoOrigin, Branch: res.Branch}
	}
	res.From = from
	count, err := r.git("rev-list", "--count", planted+".."+res.Branch)
	if err != nil {
		return res, err
	}
	res.Commits, _ = strconv.Atoi(count)
	res.Kept = res.Commits > 0
	cur, onBranch, err := r.head()
	if err != nil {
		return res, err
	}
	if onBranch && cur == res.Branch {
		files, err := r.changed()
		if err != nil {
			return res, err
		}
		if len(files) > 0 {
			if _, err := r.git(append(r.identity(), "stash", "push", "--quiet", "-m", StashMessage(n))...); err != nil {
				return res, err
			}
			res.Stashed = true
		}
		if _, err := r.git("checkout", "--quiet", from); err != nil {
			return res, err
		}
	}
	if !res.Kept {
		if _, err := r.git("branch", "--quiet", "-D", res.Branch); err != nil {
			return res, err
		}
	}
	_, _ = r.git("config", "--remove-section", "exercise."+strconv.Itoa(n))
	return res, nil
}
