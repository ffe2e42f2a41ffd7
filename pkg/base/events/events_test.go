package events

import "testing"

// Every event type declares a supported schema version and an ordering
// strategy: a new type cannot be added without deciding how consumers treat
// it out of order.
func TestEveryTypeHasVersionAndStrategy(t *testing.T) {
	for typ := range supported {
		if _, ok := Strategies[typ]; !ok {
			t.Errorf("%s has no ordering strategy", typ)
		}
		if err := CheckVersion(typ, CurrentSchemaVersion); err != nil {
			t.Errorf("%s: %v", typ, err)
		}
	}
	for typ := range Strategies {
		if _, ok := supported[typ]; !ok {
			t.Errorf("%s has a strategy but no supported version", typ)
		}
	}
}

func TestDecodeValidates(t *testing.T) {
	if _, err := Decode[OrderCreatedV1]([]byte(`{"order_id":"1","customer_id":"c","items":[],"total_cents":1,"currency":"EUR"}`)); err == nil {
		t.Fatal("an order without items decoded without error")
	}
	if _, err := Decode[OrderCancelledV1]([]byte(`{"order_id":"7","reason":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if err := CheckVersion("nope", 1); err == nil {
		t.Fatal("unknown type accepted")
	}
}
