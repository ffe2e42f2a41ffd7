package viewer

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/internal/lab"
	"github.com/relmsg/ordersaga/pkg/web"
)

// keepRuns is how many finished runs the viewer remembers.
const keepRuns = 20

// labRun is one experiment started from the page. Its steps arrive from
// the experiment's goroutine as they happen; the page polls for the new
// ones.
type labRun struct {
	ID         int
	Experiment string
	WrongWay   string
	Instance   string // where failpoints and switches go
	StartedAt  time.Time

	mu     sync.Mutex
	steps  []lab.Step
	report *lab.Report // set when the run is over
	order  string      // the order the experiment used last
}

func (r *labRun) add(st lab.Step) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps = append(r.steps, st)
	if st.Kind == lab.StepOrder {
		r.order = st.OrderID
	}
}

// runJSON is a run as the page sees it: the steps from After on, and the
// report once the run is over.
type runJSON struct {
	ID         int         `json:"id"`
	Experiment string      `json:"experiment"`
	WrongWay   string      `json:"wrong_way"`
	Instance   string      `json:"instance"` // where failpoints and switches go: all, or one INSTANCE_ID
	State      string      `json:"state"`    // running, passed, failed
	StartedAt  time.Time   `json:"started_at"`
	Seconds    float64     `json:"seconds"`
	OrderID    string      `json:"order_id,omitempty"` // the order to open in the timeline
	Steps      []lab.Step  `json:"steps"`
	Next       int         `json:"next"` // ask for ?after=next to get only newer steps
	Report     *lab.Report `json:"report,omitempty"`
	Passed     bool        `json:"passed"`
}

func (r *labRun) view(after int) runJSON {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := runJSON{ID: r.ID, Experiment: r.Experiment, WrongWay: r.WrongWay, Instance: r.Instance, State: "running",
		StartedAt: r.StartedAt, OrderID: r.order, Steps: []lab.Step{}, Next: len(r.steps)}
	if after < len(r.steps) {
		v.Steps = append(v.Steps, r.steps[after:]...)
	}
	v.Seconds = time.Since(r.StartedAt).Seconds()
	if r.report != nil {
		v.Report, v.Passed, v.Seconds = r.report, r.report.Passed(), r.report.Took.Seconds()
		v.State = "failed"
		if v.Passed {
			v.State = "passed"
		}
	}
	return v
}

func (r *labRun) running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.report == nil
}

// experimentJSON is one experiment of the lab's list.
type experimentJSON struct {
	Name     string `json:"name"`
	Title    string `json:"title"`
	Window   string `json:"window"`
	Holds    string `json:"holds"`
	WrongWay string `json:"wrong_way,omitempty"` // its wrong-way switch, if it has one
}

func (s *Server) experiments(w http.ResponseWriter, r *http.Request) {
	out := []experimentJSON{}
	for _, sc := range lab.Scenarios {
		out = append(out, experimentJSON{Name: sc.Name, Title: sc.Title, Window: sc.Window, Holds: sc.Holds,
			WrongWay: string(sc.WrongWay)})
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"experiments": out})
}

type startRequest struct {
	Experiment string `json:"experiment"`
	WrongWay   bool   `json:"wrong_way"`
	// Instance narrows failpoints and switches to one instance on a stack
	// of several ("order-2"); "" or "all": every instance (lab.Lab.Instance).
	Instance string `json:"instance"`
}

// startRun starts one experiment in the background: 202 with the run. One
// at a time: experiments arm failpoints and switches on the shared stack.
func (s *Server) startRun(w http.ResponseWriter, r *http.Request) {
	var req startRequest
	if err := web.DecodeJSON(w, r, 4<<10, &req); err != nil {
		web.WriteError(w, r, nil, err)
		return
	}
	sc, ok := lab.Find(req.Experiment)
	if !ok {
		web.WriteError(w, r, nil, web.Errorf(http.StatusUnprocessableEntity, "no experiment %q", req.Experiment))
		return
	}
	if req.WrongWay && sc.WrongWay == "" {
		web.WriteError(w, r, nil, web.Errorf(http.StatusUnprocessableEntity, "%s has no wrong-way switch", sc.Name))
		return
	}
	if req.Instance == "" {
		req.Instance = lab.AllInstances
	}
	if err := lab.CheckInstance(s.cfg.Target, req.Instance); err != nil {
		web.WriteError(w, r, nil, web.Errorf(http.StatusUnprocessableEntity, "%v", err))
		return
	}
	s.runsMu.Lock()
	for _, old := range s.runs {
		if old.running() {
			s.runsMu.Unlock()
			web.WriteError(w, r, nil, web.Errorf(http.StatusConflict,
				"experiment %s (run %d) is still running; one at a time, they share the stack", old.Experiment, old.ID))
			return
		}
	}
	if s.runCtx.Err() != nil {
		s.runsMu.Unlock()
		web.WriteError(w, r, nil, web.Errorf(http.StatusServiceUnavailable, "the viewer is shutting down"))
		return
	}
	s.nextRunID++
	run := &labRun{ID: s.nextRunID, Experiment: sc.Name, Instance: req.Instance, StartedAt: time.Now()}
	if req.WrongWay {
		run.WrongWay = string(sc.WrongWay)
	}
	s.runs = append(s.runs, run)
	if len(s.runs) > keepRuns {
		s.runs = s.runs[len(s.runs)-keepRuns:]
	}
	s.runsDone.Add(1)
	s.runsMu.Unlock()

	l := lab.New(s.cfg.Target, s.cfg.AdminToken, nil)
	if s.cfg.Patience > 0 {
		l.Patience = s.cfg.Patience
	}
	l.Steps = run.add
	l.Instance = req.Instance
	go func() {
		defer s.runsDone.Done()
		rep := l.Run(s.runCtx, sc, req.WrongWay)
		s.cfg.Log.Info("lab run finished", "run", run.ID, "experiment", sc.Name, "wrong_way", run.WrongWay,
			"passed", rep.Passed(), "took", rep.Took)
		run.mu.Lock()
		run.report = rep
		run.mu.Unlock()
	}()
	web.WriteJSON(w, http.StatusAccepted, run.view(0))
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) {
	s.runsMu.Lock()
	runs := append([]*labRun(nil), s.runs...)
	s.runsMu.Unlock()
	out := []runJSON{}
	for i := len(runs) - 1; i >= 0; i-- {
		v := runs[i].view(0)
		v.Steps, v.Report = []lab.Step{}, nil // the list is a summary
		out = append(out, v)
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"runs": out})
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.Atoi(chi.URLParam(r, "run"))
	var run *labRun
	if err == nil {
		s.runsMu.Lock()
		for _, x := range s.runs {
			if x.ID == id {
				run = x
			}
		}
		s.runsMu.Unlock()
	}
	if run == nil {
		web.WriteError(w, r, nil, web.Errorf(http.StatusNotFound, "no lab run %q", chi.URLParam(r, "run")))
		return
	}
	after := 0
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			web.WriteError(w, r, nil, web.Errorf(http.StatusBadRequest, "after must be a step number (0 or more)"))
			return
		}
		after = n
	}
	web.WriteJSON(w, http.StatusOK, run.view(after))
}
