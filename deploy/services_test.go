package deploy

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"

	"github.com/relmsg/ordersaga/internal/stack"
)

// The services docker compose starts, how it builds and restarts them,
// their health checks, dependencies and published ports, and the optional
// observability profile.

func TestComposeServices(t *testing.T) {
	p := loadCompose(t, nil)
	want := []string{"inventory", "jaeger", "mysql", "order", "payment-fake", "psp", "rabbitmq", "viewer"}
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

	for _, svc := range append(slices.Clone(stack.Services), stack.Viewer) {
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
		pkg := "./services/" + svc.Name
		if svc.Name == stack.Viewer.Name {
			pkg = "./cmd/viewer"
		}
		if got := s.Build.Args["PACKAGE"]; got == nil || *got != pkg {
			t.Errorf("%s: build arg PACKAGE = %v, want %q", svc.Name, got, pkg)
		}
		if _, err := os.Stat(filepath.Join(root, pkg, "main.go")); err != nil {
			t.Errorf("%s: build arg PACKAGE=%s names no main package: %v", svc.Name, pkg, err)
		}
		if s.Restart != "unless-stopped" {
			t.Errorf("%s: restart = %q, want unless-stopped (the failure lab crashes services and expects them back)", svc.Name, s.Restart)
		}
		// Docker's default 10 s would SIGKILL a service in the middle of
		// its graceful shutdown (SHUTDOWN_TIMEOUT, 15 s by default).
		if svc.Name != stack.Viewer.Name && (s.StopGracePeriod == nil || time.Duration(*s.StopGracePeriod) <= 15*time.Second) {
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
	for _, svc := range append(slices.Clone(stack.Services), stack.Viewer) {
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
		"jaeger 16686->16686",   // Jaeger's UI and query API (docs/tracing.md)
		"rabbitmq 15672->15672", // management UI
		"rabbitmq 5672->5672",   // AMQP: the failure lab publishes duplicates
	}
	for _, svc := range append(slices.Clone(stack.Services), stack.Viewer, stack.PSP) {
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

// The saga viewer (demo mode): the first instances' URLs, the lab's broker
// account, the settings scripts/up.sh gives it, on 127.0.0.1:8080 once the
// services are healthy.
func TestComposeViewer(t *testing.T) {
	example := loadEnvExample(t)
	p := loadCompose(t, nil)
	v := p.Services["viewer"]
	env := environment(p, "viewer")
	for k, want := range map[string]string{
		"VIEWER_ADDR":   "0.0.0.0:8080",
		"ORDER_URL":     "http://order:8081",
		"INVENTORY_URL": "http://inventory:8082",
		"PAYMENT_URL":   "http://payment-fake:8083",
		"DEMO_MODE":     example["DEMO_MODE"],
		"ADMIN_TOKEN":   example["ADMIN_TOKEN"],
		"LOG_LEVEL":     example["LOG_LEVEL"],
	} {
		if got, ok := env[k]; !ok || got != want {
			t.Errorf("viewer %s = %q, want %q", k, got, want)
		}
	}
	// The lab publishes duplicates to saga.events: the administrator of
	// deploy/provision.sh's definitions may (TestRabbitMQDefinitions).
	admin := environment(p, "rabbitmq")
	checkAMQP(t, env["LAB_AMQP_URL"], admin["RABBITMQ_ADMIN_USER"], admin["RABBITMQ_ADMIN_PASSWORD"], "rabbitmq:5672")
	local := stack.ViewerEnv(func(k string) string { return example[k] }, "127.0.0.1", nil)
	for _, k := range slices.Sorted(maps.Keys(local)) {
		if _, ok := env[k]; !ok {
			t.Errorf("scripts/up.sh gives the viewer %s; docker-compose.yml does not", k)
		}
	}
	for _, svc := range stack.Services {
		if got := v.DependsOn[svc.Name].Condition; got != "service_healthy" {
			t.Errorf("viewer depends_on %s: condition %q, want service_healthy", svc.Name, got)
		}
	}
	if v.Restart != "unless-stopped" {
		t.Errorf("viewer restart = %q, want unless-stopped", v.Restart)
	}
}

// The ha profile: three RabbitMQ nodes clustered by the image's own peer
// discovery, one after the other, with one cookie; a second instance of
// every service, like scripts/up.sh -n 2, with no fixed host port.
func TestComposeHAProfile(t *testing.T) {
	p := loadCompose(t, nil)
	checkHABrokerNodes(t, p)
	example := loadEnvExample(t)
	for _, svc := range stack.Services {
		checkHASecondInstance(t, p, example, svc)
	}
}

// inHAProfile is a service of the ha profile only.
func inHAProfile(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, ok := p.Services[name]
	if !ok || !slices.Equal(s.Profiles, []string{"ha"}) {
		t.Fatalf("%s missing or not in the ha profile only (profiles %v)", name, s.Profiles)
	}
	return s
}

// checkHABrokerNodes: the three nodes share rabbitmq's image, entrypoint
// and cookie, join one after the other, and cluster.conf names each.
func checkHABrokerNodes(t *testing.T, p *types.Project) {
	t.Helper()
	conf := readFile(t, "deploy/rabbitmq/cluster.conf")
	lines := nonEmptyLines(conf)
	if !slices.Contains(lines, "cluster_formation.peer_discovery_backend = classic_config") {
		t.Errorf("deploy/rabbitmq/cluster.conf does not use classic_config peer discovery:\n%s", conf)
	}
	first := p.Services["rabbitmq"]
	cookie := environment(p, "rabbitmq")["RABBITMQ_CLUSTER_COOKIE"]
	if cookie == "" {
		t.Error("rabbitmq has no RABBITMQ_CLUSTER_COOKIE: the other nodes could not join it")
	}
	previous := "rabbitmq"
	for i, name := range []string{"rabbitmq", "rabbitmq-2", "rabbitmq-3"} {
		s := first
		if name != "rabbitmq" {
			s = inHAProfile(t, p, name)
			if target, ro := bindMount(p, name, "deploy/rabbitmq/cluster.conf"); !strings.HasPrefix(target, "/etc/rabbitmq/conf.d/") || !ro {
				t.Errorf("%s mounts cluster.conf at %q (read-only %v), want /etc/rabbitmq/conf.d/, read-only", name, target, ro)
			}
			if got := s.DependsOn[previous].Condition; got != "service_healthy" {
				t.Errorf("%s depends_on %s: %q, want service_healthy (they join one after the other)", name, previous, got)
			}
			if s.Image != first.Image || !slices.Equal(s.Entrypoint, first.Entrypoint) || len(s.Ports) > 0 {
				t.Errorf("%s: image %q, entrypoint %q, ports %v; want rabbitmq's image and entrypoint, no published port", name, s.Image, s.Entrypoint, s.Ports)
			}
			if got := environment(p, name)["RABBITMQ_CLUSTER_COOKIE"]; got != cookie {
				t.Errorf("%s cookie %q, want rabbitmq's %q", name, got, cookie)
			}
			previous = name
		}
		// The node name is rabbit@<host name>, as peer discovery lists it.
		if want := fmt.Sprintf("cluster_formation.classic_config.nodes.%d = rabbit@%s", i+1, s.Hostname); !slices.Contains(lines, want) {
			t.Errorf("cluster.conf lacks %q", want)
		}
		if s.HealthCheck == nil || len(s.HealthCheck.Test) == 0 {
			t.Errorf("%s has no healthcheck", name)
		}
	}
}

// checkHASecondInstance: a service's second instance is built, started and
// set like its first, but for its identity and its own order of the nodes.
func checkHASecondInstance(t *testing.T, p *types.Project, example map[string]string, svc stack.Service) {
	t.Helper()
	name := svc.Instance(2).Name()
	s := inHAProfile(t, p, name)
	one := p.Services[svc.Name]
	if s.Build == nil || one.Build == nil || *s.Build.Args["PACKAGE"] != *one.Build.Args["PACKAGE"] || s.Restart != one.Restart {
		t.Errorf("%s is not built and restarted like %s", name, svc.Name)
	}
	for _, dep := range []string{"mysql", "rabbitmq", "rabbitmq-2", "rabbitmq-3"} {
		if got := s.DependsOn[dep].Condition; got != "service_healthy" {
			t.Errorf("%s depends_on %s: %q, want service_healthy", name, dep, got)
		}
	}
	if len(s.Ports) != 1 || s.Ports[0].Published != "" || s.Ports[0].HostIP != "127.0.0.1" || s.Ports[0].Target != uint32(svc.Port) {
		t.Errorf("%s ports %+v: want %d on 127.0.0.1 with no fixed host port (docker compose port %s %d)", name, s.Ports, svc.Port, name, svc.Port)
	}
	// The same settings as the first instance but its identity and its
	// order of the nodes (and of its peers' instances, checked in
	// TestComposeEnvironment): another one first.
	env, env1 := environment(p, name), environment(p, svc.Name)
	rotated := map[string]bool{"INSTANCE_ID": true, "AMQP_URL": true, "INVENTORY_URL": true, "PAYMENT_URL": true, "PSP_URL": true}
	for _, k := range slices.Sorted(maps.Keys(env1)) {
		if !rotated[k] && env[k] != env1[k] {
			t.Errorf("%s %s = %q, want %s's %q", name, k, env[k], svc.Name, env1[k])
		}
	}
	if env["INSTANCE_ID"] != svc.Instance(2).ID() {
		t.Errorf("%s INSTANCE_ID = %q, want %q", name, env["INSTANCE_ID"], svc.Instance(2).ID())
	}
	// Every node, in the ring's order, starting from one of the ha
	// profile's nodes (the first instances start from rabbitmq).
	first := -1
	for k := range haNodes {
		if strings.Contains(strings.Split(env["AMQP_URL"], ",")[0], "@"+haNodes[k]+"/") {
			first = k
		}
	}
	if first <= 0 {
		t.Errorf("%s AMQP_URL = %q: want it to start from rabbitmq-2 or rabbitmq-3", name, env["AMQP_URL"])
		return
	}
	checkAMQP(t, env["AMQP_URL"], example[svc.Key+"_AMQP_USER"], example[svc.Key+"_AMQP_PASSWORD"], stack.Rotate(haNodes, first)...)
}
