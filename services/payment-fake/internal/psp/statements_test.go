package psp

import (
	"context"
	"fmt"
	"net/http"
	"testing"
)

// statements counts the SELECTs and INSERTs the PSP's one database session
// has run so far (the test's pool is cut to one connection).
func (p *testPSP) statements(t *testing.T) (selects, inserts int) {
	t.Helper()
	var rows []struct {
		Name  string `db:"Variable_name"`
		Value int    `db:"Value"`
	}
	if err := p.db.SelectContext(context.Background(), &rows,
		`SHOW SESSION STATUS WHERE Variable_name IN ('Com_select', 'Com_insert')`); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		switch r.Name {
		case "Com_select":
			selects = r.Value
		case "Com_insert":
			inserts = r.Value
		}
	}
	return selects, inserts
}

// A new charge or refund is answered from the row it wrote: one INSERT and
// no read-back (a refund also locks its charge and sums its refunds). Only
// a replay reads the stored record, and answers with it.
func TestNewRecordsAreNotReadBack(t *testing.T) {
	t.Parallel()
	p := newTestPSP(t)
	p.db.SetMaxOpenConns(1) // every statement, the counters' too, on one session

	step := func(what string, call func(), wantSelects, wantInserts int) {
		t.Helper()
		s0, i0 := p.statements(t)
		call()
		s1, i1 := p.statements(t)
		if s1-s0 != wantSelects || i1-i0 != wantInserts {
			t.Errorf("%s: %d SELECTs and %d INSERTs, want %d and %d", what, s1-s0, i1-i0, wantSelects, wantInserts)
		}
	}
	var c Charge
	step("new charge", func() { c = p.mustCharge(t, chargeReq("order-42-charge")) }, 0, 1)
	step("replayed charge", func() {
		if again := p.mustCharge(t, chargeReq("order-42-charge")); again != c {
			t.Errorf("replay = %+v, want %+v", again, c)
		}
	}, 1, 1)

	refund := fmt.Sprintf(`{"idempotency_key":"order-42-refund","charge_id":%q,"amount_cents":1500}`, c.ChargeID)
	// The charge lock and the refund sum are SELECTs.
	step("new refund", func() {
		if status, _, body := p.call(t, http.MethodPost, "/refunds", refund); status != http.StatusCreated {
			t.Fatalf("refund: %d %s", status, body)
		}
	}, 2, 1)
	step("replayed refund", func() {
		if status, _, body := p.call(t, http.MethodPost, "/refunds", refund); status != http.StatusOK {
			t.Fatalf("refund replay: %d %s", status, body)
		}
	}, 2, 1)
	if rows := p.refundRows(t); len(rows) != 1 {
		t.Fatalf("psp_refunds has %d rows, want 1", len(rows))
	}
}
