package process

import (
	"strings"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/pkg/aids/wrongway"
)

func TestRetentionSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		inbox   time.Duration
		outbox  time.Duration
		every   time.Duration
		batch   int
		wantErr []string
	}{
		{"defaults", nil, 168 * time.Hour, 72 * time.Hour, time.Minute, 1000, nil},
		{"set", map[string]string{"INBOX_RETENTION": "24h", "OUTBOX_RETENTION": "1h", "RETENTION_INTERVAL": "10s", "RETENTION_BATCH": "50"},
			24 * time.Hour, time.Hour, 10 * time.Second, 50, nil},
		{"bad", map[string]string{"INBOX_RETENTION": "0s", "OUTBOX_RETENTION": "soon", "RETENTION_INTERVAL": "-1m", "RETENTION_BATCH": "0"},
			168 * time.Hour, 72 * time.Hour, time.Minute, 1000,
			[]string{"INBOX_RETENTION", "OUTBOX_RETENTION", "RETENTION_INTERVAL", "RETENTION_BATCH"}},
	}
	for _, tt := range tests {
		c, err := load(tt.env)
		if c.InboxRetention != tt.inbox || c.OutboxRetention != tt.outbox || c.RetentionInterval != tt.every || c.RetentionBatch != tt.batch {
			t.Errorf("%s: got %s %s %s %d, want %s %s %s %d", tt.name, c.InboxRetention, c.OutboxRetention, c.RetentionInterval,
				c.RetentionBatch, tt.inbox, tt.outbox, tt.every, tt.batch)
		}
		checkErr(t, tt.name, err, tt.wantErr)
	}
}

// MYSQL_MAX_CONNS sizes the pool (it was once declared and never read).
func TestPoolSize(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		value   string
		want    int
		wantErr bool
	}{{"", 16, false}, {"40", 40, false}, {"0", 16, true}, {"many", 16, true}} {
		c, err := load(map[string]string{"MYSQL_MAX_CONNS": tt.value})
		if c.MySQLMaxConns != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("MYSQL_MAX_CONNS=%q: pool %d, error %v; want %d, error %v", tt.value, c.MySQLMaxConns, err, tt.want, tt.wantErr)
		}
	}
}

// The outbox's settings: OUTBOX_DEADLINE is the total deadline of an
// event's retries (15m by default).
func TestOutboxSettings(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		env      map[string]string
		deadline time.Duration
		wantErr  []string
	}{
		{nil, 15 * time.Minute, nil},
		{map[string]string{"OUTBOX_DEADLINE": "1h"}, time.Hour, nil},
		{map[string]string{"OUTBOX_DEADLINE": "never"}, 15 * time.Minute, []string{"OUTBOX_DEADLINE"}},
	} {
		c, err := load(tt.env)
		if c.OutboxDeadline != tt.deadline {
			t.Errorf("%v: deadline %s, want %s", tt.env, c.OutboxDeadline, tt.deadline)
		}
		checkErr(t, tt.env, err, tt.wantErr)
	}
}

// The dispatcher's wait for confirms is derived from the lease, at most a
// third of it; a setting that breaks the rule is refused at start, along
// with every other bad key.
func TestConfirmTimeoutFitsTheLease(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		env     map[string]string
		confirm time.Duration
		wantErr []string
	}{
		{nil, 5 * time.Second, nil}, // lease 30s: 5 s at most
		{map[string]string{"OUTBOX_LEASE": "5s"}, 5 * time.Second / 3, nil},
		{map[string]string{"OUTBOX_LEASE": "3s"}, time.Second, nil},
		{map[string]string{"OUTBOX_LEASE": "3s", "OUTBOX_CONFIRM_TIMEOUT": "800ms"}, 800 * time.Millisecond, nil},
		{map[string]string{"OUTBOX_LEASE": "3s", "OUTBOX_CONFIRM_TIMEOUT": "2s", "OUTBOX_BATCH": "0"}, 0,
			[]string{"OUTBOX_CONFIRM_TIMEOUT=2s", "OUTBOX_LEASE", "OUTBOX_BATCH"}},
	} {
		c, err := load(tt.env)
		if len(tt.wantErr) == 0 && c.OutboxConfirmTimeout != tt.confirm {
			t.Errorf("%v: confirm timeout %s, want %s", tt.env, c.OutboxConfirmTimeout, tt.confirm)
		}
		checkErr(t, tt.env, err, tt.wantErr)
	}
}

// load is the order service's configuration read from env, and the error
// that names its bad settings.
func load(env map[string]string) (Config, error) {
	e := NewEnv(func(k string) string { return env[k] })
	return Load(e, "order", ":8081", "order_service"), e.Err()
}

// checkErr checks that err names every key of want, and is nil when want
// is empty; what names the case in a failure.
func checkErr(t *testing.T, what any, err error, want []string) {
	t.Helper()
	for _, key := range want {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%v: error %v, want it to name %s", what, err, key)
		}
	}
	if len(want) == 0 && err != nil {
		t.Errorf("%v: unexpected error %v", what, err)
	}
}

// AMQP_URL takes one address or a comma-separated list (the nodes of a
// cluster); every bad address is reported at once, passwords masked.
func TestAMQPURLList(t *testing.T) {
	t.Parallel()
	list := "amqp://u:pw1@127.0.0.1:5701/,amqp://u:pw1@127.0.0.1:5702/,amqp://u:pw1@127.0.0.1:5703/"
	c, err := load(map[string]string{"AMQP_URL": list})
	if err != nil {
		t.Fatalf("three addresses: %v", err)
	}
	if got, want := c.Masked().AMQPURL, strings.ReplaceAll(list, "pw1", "*****"); got != want {
		t.Errorf("masked AMQP_URL = %q, want %q", got, want)
	}
	_, err = load(map[string]string{"AMQP_URL": "amqp://u:pw2@a:5701/,redis://u:pw2@b:5702/,amqp://u:pw2@c:x/"})
	if err == nil {
		t.Fatal("two bad addresses: no error")
	}
	for _, want := range []string{"AMQP_URL", "address 2", "address 3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "pw2") {
		t.Errorf("error %q shows the password", err)
	}
}

// Every wrong-way switch is a deliberate mistake: refused unless DEMO_MODE
// is on, and on only when named.
func TestWrongWaySwitchesNeedDemoMode(t *testing.T) {
	t.Parallel()
	for sw := range wrongway.All {
		for _, demo := range []string{"", "false", "true"} {
			c, err := load(map[string]string{"WRONG_WAY": string(sw), "DEMO_MODE": demo})
			if demo == "true" {
				if err != nil || !c.WrongWay.On(sw) || c.WrongWay.String() != string(sw) {
					t.Errorf("WRONG_WAY=%s with DEMO_MODE=true: switches %q, error %v; want exactly it on", sw, c.WrongWay, err)
				}
				continue
			}
			if err == nil || !strings.Contains(err.Error(), "needs DEMO_MODE=true") {
				t.Errorf("WRONG_WAY=%s with DEMO_MODE=%q: error %v, want a refusal naming DEMO_MODE", sw, demo, err)
			}
		}
	}
}
