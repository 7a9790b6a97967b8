package e2e

import (
	"errors"
	"testing"
	"time"

	"github.com/tenure-io/tenure/api/tenurev1"
	"github.com/tenure-io/tenure/test/cluster"
)

// TestLockSessionRelayedToTheLeader: with thrifty replication on
// (--experimental-thrifty-replication), a Session stream opened on a
// follower is served by the leader through that follower — responses carry
// the leader's member ID — and hand-offs between streams on both followers
// work; when the leader is killed the relayed streams end, and a stream
// opened again on the same follower reaches the new leader.
func TestLockSessionRelayedToTheLeader(t *testing.T) {
	if cluster.TargetFromEnv(t) == cluster.Etcd {
		t.Skip("Tenure's native lock service")
	}
	c := start(t, cluster.Options{Size: 3, Env: []string{"TENURE_EXPERIMENTAL_THRIFTY_REPLICATION=5ms"}})
	ctx := testCtx(t, 90*time.Second)
	leaderID := func(i int) (int, uint64) {
		t.Helper()
		var li int
		eventually(t, 20*time.Second, "a leader", func() error {
			var err error
			li, err = c.Leader(ctx)
			return err
		})
		st, err := c.Client(i).Status(ctx, c.Endpoint(li))
		if err != nil {
			t.Fatal(err)
		}
		return li, st.Header.MemberId
	}
	l, lid := leaderID(0)
	f, g := (l+1)%3, (l+2)%3
	lf, lg := lockClientsOf(c.Client(f)), lockClientsOf(c.Client(g))
	name := []byte("relay/a")
	leaseF, leaseG := int64(grantLease(t, ctx, lf.cli, 30)), int64(grantLease(t, ctx, lg.cli, 30))

	sf, sg := openSession(t, ctx, lf), openSession(t, ctx, lg)
	sf.send(lockOp(name, leaseF))
	r := sf.recv(10 * time.Second)
	if r.GetLock() == nil || r.GetLock().Header.GetMemberId() != lid {
		t.Fatalf("Lock on follower %d: %v, want a grant from the leader %x", f, r, lid)
	}
	tokenF := r.GetLock().Token
	sg.send(lockOp(name, leaseG))
	waitQueueLength(t, ctx, lf, name, 2, "the other follower's Lock queued")
	sf.send(&tenurev1.SessionRequest{Op: &tenurev1.SessionRequest_Unlock{Unlock: &tenurev1.UnlockRequest{Name: name, Lease: leaseF, Token: tokenF}}})
	if r := sf.recv(10 * time.Second); !r.GetUnlock().GetReleased() {
		t.Fatalf("Unlock: %v", r)
	}
	r = sg.recv(10 * time.Second)
	if r.GetLock() == nil || r.GetLock().Token <= tokenF || r.GetLock().Header.GetMemberId() != lid {
		t.Fatalf("hand-off to follower %d: %v, want a token above %d from the leader %x", g, r, tokenF, lid)
	}

	c.Kill(l)
	for _, s := range []*sessionClient{sf, sg} {
		select {
		case _, ok := <-s.got:
			for ok {
				_, ok = <-s.got
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a relayed stream outlived the leader it was relayed to")
		}
	}
	nl, nid := leaderID(f) // f serves it itself if it became the leader
	if nl == l {
		t.Fatalf("killed leader %d still reported as leader", l)
	}
	var r2 *tenurev1.SessionResponse
	eventually(t, 20*time.Second, "a Lock on a new stream after the leader change", func() error {
		s := openSession(t, ctx, lf)
		s.send(lockOp([]byte("relay/b"), leaseF))
		select {
		case resp, ok := <-s.got:
			if !ok || resp.GetLock() == nil {
				return errStreamEnded
			}
			r2 = resp
			return nil
		case <-time.After(5 * time.Second):
			return errStreamEnded
		}
	})
	if r2.GetLock().Header.GetMemberId() != nid {
		t.Fatalf("Lock after the leader change: %v, want a grant from the new leader %x", r2, nid)
	}
}

var errStreamEnded = errors.New("no grant on the new stream")
