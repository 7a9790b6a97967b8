package watch

import (
	"fmt"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// TestSharedEventsEncoding: a response whose events go out pre-encoded
// decodes to exactly what the ordinary encoding of the same response
// decodes to.
func TestSharedEventsEncoding(t *testing.T) {
	src := newFakeSource()
	src.apply(put("a", "old"), put("b", "x"))
	_, evs := src.apply(put("a", strings.Repeat("v", 300)), del("b"), put("c", ""))
	cases := [][]*mvccpb.Event{
		evs,
		evs[:1],
		{{Type: mvccpb.Event_PUT, Kv: evs[0].Kv}}, // prev_kv stripped
		{{Type: mvccpb.Event_DELETE, Kv: &mvccpb.KeyValue{Key: []byte("k")}}},
	}
	for i, evs := range cases {
		hdr := &pb.ResponseHeader{ClusterId: 7, MemberId: 9, Revision: 42, RaftTerm: 3}
		want := &pb.WatchResponse{Header: hdr, WatchId: int64(i), Events: evs}
		wantB, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		se := &sharedEvents{}
		for range 2 { // the second use reuses the encoding
			got := &pb.WatchResponse{Header: hdr, WatchId: int64(i)}
			got.ProtoReflect().SetUnknown(se.encode(evs))
			gotB, err := proto.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if len(gotB) != len(wantB) {
				t.Fatalf("case %d: %d bytes, want %d", i, len(gotB), len(wantB))
			}
			var dec pb.WatchResponse
			if err := proto.Unmarshal(gotB, &dec); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&dec, want) {
				t.Fatalf("case %d: decoded %v, want %v", i, &dec, want)
			}
		}
	}
}

// TestManyWatchersOneStream: one revision takes one event slot of a stream
// however many of its watchers receive it, so a stream carrying more
// watchers of one key than ChanSize is not declared slow; when its queue is
// really full every watcher that missed a revision catches up, in order,
// exactly once.
func TestManyWatchersOneStream(t *testing.T) {
	src := newFakeSource()
	h := NewHub(src, HubConfig{ChanSize: 2}, testLogger(t))
	defer h.Close()
	st := newTestStream(h)
	const n = 100
	for range n {
		h.create(st, createReq("k", "", 0))
	}
	other := createReq("k", "l", 0) // a range watcher on the same stream
	other.PrevKv = true
	h.create(st, other)
	drain(h, st)
	write(src, h, put("k", "1"))
	write(src, h, put("k", "2"))
	if _, slow := h.Stats(); slow != 0 {
		t.Fatalf("%d watchers slow after 2 revisions with ChanSize 2", slow)
	}
	write(src, h, put("k", "3")) // the queue is full: everybody catches up
	if _, slow := h.Stats(); slow != n+1 {
		t.Fatalf("slow = %d, want %d", slow, n+1)
	}
	write(src, h, put("k", "4"))
	got := map[int64][]string{}
	eventually(t, "every watcher to catch up", func() bool {
		for _, r := range drain(h, st) {
			for _, e := range r.Events {
				got[r.WatchId] = append(got[r.WatchId], fmt.Sprintf("%d:%s:%v", e.Kv.ModRevision, e.Kv.Value, e.PrevKv != nil))
			}
		}
		for id := range int64(n + 1) {
			if len(got[id]) < 4 {
				return false
			}
		}
		return true
	})
	if _, slow := h.Stats(); slow != 0 {
		t.Fatalf("%d watchers still slow", slow)
	}
	for id := range int64(n + 1) {
		want := "[1:1:false 2:2:false 3:3:false 4:4:false]"
		if id == n {
			want = "[1:1:false 2:2:true 3:3:true 4:4:true]"
		}
		if fmt.Sprint(got[id]) != want {
			t.Fatalf("watcher %d got %v, want %s", id, got[id], want)
		}
	}
}

// A revision handed to at least WideFanOut watchers calls OnWideFanOut
// first (tenure serve raises GOMAXPROCS there); a narrower one does not.
func TestWideFanOutCallsItsHook(t *testing.T) {
	src := newFakeSource()
	calls := 0
	h := NewHub(src, HubConfig{WideFanOut: 50, OnWideFanOut: func() { calls++ }}, testLogger(t))
	defer h.Close()
	st := newTestStream(h)
	for range 49 {
		h.create(st, createReq("wide", "", 0))
	}
	h.create(st, createReq("narrow", "", 0))
	drain(h, st)
	write(src, h, put("wide", "1"))
	write(src, h, put("narrow", "1"))
	if calls != 0 {
		t.Fatalf("hook called %d times for revisions to 49 and 1 watchers, want 0 (WideFanOut 50)", calls)
	}
	h.create(st, createReq("wide", "", 0))
	drain(h, st)
	write(src, h, put("wide", "2"))
	if calls != 1 {
		t.Fatalf("hook called %d times for a revision to 50 watchers, want 1", calls)
	}
}

// OnFirstWatcher is called when a watcher is created while the hub has
// none (tenure serve then tells the raft leader at once that this member
// wants every commit promptly), and not for the watchers after it.
func TestFirstWatcherCallsItsHook(t *testing.T) {
	src := newFakeSource()
	calls := 0
	h := NewHub(src, HubConfig{OnFirstWatcher: func() { calls++ }}, testLogger(t))
	defer h.Close()
	st := newTestStream(h)
	h.create(st, createReq("a", "", 0))
	h.create(st, createReq("b", "", 0))
	drain(h, st)
	if calls != 1 {
		t.Fatalf("hook called %d times for the first two watchers, want 1", calls)
	}
	for id := range st.watchers {
		h.cancel(st, id)
	}
	if w, _ := h.Stats(); w != 0 {
		t.Fatalf("%d watchers after cancelling all", w)
	}
	h.create(st, createReq("c", "", 0))
	drain(h, st)
	if calls != 2 {
		t.Fatalf("hook called %d times after the hub had none again, want 2", calls)
	}
}
