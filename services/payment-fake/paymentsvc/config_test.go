package paymentsvc

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/pkg/compose/process"
)

func TestLoadPSPConfig(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		wantURL string
		wantErr string // substring; "" for none
	}{
		{"default: the PSP process on 8084", nil, DefaultPSPURL, ""},
		{"explicit PSP_URL", map[string]string{"PSP_URL": "http://psp.example:80/v1"}, "http://psp.example:80/v1", ""},
		{"a list", map[string]string{"PSP_URL": "http://a:8084/psp,http://b:8084/psp"}, "http://a:8084/psp,http://b:8084/psp", ""},
		{"bad PSP_URL", map[string]string{"PSP_URL": "psp:80"}, "", "PSP_URL"},
		{"bad PSP_TIMEOUT", map[string]string{"PSP_TIMEOUT": "soon"}, "", "PSP_TIMEOUT"},
		{"PSP_TIMEOUT too long", map[string]string{"PSP_TIMEOUT": "20s"}, "", "PSP_TIMEOUT"},
	}
	for _, tt := range tests {
		env := process.NewEnv(func(k string) string { return tt.env[k] })
		c, err := loadPSPConfig(env)
		if err == nil {
			err = env.Err()
		}
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: err = %v, want one mentioning %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil || c.URL != tt.wantURL {
			t.Errorf("%s: URL = %q, err = %v; want %q", tt.name, c.URL, err, tt.wantURL)
		}
	}
}

// Every bad setting is reported at once, before anything is started.
func TestRunReportsBadConfiguration(t *testing.T) {
	env := map[string]string{"HTTP_ADDR": ":0", "PSP_URL": "ftp://psp", "PSP_TIMEOUT": "-1s", "OUTBOX_BATCH": "0"}
	err := Run(t.Context(), func(k string) string { return env[k] }, nil)
	if err == nil {
		t.Fatal("Run = nil, want a configuration error")
	}
	for _, key := range []string{"PSP_URL", "PSP_TIMEOUT", "OUTBOX_BATCH"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error %q does not mention %s", err, key)
		}
	}
}

func TestLoadSagaConfig(t *testing.T) {
	env := process.NewEnv(func(string) string { return "" })
	c, err := loadSagaConfig(env, 5*time.Second)
	if err != nil || env.Err() != nil {
		t.Fatalf("defaults: %v %v", err, env.Err())
	}
	if c.App.ChargeDeadline != 10*time.Minute || c.App.RefundDeadline != 30*time.Minute ||
		c.SweepInterval != 5*time.Second || c.App.Grace != 30*time.Second || c.App.SweepBatch != 20 ||
		c.App.Backoff.Base != 30*time.Second || c.App.Backoff.Cap != 5*time.Minute || c.App.CancelSettle != 15*time.Second {
		t.Errorf("defaults = %+v", c)
	}

	set := map[string]string{"PAYMENT_DEADLINE": "2m", "REFUND_DEADLINE": "1h", "PAYMENT_SWEEP_INTERVAL": "250ms",
		"PAYMENT_SWEEP_GRACE": "1s", "PAYMENT_SWEEP_BATCH": "5", "PAYMENT_RETRY_BASE": "2s", "PAYMENT_RETRY_CAP": "20s"}
	env = process.NewEnv(func(k string) string { return set[k] })
	c, err = loadSagaConfig(env, 5*time.Second)
	if err != nil || env.Err() != nil {
		t.Fatalf("set: %v %v", err, env.Err())
	}
	if c.App.ChargeDeadline != 2*time.Minute || c.App.RefundDeadline != time.Hour || c.SweepInterval != 250*time.Millisecond ||
		c.App.Grace != time.Second || c.App.SweepBatch != 5 || c.App.Backoff.Base != 2*time.Second || c.App.Backoff.Cap != 20*time.Second {
		t.Errorf("set = %+v", c)
	}

	bad := map[string]string{"PAYMENT_DEADLINE": "soon", "REFUND_DEADLINE": "-1m", "PAYMENT_SWEEP_BATCH": "0"}
	env = process.NewEnv(func(k string) string { return bad[k] })
	_, _ = loadSagaConfig(env, 5*time.Second)
	for _, key := range []string{"PAYMENT_DEADLINE", "REFUND_DEADLINE", "PAYMENT_SWEEP_BATCH"} {
		if env.Err() == nil || !strings.Contains(env.Err().Error(), key) {
			t.Errorf("error %v does not mention %s", env.Err(), key)
		}
	}
	inverted := map[string]string{"PAYMENT_RETRY_BASE": "1m", "PAYMENT_RETRY_CAP": "10s"}
	if _, err := loadSagaConfig(process.NewEnv(func(k string) string { return inverted[k] }), 5*time.Second); err == nil ||
		!strings.Contains(err.Error(), "PAYMENT_RETRY_CAP") {
		t.Errorf("cap below base: %v, want an error", err)
	}
	short := map[string]string{"PAYMENT_CANCEL_SETTLE": "5s"}
	if _, err := loadSagaConfig(process.NewEnv(func(k string) string { return short[k] }), 5*time.Second); err == nil ||
		!strings.Contains(err.Error(), "PAYMENT_CANCEL_SETTLE") {
		t.Errorf("in-flight window shorter than a charge and its query: %v, want an error", err)
	}
}

// A batch's concurrent PSP calls find their connections again in the next
// batch: the second round of calls dials nothing (http.DefaultTransport
// keeps two idle connections per host and dials the others again).
func TestPSPTransportKeepsAConnectionPerCallInFlight(t *testing.T) {
	const calls = 32 // 2 consumers x 1 worker x 16 per batch
	var dials atomic.Int64
	arrived := make(chan struct{}, calls)
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release // every call in flight at once, as in a batch
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	client := &http.Client{Transport: pspTransport(process.Config{ConsumerWorkers: 1, ConsumerBatch: calls / 2})}
	for round := 1; round <= 2; round++ {
		var wg sync.WaitGroup
		for range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.Get(srv.URL)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}()
		}
		for range calls {
			<-arrived
		}
		for range calls {
			release <- struct{}{}
		}
		wg.Wait()
	}
	if got := dials.Load(); got != calls {
		t.Fatalf("%d connections dialled for two rounds of %d concurrent calls, want %d (the second round reuses the first's)", got, calls, calls)
	}
}
