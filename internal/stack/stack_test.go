package stack

import (
	"errors"
	"io/fs"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Env builds the service's DSN and broker URL from the settings, whatever
// characters the passwords hold, and falls back to the demo defaults.
func TestEnv(t *testing.T) {
	settings := map[string]string{
		"PAYMENT_DB_USER": "payment_svc", "PAYMENT_DB_PASSWORD": `p@ss:w/rd?#%'"`,
		"PAYMENT_AMQP_USER": "payment_svc", "PAYMENT_AMQP_PASSWORD": "a@b:c/d?e#f%g h",
		"MYSQL_HOST": "db.local", "RABBITMQ_PORT": "5673",
		"FAILPOINTS": "inbox.after-claim=error",
	}
	payment, _ := Lookup("payment-fake")
	env := payment.Env(func(k string) string { return settings[k] }, "0.0.0.0")

	dsn, err := mysql.ParseDSN(env["MYSQL_DSN"])
	if err != nil {
		t.Fatalf("MYSQL_DSN %q: %v", env["MYSQL_DSN"], err)
	}
	if dsn.User != "payment_svc" || dsn.Passwd != settings["PAYMENT_DB_PASSWORD"] || dsn.Addr != "db.local:3306" || dsn.DBName != "payment_service" {
		t.Errorf("MYSQL_DSN %q: user %q password %q addr %q db %q", env["MYSQL_DSN"], dsn.User, dsn.Passwd, dsn.Addr, dsn.DBName)
	}
	u, err := url.Parse(env["AMQP_URL"])
	if err != nil {
		t.Fatalf("AMQP_URL %q: %v", env["AMQP_URL"], err)
	}
	if pw, _ := u.User.Password(); u.User.Username() != "payment_svc" || pw != settings["PAYMENT_AMQP_PASSWORD"] || u.Host != "127.0.0.1:5673" || u.Path != "/" {
		t.Errorf("AMQP_URL %q: user %q password %q host %q path %q", env["AMQP_URL"], u.User.Username(), pw, u.Host, u.Path)
	}
	for k, want := range map[string]string{
		"HTTP_ADDR":             "0.0.0.0:8083",
		"MYSQL_CREATE_DATABASE": "false",
		"FAILPOINTS":            "inbox.after-claim=error", // no PAYMENT_FAILPOINTS: the shared one
		"DEMO_MODE":             "true",
		"LOG_LEVEL":             "info",
		"OUTBOX_LEASE":          "5s",
		"PSP_URL":               "http://127.0.0.1:8084/psp", // the PSP process
	} {
		if env[k] != want {
			t.Errorf("%s = %q, want %q", k, env[k], want)
		}
	}

	settings["PAYMENT_FAILPOINTS"] = "psp.charge.after-charge-before-response=crash"
	if got := payment.Env(func(k string) string { return settings[k] }, "127.0.0.1")["FAILPOINTS"]; got != settings["PAYMENT_FAILPOINTS"] {
		t.Errorf("FAILPOINTS = %q, want the service's own %q", got, settings["PAYMENT_FAILPOINTS"])
	}
	order, _ := Lookup("order")
	oenv := order.Env(func(k string) string { return settings[k] }, "127.0.0.1")
	if oenv["INVENTORY_URL"] != "http://127.0.0.1:8082" || oenv["PAYMENT_URL"] != "http://127.0.0.1:8083" {
		t.Errorf("order's peers: INVENTORY_URL %q, PAYMENT_URL %q", oenv["INVENTORY_URL"], oenv["PAYMENT_URL"])
	}
}

// Instance k listens on the service's port + 100*(k-1), is named
// <service>-k, and lists every node of a cluster in its AMQP_URL, starting
// from a node its neighbours do not start from.
func TestInstanceEnv(t *testing.T) {
	settings := map[string]string{"INVENTORY_AMQP_USER": "inventory_svc", "INVENTORY_AMQP_PASSWORD": "pw",
		"PAYMENT_AMQP_USER": "payment_svc", "PAYMENT_AMQP_PASSWORD": "pw2"}
	getenv := func(k string) string { return settings[k] }
	brokers := []string{"127.0.0.1:5701", "127.0.0.1:5702", "127.0.0.1:5703"}
	inventory, _ := Lookup("inventory")
	payment, _ := Lookup("payment-fake")
	order, _ := Lookup("order")

	in := inventory.Instance(2)
	if in.Name() != "inventory-2" || in.ID() != "inventory-2" || in.Port() != 8182 || in.URL() != "http://127.0.0.1:8182" {
		t.Errorf("inventory instance 2: name %q id %q port %d url %q", in.Name(), in.ID(), in.Port(), in.URL())
	}
	if first := order.Instance(1); first.Name() != "order" || first.ID() != "order-1" || first.Port() != 8081 {
		t.Errorf("order instance 1: name %q id %q port %d", first.Name(), first.ID(), first.Port())
	}
	env := in.Env(getenv, "127.0.0.1", brokers)
	if env["HTTP_ADDR"] != "127.0.0.1:8182" || env["INSTANCE_ID"] != "inventory-2" {
		t.Errorf("HTTP_ADDR %q, INSTANCE_ID %q", env["HTTP_ADDR"], env["INSTANCE_ID"])
	}
	var hosts []string
	for _, raw := range strings.Split(env["AMQP_URL"], ",") {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("AMQP_URL %q: %v", env["AMQP_URL"], err)
		}
		if pw, _ := u.User.Password(); u.User.Username() != "inventory_svc" || pw != "pw" || u.Path != "/" {
			t.Errorf("AMQP_URL entry %q: want inventory_svc:pw, vhost /", raw)
		}
		hosts = append(hosts, u.Host)
	}
	// inventory is the second service, this its second instance: the
	// third node first.
	if want := []string{"127.0.0.1:5703", "127.0.0.1:5701", "127.0.0.1:5702"}; !slices.Equal(hosts, want) {
		t.Errorf("AMQP_URL hosts %v, want %v", hosts, want)
	}
	// The order service's peers: every instance, its own number first.
	oenv := order.InstanceOf(2, 2).Env(getenv, "127.0.0.1", brokers)
	if oenv["INVENTORY_URL"] != "http://127.0.0.1:8182,http://127.0.0.1:8082" || oenv["PAYMENT_URL"] != "http://127.0.0.1:8183,http://127.0.0.1:8083" {
		t.Errorf("order-2 of 2: INVENTORY_URL %q, PAYMENT_URL %q", oenv["INVENTORY_URL"], oenv["PAYMENT_URL"])
	}
	if got := payment.Instance(2).Env(getenv, "127.0.0.1", brokers)["PSP_URL"]; got != "http://127.0.0.1:8084/psp" {
		t.Errorf("payment instance 2 PSP_URL = %q, want the one PSP process's", got)
	}
	// The PSP: one process, payment's schema and account, its own failpoints.
	settings["PAYMENT_DB_USER"], settings["PAYMENT_DB_PASSWORD"], settings["PSP_FAILPOINTS"] = "payment_svc", "dbpw", "psp.charge.after-charge-before-response=crash"
	penv := PSPEnv(getenv, "127.0.0.1")
	if penv["HTTP_ADDR"] != "127.0.0.1:8084" || penv["INSTANCE_ID"] != "psp" || penv["FAILPOINTS"] != settings["PSP_FAILPOINTS"] ||
		!strings.HasPrefix(penv["MYSQL_DSN"], "payment_svc:dbpw@tcp(127.0.0.1:3306)/payment_service") {
		t.Errorf("PSP env %v", penv)
	}

	// Six instances on three nodes: each node is first for two of them.
	first := map[string]int{}
	for k := 1; k <= 2; k++ {
		for _, svc := range Services {
			u, _ := url.Parse(strings.Split(svc.Instance(k).Env(getenv, "127.0.0.1", brokers)["AMQP_URL"], ",")[0])
			first[u.Host]++
		}
	}
	for _, b := range brokers {
		if first[b] != 2 {
			t.Errorf("first node of the six instances: %v, want two each", first)
			break
		}
	}
	if got := ViewerEnv(getenv, "127.0.0.1", brokers)["LAB_AMQP_URL"]; got != "amqp://guest:guest@127.0.0.1:5701/,amqp://guest:guest@127.0.0.1:5702/,amqp://guest:guest@127.0.0.1:5703/" {
		t.Errorf("viewer LAB_AMQP_URL on a cluster = %q", got)
	}
}

func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	if _, err := Read(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Read of an empty directory: err = %v, want fs.ErrNotExist", err)
	}
	want := File{
		Supervisor: Process{Name: "supervisor", PID: 10, Exe: "/r/bin/supervisor", Log: "/r/.run/stack.log", PIDFile: "/r/.run/stack.pid"},
		StartedAt:  time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
		Processes: []Process{{Name: "order", Service: "order", Instance: 1, PID: 11, URL: "http://127.0.0.1:8081",
			Exe: "/r/bin/order", Log: "/r/.run/order.log", PIDFile: "/r/.run/order.pid", Restarts: 2}},
		Nodes: []Node{{Name: "ordersaga-1@localhost", PID: 12, Port: 5701, DistPort: 25701, Dir: "/r/.run/rabbit/ordersaga-1",
			Exe: "/usr/lib/erlang/erts/bin/beam.smp", Log: "/r/.run/rabbit/ordersaga-1/log/ordersaga-1@localhost.log",
			PIDFile: "/r/.run/rabbit/ordersaga-1/pid", Restarts: 1}},
		ViewerURL: "http://127.0.0.1:8080/?token=t0k",
	}
	if err := Write(dir, want); err != nil {
		t.Fatal(err)
	}
	// It holds the viewer's token: its owner's only.
	if st, err := os.Stat(Path(dir)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("stack.json mode %v (%v), want 0600", st.Mode().Perm(), err)
	}
	got, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Read = %+v, want %+v", got, want)
	}
}

// The tokens: the PSP's key goes to the PSP and to payment, nowhere else;
// the viewer gets its own token (VIEWER_TOKEN, else ADMIN_TOKEN), and its
// URL carries it.
func TestTokens(t *testing.T) {
	settings := map[string]string{"PSP_TOKEN": "psp-k", "ADMIN_TOKEN": "adm"}
	getenv := func(k string) string { return settings[k] }
	payment, _ := Lookup("payment-fake")
	if got := payment.Instance(2).Env(getenv, "127.0.0.1", nil)["PSP_TOKEN"]; got != "psp-k" {
		t.Errorf("payment PSP_TOKEN = %q", got)
	}
	if env := PSPEnv(getenv, "127.0.0.1"); env["PSP_TOKEN"] != "psp-k" || env["ADMIN_TOKEN"] != "adm" {
		t.Errorf("PSP env: PSP_TOKEN %q, ADMIN_TOKEN %q", env["PSP_TOKEN"], env["ADMIN_TOKEN"])
	}
	for _, svc := range []string{"order", "inventory"} {
		s, _ := Lookup(svc)
		if _, ok := s.Env(getenv, "127.0.0.1")["PSP_TOKEN"]; ok {
			t.Errorf("%s gets the PSP's key", svc)
		}
	}
	if got := ViewerEnv(getenv, "127.0.0.1", nil)["VIEWER_TOKEN"]; got != "adm" {
		t.Errorf("viewer token without VIEWER_TOKEN = %q, want ADMIN_TOKEN's", got)
	}
	settings["VIEWER_TOKEN"] = "v t+"
	if got := ViewerURL(getenv); got != "http://127.0.0.1:8080/?token=v+t%2B" {
		t.Errorf("ViewerURL = %q", got)
	}
}

// Env is what the service's first instance gets against the machine's
// broker (Instance.Env for the others and for a cluster).
func (s Service) Env(getenv func(string) string, httpHost string) map[string]string {
	return s.Instance(1).Env(getenv, httpHost, nil)
}
