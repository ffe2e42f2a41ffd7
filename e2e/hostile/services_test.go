package hostile_test

import (
	"net/http"
	"strings"
)

// The attacks, one builder per service, each kept to what that service
// serves. Most refused writes are otherwise well-formed (a valid order
// from another site's page, a charge without the PSP's key): the refusal
// is the only thing between them and a write.

var (
	asJSON = func(kv ...string) http.Header {
		return h(append([]string{"Content-Type", "application/json"}, kv...)...)
	}
	admin = "Bearer " + adminToken
)

const goodOrder = `{"customer_id":"c-h","items":[{"sku":"SKU-1","quantity":1}]}`

func (e *env) orderAttacks() []attack {
	o, key := e.s.Order.URL, asJSON("Idempotency-Key", "h-new")
	cancel := o + "/orders/" + e.order + "/cancel"
	deep := `{"customer_id":"c","items":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`
	return []attack{
		{"order: a key twice (the last would win)", "POST", o + "/orders", "", key, `{"customer_id":"a","customer_id":"b","items":[{"sku":"SKU-1","quantity":1}]}`, 400, "ambiguous-json"},
		{"order: keys differing only in case", "POST", o + "/orders", "", key, `{"customer_id":"a","Customer_Id":"b","items":[{"sku":"SKU-1","quantity":1}]}`, 400, "ambiguous-json"},
		{"order: a key matching a field only by case", "POST", o + "/orders", "", key, `{"CUSTOMER_ID":"a","items":[{"sku":"SKU-1","quantity":1}]}`, 400, "unknown-field"},
		{"order: a nested key twice", "POST", o + "/orders", "", key, `{"customer_id":"a","items":[{"sku":"SKU-1","sku":"SKU-3","quantity":1}]}`, 400, "ambiguous-json"},
		{"order: trailing data", "POST", o + "/orders", "", key, goodOrder + `{"customer_id":"b"}`, 400, "malformed-json"},
		{"order: an unknown field", "POST", o + "/orders", "", key, `{"customer_id":"a","items":[{"sku":"SKU-1","quantity":1}],"price_cents":1}`, 400, "unknown-field"},
		{"order: null", "POST", o + "/orders", "", key, `null`, 400, "malformed-json"},
		{"order: nested 200 deep", "POST", o + "/orders", "", key, deep, 400, "malformed-json"},
		{"order: quantity 1e400", "POST", o + "/orders", "", key, `{"customer_id":"a","items":[{"sku":"SKU-1","quantity":1e400}]}`, 400, "wrong-type"},
		{"order: quantity past int64", "POST", o + "/orders", "", key, `{"customer_id":"a","items":[{"sku":"SKU-1","quantity":99999999999999999999}]}`, 400, "wrong-type"},
		{"order: quantity past int32", "POST", o + "/orders", "", key, `{"customer_id":"a","items":[{"sku":"SKU-1","quantity":2147483648}]}`, 422, "unprocessable"},
		{"order: invalid UTF-8", "POST", o + "/orders", "", key, "{\"customer_id\":\"\xc3\x28\",\"items\":[{\"sku\":\"SKU-1\",\"quantity\":1}]}", 400, "invalid-text"},
		{"order: an escaped NUL", "POST", o + "/orders", "", key, `{"customer_id":"a\u0000b","items":[{"sku":"SKU-1","quantity":1}]}`, 400, "invalid-text"},
		{"order: a lone surrogate", "POST", o + "/orders", "", key, `{"customer_id":"\udc00","items":[{"sku":"SKU-1","quantity":1}]}`, 400, "invalid-text"},
		{"order: markup in customer_id", "POST", o + "/orders", "", key, `{"customer_id":"<script>","items":[{"sku":"SKU-1","quantity":1}]}`, 422, "unprocessable"},
		{"order: customer_id of 65", "POST", o + "/orders", "", key, `{"customer_id":"` + strings.Repeat("c", 65) + `","items":[{"sku":"SKU-1","quantity":1}]}`, 422, "unprocessable"},
		{"order: a 100 KiB body", "POST", o + "/orders", "", key, `{"customer_id":"` + strings.Repeat("c", 100<<10) + `"}`, 413, "body-too-large"},
		{"order: an empty body", "POST", o + "/orders", "", key, ``, 400, "malformed-json"},
		{"order: no Idempotency-Key", "POST", o + "/orders", "", asJSON(), goodOrder, 400, "idempotency-key-missing"},
		{"order: two Idempotency-Key lines", "POST", o + "/orders", "", asJSON("Idempotency-Key", "h-1", "Idempotency-Key", "h-2"), goodOrder, 400, "idempotency-key-invalid"},
		{"order: an Idempotency-Key list", "POST", o + "/orders", "", asJSON("Idempotency-Key", `"h-1", "h-2"`), goodOrder, 400, "idempotency-key-invalid"},
		{"order: a tab in the key", "POST", o + "/orders", "", asJSON("Idempotency-Key", "h\t1"), goodOrder, 400, "idempotency-key-invalid"},
		{"order: a byte 0xff in the key", "POST", o + "/orders", "", asJSON("Idempotency-Key", "h\xff1"), goodOrder, 400, "idempotency-key-invalid"},
		{"order: U+0085 (a C1 control) in the key", "POST", o + "/orders", "", asJSON("Idempotency-Key", "h\u00851"), goodOrder, 400, "idempotency-key-invalid"},
		{"order: a 129-character key", "POST", o + "/orders", "", asJSON("Idempotency-Key", strings.Repeat("k", 129)), goodOrder, 400, "idempotency-key-invalid"},
		{"order: the seed's key with another order", "POST", o + "/orders", "", asJSON("Idempotency-Key", `"hostile-seed"`), goodOrder, 422, "idempotency-key-reused"},
		{"cancel: the reason twice", "POST", cancel, "", key, `{"reason":"a","reason":"b"}`, 400, "ambiguous-json"},
		{"cancel: an escape sequence in the reason", "POST", cancel, "", key, `{"reason":"\u001b[2J"}`, 400, "invalid-text"},
		{"cancel: a reason of 201", "POST", cancel, "", key, `{"reason":"` + strings.Repeat("r", 201) + `"}`, 422, "unprocessable"},
		{"cancel: no Idempotency-Key", "POST", cancel, "", asJSON(), `{"reason":"x"}`, 400, "idempotency-key-missing"},
		{"cancel: text/plain", "POST", cancel, "", h("Content-Type", "text/plain", "Idempotency-Key", "h-c"), `{"reason":"x"}`, 415, "unsupported-media-type"},
		{"orders: limit 0", "GET", o + "/orders?limit=0", "", nil, "", 400, "bad-request"},
		{"orders: limit past int64", "GET", o + "/orders?limit=99999999999999999999", "", nil, "", 400, "bad-request"},
		{"orders: markup as a status", "GET", o + "/orders?status=%3Cscript%3E", "", nil, "", 400, "bad-request"},
		{"order: not an id", "GET", o + "/orders/1e3", "", nil, "", 404, "not-found"},
		{"admin: no token", "GET", o + "/admin/outbox", "", nil, "", 401, "unauthorized"},
		{"admin: wrong token", "POST", o + "/admin/reconciliation/run", "", h("Authorization", "Bearer guess"), "", 401, "unauthorized"},
		{"admin: redrive, a key twice", "POST", o + "/admin/dead-letters/redrive", "", asJSON("Authorization", admin), `{"ids":[1],"ids":[2]}`, 400, "ambiguous-json"},
		{"admin: retry an event that is not failed", "POST", o + "/admin/outbox/nope/retry", "", h("Authorization", admin), "", 409, "conflict"},
	}
}

func (e *env) inventoryAttacks() []attack {
	i := e.s.Inventory.URL
	receipt, key := i+"/stock/SKU-1/receipts", asJSON("Idempotency-Key", "h-r")
	return []attack{
		{"receipt: no Idempotency-Key", "POST", receipt, "", asJSON(), `{"quantity":5}`, 400, "idempotency-key-missing"},
		{"receipt: quantity twice", "POST", receipt, "", key, `{"quantity":1,"quantity":900000}`, 400, "ambiguous-json"},
		{"receipt: Quantity by case", "POST", receipt, "", key, `{"Quantity":5}`, 400, "unknown-field"},
		{"receipt: quantity as a string", "POST", receipt, "", key, `{"quantity":"5"}`, 400, "wrong-type"},
		{"receipt: quantity -1e400", "POST", receipt, "", key, `{"quantity":-1e400}`, 400, "wrong-type"},
		{"receipt: quantity 0", "POST", receipt, "", key, `{"quantity":0}`, 422, "unprocessable"},
		{"receipt: a 2 KiB body", "POST", receipt, "", key, `{"quantity":1` + strings.Repeat(" ", 2048) + `}`, 413, "body-too-large"},
		{"receipt: an unknown SKU", "POST", i + "/stock/SKU-NOPE/receipts", "", key, `{"quantity":1}`, 404, "not-found"},
		{"receipt: a form", "POST", receipt, "", h("Content-Type", "application/x-www-form-urlencoded", "Idempotency-Key", "h-r"), `quantity=5`, 415, "unsupported-media-type"},
		{"stock: an encoded NUL in the SKU", "GET", i + "/stock/SKU-1%00", "", nil, "", 400, "path-not-clean"},
		{"reservation: a negative id", "GET", i + "/reservations/-1", "", nil, "", 404, "not-found"},
		{"gaps: resolve without a token", "POST", i + "/admin/gaps/1/resolve", "", asJSON(), `{"resolution":"x"}`, 401, "unauthorized"},
		{"gaps: resolution twice", "POST", i + "/admin/gaps/1/resolve", "", asJSON("Authorization", admin), `{"resolution":"a","resolution":"b"}`, 400, "ambiguous-json"},
		{"gaps: open=maybe", "GET", i + "/admin/gaps?open=maybe", "", h("Authorization", admin), "", 400, "bad-request"},
		{"sync reserve: no token", "POST", i + "/debug/reservations", "", asJSON(), `{"order_id":"99"}`, 401, "unauthorized"},
		{"sync reserve: order_id twice", "POST", i + "/debug/reservations", "", asJSON("Authorization", admin), `{"order_id":"99","order_id":"98"}`, 400, "ambiguous-json"},
	}
}

func (e *env) paymentAttacks() []attack {
	p := e.s.Payment.URL
	return []attack{
		{"payment: not an id", "GET", p + "/payments/abc", "", nil, "", 404, "not-found"},
		{"outcome: no token (it asks the PSP)", "GET", p + "/payments/" + e.order + "/outcome", "", nil, "", 401, "unauthorized"},
		{"outcome: wrong token", "GET", p + "/payments/" + e.order + "/outcome", "", h("Authorization", "Bearer "+e.pspKey), "", 401, "unauthorized"},
		{"pass-through: a charge", "POST", p + "/psp/charges", "", asJSON("Authorization", "Bearer "+e.pspKey),
			`{"idempotency_key":"h-ch","order_ref":"1","customer_id":"c","amount_cents":1,"currency":"EUR"}`, 405, "method-not-allowed"},
		{"pass-through: a refund", "POST", p + "/psp/refunds", "", asJSON(), `{"idempotency_key":"h-re","charge_id":"` + e.charge + `","amount_cents":1}`, 405, "method-not-allowed"},
		{"pass-through: the switch", "PUT", p + "/psp/switches", "", asJSON(), `{"mode":"decline"}`, 405, "method-not-allowed"},
		{"needs attention: retry without a token", "POST", p + "/admin/needs-attention/" + e.order + "/retry", "", nil, "", 401, "unauthorized"},
		{"needs attention: limit 0", "GET", p + "/admin/needs-attention?limit=0", "", h("Authorization", admin), "", 400, "bad-request"},
	}
}

func (e *env) pspAttacks() []attack {
	s, key := e.s.PSP.URL+"/psp", "Bearer "+e.pspKey
	charge := `{"idempotency_key":"h-ch","order_ref":"1","customer_id":"c","amount_cents":100,"currency":"EUR"}`
	refund := `{"idempotency_key":"h-re","charge_id":"` + e.charge + `","amount_cents":1}`
	return []attack{
		{"psp charge: no key", "POST", s + "/charges", "", asJSON(), charge, 401, "unauthorized"},
		{"psp charge: the admin token is not its key", "POST", s + "/charges", "", asJSON("Authorization", admin), charge, 401, "unauthorized"},
		{"psp charge: the amount twice", "POST", s + "/charges", "", asJSON("Authorization", key),
			`{"idempotency_key":"h-ch","order_ref":"1","customer_id":"c","amount_cents":100,"amount_cents":1,"currency":"EUR"}`, 400, "ambiguous-json"},
		{"psp charge: amount 1e400", "POST", s + "/charges", "", asJSON("Authorization", key),
			`{"idempotency_key":"h-ch","order_ref":"1","customer_id":"c","amount_cents":1e400,"currency":"EUR"}`, 400, "wrong-type"},
		{"psp charge: the charge's key reused", "POST", s + "/charges", "", asJSON("Authorization", key),
			`{"idempotency_key":"charge-` + e.order + `","order_ref":"` + e.order + `","customer_id":"c","amount_cents":1,"currency":"EUR"}`, 409, "idempotency-key-reused"},
		{"psp refund: no key", "POST", s + "/refunds", "", asJSON(), refund, 401, "unauthorized"},
		{"psp refund: Amount_Cents by case", "POST", s + "/refunds", "", asJSON("Authorization", key),
			`{"idempotency_key":"h-re","charge_id":"` + e.charge + `","Amount_Cents":1}`, 400, "unknown-field"},
		{"psp switch: no admin token", "PUT", s + "/switches", "", asJSON(), `{"mode":"decline"}`, 401, "unauthorized"},
		{"psp switch: the PSP key is not the admin token", "PUT", s + "/switches", "", asJSON("Authorization", key), `{"mode":"decline"}`, 401, "unauthorized"},
		{"psp books: a bad order_ref", "GET", s + "/charges?order_ref=a%20b", "", nil, "", 400, "bad-request"},
	}
}
