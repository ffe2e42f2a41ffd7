package exercise

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// The tests' way to grade a defect without touching the tree.

// Overlay writes into dir the files e's defect changes, with the defect
// applied to the tree at root, and an overlay file for go build's
// -overlay, and returns that file's path: the tree as Start leaves it,
// without changing the tree. It fails as git apply does when the code the
// defect changes has moved.
func Overlay(root string, e Exercise, dir string) (string, error) {
	files, err := e.Files()
	if err != nil {
		return "", err
	}
	tree := filepath.Join(dir, "tree")
	replace := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return "", err
		}
		dst := filepath.Join(tree, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return "", err
		}
		src, err := filepath.Abs(filepath.Join(root, f))
		if err != nil {
			return "", err
		}
		replace[src] = dst
	}
	cmd := exec.Command("git", "apply", e.Patch())
	cmd.Dir = tree
	// Apply to these files as plain files: never look for a repository
	// above them.
	cmd.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("exercise %s: the defect does not apply to this code any more: %v\n%s", e.Name, err, out)
	}
	b, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		return "", err
	}
	overlay := filepath.Join(dir, "overlay.json")
	return overlay, os.WriteFile(overlay, b, 0o644)
}
