package chaos

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/relmsg/ordersaga/internal/stack"
)

// StackFile finds the processes and broker nodes scripts/up.sh started in
// its .run/stack.json (internal/stack): every instance of each service and
// every node of a local cluster, each with its own pid, which changes when
// the stack's supervisor starts it again.
type StackFile struct{ Dir string }

// stackNames are the services as scripts/up.sh names them.
var stackNames = map[string]string{"order": "order", "inventory": "inventory", "payment": "payment-fake"}

// Read reads the stack file.
func (d StackFile) Read() (stack.File, error) {
	f, err := stack.Read(d.Dir)
	if err != nil {
		return f, fmt.Errorf("%w (is the stack started by scripts/up.sh?)", err)
	}
	return f, nil
}

// URLs maps every instance to its URL, as a Target wants them: "order",
// "inventory" and "payment" for the first instances, "order-2" and so on
// for the others.
func (d StackFile) URLs() (map[string]string, error) {
	f, err := d.Read()
	if err != nil {
		return nil, err
	}
	urls := map[string]string{}
	for _, p := range f.Processes {
		if p.Service == stack.PSP.Name {
			urls["psp"] = p.URL // the one PSP: its switches and books
		}
		for svc, name := range stackNames {
			if p.Service == name {
				urls[InstanceName(svc, p.Instance)] = p.URL
			}
		}
	}
	return urls, nil
}

// PID implements Processes: the target is a service ("payment") or one of
// its instances ("payment-2"). The pid must still run the instance's
// executable: a process that is being restarted has none yet.
func (d StackFile) PID(target string) (int, error) {
	svc, k := splitInstance(target)
	name, ok := stackNames[svc]
	if !ok {
		return 0, fmt.Errorf("no service %q", target)
	}
	f, err := d.Read()
	if err != nil {
		return 0, err
	}
	for _, p := range f.Processes {
		if p.Service != name || p.Instance != k {
			continue
		}
		if stack.RunsExe(p.PID, p.Exe) {
			return p.PID, nil
		}
		return 0, fmt.Errorf("%s: pid %d does not run %s (restarting?)", target, p.PID, p.Exe)
	}
	return 0, fmt.Errorf("%s: not in %s", target, stack.Path(d.Dir))
}

// InstanceName is how the run names instance k of a service: the service
// for the first, "<service>-k" for the others.
func InstanceName(svc string, k int) string {
	if k <= 1 {
		return svc
	}
	return svc + "-" + strconv.Itoa(k)
}

// splitInstance reads an instance name back: "payment-2" is instance 2 of
// payment, "payment" instance 1.
func splitInstance(target string) (string, int) {
	if i := strings.LastIndexByte(target, '-'); i > 0 {
		if k, err := strconv.Atoi(target[i+1:]); err == nil && k > 1 {
			return target[:i], k
		}
	}
	return target, 1
}

// instancesOf lists the instances of svc that urls knows, in order.
func instancesOf(urls map[string]string, svc string) []string {
	var out []string
	for k := 1; ; k++ {
		name := InstanceName(svc, k)
		if _, ok := urls[name]; !ok {
			return out
		}
		out = append(out, name)
	}
}
