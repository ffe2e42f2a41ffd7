package contract

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/relmsg/ordersaga/docs"
)

// openAPIURL names docs/openapi.yaml as a schema resource.
const openAPIURL = "file:///docs/openapi.yaml"

// bodies validates request and answer bodies against docs/openapi.yaml
// with each body schema compiled once. openapi3filter compiles a JSON
// Schema 2020-12 validator from scratch for every body it checks (it keeps
// none), which was a fifth of what a stack test spends; the Checker leaves
// bodies to this and parameters and headers to openapi3filter. The rules
// are openapi3filter's: a body is checked against the schema of its
// content type under the operation's requestBody, or under the response
// of its status (or default); a content type the operation does not list
// is a violation; a request with no body fails only a required
// requestBody. The semantics are the same too: 2020-12, the draft of an
// OpenAPI 3.1 document, over the document itself, so a $ref means what it
// means there.
type bodies struct {
	c *jsonschema.Compiler

	mu    sync.Mutex
	byPtr map[string]*jsonschema.Schema
}

// sharedBodies returns the one bodies of the process: every Checker (a
// test binary makes one per stack) shares the compiled schemas.
var sharedBodies = sync.OnceValues(newBodies)

func newBodies() (*bodies, error) {
	doc, err := raw(docs.OpenAPI)
	if err != nil {
		return nil, fmt.Errorf("read docs/openapi.yaml: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// The formats as openapi3filter asserts them: a string format it has a
	// validator for is checked by that validator, any other is not.
	for _, name := range formatsIn(doc) {
		c.RegisterFormat(&jsonschema.Format{Name: name, Validate: func(v any) error {
			f, known := openapi3.SchemaStringFormats[name]
			if s, ok := v.(string); ok && known {
				return f.Validate(s)
			}
			return nil
		}})
	}
	c.AssertFormat()
	if err := c.AddResource(openAPIURL, doc); err != nil {
		return nil, err
	}
	return &bodies{c: c, byPtr: map[string]*jsonschema.Schema{}}, nil
}

// formatsIn lists the formats a document's schemas name.
func formatsIn(node any) []string {
	var out []string
	switch node := node.(type) {
	case map[string]any:
		if f, ok := node["format"].(string); ok && f != "" {
			out = append(out, f)
		}
		for _, v := range node {
			out = append(out, formatsIn(v)...)
		}
	case []any:
		for _, v := range node {
			out = append(out, formatsIn(v)...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// schema compiles the schema at a JSON pointer of the document, once.
func (b *bodies) schema(ptr string) (*jsonschema.Schema, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.byPtr[ptr]; ok {
		return s, nil
	}
	s, err := b.c.Compile(openAPIURL + ptr)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", ptr, err)
	}
	b.byPtr[ptr] = s
	return s, nil
}

// request checks a request body against its operation's requestBody.
func (b *bodies) request(route *routers.Route, r *http.Request, body []byte) error {
	rb := route.Operation.RequestBody
	if rb == nil || rb.Value == nil {
		return nil
	}
	if len(body) == 0 {
		if rb.Value.Required {
			return fmt.Errorf("request body: value is required but missing")
		}
		return nil
	}
	base := rb.Ref
	if base == "" {
		base = operationPtr(route) + "/requestBody"
	}
	return b.content("request body", base, rb.Value.Content, r.Header.Get("Content-Type"), body)
}

// response checks an answer's body against the response its operation
// gives the status (or its default). A status the operation does not
// list is openapi3filter's to report.
func (b *bodies) response(route *routers.Route, status int, header http.Header, body []byte) error {
	key, ref := responseOf(route.Operation, status)
	if ref == nil || ref.Value == nil {
		return nil
	}
	base := ref.Ref
	if base == "" {
		base = operationPtr(route) + "/responses/" + pointerToken(key)
	}
	return b.content("response body", base, ref.Value.Content, header.Get("Content-Type"), body)
}

// content checks body against the schema content lists for its media
// type; base is the JSON pointer of the object holding content.
func (b *bodies) content(what, base string, content openapi3.Content, mime string, body []byte) error {
	if len(content) == 0 {
		return nil
	}
	mt := content.Get(mime)
	if mt == nil {
		return fmt.Errorf("%s: content type %q is not one the document lists", what, mime)
	}
	if mt.Schema == nil {
		return nil
	}
	key := ""
	for k, v := range content {
		if v == mt {
			key = k
		}
	}
	s, err := b.schema(base + "/content/" + pointerToken(key) + "/schema")
	if err != nil {
		return err
	}
	v, err := decode(mime, body, mt)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := s.Validate(v); err != nil {
		return fmt.Errorf("%s doesn't match the schema: %w", what, err)
	}
	return nil
}

// decode reads a body as openapi3filter does, with the decoder it has
// registered for the media type (JSON for application/json and +json,
// a string for text/plain).
func decode(mime string, body []byte, mt *openapi3.MediaType) (any, error) {
	media, _, _ := strings.Cut(mime, ";")
	media = strings.ToLower(strings.TrimSpace(media))
	dec := openapi3filter.RegisteredBodyDecoder(media)
	if dec == nil && strings.HasSuffix(media, "+json") {
		dec = openapi3filter.RegisteredBodyDecoder("application/json")
	}
	if dec == nil {
		return nil, fmt.Errorf("no decoder for content type %q", media)
	}
	h := http.Header{"Content-Type": {mime}}
	v, err := dec(bytes.NewReader(body), h, mt.Schema, func(name string) *openapi3.Encoding { return mt.Encoding[name] })
	if err != nil {
		return nil, fmt.Errorf("failed to decode: %w", err)
	}
	return v, nil
}

// responseOf finds the response an operation gives a status as
// openapi3filter does (the status itself, else default) and its key.
func responseOf(op *openapi3.Operation, status int) (string, *openapi3.ResponseRef) {
	if op.Responses == nil {
		return "", nil
	}
	want := op.Responses.Status(status)
	if want == nil {
		return "default", op.Responses.Default()
	}
	for k, v := range op.Responses.Map() {
		if v == want {
			return k, v
		}
	}
	return strconv.Itoa(status), want
}

// operationPtr is the JSON pointer of the route's operation.
func operationPtr(route *routers.Route) string {
	return "#/paths/" + pointerToken(route.Path) + "/" + strings.ToLower(route.Method)
}

// pointerToken escapes one reference token of a JSON pointer (RFC 6901)
// for a URI fragment.
func pointerToken(s string) string { return url.PathEscape(tokenEscaper.Replace(s)) }

var tokenEscaper = strings.NewReplacer("~", "~0", "/", "~1")
