package deploy

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/relmsg/ordersaga/internal/stack"
)

// The schemas and users: deploy/provision.sh is their one source. docker
// compose runs it in the mysql container (deploy/mysql/init.sh) and the
// rabbitmq container (deploy/rabbitmq/entrypoint.sh); scripts/up.sh setup
// runs it against this machine's servers. grants_test.go checks the result
// on the real server.

// provisionPath is where docker-compose.yml mounts deploy/provision.sh and
// where the two container scripts look for it by default.
const provisionPath = "/usr/local/lib/ordersaga/provision.sh"

// wantSQL is the provisioning SQL for the settings in env.
func wantSQL(env map[string]string) []string {
	var want []string
	for _, svc := range stack.Services {
		user := sqlStr(env[svc.Key+"_DB_USER"])
		pw := sqlStr(env[svc.Key+"_DB_PASSWORD"])
		want = append(want,
			fmt.Sprintf("CREATE DATABASE IF NOT EXISTS `%s` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;", svc.DB),
			fmt.Sprintf("ALTER DATABASE `%s` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;", svc.DB))
		for _, host := range []string{"'%'", "'localhost'"} {
			want = append(want,
				fmt.Sprintf("CREATE USER IF NOT EXISTS %s@%s IDENTIFIED BY %s;", user, host, pw),
				fmt.Sprintf("ALTER USER %s@%s IDENTIFIED BY %s;", user, host, pw),
				fmt.Sprintf("REVOKE ALL PRIVILEGES, GRANT OPTION FROM %s@%s;", user, host),
				fmt.Sprintf("GRANT ALL PRIVILEGES ON `%s`.* TO %s@%s;", strings.ReplaceAll(svc.DB, "_", `\_`), user, host))
		}
	}
	return want
}

// sqlStr quotes like deploy/provision.sh.
func sqlStr(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", "''") + "'"
}

// runInit runs deploy/mysql/init.sh as the mysql image does (sourced, with
// its docker_process_sql), and returns the SQL it sent to the server.
func runInit(t *testing.T, env map[string]string) (string, error) {
	t.Helper()
	sqlFile := filepath.Join(t.TempDir(), "sql")
	script := `docker_process_sql() { [ "$1" = --database=mysql ] && cat >"$SQL_FILE"; }; . deploy/mysql/init.sh`
	_, err := runScript(t, env, []string{"-c", script}, "SQL_FILE="+sqlFile, "ORDERSAGA_PROVISION=deploy/provision.sh")
	sql, _ := os.ReadFile(sqlFile)
	return string(sql), err
}

func TestMySQLInitScript(t *testing.T) {
	p := loadCompose(t, nil)
	target, ro := bindMount(p, "mysql", "deploy/mysql/init.sh")
	if !strings.HasPrefix(target, "/docker-entrypoint-initdb.d/") || !strings.HasSuffix(target, ".sh") || !ro {
		t.Errorf("deploy/mysql/init.sh is mounted at %q (read-only %v): want /docker-entrypoint-initdb.d/<name>.sh, read-only", target, ro)
	}
	if target, ro := bindMount(p, "mysql", "deploy/provision.sh"); target != provisionPath || !ro {
		t.Errorf("mysql mounts deploy/provision.sh at %q (read-only %v), want %s read-only (init.sh runs it)", target, ro, provisionPath)
	}
	// The image sources a script that is not executable, and only then
	// does it have docker_process_sql.
	if fi, err := os.Stat(filepath.Join(root, "deploy/mysql/init.sh")); err != nil || fi.Mode()&0o111 != 0 {
		t.Errorf("deploy/mysql/init.sh: %v, mode %v: ship it not executable (the image sources it)", err, fi.Mode())
	}

	env := environment(p, "mysql")
	sql, err := runInit(t, env)
	if err != nil {
		t.Fatalf("deploy/mysql/init.sh: %v", err)
	}
	example := loadEnvExample(t)
	got := nonEmptyLines(sql)
	if want := wantSQL(example); !slices.Equal(got, want) {
		t.Errorf("init SQL:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, line := range got {
		if strings.HasPrefix(line, "GRANT") && (strings.Contains(line, "*.*") || strings.Contains(line, "GRANT OPTION")) {
			t.Errorf("init SQL %q: a service user gets rights on its own schema only", line)
		}
	}

	t.Run("quoting", func(t *testing.T) {
		env := maps.Clone(env)
		env["ORDER_DB_PASSWORD"] = `it's a \ "pw"`
		sql, err := runInit(t, env)
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
			env := maps.Clone(env)
			maps.Copy(env, change)
			if sql, err := runInit(t, env); err == nil || sql != "" {
				t.Errorf("%s: init.sh err = %v and sent %q, want a failure before any SQL", name, err, sql)
			}
		}
	})
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

func TestRabbitMQDefinitions(t *testing.T) {
	p := loadCompose(t, nil)
	checkRabbitMQEntrypoint(t, p)

	env := environment(p, "rabbitmq")
	out, err := runScript(t, env, []string{"deploy/provision.sh", "rabbitmq"})
	if err != nil {
		t.Fatalf("deploy/provision.sh rabbitmq: %v", err)
	}
	defs := parseDefinitions(t, out)
	if len(defs.VHosts) != 1 || defs.VHosts[0].Name != "/" {
		t.Errorf("vhosts = %+v, want only /", defs.VHosts)
	}

	example := loadEnvExample(t)
	checkRabbitMQUsers(t, defs, env, example)

	t.Run("quoting", func(t *testing.T) {
		env := maps.Clone(env)
		pw := `a "quoted" \ pw %s`
		env["PAYMENT_AMQP_PASSWORD"] = pw
		out, err := runScript(t, env, []string{"deploy/provision.sh", "rabbitmq"})
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
			"bad user name":         {"ORDER_AMQP_USER": "order/svc"},
			"empty password":        {"INVENTORY_AMQP_PASSWORD": ""},
			"shared user":           {"PAYMENT_AMQP_USER": example["ORDER_AMQP_USER"]},
			"admin shares a name":   {"RABBITMQ_ADMIN_USER": example["ORDER_AMQP_USER"]},
			"control character":     {"ORDER_AMQP_PASSWORD": "a\tb"},
			"admin without a pw":    {"RABBITMQ_ADMIN_PASSWORD": ""},
			"bad admin name (a \")": {"RABBITMQ_ADMIN_USER": `gu"est`},
		} {
			env := maps.Clone(env)
			maps.Copy(env, change)
			if out, err := runScript(t, env, []string{"deploy/provision.sh", "rabbitmq"}); err == nil {
				t.Errorf("%s: provision.sh rabbitmq succeeded, want a failure (it printed %q)", name, out)
			}
		}
	})
}

// checkRabbitMQEntrypoint: the broker's container runs
// deploy/rabbitmq/entrypoint.sh, which runs deploy/provision.sh mounted
// read-only, under a fixed hostname.
func checkRabbitMQEntrypoint(t *testing.T, p *types.Project) {
	t.Helper()
	rb := p.Services["rabbitmq"]
	script, _ := bindMount(p, "rabbitmq", "deploy/rabbitmq/entrypoint.sh")
	if script == "" {
		t.Fatalf("rabbitmq volumes %+v: deploy/rabbitmq/entrypoint.sh is not mounted", rb.Volumes)
	}
	if !slices.Contains(rb.Entrypoint, script) {
		t.Errorf("rabbitmq entrypoint %q does not run %s", rb.Entrypoint, script)
	}
	if target, ro := bindMount(p, "rabbitmq", "deploy/provision.sh"); target != provisionPath || !ro {
		t.Errorf("rabbitmq mounts deploy/provision.sh at %q (read-only %v), want %s read-only (entrypoint.sh runs it)", target, ro, provisionPath)
	}
	// Overriding the entrypoint clears the image's command.
	if !slices.Equal(rb.Command, []string{"rabbitmq-server"}) {
		t.Errorf("rabbitmq command = %q, want [rabbitmq-server]", rb.Command)
	}
	if rb.Hostname == "" {
		t.Error("rabbitmq has no fixed hostname: the node name (and its data volume) would change with each container")
	}
}

// checkRabbitMQUsers: the definitions hold the admin and one user per
// service, each with its password from the settings and full rights on /.
func checkRabbitMQUsers(t *testing.T, defs definitions, env, example map[string]string) {
	t.Helper()
	type user struct{ password, tags string }
	want := map[string]user{
		env["RABBITMQ_ADMIN_USER"]: {env["RABBITMQ_ADMIN_PASSWORD"], "administrator"},
	}
	for _, svc := range stack.Services {
		want[example[svc.Key+"_AMQP_USER"]] = user{example[svc.Key+"_AMQP_PASSWORD"], ""}
	}
	got := map[string]user{}
	for _, u := range defs.Users {
		got[u.Name] = user{u.Password, strings.Join(u.Tags, ",")}
	}
	if !maps.Equal(got, want) {
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
}

// TestRabbitMQEntrypointBoot runs the entrypoint's real path with a
// temporary configuration directory and a stand-in for the image's
// docker-entrypoint.sh.
func TestRabbitMQEntrypointBoot(t *testing.T) {
	p := loadCompose(t, nil)
	rb := p.Services["rabbitmq"]
	etc := t.TempDir()
	if err := os.Mkdir(filepath.Join(etc, "conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	fake := "#!/bin/sh\necho \"image entrypoint: $*\"\n"
	if err := os.WriteFile(filepath.Join(bin, "docker-entrypoint.sh"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	// The container's /var/lib/rabbitmq is this machine's too: the cookie
	// must go to a temporary HOME, never over the local broker's.
	home := t.TempDir()
	env := environment(p, "rabbitmq")
	env["ORDERSAGA_RABBITMQ_ETC"] = etc
	env["ORDERSAGA_RABBITMQ_HOME"] = home
	env["ORDERSAGA_PROVISION"] = "deploy/provision.sh"
	env["PATH"] = bin + string(os.PathListSeparator) + os.Getenv("PATH")
	out, err := runScript(t, env, append([]string{"deploy/rabbitmq/entrypoint.sh"}, rb.Command...))
	if err != nil {
		t.Fatal(err)
	}
	if want := "image entrypoint: " + strings.Join(rb.Command, " "); !strings.Contains(out, want) {
		t.Errorf("output %q: want the image's entrypoint run with the compose command (%q)", out, want)
	}

	defsPath := filepath.Join(etc, "ordersaga-definitions.json")
	conf := readAbs(t, filepath.Join(etc, "conf.d", "90-ordersaga.conf"))
	for _, want := range []string{"definitions.import_backend = local_filesystem", "definitions.local.path = " + defsPath,
		// Queues declared on the first node before the ha profile's others
		// joined grow a member on each.
		"quorum_queue.continuous_membership_reconciliation.enabled = true",
		"quorum_queue.continuous_membership_reconciliation.target_group_size = 3"} {
		if !slices.Contains(nonEmptyLines(conf), want) {
			t.Errorf("conf.d/90-ordersaga.conf = %q: want the line %q", conf, want)
		}
	}
	cookiePath := filepath.Join(home, ".erlang.cookie")
	if got := readAbs(t, cookiePath); got != env["RABBITMQ_CLUSTER_COOKIE"] || got == "" {
		t.Errorf("Erlang cookie %q, want RABBITMQ_CLUSTER_COOKIE %q", got, env["RABBITMQ_CLUSTER_COOKIE"])
	}
	if fi, err := os.Stat(cookiePath); err != nil {
		t.Fatal(err)
	} else if perm := fi.Mode().Perm(); perm != 0o400 {
		t.Errorf("cookie file mode %v, want 0400 (Erlang refuses a cookie others can read)", perm)
	}
	defs := parseDefinitions(t, readAbs(t, defsPath))
	if len(defs.Users) != len(stack.Services)+1 {
		t.Errorf("definitions file has %d users, want %d", len(defs.Users), len(stack.Services)+1)
	}
	if fi, err := os.Stat(defsPath); err != nil {
		t.Fatal(err)
	} else if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		t.Errorf("definitions file mode %v: it holds passwords, want it private to its owner", perm)
	}

	t.Run("bad settings stop the boot", func(t *testing.T) {
		env := maps.Clone(env)
		env["ORDER_AMQP_PASSWORD"] = ""
		if out, err := runScript(t, env, append([]string{"deploy/rabbitmq/entrypoint.sh"}, rb.Command...)); err == nil || strings.Contains(out, "image entrypoint") {
			t.Errorf("entrypoint with an empty password: err = %v, output %q; want a failure before the image's entrypoint", err, out)
		}
	})
}

// TestLocalSetupRunsTheSameProvisioning runs `scripts/up.sh setup` with
// stand-ins for the MariaDB client and rabbitmqctl: what it sends to the
// local servers is deploy/provision.sh's output for the settings of
// .env.example, the same SQL the mysql container runs and the same users
// the rabbitmq container imports.
func TestLocalSetupRunsTheSameProvisioning(t *testing.T) {
	bin, got := t.TempDir(), t.TempDir()
	fakes := map[string]string{
		// mariadb_alive pings with mariadb-admin; mariadb_root_ok runs
		// `-e 'SELECT 1'`; the provisioning SQL comes on stdin.
		"mariadb-admin": "#!/bin/sh\nexit 0\n",
		"mariadb":       "#!/bin/sh\nfor a; do [ \"$a\" = -e ] && exit 0; done\ncat >>\"$GOT/mysql.sql\"\n",
		"rabbitmqctl":   "#!/bin/sh\necho \"$*\" >>\"$GOT/rabbitmqctl.args\"\ncat >>\"$GOT/definitions.json\"\n",
	}
	for name, text := range fakes {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// ensure_rabbitmq only needs the AMQP port to accept a connection.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	// The settings in the environment win over a .env in the checkout.
	example := loadEnvExample(t)
	env := maps.Clone(example)
	maps.Copy(env, map[string]string{
		"PATH": bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"GOT":  got, "RABBITMQ_PORT": port, "HOME": t.TempDir(),
	})
	if _, err := runScript(t, env, []string{"scripts/up.sh", "setup"}); err != nil {
		t.Fatal(err)
	}

	if sql := nonEmptyLines(readAbs(t, filepath.Join(got, "mysql.sql"))); !slices.Equal(sql, wantSQL(example)) {
		t.Errorf("scripts/up.sh setup sent the SQL:\n%s\nwant deploy/provision.sh's:\n%s", strings.Join(sql, "\n"), strings.Join(wantSQL(example), "\n"))
	}
	if args := strings.TrimSpace(readAbs(t, filepath.Join(got, "rabbitmqctl.args"))); args != "-q import_definitions" {
		t.Errorf("rabbitmqctl %s, want -q import_definitions (the definitions on stdin)", args)
	}
	defs := parseDefinitions(t, readAbs(t, filepath.Join(got, "definitions.json")))
	var users []string
	for _, u := range defs.Users {
		users = append(users, u.Name+":"+u.Password)
	}
	var want []string
	for _, svc := range stack.Services {
		want = append(want, example[svc.Key+"_AMQP_USER"]+":"+example[svc.Key+"_AMQP_PASSWORD"])
	}
	if !slices.Equal(users, want) {
		t.Errorf("scripts/up.sh setup imports the RabbitMQ users %q, want %q (no administrator: the local broker has guest)", users, want)
	}
}

// The MariaDB that ensure_mariadb has just installed lets root log in over
// TCP with MYSQL_ROOT_PASSWORD, quoted as SQL.
func TestRootTCPSQL(t *testing.T) {
	out, err := runScript(t, map[string]string{"MYSQL_ROOT_PASSWORD": `it's`}, []string{"deploy/provision.sh", "mysql-root"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY 'it''s';",
		"GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;",
		"ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('it''s');",
	}
	if got := nonEmptyLines(out); !slices.Equal(got, want) {
		t.Errorf("provision.sh mysql-root:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
