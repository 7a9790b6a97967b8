package raftnode

import (
	"sync"
	"testing"
	"time"
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
