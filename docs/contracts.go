// Package docs carries the machine-readable contracts that sit next to the
// prose (contract.md): openapi.yaml, the HTTP APIs, and asyncapi.yaml, the
// messages. They are embedded so that tests and tools can hold the
// running system to them (internal/contract) without knowing where the
// repository lies on disk.
package docs

import _ "embed"

// OpenAPI is docs/openapi.yaml (OpenAPI 3.1).
//
//go:embed openapi.yaml
var OpenAPI []byte

// AsyncAPI is docs/asyncapi.yaml (AsyncAPI 3.0, AMQP 0-9-1 bindings).
//
//go:embed asyncapi.yaml
var AsyncAPI []byte
