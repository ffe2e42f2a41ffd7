package web

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

type decodeItem struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

type decodeBody struct {
	CustomerID string          `json:"customer_id"`
	Items      []decodeItem    `json:"items"`
	Note       *string         `json:"note,omitempty"`
	Meta       map[string]any  `json:"meta"`
	Raw        json.RawMessage `json:"raw"`
	At         time.Time       `json:"at"`
	Ignored    string          `json:"-"`
	embedded
}

type embedded struct {
	Flag bool `json:"flag"`
}

// Every way a body can be ambiguous or malformed is a 400 (413, 415) of its
// own problem type, and nothing is decoded.
func TestDecodeJSONRefuses(t *testing.T) {
	for _, c := range []struct {
		name, ct, body string
		status         int
		typ            string
		says           string
	}{
		{"no content type", "", `{}`, 415, TypeUnsupportedMedia, "Content-Type"},
		{"text/plain", "text/plain", `{}`, 415, TypeUnsupportedMedia, "Content-Type"},
		{"form", "application/x-www-form-urlencoded", `customer_id=a`, 415, TypeUnsupportedMedia, "Content-Type"},
		{"empty", "application/json", ``, 400, TypeMalformedJSON, "empty body"},
		{"blank", "application/json", " \n ", 400, TypeMalformedJSON, "empty body"},
		{"not JSON", "application/json", `customer_id=a`, 400, TypeMalformedJSON, "malformed"},
		{"cut short", "application/json", `{"customer_id":`, 400, TypeMalformedJSON, "ends too early"},
		{"an array", "application/json", `[]`, 400, TypeMalformedJSON, "JSON object"},
		{"null", "application/json", `null`, 400, TypeMalformedJSON, "JSON object"},
		{"trailing object", "application/json", `{"customer_id":"a"}{"customer_id":"b"}`, 400, TypeMalformedJSON, "trailing"},
		{"trailing garbage", "application/json", `{"customer_id":"a"} x`, 400, TypeMalformedJSON, "trailing"},
		{"duplicate key", "application/json", `{"customer_id":"a","customer_id":"b"}`, 400, TypeAmbiguousJSON, `"customer_id" appears twice`},
		{"duplicate nested key", "application/json", `{"items":[{"sku":"a","sku":"b"}]}`, 400, TypeAmbiguousJSON, `items[0].sku`},
		{"keys differing in case", "application/json", `{"customer_id":"a","Customer_ID":"b"}`, 400, TypeAmbiguousJSON, "differ only in case"},
		{"duplicate in a map", "application/json", `{"meta":{"k":1,"k":2}}`, 400, TypeAmbiguousJSON, "meta.k"},
		{"key matching only by case", "application/json", `{"Customer_id":"b"}`, 400, TypeUnknownField, "case-sensitive"},
		{"unknown field", "application/json", `{"colour":"red"}`, 400, TypeUnknownField, `"colour"`},
		{"unknown nested field", "application/json", `{"items":[{"sku":"a","price":1}]}`, 400, TypeUnknownField, `items[0].price`},
		{"ignored field", "application/json", `{"Ignored":"x"}`, 400, TypeUnknownField, "Ignored"},
		{"string for a number", "application/json", `{"items":[{"quantity":"2"}]}`, 400, TypeWrongType, "quantity"},
		{"overflowing number", "application/json", `{"items":[{"quantity":99999999999999999999}]}`, 400, TypeWrongType, "quantity"},
		{"huge exponent", "application/json", `{"items":[{"quantity":1e400}]}`, 400, TypeWrongType, "quantity"},
		{"fraction for an int", "application/json", `{"items":[{"quantity":1.5}]}`, 400, TypeWrongType, "quantity"},
		{"invalid UTF-8", "application/json", "{\"customer_id\":\"\xff\xfe\"}", 400, TypeInvalidText, "UTF-8"},
		{"escaped NUL", "application/json", `{"customer_id":"a\u0000b"}`, 400, TypeInvalidText, "customer_id"},
		{"escaped newline", "application/json", `{"customer_id":"a\nb"}`, 400, TypeInvalidText, "control character"},
		{"C1 control", "application/json", `{"customer_id":"a\u0085"}`, 400, TypeInvalidText, "U+0085"},
		{"lone surrogate", "application/json", `{"customer_id":"\ud800"}`, 400, TypeInvalidText, "customer_id"},
		{"control char in a key", "application/json", `{"meta":{"a\u0001":1}}`, 400, TypeInvalidText, "meta"},
		{"too deep", "application/json", `{"meta":{"a":` + strings.Repeat(`[`, 40) + strings.Repeat(`]`, 40) + `}}`, 400, TypeMalformedJSON, "deeper"},
		{"too large", "application/json", `{"customer_id":"` + strings.Repeat("x", 2000) + `"}`, 413, TypeTooLarge, "larger than 1024"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(c.body))
			if c.ct != "" {
				r.Header.Set("Content-Type", c.ct)
			}
			v := decodeBody{CustomerID: "untouched"}
			err := DecodeJSON(httptest.NewRecorder(), r, 1024, &v)
			var we *Error
			if !errors.As(err, &we) || we.Status != c.status || we.typ() != c.typ || !strings.Contains(we.Message, c.says) {
				t.Fatalf("DecodeJSON(%q) = %v (type %v), want %d %s saying %q", c.body, err, typeOf(we), c.status, c.typ, c.says)
			}
			if v.CustomerID != "untouched" {
				t.Errorf("a refused body was decoded: customer_id %q", v.CustomerID)
			}
		})
	}
}

func typeOf(e *Error) string {
	if e == nil {
		return "none"
	}
	return e.typ()
}

// What a strict decoder must still take: every field, in any order, with
// any keys inside a map or a raw value, unicode text, and JSON's own escapes.
func TestDecodeJSONAccepts(t *testing.T) {
	body := `{"flag":true,"items":[{"sku":"SKU-1","quantity":2}],"customer_id":"Zoë \u00e9 \"q\"",` +
		`"note":null,"meta":{"Any":1,"any2":[{"x":{"y":"z"}}]},"raw":{"a":1},"at":"2026-01-02T03:04:05Z"}`
	r := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json; charset=utf-8")
	var v decodeBody
	if err := DecodeJSON(httptest.NewRecorder(), r, 1024, &v); err != nil {
		t.Fatalf("DecodeJSON = %v", err)
	}
	if v.CustomerID != `Zoë é "q"` || len(v.Items) != 1 || v.Items[0].Quantity != 2 || !v.Flag || v.At.Year() != 2026 {
		t.Errorf("decoded %+v", v)
	}
}
