package lock

import (
	"context"
	"sync"
	"time"
)

// DelayScheduler ends lock-delays on the leader's clock. Apply only records
// that a delay began (at a raft index); the leader waits the lock's delay on
// its monotonic clock and proposes OpEndDelay, which every member applies.
// A new leader restarts every running delay from its full length: a delay
// is never cut short by a leader change, only lengthened.
type DelayScheduler struct {
	m       *Machine
	propose func(ctx context.Context, op *Op) error

	mu      sync.Mutex
	leader  bool
	pending map[string]*pendingDelay
}

type pendingDelay struct {
	epoch    uint64
	deadline time.Time
	timer    *time.Timer
}

// NewDelayScheduler wires a scheduler to m; propose must put op in the log.
func NewDelayScheduler(m *Machine, propose func(ctx context.Context, op *Op) error) *DelayScheduler {
	d := &DelayScheduler{m: m, propose: propose, pending: map[string]*pendingDelay{}}
	m.SetDelayHook(d.started)
	return d
}

// SetLeader is called when this member gains or loses leadership.
func (d *DelayScheduler) SetLeader(leader bool) {
	var blocked []Note
	if leader {
		blocked = d.m.Blocked()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.leader = leader
	if !leader {
		for name, p := range d.pending {
			p.timer.Stop()
			delete(d.pending, name)
		}
		return
	}
	for _, n := range blocked {
		d.scheduleLocked(n.Lock, n.Epoch, time.Duration(n.DelayMs)*time.Millisecond)
	}
}

func (d *DelayScheduler) started(n Note) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.leader {
		d.scheduleLocked(n.Lock, n.Epoch, time.Duration(n.DelayMs)*time.Millisecond)
	}
}

func (d *DelayScheduler) scheduleLocked(name string, epoch uint64, delay time.Duration) {
	if p, ok := d.pending[name]; ok {
		if p.epoch == epoch {
			return
		}
		p.timer.Stop()
	}
	p := &pendingDelay{epoch: epoch, deadline: time.Now().Add(delay)}
	p.timer = time.AfterFunc(delay, func() { d.fire(name, p) })
	d.pending[name] = p
}

func (d *DelayScheduler) fire(name string, p *pendingDelay) {
	d.mu.Lock()
	if !d.leader || d.pending[name] != p {
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := d.propose(ctx, &Op{Kind: OpEndDelay, Name: []byte(name), Epoch: p.epoch})
	cancel()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pending[name] != p {
		return
	}
	if err == nil {
		delete(d.pending, name) // applied: the delay is over (or a newer one replaced it)
		return
	}
	if d.leader && d.m.Get(name, 0).Blocked == p.epoch {
		p.timer = time.AfterFunc(100*time.Millisecond, func() { d.fire(name, p) })
		return
	}
	delete(d.pending, name)
}

// Remaining is how long the running lock-delay of name still lasts, as this
// member's scheduler knows it (only the leader knows; ok is false elsewhere).
func (d *DelayScheduler) Remaining(name string) (time.Duration, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.pending[name]
	if !ok {
		return 0, false
	}
	r := time.Until(p.deadline)
	if r < 0 {
		r = 0
	}
	return r, true
}
