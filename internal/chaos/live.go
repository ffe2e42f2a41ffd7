package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// The self-test's live part. The synthetic part (SelfTest) shows that
// every rule of Check fires on a snapshot built by hand; this one shows
// that the live read feeds it: after a run, a wrong row is written into a
// service's table of the running stack, as a bug or a hand edit would
// leave it, the run's own read of the stack (the same HTTP endpoints the
// snapshot is read through) picks it up and the checks report it; then the
// row is put back, and the same read is clean again. It writes a service's
// table, which nothing else of the run does (one owner per table): it is
// the corruption under test, undone before it returns.

// Planter writes a wrong row into a service's table of the stack, for the
// self-test only (MySQL does, with the root connection).
type Planter interface {
	// SetReservationStatus changes the status of an order's reservation
	// in the inventory's table from one value to another (compare and
	// set: exactly one row, or an error).
	SetReservationStatus(ctx context.Context, orderID, from, to string) error
}

// LivePlant is what the live part of the self-test did and found.
type LivePlant struct {
	OrderID  string      `json:"order_id"`
	What     string      `json:"what"`     // the wrong row, and where
	Before   []Violation `json:"before"`   // the order's violations as read before the plant: none
	Planted  []Violation `json:"planted"`  // as read with the wrong row in place
	Restored []Violation `json:"restored"` // as read once the row was put back: none
}

// Caught reports whether the plant was found by its rule, and only while
// it was in place.
func (p *LivePlant) Caught() bool {
	caught := slices.ContainsFunc(p.Planted, func(v Violation) bool {
		return v.Check == CheckReservation && v.Rule == "mismatch" && v.Subject == "order "+p.OrderID
	})
	return caught && len(p.Before) == 0 && len(p.Restored) == 0
}

// PlantLive plants a wrong reservation status for a confirmed order of the
// run rep reports (a run of Run in this process, its stack still up) and
// reads that order again through the live path each time.
func PlantLive(ctx context.Context, rep *Report) (*LivePlant, error) {
	r := rep.live
	if r == nil {
		return nil, errors.New("the report is not of a run made here: the live plant reads its stack again")
	}
	planter, ok := r.st.Database.(Planter)
	if !ok {
		return nil, errors.New("the live plant needs the database's root connection")
	}
	var id string
	for _, k := range sortedKeys(r.snap.Orders) {
		o := r.snap.Orders[k]
		if o.Status == statusConfirmed && o.Reservation != nil && o.Reservation.Status == "committed" {
			id = k
			break
		}
	}
	if id == "" {
		return nil, errors.New("the run has no confirmed order to plant into")
	}
	p := &LivePlant{OrderID: id, What: fmt.Sprintf("order %s's reservation set from committed to released in the inventory's reservations table", id)}
	var err error
	if p.Before, err = r.reread(ctx, id); err != nil {
		return p, err
	}
	if err := planter.SetReservationStatus(ctx, id, "committed", "released"); err != nil {
		return p, fmt.Errorf("plant: %w", err)
	}
	p.Planted, err = r.reread(ctx, id)
	restore := planter.SetReservationStatus(context.WithoutCancel(ctx), id, "released", "committed")
	if err != nil || restore != nil {
		return p, errors.Join(err, restore)
	}
	p.Restored, err = r.reread(ctx, id)
	return p, err
}

// reread reads one order again through the live path (the snapshot's
// reader) into a copy of the run's snapshot, checks it, and returns the
// violations about that order.
func (r *runner) reread(ctx context.Context, id string) ([]Violation, error) {
	o, err := r.obs.order(ctx, r.snap.Orders[id])
	if err != nil {
		return nil, fmt.Errorf("read order %s: %w", id, err)
	}
	s := copySnapshot(r.snap)
	s.Orders[id] = o
	var out []Violation
	for _, v := range Check(s) {
		if v.Subject == "order "+id {
			out = append(out, v)
		}
	}
	return out, nil
}

// PrintLivePlant writes the live part's lines.
func PrintLivePlant(w io.Writer, p *LivePlant) {
	fmt.Fprintf(w, "\nlive read: %s\n", p.What)
	line := func(when string, vs []Violation) {
		if len(vs) == 0 {
			fmt.Fprintf(w, "  %-26s clean\n", when)
			return
		}
		var s []string
		for _, v := range vs {
			s = append(s, v.String())
		}
		fmt.Fprintf(w, "  %-26s %s\n", when, strings.Join(s, "; "))
	}
	line("read before the plant:", p.Before)
	line("read with the plant:", p.Planted)
	line("read after putting back:", p.Restored)
	if p.Caught() {
		fmt.Fprintln(w, "\nlive read PASS: the wrong row was read and caught, and the read is clean once it is put back")
	} else {
		fmt.Fprintln(w, "\nlive read FAIL")
	}
}
