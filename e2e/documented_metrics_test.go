package e2e

import (
	"context"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/relmsg/ordersaga/internal/lab"
	"github.com/relmsg/ordersaga/internal/sagatest"
)

// Every metric the metrics table of docs/operations.md documents is
// exported by a running service, from the start (a series that appears only
// after the first failure cannot be alerted on reliably).
func TestEveryDocumentedMetricIsExported(t *testing.T) {
	t.Parallel()
	const doc = "docs/operations.md"
	text, err := os.ReadFile("../" + doc)
	if err != nil {
		t.Fatal(err)
	}
	section := string(text)
	start := strings.Index(section, "\n## Metrics\n")
	if start < 0 {
		t.Fatal(doc + " has no Metrics section")
	}
	section = section[start+1:]
	if end := strings.Index(section[3:], "\n## "); end > 0 {
		section = section[:end+3]
	}
	name := regexp.MustCompile("`([a-z_]+)(\\{[^}]*\\})?`")
	var documented []string
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.SplitN(line, "|", 3)[1]
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			documented = append(documented, m[1])
		}
	}
	if len(documented) < 20 {
		t.Fatalf("found only %d metrics in the table of %s: %v", len(documented), doc, documented)
	}

	s := sagatest.Start(t)
	exported := map[string]bool{}
	for _, svc := range []*sagatest.Service{s.Order, s.Inventory, s.Payment} {
		families, err := lab.Scrape(context.Background(), http.DefaultClient, svc.URL+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		for name := range families {
			exported[name] = true
		}
	}
	for _, m := range documented {
		if !exported[m] {
			t.Errorf("%s is in the metrics table of %s but no service exports it", m, doc)
		}
	}
}
