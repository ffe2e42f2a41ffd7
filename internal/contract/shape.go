package contract

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/relmsg/ordersaga/docs"
)

// ShapeMismatches compares a Go type with a schema of one of the
// documents, field by field: every JSON field of the type is a property
// of the schema with a matching type; a field always written
// (no omitempty) is required by a closed schema and nullable only as a
// pointer; an omitempty field is not required; every property of a closed
// schema is a field. doc is "openapi" or "asyncapi", schema a name under
// components/schemas. It returns what differs, as sentences.
func ShapeMismatches(doc, schema string, t reflect.Type) ([]string, error) {
	src := docs.OpenAPI
	if doc == "asyncapi" {
		src = docs.AsyncAPI
	}
	root, err := raw(src)
	if err != nil {
		return nil, err
	}
	s, ok := dig(root, "components", "schemas", schema).(map[string]any)
	if !ok {
		return nil, fmt.Errorf("docs/%s.yaml has no schema %s", doc, schema)
	}
	sh := &shaper{root: root}
	sh.object(schema, t, s)
	return sh.diffs, nil
}

type shaper struct {
	root  map[string]any
	diffs []string
}

func (sh *shaper) add(format string, args ...any) {
	sh.diffs = append(sh.diffs, fmt.Sprintf(format, args...))
}

// resolve follows a local $ref.
func (sh *shaper) resolve(s map[string]any) map[string]any {
	for range 10 {
		ref, ok := s["$ref"].(string)
		if !ok {
			return s
		}
		next, _ := dig(sh.root, strings.Split(strings.TrimPrefix(ref, "#/"), "/")...).(map[string]any)
		if next == nil {
			sh.add("unresolved reference %s", ref)
			return map[string]any{}
		}
		s = next
	}
	return s
}

// flatten merges an object schema with its allOf members: properties,
// required, and whether it is closed.
func (sh *shaper) flatten(s map[string]any) (props map[string]map[string]any, required []string, closed bool) {
	props = map[string]map[string]any{}
	var walk func(map[string]any)
	walk = func(s map[string]any) {
		s = sh.resolve(s)
		if p, ok := s["properties"].(map[string]any); ok {
			for k, v := range p {
				props[k], _ = v.(map[string]any)
			}
		}
		for _, r := range asSlice(s["required"]) {
			required = append(required, fmt.Sprint(r))
		}
		if s["additionalProperties"] == false || s["unevaluatedProperties"] == false {
			closed = true
		}
		for _, m := range asSlice(s["allOf"]) {
			if mm, ok := m.(map[string]any); ok {
				walk(mm)
			}
		}
	}
	walk(s)
	return props, required, closed
}

type field struct {
	name      string
	typ       reflect.Type
	omitempty bool
	asString  bool // the ",string" option
}

// fields lists a struct's JSON fields, embedded structs flattened as
// encoding/json does.
func fields(t reflect.Type) []field {
	var out []field
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, fields(f.Type)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, field{name: name, typ: f.Type, omitempty: strings.Contains(","+opts+",", ",omitempty,"),
			asString: strings.Contains(","+opts+",", ",string,")})
	}
	return out
}

var timeType = reflect.TypeOf(time.Time{})

func (sh *shaper) object(at string, t reflect.Type, s map[string]any) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		sh.add("%s: %s is not a struct", at, t)
		return
	}
	props, required, closed := sh.flatten(s)
	seen := map[string]bool{}
	for _, f := range fields(t) {
		seen[f.name] = true
		p, ok := props[f.name]
		where := at + "." + f.name
		if !ok {
			sh.add("%s: field of %s, not a property of the schema", where, t.Name())
			continue
		}
		req := slices.Contains(required, f.name)
		switch {
		case f.omitempty && req:
			sh.add("%s: omitempty in Go (may be absent), required by the schema", where)
		case !f.omitempty && !req && closed:
			sh.add("%s: always written by Go, not required by the schema", where)
		}
		sh.value(where, f.typ, p, f.omitempty, f.asString)
	}
	if closed {
		for name := range props {
			if !seen[name] {
				sh.add("%s.%s: property of the schema, no field of %s", at, name, t.Name())
			}
		}
	}
}

// types returns the JSON types a schema allows ("" for any) and whether it
// allows null.
func (sh *shaper) types(s map[string]any) (types []string, nullable bool) {
	s = sh.resolve(s)
	switch v := s["type"].(type) {
	case string:
		types = []string{v}
	case []any:
		for _, x := range v {
			types = append(types, fmt.Sprint(x))
		}
	}
	if c, ok := s["const"]; ok && len(types) == 0 {
		switch c.(type) {
		case string:
			types = []string{"string"}
		case bool:
			types = []string{"boolean"}
		case float64:
			types = []string{"integer", "number"}
		}
	}
	for _, alt := range asSlice(s["oneOf"]) {
		if m, ok := alt.(map[string]any); ok {
			ts, n := sh.types(m)
			types = append(types, ts...)
			nullable = nullable || n
		}
	}
	if i := slices.Index(types, "null"); i >= 0 {
		nullable = true
		types = slices.Delete(types, i, i+1)
	}
	return types, nullable
}

// nonNull returns the alternative of a nullable oneOf that is not null.
func (sh *shaper) nonNull(s map[string]any) map[string]any {
	s = sh.resolve(s)
	for _, alt := range asSlice(s["oneOf"]) {
		m, _ := alt.(map[string]any)
		if m["type"] != "null" {
			return sh.resolve(m)
		}
	}
	return s
}

func (sh *shaper) value(at string, t reflect.Type, s map[string]any, omitempty, asString bool) {
	types, nullable := sh.types(s)
	if t.Kind() == reflect.Pointer {
		if !omitempty && !nullable {
			sh.add("%s: a pointer in Go (null when nil), the schema does not allow null", at)
		}
		t = t.Elem()
	} else if nullable && t.Kind() != reflect.Slice && t.Kind() != reflect.Map && t.Kind() != reflect.Interface {
		sh.add("%s: the schema allows null, Go never writes it", at)
	}
	if t == reflect.TypeOf(json.RawMessage{}) || t.Kind() == reflect.Interface {
		return
	}
	want := ""
	switch {
	case t == timeType, asString, t.Kind() == reflect.String:
		want = "string"
	case t.Kind() == reflect.Bool:
		want = "boolean"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		want = "integer"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		want = "number"
	case t.Kind() == reflect.Slice:
		want = "array"
	case t.Kind() == reflect.Struct, t.Kind() == reflect.Map:
		want = "object"
	}
	if len(types) > 0 && !slices.Contains(types, want) && !(want == "integer" && slices.Contains(types, "number")) {
		sh.add("%s: %s in Go (%s), %v in the schema", at, want, t, types)
		return
	}
	if t == timeType {
		if f, _ := sh.resolve(s)["format"].(string); f != "date-time" {
			sh.add("%s: a time in Go, the schema's format is %q, not date-time", at, f)
		}
		return
	}
	switch t.Kind() {
	case reflect.Slice:
		if items, ok := sh.resolve(s)["items"].(map[string]any); ok {
			if t.Elem().Kind() == reflect.Struct && t.Elem() != timeType {
				sh.object(at+"[]", t.Elem(), items)
			} else {
				sh.value(at+"[]", t.Elem(), items, false, false)
			}
		}
	case reflect.Struct:
		sh.object(at, t, sh.nonNull(s))
	}
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}
