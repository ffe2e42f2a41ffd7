package web

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxDepth is how deeply a request body may nest objects and arrays. The
// deepest body any endpoint takes (an order: object, items, item) is 3.
const MaxDepth = 16

// DecodeJSON reads a JSON request body into v, strictly, for every endpoint
// (docs/contract.md, "Conventions"): the content type must be JSON (415),
// the body at most maxBytes (413), valid UTF-8 without control characters
// in its strings, one object and nothing after it, no key twice, no two
// keys that differ only in case, no key that matches a field only by case
// (encoding/json would take it), no unknown field, no value of the wrong
// type (400, each with its problem type). Nothing is decoded into v unless
// the whole body passes.
func DecodeJSON(w http.ResponseWriter, r *http.Request, maxBytes int64, v any) error {
	if err := requireJSON(r); err != nil {
		return err
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBytes))
	if err != nil {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return Errorf(http.StatusRequestEntityTooLarge, "body larger than %d bytes", maxErr.Limit)
		}
		return Problemf(http.StatusBadRequest, TypeMalformedJSON, "reading the body: %v", err)
	}
	return DecodeStrict(data, v)
}

// requireJSON refuses a body that does not say it is JSON.
func requireJSON(r *http.Request) error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return Errorf(http.StatusUnsupportedMediaType, "Content-Type must be application/json")
	}
	return nil
}

// DecodeStrict is DecodeJSON's checks on a body already read.
func DecodeStrict(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return Problemf(http.StatusBadRequest, TypeMalformedJSON, "empty body")
	}
	if !utf8.Valid(data) {
		return Problemf(http.StatusBadRequest, TypeInvalidText, "body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	c := checker{dec: dec}
	if err := c.top(reflect.TypeOf(v)); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Problemf(http.StatusBadRequest, TypeMalformedJSON, "body must hold a single JSON object: trailing data after it")
	}
	dec = json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	return nil
}

// checker walks a body's tokens once before it is decoded: what
// encoding/json accepts silently (a key twice: the last wins; a key in
// another case: it matches) is refused here.
type checker struct {
	dec   *json.Decoder
	depth int
}

// top checks that the body is one object and walks it.
func (c *checker) top(t reflect.Type) error {
	tok, err := c.dec.Token()
	if err != nil {
		return syntaxProblem(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return Problemf(http.StatusBadRequest, TypeMalformedJSON, "body must be a JSON object")
	}
	return c.object(elem(t), "")
}

// value walks one value whose first token is tok, decoded into a t.
func (c *checker) value(tok json.Token, t reflect.Type, at string) error {
	switch x := tok.(type) {
	case json.Delim:
		if x == '{' {
			return c.object(elem(t), at)
		}
		return c.array(elem(t), at)
	case string:
		return checkText(x, at)
	}
	return nil
}

// enter counts one more level of nesting: deeper than MaxDepth is a 400.
func (c *checker) enter() error {
	if c.depth++; c.depth > MaxDepth {
		return Problemf(http.StatusBadRequest, TypeMalformedJSON, "body nested deeper than %d levels", MaxDepth)
	}
	return nil
}

// member reads the next token of the object or array being checked; at its
// closing delimiter end it leaves the level and reports done.
func (c *checker) member(end json.Delim) (tok json.Token, done bool, err error) {
	tok, err = c.dec.Token()
	if err != nil {
		return nil, false, syntaxProblem(err)
	}
	if d, ok := tok.(json.Delim); ok && d == end {
		c.depth--
		return nil, true, nil
	}
	return tok, false, nil
}

func (c *checker) object(t reflect.Type, at string) error {
	if err := c.enter(); err != nil {
		return err
	}
	fields := fieldsOf(t)
	seen := map[string]string{} // lower case -> the key as sent
	for {
		tok, done, err := c.member('}')
		if err != nil || done {
			return err
		}
		key := tok.(string) // the decoder guarantees a string key here
		where := join(at, key)
		if err := checkText(key, where); err != nil {
			return err
		}
		if prev, dup := seen[strings.ToLower(key)]; dup {
			if prev == key {
				return Problemf(http.StatusBadRequest, TypeAmbiguousJSON, "key %q appears twice", where)
			}
			return Problemf(http.StatusBadRequest, TypeAmbiguousJSON, "keys %q and %q differ only in case", join(at, prev), where)
		}
		seen[strings.ToLower(key)] = key
		ft, err := fields.lookup(key, where)
		if err != nil {
			return err
		}
		if fields == nil && t != nil && t.Kind() == reflect.Map {
			ft = t.Elem()
		}
		next, err := c.dec.Token()
		if err != nil {
			return syntaxProblem(err)
		}
		if err := c.value(next, ft, where); err != nil {
			return err
		}
	}
}

func (c *checker) array(t reflect.Type, at string) error {
	if err := c.enter(); err != nil {
		return err
	}
	var et reflect.Type
	if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		et = t.Elem()
	}
	for i := 0; ; i++ {
		tok, done, err := c.member(']')
		if err != nil || done {
			return err
		}
		if err := c.value(tok, et, fmt.Sprintf("%s[%d]", at, i)); err != nil {
			return err
		}
	}
}

// fieldSet is what keys an object may have: a struct's JSON names (exact),
// or anything (a map, an interface, a type that decodes itself: nil).
type fieldSet map[string]reflect.Type

func (f fieldSet) lookup(key, where string) (reflect.Type, error) {
	if f == nil {
		return nil, nil
	}
	if t, ok := f[key]; ok {
		return t, nil
	}
	for name := range f {
		if strings.EqualFold(name, key) {
			return nil, Problemf(http.StatusBadRequest, TypeUnknownField, "unknown field %q (keys are case-sensitive: %q)", where, name)
		}
	}
	return nil, Problemf(http.StatusBadRequest, TypeUnknownField, "unknown field %q", where)
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// fieldsOf lists the JSON names of a struct's fields, embedded structs'
// included, as encoding/json decodes them; nil for anything that takes any
// key.
func fieldsOf(t reflect.Type) fieldSet {
	if t == nil || t.Kind() != reflect.Struct || decodesItself(t) {
		return nil
	}
	out := fieldSet{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if f.Anonymous && name == "" {
			if et := elem(f.Type); et != nil && et.Kind() == reflect.Struct {
				for k, v := range fieldsOf(et) {
					out[k] = v
				}
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// elem is t without its pointers.
func elem(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

func decodesItself(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t.Implements(unmarshalerType) || p.Implements(unmarshalerType) ||
		t.Implements(textUnmarshalerType) || p.Implements(textUnmarshalerType)
}

// checkText refuses control characters (C0, DEL, C1) and the replacement
// character, which is what encoding/json makes of an unpaired surrogate
// escape ("\ud800"): text that cannot be what the client meant.
func checkText(s, where string) error {
	for _, r := range s {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return Problemf(http.StatusBadRequest, TypeInvalidText, "%q holds a control character or an invalid escape (U+%04X)", where, r)
		}
	}
	return nil
}

func join(at, key string) string {
	if at == "" {
		return key
	}
	return at + "." + key
}

func syntaxProblem(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return Problemf(http.StatusBadRequest, TypeMalformedJSON, "malformed JSON: the body ends too early")
	}
	return Problemf(http.StatusBadRequest, TypeMalformedJSON, "malformed JSON: %v", err)
}

// decodeError is what is left once the tokens passed: a value that does
// not fit its field.
func decodeError(err error) error {
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typeErr):
		return Problemf(http.StatusBadRequest, TypeWrongType, "field %q has the wrong type: want %s, got JSON %s", typeErr.Field, typeErr.Type, typeErr.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return Problemf(http.StatusBadRequest, TypeUnknownField, "unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return Problemf(http.StatusBadRequest, TypeMalformedJSON, "invalid JSON: %v", err)
}
