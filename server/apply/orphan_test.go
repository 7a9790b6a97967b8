package apply

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

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
	h.a.mu.Lock()
	n := len(h.a.orphans) + len(h.a.waits)
	h.a.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d requests still tracked after both were answered", n)
	}
}
