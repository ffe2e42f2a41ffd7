package stack

import (
	"errors"
	"io/fs"
	"net/url"
	"reflect"
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
		"PSP_URL":               "http://127.0.0.1:8083/psp",
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

func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	if _, err := Read(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Read of an empty directory: err = %v, want fs.ErrNotExist", err)
	}
	want := File{
		Supervisor: Process{Name: "stack", PID: 10, Exe: "/r/bin/stack", Log: "/r/.run/stack.log", PIDFile: "/r/.run/stack.pid"},
		StartedAt:  time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
		Processes: []Process{{Name: "order", Service: "order", Instance: 1, PID: 11, URL: "http://127.0.0.1:8081",
			Exe: "/r/bin/order", Log: "/r/.run/order.log", PIDFile: "/r/.run/order.pid", Restarts: 2}},
	}
	if err := Write(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Read = %+v, want %+v", got, want)
	}
}
