package viewer_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/testutil"
	"github.com/relmsg/ordersaga/internal/viewer"
)

// labRun is a run as GET /api/lab/runs/{id} answers it.
type labRun struct {
	ID         int    `json:"id"`
	Experiment string `json:"experiment"`
	WrongWay   string `json:"wrong_way"`
	State      string `json:"state"`
	Pair       int    `json:"pair"`
	Next       int    `json:"next"`
	Report     *struct {
		Checks []struct {
			What string `json:"what"`
		} `json:"checks"`
	} `json:"report"`
}

// A side-by-side pair runs the right way, then the wrong way, each under
// its own address; finished runs are kept on disk and still answer under
// their ids after the viewer restarts. No stack here: the experiments fail
// at once, which is all the bookkeeping needs.
func TestLabRunsKeepTheirAddresses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := func() string {
		return serve(t, viewer.New(viewer.Config{Target: fixedTarget{}, RunsDir: dir, Patience: time.Second, Timeout: time.Second}))
	}
	get := func(base string, id int) (labRun, int) {
		t.Helper()
		r := call(t, "GET", fmt.Sprintf("%s/api/lab/runs/%d", base, id), nil, "")
		var run labRun
		if r.status == http.StatusOK {
			if err := json.Unmarshal([]byte(r.body), &run); err != nil {
				t.Fatalf("run %d: %v: %s", id, err, r.body)
			}
		}
		return run, r.status
	}

	base := start()
	for _, body := range []string{
		`{"experiment":"send-recovery","side_by_side":true}`,
		`{"experiment":"atomic-commit","side_by_side":true,"wrong_way":true}`,
	} {
		if r := call(t, "POST", base+"/api/lab/runs", asJSON, body); r.status != http.StatusUnprocessableEntity {
			t.Errorf("POST %s = %d %s, want 422", body, r.status, r.body)
		}
	}
	r := call(t, "POST", base+"/api/lab/runs", asJSON, `{"experiment":"atomic-commit","side_by_side":true}`)
	var right labRun
	if r.status != http.StatusAccepted || json.Unmarshal([]byte(r.body), &right) != nil {
		t.Fatalf("start a pair: %d %s", r.status, r.body)
	}
	if right.WrongWay != "" || right.Pair != right.ID+1 {
		t.Fatalf("the pair's first run = %+v, want the right way naming run %d as its pair", right, right.ID+1)
	}
	var wrong labRun
	testutil.WaitFor(t, time.Minute, "the wrong way's run to finish", func() bool {
		wrong, _ = get(base, right.Pair)
		first, _ := get(base, right.ID)
		if wrong.State == "running" && first.State == "running" {
			t.Fatalf("both ways of the pair run at once")
		}
		return wrong.State == "passed" || wrong.State == "failed"
	})
	if wrong.WrongWay == "" || wrong.Pair != right.ID || wrong.Experiment != "atomic-commit" || wrong.Report == nil {
		t.Fatalf("the pair's second run = %+v, want atomic-commit's wrong way naming run %d, with its report", wrong, right.ID)
	}
	if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("run-%d.json", wrong.ID))); err != nil {
		t.Fatalf("the finished run is not kept: %v", err)
	}

	// Another viewer on the same directory, as after a restart.
	again := start()
	for _, want := range []labRun{right, wrong} {
		got, status := get(again, want.ID)
		if status != http.StatusOK || got.Experiment != want.Experiment || got.WrongWay != want.WrongWay ||
			got.Pair != want.Pair || (got.State != "passed" && got.State != "failed") || got.Report == nil || got.Next == 0 {
			t.Errorf("after a restart, run %d = %d %+v; want it as it ended", want.ID, status, got)
		}
	}
	r = call(t, "POST", again+"/api/lab/runs", asJSON, `{"experiment":"send-recovery"}`)
	var next labRun
	if r.status != http.StatusAccepted || json.Unmarshal([]byte(r.body), &next) != nil || next.ID != wrong.ID+1 {
		t.Errorf("the next run after a restart = %d %s, want id %d", r.status, r.body, wrong.ID+1)
	}
}
