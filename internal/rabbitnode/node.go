// Package rabbitnode runs a private RabbitMQ node, without docker, for tests
// and tools that must stop, restart or cut a broker: its own node name, AMQP
// and distribution ports, data, log, config and enabled-plugins paths, and a
// private HOME holding its own Erlang cookie.
//
// The system broker (127.0.0.1:5672) is never touched. The node is started
// with the package's own rabbitmq-server script (under /usr/lib/rabbitmq/bin
// on Debian), not the /usr/sbin wrapper, which switches to the rabbitmq user
// and reuses the system node's cookie; and every rabbitmqctl call is
// addressed to this node by name (-n) with this node's HOME, so it reads
// this node's cookie and cannot reach another node.
//
// Nodes meant to form a cluster share Config.Cookie and differ in Name and
// Port (for example 5701-5703); Ctl runs any rabbitmqctl command against a
// node (stop_app, join_cluster, start_app). A node costs about 125 MiB and
// boots in about 5 s.
package rabbitnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Config describes one node.
type Config struct {
	// Name is the node name before the "@". epmd registers it, so it must
	// be unique on the machine (the system node is "rabbit").
	Name string
	// Host is the part after the "@"; "localhost" when empty.
	Host string
	// Port is the AMQP port (RABBITMQ_NODE_PORT), on 127.0.0.1.
	Port int
	// DistPort is the Erlang distribution port; Port+20000 when 0, which is
	// RabbitMQ's own rule.
	DistPort int
	// Dir holds everything of the node: mnesia/, log/, home/ (the cookie),
	// rabbitmq.conf, enabled_plugins, the pid file. Created when missing.
	Dir string
	// Cookie is the Erlang cookie. Nodes of one cluster share it. Random
	// when empty.
	Cookie string
	// Plugins are the enabled plugins (none by default: it boots faster).
	Plugins []string
	// BinDir is where the package's rabbitmq-server and rabbitmqctl are;
	// found when empty (see FindBinDir).
	BinDir string
	// BootTimeout bounds Start and StartApp; 60s when 0.
	BootTimeout time.Duration
}

// Node is a running node started by Start (or found by Attach).
type Node struct {
	cfg  Config
	name string
	env  []string

	mu  sync.Mutex
	pid int // see PID
}

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// FindBinDir returns the directory of the RabbitMQ package's own scripts:
// $RABBITMQ_BIN_DIR, /usr/lib/rabbitmq/bin (Debian, Ubuntu),
// /usr/local/lib/rabbitmq/bin or /opt/rabbitmq/sbin (generic unix archive).
func FindBinDir() (string, error) {
	candidates := []string{os.Getenv("RABBITMQ_BIN_DIR"), "/usr/lib/rabbitmq/bin", "/usr/local/lib/rabbitmq/bin", "/opt/rabbitmq/sbin"}
	for _, d := range candidates {
		if d == "" {
			continue
		}
		if st, err := os.Stat(filepath.Join(d, "rabbitmq-server")); err == nil && !st.IsDir() {
			return d, nil
		}
	}
	return "", errors.New("rabbitmq-server not found in /usr/lib/rabbitmq/bin, /usr/local/lib/rabbitmq/bin or /opt/rabbitmq/sbin (set RABBITMQ_BIN_DIR)")
}

// Start writes the node's files, starts it detached and waits until it
// accepts AMQP connections. On failure the node is stopped and the error
// carries the end of its log.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	n, err := newNode(cfg)
	if err != nil {
		return nil, err
	}
	if err := n.writeFiles(); err != nil {
		return nil, fmt.Errorf("rabbitnode %s: %w", n.name, err)
	}
	if err := n.boot(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// newNode checks cfg, fills in its defaults and computes the node's
// environment; it starts nothing.
func newNode(cfg Config) (*Node, error) {
	if !validName.MatchString(cfg.Name) || cfg.Name == "rabbit" {
		return nil, fmt.Errorf("rabbitnode: node name %q: want 1-64 of A-Z a-z 0-9 _ -, not the system node's \"rabbit\"", cfg.Name)
	}
	if cfg.Port <= 0 || cfg.Port > 65535 || cfg.Port == 5672 {
		return nil, fmt.Errorf("rabbitnode: port %d: want a free port other than the system broker's 5672", cfg.Port)
	}
	if cfg.Host == "" {
		cfg.Host = "localhost"
	}
	if cfg.DistPort == 0 {
		cfg.DistPort = cfg.Port + 20000
	}
	if cfg.DistPort > 65535 || cfg.DistPort == 25672 {
		return nil, fmt.Errorf("rabbitnode: distribution port %d: want a free port other than the system node's 25672", cfg.DistPort)
	}
	if cfg.Dir == "" {
		return nil, errors.New("rabbitnode: Config.Dir is required")
	}
	if cfg.BootTimeout == 0 {
		cfg.BootTimeout = 60 * time.Second
	}
	if cfg.Cookie == "" {
		cfg.Cookie = NewCookie()
	}
	if cfg.BinDir == "" {
		d, err := FindBinDir()
		if err != nil {
			return nil, fmt.Errorf("rabbitnode: %w", err)
		}
		cfg.BinDir = d
	}
	n := &Node{cfg: cfg, name: cfg.Name + "@" + cfg.Host}
	n.env = n.environment()
	return n, nil
}

// NewCookie returns a random Erlang cookie (for the nodes of one cluster).
func NewCookie() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return strings.ToUpper(hex.EncodeToString(b))
}

// boot starts the node detached and waits until it accepts AMQP
// connections; on failure it stops the node.
func (n *Node) boot(ctx context.Context) error {
	n.setPID(0)
	_ = os.Remove(n.path("pid")) // the previous run's: waitBoot must see the new one
	cmd := exec.CommandContext(ctx, filepath.Join(n.cfg.BinDir, "rabbitmq-server"), "-detached")
	cmd.Env = n.env
	cmd.Dir = n.cfg.Dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("rabbitnode %s: rabbitmq-server -detached: %v\n%s", n.name, err, out)
	}
	bctx, cancel := context.WithTimeout(ctx, n.cfg.BootTimeout)
	defer cancel()
	if err := n.waitBoot(bctx); err != nil {
		_ = n.Stop(context.Background())
		return fmt.Errorf("rabbitnode %s: %w\n%s", n.name, err, n.LogTail(20))
	}
	return nil
}

// Restart starts a node again whose VM has ended (a SIGKILL, a crash) with
// the files it had: its data directory keeps its queues and its place in
// the cluster, so it rejoins the cluster by itself.
func (n *Node) Restart(ctx context.Context) error {
	if n.Alive() {
		return fmt.Errorf("rabbitnode %s: still running as pid %d", n.name, n.PID())
	}
	return n.boot(ctx)
}

// Attach returns a handle on a node that Start began earlier, perhaps in
// another process (the stack's supervisor): cfg must be the Config it was
// started with (its files are read, not written; the cookie is the one in
// its HOME). The handle can Ctl, Stop and Restart it.
func Attach(cfg Config) (*Node, error) {
	b, err := os.ReadFile(filepath.Join(cfg.Dir, "home", ".erlang.cookie"))
	if err != nil {
		return nil, fmt.Errorf("rabbitnode: attach to %s: %w", cfg.Name, err)
	}
	cfg.Cookie = strings.TrimSpace(string(b))
	n, err := newNode(cfg)
	if err != nil {
		return nil, err
	}
	n.setPID(n.pidFromFile())
	return n, nil
}

// pidFromFile is the pid the node's pid file holds (0: none yet).
func (n *Node) pidFromFile() int {
	b, err := os.ReadFile(n.path("pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

func (n *Node) writeFiles() error {
	for _, d := range []string{n.cfg.Dir, n.path("home"), n.path("mnesia"), n.path("log")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// Erlang refuses a cookie file others can read.
	cookie := filepath.Join(n.path("home"), ".erlang.cookie")
	_ = os.Chmod(cookie, 0o600)
	if err := os.WriteFile(cookie, []byte(n.cfg.Cookie), 0o400); err != nil {
		return err
	}
	conf := fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d\n", n.cfg.Port)
	if err := os.WriteFile(n.path("rabbitmq.conf"), []byte(conf), 0o644); err != nil {
		return err
	}
	plugins := "[" + strings.Join(n.cfg.Plugins, ",") + "].\n"
	if err := os.WriteFile(n.path("enabled_plugins"), []byte(plugins), 0o644); err != nil {
		return err
	}
	// An empty env file of its own: the scripts would otherwise read
	// /etc/rabbitmq/rabbitmq-env.conf, the system node's settings.
	return os.WriteFile(n.path("rabbitmq-env.conf"), nil, 0o644)
}

func (n *Node) path(name string) string { return filepath.Join(n.cfg.Dir, name) }

// environment is what both rabbitmq-server and rabbitmqctl see: only this
// node's settings, none of the caller's RABBITMQ_* or ERL_* variables.
func (n *Node) environment() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "RABBITMQ_") || strings.HasPrefix(k, "ERL_") || k == "HOME" {
			continue
		}
		env = append(env, kv)
	}
	if os.Getenv("LANG") == "" && os.Getenv("LC_ALL") == "" {
		env = append(env, "LANG=C.UTF-8")
	}
	return append(env,
		"HOME="+n.path("home"),
		"RABBITMQ_CONF_ENV_FILE="+n.path("rabbitmq-env.conf"),
		"RABBITMQ_NODENAME="+n.name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(n.cfg.Port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(n.cfg.DistPort),
		"RABBITMQ_CONFIG_FILE="+n.path("rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+n.path("advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+n.path("enabled_plugins"),
		"RABBITMQ_MNESIA_BASE="+n.path("mnesia"),
		"RABBITMQ_LOG_BASE="+n.path("log"),
		"RABBITMQ_PID_FILE="+n.path("pid"),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
	)
}

// waitBoot waits for the pid file and for an AMQP handshake; a node whose
// process ended meanwhile fails at once.
func (n *Node) waitBoot(ctx context.Context) error {
	for {
		pid := n.PID()
		if pid == 0 {
			pid = n.pidFromFile()
			n.setPID(pid)
		}
		if pid != 0 {
			if !Running(pid) {
				return fmt.Errorf("the node's process %d ended during boot", pid)
			}
			if n.answers() == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not accepting AMQP connections on 127.0.0.1:%d: %w", n.cfg.Port, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// answers makes one AMQP handshake.
func (n *Node) answers() error {
	c, err := amqp.DialConfig(n.URL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		return err
	}
	return c.Close()
}

// WaitReady waits until the node accepts AMQP connections again (after
// StartApp, or a restart).
func (n *Node) WaitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.BootTimeout)
	defer cancel()
	for {
		if err := n.answers(); err == nil {
			return nil
		}
		if pid := n.PID(); !Running(pid) {
			return fmt.Errorf("rabbitnode %s: process %d is gone", n.name, pid)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rabbitnode %s: not accepting AMQP connections: %w", n.name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Name is the node's full name, "name@host".
func (n *Node) Name() string { return n.name }

// Port is the AMQP port.
func (n *Node) Port() int { return n.cfg.Port }

// DistPort is the Erlang distribution port.
func (n *Node) DistPort() int { return n.cfg.DistPort }

// Dir is the directory that holds everything of the node.
func (n *Node) Dir() string { return n.cfg.Dir }

// LogFile is the node's own log.
func (n *Node) LogFile() string { return filepath.Join(n.path("log"), n.name+".log") }

// PIDFile is where the node writes its VM's pid.
func (n *Node) PIDFile() string { return n.path("pid") }

// Config is what the node was started with (its defaults filled in).
func (n *Node) Config() Config { return n.cfg }

// Cookie is the node's Erlang cookie (for the other nodes of a cluster).
func (n *Node) Cookie() string { return n.cfg.Cookie }

// URL is the AMQP URL of the node's default user (guest may log in from
// 127.0.0.1).
func (n *Node) URL() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.cfg.Port) }

// LogTail returns the last lines of the node's log (for error messages).
func (n *Node) LogTail(lines int) string {
	b, err := os.ReadFile(n.LogFile())
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
