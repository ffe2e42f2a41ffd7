// Package contract holds the running system to its machine-readable
// contracts: docs/openapi.yaml (the HTTP APIs, OpenAPI 3.1) and
// docs/asyncapi.yaml (the messages, AsyncAPI 3.0 with the AMQP 0-9-1
// bindings). docs/contract.md is the prose; these documents say the same
// in a form a program can check.
//
// Which validator, and why (docs/design.md, "Machine-readable contracts"):
//
//   - OpenAPI: github.com/getkin/kin-openapi. Its loader resolves the
//     document (references to asyncapi.yaml's payloads included) and
//     Validate checks it against OpenAPI 3.1; openapi3filter validates a
//     request and its response against the operation the router finds,
//     with JSON Schema 2020-12 semantics for a 3.1 document. It runs in
//     `go test`, with no process of its own.
//   - AsyncAPI: github.com/santhosh-tekuri/jsonschema/v6, the validator
//     kin-openapi itself uses. The AsyncAPI 3.0.0 JSON Schema (every
//     binding bundled) is vendored in testdata and validates the document;
//     the payload and header schemas of each message are compiled from the
//     document itself (draft-07, the AsyncAPI schema format's base) and
//     validate every message the services publish. No Go library reads
//     AsyncAPI 3 documents; the npm tools would need Node in the suite.
//
// Checker (http.go) is the HTTP side, a middleware the end-to-end stacks
// (internal/sagatest) put around every service; Messages (messages.go) is
// the message side, fed by a queue bound to saga.events with "#"; shape.go
// compares Go types (pkg/base/wire, pkg/base/events) with the schemas field by
// field.
package contract

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"go.yaml.in/yaml/v3"

	"github.com/relmsg/ordersaga/docs"
)

// Document names, as references between them spell them.
const (
	openAPIName  = "openapi.yaml"
	asyncAPIName = "asyncapi.yaml"
)

var (
	openAPIOnce sync.Once
	openAPIDoc  *openapi3.T
	openAPIRt   routers.Router
	openAPIErr  error
)

// OpenAPI returns docs/openapi.yaml, loaded (its references to
// asyncapi.yaml resolved) and validated, and a router over its paths that
// ignores the servers (a test stack listens on ports of its own).
func OpenAPI() (*openapi3.T, routers.Router, error) {
	openAPIOnce.Do(func() { openAPIDoc, openAPIRt, openAPIErr = loadOpenAPI() })
	return openAPIDoc, openAPIRt, openAPIErr
}

func loadOpenAPI() (*openapi3.T, routers.Router, error) {
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = true
	loader.ReadFromURIFunc = func(_ *openapi3.Loader, u *url.URL) ([]byte, error) {
		switch strings.TrimPrefix(u.Path, "./") {
		case openAPIName:
			return docs.OpenAPI, nil
		case asyncAPIName:
			return docs.AsyncAPI, nil
		}
		return nil, fmt.Errorf("no document %q next to openapi.yaml", u.Path)
	}
	doc, err := loader.LoadFromDataWithPath(docs.OpenAPI, &url.URL{Path: openAPIName})
	if err != nil {
		return nil, nil, fmt.Errorf("load docs/openapi.yaml: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, nil, fmt.Errorf("docs/openapi.yaml is not a valid OpenAPI document: %w", err)
	}
	// Route by path only: the servers name the local ports, a test stack's
	// differ. The document itself keeps them.
	routed := *doc
	routed.Servers = nil
	rt, err := legacy.NewRouter(&routed)
	if err != nil {
		return nil, nil, fmt.Errorf("route docs/openapi.yaml: %w", err)
	}
	return doc, rt, nil
}

// yamlToJSON turns a YAML document into the JSON a schema validator
// reads.
func yamlToJSON(b []byte) ([]byte, error) {
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// raw returns a document as plain JSON values (maps, slices, strings,
// float64, bool), for walking it.
func raw(b []byte) (map[string]any, error) {
	j, err := yamlToJSON(b)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(j))
	return m, d.Decode(&m)
}
