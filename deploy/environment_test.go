package deploy

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/dotenv"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/relmsg/ordersaga/internal/stack"
	"github.com/relmsg/ordersaga/pkg/compose/process"
)

// The settings: each service's environment in compose, the variables of
// .env.example and where each one arrives, the same environment as
// scripts/up.sh gives the services, and the .env format that bash and
// docker compose both read.

func TestComposeAppEnvironment(t *testing.T) {
	example := loadEnvExample(t)
	p := loadCompose(t, nil)
	for _, svc := range stack.Services {
		t.Run(svc.Name, func(t *testing.T) { checkServiceEnvironment(t, example, environment(p, svc.Name), svc) })
	}

	// Only the payment service talks to the PSP, which lives on its own
	// listener; the order service finds the others by their compose names.
	for _, name := range []string{"payment-fake", "payment-fake-2"} {
		if got := environment(p, name)["PSP_URL"]; got != "http://psp:8084/psp" {
			t.Errorf("%s PSP_URL = %q, want the one PSP process, http://psp:8084/psp", name, got)
		}
	}
	// The PSP: payment's schema and account, its own failpoints, what
	// scripts/up.sh gives it (stack.PSPEnv).
	psp := environment(p, "psp")
	local := stack.PSPEnv(func(k string) string { return example[k] }, "0.0.0.0")
	for _, k := range slices.Sorted(maps.Keys(local)) {
		if _, ok := psp[k]; !ok {
			t.Errorf("scripts/up.sh gives the PSP %s; docker-compose.yml does not", k)
		}
	}
	checkDSN(t, psp["MYSQL_DSN"], example["PAYMENT_DB_USER"], example["PAYMENT_DB_PASSWORD"], "mysql:3306", "payment_service")
	if psp["HTTP_ADDR"] != ":8084" || psp["INSTANCE_ID"] != "psp" {
		t.Errorf("psp HTTP_ADDR %q INSTANCE_ID %q", psp["HTTP_ADDR"], psp["INSTANCE_ID"])
	}
	// Each order instance lists both instances of each peer, its own
	// number first.
	for name, want := range map[string][2]string{
		"order":   {"http://inventory:8082,http://inventory-2:8082", "http://payment-fake:8083,http://payment-fake-2:8083"},
		"order-2": {"http://inventory-2:8082,http://inventory:8082", "http://payment-fake-2:8083,http://payment-fake:8083"},
	} {
		env := environment(p, name)
		if env["INVENTORY_URL"] != want[0] || env["PAYMENT_URL"] != want[1] {
			t.Errorf("%s: INVENTORY_URL %q, PAYMENT_URL %q, want %q, %q", name, env["INVENTORY_URL"], env["PAYMENT_URL"], want[0], want[1])
		}
	}
}

// checkServiceEnvironment holds one service's compose environment to
// .env.example, and to what the service's own loader accepts.
func checkServiceEnvironment(t *testing.T, example, env map[string]string, svc stack.Service) {
	required := []string{"HTTP_ADDR", "INSTANCE_ID", "MYSQL_DSN", "AMQP_URL", "DEMO_MODE", "ADMIN_TOKEN", "MYSQL_CREATE_DATABASE", "LOG_LEVEL", "OUTBOX_LEASE", "FAILPOINTS"}
	if svc.Name == "payment-fake" {
		required = append(required, "PSP_URL")
	}
	for _, k := range required {
		if _, ok := env[k]; !ok {
			t.Errorf("environment has no %s", k)
		}
	}
	checks := []struct{ key, want string }{
		{"HTTP_ADDR", ":" + strconv.Itoa(svc.Port)},
		{"INSTANCE_ID", svc.Instance(1).ID()},
		{"MYSQL_CREATE_DATABASE", "false"}, // the schemas come from deploy/provision.sh
		{"DEMO_MODE", example["DEMO_MODE"]},
		{"LOG_LEVEL", example["LOG_LEVEL"]},
		{"OUTBOX_LEASE", "5s"},
		{"FAILPOINTS", example[svc.Key+"_FAILPOINTS"]},
	}
	for _, c := range checks {
		if got := env[c.key]; got != c.want {
			t.Errorf("%s = %q, want %q", c.key, got, c.want)
		}
	}
	if got, want := env["ADMIN_TOKEN"], example["ADMIN_TOKEN"]; got != want {
		t.Errorf("ADMIN_TOKEN = %q, want .env.example's %q (the same as scripts/up.sh)", got, want)
	}
	checkDSN(t, env["MYSQL_DSN"], example[svc.Key+"_DB_USER"], example[svc.Key+"_DB_PASSWORD"], "mysql:3306", svc.DB)
	// The default profile's node first, then the ha profile's.
	checkAMQP(t, env["AMQP_URL"], example[svc.Key+"_AMQP_USER"], example[svc.Key+"_AMQP_PASSWORD"], haNodes...)

	// What the service itself makes of it: the shared loader
	// must accept every value.
	senv := process.NewEnv(func(k string) string { return env[k] })
	cfg := process.Load(senv, svc.Name, ":"+strconv.Itoa(svc.Port), svc.DB)
	if err := senv.Err(); err != nil {
		t.Fatalf("pkg/compose/process rejects the compose environment: %v", err)
	}
	if cfg.CreateDatabase || !cfg.DemoMode || cfg.OutboxLease != 5*time.Second {
		t.Errorf("loaded config: CreateDatabase=%v DemoMode=%v OutboxLease=%s, want false, true, 5s", cfg.CreateDatabase, cfg.DemoMode, cfg.OutboxLease)
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
	for _, svc := range stack.Services {
		env[svc.Key+"_FAILPOINTS"] = "outbox.dispatch.after-claim=error*" + strconv.Itoa(svc.Port)
	}
	env["ADMIN_TOKEN"] = "t0ken"
	p := loadCompose(t, env)

	mysqlEnv := environment(p, "mysql")
	rabbitEnv := environment(p, "rabbitmq")
	if got := mysqlEnv["MYSQL_ROOT_PASSWORD"]; got != env["MYSQL_ROOT_PASSWORD"] {
		t.Errorf("mysql MYSQL_ROOT_PASSWORD = %q, want the .env value %q", got, env["MYSQL_ROOT_PASSWORD"])
	}
	for _, svc := range stack.Services {
		for _, k := range []string{svc.Key + "_DB_USER", svc.Key + "_DB_PASSWORD"} {
			if got := mysqlEnv[k]; got != env[k] {
				t.Errorf("mysql %s = %q, want %q", k, got, env[k])
			}
		}
		for _, k := range []string{svc.Key + "_AMQP_USER", svc.Key + "_AMQP_PASSWORD"} {
			if got := rabbitEnv[k]; got != env[k] {
				t.Errorf("rabbitmq %s = %q, want %q", k, got, env[k])
			}
		}
		s := environment(p, svc.Name)
		checkDSN(t, s["MYSQL_DSN"], env[svc.Key+"_DB_USER"], env[svc.Key+"_DB_PASSWORD"], "mysql:3306", svc.DB)
		checkAMQP(t, s["AMQP_URL"], env[svc.Key+"_AMQP_USER"], env[svc.Key+"_AMQP_PASSWORD"], haNodes...)
		for k, want := range map[string]string{
			"FAILPOINTS":  env[svc.Key+"_FAILPOINTS"],
			"DEMO_MODE":   "false",
			"LOG_LEVEL":   "debug",
			"ADMIN_TOKEN": "t0ken",
		} {
			if got := s[k]; got != want {
				t.Errorf("%s %s = %q, want %q", svc.Name, k, got, want)
			}
		}
	}
}

// TestComposeMatchesEnvExample: docker-compose.yml reads the variables of
// .env.example, with its values as defaults, so that `docker compose up`
// works the same without a .env, with a copy of .env.example, and with a
// .env that leaves a value empty (${NAME:-default}, not ${NAME-default}).
func TestComposeMatchesEnvExample(t *testing.T) {
	example := loadEnvExample(t)
	vars := composeVars(t)
	for k := range example {
		if _, ok := vars[k]; !ok {
			t.Errorf(".env.example sets %s but docker-compose.yml never reads it", k)
		}
	}
	for k := range vars {
		_, inExample := example[k]
		if _, ok := composeOnly[k]; !ok && !inExample {
			t.Errorf("docker-compose.yml reads %s, which is not in .env.example: add it there or to composeOnly with a reason (and to docs/operations.md)", k)
		}
	}

	none := loadCompose(t, nil)
	copied := maps.Clone(example)
	empty := map[string]string{}
	for k, v := range composeOnly {
		copied[k] = v.def
	}
	for k := range vars {
		empty[k] = ""
	}
	for _, d := range diffProjects(none, loadCompose(t, copied)) {
		t.Errorf("without a .env / with .env.example: %s: the defaults of docker-compose.yml must be the values of .env.example (composeOnly for the others)", d)
	}
	for _, d := range diffProjects(none, loadCompose(t, empty)) {
		t.Errorf("without a .env / with every variable empty: %s: write ${NAME:-default}, so that an empty value in .env means the default", d)
	}
	// Empty for the local development server; the mysql image needs a
	// root password, and ":-" turns the empty value of a copied
	// .env.example into the default.
	if environment(none, "mysql")["MYSQL_ROOT_PASSWORD"] == "" {
		t.Errorf("MYSQL_ROOT_PASSWORD has an empty default in docker-compose.yml: the mysql image refuses to initialize without one")
	}
}

// diffProjects lists where two loads of the compose file differ: every
// environment value, then anything else in the services.
func diffProjects(a, b *types.Project) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(a.Services)) {
		ea, eb := environment(a, name), environment(b, name)
		for _, k := range slices.Sorted(maps.Keys(ea)) {
			if ea[k] != eb[k] {
				out = append(out, fmt.Sprintf("%s %s = %q / %q", name, k, ea[k], eb[k]))
			}
		}
	}
	if len(out) == 0 {
		ja, _ := json.Marshal(a.Services)
		jb, _ := json.Marshal(b.Services)
		if string(ja) != string(jb) {
			out = append(out, "the services differ outside their environment")
		}
	}
	return out
}

// TestComposeMatchesLocalStack: every variable scripts/up.sh gives an
// instance (internal/stack), compose gives it too, with the same value
// wherever the value does not name a host: the first instances in the
// default profile, the second ones in the ha profile (up.sh -n 2).
func TestComposeMatchesLocalStack(t *testing.T) {
	example := loadEnvExample(t)
	p := loadCompose(t, nil)
	getenv := func(k string) string { return example[k] }
	for _, svc := range stack.Services {
		for k := 1; k <= 2; k++ {
			in := svc.Instance(k)
			local := in.Env(getenv, "127.0.0.1", nil)
			compose := environment(p, in.Name())
			if len(compose) == 0 {
				t.Errorf("no compose service %s (scripts/up.sh -n %d runs it)", in.Name(), k)
				continue
			}
			for _, key := range slices.Sorted(maps.Keys(local)) {
				if _, ok := compose[key]; !ok {
					t.Errorf("scripts/up.sh gives %s %s; docker-compose.yml does not", in.Name(), key)
				}
			}
			for _, key := range []string{"INSTANCE_ID", "MYSQL_CREATE_DATABASE", "FAILPOINTS", "DEMO_MODE", "LOG_LEVEL", "ADMIN_TOKEN", "OUTBOX_LEASE"} {
				if local[key] != compose[key] {
					t.Errorf("%s %s: scripts/up.sh gives %q, docker-compose.yml %q", in.Name(), key, local[key], compose[key])
				}
			}
			checkDSN(t, local["MYSQL_DSN"], example[svc.Key+"_DB_USER"], example[svc.Key+"_DB_PASSWORD"], "127.0.0.1:3306", svc.DB)
			checkAMQP(t, local["AMQP_URL"], example[svc.Key+"_AMQP_USER"], example[svc.Key+"_AMQP_PASSWORD"], "127.0.0.1:5672")
			if want := net.JoinHostPort("127.0.0.1", strconv.Itoa(in.Port())); local["HTTP_ADDR"] != want {
				t.Errorf("%s HTTP_ADDR = %q, want %q", in.Name(), local["HTTP_ADDR"], want)
			}
		}
	}
}

// plainLine is the .env format of .env.example: KEY=VALUE with a value
// that bash and docker compose read alike, bare or in single quotes.
var plainLine = regexp.MustCompile(`^[A-Z][A-Z0-9_]*=([A-Za-z0-9_.,:/@%+=-]*|'[^']*')$`)

// TestSettingsReadTheSameInBashAndCompose: scripts/up.sh reads .env (or
// .env.example) with bash (set -a; . file), docker compose with its dotenv
// parser. In the format .env.example documents, both give the same values.
func TestSettingsReadTheSameInBashAndCompose(t *testing.T) {
	for n, line := range strings.Split(readFile(t, ".env.example"), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") && !plainLine.MatchString(line) {
			t.Errorf(".env.example:%d: %q is outside the plain KEY=VALUE format it documents", n+1, line)
		}
	}
	sample := filepath.Join(t.TempDir(), "sample.env")
	text := "# a comment\n\nPLAIN=order_svc\nEMPTY=\nURLISH=amqp://u:p@h:5672/x?a=b%2F\nQUOTED='a b # not a comment $HOME \\n \" \\ x'\nLAST=1\n"
	if err := os.WriteFile(sample, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{filepath.Join(root, ".env.example"), sample} {
		want, err := dotenv.Read(file)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		abs, _ := filepath.Abs(file)
		keys := slices.Sorted(maps.Keys(want))
		script := `set -a; . "$1"; shift; for k; do printf '%s=%s\0' "$k" "${!k}"; done`
		out, err := runScript(t, nil, append([]string{"-c", script, "_", abs}, keys...))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, kv := range strings.Split(strings.TrimSuffix(out, "\x00"), "\x00") {
			k, v, _ := strings.Cut(kv, "=")
			got[k] = v
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: bash reads %q, docker compose %q", file, got, want)
		}
	}
}

// load_settings reads .env, else .env.example; what the environment
// exports wins over the file, which wins over lib.sh's own defaults.
func TestLoadSettings(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(".env.example", "ORDER_DB_USER=from_example\nLOG_LEVEL=info\nMYSQL_HOST=db.example\nQUOTED='a b#c'\n")
	lib, _ := filepath.Abs(filepath.Join(root, "scripts/lib.sh"))
	script := `. "$LIB"; load_settings; printf '%s|' "$SETTINGS_FILE" "$ORDER_DB_USER" "$LOG_LEVEL" "$MYSQL_HOST" "$QUOTED"; env | grep -c '^LOG_LEVEL=' `
	env := map[string]string{"LIB": lib, "LOG_TAG": "t", "LOG_LEVEL": "debug"}
	out, _, err := runBash(t, dir, env, []string{"-c", script})
	if err != nil {
		t.Fatal(err)
	}
	if want := ".env.example|from_example|debug|db.example|a b#c|1\n"; out != want {
		t.Errorf("with .env.example: %q, want %q", out, want)
	}
	write(".env", "ORDER_DB_USER=from_env\n")
	out, _, err = runBash(t, dir, env, []string{"-c", script})
	if err != nil {
		t.Fatal(err)
	}
	if want := ".env|from_env|debug|127.0.0.1||1\n"; out != want {
		t.Errorf("with .env: %q, want %q", out, want)
	}
}

// Every name one container uses to reach another (the URLs in their
// environment, Prometheus's targets) is in the target's ALLOWED_HOSTS:
// the services refuse any other Host than this machine's and those
// (web.Guard), so a missing name would break the stack in compose only.
func TestComposeNamesAreAllowedHosts(t *testing.T) {
	p := loadCompose(t, nil)
	urlish := regexp.MustCompile(`https?://([a-z0-9-]+):\d+`)
	targets := regexp.MustCompile(`"([a-z0-9-]+):\d+"`)
	seen := map[string][]string{} // host -> who calls it
	for name := range p.Services {
		for _, v := range environment(p, name) {
			for _, m := range urlish.FindAllStringSubmatch(v, -1) {
				seen[m[1]] = append(seen[m[1]], name)
			}
		}
	}
	for _, m := range targets.FindAllStringSubmatch(readFile(t, "deploy/prometheus/prometheus.yml"), -1) {
		seen[m[1]] = append(seen[m[1]], "prometheus")
	}
	if len(seen) < 6 {
		t.Fatalf("found only %v: the patterns no longer match the files", seen)
	}
	for host, callers := range seen {
		svc, ok := p.Services[host]
		if !ok {
			t.Errorf("%v call %s, which is no compose service", callers, host)
			continue
		}
		if svc.Build == nil {
			continue // an image of its own (Jaeger): no web.Guard to pass
		}
		allowed := strings.Split(environment(p, svc.Name)["ALLOWED_HOSTS"], ",")
		if !slices.Contains(allowed, host) {
			t.Errorf("%v call %s, whose ALLOWED_HOSTS %v does not name it", callers, host, allowed)
		}
	}
}
