package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
)

// Plant is one violation put into a copy of the sample snapshot.
type Plant struct {
	Check, Rule string
	What        string
	Apply       func(*Snapshot)
}

// PlantResult is what the checker found for one planted violation.
type PlantResult struct {
	Plant
	Caught   bool        // the planted rule was reported
	Reported []Violation // everything reported
}

// SelfTest checks the sample snapshot (it must be clean) and every planted
// violation (each must be caught by its rule). It returns the results and
// whether all of it held.
func SelfTest() (clean []Violation, results []PlantResult, ok bool) {
	clean = Check(SampleSnapshot())
	ok = len(clean) == 0
	for _, p := range Plants() {
		s := copySnapshot(SampleSnapshot())
		p.Apply(&s)
		got := Check(s)
		caught := slices.ContainsFunc(got, func(v Violation) bool { return v.Check == p.Check && v.Rule == p.Rule })
		ok = ok && caught
		results = append(results, PlantResult{Plant: p, Caught: caught, Reported: got})
	}
	return clean, results, ok
}

func copySnapshot(s Snapshot) Snapshot {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	var out Snapshot
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// PrintSelfTest writes the selftest's table.
func PrintSelfTest(w io.Writer, clean []Violation, results []PlantResult, ok bool) {
	fmt.Fprintf(w, "selftest: the checker against a consistent sample snapshot with one violation planted per rule\n\n")
	if len(clean) == 0 {
		fmt.Fprintln(w, "  sample snapshot: clean")
	} else {
		fmt.Fprintf(w, "  sample snapshot: NOT CLEAN (%d violations)\n", len(clean))
		for _, v := range clean {
			fmt.Fprintf(w, "    %s\n", v)
		}
	}
	for _, r := range results {
		mark := "caught"
		if !r.Caught {
			mark = "MISSED"
		}
		var also []string
		for _, v := range r.Reported {
			if v.Check != r.Check || v.Rule != r.Rule {
				also = append(also, v.Check+"/"+v.Rule)
			}
		}
		extra := ""
		if len(also) > 0 {
			extra = " (also: " + joinUnique(also) + ")"
		}
		fmt.Fprintf(w, "  %-6s %-32s %s%s\n", mark, r.Check+"/"+r.Rule, r.What, extra)
	}
	if ok {
		fmt.Fprintf(w, "\nselftest PASS: %d planted violations, every one caught\n", len(results))
	} else {
		fmt.Fprintln(w, "\nselftest FAIL")
	}
}

func joinUnique(list []string) string {
	slices.Sort(list)
	list = slices.Compact(list)
	out := ""
	for i, s := range list {
		if i > 0 {
			out += ", "
		}
		out += s
	}
	return out
}
