package deploy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/dotenv"
	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/template"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/go-sql-driver/mysql"
)

// No Docker engine runs where these tests run, so they check the compose
// stack by reading it: docker-compose.yml through compose-go (the loader
// docker compose itself uses: parsing, interpolation, normalization), the
// Dockerfile, .dockerignore, and the provisioning scripts run with stand-ins
// for the images' tools. The reference for "the same system" is the local
// stack of scripts/up.sh: internal/stack (services, ports, environment),
// deploy/provision.sh (schemas and users), .env.example (settings) and
// pkg/process's configuration loader.

// root is the repository root, relative to this package's directory (where
// go test runs).
const root = ".."

// composeOnly are the variables docker-compose.yml reads that .env.example
// does not list (scripts/up.sh does not need them): their default and why.
var composeOnly = map[string]struct{ def, why string }{
	"RABBITMQ_ADMIN_USER":     {"guest", "management UI user (the local broker has guest already)"},
	"RABBITMQ_ADMIN_PASSWORD": {"guest", "management UI password"},
	"RABBITMQ_CLUSTER_COOKIE": {"ordersaga-demo-cookie", "Erlang cookie of the ha profile's nodes (scripts/up.sh's cluster makes its own)"},
	"PSP_TOKEN":               {"compose-demo-psp-key", "the PSP's key for charges and refunds, shared by psp and payment-fake (scripts/up.sh makes a fresh one per start)"},
}

// loadCompose loads docker-compose.yml as docker compose does, with env as
// the variables set in the shell or .env (nil: none), every profile active
// and paths left as written.
func loadCompose(t *testing.T, env map[string]string) *types.Project {
	t.Helper()
	p, err := loader.LoadWithContext(context.Background(), composeDetails(env),
		loader.WithProfiles([]string{"*"}),
		func(o *loader.Options) { o.ResolvePaths = false })
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return p
}

func composeDetails(env map[string]string) types.ConfigDetails {
	return types.ConfigDetails{
		WorkingDir:  root,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(root, "docker-compose.yml")}},
		Environment: types.Mapping(env),
	}
}

// composeVars lists the variables docker-compose.yml reads, by name, with
// the default of their first reference (compose-go's template pattern on
// the file before interpolation).
func composeVars(t *testing.T) map[string]template.Variable {
	t.Helper()
	model, err := loader.LoadModelWithContext(context.Background(), composeDetails(nil),
		func(o *loader.Options) { o.SkipInterpolation, o.SkipNormalization, o.ResolvePaths = true, true, false })
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	vars := template.ExtractVariables(model, template.DefaultPattern)
	if len(vars) == 0 {
		t.Fatal("docker-compose.yml reads no variable")
	}
	return vars
}

// environment is a service's environment section.
func environment(p *types.Project, service string) map[string]string {
	return map[string]string(p.Services[service].Environment.ToMapping())
}

// bindMount is the container path where service mounts the repository file
// rel, and whether read-only ("" when it does not).
func bindMount(p *types.Project, service, rel string) (target string, readOnly bool) {
	for _, v := range p.Services[service].Volumes {
		if v.Type == types.VolumeTypeBind && filepath.Clean(v.Source) == rel {
			return v.Target, v.ReadOnly
		}
	}
	return "", false
}

// loadEnvExample reads .env.example with compose-go's dotenv parser, as
// docker compose reads a .env copied from it (scripts/up.sh reads it with
// bash; TestSettingsReadTheSameInBashAndCompose holds the two together).
func loadEnvExample(t *testing.T) map[string]string {
	t.Helper()
	m, err := dotenv.Read(filepath.Join(root, ".env.example"))
	if err != nil {
		t.Fatalf(".env.example: %v", err)
	}
	if len(m) == 0 {
		t.Fatal(".env.example sets nothing")
	}
	return m
}

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

// runScript runs bash with args (a repository script and its arguments, or
// -c and a command) and exactly env (plus this process's PATH unless env
// has one, and extra KEY=VALUE items), in the repository root, returning its
// stdout.
func runScript(t *testing.T, env map[string]string, args []string, extra ...string) (string, error) {
	t.Helper()
	out, _, err := runBash(t, root, env, args, extra...)
	return out, err
}

// runBash is runScript in dir, also returning stderr.
func runBash(t *testing.T, dir string, env map[string]string, args []string, extra ...string) (stdout, stderr string, err error) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash is needed to run %s: %v", args, err)
	}
	cmd := exec.Command(bash, args...)
	cmd.Dir = dir
	cmd.Env = nil
	if _, ok := env["PATH"]; !ok {
		cmd.Env = append(cmd.Env, "PATH="+os.Getenv("PATH"))
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, extra...)
	var errBuf strings.Builder
	cmd.Stderr = &errBuf
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("running %s: %v", args, err)
		}
		err = fmt.Errorf("%s: %v: %s", args, err, errBuf.String())
	}
	return string(out), errBuf.String(), err
}

// checkDSN: dsn connects as user/password to db on addr.
func checkDSN(t *testing.T, dsn, user, password, addr, db string) {
	t.Helper()
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Errorf("MYSQL_DSN %q: %v", dsn, err)
		return
	}
	if c.User != user || c.Passwd != password || c.Net != "tcp" || c.Addr != addr || c.DBName != db {
		t.Errorf("MYSQL_DSN = %q: user %q, password %q, %s(%s)/%s; want user %q, password %q, tcp(%s)/%s",
			dsn, c.User, c.Passwd, c.Net, c.Addr, c.DBName, user, password, addr, db)
	}
}

// checkAMQP: raw (AMQP_URL, one address or a comma-separated list)
// connects as user/password to vhost "/" on addrs, in this order.
func checkAMQP(t *testing.T, raw, user, password string, addrs ...string) {
	t.Helper()
	parts := strings.Split(raw, ",")
	if len(parts) != len(addrs) {
		t.Errorf("AMQP_URL = %q: %d addresses, want %d (%v)", raw, len(parts), len(addrs), addrs)
		return
	}
	for i, part := range parts {
		u, err := url.Parse(part)
		if err != nil {
			t.Errorf("AMQP_URL %q: %v", raw, err)
			return
		}
		pw, _ := u.User.Password()
		host, port, _ := net.SplitHostPort(u.Host)
		if u.Scheme != "amqp" || u.User.Username() != user || pw != password || net.JoinHostPort(host, port) != addrs[i] || u.Path != "/" {
			t.Errorf("AMQP_URL = %q: address %d is %q, want amqp://%s:%s@%s/ (vhost /)", raw, i+1, part, user, password, addrs[i])
		}
	}
}

// haNodes are the RabbitMQ nodes of docker compose --profile ha, as the
// services reach them; the default profile runs the first alone.
var haNodes = []string{"rabbitmq:5672", "rabbitmq-2:5672", "rabbitmq-3:5672"}

func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
