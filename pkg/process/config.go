// Package process is the part of every service's composition root that
// does not depend on its domain: typed configuration from the environment,
// the JSON logger, the database (opened and migrated), the broker
// connection, the outbox dispatcher, the consume loops, the HTTP listener
// with health, metrics and (demo mode only) failpoint endpoints, and an
// orderly shutdown. Each service's run function reads top to bottom with it.
package process

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/relmsg/ordersaga/pkg/instance"
	"github.com/relmsg/ordersaga/pkg/outbox"
	"github.com/relmsg/ordersaga/pkg/rabbit"
	"github.com/relmsg/ordersaga/pkg/wrongway"
)

// Env reads typed settings and collects every bad one, so a misconfigured
// service reports all its mistakes at once.
type Env struct {
	getenv func(string) string
	errs   []error
}

// NewEnv wraps a getenv function (os.Getenv in main, a map in tests).
func NewEnv(getenv func(string) string) *Env { return &Env{getenv: getenv} }

// Err joins every problem found so far.
func (e *Env) Err() error { return errors.Join(e.errs...) }

// String returns the variable or def when unset.
func (e *Env) String(key, def string) string {
	if v := e.getenv(key); v != "" {
		return v
	}
	return def
}

// Int returns the variable as an int within [min, max].
func (e *Env) Int(key string, def, min, max int) int {
	v := e.getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min || n > max {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: want an integer in [%d, %d]", key, v, min, max))
		return def
	}
	return n
}

// Bool returns the variable as a bool.
func (e *Env) Bool(key string, def bool) bool {
	v := e.getenv(key)
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: want true or false", key, v))
		return def
	}
	return b
}

// List returns the variable as a comma-separated list of host names
// (blanks around the commas ignored), reporting a name with a port, a
// scheme or a blank in it.
func (e *Env) List(key string) []string {
	var out []string
	for _, p := range strings.Split(e.getenv(key), ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if strings.ContainsAny(p, ":/ @") {
			e.errs = append(e.errs, fmt.Errorf("%s: %q: want host names without ports or schemes, separated by commas", key, p))
			continue
		}
		out = append(out, p)
	}
	return out
}

// Duration returns the variable as a positive duration ("250ms", "30s").
func (e *Env) Duration(key string, def time.Duration) time.Duration {
	v := e.getenv(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: want a positive duration such as 500ms or 30s", key, v))
		return def
	}
	return d
}

// Config is what every service reads from the environment.
type Config struct {
	Name           string // service name in logs and metrics
	InstanceID     string // INSTANCE_ID: this instance among its service's (default host-pid), in logs, metrics and records
	HTTPAddr       string // HTTP_ADDR
	MySQLDSN       string // MYSQL_DSN
	MySQLMaxConns  int    // MYSQL_MAX_CONNS: the pool's size
	CreateDatabase bool   // MYSQL_CREATE_DATABASE: create the schema if missing (root on a laptop)
	AMQPURL        string // AMQP_URL: one address, or a comma-separated list (the nodes of a cluster)
	// AMQPNamespace prefixes exchange and queue names (AMQP_NAMESPACE);
	// empty in production, set by tests to isolate them.
	AMQPNamespace string
	DemoMode      bool   // DEMO_MODE: failpoint endpoints and lab switches
	AdminToken    string // ADMIN_TOKEN: bearer token of /admin and /debug (open without one only in demo mode)
	// AllowedHosts are the Host names this process answers besides the
	// machine's own (loopback addresses, localhost): ALLOWED_HOSTS, the
	// names docker compose gives the services (web.Guard).
	AllowedHosts   []string
	Failpoints     string // FAILPOINTS: armed at start, see pkg/failpoint
	LogLevel       slog.Level
	OutboxWorkers  int           // OUTBOX_WORKERS
	OutboxBatch    int           // OUTBOX_BATCH
	OutboxPoll     time.Duration // OUTBOX_POLL_INTERVAL
	OutboxLease    time.Duration // OUTBOX_LEASE
	OutboxDeadline time.Duration // OUTBOX_DEADLINE: retrying an event ends this long after its first attempt
	// OutboxConfirmTimeout bounds the dispatcher's wait for publisher
	// confirms (OUTBOX_CONFIRM_TIMEOUT): at most a third of the lease
	// [min(5s, OUTBOX_LEASE/3)].
	OutboxConfirmTimeout time.Duration
	// ConsumerWorkers is how many transactions a consumer runs at once
	// (CONSUMER_WORKERS). Few workers with batches do more than many
	// without: the deliveries waiting are split among fewer workers, so
	// each commits more of them at once (docs/performance.md, "Round two").
	ConsumerWorkers int
	Prefetch        int // CONSUMER_PREFETCH
	// ConsumerBatch is the most deliveries a consumer worker commits in one
	// transaction (CONSUMER_BATCH; 1: one transaction per message, the
	// chapter's flow). See pkg/inbox, HandleBatch.
	ConsumerBatch   int
	ShutdownTimeout time.Duration // SHUTDOWN_TIMEOUT
	// OutboxDispatch=false runs an instance without its dispatcher
	// (OUTBOX_DISPATCH=off): the "dispatcher stopped" experiment.
	OutboxDispatch bool
	// WrongWay: deliberate mistakes for the experiments (WRONG_WAY,
	// demo mode only).
	WrongWay *wrongway.Set
	// InboxRetention is the inbox replay window (INBOX_RETENTION): inbox
	// rows are deleted after it, and consumers refuse (dead-letter) events
	// older than it.
	InboxRetention  time.Duration
	OutboxRetention time.Duration // OUTBOX_RETENTION: 'sent' outbox rows are deleted after it
	// KeyRetention is how long the HTTP API's idempotency keys are kept
	// (IDEMPOTENCY_KEY_RETENTION): a request with a key older than that is
	// a new request (docs/contract.md, "Idempotency keys").
	KeyRetention      time.Duration
	RetentionInterval time.Duration // RETENTION_INTERVAL: how often the retention job runs
	// ParkDeadline is how long a delta event may wait for the earlier
	// versions of its aggregate before it is alerted on (PARK_DEADLINE).
	ParkDeadline   time.Duration
	RetentionBatch int // RETENTION_BATCH: rows per DELETE
}

// Load reads the shared settings. defaultAddr and defaultDB are the
// service's own defaults from docs/contract.md (":8081", "order_service").
func Load(env *Env, name, defaultAddr, defaultDB string) Config {
	c := Config{
		Name:              name,
		InstanceID:        env.String("INSTANCE_ID", instance.Default()),
		HTTPAddr:          env.String("HTTP_ADDR", defaultAddr),
		MySQLDSN:          env.String("MYSQL_DSN", "root@tcp(127.0.0.1:3306)/"+defaultDB),
		MySQLMaxConns:     env.Int("MYSQL_MAX_CONNS", 16, 1, 512),
		CreateDatabase:    env.Bool("MYSQL_CREATE_DATABASE", true),
		AMQPURL:           env.String("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
		AMQPNamespace:     env.String("AMQP_NAMESPACE", ""),
		DemoMode:          env.Bool("DEMO_MODE", false),
		AdminToken:        env.String("ADMIN_TOKEN", ""),
		AllowedHosts:      env.List("ALLOWED_HOSTS"),
		Failpoints:        env.String("FAILPOINTS", ""),
		OutboxWorkers:     env.Int("OUTBOX_WORKERS", 2, 1, 64),
		OutboxBatch:       env.Int("OUTBOX_BATCH", 100, 1, 1000),
		OutboxPoll:        env.Duration("OUTBOX_POLL_INTERVAL", time.Second),
		OutboxLease:       env.Duration("OUTBOX_LEASE", 30*time.Second),
		OutboxDeadline:    env.Duration("OUTBOX_DEADLINE", 15*time.Minute),
		ConsumerWorkers:   env.Int("CONSUMER_WORKERS", 4, 1, 256),
		Prefetch:          env.Int("CONSUMER_PREFETCH", 64, 1, 10000),
		ConsumerBatch:     env.Int("CONSUMER_BATCH", 16, 1, 1000),
		ShutdownTimeout:   env.Duration("SHUTDOWN_TIMEOUT", 15*time.Second),
		OutboxDispatch:    env.String("OUTBOX_DISPATCH", "on") != "off",
		InboxRetention:    env.Duration("INBOX_RETENTION", 168*time.Hour),
		ParkDeadline:      env.Duration("PARK_DEADLINE", 5*time.Minute),
		OutboxRetention:   env.Duration("OUTBOX_RETENTION", 72*time.Hour),
		KeyRetention:      env.Duration("IDEMPOTENCY_KEY_RETENTION", 24*time.Hour),
		RetentionInterval: env.Duration("RETENTION_INTERVAL", time.Minute),
		RetentionBatch:    env.Int("RETENTION_BATCH", 1000, 1, 10000),
	}
	// The wait for confirms fits the lease (outbox.Config): at most a third.
	c.OutboxConfirmTimeout = env.Duration("OUTBOX_CONFIRM_TIMEOUT", outbox.DefaultConfirmTimeout(c.OutboxLease))
	if c.OutboxConfirmTimeout > c.OutboxLease/3 {
		env.errs = append(env.errs, fmt.Errorf("OUTBOX_CONFIRM_TIMEOUT=%s: at most a third of OUTBOX_LEASE (%s), so at most %s",
			c.OutboxConfirmTimeout, c.OutboxLease, c.OutboxLease/3))
	}
	ww, err := wrongway.Parse(env.String("WRONG_WAY", ""))
	if err != nil {
		env.errs = append(env.errs, fmt.Errorf("WRONG_WAY: %w", err))
	}
	c.WrongWay = wrongway.NewSet(ww)
	if c.WrongWay.Any() && !c.DemoMode {
		env.errs = append(env.errs, fmt.Errorf("WRONG_WAY=%s needs DEMO_MODE=true: these are deliberate mistakes for the lab", c.WrongWay))
	}
	if err := c.LogLevel.UnmarshalText([]byte(env.String("LOG_LEVEL", "info"))); err != nil {
		env.errs = append(env.errs, fmt.Errorf("LOG_LEVEL: want debug, info, warn or error"))
	}
	if _, err := mysql.ParseDSN(c.MySQLDSN); err != nil {
		env.errs = append(env.errs, fmt.Errorf("MYSQL_DSN: %v", err))
	}
	if _, err := rabbit.ParseURLs(c.AMQPURL); err != nil {
		env.errs = append(env.errs, fmt.Errorf("AMQP_URL=%q: want amqp://user:password@host:port/vhost, or several separated by commas (the nodes of a cluster): %w",
			MaskURL(c.AMQPURL), err))
	}
	return c
}

// Masked returns the config for logging, passwords hidden.
func (c Config) Masked() Config {
	if mc, err := mysql.ParseDSN(c.MySQLDSN); err == nil && mc.Passwd != "" {
		mc.Passwd = "xxxxx"
		c.MySQLDSN = mc.FormatDSN()
	}
	c.AMQPURL = MaskURL(c.AMQPURL)
	if c.AdminToken != "" {
		c.AdminToken = "*****"
	}
	return c
}

// userinfoPassword is the password of a URL's "user:password@".
var userinfoPassword = regexp.MustCompile(`(://[^:/@]*:)[^@/]*@`)

// MaskURL hides the password of a URL, or of each URL of a
// comma-separated list (AMQP_URL may name every node of a cluster).
func MaskURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			// Not a URL (a bad port, say), but it may still hold a password.
			parts[i] = userinfoPassword.ReplaceAllString(p, "${1}*****@")
			continue
		}
		if u.User == nil {
			continue
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		parts[i] = strings.Replace(u.String(), "xxxxx", "*****", 1)
	}
	return strings.Join(parts, ",")
}
