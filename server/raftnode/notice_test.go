package raftnode

import (
	"reflect"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// A notice reaches the addressed member's OnNotice with its sender, on both
// transports, and never reaches raft: terms do not move and the log keeps
// replicating. One addressed to the sender itself goes nowhere.
func TestNoticeReachesThePeerNotRaft(t *testing.T) {
	for _, tr := range []struct {
		name    string
		useGRPC bool
	}{{"memory", false}, {"raft stream", true}} {
		t.Run(tr.name, func(t *testing.T) {
			type got struct {
				to, from uint64
				payload  string
			}
			var mu sync.Mutex
			var notices []got
			var c *testCluster
			c = newTestCluster(t, 3, testSeed(t).Int63(), tr.useGRPC, func(cfg *Config) {
				name := cfg.Name
				cfg.OnNotice = func(from uint64, payload []byte) {
					mu.Lock()
					defer mu.Unlock()
					var to uint64
					for i, n := range c.names {
						if n == name {
							to = c.ids[i]
						}
					}
					notices = append(notices, got{to, from, string(payload)})
				}
			})
			l := c.leader()
			f := (l + 1) % 3
			c.propose(l, []byte("before"))
			term := c.nodes[f].Status().Term
			sentBefore := c.nodes[l].NoticesSent()
			c.nodes[l].SendNotice(c.ids[l], []byte("to myself"))
			c.nodes[l].SendNotice(c.ids[f], []byte("grant"))
			waitFor(t, 10*time.Second, "the notice at the follower", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(notices) > 0
			})
			c.propose(l, []byte("after"))
			waitFor(t, 10*time.Second, "replication after the notice", func() bool { return c.hasValue(f, "after") })
			mu.Lock()
			defer mu.Unlock()
			want := got{c.ids[f], c.ids[l], "grant"}
			if len(notices) != 1 || notices[0] != want {
				t.Fatalf("notices %+v, want only %+v", notices, want)
			}
			if s := c.nodes[f].Status(); s.Term != term {
				t.Fatalf("follower term moved from %d to %d: the notice reached raft", term, s.Term)
			}
			if n := c.nodes[l].NoticesSent() - sentBefore; n != 1 {
				t.Fatalf("NoticesSent counted %d, want 1 (none to itself)", n)
			}
		})
	}
}

// noticeSends is a Transport that records the notices in each Send call
// and passes everything on.
type noticeSends struct {
	Transport
	mu    sync.Mutex
	calls [][]uint64 // per Send call with notices: their destinations
}

func (r *noticeSends) Send(msgs []*raftpb.Message) {
	var to []uint64
	for _, m := range msgs {
		if m.GetType() == msgNotice {
			to = append(to, m.GetTo())
		}
	}
	if len(to) > 0 {
		r.mu.Lock()
		r.calls = append(r.calls, to)
		r.mu.Unlock()
	}
	r.Transport.Send(msgs)
}

// Notices sent while the state machine's Committed runs (where the lock
// service pushes grants and results) reach the transport in one Send when
// it returns, and every one of them arrives; a notice sent outside
// Committed goes at once, alone.
func TestNoticesSentInCommittedGoInOneSend(t *testing.T) {
	var (
		mu      sync.Mutex
		arrived = map[string]bool{}
		recs    = map[string]*noticeSends{}
	)
	c := newTestCluster(t, 3, testSeed(t).Int63(), false, func(cfg *Config) {
		rec := &noticeSends{Transport: cfg.Transport}
		recs[cfg.Name] = rec
		cfg.Transport = rec
		cfg.OnNotice = func(_ uint64, payload []byte) {
			mu.Lock()
			arrived[string(payload)] = true
			mu.Unlock()
		}
	})
	l := c.leader()
	f, g := (l+1)%3, (l+2)%3
	rec := recs[c.names[l]]
	var once sync.Once
	hook := func() {
		once.Do(func() {
			for i, to := range []int{f, g, f, g, f} {
				c.nodes[l].SendNotice(c.ids[to], []byte{'n', byte('0' + i)})
			}
		})
	}
	c.sms[l].onCommitted.Store(&hook)
	c.propose(l, []byte("batch"))
	waitFor(t, 10*time.Second, "the five notices at the followers", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(arrived) == 5
	})
	c.sms[l].onCommitted.Store(nil)
	c.nodes[l].SendNotice(c.ids[f], []byte("alone"))
	waitFor(t, 10*time.Second, "the notice sent outside Committed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return arrived["alone"]
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := [][]uint64{{c.ids[f], c.ids[g], c.ids[f], c.ids[g], c.ids[f]}, {c.ids[f]}}
	if !reflect.DeepEqual(rec.calls, want) {
		t.Fatalf("notices per Send call %v, want %v (one call for the batch, then one alone)", rec.calls, want)
	}
}
