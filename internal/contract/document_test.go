package contract

import (
	"bytes"
	_ "embed"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/relmsg/ordersaga/docs"
)

// asyncAPISchema is the AsyncAPI 3.0.0 document format (testdata/README.md).
//
//go:embed testdata/asyncapi-3.0.0.schema.json
var asyncAPISchema []byte

// TestOpenAPIDocumentIsValid loads docs/openapi.yaml with kin-openapi
// (references into asyncapi.yaml resolved) and validates it as an OpenAPI
// 3.1 document.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	doc, _, err := OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi.yaml declares %q, want 3.1", doc.OpenAPI)
	}
}

// TestAsyncAPIDocumentIsValid validates docs/asyncapi.yaml against the
// AsyncAPI 3.0.0 JSON Schema, AMQP bindings included.
func TestAsyncAPIDocumentIsValid(t *testing.T) {
	meta, err := jsonschema.UnmarshalJSON(bytes.NewReader(asyncAPISchema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	const url = "http://asyncapi.com/definitions/3.0.0/asyncapi.json"
	if err := c.AddResource(url, meta); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yamlToJSON(docs.AsyncAPI)
	if err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(v); err != nil {
		t.Fatalf("docs/asyncapi.yaml is not a valid AsyncAPI 3.0.0 document:\n%v", err)
	}
}
