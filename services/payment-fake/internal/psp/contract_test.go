package psp

import (
	"os"
	"regexp"
	"testing"

	"github.com/relmsg/ordersaga/internal/contract"
)

// TestRoutesAreInTheContract: every route routes.go registers is an
// operation docs/openapi.yaml gives to the PSP, under /psp.
func TestRoutesAreInTheContract(t *testing.T) {
	src, err := os.ReadFile("routes.go")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, m := range regexp.MustCompile(`mux\.HandleFunc\("([^"]+)"`).FindAllStringSubmatch(string(src), -1) {
		patterns = append(patterns, m[1])
	}
	if len(patterns) < 8 {
		t.Fatalf("found %d routes in routes.go: %q", len(patterns), patterns)
	}
	diffs, err := contract.PatternMismatches("psp", "/psp", patterns)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Error(d)
	}
}
