package web

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

func TestParseID(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"1", 1, true}, {"18446744073709551615", 18446744073709551615, true},
		{"0", 0, false}, {"", 0, false}, {"-1", 0, false}, {"1x", 0, false}, {"18446744073709551616", 0, false},
	} {
		got, ok := ParseID(c.in)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("ParseID(%q) = %d, %v, want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestLimit(t *testing.T) {
	for _, c := range []struct {
		query string
		want  int
		err   string
	}{
		{"", 50, ""}, {"limit=1", 1, ""}, {"limit=500", 500, ""},
		{"limit=0", 0, "limit must be between 1 and 500"},
		{"limit=501", 0, "limit must be between 1 and 500"},
		{"limit=x", 0, "limit must be between 1 and 500"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/x?"+c.query, nil)
		got, err := Limit(r, 50, 500)
		if c.err == "" {
			if err != nil || got != c.want {
				t.Errorf("Limit(%q) = %d, %v, want %d", c.query, got, err, c.want)
			}
			continue
		}
		var we *Error
		if !errors.As(err, &we) || we.Status != http.StatusBadRequest || we.Message != c.err {
			t.Errorf("Limit(%q) error = %v, want 400 %q", c.query, err, c.err)
		}
	}
}

func TestQueryList(t *testing.T) {
	for query, want := range map[string][]string{
		"":                   nil,
		"id=":                nil,
		"id=a":               {"a"},
		"id=a,%20b%20,,c":    {"a", "b", "c"},
		"other=a&id=%20,%20": nil,
	} {
		got := QueryList(httptest.NewRequest(http.MethodGet, "/x?"+query, nil), "id")
		if !slices.Equal(got, want) {
			t.Errorf("QueryList(?%s) = %q, want %q", query, got, want)
		}
	}
}
