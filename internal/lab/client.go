package lab

import (
	"context"
	"net/http"
)

// The lab's HTTP client, for other programs that drive a running stack
// (cmd/chaos): the same base URLs, admin token and timeouts as the
// experiments use.

// Do sends a JSON request to a service ("order", "inventory", "payment") of
// the target and decodes a 2xx JSON answer into out (when not nil). A
// transport error is returned as the error; any HTTP status is an answer.
func (l *Lab) Do(ctx context.Context, svc, method, path string, headers map[string]string, body, out any) (int, http.Header, error) {
	return l.call(ctx, svc, method, path, headers, body, out)
}

// Get is Do for a GET that must answer 200.
func (l *Lab) Get(ctx context.Context, svc, path string, out any) error {
	return l.get(ctx, svc, path, out)
}

// Metric reads one sample from a service's /metrics: the sum over every
// series of name whose labels include the given label pairs.
func (l *Lab) Metric(ctx context.Context, svc, name string, labels ...string) (float64, error) {
	return l.metric(ctx, svc, name, labels...)
}
