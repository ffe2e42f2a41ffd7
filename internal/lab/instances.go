package lab

import (
	"fmt"
	"strings"
)

// Instance is one process of a service as the lab addresses it: its
// INSTANCE_ID ("order-2") and base URL.
type Instance struct {
	ID  string `json:"id"`
	URL string `json:"url"`
}

// Instanced is a Target that knows every instance of a service (a stack
// of scripts/up.sh -n 2, read from .run/stack.json). A Target that is not
// one has a single instance per service, at URL(service).
type Instanced interface {
	Instances(service string) []Instance
}

// AllInstances is Lab.Instance's default: failpoints and wrong-way
// switches go to every instance of the service an experiment names.
const AllInstances = "all"

// targets are the instances of svc that failpoints and wrong-way switches
// go to: the one Lab.Instance names if it is an instance of svc, else
// every instance of svc. An experiment's other services keep every
// instance, so "-instance order-2" narrows only the order service's faults.
func (l *Lab) targets(svc string) []Instance {
	all := instancesOf(l.T, svc)
	if l.Instance != "" && l.Instance != AllInstances {
		for _, i := range all {
			if i.ID == l.Instance {
				return []Instance{i}
			}
		}
	}
	return all
}

// instancesOf is every instance of svc that t knows, or its one URL.
func instancesOf(t Target, svc string) []Instance {
	if in, ok := t.(Instanced); ok {
		if all := in.Instances(svc); len(all) > 0 {
			return all
		}
	}
	return []Instance{{ID: svc, URL: t.URL(svc)}}
}

// CheckInstance reports whether name is "all" or an instance the target
// knows, listing the known ones otherwise.
func CheckInstance(t Target, name string) error {
	if name == "" || name == AllInstances {
		return nil
	}
	var known []string
	if in, ok := t.(Instanced); ok {
		for _, svc := range Services {
			for _, i := range in.Instances(svc) {
				if i.ID == name {
					return nil
				}
				known = append(known, i.ID)
			}
		}
	}
	if len(known) == 0 {
		return fmt.Errorf("instance %q: this stack does not list its instances (.run/stack.json of scripts/up.sh); use all", name)
	}
	return fmt.Errorf("instance %q: not in this stack (%s, or all)", name, strings.Join(known, ", "))
}

// acted lists the instances a step acted on, for a service that has more
// than one (on a stack of one instance each, the service says it all).
func (l *Lab) acted(svc string, in []Instance) []string {
	if len(instancesOf(l.T, svc)) < 2 {
		return nil
	}
	return ids(in)
}

// ids lists the instances' ids.
func ids(in []Instance) []string {
	out := make([]string, len(in))
	for k, i := range in {
		out[k] = i.ID
	}
	return out
}
