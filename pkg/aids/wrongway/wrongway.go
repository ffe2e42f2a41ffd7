// Package wrongway holds the deliberate design mistakes the chapter warns
// about, each behind its own switch, so that an experiment can be run the
// wrong way and show the anomaly the right way prevents. They exist for
// teaching and testing only: a service refuses them unless DEMO_MODE is on,
// and none is ever on by default.
package wrongway

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/relmsg/ordersaga/pkg/base/web"
)

// Switch names one mistake.
type Switch string

// The mistakes, and what each one breaks.
const (
	// PublishBeforeCommit: the order service publishes OrderCreated straight
	// to the broker before its transaction commits, without an outbox. If
	// the transaction then rolls back, inventory reserves stock for an order
	// that does not exist.
	PublishBeforeCommit Switch = "publish-before-commit"
	// AckBeforeCommit: a consumer acks a message before its transaction
	// commits. If the transaction then fails, the message is gone and its
	// effect never happens: a lost event.
	AckBeforeCommit Switch = "ack-before-commit"
	// NoInbox: a consumer checks "already processed?" with a SELECT and
	// records the event afterwards, instead of inserting the inbox row under
	// its primary key first. Two deliveries at once both see "no" and both
	// apply the effect.
	NoInbox Switch = "no-inbox"
	// MarkSentWithoutToken: the dispatcher marks rows sent by event id only,
	// without the claim token. A dispatcher whose lease expired overwrites
	// the state of the one that re-claimed the row.
	MarkSentWithoutToken Switch = "mark-sent-without-token"
	// IgnoreOrder: a consumer applies events without checking the
	// aggregate's state or the cancel marker, so a late event resurrects
	// what an earlier one ended (a create after its cancel reserves stock
	// for a cancelled order).
	IgnoreOrder Switch = "ignore-order"
	// DedupeOwnTx: a consumer commits the inbox row in a transaction of its
	// own, then applies the effect in another (the chapter's third ACK
	// pitfall, 只写去重记录，再单独处理业务). A crash between the two leaves
	// the event recorded as processed with its effect missing, and the
	// redelivery is dropped as a duplicate.
	DedupeOwnTx Switch = "dedupe-own-tx"
	// PublishAfterCommit: the order service commits the order without an
	// outbox row and publishes OrderCreated itself right after COMMIT. A
	// crash between the two leaves an order that inventory never hears of.
	PublishAfterCommit Switch = "publish-after-commit"
	// SyncReserve: the order service reserves stock by a synchronous HTTP
	// call to inventory inside its create request, instead of OrderCreated.
	// When the call times out after inventory reserved, the caller is told
	// the order failed while its stock is held.
	SyncReserve Switch = "sync-reserve"
)

// All lists every switch with its one-line effect, for docs and errors.
var All = map[Switch]string{
	PublishBeforeCommit:  "order publishes OrderCreated before COMMIT, no outbox",
	AckBeforeCommit:      "consumers ACK before COMMIT",
	NoInbox:              "consumers check-then-insert instead of inserting the inbox row first",
	MarkSentWithoutToken: "dispatcher marks sent without the claim-token condition",
	IgnoreOrder:          "consumers apply events regardless of state, version or cancel marker",
	DedupeOwnTx:          "consumers commit the inbox row in its own transaction, then apply the effect in another",
	PublishAfterCommit:   "order commits without an outbox row, then publishes OrderCreated itself after COMMIT",
	SyncReserve:          "order reserves stock by a synchronous HTTP call to inventory inside the create request (1 s timeout)",
}

// Set is the switches that are on. It can change at run time (the demo
// endpoint), so it is read atomically; a nil *Set has every switch off.
type Set struct {
	on atomic.Pointer[map[Switch]bool]
}

// NewSet returns a set with the given switches on.
func NewSet(on map[Switch]bool) *Set {
	s := &Set{}
	s.Replace(on)
	return s
}

// On reports whether sw is on.
func (s *Set) On(sw Switch) bool {
	if s == nil {
		return false
	}
	m := s.on.Load()
	return m != nil && (*m)[sw]
}

// Any reports whether any switch is on.
func (s *Set) Any() bool {
	if s == nil {
		return false
	}
	m := s.on.Load()
	return m != nil && len(*m) > 0
}

// Replace turns on exactly the given switches.
func (s *Set) Replace(on map[Switch]bool) {
	m := map[Switch]bool{}
	for sw, v := range on {
		if v {
			m[sw] = true
		}
	}
	s.on.Store(&m)
}

// String lists the switches that are on.
func (s *Set) String() string {
	if s == nil {
		return ""
	}
	var names []string
	if m := s.on.Load(); m != nil {
		for sw := range *m {
			names = append(names, string(sw))
		}
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

// Parse reads WRONG_WAY: comma-separated switch names.
func Parse(spec string) (map[Switch]bool, error) {
	s := map[Switch]bool{}
	var errs []error
	for _, name := range strings.Split(spec, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if _, ok := All[Switch(name)]; !ok {
			errs = append(errs, fmt.Errorf("unknown wrong-way switch %q", name))
			continue
		}
		s[Switch(name)] = true
	}
	if len(errs) > 0 {
		errs = append(errs, fmt.Errorf("known switches: %s", strings.Join(known(), ", ")))
	}
	return s, errors.Join(errs...)
}

func known() []string {
	var names []string
	for sw := range All {
		names = append(names, string(sw))
	}
	sort.Strings(names)
	return names
}

// Handler serves the set for the demo-mode lab: GET lists the switches on
// and the known ones; PUT {"on":["no-inbox"]} replaces the set ({"on":[]}
// turns every switch off).
func (s *Set) Handler(log *slog.Logger) http.Handler {
	return web.Handle(log, func(w http.ResponseWriter, r *http.Request) error {
		switch r.Method {
		case http.MethodGet:
		case http.MethodPut:
			var body struct {
				On []string `json:"on"`
			}
			if err := web.DecodeJSON(w, r, 4<<10, &body); err != nil {
				return err
			}
			parsed, err := Parse(strings.Join(body.On, ","))
			if err != nil {
				return web.Errorf(http.StatusBadRequest, "%v", err)
			}
			s.Replace(parsed)
			if log != nil {
				log.Warn("wrong-way switches changed", "wrong_way", s.String())
			}
		default:
			return web.Errorf(http.StatusMethodNotAllowed, "use GET or PUT")
		}
		on := []string{}
		if str := s.String(); str != "" {
			on = strings.Split(str, ",")
		}
		web.WriteJSON(w, http.StatusOK, map[string]any{"on": on, "known": All})
		return nil
	})
}
