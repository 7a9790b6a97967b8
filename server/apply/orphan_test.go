package apply

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/server/lock"
)

// tracked counts the requests the applier still holds a caller or an
// orphan function for.
func (h *applyHarness) tracked() int {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	return len(h.a.waits) + len(h.a.orphans)
}

func putEntry(t *testing.T, id uint64, key string) []byte {
	t.Helper()
	body, err := proto.Marshal(&pb.InternalRaftRequest{ID: id, Header: &pb.RequestHeader{ID: id}, Put: &pb.PutRequest{Key: []byte(key), Value: []byte("v")}})
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte{KindEtcd}, body...)
}

// A request whose caller stopped waiting after it went to raft hands its
// result, when it applies, to the orphan function — and only then: a caller
// that got its result sees the function never called.
func TestOrphanedResultGoesToTheFunction(t *testing.T) {
	h := newApplyHarness(t)
	orphaned := make(chan Result, 2)
	onOrphan := func(r Result) { orphaned <- r }

	ctx, cancel := context.WithCancel(context.Background())
	id := h.a.nextID()
	data := putEntry(t, id, "late")
	done := make(chan Result, 1)
	go func() { done <- h.a.proposeOrphaning(ctx, id, data, onOrphan) }()
	h.nextProposal()
	cancel()
	if res := <-done; !errors.Is(res.Err, ErrTimeout) {
		t.Fatalf("caller that gave up got %+v, want ErrTimeout", res)
	}
	h.apply(data)
	select {
	case r := <-orphaned:
		if r.Err != nil || r.Resp == nil {
			t.Fatalf("orphan function got %+v, want the put's result", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the orphaned request's result never reached the orphan function")
	}

	id2 := h.a.nextID()
	data2 := putEntry(t, id2, "on time")
	go func() { done <- h.a.proposeOrphaning(context.Background(), id2, data2, onOrphan) }()
	h.nextProposal()
	h.apply(data2)
	if res := <-done; res.Err != nil || res.Resp == nil {
		t.Fatalf("caller got %+v, want the put's result", res)
	}
	select {
	case r := <-orphaned:
		t.Fatalf("orphan function called for a request whose caller got it: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	if n := h.tracked(); n != 0 {
		t.Fatalf("%d requests still tracked after both were answered", n)
	}
}

// A lock op's result pushed by the leader answers the caller before this
// member applies the op, and that apply answers nobody again; on the
// leader, every lock op's result goes to the pusher with its proposer.
func TestPushedLockResult(t *testing.T) {
	h := newApplyHarness(t)
	locks, err := lock.New(h.a.db, h.a.kv, h.a.lg)
	if err != nil {
		t.Fatal(err)
	}
	h.a.locks = locks
	type pushed struct{ origin, id uint64 }
	var pushes []pushed
	h.a.SetResultPusher(func(origin, id uint64, res Result) { pushes = append(pushes, pushed{origin, id}) })
	h.grant(5)

	done := make(chan Result, 1)
	op := &lock.Op{Kind: lock.OpAcquire, Name: []byte("n"), Lease: 5}
	go func() { done <- h.a.DoLock(context.Background(), op) }()
	data := h.nextProposal()
	if origin, id, ok := lock.PeekOrigin(data[1:]); !ok || origin != h.p.id || id != op.ReqID {
		t.Fatalf("proposed op names origin %d request %d (%v), want this member %d and request %d", origin, id, ok, h.p.id, op.ReqID)
	}
	early := &lock.AcquireResult{Key: "n/5", Token: 99, Granted: true}
	if !h.a.DeliverResult(op.ReqID, Result{Lock: early}) {
		t.Fatal("DeliverResult found no caller waiting")
	}
	if res := <-done; res.Lock != early {
		t.Fatalf("caller got %+v, want the pushed result", res)
	}
	if h.a.DeliverResult(op.ReqID, Result{Lock: early}) {
		t.Fatal("a second push answered a caller again")
	}
	if h.a.PushedResults() != 1 {
		t.Fatalf("PushedResults %d, want 1", h.a.PushedResults())
	}
	h.apply(data) // this member's own apply: nobody waits any more
	if len(pushes) != 1 || pushes[0] != (pushed{h.p.id, op.ReqID}) {
		t.Fatalf("pusher got %+v, want one result from member %d, request %d", pushes, h.p.id, op.ReqID)
	}
	if n := h.tracked(); n != 0 {
		t.Fatalf("%d requests still tracked", n)
	}
}

func TestToleratesLazyApply(t *testing.T) {
	a := &Applier{}
	for _, tc := range []struct {
		data []byte
		want bool
	}{
		{[]byte{KindLock, 1}, true},
		{[]byte{KindLeaseRenew}, true},
		{[]byte{KindEtcd, 1}, false},
		{nil, false},
	} {
		if got := a.ToleratesLazyApply(tc.data); got != tc.want {
			t.Errorf("ToleratesLazyApply(%x) = %v, want %v", tc.data, got, tc.want)
		}
	}
}
