// Package sagatest runs the three services in-process for end-to-end tests
// and experiments: each with its own fresh database, all in one RabbitMQ
// namespace of their own, each with its own failpoint registry. Services
// can be stopped and started again, as a crash-and-restart would.
package sagatest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/relmsg/ordersaga/internal/contract"
	"github.com/relmsg/ordersaga/internal/lab"
	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/base/sqldb/sqldbtest"
	"github.com/relmsg/ordersaga/pkg/base/tracing"
	"github.com/relmsg/ordersaga/pkg/base/web"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/rabbit/rabbittest"
	"github.com/relmsg/ordersaga/services/inventory/inventorysvc"
	"github.com/relmsg/ordersaga/services/order/ordersvc"
	"github.com/relmsg/ordersaga/services/payment-fake/paymentsvc"
	"github.com/relmsg/ordersaga/services/payment-fake/pspsvc"
)

// RunFunc is a service's Run.
type RunFunc func(ctx context.Context, getenv func(string) string, stdout io.Writer) error

// Service is one running service.
type Service struct {
	Name       string
	URL        string // http://127.0.0.1:port
	DB         *sqldbtest.DB
	Failpoints *failpoint.Registry
	Env        map[string]string

	t       testing.TB
	run     RunFunc
	logs    *logBuffer
	checker *contract.Checker     // nil: no contract checks
	spans   sdktrace.SpanExporter // nil: the environment's tracing

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan error
}

// Saga is the three services and the fake PSP, the process every payment
// instance calls (its books are tables of the payment schema: it shares
// the payment service's test database).
type Saga struct {
	NS        rabbit.Namespace
	Order     *Service
	Inventory *Service
	Payment   *Service
	PSP       *Service

	checker *contract.Checker // docs/openapi.yaml, around every service (contract.go)
	tap     *tap              // docs/asyncapi.yaml, on a copy of every message
}

// Option changes a service's environment before it starts.
type Option func(name string, env map[string]string)

// WithEnv sets a variable for one service ("order", "inventory", "payment",
// "psp").
func WithEnv(service, key, value string) Option {
	return func(name string, env map[string]string) {
		if name == service {
			env[key] = value
		}
	}
}

// Start runs the PSP, inventory, payment-fake and order and waits until
// each is ready.
func Start(t testing.TB, opts ...Option) *Saga {
	t.Helper()
	return start(t, nil, opts)
}

// StartWithSpans is Start with every span of the four processes recorded
// in spans (the SDK's in-memory exporter, tracetest), each under its
// service's name (pkg/base/tracing, WithExporter).
func StartWithSpans(t testing.TB, spans sdktrace.SpanExporter, opts ...Option) *Saga {
	t.Helper()
	return start(t, spans, opts)
}

func start(t testing.TB, spans sdktrace.SpanExporter, opts []Option) *Saga {
	t.Helper()
	ns := rabbittest.Namespace(t)
	s := &Saga{NS: ns}
	// Delete the services' exchanges and queues (retry tiers and dead-letter
	// queues included) at the end, by name over AMQP: no rabbitmqctl, whose
	// Erlang VM cost a second of CPU per stack. Registered before the
	// services exist: t.Cleanup runs last-in first-out, so the services stop
	// first and the queues go after. TestAStackLeavesNoQueue holds this
	// complete.
	rabbittest.Cleanup(t, ordersvc.Topology(ns), inventorysvc.Topology(ns), paymentsvc.Topology(ns))
	s.Order = newService(t, ns, "order", ordersvc.Run, opts)
	s.Inventory = newService(t, ns, "inventory", inventorysvc.Run, opts)
	s.Payment = newService(t, ns, "payment", paymentsvc.Run, opts)
	s.PSP = newServiceOn(t, ns, "psp", pspsvc.Run, opts, s.Payment.DB)
	if _, set := s.Payment.Env["PSP_URL"]; !set {
		s.Payment.Env["PSP_URL"] = s.PSP.URL + "/psp"
	}
	// The PSP's key, shared by the PSP and the payment service only, as
	// scripts/up.sh makes one per start.
	if _, set := s.PSP.Env["PSP_TOKEN"]; !set {
		s.PSP.Env["PSP_TOKEN"] = fmt.Sprintf("psp-%x", rand.Uint64())
	}
	if _, set := s.Payment.Env["PSP_TOKEN"]; !set {
		s.Payment.Env["PSP_TOKEN"] = s.PSP.Env["PSP_TOKEN"]
	}
	// The order service asks the others for their records (reconciler,
	// timeline): point it at this stack's ports unless an option did.
	for k, v := range map[string]string{"INVENTORY_URL": s.Inventory.URL, "PAYMENT_URL": s.Payment.URL} {
		if _, set := s.Order.Env[k]; !set {
			s.Order.Env[k] = v
		}
	}
	if s.Order.Env[contractChecksKey] != "off" {
		s.startContractChecks(t, s.Order.Env["AMQP_URL"])
	}
	for _, svc := range []*Service{s.PSP, s.Inventory, s.Payment, s.Order} {
		svc.checker = s.checker
		svc.spans = spans
		svc.Start()
	}
	return s
}

func newService(t testing.TB, ns rabbit.Namespace, name string, run RunFunc, opts []Option) *Service {
	return newServiceOn(t, ns, name, run, opts, sqldbtest.New(t, name))
}

// newServiceOn is newService on an existing database.
func newServiceOn(t testing.TB, ns rabbit.Namespace, name string, run RunFunc, opts []Option, db *sqldbtest.DB) *Service {
	port := FreePort(t)
	env := map[string]string{
		"HTTP_ADDR":             fmt.Sprintf("127.0.0.1:%d", port),
		"MYSQL_DSN":             db.DSN,
		"MYSQL_CREATE_DATABASE": "false",
		"AMQP_URL":              rabbittest.URL(),
		"AMQP_NAMESPACE":        string(ns),
		"DEMO_MODE":             "true",
		"LOG_LEVEL":             "info",
		"SHUTDOWN_TIMEOUT":      "10s",
		// Several stacks run at once: keep each service's pool small.
		"MYSQL_MAX_CONNS": "12",
	}
	for _, o := range opts {
		o(name, env)
	}
	svc := &Service{Name: name, URL: fmt.Sprintf("http://127.0.0.1:%d", port), DB: db, Env: env,
		Failpoints: failpoint.NewRegistry(), t: t, run: run, logs: &logBuffer{}}
	t.Cleanup(func() {
		svc.Stop()
		if t.Failed() {
			t.Logf("---- last log lines of %s ----\n%s", name, svc.logs.tail(40))
		}
	})
	return svc
}

// Start runs the service (again) and waits until it has logged that it
// listens and /readyz answers 200. Both: the port was only free when
// FreePort probed it, and a service of another test that took it since
// would answer /readyz in this one's place.
func (s *Service) Start() {
	s.t.Helper()
	from := len(s.logs.String())
	s.mu.Lock()
	ctx, cancel := context.WithCancel(failpoint.WithRegistry(context.Background(), s.Failpoints))
	if s.checker != nil {
		ctx = web.WithObserver(ctx, s.checker.Middleware(s.Name))
	}
	if s.spans != nil {
		ctx = tracing.WithExporter(ctx, s.spans)
	}
	s.cancel = cancel
	s.done = make(chan error, 1)
	done := s.done
	s.mu.Unlock()
	go func() { done <- s.run(ctx, func(k string) string { return s.Env[k] }, s.logs) }()
	listening := func() bool { return strings.Contains(s.logs.String()[from:], `"msg":"listening"`) }
	s.waitReady(s.Name, listening, func() (bool, error) {
		select {
		case err := <-done:
			s.mu.Lock()
			s.cancel = nil // nothing left to stop
			s.mu.Unlock()
			return true, err
		default:
			return false, nil
		}
	})
}

// waitReady waits up to 30 s until the service's /readyz answers 200 and
// ready holds; it fails the test, with the service's last log lines, when
// that does not come or exited reports that what was started has ended.
func (s *Service) waitReady(what string, ready func() bool, exited func() (bool, error)) {
	s.t.Helper()
	came := false
	defer func() {
		if !came {
			s.t.Logf("%s's log:\n%s", s.Name, s.logs.tail(20))
		}
	}()
	testutil.WaitFor(s.t, 30*time.Second, what+" to be ready", func() bool {
		if gone, err := exited(); gone {
			s.t.Fatalf("%s exited during start: %v", what, err)
		}
		resp, err := http.Get(s.URL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && ready()
	})
	came = true
}

// Stop sends the service its shutdown signal and waits for Run to return.
func (s *Service) Stop() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.cancel = nil
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			s.t.Errorf("%s stopped with an error: %v", s.Name, err)
		}
	case <-time.After(30 * time.Second):
		// Keep the evidence: every goroutine's stack, to find what blocks.
		f, err := os.CreateTemp("", "sagatest-stuck-"+s.Name+"-*.txt")
		if err == nil {
			_ = pprof.Lookup("goroutine").WriteTo(f, 1)
			f.Close()
		}
		s.t.Errorf("%s did not stop within 30s (goroutines: %s)", s.Name, f.Name())
	}
}

// Logs returns everything the service logged so far.
func (s *Service) Logs() string { return s.logs.String() }

// Do sends a JSON request and decodes a JSON answer into out (if not nil).
// A transport error fails the test.
func (s *Service) Do(method, path string, headers map[string]string, body any, out any) int {
	s.t.Helper()
	code, err := s.TryDo(method, path, headers, body, out)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	return code
}

// TryDo is Do that returns transport errors (a service being restarted)
// instead of failing the test.
func (s *Service) TryDo(method, path string, headers map[string]string, body any, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	// An error is a problem document (its "status" a number, where a
	// resource's is a string): decoded only into what holds any JSON.
	if out != nil && (resp.StatusCode < 400 || holdsAny(out)) {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil && err != io.EOF {
			return resp.StatusCode, fmt.Errorf("decode: %w", err)
		}
	}
	return resp.StatusCode, nil
}

func holdsAny(out any) bool {
	switch out.(type) {
	case *map[string]any, *any, *json.RawMessage:
		return true
	}
	return false
}

// Eventually polls cond until it holds or the wait runs out
// (testutil.WaitFor).
func Eventually(t testing.TB, wait time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, wait, what, cond)
}

// FreePort picks a free port below the kernel's ephemeral range (32768 and
// up on Linux). A service keeps its port across a stop and a start; a port
// from the ephemeral range could meanwhile be taken by any outgoing
// connection of the test process (MySQL, AMQP, HTTP clients).
//
// A port is handed out once per test process: two services of this
// process's stacks could otherwise draw the same free port before either
// listens (with a hundred ports drawn from twelve thousand, that happens).
// Across test processes, a lock on the port (claim) does the same: with
// four packages at once, two of them drew one port (bind: address already
// in use).
func FreePort(t testing.TB) int {
	for i := 0; i < 200; i++ {
		port := 20000 + rand.IntN(12000)
		if port >= 25700 && port < 26000 { // rabbitnode's distribution ports
			continue
		}
		if _, taken := handedOut.LoadOrStore(port, true); taken || !claim(port) {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatal("no free port in 20000-31999")
	return 0
}

// handedOut are the ports FreePort has returned in this process.
var handedOut sync.Map // int -> bool

// claim takes a lock on the port for the rest of this process, so that no
// other test process (go test runs several packages at once) hands out the
// same port between its probe and the service's bind: a lock file per port,
// flock'ed and never closed; the kernel drops the lock when the process
// ends, however it ends.
func claim(port int) bool {
	dir := filepath.Join(os.TempDir(), "sagatest-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true // no lock to take: the probe alone decides, as before
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false // another live test process holds it
	}
	claimedMu.Lock()
	claimed = append(claimed, f) // kept open: the lock lasts as long as the process
	claimedMu.Unlock()
	return true
}

var (
	claimedMu sync.Mutex
	claimed   []*os.File
)

// logBuffer collects a service's JSON log lines.
type logBuffer struct{ testutil.SyncBuffer }

func (b *logBuffer) tail(n int) string {
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Metric reads one sample from the service's /metrics: the sum over every
// series of name whose labels have the given values.
func (s *Service) Metric(name string, labels ...string) float64 {
	s.t.Helper()
	families, err := lab.Scrape(context.Background(), http.DefaultClient, s.URL+"/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	return lab.SumSamples(families, name, labels...)
}
