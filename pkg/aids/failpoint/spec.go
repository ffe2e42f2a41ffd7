package failpoint

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ArmFromSpec arms the points of a FAILPOINTS value:
//
//	name=action[*count];name2=action
//
// action is error, pause or crash; count (a positive integer, error and pause
// only) limits how many hits act, and without it every hit does. An empty
// spec arms nothing. Every bad entry is reported at once, and nothing is
// armed unless the whole spec is good: a half-armed experiment would mislead.
// A pause armed this way is released through the admin API.
func (r *Registry) ArmFromSpec(spec string) error {
	type entry struct {
		name   string
		action Action
		count  int
	}
	var (
		entries []entry
		errs    []error
		seen    = make(map[string]bool)
	)
	for raw := range strings.SplitSeq(spec, ";") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		name, action, count, err := parseEntry(raw)
		if err == nil && seen[name] {
			err = errors.New("point named twice")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("entry %q: %w", raw, err))
			continue
		}
		seen[name] = true
		entries = append(entries, entry{name, action, count})
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("parse failpoints: %w", err)
	}
	for _, e := range entries {
		r.armAction(e.name, e.action, e.count)
	}
	return nil
}

// parseEntry parses one name=action[*count].
func parseEntry(raw string) (name string, action Action, count int, err error) {
	name, rest, ok := strings.Cut(raw, "=")
	name, rest = strings.TrimSpace(name), strings.TrimSpace(rest)
	if !ok || name == "" || rest == "" {
		return "", "", 0, errors.New("want name=action[*count]")
	}
	if err := checkKnown(name); err != nil {
		return "", "", 0, err
	}
	act, countText, hasCount := strings.Cut(rest, "*")
	if action, err = parseAction(strings.TrimSpace(act)); err != nil {
		return "", "", 0, err
	}
	if hasCount {
		count, err = strconv.Atoi(strings.TrimSpace(countText))
		if err != nil || count < 1 {
			return "", "", 0, fmt.Errorf("count %q must be a positive integer (omit it for every hit)", countText)
		}
	}
	if err := checkCount(action, count); err != nil {
		return "", "", 0, err
	}
	return name, action, count, nil
}

func parseAction(s string) (Action, error) {
	switch a := Action(s); a {
	case ActionError, ActionPause, ActionCrash:
		return a, nil
	}
	return "", fmt.Errorf("unknown action %q (want error, pause or crash)", s)
}

// checkCount rejects counts that mean nothing: a negative one, or a crash
// more than once (the process is gone after the first).
func checkCount(a Action, count int) error {
	switch {
	case count < 0:
		return fmt.Errorf("count %d must not be negative (0 means every hit)", count)
	case a == ActionCrash && count > 1:
		return fmt.Errorf("crash fires once; count %d must be 1 or omitted", count)
	}
	return nil
}
