package viewer

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Finished lab runs are kept in Config.RunsDir, one file each
// (run-<id>.json: the run as GET /api/lab/runs/{id} answers it, every
// step and the report), so that an address the teacher shared still opens
// after the viewer restarts. Only the newest keepRuns are kept. A run that
// was still going when the viewer stopped is gone: its experiment stopped
// with it.

func runFile(dir string, id int) string { return filepath.Join(dir, fmt.Sprintf("run-%d.json", id)) }

// saveRun writes a finished run (write and rename, so a reader never sees
// half a file) and removes the files of runs the viewer no longer keeps. A
// failure is logged: the run is still in memory.
func (s *Server) saveRun(run *labRun) {
	dir := s.cfg.RunsDir
	if dir == "" {
		return
	}
	data, err := json.Marshal(run.view(0))
	if err == nil {
		err = os.MkdirAll(dir, 0o700)
	}
	if err == nil {
		tmp := runFile(dir, run.ID) + ".tmp"
		if err = os.WriteFile(tmp, data, 0o600); err == nil {
			err = os.Rename(tmp, runFile(dir, run.ID))
		}
	}
	if err != nil {
		s.cfg.Log.Warn("lab run not kept on disk", "run", run.ID, "dir", dir, "error", err)
		return
	}
	s.runsMu.Lock()
	kept := map[int]bool{}
	for _, r := range s.runs {
		kept[r.ID] = true
	}
	s.runsMu.Unlock()
	for _, id := range runIDs(dir) {
		if !kept[id] {
			_ = os.Remove(runFile(dir, id))
		}
	}
}

// loadRuns reads the runs kept in dir, oldest first, the newest keepRuns
// of them. A file that does not read as a finished run is skipped.
func loadRuns(dir string, log *slog.Logger) []*labRun {
	if dir == "" {
		return nil
	}
	var runs []*labRun
	for _, id := range runIDs(dir) {
		data, err := os.ReadFile(runFile(dir, id))
		var v runJSON
		if err == nil {
			err = json.Unmarshal(data, &v)
		}
		if err == nil && (v.Report == nil || v.ID != id) {
			err = fmt.Errorf("not a finished run %d", id)
		}
		if err != nil {
			log.Warn("lab run file skipped", "file", runFile(dir, id), "error", err)
			continue
		}
		v.Report.Took = time.Duration(v.Seconds * float64(time.Second))
		runs = append(runs, &labRun{ID: v.ID, Experiment: v.Experiment, WrongWay: v.WrongWay, Instance: v.Instance,
			Pair: v.Pair, startedAt: v.StartedAt, steps: v.Steps, report: v.Report, order: v.OrderID})
	}
	if len(runs) > keepRuns {
		runs = runs[len(runs)-keepRuns:]
	}
	return runs
}

// runIDs lists the ids of the run files in dir, in increasing order.
func runIDs(dir string) []int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil // none yet
	}
	var ids []int
	for _, e := range entries {
		name, ok := strings.CutSuffix(strings.TrimPrefix(e.Name(), "run-"), ".json")
		if id, err := strconv.Atoi(name); ok && err == nil && id > 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
