package process

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The journal keeps what names an event, an order or a claim, at every
// level, while the log itself keeps its own level; a query by one id
// finds its records only.
func TestJournalKeepsTheRecordsOfAnID(t *testing.T) {
	var out bytes.Buffer
	j := NewJournal(0)
	log := slog.New(j.Handler(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))).With("service", "inventory")
	c := log.With("consumer", "inventory", "event_id", "e-1")
	c.Debug("event processed")
	c.Info("duplicate delivery suppressed by the inbox")
	log.With("event_id", "e-2").Info("duplicate delivery suppressed by the inbox")
	log.Warn("claim lost before mark-sent: another dispatcher owns these events now", "claim_token", "tok-A")
	log.Info("listening", "addr", ":8082") // names nothing: not kept

	got := j.Find("e-1")
	if len(got) != 2 || got[0].Msg != "event processed" || got[0].Level != "DEBUG" || got[1].Attrs["consumer"] != "inventory" {
		t.Fatalf("Find(e-1) = %+v, want the debug and the info record of e-1", got)
	}
	if got := j.Find("tok-A"); len(got) != 1 || got[0].Attrs["service"] != "inventory" {
		t.Errorf("Find(tok-A) = %+v, want the claim-lost record with the logger's attributes", got)
	}
	if strings.Contains(out.String(), "event processed") {
		t.Errorf("the log got a debug record at level info:\n%s", out.String())
	}
	if n := strings.Count(out.String(), "\n"); n != 4 {
		t.Errorf("the log has %d lines, want the 4 at info or above", n)
	}
}

// The journal is a ring: the oldest records go first.
func TestJournalKeepsTheLatestRecords(t *testing.T) {
	j := NewJournal(3)
	log := slog.New(j.Handler(slog.DiscardHandler))
	for i := range 5 {
		log.Info("event processed", "event_id", fmt.Sprint("e-", i))
	}
	var ids []string
	for i := range 5 {
		for _, r := range j.Find(fmt.Sprint("e-", i)) {
			ids = append(ids, r.Attrs["event_id"])
		}
	}
	if strings.Join(ids, ",") != "e-2,e-3,e-4" {
		t.Errorf("kept %v, want the last three", ids)
	}
}

func TestJournalEndpoint(t *testing.T) {
	j := NewJournal(0)
	log := slog.New(j.Handler(slog.DiscardHandler))
	log.WithGroup("g").Info("grouped", "event_id", "e-9") // a group's event_id is not the record's
	log.Info("event processed", "event_id", "e-1", "order_id", 7)
	log.Info("event processed", "event_id", "e-2", "order_id", 8)
	srv := httptest.NewServer(j)
	defer srv.Close()
	for _, tc := range []struct {
		query string
		code  int
		n     int
	}{
		{"?id=e-1", http.StatusOK, 1},
		{"?id=e-1,8", http.StatusOK, 2},
		{"?id=e-9", http.StatusOK, 0},
		{"", http.StatusBadRequest, 0},
	} {
		resp, err := http.Get(srv.URL + tc.query)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Records []JournalRecord `json:"records"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || len(body.Records) != tc.n {
			t.Errorf("GET %q: %d with %d record(s), want %d with %d", tc.query, resp.StatusCode, len(body.Records), tc.code, tc.n)
		}
	}
}
