// Package endpoints is a list of HTTP base URLs that serve the same thing
// (the instances of one service, given as INVENTORY_URL, PAYMENT_URL or
// PSP_URL with commas): a request goes to the address that last worked and,
// on a transport error (no HTTP answer at all), to the next one. An HTTP
// answer of any status is the service's answer and is returned as it is:
// another instance over the same database would say the same.
package endpoints

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
)

// List is a set of base URLs, safe for concurrent use.
type List struct {
	urls []string
	last atomic.Int32 // index of the address that answered last
}

// Parse splits a comma-separated list of http(s)://host[:port][/path] base
// URLs (blanks around the commas ignored, trailing slashes dropped) and
// reports every bad one at once, by position.
func Parse(s string) (*List, error) {
	var urls []string
	var errs []error
	for i, p := range strings.Split(s, ",") {
		p = strings.TrimRight(strings.TrimSpace(p), "/")
		if p == "" {
			continue
		}
		if u, err := url.Parse(p); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("address %d: want http://host:port", i+1))
			continue
		}
		urls = append(urls, p)
	}
	if len(urls) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("no address: want http://host:port, or several separated by commas"))
	}
	return &List{urls: urls}, errors.Join(errs...)
}

// Must is Parse for lists known to be good (tests, checked config).
func Must(s string) *List {
	l, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return l
}

// URLs returns the addresses in their configured order.
func (l *List) URLs() []string { return append([]string(nil), l.urls...) }

// Current returns the address the next request goes to first.
func (l *List) Current() string {
	if len(l.urls) == 0 {
		return ""
	}
	return l.urls[int(l.last.Load())%len(l.urls)]
}

// Always moves on after any transport error. Right for requests that are
// safe to send twice (reads, and writes carrying their own idempotency key
// when a lost answer need not be shown to the caller).
func Always(error) bool { return true }

// NotSent moves on only when the request cannot have reached the server
// (the connection was never made): a request whose answer was lost stays
// the caller's to resolve, as with a single address.
func NotSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// Do sends the request that build makes for a base URL, starting with the
// address that last answered and trying each address once, in list order
// wrapping around. It moves on when the client returns an error that
// moveOn accepts and ctx is not done; it returns the first HTTP answer (of
// any status), or the last error. build is called once per attempt, so a
// request body is made afresh each time.
func (l *List) Do(ctx context.Context, hc *http.Client, moveOn func(error) bool, build func(base string) (*http.Request, error)) (*http.Response, error) {
	n := len(l.urls)
	if n == 0 {
		return nil, errors.New("no address configured")
	}
	start := int(l.last.Load())
	var lastErr error
	for k := 0; k < n; k++ {
		i := (start + k) % n
		req, err := build(l.urls[i])
		if err != nil {
			return nil, fmt.Errorf("build request: %w", err)
		}
		resp, err := hc.Do(req.WithContext(ctx))
		if err == nil {
			l.last.Store(int32(i))
			return resp, nil
		}
		lastErr = err
		if ctx.Err() != nil || !moveOn(err) {
			break
		}
	}
	return nil, lastErr
}
