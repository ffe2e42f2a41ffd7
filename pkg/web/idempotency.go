package web

import (
	"net/http"
	"strings"
	"sync"
)

// MaxKeyLen is the longest Idempotency-Key, the width of the columns that
// store one (orders.idempotency_key, cancel_requests, stock_receipts).
const MaxKeyLen = 128

// IdempotencyKey reads the Idempotency-Key header as
// draft-ietf-httpapi-idempotency-key-header-07 defines it: a structured
// field String (RFC 9651), `Idempotency-Key: "8e03978e-40d5"`. The bare
// form this API took before the draft, `Idempotency-Key: 8e03978e-40d5`, is
// accepted beside it and names the same key. At most one key: two header
// lines or a list is a 400, as is a key that is empty, longer than
// MaxKeyLen, or has a character outside printable ASCII; a missing key is
// a 400 of its own type (the endpoints that call this require one).
func IdempotencyKey(r *http.Request) (string, error) {
	vals := r.Header.Values("Idempotency-Key")
	switch {
	case len(vals) == 0:
		return "", Problemf(http.StatusBadRequest, TypeKeyMissing, "the Idempotency-Key header is required")
	case len(vals) > 1:
		return "", Problemf(http.StatusBadRequest, TypeKeyInvalid, "one Idempotency-Key per request: got %d header lines", len(vals))
	}
	v := strings.Trim(vals[0], " \t")
	var key string
	var err error
	if strings.HasPrefix(v, `"`) {
		key, err = sfString(v)
	} else {
		key, err = bareKey(v)
	}
	if err != nil {
		return "", err
	}
	if key == "" {
		return "", Problemf(http.StatusBadRequest, TypeKeyInvalid, "the Idempotency-Key is empty")
	}
	if len(key) > MaxKeyLen {
		return "", Problemf(http.StatusBadRequest, TypeKeyInvalid, "Idempotency-Key longer than %d characters", MaxKeyLen)
	}
	return key, nil
}

// sfString parses an sf-string (RFC 9651, section 3.3.3): printable ASCII
// between double quotes, with \" and \\ the only escapes. Nothing may
// follow the closing quote: a list ("a", "b") or parameters (;x=1) are more
// than the one key the draft defines.
func sfString(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", Problemf(http.StatusBadRequest, TypeKeyInvalid, `Idempotency-Key: only \" and \\ may be escaped in a quoted key`)
			}
			b.WriteByte(v[i])
		case c == '"':
			if rest := strings.TrimLeft(v[i+1:], " \t"); rest != "" {
				return "", Problemf(http.StatusBadRequest, TypeKeyInvalid, "one Idempotency-Key per request: a single quoted string, nothing after it (got %q)", rest)
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", Problemf(http.StatusBadRequest, TypeKeyInvalid, "Idempotency-Key must be printable ASCII")
		default:
			b.WriteByte(c)
		}
	}
	return "", Problemf(http.StatusBadRequest, TypeKeyInvalid, "Idempotency-Key: the quoted key has no closing quote")
}

// bareKey checks the unquoted form: printable ASCII without spaces, and
// without the characters that would make it read as a list, parameters or
// half a quoted string (, ; " \).
func bareKey(v string) (string, error) {
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == ',':
			return "", Problemf(http.StatusBadRequest, TypeKeyInvalid, "one Idempotency-Key per request: got a list")
		case c <= 0x20 || c > 0x7e || c == ';' || c == '"' || c == '\\':
			return "", Problemf(http.StatusBadRequest, TypeKeyInvalid,
				`Idempotency-Key must be a quoted string ("...") or printable ASCII without spaces and , ; " \`)
		}
	}
	return v, nil
}

// InFlight remembers the idempotency keys whose first request is still
// being processed by this instance, so that a second request with the same
// key gets 409 at once (the draft's "request in flight") instead of
// waiting on the first one's row lock and replaying it. Instances do not
// share it: a retry that reaches another instance waits for the first
// request's transaction and gets its stored answer (docs/contract.md,
// "Idempotency keys").
type InFlight struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

// Begin marks (scope, key) in flight and returns the function that ends
// it, or a 409 problem if it is in flight already. scope keeps the key
// spaces of endpoints apart ("create", "cancel").
func (f *InFlight) Begin(scope, key string) (end func(), err error) {
	id := scope + "\x00" + key
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, busy := f.keys[id]; busy {
		return nil, Problemf(http.StatusConflict, TypeKeyInFlight,
			"a request with this Idempotency-Key is still being processed: retry once it has been answered")
	}
	if f.keys == nil {
		f.keys = map[string]struct{}{}
	}
	f.keys[id] = struct{}{}
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.keys, id)
	}, nil
}
