package raftnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/server/storage"
	"github.com/tenure-io/tenure/test/logbuf"
)

func TestMembershipLearnerJoinPromoteRemove(t *testing.T) {
	r := testSeed(t)
	c := newTestCluster(t, 3, r.Int63(), false, nil)
	l := c.leader()
	for k := 0; k < 10; k++ {
		c.propose(l, []byte(fmt.Sprintf("m%d", k)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := "http://mem-new:2380"
	if _, _, err := c.nodes[l].AddMember(ctx, c.urls[0], true); !errors.Is(err, ErrPeerURLExists) {
		t.Fatalf("AddMember with a taken URL: %v", err)
	}
	m, ms, err := c.nodes[l].AddMember(ctx, []string{url}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 4 || !m.IsLearner {
		t.Fatalf("after add: %+v", ms)
	}
	if _, err := c.nodes[l].PromoteMember(ctx, c.ids[0]); !errors.Is(err, ErrNotLearner) {
		t.Fatalf("promote a voter: %v", err)
	}
	if _, err := c.nodes[l].RemoveMember(ctx, 12345); !errors.Is(err, ErrMemberNotFound) {
		t.Fatalf("remove unknown: %v", err)
	}

	// the new member joins an existing cluster: it learns its ID from a peer
	db, err := storage.Open(t.TempDir(), storage.Options{CacheBytes: 8 << 20, MemTableBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	sm := newTestSM()
	var initial []Member
	for j := 0; j < 3; j++ {
		initial = append(initial, Member{Name: c.names[j], PeerURLs: c.urls[j]})
	}
	initial = append(initial, Member{Name: "new", PeerURLs: []string{url}})
	nd, err := New(Config{Name: "new", DB: db, ClusterToken: "tok", InitialCluster: initial, NewCluster: false,
		ClientURLs: []string{"http://client-new:2379"}, PeerURLs: []string{url},
		TickInterval: 10 * time.Millisecond, ElectionTicks: 10, StateMachine: sm, Logger: testLogger().With("m", "new"),
		Transport: c.net.Transport(0, []string{url})})
	if err != nil {
		t.Fatal(err)
	}
	if nd.ID() != m.ID || nd.ClusterID() != c.nodes[0].ClusterID() {
		t.Fatalf("joined as %x in cluster %x, want %x in %x", nd.ID(), nd.ClusterID(), m.ID, c.nodes[0].ClusterID())
	}
	nd.Start()
	defer func() { nd.Stop(); db.Close() }()
	waitFor(t, 10*time.Second, "learner to catch up", func() bool {
		return nd.Status().AppliedIndex >= c.nodes[l].Status().CommitIndex && nd.Status().IsLearner
	})
	// promotion must run on the leader; retry until the learner is in sync
	waitFor(t, 10*time.Second, "promotion", func() bool {
		l = c.leader()
		_, err := c.nodes[l].PromoteMember(ctx, m.ID)
		return err == nil
	})
	waitFor(t, 10*time.Second, "promotion applied on the new member", func() bool { return !nd.Status().IsLearner })
	if _, err := c.nodes[l].RemoveMember(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		waitFor(t, 10*time.Second, "removal applied", func() bool { return len(c.nodes[i].Members()) == 3 })
	}
	c.propose(c.leader(), []byte("after-remove"))
}

// fetcherFunc adapts a function to MembersFetcher.
type fetcherFunc func(ctx context.Context, urls []string) (uint64, []Member, error)

func (f fetcherFunc) FetchMembers(ctx context.Context, urls []string) (uint64, []Member, error) {
	return f(ctx, urls)
}

// A member replaced at the same peer URLs must not take the removed
// incarnation's id from a peer that has not applied the removal and the
// addition yet: it asks again (starting with another peer) until a view
// shows its new, unstarted record. Found by the 5-member chaos run: the
// new member took the old id and never received a byte of the log.
func TestJoinIgnoresAStartedRecordAtOurPeerURLs(t *testing.T) {
	self := []string{"http://m1:2380"}
	old := Member{ID: 0xfe0f, Name: "m1", PeerURLs: self, ClientURLs: []string{"http://m1:2379"}}
	fresh := Member{ID: 0xcda1, PeerURLs: self}
	other := Member{ID: 0x6351, Name: "m4", PeerURLs: []string{"http://m4:2380"}}
	var asked []string
	stale := 2
	f := fetcherFunc(func(_ context.Context, urls []string) (uint64, []Member, error) {
		asked = append(asked, urls[0])
		if stale > 0 {
			stale--
			return 7, []Member{old, other}, nil
		}
		return 7, []Member{fresh, other}, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cid, ms, id, err := findSelf(ctx, f, []string{"http://m4:2380", "http://m2:2380"}, self)
	if err != nil {
		t.Fatal(err)
	}
	if id != fresh.ID || cid != 7 || len(ms) != 2 {
		t.Fatalf("joined as %x (cluster %x, %d members), want %x", id, cid, len(ms), fresh.ID)
	}
	if len(asked) != 3 || asked[0] == asked[1] {
		t.Fatalf("asked %v: want three attempts, the second starting at another peer", asked)
	}

	// A view that never changes ends in a clear error, not in the old id.
	always := fetcherFunc(func(context.Context, []string) (uint64, []Member, error) { return 7, []Member{old, other}, nil })
	sctx, scancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer scancel()
	if _, _, id, err := findSelf(sctx, always, []string{"http://m4:2380"}, self); err == nil || !strings.Contains(err.Error(), "already started") {
		t.Fatalf("id %x, err %v: want the already-started error", id, err)
	}
	none := fetcherFunc(func(context.Context, []string) (uint64, []Member, error) { return 7, []Member{other}, nil })
	nctx, ncancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer ncancel()
	if _, _, _, err := findSelf(nctx, none, []string{"http://m4:2380"}, self); err == nil || !strings.Contains(err.Error(), "run member add first") {
		t.Fatalf("err %v: want the not-a-member error", err)
	}
}

// Membership changes issued back to back — each as soon as the previous one
// returns, as a script replacing members does — must all go through. Raft
// drops a conf change proposed while an earlier one is not yet known to it
// as applied (it becomes an empty entry); the caller used to wait for its
// whole deadline and get a timeout.
func TestBackToBackMembershipChanges(t *testing.T) {
	r := testSeed(t)
	c := newTestCluster(t, 3, r.Int63(), false, nil)
	l := c.leader()
	for k := 0; k < 20; k++ {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		m, _, err := c.nodes[l].AddMember(ctx, []string{fmt.Sprintf("http://b2b-%d:2380", k)}, k%2 == 0)
		if err != nil {
			cancel()
			t.Fatalf("change %d: add: %v", k, err)
		}
		if _, err := c.nodes[l].RemoveMember(ctx, m.ID); err != nil {
			cancel()
			t.Fatalf("change %d: remove: %v", k, err)
		}
		cancel()
	}
	if n := len(c.nodes[l].Members()); n != 3 {
		t.Fatalf("%d members after adding and removing 20, want 3", n)
	}
}

// A conf change the leader's raft refuses because an earlier one is not yet
// applied is proposed again once that one is, instead of waiting out its
// caller's deadline. The leader's apply loop is held so that the first
// change is committed but unapplied when the second is proposed: on the
// leader, which sees raft's refusal itself, or on a follower, which
// forwards the change and hears of the refusal from the leader
// (msgConfChangeDropped).
func TestConfChangeRefusedWhileOneIsPendingIsProposedAgain(t *testing.T) {
	for _, onFollower := range []bool{false, true} {
		t.Run(map[bool]string{false: "leader", true: "follower"}[onFollower], func(t *testing.T) {
			r := testSeed(t)
			var logs logbuf.Buffer
			c := newTestCluster(t, 3, r.Int63(), false, func(cfg *Config) {
				cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil)).With("m", cfg.Name)
			})
			l := c.leader()
			c.propose(l, []byte("settled"))
			lead, second := c.nodes[l], l
			if onFollower {
				second = (l + 1) % 3
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			lead.applyMu.Lock()
			locked := true
			defer func() {
				if locked {
					lead.applyMu.Unlock()
				}
			}()
			errs := make(chan error, 2)
			go func() { _, _, err := lead.AddMember(ctx, []string{"http://pending-a:2380"}, false); errs <- err }()
			waitFor(t, 5*time.Second, "the first change committed, not applied on the leader", func() bool {
				st := lead.Status()
				return st.CommitIndex > st.AppliedIndex
			})
			go func() {
				_, _, err := c.nodes[second].AddMember(ctx, []string{"http://pending-b:2380"}, false)
				errs <- err
			}()
			waitFor(t, 5*time.Second, "the second change's proposer to learn that raft refused it", func() bool {
				for _, line := range strings.Split(logs.String(), "\n") {
					if strings.Contains(line, "membership change waits for an earlier one to be applied") && strings.Contains(line, "m="+c.names[second]) {
						return true
					}
				}
				return false
			})
			lead.applyMu.Unlock()
			locked = false
			for k := 0; k < 2; k++ {
				if err := <-errs; err != nil {
					t.Fatalf("add: %v", err)
				}
			}
			waitFor(t, 5*time.Second, "both additions on every member", func() bool {
				for _, n := range c.nodes {
					if len(n.Members()) != 5 {
						return false
					}
				}
				return true
			})
		})
	}
}

// A conf change a follower forwards is stepped by the leader on the peer
// stream's reader, outside the Ready loop; the leader must wake that loop
// itself, or the change waits for the next tick. With 1 s ticks, each
// add-and-remove pair below gets a quarter of one.
func TestForwardedConfChangeDoesNotWaitForATick(t *testing.T) {
	c := newTestCluster(t, 3, testSeed(t).Int63(), false, func(cfg *Config) {
		cfg.TickInterval = time.Second
		cfg.InitialElectionTickAdvance = true
	})
	l := c.leader()
	c.propose(l, []byte("settled"))
	f := c.nodes[(l+1)%3]
	for k := 0; k < 4; k++ {
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		m, _, err := f.AddMember(ctx, []string{fmt.Sprintf("http://tick-%d:2380", k)}, true)
		if err == nil {
			_, err = f.RemoveMember(ctx, m.ID)
		}
		cancel()
		if err != nil {
			t.Fatalf("change %d on a follower, with ticks 1 s apart: %v", k, err)
		}
	}
}
