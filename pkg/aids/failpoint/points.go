package failpoint

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Point is a known failpoint: its name and the window it opens.
type Point struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

// Points lists every known failpoint, in the order a saga meets them. The
// docs/operations.md copies this list. Register adds to it; read it only after init.
var Points = []Point{
	{"order.create.after-order-insert", "order row inserted, its outbox row not yet: an error here must roll both back"},
	{"outbox.dispatch.before-claim", "dispatcher about to claim: pause here to stop dispatching while events pile up as pending"},
	{"outbox.dispatch.after-claim", "dispatcher claimed a batch, nothing published yet: the claim must expire and be recovered"},
	{"outbox.dispatch.after-publish-before-confirm", "message published, broker confirm not yet received: the row stays pending and is republished"},
	{"outbox.dispatch.after-confirm-before-mark", "broker confirmed, row not yet marked sent: the message is published twice"},
	{"rabbit.consume.before-handle", "a consume worker holds a take of deliveries, none handled yet: a pause keeps the workers busy while deliveries wait behind them"},
	{"rabbit.consume.copy-in-take", "a take holds a delivery and its copy (one message_id twice), as after a lost confirm: a pause holds that take"},
	{"inbox.after-claim", "consumer claimed (consumer_name, event_id), effect not yet applied"},
	{"inbox.after-effect-before-commit", "effect applied in the transaction, not committed: rollback, then redelivery"},
	{"inbox.after-commit-before-ack", "transaction committed, message not acked: the redelivery must be dropped as a duplicate"},
	{"psp.charge.after-charge-before-response", "fake PSP charged the card, response lost: the retry must not charge twice"},
}

// pointsMu guards Points against Register running while a name is checked.
var pointsMu sync.RWMutex

// validName keeps names addressable in FAILPOINTS and in URLs: lower-case
// words joined by dots, at least two parts.
var validName = regexp.MustCompile(`^[a-z0-9-]+(\.[a-z0-9-]+)+$`)

// Register adds a known point, so FAILPOINTS and the admin API accept it.
// Like sql.Register, call it from an init function; it panics on a bad or
// duplicate name because that is a programming error.
func Register(name, description string) {
	if !validName.MatchString(name) {
		panic(fmt.Sprintf("failpoint: Register: bad name %q (want lower-case words joined by dots)", name))
	}
	pointsMu.Lock()
	defer pointsMu.Unlock()
	if slices.ContainsFunc(Points, func(p Point) bool { return p.Name == name }) {
		panic(fmt.Sprintf("failpoint: Register called twice for %q", name))
	}
	Points = append(Points, Point{Name: name, Description: description})
}

// checkKnown rejects a name that is not in Points, listing the known ones so
// a typo in FAILPOINTS or a demo request is caught instead of silently
// arming a point no code ever reaches.
func checkKnown(name string) error {
	pointsMu.RLock()
	defer pointsMu.RUnlock()
	names := make([]string, 0, len(Points))
	for _, p := range Points {
		if p.Name == name {
			return nil
		}
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return fmt.Errorf("unknown failpoint %q (known: %s)", name, strings.Join(names, ", "))
}

// knownPoints returns a copy of Points for the admin API.
func knownPoints() []Point {
	pointsMu.RLock()
	defer pointsMu.RUnlock()
	return slices.Clone(Points)
}
