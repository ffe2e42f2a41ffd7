package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"

	"github.com/relmsg/ordersaga/internal/stack"
)

// procWatch samples the resident memory and CPU time of a few processes
// (the services, the database, the broker) once a second from /proc
// (through procfs), so a run reports each one's peak RSS and how many cores
// it used. Linux only; elsewhere it watches nothing.
type procWatch struct {
	fs    procfs.FS
	mu    sync.Mutex
	procs []*watched
	cpu0  cpuTimes // whole machine, at start
	cpu1  cpuTimes

	// For the share of the machine used by processes we do not watch
	// (other work on a shared host disturbs a run): the previous sample.
	lastCPU  cpuTimes
	lastSecs float64
	lastAt   time.Time
}

type watched struct {
	Name      string  `json:"name"`
	PID       int     `json:"pid"`
	MaxRSSMiB float64 `json:"max_rss_mib"` // largest VmRSS sampled during the run
	HWMMiB    float64 `json:"hwm_mib"`     // VmHWM at the end: the peak over the process's whole life
	CPUSec    float64 `json:"cpu_seconds"` // user+system time used during the run
	CPUCores  float64 `json:"cpu_cores"`   // CPUSec / wall time: 1.0 = one core busy
	Exited    bool    `json:"exited,omitempty"`

	cpu0  float64 // CPU seconds at the start of the run
	start time.Time
}

// newProcWatch resolves spec: "" (nothing), "auto" (the processes started
// by scripts/up.sh, found in .run/stack.json, plus mariadbd/mysqld and
// RabbitMQ's beam.smp), or "name=pid,...".
func newProcWatch(spec, runDir string) (*procWatch, error) {
	w := &procWatch{}
	if spec == "" || spec == "none" {
		return w, nil
	}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return w, nil // not Linux
	}
	w.fs = fs
	add := func(name string, pid int) {
		if pid <= 0 {
			return
		}
		for _, p := range w.procs {
			if p.PID == pid {
				return
			}
		}
		w.procs = append(w.procs, &watched{Name: name, PID: pid})
	}
	if spec == "auto" {
		// What scripts/up.sh runs, from .run/stack.json (a stack that is
		// not running leaves only the servers to watch).
		if f, err := stack.Read(runDir); err == nil {
			for _, p := range f.Processes {
				add(p.Name, p.PID)
			}
		}
		for _, comm := range []string{"mariadbd", "mysqld", "beam.smp"} {
			for _, pid := range w.byComm(comm) {
				add(comm, pid)
			}
		}
	} else {
		for _, part := range strings.Split(spec, ",") {
			name, p, ok := strings.Cut(strings.TrimSpace(part), "=")
			pid, err := strconv.Atoi(p)
			if !ok || err != nil {
				return nil, fmt.Errorf("-watch %q: want auto or name=pid,...", spec)
			}
			add(name, pid)
		}
	}
	add("loadgen", os.Getpid())
	return w, nil
}

func (w *procWatch) begin() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cpu0 = w.readCPUTimes()
	now := time.Now()
	for _, p := range w.procs {
		p.cpu0, _ = w.cpuSeconds(p.PID)
		p.start = now
	}
	w.sampleLocked()
	w.lastCPU, w.lastSecs, w.lastAt = w.cpu0, w.watchedSeconds(), now
}

// sample records memory and returns how many cores processes other than
// the watched ones used since the previous sample (-1 when unknown).
func (w *procWatch) sample() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sampleLocked()
	if len(w.procs) == 0 {
		return -1
	}
	c, secs, now := w.readCPUTimes(), w.watchedSeconds(), time.Now()
	other := -1.0
	if wall := now.Sub(w.lastAt).Seconds(); wall > 0 && c.total > w.lastCPU.total {
		busyCores := (c.busy - w.lastCPU.busy) / wall
		other = round2(math.Max(0, busyCores-(secs-w.lastSecs)/wall))
	}
	w.lastCPU, w.lastSecs, w.lastAt = c, secs, now
	return other
}

func (w *procWatch) watchedSeconds() float64 {
	var sum float64
	for _, p := range w.procs {
		if s, err := w.cpuSeconds(p.PID); err == nil {
			sum += s
		}
	}
	return sum
}

func (w *procWatch) sampleLocked() {
	for _, p := range w.procs {
		if p.Exited {
			continue
		}
		rss, hwm, err := w.procMem(p.PID)
		if err != nil {
			p.Exited = true
			continue
		}
		p.MaxRSSMiB = math.Max(p.MaxRSSMiB, rss)
		p.HWMMiB = hwm
	}
}

// end takes the final sample and returns the processes and the share of
// the machine's CPU that was busy during the run (0..1).
func (w *procWatch) end() ([]watched, float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sampleLocked()
	w.cpu1 = w.readCPUTimes()
	now := time.Now()
	out := make([]watched, 0, len(w.procs))
	for _, p := range w.procs {
		if s, err := w.cpuSeconds(p.PID); err == nil {
			p.CPUSec = round2(s - p.cpu0)
			if wall := now.Sub(p.start).Seconds(); wall > 0 {
				p.CPUCores = round2(p.CPUSec / wall)
			}
		}
		p.MaxRSSMiB = round2(p.MaxRSSMiB)
		p.HWMMiB = round2(p.HWMMiB)
		out = append(out, *p)
	}
	return out, w.cpu1.busySince(w.cpu0)
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }

// procMem reads VmRSS and VmHWM in MiB.
func (w *procWatch) procMem(pid int) (rss, hwm float64, err error) {
	p, err := w.fs.Proc(pid)
	if err != nil {
		return 0, 0, err
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, 0, err
	}
	return float64(st.VmRSS) / (1 << 20), float64(st.VmHWM) / (1 << 20), nil
}

// cpuSeconds is the user+system time a process has used.
func (w *procWatch) cpuSeconds(pid int) (float64, error) {
	p, err := w.fs.Proc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return st.CPUTime(), nil
}

func (w *procWatch) byComm(comm string) []int {
	procs, _ := w.fs.AllProcs()
	var out []int
	for _, p := range procs {
		if c, err := p.Comm(); err == nil && c == comm {
			out = append(out, p.PID)
		}
	}
	return out
}

// cpuTimes is the machine's CPU time, all CPUs together, in seconds: busy
// and in total.
type cpuTimes struct{ busy, total float64 }

func (w *procWatch) readCPUTimes() cpuTimes {
	st, err := w.fs.Stat()
	if err != nil {
		return cpuTimes{}
	}
	c := st.CPUTotal
	// guest and guest_nice are already counted in user and nice.
	idle := c.Idle + c.Iowait
	busy := c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal
	return cpuTimes{busy: busy, total: busy + idle}
}

func (c cpuTimes) busySince(c0 cpuTimes) float64 {
	if c.total <= c0.total {
		return 0
	}
	return round2((c.busy - c0.busy) / (c.total - c0.total))
}
