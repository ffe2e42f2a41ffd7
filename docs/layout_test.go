package docs_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// The layering rules of docs/design.md ("How it is built"), read from the
// import graph: `go list -json ./...` lists every package of the module
// with the packages it imports (test files aside: tests may reach
// further).
//
// The kinds of package, lowest floor first; a package imports only from
// its own floor or a lower one:
//
//	base        foundation any service needs: database, retries, HTTP, wire contract, tracing, main
//	aids        the lab's hooks: failpoints and wrong ways
//	mechanisms  the chapter's: outbox, inbox (and its batch layer), ordering, dead letters, the broker, retention
//	compose     what wires a process: its runtime and its admin endpoints
//	support     what tests of the packages above share (…test packages)
//
// And across the tree: pkg never imports services, tooling (internal/) or
// programs (cmd/) (the schema, migrations/, is data every floor may read); a service never imports another service or tooling; a
// service's domain package (order, inventory, payment) is pure Go: no
// database, broker or HTTP package, nothing of this module.
var floors = []struct {
	kind     string
	packages []string // import paths below the module, or a prefix ending in "/"
}{
	{"base", []string{"pkg/base/sqldb", "pkg/base/retry", "pkg/base/web", "pkg/base/wire", "pkg/base/events", "pkg/base/instance", "pkg/base/endpoints", "pkg/base/tracing", "pkg/base/program", "pkg/base/scrape"}},
	{"aids", []string{"pkg/aids/failpoint", "pkg/aids/wrongway"}},
	{"mechanisms", []string{"pkg/outbox", "pkg/inbox", "pkg/inbox/batch", "pkg/ordering", "pkg/deadletter", "pkg/rabbit", "pkg/retention"}},
	{"compose", []string{"pkg/compose/process", "pkg/compose/admin"}},
}

// domains are the services' pure domain packages.
var domains = []string{"services/order/internal/order", "services/inventory/internal/inventory",
	"services/payment-fake/internal/payment"}

// impure are what a domain package may not import.
var impure = []string{"database/sql", "net/http", "github.com/jmoiron/sqlx", "github.com/go-sql-driver/mysql",
	"github.com/rabbitmq/amqp091-go", "github.com/go-chi/chi/v5"}

const module = "github.com/relmsg/ordersaga/"

type goPackage struct {
	ImportPath string
	Imports    []string
}

func TestImportsKeepTheLayering(t *testing.T) {
	t.Parallel()
	pkgs := listPackages(t)
	var broken []string
	for _, p := range pkgs {
		for _, imp := range p.Imports {
			if why := breaks(p.ImportPath, imp); why != "" {
				broken = append(broken, fmt.Sprintf("%s imports %s: %s", p.ImportPath, imp, why))
			}
		}
	}
	for _, b := range broken {
		t.Error(b)
	}
	if len(pkgs) < 50 {
		t.Fatalf("go list found %d packages: the module was not read", len(pkgs))
	}
	// Every pkg package has a kind: a new one must be placed on a floor.
	for _, p := range pkgs {
		path := strings.TrimPrefix(p.ImportPath, module)
		if strings.HasPrefix(path, "pkg/") && floorOf(path) < 0 && !isSupport(path) {
			t.Errorf("%s has no kind: add it to a floor in docs/layout_test.go and to docs/design.md", path)
		}
	}
}

// breaks says why importing imp from pkg breaks a rule ("" when it does not).
func breaks(pkg, imp string) string {
	from, to := strings.TrimPrefix(pkg, module), strings.TrimPrefix(imp, module)
	inModule := strings.HasPrefix(imp, module)
	switch {
	case isDomain(from) && (inModule || hasAny(imp, impure)):
		return "a domain package is pure Go"
	case !inModule:
		return ""
	case strings.HasPrefix(from, "pkg/") && !strings.HasPrefix(to, "pkg/") && to != "migrations":
		return "pkg imports nothing of services, internal or cmd"
	case strings.HasPrefix(from, "services/") && strings.HasPrefix(to, "services/") && service(from) != service(to):
		return "a service never imports another service"
	case strings.HasPrefix(from, "services/") && (strings.HasPrefix(to, "internal/") || strings.HasPrefix(to, "cmd/")):
		return "a service never imports tooling"
	case strings.HasPrefix(from, "pkg/") && !isSupport(from) && isSupport(to):
		return "test support is for tests"
	case strings.HasPrefix(from, "pkg/") && !isSupport(from) && floorOf(to) > floorOf(from):
		return fmt.Sprintf("%s is below %s", floors[floorOf(from)].kind, floors[floorOf(to)].kind)
	}
	return ""
}

func floorOf(path string) int {
	for i, f := range floors {
		for _, p := range f.packages {
			if path == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(path, p)) {
				return i
			}
		}
	}
	return -1
}

// isSupport: a package that exists for tests (a …test package).
func isSupport(path string) bool {
	last := path[strings.LastIndex(path, "/")+1:]
	return strings.HasSuffix(last, "test") && last != "test"
}

func isDomain(path string) bool {
	for _, d := range domains {
		if path == d {
			return true
		}
	}
	return false
}

func service(path string) string { return strings.SplitN(path, "/", 3)[1] }

func hasAny(imp string, list []string) bool {
	for _, l := range list {
		if imp == l || strings.HasPrefix(imp, l+"/") {
			return true
		}
	}
	return false
}

// listPackages runs go list on the module (from the repository root).
func listPackages(t *testing.T) []goPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = ".."
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []goPackage
	dec := json.NewDecoder(&out)
	for {
		var p goPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// The rules catch what they should: a planted import of each kind breaks.
func TestLayeringRulesCatchBadImports(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ from, to string }{
		{"pkg/outbox", "services/order/internal/orderapp"},
		{"pkg/base/sqldb", "pkg/outbox"},
		{"pkg/aids/failpoint", "pkg/rabbit"},
		{"pkg/inbox", "pkg/compose/process"},
		{"pkg/outbox", "pkg/inbox/inboxtest"},
		{"services/order/internal/orderapp", "services/inventory/internal/inventoryapp"},
		{"services/order/ordersvc", "internal/stack"},
		{"services/order/internal/order", "pkg/base/events"},
		{"services/payment-fake/internal/payment", "database/sql"},
	} {
		to := tc.to
		if !strings.Contains(to, ".") && strings.Contains(to, "/") && !strings.HasPrefix(to, "database/") {
			to = module + to
		}
		if breaks(module+tc.from, to) == "" {
			t.Errorf("%s importing %s passes the rules", tc.from, tc.to)
		}
	}
	if why := breaks(module+"pkg/inbox/batch", module+"pkg/outbox"); why != "" {
		t.Errorf("the batch layer importing the outbox breaks a rule: %s", why)
	}
}
