package deploy

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.yaml.in/yaml/v3"

	"github.com/relmsg/ordersaga/pkg/process"
)

// No Docker engine runs where these tests run, so they check the compose
// stack by reading it: docker-compose.yml (interpolated the way compose
// does), the Dockerfile, .dockerignore, and the two provisioning scripts
// run in their print modes. The reference for "the same system" is
// scripts/up.sh, .env.example and pkg/process's configuration loader.

// root is the repository root, relative to this package's directory (where
// go test runs).
const root = ".."

// app is one of the three services as scripts/up.sh knows it.
type app struct {
	name string // compose service name = directory under services/
	key  string // settings prefix: ORDER_DB_USER, ...
	db   string // schema
	port string // HTTP port
}

var apps = []app{
	{name: "order", key: "ORDER", db: "order_service", port: "8081"},
	{name: "inventory", key: "INVENTORY", db: "inventory_service", port: "8082"},
	{name: "payment-fake", key: "PAYMENT", db: "payment_service", port: "8083"},
}

// composeOnly are the variables docker-compose.yml reads that .env.example
// does not list (scripts/up.sh does not need them), with the reason.
var composeOnly = map[string]string{
	"RABBITMQ_ADMIN_USER":     "management UI user (the local broker has guest already)",
	"RABBITMQ_ADMIN_PASSWORD": "management UI password",
}

// ---------------------------------------------------------------- the tests

func TestComposeServices(t *testing.T) {
	cf := loadCompose(t, nil)
	want := []string{"inventory", "mysql", "order", "payment-fake", "rabbitmq"}
	var got []string
	for name, s := range cf.Services {
		if len(s.Profiles) == 0 { // optional profiles (observability) do not start by default
			got = append(got, name)
		}
	}
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Fatalf("services started by default = %v, want %v", got, want)
	}

	if img := cf.Services["mysql"].Image; img != "mysql:8.4" {
		t.Errorf("mysql image = %q, want mysql:8.4 (the 8.4 LTS docs/contract.md names)", img)
	}
	rabbit := cf.Services["rabbitmq"].Image
	if m := regexp.MustCompile(`^rabbitmq:(\d+)\.(\d+)(?:\.\d+)?-management$`).FindStringSubmatch(rabbit); m == nil {
		t.Errorf("rabbitmq image = %q, want rabbitmq:<major>.<minor>-management (the management UI is published)", rabbit)
	} else {
		major, _ := strconv.Atoi(m[1])
		minor, _ := strconv.Atoi(m[2])
		if major < 3 || major == 3 && minor < 13 {
			t.Errorf("rabbitmq image = %q, want 3.13 or newer", rabbit)
		}
	}

	for _, a := range apps {
		s := cf.Services[a.name]
		if s.Build == nil {
			t.Errorf("%s: no build section: the services are built from the Dockerfile", a.name)
			continue
		}
		if s.Build.Context != "." {
			t.Errorf("%s: build context = %q, want . (the repository root)", a.name, s.Build.Context)
		}
		if s.Build.Dockerfile != "" && s.Build.Dockerfile != "Dockerfile" {
			t.Errorf("%s: dockerfile = %q, want the one Dockerfile", a.name, s.Build.Dockerfile)
		}
		if got := s.Build.Args["SERVICE"]; got != a.name {
			t.Errorf("%s: build arg SERVICE = %q, want %q", a.name, got, a.name)
		}
		if _, err := os.Stat(filepath.Join(root, "services", a.name, "main.go")); err != nil {
			t.Errorf("%s: build arg SERVICE=%s names no main package: %v", a.name, a.name, err)
		}
		if s.Restart != "unless-stopped" {
			t.Errorf("%s: restart = %q, want unless-stopped (the failure lab crashes services and expects them back)", a.name, s.Restart)
		}
		// Docker's default 10 s would SIGKILL a service in the middle of
		// its graceful shutdown (SHUTDOWN_TIMEOUT, 15 s by default).
		if d, err := time.ParseDuration(s.StopGracePeriod); err != nil || d <= 15*time.Second {
			t.Errorf("%s: stop_grace_period = %q, want more than the 15s SHUTDOWN_TIMEOUT", a.name, s.StopGracePeriod)
		}
	}
}

func TestComposeHealthchecks(t *testing.T) {
	cf := loadCompose(t, nil)
	for name, s := range cf.Services {
		if len(s.Profiles) > 0 {
			continue
		}
		hc := s.Healthcheck
		if hc == nil || hc.Disable || len(hc.Test) == 0 || hc.Test[0] == "NONE" {
			t.Errorf("%s: no healthcheck", name)
			continue
		}
		if hc.Test[0] != "CMD" && hc.Test[0] != "CMD-SHELL" {
			t.Errorf("%s: healthcheck test %q: want CMD or CMD-SHELL first", name, hc.Test)
		}
	}

	cmd := func(name string) string {
		if hc := cf.Services[name].Healthcheck; hc != nil {
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
	for _, a := range apps {
		want := "http://127.0.0.1:" + a.port + "/readyz"
		c := cmd(a.name)
		if !strings.Contains(c, want) {
			t.Errorf("%s healthcheck %q: want a GET of %s", a.name, c, want)
		}
		// The final image has busybox wget, and no curl.
		if tool := cf.Services[a.name].Healthcheck.Test[1]; tool != "wget" {
			t.Errorf("%s healthcheck runs %q: the service image has busybox wget, not that", a.name, tool)
		}
		// busybox wget built without FEATURE_WGET_TIMEOUT crashes on -T;
		// the healthcheck's own timeout bounds the request instead.
		if slices.Contains(cf.Services[a.name].Healthcheck.Test, "-T") {
			t.Errorf("%s healthcheck %q: drop wget -T (a segfault on some busybox builds); use healthcheck.timeout", a.name, c)
		}
		if cf.Services[a.name].Healthcheck.Timeout == "" {
			t.Errorf("%s healthcheck has no timeout", a.name)
		}
	}
}

func TestComposeAppsWaitForHealthyInfrastructure(t *testing.T) {
	cf := loadCompose(t, nil)
	for _, a := range apps {
		deps := cf.Services[a.name].DependsOn
		for _, infra := range []string{"mysql", "rabbitmq"} {
			if got := deps[infra]; got != "service_healthy" {
				t.Errorf("%s depends_on %s: condition %q, want service_healthy", a.name, infra, got)
			}
		}
	}
}

func TestComposeAppEnvironment(t *testing.T) {
	example := loadEnvExample(t)
	cf := loadCompose(t, nil)
	for _, a := range apps {
		t.Run(a.name, func(t *testing.T) {
			env := cf.Services[a.name].Environment
			required := []string{"HTTP_ADDR", "MYSQL_DSN", "AMQP_URL", "DEMO_MODE", "ADMIN_TOKEN", "MYSQL_CREATE_DATABASE", "LOG_LEVEL", "OUTBOX_LEASE", "FAILPOINTS"}
			if a.name == "payment-fake" {
				required = append(required, "PSP_URL")
			}
			for _, k := range required {
				if _, ok := env[k]; !ok {
					t.Errorf("environment has no %s", k)
				}
			}
			checks := []struct{ key, want string }{
				{"HTTP_ADDR", ":" + a.port},
				{"MYSQL_CREATE_DATABASE", "false"}, // the schemas come from deploy/mysql/init.sh
				{"DEMO_MODE", example["DEMO_MODE"]},
				{"LOG_LEVEL", example["LOG_LEVEL"]},
				{"OUTBOX_LEASE", "5s"},
				{"FAILPOINTS", example[a.key+"_FAILPOINTS"]},
			}
			for _, c := range checks {
				if got := env[c.key]; got != c.want {
					t.Errorf("%s = %q, want %q", c.key, got, c.want)
				}
			}
			if got, want := env["ADMIN_TOKEN"], example["ADMIN_TOKEN"]; got != want {
				t.Errorf("ADMIN_TOKEN = %q, want .env.example's %q (the same as scripts/up.sh)", got, want)
			}
			checkDSN(t, env["MYSQL_DSN"], example[a.key+"_DB_USER"], example[a.key+"_DB_PASSWORD"], a.db)
			checkAMQP(t, env["AMQP_URL"], example[a.key+"_AMQP_USER"], example[a.key+"_AMQP_PASSWORD"])

			// What the service itself makes of it: the shared loader
			// must accept every value.
			senv := process.NewEnv(func(k string) string { return env[k] })
			cfg := process.Load(senv, a.name, ":"+a.port, a.db)
			if err := senv.Err(); err != nil {
				t.Fatalf("pkg/process rejects the compose environment: %v", err)
			}
			if cfg.CreateDatabase || !cfg.DemoMode || cfg.OutboxLease != 5*time.Second {
				t.Errorf("loaded config: CreateDatabase=%v DemoMode=%v OutboxLease=%s, want false, true, 5s", cfg.CreateDatabase, cfg.DemoMode, cfg.OutboxLease)
			}
		})
	}

	// Only the payment service talks to the PSP, which lives on its own
	// listener; the order service finds the others by their compose names.
	if got := cf.Services["payment-fake"].Environment["PSP_URL"]; got != "http://127.0.0.1:8083/psp" {
		t.Errorf("payment-fake PSP_URL = %q, want http://127.0.0.1:8083/psp", got)
	}
	order := cf.Services["order"].Environment
	for k, want := range map[string]string{"INVENTORY_URL": "http://inventory:8082", "PAYMENT_URL": "http://payment-fake:8083"} {
		if got := order[k]; got != want {
			t.Errorf("order %s = %q, want %q", k, got, want)
		}
	}
}

// TestComposeSettingsAreWired sets every variable of .env.example (as a
// .env file would) to a distinct value and follows each one to where it
// must arrive: the MySQL and RabbitMQ provisioning and the service that owns
// it, and nowhere else.
func TestComposeSettingsAreWired(t *testing.T) {
	example := loadEnvExample(t)
	env := map[string]string{}
	for k := range example {
		env[k] = "v_" + strings.ToLower(k)
	}
	env["DEMO_MODE"] = "false"
	env["LOG_LEVEL"] = "debug"
	for _, a := range apps {
		env[a.key+"_FAILPOINTS"] = "outbox.dispatch.after-claim=error*" + a.port
	}
	env["ADMIN_TOKEN"] = "t0ken"
	cf := loadCompose(t, env)

	mysqlEnv := cf.Services["mysql"].Environment
	rabbitEnv := cf.Services["rabbitmq"].Environment
	if got := mysqlEnv["MYSQL_ROOT_PASSWORD"]; got != env["MYSQL_ROOT_PASSWORD"] {
		t.Errorf("mysql MYSQL_ROOT_PASSWORD = %q, want the .env value %q", got, env["MYSQL_ROOT_PASSWORD"])
	}
	for _, a := range apps {
		for _, k := range []string{a.key + "_DB_USER", a.key + "_DB_PASSWORD"} {
			if got := mysqlEnv[k]; got != env[k] {
				t.Errorf("mysql %s = %q, want %q", k, got, env[k])
			}
		}
		for _, k := range []string{a.key + "_AMQP_USER", a.key + "_AMQP_PASSWORD"} {
			if got := rabbitEnv[k]; got != env[k] {
				t.Errorf("rabbitmq %s = %q, want %q", k, got, env[k])
			}
		}
		s := cf.Services[a.name].Environment
		checkDSN(t, s["MYSQL_DSN"], env[a.key+"_DB_USER"], env[a.key+"_DB_PASSWORD"], a.db)
		checkAMQP(t, s["AMQP_URL"], env[a.key+"_AMQP_USER"], env[a.key+"_AMQP_PASSWORD"])
		for k, want := range map[string]string{
			"FAILPOINTS":  env[a.key+"_FAILPOINTS"],
			"DEMO_MODE":   "false",
			"LOG_LEVEL":   "debug",
			"ADMIN_TOKEN": "t0ken",
		} {
			if got := s[k]; got != want {
				t.Errorf("%s %s = %q, want %q", a.name, k, got, want)
			}
		}
	}
}

func TestComposePorts(t *testing.T) {
	cf := loadCompose(t, nil)
	want := []string{
		"inventory 8082->8082",
		"order 8081->8081",
		"payment-fake 8083->8083",
		"rabbitmq 15672->15672", // management UI
		"rabbitmq 5672->5672",   // AMQP: the failure lab publishes duplicates
	}
	var got []string
	for name, s := range cf.Services {
		if len(s.Profiles) > 0 {
			continue
		}
		for _, p := range s.Ports {
			if p.HostIP != "127.0.0.1" {
				t.Errorf("%s publishes %s->%s on %q: bind it to 127.0.0.1 (demo mode exposes fault injection)", name, p.Published, p.Target, p.HostIP)
			}
			got = append(got, fmt.Sprintf("%s %s->%s", name, p.Published, p.Target))
		}
	}
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Errorf("published ports = %q, want %q", got, want)
	}
}

// TestComposeMatchesEnvExample: the same variable names and demo defaults
// as .env.example, which scripts/up.sh reads.
func TestComposeMatchesEnvExample(t *testing.T) {
	example := loadEnvExample(t)
	refs := composeRefs(t)

	defaults := map[string]string{}
	for _, r := range refs {
		if r.op != ":-" {
			t.Errorf("${%s%s%s}: want ${%s:-default}, so that docker compose up works without a .env", r.name, r.op, r.def, r.name)
			continue
		}
		if d, ok := defaults[r.name]; ok && d != r.def {
			t.Errorf("%s has two defaults in docker-compose.yml: %q and %q", r.name, d, r.def)
		}
		defaults[r.name] = r.def
	}

	for k, v := range example {
		d, ok := defaults[k]
		switch {
		case !ok:
			t.Errorf(".env.example sets %s but docker-compose.yml never reads it", k)
		case k == "MYSQL_ROOT_PASSWORD":
			// Empty for the local development server; the mysql image
			// needs a root password, and ":-" turns the empty value of a
			// copied .env.example into this default.
			if d == "" {
				t.Errorf("MYSQL_ROOT_PASSWORD has an empty default in docker-compose.yml: the mysql image refuses to initialize without one")
			}
		case d != v:
			t.Errorf("%s: docker-compose.yml default %q, .env.example %q", k, d, v)
		}
	}
	for k := range defaults {
		if _, ok := example[k]; ok {
			continue
		}
		if _, ok := composeOnly[k]; !ok {
			t.Errorf("docker-compose.yml reads %s, which is not in .env.example: add it there or to composeOnly with a reason (and to the README)", k)
		}
	}
}

// TestComposeMatchesUpScript: the service table, and every variable that
// scripts/up.sh gives a service, compose gives it too.
func TestComposeMatchesUpScript(t *testing.T) {
	up := readFile(t, "scripts/up.sh")
	for _, a := range apps {
		for fn, want := range map[string]string{"svc_port": a.port, "svc_key": a.key, "svc_db": a.db} {
			if got := upCase(t, up, fn, a.name); got != want {
				t.Errorf("scripts/up.sh %s %s = %q, the compose test expects %q", fn, a.name, got, want)
			}
		}
	}

	exported := upExports(t, up)
	cf := loadCompose(t, nil)
	for _, a := range apps {
		env := cf.Services[a.name].Environment
		for _, k := range exported[a.name] {
			if _, ok := env[k]; !ok {
				t.Errorf("scripts/up.sh gives %s %s; docker-compose.yml does not", a.name, k)
			}
		}
	}
}

func TestMySQLInitScript(t *testing.T) {
	cf := loadCompose(t, nil)
	my := cf.Services["mysql"]
	mounted := false
	for _, v := range my.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && filepath.Clean(parts[0]) == "deploy/mysql/init.sh" {
			mounted = true
			if !strings.HasPrefix(parts[1], "/docker-entrypoint-initdb.d/") || !strings.HasSuffix(parts[1], ".sh") {
				t.Errorf("init.sh is mounted at %s: want /docker-entrypoint-initdb.d/<name>.sh", parts[1])
			}
			if len(parts) < 3 || parts[2] != "ro" {
				t.Errorf("init.sh mount %q: want read-only", v)
			}
		}
	}
	if !mounted {
		t.Fatalf("mysql volumes %q: deploy/mysql/init.sh is not mounted", my.Volumes)
	}

	sql, err := runScript(t, "deploy/mysql/init.sh", my.Environment, nil, "ORDERSAGA_INIT_DRY_RUN=1")
	if err != nil {
		t.Fatalf("deploy/mysql/init.sh (dry run): %v", err)
	}
	example := loadEnvExample(t)
	up := readFile(t, "scripts/up.sh")
	charset := regexp.MustCompile("CREATE DATABASE IF NOT EXISTS \\S+ (CHARACTER SET \\w+ COLLATE \\w+);").FindStringSubmatch(up)
	if charset == nil {
		t.Fatal("scripts/up.sh: no CREATE DATABASE ... CHARACTER SET ... COLLATE ... statement found")
	}
	if !strings.Contains(up, "GRANT ALL PRIVILEGES ON \\`${db//_/\\\\_}\\`.* TO $user@$host;") {
		t.Fatal("scripts/up.sh: its GRANT statement changed; update this test and deploy/mysql/init.sh together")
	}

	var want []string
	for _, a := range apps {
		user := sqlStr(example[a.key+"_DB_USER"])
		pw := sqlStr(example[a.key+"_DB_PASSWORD"])
		want = append(want,
			fmt.Sprintf("CREATE DATABASE IF NOT EXISTS `%s` %s;", a.db, charset[1]),
			fmt.Sprintf("CREATE USER IF NOT EXISTS %s@'%%' IDENTIFIED BY %s;", user, pw),
			fmt.Sprintf("ALTER USER %s@'%%' IDENTIFIED BY %s;", user, pw),
			fmt.Sprintf("GRANT ALL PRIVILEGES ON `%s`.* TO %s@'%%';", strings.ReplaceAll(a.db, "_", `\_`), user),
		)
	}
	got := nonEmptyLines(sql)
	if !slices.Equal(got, want) {
		t.Errorf("init SQL:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, line := range got {
		if strings.Contains(line, "*.*") || strings.Contains(line, "GRANT OPTION") {
			t.Errorf("init SQL %q: a service user gets rights on its own schema only", line)
		}
	}

	t.Run("quoting", func(t *testing.T) {
		env := maps.Clone(my.Environment)
		env["ORDER_DB_PASSWORD"] = `it's a \ "pw"`
		sql, err := runScript(t, "deploy/mysql/init.sh", env, nil, "ORDERSAGA_INIT_DRY_RUN=1")
		if err != nil {
			t.Fatal(err)
		}
		if want := `IDENTIFIED BY 'it''s a \\ "pw"';`; !strings.Contains(sql, want) {
			t.Errorf("init SQL does not quote the password as %s:\n%s", want, sql)
		}
	})
	t.Run("bad settings", func(t *testing.T) {
		for name, change := range map[string]map[string]string{
			"bad user name":  {"ORDER_DB_USER": "order svc"},
			"empty password": {"PAYMENT_DB_PASSWORD": ""},
			"shared user":    {"INVENTORY_DB_USER": example["ORDER_DB_USER"]},
		} {
			env := maps.Clone(my.Environment)
			for k, v := range change {
				env[k] = v
			}
			if out, err := runScript(t, "deploy/mysql/init.sh", env, nil, "ORDERSAGA_INIT_DRY_RUN=1"); err == nil {
				t.Errorf("%s: init.sh succeeded, want a failure (it printed %q)", name, out)
			}
		}
	})
}

func TestRabbitMQDefinitions(t *testing.T) {
	cf := loadCompose(t, nil)
	rb := cf.Services["rabbitmq"]
	script := ""
	for _, v := range rb.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && filepath.Clean(parts[0]) == "deploy/rabbitmq/entrypoint.sh" {
			script = parts[1]
		}
	}
	if script == "" {
		t.Fatalf("rabbitmq volumes %q: deploy/rabbitmq/entrypoint.sh is not mounted", rb.Volumes)
	}
	if !slices.Contains(rb.Entrypoint, script) {
		t.Errorf("rabbitmq entrypoint %q does not run %s", rb.Entrypoint, script)
	}
	// Overriding the entrypoint clears the image's command.
	if !slices.Equal(rb.Command, []string{"rabbitmq-server"}) {
		t.Errorf("rabbitmq command = %q, want [rabbitmq-server]", rb.Command)
	}
	if rb.Hostname == "" {
		t.Error("rabbitmq has no fixed hostname: the node name (and its data volume) would change with each container")
	}

	out, err := runScript(t, "deploy/rabbitmq/entrypoint.sh", rb.Environment, []string{"print-definitions"})
	if err != nil {
		t.Fatalf("deploy/rabbitmq/entrypoint.sh print-definitions: %v", err)
	}
	defs := parseDefinitions(t, out)
	if len(defs.VHosts) != 1 || defs.VHosts[0].Name != "/" {
		t.Errorf("vhosts = %+v, want only /", defs.VHosts)
	}

	example := loadEnvExample(t)
	type user struct{ password, tags string }
	want := map[string]user{
		rb.Environment["RABBITMQ_ADMIN_USER"]: {rb.Environment["RABBITMQ_ADMIN_PASSWORD"], "administrator"},
	}
	for _, a := range apps {
		want[example[a.key+"_AMQP_USER"]] = user{example[a.key+"_AMQP_PASSWORD"], ""}
	}
	got := map[string]user{}
	for _, u := range defs.Users {
		got[u.Name] = user{u.Password, strings.Join(u.Tags, ",")}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("users = %v, want %v", got, want)
	}
	perms := map[string]string{}
	for _, p := range defs.Permissions {
		perms[p.User] = fmt.Sprintf("%s %s %s %s", p.VHost, p.Configure, p.Write, p.Read)
	}
	for name := range want {
		if got := perms[name]; got != "/ .* .* .*" {
			t.Errorf("permissions of %s = %q, want configure/write/read .* on /", name, got)
		}
	}
	if len(perms) != len(want) {
		t.Errorf("permissions for %d users, want %d", len(perms), len(want))
	}

	t.Run("quoting", func(t *testing.T) {
		env := maps.Clone(rb.Environment)
		pw := `a "quoted" \ pw %s`
		env["PAYMENT_AMQP_PASSWORD"] = pw
		out, err := runScript(t, "deploy/rabbitmq/entrypoint.sh", env, []string{"print-definitions"})
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range parseDefinitions(t, out).Users {
			if u.Name == env["PAYMENT_AMQP_USER"] && u.Password != pw {
				t.Errorf("password round trip: got %q, want %q", u.Password, pw)
			}
		}
	})
	t.Run("bad settings", func(t *testing.T) {
		for name, change := range map[string]map[string]string{
			"bad user name":  {"ORDER_AMQP_USER": "order/svc"},
			"empty password": {"INVENTORY_AMQP_PASSWORD": ""},
			"shared user":    {"PAYMENT_AMQP_USER": example["ORDER_AMQP_USER"]},
		} {
			env := maps.Clone(rb.Environment)
			for k, v := range change {
				env[k] = v
			}
			if out, err := runScript(t, "deploy/rabbitmq/entrypoint.sh", env, []string{"print-definitions"}); err == nil {
				t.Errorf("%s: entrypoint.sh succeeded, want a failure (it printed %q)", name, out)
			}
		}
	})
}

// TestRabbitMQEntrypointBoot runs the entrypoint's real path with a
// temporary configuration directory and a stand-in for the image's
// docker-entrypoint.sh.
func TestRabbitMQEntrypointBoot(t *testing.T) {
	cf := loadCompose(t, nil)
	rb := cf.Services["rabbitmq"]
	etc := t.TempDir()
	if err := os.Mkdir(filepath.Join(etc, "conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	fake := "#!/bin/sh\necho \"image entrypoint: $*\"\n"
	if err := os.WriteFile(filepath.Join(bin, "docker-entrypoint.sh"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	env := maps.Clone(rb.Environment)
	env["ORDERSAGA_RABBITMQ_ETC"] = etc
	env["PATH"] = bin + string(os.PathListSeparator) + os.Getenv("PATH")
	out, err := runScript(t, "deploy/rabbitmq/entrypoint.sh", env, rb.Command)
	if err != nil {
		t.Fatal(err)
	}
	if want := "image entrypoint: " + strings.Join(rb.Command, " "); !strings.Contains(out, want) {
		t.Errorf("output %q: want the image's entrypoint run with the compose command (%q)", out, want)
	}

	defsPath := filepath.Join(etc, "ordersaga-definitions.json")
	conf := readAbs(t, filepath.Join(etc, "conf.d", "90-ordersaga.conf"))
	for _, want := range []string{"definitions.import_backend = local_filesystem", "definitions.local.path = " + defsPath} {
		if !strings.Contains(conf, want) {
			t.Errorf("conf.d/90-ordersaga.conf = %q: want the line %q", conf, want)
		}
	}
	defs := parseDefinitions(t, readAbs(t, defsPath))
	if len(defs.Users) != len(apps)+1 {
		t.Errorf("definitions file has %d users, want %d", len(defs.Users), len(apps)+1)
	}
	if fi, err := os.Stat(defsPath); err != nil {
		t.Fatal(err)
	} else if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		t.Errorf("definitions file mode %v: it holds passwords, want it private to its owner", perm)
	}
}

func TestDockerfile(t *testing.T) {
	stages := parseDockerfile(t, readFile(t, "Dockerfile"))
	if len(stages) < 2 {
		t.Fatalf("%d stage(s): want a multi-stage build (compile, then a small runtime image)", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]
	if !strings.HasPrefix(build.from, "golang:1.26") {
		t.Errorf("build stage FROM %s, want golang:1.26 (go.mod's toolchain)", build.from)
	}
	if build.name == "" {
		t.Error("build stage has no name (FROM ... AS build)")
	}
	if !slices.Contains(build.args, "SERVICE") {
		t.Error("build stage has no ARG SERVICE selecting the package to build")
	}
	var goBuild string
	for _, r := range build.runs {
		if strings.Contains(r, "go build") {
			goBuild = r
		}
	}
	switch {
	case goBuild == "":
		t.Error("build stage runs no go build")
	case !strings.Contains(goBuild, "CGO_ENABLED=0"):
		t.Errorf("go build without CGO_ENABLED=0 (a static binary for the small image): %s", goBuild)
	case !strings.Contains(goBuild, "./services/${SERVICE}"):
		t.Errorf("go build does not build ./services/${SERVICE}: %s", goBuild)
	}

	if strings.HasPrefix(final.from, "golang") {
		t.Errorf("final stage FROM %s: want a small runtime image", final.from)
	}
	// The compose healthcheck runs wget: busybox has it, distroless not.
	if !strings.HasPrefix(final.from, "alpine:") && !strings.HasPrefix(final.from, "busybox:") {
		t.Errorf("final stage FROM %s: the healthcheck needs wget (alpine or busybox)", final.from)
	}
	switch u := strings.SplitN(final.user, ":", 2)[0]; u {
	case "", "root", "0":
		t.Errorf("final stage USER %q: want a non-root user", final.user)
	}
	if !slices.ContainsFunc(final.copies, func(c string) bool { return strings.Contains(c, "--from="+build.name) }) {
		t.Errorf("final stage copies nothing from the %q stage", build.name)
	}
	// The crash failpoint SIGKILLs its own process, which the kernel
	// ignores for the PID 1 of a namespace: the service must not be PID 1.
	if !strings.Contains(final.entrypoint, "tini") {
		t.Errorf("ENTRYPOINT %s: want an init (tini) as PID 1 so that the crash failpoint can kill the service", final.entrypoint)
	}
}

func TestDockerignore(t *testing.T) {
	patterns := map[string]bool{}
	for _, l := range nonEmptyLines(readFile(t, ".dockerignore")) {
		if !strings.HasPrefix(l, "#") {
			patterns[strings.TrimPrefix(l, "/")] = true
		}
	}
	for _, p := range []string{".git", ".env", "bin", ".run"} {
		if !patterns[p] {
			t.Errorf(".dockerignore does not exclude %s", p)
		}
	}
	for _, p := range []string{"go.mod", "go.sum", "services", "pkg", "migrations", "internal"} {
		for pat := range patterns {
			if ok, _ := filepath.Match(pat, p); ok || pat == p {
				t.Errorf(".dockerignore pattern %q excludes %s, which the build needs", pat, p)
			}
		}
	}
}

// ------------------------------------------------------------ compose file

type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image           string       `yaml:"image"`
	Build           *build       `yaml:"build"`
	Hostname        string       `yaml:"hostname"`
	Restart         string       `yaml:"restart"`
	StopGracePeriod string       `yaml:"stop_grace_period"`
	Entrypoint      stringList   `yaml:"entrypoint"`
	Command         stringList   `yaml:"command"`
	Environment     envMap       `yaml:"environment"`
	Volumes         []string     `yaml:"volumes"`
	Ports           []port       `yaml:"ports"`
	DependsOn       dependsOn    `yaml:"depends_on"`
	Healthcheck     *healthcheck `yaml:"healthcheck"`
	Profiles        []string     `yaml:"profiles"`
}

type build struct {
	Context    string            `yaml:"context"`
	Dockerfile string            `yaml:"dockerfile"`
	Args       map[string]string `yaml:"args"`
}

type healthcheck struct {
	Test    stringList `yaml:"test"`
	Disable bool       `yaml:"disable"`
	Timeout string     `yaml:"timeout"`
}

// stringList is a command: a list, or a string (split on blanks).
type stringList []string

func (l *stringList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*l = strings.Fields(n.Value)
		return nil
	}
	var s []string
	err := n.Decode(&s)
	*l = s
	return err
}

// envMap is an environment section, as a map or as KEY=VALUE items.
type envMap map[string]string

func (e *envMap) UnmarshalYAML(n *yaml.Node) error {
	m := envMap{}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			m[n.Content[i].Value] = n.Content[i+1].Value
		}
	case yaml.SequenceNode:
		for _, item := range n.Content {
			k, v, _ := strings.Cut(item.Value, "=")
			m[k] = v
		}
	default:
		return fmt.Errorf("line %d: environment must be a map or a list", n.Line)
	}
	*e = m
	return nil
}

// dependsOn maps a dependency to its condition ("" in the short form).
type dependsOn map[string]string

func (d *dependsOn) UnmarshalYAML(n *yaml.Node) error {
	m := dependsOn{}
	switch n.Kind {
	case yaml.SequenceNode:
		for _, item := range n.Content {
			m[item.Value] = ""
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			var dep struct {
				Condition string `yaml:"condition"`
			}
			if err := n.Content[i+1].Decode(&dep); err != nil {
				return err
			}
			m[n.Content[i].Value] = dep.Condition
		}
	default:
		return fmt.Errorf("line %d: depends_on must be a list or a map", n.Line)
	}
	*d = m
	return nil
}

// port is one published port, from the short ("ip:host:container") or the
// long syntax.
type port struct {
	HostIP, Published, Target string
}

func (p *port) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.MappingNode {
		var long struct {
			HostIP    string `yaml:"host_ip"`
			Published string `yaml:"published"`
			Target    string `yaml:"target"`
		}
		if err := n.Decode(&long); err != nil {
			return err
		}
		*p = port{long.HostIP, long.Published, long.Target}
		return nil
	}
	s, _, _ := strings.Cut(n.Value, "/") // "/tcp"
	parts := strings.Split(s, ":")
	switch len(parts) {
	case 1:
		*p = port{Target: parts[0]} // a random host port on every interface
	case 2:
		*p = port{Published: parts[0], Target: parts[1]}
	case 3:
		*p = port{HostIP: parts[0], Published: parts[1], Target: parts[2]}
	default:
		return fmt.Errorf("line %d: port %q: want [ip:]host:container", n.Line, n.Value)
	}
	return nil
}

// loadCompose parses docker-compose.yml and interpolates it with env (nil:
// no .env file, no variable set) the way docker compose does: in values
// only, after parsing.
func loadCompose(t *testing.T, env map[string]string) composeFile {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(readFile(t, "docker-compose.yml")), &doc); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	if err := walkScalars(&doc, func(n *yaml.Node) error {
		v, _, err := interpolate(n.Value, env)
		if err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		n.Value = v
		return nil
	}); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	var cf composeFile
	if err := doc.Decode(&cf); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return cf
}

// composeRefs lists every ${...} reference of docker-compose.yml.
func composeRefs(t *testing.T) []ref {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(readFile(t, "docker-compose.yml")), &doc); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	var refs []ref
	if err := walkScalars(&doc, func(n *yaml.Node) error {
		_, r, err := interpolate(n.Value, nil)
		refs = append(refs, r...)
		return err
	}); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	if len(refs) == 0 {
		t.Fatal("docker-compose.yml reads no variable")
	}
	return refs
}

func walkScalars(n *yaml.Node, f func(*yaml.Node) error) error {
	if n.Kind == yaml.ScalarNode {
		return f(n)
	}
	for _, c := range n.Content {
		if err := walkScalars(c, f); err != nil {
			return err
		}
	}
	return nil
}

// ref is one variable reference: ${name}, ${name:-def}, ${name-def}, ...
type ref struct{ name, op, def string }

var refRE = regexp.MustCompile(`^\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))`)

// interpolate expands s as compose does for the forms this repository uses
// ($$, $NAME, ${NAME}, ${NAME:-default}, ${NAME-default}); an unset name
// is not in env, an empty one maps to "".
func interpolate(s string, env map[string]string) (string, []ref, error) {
	var b strings.Builder
	var refs []ref
	for i := 0; i < len(s); {
		if s[i] != '$' {
			b.WriteByte(s[i])
			i++
			continue
		}
		if strings.HasPrefix(s[i:], "$$") {
			b.WriteByte('$')
			i += 2
			continue
		}
		m := refRE.FindStringSubmatch(s[i:])
		if m == nil {
			return "", nil, fmt.Errorf("unsupported $ in %q", s)
		}
		r := ref{name: m[1], op: m[2], def: m[3]}
		if m[4] != "" {
			r = ref{name: m[4]}
		}
		refs = append(refs, r)
		v, set := env[r.name]
		switch r.op {
		case "":
		case ":-":
			if v == "" {
				v = r.def
			}
		case "-":
			if !set {
				v = r.def
			}
		default:
			return "", nil, fmt.Errorf("${%s%s...}: form not handled by this test", r.name, r.op)
		}
		b.WriteString(v)
		i += len(m[0])
	}
	return b.String(), refs, nil
}

// ---------------------------------------------------------- other sources

// loadEnvExample reads .env.example as scripts/up.sh does: KEY=VALUE lines,
// comments and blank lines skipped.
func loadEnvExample(t *testing.T) map[string]string {
	t.Helper()
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(readFile(t, ".env.example")))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok {
			t.Fatalf(".env.example:%d: want KEY=VALUE, got %q", n, line)
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		m[strings.TrimSpace(k)] = v
	}
	if len(m) == 0 {
		t.Fatal(".env.example sets nothing")
	}
	return m
}

// upCase reads one arm of a scripts/up.sh lookup function such as
//
//	svc_db() {
//		case $1 in order) echo order_service ;; ... esac
//	}
func upCase(t *testing.T, up, fn, svc string) string {
	t.Helper()
	body := regexp.MustCompile(`(?m)^` + fn + `\(\) \{\n\s*case \$1 in (.*) esac`).FindStringSubmatch(up)
	if body == nil {
		t.Fatalf("scripts/up.sh: no %s() lookup function", fn)
	}
	m := regexp.MustCompile(`(?:^|;; )` + regexp.QuoteMeta(svc) + `\) echo (\S+) ;;`).FindStringSubmatch(body[1])
	if m == nil {
		t.Fatalf("scripts/up.sh: %s has no arm for %s", fn, svc)
	}
	return m[1]
}

// upExports lists, per service, the variables start_service in
// scripts/up.sh exports to it.
func upExports(t *testing.T, up string) map[string][]string {
	t.Helper()
	start := strings.Index(up, "\nstart_service() {")
	if start < 0 {
		t.Fatal("scripts/up.sh: no start_service function")
	}
	body := up[start:]
	body = body[:strings.Index(body, "\n}")]
	names := regexp.MustCompile(`\b([A-Z][A-Z0-9_]*)=`)
	out := map[string][]string{}
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimSpace(line)
		_, rest, ok := strings.Cut(line, "export ")
		if !ok {
			continue
		}
		for _, a := range apps {
			if strings.HasPrefix(line, "order)") && a.name != "order" ||
				strings.HasPrefix(line, "payment-fake)") && a.name != "payment-fake" ||
				strings.HasPrefix(line, "inventory)") && a.name != "inventory" {
				continue
			}
			for _, m := range names.FindAllStringSubmatch(rest, -1) {
				out[a.name] = append(out[a.name], m[1])
			}
		}
	}
	if len(out["order"]) < 5 {
		t.Fatalf("scripts/up.sh: start_service exports %v to order: the parser is out of date", out["order"])
	}
	return out
}

type stage struct {
	from, name string
	args       []string
	runs       []string
	copies     []string
	user       string
	entrypoint string
}

// parseDockerfile splits a Dockerfile into stages (continuation lines
// joined, comments dropped).
func parseDockerfile(t *testing.T, text string) []stage {
	t.Helper()
	var lines []string
	cur := ""
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "#") || (l == "" && cur == "") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		lines = append(lines, cur+l)
		cur = ""
	}
	var stages []stage
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		instr = strings.ToUpper(instr)
		if instr == "FROM" {
			f := strings.Fields(rest)
			s := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			continue // ARG before the first FROM
		}
		s := &stages[len(stages)-1]
		switch instr {
		case "ARG":
			name, _, _ := strings.Cut(strings.TrimSpace(rest), "=")
			s.args = append(s.args, name)
		case "RUN":
			s.runs = append(s.runs, rest)
		case "COPY":
			s.copies = append(s.copies, rest)
		case "USER":
			s.user = strings.TrimSpace(rest)
		case "ENTRYPOINT":
			s.entrypoint = rest
		}
	}
	if len(stages) == 0 {
		t.Fatal("Dockerfile has no FROM")
	}
	return stages
}

type definitions struct {
	VHosts []struct {
		Name string `json:"name"`
	} `json:"vhosts"`
	Users []struct {
		Name     string   `json:"name"`
		Password string   `json:"password"`
		Tags     []string `json:"tags"`
	} `json:"users"`
	Permissions []struct {
		User      string `json:"user"`
		VHost     string `json:"vhost"`
		Configure string `json:"configure"`
		Write     string `json:"write"`
		Read      string `json:"read"`
	} `json:"permissions"`
}

func parseDefinitions(t *testing.T, out string) definitions {
	t.Helper()
	var d definitions
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("definitions are not valid JSON: %v\n%s", err, out)
	}
	return d
}

// ------------------------------------------------------------------ helpers

// readFile reads a file of the repository.
func readFile(t *testing.T, rel string) string {
	t.Helper()
	return readAbs(t, filepath.Join(root, rel))
}

func readAbs(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// runScript runs a repository script with bash and exactly env (plus this
// process's PATH unless env has one, and extra KEY=VALUE items), returning
// its stdout.
func runScript(t *testing.T, rel string, env map[string]string, args []string, extra ...string) (string, error) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash is needed to run %s: %v", rel, err)
	}
	cmd := exec.Command(bash, append([]string{filepath.Join(root, rel)}, args...)...)
	cmd.Env = nil
	if _, ok := env["PATH"]; !ok {
		cmd.Env = append(cmd.Env, "PATH="+os.Getenv("PATH"))
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, extra...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), fmt.Errorf("%s: %v: %s", rel, err, stderr.String())
		}
		t.Fatalf("running %s: %v", rel, err)
	}
	return string(out), nil
}

func checkDSN(t *testing.T, dsn, user, password, db string) {
	t.Helper()
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Errorf("MYSQL_DSN %q: %v", dsn, err)
		return
	}
	if c.User != user || c.Passwd != password || c.Net != "tcp" || c.Addr != "mysql:3306" || c.DBName != db {
		t.Errorf("MYSQL_DSN = %q: user %q, password %q, %s(%s)/%s; want user %q, password %q, tcp(mysql:3306)/%s",
			dsn, c.User, c.Passwd, c.Net, c.Addr, c.DBName, user, password, db)
	}
}

func checkAMQP(t *testing.T, raw, user, password string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Errorf("AMQP_URL %q: %v", raw, err)
		return
	}
	pw, _ := u.User.Password()
	host, port, _ := net.SplitHostPort(u.Host)
	if u.Scheme != "amqp" || u.User.Username() != user || pw != password || host != "rabbitmq" || port != "5672" || u.Path != "/" {
		t.Errorf("AMQP_URL = %q, want amqp://%s:%s@rabbitmq:5672/ (vhost /)", raw, user, password)
	}
}

// sqlStr quotes like deploy/mysql/init.sh and scripts/up.sh.
func sqlStr(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", "''") + "'"
}

func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// The observability profile: Prometheus loads the alert rules and scrapes
// every service; the rules file parses and every alert names a metric the
// services export (checked against the README's metrics table elsewhere);
// Grafana gets the dashboard.
func TestObservabilityProfile(t *testing.T) {
	cf := loadCompose(t, nil)
	for _, name := range []string{"prometheus", "grafana"} {
		s, ok := cf.Services[name]
		if !ok || !slices.Contains(s.Profiles, "observability") {
			t.Fatalf("%s missing or not in the observability profile", name)
		}
		if s.Healthcheck == nil || len(s.Healthcheck.Test) == 0 {
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
