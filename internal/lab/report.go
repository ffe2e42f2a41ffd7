package lab

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/relmsg/ordersaga/pkg/inbox"
	"github.com/relmsg/ordersaga/pkg/outbox"
)

// Report is what one experiment found.
type Report struct {
	Name     string `json:"name"`
	Title    string `json:"title"`
	WrongWay string `json:"wrong_way,omitempty"` // the wrong-way switch the run used, "" for the right way
	// Acted lists, per service, the instances the run's failpoints and
	// switches went to (a stack of several instances only).
	Acted    map[string][]string `json:"acted_on,omitempty"`
	Sections []Section           `json:"sections"`
	Checks   []Check             `json:"checks"`
	Verdict  string              `json:"verdict"`
	Took     time.Duration       `json:"-"`

	step func(Step) // reports each check as it is made
}

// Passed reports whether every check held. For a wrong-way run the checks
// assert that the anomaly appeared.
func (r *Report) Passed() bool {
	if len(r.Checks) == 0 {
		return false
	}
	for _, c := range r.Checks {
		if !c.OK {
			return false
		}
	}
	return true
}

// Failures lists the checks that did not hold.
func (r *Report) Failures() []string {
	var out []string
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c.What+": "+c.Detail)
		}
	}
	return out
}

// Section is the evidence at one moment.
type Section struct {
	Title  string  `json:"title"`
	Tables []Table `json:"tables"`
}

// Table is an aligned table of rows.
type Table struct {
	Title  string     `json:"title"`
	Header []string   `json:"header"`
	Rows   [][]string `json:"rows"`
}

// Check is one assertion a reader would make.
type Check struct {
	What   string `json:"what"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// check records one check of label l (labels.go), filled with args.
func (r *Report) check(ok bool, l Label, args ...any) {
	what, detail := l.text(args)
	c := Check{What: what, OK: ok, Detail: detail}
	r.Checks = append(r.Checks, c)
	if r.step != nil {
		r.step(Step{Kind: StepCheck, Check: &c})
	}
}

// Print writes the report as aligned tables, the checks and the verdict.
func (r *Report) Print(w io.Writer) {
	mode := ""
	if r.WrongWay != "" {
		mode = "  [wrong way: " + r.WrongWay + "]"
	}
	fmt.Fprintf(w, "\n=== %s: %s%s\n", r.Name, r.Title, mode)
	for _, svc := range Services {
		if in := r.Acted[svc]; len(in) > 0 {
			fmt.Fprintf(w, "    %s: failpoints and switches on %s\n", svc, strings.Join(in, ", "))
		}
	}
	for _, s := range r.Sections {
		fmt.Fprintf(w, "\n--- %s\n", s.Title)
		for _, t := range s.Tables {
			fmt.Fprintf(w, "\n  %s\n", t.Title)
			if len(t.Rows) == 0 {
				fmt.Fprintln(w, "    (no rows)")
				continue
			}
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "    "+strings.Join(t.Header, "\t"))
			for _, row := range t.Rows {
				fmt.Fprintln(tw, "    "+strings.Join(row, "\t"))
			}
			tw.Flush()
		}
	}
	fmt.Fprintln(w, "\n--- checks")
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  [%s] %s: %s\n", mark, c.What, c.Detail)
	}
	result := "PASSED"
	if !r.Passed() {
		result = "FAILED"
	}
	fmt.Fprintf(w, "\nverdict (%s in %s): %s\n", result, r.Took.Round(10*time.Millisecond), r.Verdict)
}

// snapshot records the rows of one order across the three services, and
// the stock of skus.
func (l *Lab) snapshot(ctx context.Context, title, orderID string, skus ...string) Section {
	s := Section{Title: title}
	if orderID != "" {
		b, err := l.books(ctx, orderID)
		s.Tables = append(s.Tables, booksTables(b, err)...)
	}
	if len(skus) > 0 {
		s.Tables = append(s.Tables, l.stockTable(ctx, skus...))
	}
	l.step(Step{Kind: StepSection, Section: &s})
	return s
}

// booksTables shows an order's books: the order, each service's outbox
// rows, the inbox rows of those events, and the reservation, payment and
// the PSP's books.
func booksTables(b Books, err error) []Table {
	t := Table{Title: "order service: orders", Header: []string{"order_id", "status", "refund_status", "total_cents", "status_reason"}}
	switch {
	case err != nil:
		return []Table{{Title: "books of order " + b.OrderID, Header: []string{"error"}, Rows: [][]string{{err.Error()}}}}
	case b.OrderCode == 404:
		t.Rows = append(t.Rows, []string{b.OrderID, "(no such order)", "", "", ""})
	default:
		t.Rows = append(t.Rows, []string{b.Order.OrderID, b.Order.Status, b.Order.RefundStatus, fmt.Sprint(b.Order.TotalCents), b.Order.StatusReason})
	}
	tables := []Table{t}
	for _, svc := range Services {
		t := Table{Title: svc + " service: " + outbox.Table,
			Header: []string{"event_id", "event_type", "version", "status", "attempts (total)", "next_attempt_at", "claim_token", "lease_until", "sent_at"}}
		for _, r := range b.Outbox[svc] {
			token := "-"
			if r.ClaimToken != nil {
				token = short(*r.ClaimToken)
			}
			t.Rows = append(t.Rows, []string{short(r.EventID), r.EventType, fmt.Sprint(r.AggregateVersion), r.Status,
				fmt.Sprintf("%d (%d)", r.Attempts, r.TotalAttempts), clock(&r.NextAttemptAt), token, clock(r.LeaseUntil), clock(r.SentAt)})
		}
		tables = append(tables, t)
	}
	t = Table{Title: inbox.Table + " (all services)", Header: []string{"consumer", "event_id", "processed_at"}}
	for _, r := range b.Inbox {
		t.Rows = append(t.Rows, []string{r.Consumer, short(r.EventID), clock(&r.ProcessedAt)})
	}
	tables = append(tables, t)
	return append(tables, Table{Title: "inventory reservation, payment and the PSP's books",
		Header: []string{"reservation", "payment", "amount_cents", "psp_charges", "psp_refunds"},
		Rows:   [][]string{{lines(b.Reservation), orNone(b.Payment.Status), fmt.Sprint(b.Payment.AmountCents), charges(b.Charges), refunds(b.Refunds)}}})
}

// stockTable shows the stock of skus.
func (l *Lab) stockTable(ctx context.Context, skus ...string) Table {
	t := Table{Title: "inventory: stock", Header: []string{"sku", "on_hand", "reserved", "available"}}
	for _, sku := range skus {
		st, err := l.stock(ctx, sku)
		if err != nil {
			t.Rows = append(t.Rows, []string{sku, "error: " + err.Error()})
			continue
		}
		t.Rows = append(t.Rows, []string{sku, fmt.Sprint(st.OnHand), fmt.Sprint(st.Reserved), fmt.Sprint(st.Available)})
	}
	return t
}

// clock shows a time of day, "-" for none.
func clock(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format("15:04:05.000")
}

func short(id string) string {
	if len(id) > 13 {
		return id[:8] + "…" + id[len(id)-4:]
	}
	return id
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
