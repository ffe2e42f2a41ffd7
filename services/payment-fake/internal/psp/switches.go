package psp

import "sync"

// switchboard holds one PSP instance's fault switch. Every charge or refund
// call takes the switch once; a limited switch counts down and falls back to
// normal when it is used up.
type switchboard struct {
	mu  sync.Mutex
	cur Switch
}

func (b *switchboard) set(s Switch) {
	if s.Mode == ModeNormal {
		s = Switch{Mode: ModeNormal}
	}
	b.mu.Lock()
	b.cur = s
	b.mu.Unlock()
}

func (b *switchboard) current() Switch {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur.Mode == "" {
		return Switch{Mode: ModeNormal}
	}
	return b.cur
}

// take returns the switch that applies to this charge call and uses one
// call up.
func (b *switchboard) take() Switch { return b.takeFor(true) }

// takeRefund is take for a refund call: decline is about charges, so a
// refund neither sees it nor uses it up.
func (b *switchboard) takeRefund() Switch { return b.takeFor(false) }

func (b *switchboard) takeFor(charge bool) Switch {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.cur
	if s.Mode == "" || s.Mode == ModeNormal || (s.Mode == ModeDecline && !charge) {
		return Switch{Mode: ModeNormal}
	}
	if s.Count > 0 {
		b.cur.Count--
		if b.cur.Count == 0 {
			b.cur = Switch{Mode: ModeNormal}
		}
		s.Count = 1
	}
	return s
}
