package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/relmsg/ordersaga/internal/stack"
)

// The services docker compose starts, how it builds and restarts them,
// their health checks, dependencies and published ports, and the optional
// observability profile.

func TestComposeServices(t *testing.T) {
	p := loadCompose(t, nil)
	want := []string{"inventory", "mysql", "order", "payment-fake", "rabbitmq"}
	var got []string
	for name, s := range p.Services {
		if len(s.Profiles) == 0 { // optional profiles (observability) do not start by default
			got = append(got, name)
		}
	}
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Fatalf("services started by default = %v, want %v", got, want)
	}

	if img := p.Services["mysql"].Image; img != "mysql:8.4" {
		t.Errorf("mysql image = %q, want mysql:8.4 (the 8.4 LTS)", img)
	}
	rabbit := p.Services["rabbitmq"].Image
	if m := regexp.MustCompile(`^rabbitmq:(\d+)\.(\d+)(?:\.\d+)?-management$`).FindStringSubmatch(rabbit); m == nil {
		t.Errorf("rabbitmq image = %q, want rabbitmq:<major>.<minor>-management (the management UI is published)", rabbit)
	} else {
		major, _ := strconv.Atoi(m[1])
		minor, _ := strconv.Atoi(m[2])
		if major < 3 || major == 3 && minor < 13 {
			t.Errorf("rabbitmq image = %q, want 3.13 or newer", rabbit)
		}
	}

	for _, svc := range stack.Services {
		s, ok := p.Services[svc.Name]
		if !ok {
			t.Errorf("no compose service %s (scripts/up.sh runs it)", svc.Name)
			continue
		}
		if s.Build == nil {
			t.Errorf("%s: no build section: the services are built from the Dockerfile", svc.Name)
			continue
		}
		if s.Build.Context != "." {
			t.Errorf("%s: build context = %q, want . (the repository root)", svc.Name, s.Build.Context)
		}
		if s.Build.Dockerfile != "" && s.Build.Dockerfile != "Dockerfile" {
			t.Errorf("%s: dockerfile = %q, want the one Dockerfile", svc.Name, s.Build.Dockerfile)
		}
		if got := s.Build.Args["SERVICE"]; got == nil || *got != svc.Name {
			t.Errorf("%s: build arg SERVICE = %v, want %q", svc.Name, got, svc.Name)
		}
		if _, err := os.Stat(filepath.Join(root, "services", svc.Name, "main.go")); err != nil {
			t.Errorf("%s: build arg SERVICE=%s names no main package: %v", svc.Name, svc.Name, err)
		}
		if s.Restart != "unless-stopped" {
			t.Errorf("%s: restart = %q, want unless-stopped (the failure lab crashes services and expects them back)", svc.Name, s.Restart)
		}
		// Docker's default 10 s would SIGKILL a service in the middle of
		// its graceful shutdown (SHUTDOWN_TIMEOUT, 15 s by default).
		if s.StopGracePeriod == nil || time.Duration(*s.StopGracePeriod) <= 15*time.Second {
			t.Errorf("%s: stop_grace_period = %v, want more than the 15s SHUTDOWN_TIMEOUT", svc.Name, s.StopGracePeriod)
		}
	}
}

func TestComposeHealthchecks(t *testing.T) {
	p := loadCompose(t, nil)
	for name, s := range p.Services {
		if len(s.Profiles) > 0 {
			continue
		}
		hc := s.HealthCheck
		if hc == nil || hc.Disable || len(hc.Test) == 0 || hc.Test[0] == "NONE" {
			t.Errorf("%s: no healthcheck", name)
			continue
		}
		if hc.Test[0] != "CMD" && hc.Test[0] != "CMD-SHELL" {
			t.Errorf("%s: healthcheck test %q: want CMD or CMD-SHELL first", name, hc.Test)
		}
	}

	cmd := func(name string) string {
		if hc := p.Services[name].HealthCheck; hc != nil {
			return strings.Join(hc.Test, " ")
		}
		return ""
	}
	// The first start initializes MySQL on a temporary server reachable
	// only through its socket: a TCP ping is healthy only once the init
	// script (the users) has run.
	if c := cmd("mysql"); !strings.Contains(c, "mysqladmin ping") || !strings.Contains(c, "127.0.0.1") {
		t.Errorf("mysql healthcheck %q: want mysqladmin ping over TCP (-h 127.0.0.1)", c)
	}
	if c := cmd("rabbitmq"); !strings.Contains(c, "rabbitmq-diagnostics") {
		t.Errorf("rabbitmq healthcheck %q: want rabbitmq-diagnostics", c)
	}
	for _, svc := range stack.Services {
		want := fmt.Sprintf("http://127.0.0.1:%d/readyz", svc.Port)
		c := cmd(svc.Name)
		if !strings.Contains(c, want) {
			t.Errorf("%s healthcheck %q: want a GET of %s", svc.Name, c, want)
		}
		hc := p.Services[svc.Name].HealthCheck
		if hc == nil || len(hc.Test) < 2 {
			continue
		}
		// The final image has busybox wget, and no curl.
		if tool := hc.Test[1]; tool != "wget" {
			t.Errorf("%s healthcheck runs %q: the service image has busybox wget, not that", svc.Name, tool)
		}
		// busybox wget built without FEATURE_WGET_TIMEOUT crashes on -T;
		// the healthcheck's own timeout bounds the request instead.
		if slices.Contains(hc.Test, "-T") {
			t.Errorf("%s healthcheck %q: drop wget -T (a segfault on some busybox builds); use healthcheck.timeout", svc.Name, c)
		}
		if hc.Timeout == nil {
			t.Errorf("%s healthcheck has no timeout", svc.Name)
		}
	}
}

func TestComposeAppsWaitForHealthyInfrastructure(t *testing.T) {
	p := loadCompose(t, nil)
	for _, svc := range stack.Services {
		deps := p.Services[svc.Name].DependsOn
		for _, infra := range []string{"mysql", "rabbitmq"} {
			if got := deps[infra].Condition; got != "service_healthy" {
				t.Errorf("%s depends_on %s: condition %q, want service_healthy", svc.Name, infra, got)
			}
		}
	}
}

// TestComposePorts: the services on the ports scripts/up.sh uses, so that
// the walkthrough and the failure lab work unchanged, on 127.0.0.1 only.
func TestComposePorts(t *testing.T) {
	p := loadCompose(t, nil)
	want := []string{
		"rabbitmq 15672->15672", // management UI
		"rabbitmq 5672->5672",   // AMQP: the failure lab publishes duplicates
	}
	for _, svc := range stack.Services {
		want = append(want, fmt.Sprintf("%s %d->%d", svc.Name, svc.Port, svc.Port))
	}
	sort.Strings(want)
	var got []string
	for name, s := range p.Services {
		if len(s.Profiles) > 0 {
			continue
		}
		for _, port := range s.Ports {
			if port.HostIP != "127.0.0.1" {
				t.Errorf("%s publishes %s->%d on %q: bind it to 127.0.0.1 (demo mode exposes fault injection)", name, port.Published, port.Target, port.HostIP)
			}
			got = append(got, fmt.Sprintf("%s %s->%d", name, port.Published, port.Target))
		}
	}
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Errorf("published ports = %q, want %q", got, want)
	}
}

// The observability profile: Prometheus loads the alert rules and scrapes
// every service; the rules file parses and every alert names a metric the
// services export (checked against the metrics table of docs/operations.md elsewhere);
// Grafana gets the dashboard.
func TestObservabilityProfile(t *testing.T) {
	p := loadCompose(t, nil)
	for _, name := range []string{"prometheus", "grafana"} {
		s, ok := p.Services[name]
		if !ok || !slices.Contains(s.Profiles, "observability") {
			t.Fatalf("%s missing or not in the observability profile", name)
		}
		if s.HealthCheck == nil || len(s.HealthCheck.Test) == 0 {
			t.Errorf("%s has no healthcheck", name)
		}
	}
	prom := readFile(t, "deploy/prometheus/prometheus.yml")
	for _, target := range []string{"order:8081", "inventory:8082", "payment-fake:8083", "/etc/prometheus/alerts.yml"} {
		if !strings.Contains(prom, target) {
			t.Errorf("prometheus.yml does not mention %s", target)
		}
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, "deploy/prometheus/alerts.yml")), &rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("alert rule without a name or an expression: %+v", r)
			}
			n++
		}
	}
	if n < 8 {
		t.Errorf("%d alert rules, want one per metric that means someone must act", n)
	}
	if !json.Valid([]byte(readFile(t, "deploy/grafana/dashboards/ordersaga.json"))) {
		t.Error("the Grafana dashboard is not valid JSON")
	}
}
