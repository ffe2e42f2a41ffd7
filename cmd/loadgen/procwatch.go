package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// procWatch samples the resident memory and CPU time of a few processes
// (the services, the database, the broker) once a second from /proc, so a
// run reports each one's peak RSS and how many cores it used. Linux only;
// elsewhere it watches nothing.
type procWatch struct {
	mu    sync.Mutex
	procs []*watched
	cpu0  cpuTimes // whole machine, at start
	cpu1  cpuTimes

	// For the share of the machine used by processes we do not watch
	// (other work on a shared host disturbs a run): the previous sample.
	lastCPU   cpuTimes
	lastTicks int64
	lastAt    time.Time
}

type watched struct {
	Name      string  `json:"name"`
	PID       int     `json:"pid"`
	MaxRSSMiB float64 `json:"max_rss_mib"` // largest VmRSS sampled during the run
	HWMMiB    float64 `json:"hwm_mib"`     // VmHWM at the end: the peak over the process's whole life
	CPUSec    float64 `json:"cpu_seconds"` // user+system time used during the run
	CPUCores  float64 `json:"cpu_cores"`   // CPUSec / wall time: 1.0 = one core busy
	Exited    bool    `json:"exited,omitempty"`

	ticks0 int64
	start  time.Time
}

// clkTck is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every
// Linux a Go program is likely to meet (sysconf is not reachable without cgo).
const clkTck = 100

// newProcWatch resolves spec: "" (nothing), "auto" (the services started by
// scripts/up.sh, found from .run/<service>.pid, plus mariadbd/mysqld and
// RabbitMQ's beam.smp), or "name=pid,...".
func newProcWatch(spec, runDir string) (*procWatch, error) {
	w := &procWatch{}
	if spec == "" || spec == "none" {
		return w, nil
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return w, nil // not Linux
	}
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
		for _, svc := range []string{"order", "inventory", "payment-fake"} {
			b, err := os.ReadFile(filepath.Join(runDir, svc+".pid"))
			if err != nil {
				continue
			}
			sup, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				continue
			}
			// up.sh records the supervisor; the service is its child.
			pid := sup
			if kids := children(sup); len(kids) > 0 {
				pid = kids[0]
			}
			add(svc, pid)
		}
		for _, comm := range []string{"mariadbd", "mysqld", "beam.smp"} {
			for _, pid := range byComm(comm) {
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
	w.cpu0 = readCPUTimes()
	now := time.Now()
	for _, p := range w.procs {
		p.ticks0, _ = procTicks(p.PID)
		p.start = now
	}
	w.sampleLocked()
	w.lastCPU, w.lastTicks, w.lastAt = w.cpu0, w.watchedTicks(), now
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
	c, t, now := readCPUTimes(), w.watchedTicks(), time.Now()
	other := -1.0
	if wall := now.Sub(w.lastAt).Seconds(); wall > 0 && c.total > w.lastCPU.total {
		busyCores := float64(c.busy-w.lastCPU.busy) / clkTck / wall
		other = round2(math.Max(0, busyCores-float64(t-w.lastTicks)/clkTck/wall))
	}
	w.lastCPU, w.lastTicks, w.lastAt = c, t, now
	return other
}

func (w *procWatch) watchedTicks() int64 {
	var sum int64
	for _, p := range w.procs {
		if t, err := procTicks(p.PID); err == nil {
			sum += t
		}
	}
	return sum
}

func (w *procWatch) sampleLocked() {
	for _, p := range w.procs {
		if p.Exited {
			continue
		}
		rss, hwm, err := procMem(p.PID)
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
	w.cpu1 = readCPUTimes()
	now := time.Now()
	out := make([]watched, 0, len(w.procs))
	for _, p := range w.procs {
		if t, err := procTicks(p.PID); err == nil {
			p.CPUSec = float64(t-p.ticks0) / clkTck
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
func procMem(pid int) (rss, hwm float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			hwm = kb / 1024
		}
	}
	return rss, hwm, nil
}

// procTicks returns utime+stime of a process in clock ticks.
func procTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces: fields count from after its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// After ")": state is field 3 of the man page; utime 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s, nil
}

func children(pid int) []int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

func byComm(comm string) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*/comm")
	var out []int
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil || strings.TrimSpace(string(b)) != comm {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(d))); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// cpuTimes is the first line of /proc/stat: busy and total ticks of all CPUs.
type cpuTimes struct{ busy, total int64 }

func readCPUTimes() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	l, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(l)
	if len(f) < 5 || f[0] != "cpu" {
		return cpuTimes{}
	}
	var c cpuTimes
	for i, s := range f[1:] {
		if i >= 8 { // guest, guest_nice: already counted in user and nice
			break
		}
		n, _ := strconv.ParseInt(s, 10, 64)
		c.total += n
		if i != 3 && i != 4 { // idle, iowait
			c.busy += n
		}
	}
	return c
}

func (c cpuTimes) busySince(c0 cpuTimes) float64 {
	if c.total <= c0.total {
		return 0
	}
	return round2(float64(c.busy-c0.busy) / float64(c.total-c0.total))
}
