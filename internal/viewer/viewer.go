// Package viewer serves the saga viewer: a web page that draws one order's
// journey across order, RabbitMQ, inventory, payment and the PSP, runs the
// failure lab with the reader watching, flips the demo switches and shows
// each service's health at a glance.
//
// It is a client of the stack like curl or the terminal lab: it reaches the
// services only over their HTTP endpoints (public, /admin with the bearer
// token, /debug and /psp/switches in demo mode) and runs experiments through
// internal/lab with a lab.Target. The services carry no code for it. Its own
// API (/api/...) passes the services' answers through unchanged, so bad input
// from the page gets the same problem documents as curl, and answers its
// own errors as problem documents too. The API wants the viewer's token
// (auth.go), and every route is behind web.Guard: a page of another site
// can neither read it through DNS rebinding nor post to it
// (docs/security.md). The page is plain HTML, CSS and JavaScript embedded in
// the binary: no build step, nothing fetched from outside, so it works
// offline.
package viewer

import (
	"context"
	"embed"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/relmsg/ordersaga/internal/lab"
)

//go:embed static
var staticFiles embed.FS

// Config is what the viewer needs.
type Config struct {
	// Target is the stack: its services' URLs, and what the lab needs to
	// crash and publish.
	Target lab.Target
	// Token is the viewer's own: every /api request wants it (the cookie
	// the page trades it for, or a bearer token). Empty: New makes one
	// (Server.Token tells it). cmd/viewer passes VIEWER_TOKEN, else
	// ADMIN_TOKEN.
	Token string
	// AdminToken is ADMIN_TOKEN: sent to the services' /admin and /debug
	// endpoints, and by the lab.
	AdminToken string
	// AllowedHosts are the Host names the viewer answers besides this
	// machine's (ALLOWED_HOSTS; web.Guard).
	AllowedHosts []string
	Log          *slog.Logger
	// Patience bounds each wait of a lab experiment (0: the lab's default).
	Patience time.Duration
	// Timeout bounds each request to a service (0: 5s).
	Timeout time.Duration
}

// Server is the viewer's HTTP server: the page and its API.
type Server struct {
	cfg    Config
	client *http.Client
	static fs.FS

	// Lab runs outlive the request that started them; Close stops them.
	runCtx    context.Context
	stopRuns  context.CancelFunc
	runsDone  sync.WaitGroup
	runsMu    sync.Mutex
	runs      []*labRun // newest last, at most keepRuns
	nextRunID int
}

// New returns a viewer for cfg.
func New(cfg Config) *Server {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Token == "" {
		cfg.Token = NewToken()
	}
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		panic(err) // the directory is embedded above
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{cfg: cfg, client: &http.Client{Timeout: cfg.Timeout}, static: static,
		runCtx: ctx, stopRuns: cancel}
}

// Token is the token the API wants (the one given, or the one New made).
func (s *Server) Token() string { return s.cfg.Token }

// Close stops a lab run in progress (its cleanup still disarms what it
// armed) and waits for it.
func (s *Server) Close() {
	s.stopRuns()
	s.runsDone.Wait()
}

// knownService reports whether name is one of the stack's services.
func knownService(name string) bool {
	for _, s := range lab.Services {
		if s == name {
			return true
		}
	}
	return false
}
