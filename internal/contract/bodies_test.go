package contract

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
)

// bodyPlace is one body schema of docs/openapi.yaml: a request body or an
// answer of one status, in one content type.
type bodyPlace struct {
	name   string
	route  *routers.Route
	status int // 0: the request body
	mime   string
	schema *openapi3.Schema
}

// bodyPlaces lists every body schema the document has.
func bodyPlaces(t *testing.T) []bodyPlace {
	t.Helper()
	doc, _, err := OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	var out []bodyPlace
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			route := &routers.Route{Spec: doc, Path: path, PathItem: item, Method: method, Operation: op}
			if rb := op.RequestBody; rb != nil && rb.Value != nil {
				for mime, mt := range rb.Value.Content {
					if mt.Schema != nil {
						out = append(out, bodyPlace{method + " " + path + " request " + mime, route, 0, mime, mt.Schema.Value})
					}
				}
			}
			for key, ref := range op.Responses.Map() {
				status := 0
				if key != "default" {
					status = atoi(t, key)
				}
				for mime, mt := range ref.Value.Content {
					if mt.Schema != nil && status != 0 {
						out = append(out, bodyPlace{method + " " + path + " " + key + " " + mime, route, status, mime, mt.Schema.Value})
					}
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b bodyPlace) int { return strings.Compare(a.name, b.name) })
	return out
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if err := json.Unmarshal([]byte(s), &n); err != nil {
		t.Fatalf("response key %q: %v", s, err)
	}
	return n
}

// TestBodiesDecideAsOpenapi3filter: the checker's body check, with each
// schema compiled once, passes and fails exactly the bodies that
// openapi3filter's own (a validator compiled per body) does. For every
// body schema of the document, the candidates are plain JSON values of
// every type, a value made from the schema (its required properties, each
// of its type, enum or format), that value with one more property, and
// with each required property taken away or given the wrong type, and
// each of its formatted or patterned strings malformed.
func TestBodiesDecideAsOpenapi3filter(t *testing.T) {
	b, err := newBodies()
	if err != nil {
		t.Fatal(err)
	}
	places := bodyPlaces(t)
	if len(places) < 20 {
		t.Fatalf("%d body schemas found in docs/openapi.yaml: the walk is broken", len(places))
	}
	passed, failed := 0, 0
	seen := map[*openapi3.Schema]bool{} // responses by $ref share one
	for _, p := range places {
		if seen[p.schema] {
			continue
		}
		seen[p.schema] = true
		for _, v := range candidates(p.schema) {
			body, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			plain, ours := plainVerdict(p, body), ourVerdict(b, p, body)
			if ours != nil && strings.Contains(ours.Error(), "compile") {
				t.Fatalf("%s: %v", p.name, ours)
			}
			if (plain == nil) != (ours == nil) {
				t.Errorf("%s, body %s: openapi3filter says %v, the checker %v", p.name, body, plain, ours)
			}
			if ours == nil {
				passed++
			} else {
				failed++
			}
		}
	}
	t.Logf("%d body schemas (%d distinct): %d bodies passed, %d failed, by both", len(places), len(seen), passed, failed)
	if passed == 0 || failed == 0 {
		t.Errorf("the candidates do not tell the validators apart: %d passed, %d failed", passed, failed)
	}
}

// plainVerdict is openapi3filter's own check of the body, a validator
// compiled for it: ValidateRequestBody, or ValidateResponse on the
// operation with only this response, its headers left out (they are not
// what is compared).
func plainVerdict(p bodyPlace, body []byte) error {
	r, _ := http.NewRequest(p.route.Method, p.route.Path, bytes.NewReader(body))
	r.Header.Set("Content-Type", p.mime)
	opts := &openapi3filter.Options{MultiError: true, IncludeResponseStatus: true}
	in := &openapi3filter.RequestValidationInput{Request: r, Route: p.route, Options: opts}
	if p.status == 0 {
		return openapi3filter.ValidateRequestBody(context.Background(), in, p.route.Operation.RequestBody.Value)
	}
	_, ref := responseOf(p.route.Operation, p.status)
	resp := *ref.Value
	resp.Headers = nil
	op := *p.route.Operation
	op.Responses = openapi3.NewResponses(openapi3.WithStatus(p.status, &openapi3.ResponseRef{Value: &resp}))
	route := *p.route
	route.Operation = &op
	in.Route = &route
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: p.status,
		Header: http.Header{"Content-Type": {p.mime}}, Options: opts}
	out.SetBodyBytes(body)
	return openapi3filter.ValidateResponse(context.Background(), out)
}

// ourVerdict is the checker's body check.
func ourVerdict(b *bodies, p bodyPlace, body []byte) error {
	if p.status == 0 {
		r, _ := http.NewRequest(p.route.Method, p.route.Path, nil)
		r.Header.Set("Content-Type", p.mime)
		return b.request(p.route, r, body)
	}
	return b.response(p.route, p.status, http.Header{"Content-Type": {p.mime}}, body)
}

// candidates are the bodies tried against one schema.
func candidates(s *openapi3.Schema) []any {
	out := []any{nil, map[string]any{}, []any{}, "x", 1, true}
	good := valueOf(s, 0)
	out = append(out, good)
	obj, ok := good.(map[string]any)
	if !ok {
		return out
	}
	extra := clone(obj)
	extra["zz_undocumented"] = "x"
	out = append(out, extra)
	for _, name := range s.Required {
		without := clone(obj)
		delete(without, name)
		wrong := clone(obj)
		wrong[name] = []any{map[string]any{}}
		out = append(out, without, wrong)
		if prop := s.Properties[name]; prop != nil && (prop.Value.Format != "" || prop.Value.Pattern != "") {
			malformed := clone(obj)
			malformed[name] = "not 2026-12-07T10:00:00Z"
			out = append(out, malformed)
		}
	}
	return out
}

func clone(m map[string]any) map[string]any {
	c := make(map[string]any, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// patterned are strings of the shapes the document's patterns ask for.
var patterned = []string{"7", "EUR", "/orders/7", "Bearer t", "ch_1", "re_1", "k-1",
	"https://github.com/relmsg/ordersaga/blob/main/docs/contract.md#problem-not-found"}

// valueOf makes a value the schema should accept: its const or first enum
// value, else one of its first type, an object with every required
// property, an array of one item.
func valueOf(s *openapi3.Schema, depth int) any {
	if s == nil || depth > 8 {
		return nil
	}
	switch {
	case s.Const != nil:
		return s.Const
	case len(s.Enum) > 0:
		return s.Enum[0]
	case len(s.OneOf) > 0:
		return valueOf(s.OneOf[0].Value, depth+1)
	case len(s.AnyOf) > 0:
		return valueOf(s.AnyOf[0].Value, depth+1)
	case len(s.AllOf) > 0:
		return valueOf(s.AllOf[0].Value, depth+1)
	}
	types := s.Type.Slice()
	if len(types) == 0 {
		return "x"
	}
	switch types[0] {
	case "object":
		o := map[string]any{}
		for _, name := range s.Required {
			switch p, more := s.Properties[name], s.AdditionalProperties.Schema; {
			case p != nil:
				o[name] = valueOf(p.Value, depth+1)
			case more != nil:
				o[name] = valueOf(more.Value, depth+1)
			default:
				o[name] = "x"
			}
		}
		return o
	case "array":
		if s.Items == nil {
			return []any{}
		}
		return []any{valueOf(s.Items.Value, depth+1)}
	case "string":
		if s.Format == "date-time" {
			return "2026-12-07T10:00:00Z"
		}
		if s.Pattern != "" {
			re := regexp.MustCompile(s.Pattern)
			for _, v := range patterned {
				if re.MatchString(v) {
					return v
				}
			}
		}
		return strings.Repeat("x", max(int(s.MinLength), 1))
	case "integer", "number":
		if s.Min != nil {
			return *s.Min
		}
		return 1
	case "boolean":
		return true
	}
	return nil
}
