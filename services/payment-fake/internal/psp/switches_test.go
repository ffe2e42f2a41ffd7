package psp

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestSwitchboardCountsDown(t *testing.T) {
	t.Parallel()
	var b switchboard
	b.set(Switch{Mode: ModeError5xx, Count: 2})
	wantModes := []Mode{ModeError5xx, ModeError5xx, ModeNormal, ModeNormal}
	for i, want := range wantModes {
		if got := b.take().Mode; got != want {
			t.Errorf("call %d: mode = %q, want %q", i, got, want)
		}
	}
	if got := b.current(); got != (Switch{Mode: ModeNormal}) {
		t.Errorf("after use-up: switch = %+v, want normal", got)
	}

	b.set(Switch{Mode: ModeLoseResponse}) // count 0: until set back
	for i := range 5 {
		if got := b.take().Mode; got != ModeLoseResponse {
			t.Errorf("unlimited switch, call %d: mode = %q", i, got)
		}
	}
	b.set(Switch{Mode: ModeNormal, DelayMS: 5, Count: 3})
	if got := b.current(); got != (Switch{Mode: ModeNormal}) {
		t.Errorf("set normal: switch = %+v, want a plain normal", got)
	}
}

func TestSwitchValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		sw   Switch
		want bool
	}{
		{Switch{Mode: ModeNormal}, true},
		{Switch{Mode: ModeSlow, DelayMS: 100}, true},
		{Switch{Mode: ModeSlow}, false},
		{Switch{Mode: ModeLoseResponse, Count: 1}, true},
		{Switch{Mode: ModeFailBeforeCharge}, true},
		{Switch{Mode: ModeError5xx, Count: 3}, true},
		{Switch{Mode: ModeDecline, Count: 1}, true},
		{Switch{Mode: "explode"}, false},
		{Switch{Mode: ""}, false},
		{Switch{Mode: ModeError5xx, Count: -1}, false},
		{Switch{Mode: ModeSlow, DelayMS: MaxDelayMS + 1}, false},
	}
	for _, tt := range tests {
		if err := validSwitch(tt.sw); (err == nil) != tt.want {
			t.Errorf("Validate(%+v) = %v, want valid=%v", tt.sw, err, tt.want)
		}
	}
}

func TestSwitchEndpoints(t *testing.T) {
	t.Parallel()
	p := newTestPSP(t)

	var sw Switch
	if p.getJSON(t, "/switches", &sw); sw != (Switch{Mode: ModeNormal}) {
		t.Fatalf("initial switch = %+v, want normal", sw)
	}
	p.mustSetSwitch(t, Switch{Mode: ModeSlow, DelayMS: 250, Count: 3})
	if got := p.srv.CurrentSwitch(); got != (Switch{Mode: ModeSlow, DelayMS: 250, Count: 3}) {
		t.Errorf("CurrentSwitch = %+v after PUT", got)
	}
	status, _, body := p.call(t, http.MethodPut, "/switches", `{"mode":"explode"}`)
	if status != http.StatusUnprocessableEntity {
		t.Errorf("PUT unknown mode = %d %s, want 422", status, body)
	}
	status, _, body = p.call(t, http.MethodPut, "/switches", `{"mode":"normal","colour":"red"}`)
	if status != http.StatusBadRequest {
		t.Errorf("PUT unknown field = %d %s, want 400", status, body)
	}
	if got := p.srv.CurrentSwitch(); got.Mode != ModeSlow {
		t.Errorf("a refused PUT changed the switch to %+v", got)
	}
	status, _, body = p.call(t, http.MethodGet, "/switches", "")
	if want := `{"count":3,"delay_ms":250,"mode":"slow"}`; status != http.StatusOK || compactJSON(t, body) != want {
		t.Errorf("GET /switches = %d %s, want 200 %s", status, body, want)
	}
	if err := p.srv.SetSwitch(Switch{Mode: "bogus"}); err == nil {
		t.Error("Server.SetSwitch accepted an unknown mode")
	}
}

// lose-response: the PSP charges and commits, then drops the connection. The
// caller cannot know; the status query with the same key finds the charge,
// and a retry with the key answers with it instead of charging twice.
func TestSwitchLoseResponse(t *testing.T) {
	t.Parallel()
	p := newTestPSP(t)
	ctx := context.Background()
	req, err := p.chargeUnder(t, Switch{Mode: ModeLoseResponse, Count: 1})

	c, err := p.client.GetCharge(ctx, req.IdempotencyKey)
	if err != nil {
		t.Fatalf("GetCharge after a lost response: %v, want the charge", err)
	}
	if c.Status != StatusSucceeded || c.AmountCents != 1500 {
		t.Errorf("charge = %+v, want succeeded 1500", c)
	}
	retry, err := p.client.Charge(ctx, req)
	if err != nil || retry != c {
		t.Errorf("retry with the same key = %+v, %v; want the stored charge %+v", retry, err, c)
	}
	rows := p.chargeRows(t)
	if len(rows) != 1 || rows[0].ChargeID != c.ChargeID || rows[0].AmountCents != 1500 {
		t.Errorf("psp_charges = %+v, want the one charge %s", rows, c.ChargeID)
	}
}

// decline: the next charge is declined whatever the customer; a refund in
// between is not affected and does not use the switch up.
func TestSwitchDecline(t *testing.T) {
	t.Parallel()
	p := newTestPSP(t)
	ctx := context.Background()
	paid := p.mustCharge(t, chargeReq("order-41-charge"))
	p.mustSetSwitch(t, Switch{Mode: ModeDecline, Count: 1})

	f, err := p.client.Refund(ctx, RefundRequest{IdempotencyKey: "order-41-refund", ChargeID: paid.ChargeID, AmountCents: 1500})
	if err != nil || f.AmountCents != 1500 {
		t.Fatalf("refund under the decline switch = %+v, %v; want refunded 1500", f, err)
	}
	if got := p.srv.CurrentSwitch(); got != (Switch{Mode: ModeDecline, Count: 1}) {
		t.Errorf("after a refund: switch = %+v, want decline with 1 call left", got)
	}
	declined := p.mustCharge(t, chargeReq("order-42-charge"))
	if declined.Status != StatusDeclined || declined.DeclineCode != DeclineCardDeclined {
		t.Errorf("charge under the decline switch = %+v, want declined card_declined", declined)
	}
	again := p.mustCharge(t, chargeReq("order-42-charge"))
	if again != declined {
		t.Errorf("replay after the switch ran out = %+v, want the stored decline %+v", again, declined)
	}
	next := p.mustCharge(t, chargeReq("order-43-charge"))
	if next.Status != StatusSucceeded {
		t.Errorf("charge after the switch ran out = %+v, want succeeded", next)
	}
}

// fail-before-charge: the connection drops and nothing was charged.
func TestSwitchFailBeforeCharge(t *testing.T) {
	t.Parallel()
	p := newTestPSP(t)
	ctx := context.Background()
	req, err := p.chargeUnder(t, Switch{Mode: ModeFailBeforeCharge, Count: 1})
	if _, err := p.client.GetCharge(ctx, req.IdempotencyKey); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetCharge = %v, want ErrNotFound", err)
	}
	if rows := p.chargeRows(t); len(rows) != 0 {
		t.Fatalf("psp_charges = %+v, want nothing charged", rows)
	}
	c, err := p.client.Charge(ctx, req)
	if err != nil || c.Status != StatusSucceeded {
		t.Fatalf("retry after fail-before-charge = %+v, %v; want a succeeded charge", c, err)
	}
	if rows := p.chargeRows(t); len(rows) != 1 || rows[0].ChargeID != c.ChargeID {
		t.Errorf("psp_charges = %+v, want one charge %s", rows, c.ChargeID)
	}
}

// error-5xx: a 502 is an unknown outcome to the caller (a real gateway may
// have charged), here with nothing charged.
func TestSwitchError5xx(t *testing.T) {
	t.Parallel()
	p := newTestPSP(t)
	ctx := context.Background()
	req, err := p.chargeUnder(t, Switch{Mode: ModeError5xx})
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadGateway || ae.Message == "" {
		t.Errorf("error = %v, want it to carry the 502 answer", err)
	}
	if _, err := p.client.GetCharge(ctx, req.IdempotencyKey); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetCharge = %v, want ErrNotFound", err)
	}
	// count 0 holds until set back to normal.
	_, err = p.client.Charge(ctx, req)
	assertOutcomeUnknown(t, err)
	if rows := p.chargeRows(t); len(rows) != 0 {
		t.Fatalf("psp_charges = %+v, want nothing charged", rows)
	}
	p.mustSetSwitch(t, Switch{Mode: ModeNormal})
	if _, err := p.client.Charge(ctx, req); err != nil {
		t.Fatalf("Charge after switching back to normal: %v", err)
	}
	if rows := p.chargeRows(t); len(rows) != 1 {
		t.Errorf("psp_charges has %d rows, want 1", len(rows))
	}
}

// slow: the PSP charges, then answers late. A caller with a shorter timeout
// gives up, but the charge exists.
func TestSwitchSlowTimeout(t *testing.T) {
	t.Parallel()
	p := newTestPSP(t)
	ctx := context.Background()
	p.mustSetSwitch(t, Switch{Mode: ModeSlow, DelayMS: 5000, Count: 1})

	impatient := NewClient(p.base, &http.Client{Timeout: 300 * time.Millisecond})
	req := chargeReq("order-42-charge")
	began := time.Now()
	_, err := impatient.Charge(ctx, req)
	assertOutcomeUnknown(t, err)
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("Charge returned after %v, want about the 300ms client timeout", took)
	}

	// The charge was committed before the delay began; it is visible by now
	// or a moment later.
	c, err := waitForCharge(ctx, p.client, req.IdempotencyKey)
	if err != nil {
		t.Fatalf("GetCharge after a timeout: %v, want the charge", err)
	}
	if rows := p.chargeRows(t); len(rows) != 1 || rows[0].ChargeID != c.ChargeID || rows[0].Status != StatusSucceeded {
		t.Errorf("psp_charges = %+v, want one succeeded charge %s", rows, c.ChargeID)
	}
}

func TestSwitchSlowPatientCaller(t *testing.T) {
	t.Parallel()
	p := newTestPSP(t)
	p.mustSetSwitch(t, Switch{Mode: ModeSlow, DelayMS: 200})

	began := time.Now()
	c := p.mustCharge(t, chargeReq("order-42-charge"))
	if took := time.Since(began); took < 200*time.Millisecond {
		t.Errorf("slow charge answered after %v, want at least 200ms", took)
	}
	if c.Status != StatusSucceeded {
		t.Errorf("charge = %+v, want succeeded", c)
	}
}

// count limits the switch to the next N charge or refund calls; bad input
// does not use it up and status queries are not affected at all.
func TestSwitchCount(t *testing.T) {
	t.Parallel()
	p := newTestPSP(t)
	ctx := context.Background()
	p.mustSetSwitch(t, Switch{Mode: ModeError5xx, Count: 2})

	// Neither a rejected request nor a status query uses the switch up.
	if status, _, _ := p.call(t, http.MethodPost, "/charges", `{"idempotency_key":"x"}`); status != http.StatusUnprocessableEntity {
		t.Errorf("invalid charge under error-5xx = %d, want 422 (validation first)", status)
	}
	if _, err := p.client.GetCharge(ctx, "k-0"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetCharge under error-5xx = %v, want ErrNotFound (queries are never switched)", err)
	}
	if status, _, body := p.call(t, http.MethodGet, "/charges?order_ref=42", ""); status != http.StatusOK {
		t.Errorf("GET /charges under error-5xx = %d %s, want 200", status, body)
	}

	for i, key := range []string{"k-1", "k-2"} {
		_, err := p.client.Charge(ctx, chargeReq(key))
		if !errors.Is(err, ErrOutcomeUnknown) {
			t.Errorf("call %d: error = %v, want ErrOutcomeUnknown", i+1, err)
		}
	}
	if sw := p.srv.CurrentSwitch(); sw != (Switch{Mode: ModeNormal}) {
		t.Errorf("switch after its count = %+v, want normal", sw)
	}
	c := p.mustCharge(t, chargeReq("k-3"))
	rows := p.chargeRows(t)
	if len(rows) != 1 || rows[0].ChargeID != c.ChargeID || rows[0].IdempotencyKey != "k-3" {
		t.Errorf("psp_charges = %+v, want only the third call's charge", rows)
	}
}

func TestSwitchRefund(t *testing.T) {
	t.Parallel()
	p := newTestPSP(t)
	ctx := context.Background()
	c := p.mustCharge(t, chargeReq("order-42-charge"))
	req := RefundRequest{IdempotencyKey: "order-42-refund", ChargeID: c.ChargeID, AmountCents: 1500}

	p.mustSetSwitch(t, Switch{Mode: ModeFailBeforeCharge, Count: 1})
	_, err := p.client.Refund(ctx, req)
	assertOutcomeUnknown(t, err)
	if _, err := p.client.GetRefund(ctx, req.IdempotencyKey); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetRefund after fail-before-charge = %v, want ErrNotFound", err)
	}

	p.mustSetSwitch(t, Switch{Mode: ModeLoseResponse, Count: 1})
	_, err = p.client.Refund(ctx, req)
	assertOutcomeUnknown(t, err)
	f, err := p.client.GetRefund(ctx, req.IdempotencyKey)
	if err != nil || f.AmountCents != 1500 || f.ChargeID != c.ChargeID {
		t.Fatalf("GetRefund after a lost response = %+v, %v; want the refund of 1500", f, err)
	}
	again, err := p.client.Refund(ctx, req)
	if err != nil || again != f {
		t.Errorf("retry = %+v, %v; want the stored refund %+v", again, err, f)
	}
	if rows := p.refundRows(t); len(rows) != 1 || rows[0].AmountCents != 1500 {
		t.Errorf("psp_refunds = %+v, want one refund of 1500", rows)
	}
}

func TestClientErrorClasses(t *testing.T) {
	t.Parallel()
	p := newTestPSP(t)
	ctx := context.Background()

	// A decline is an answer.
	c, err := p.client.Charge(ctx, ChargeRequest{IdempotencyKey: "k-decl", OrderRef: "1", CustomerID: "decline-1", AmountCents: 100, Currency: "EUR"})
	if err != nil || c.Status != StatusDeclined || c.DeclineCode != DeclineCardDeclined {
		t.Errorf("declined charge = %+v, %v; want a declined charge and no error", c, err)
	}

	// A 4xx is a refusal: *APIError, never ErrOutcomeUnknown.
	_, err = p.client.Charge(ctx, ChargeRequest{IdempotencyKey: "k-bad", OrderRef: "1", CustomerID: "c", AmountCents: -1, Currency: "EUR"})
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusUnprocessableEntity || errors.Is(err, ErrOutcomeUnknown) {
		t.Errorf("invalid charge error = %v, want *APIError 422, not ErrOutcomeUnknown", err)
	}

	// A caller's own deadline: unknown (the request may have gone out).
	dctx, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	<-dctx.Done()
	_, err = p.client.Charge(dctx, chargeReq("k-ctx"))
	assertOutcomeUnknown(t, err)

	// Nobody listening: unknown as well; the status query will tell.
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	_, err = NewClient(deadURL+"/psp", nil).Charge(ctx, chargeReq("k-dead"))
	assertOutcomeUnknown(t, err)

	// An answer that is not the API's JSON on a 2xx: unknown.
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("<html>"))
	}))
	defer garbage.Close()
	_, err = NewClient(garbage.URL, nil).Charge(ctx, chargeReq("k-garbage"))
	assertOutcomeUnknown(t, err)

	if rows := p.chargeRows(t); len(rows) != 1 || rows[0].IdempotencyKey != "k-decl" || rows[0].Status != StatusDeclined {
		t.Errorf("psp_charges = %+v, want only the declined charge", rows)
	}
}

// chargeUnder sets the switch sw, then sends the charge of order 42, whose
// outcome must be unknown to the caller; it returns the request and the
// caller's error.
func (p *testPSP) chargeUnder(t *testing.T, sw Switch) (ChargeRequest, error) {
	t.Helper()
	p.mustSetSwitch(t, sw)
	req := chargeReq("order-42-charge")
	_, err := p.client.Charge(context.Background(), req)
	assertOutcomeUnknown(t, err)
	return req, err
}

func assertOutcomeUnknown(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("error = %v, want ErrOutcomeUnknown", err)
	}
	var ae *APIError
	if errors.As(err, &ae) && ae.Status < 500 {
		t.Fatalf("error = %v: an unknown outcome must not carry a 4xx", err)
	}
}

// waitForCharge polls the status query until the charge shows up or a few
// seconds pass: right after a timeout the PSP may still be committing.
func waitForCharge(ctx context.Context, c *Client, key string) (Charge, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ch, err := c.GetCharge(ctx, key)
		if !errors.Is(err, ErrNotFound) {
			return ch, err
		}
		select {
		case <-ctx.Done():
			return Charge{}, err
		case <-tick.C:
		}
	}
}
