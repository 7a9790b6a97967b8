package watch

import (
	"fmt"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Hub-level tests drive streams directly through their outboxes: "not
// reading" is simply not popping.

func newTestStream(h *Hub) *stream {
	st := &stream{out: newOutbox(h.cfg.ChanSize), watchers: make(map[int64]*watcher)}
	h.mu.Lock()
	h.streams[st] = struct{}{}
	h.mu.Unlock()
	return st
}

func drain(h *Hub, st *stream) []*pb.WatchResponse {
	var out []*pb.WatchResponse
	for {
		it, ok := st.out.pop()
		if !ok {
			break
		}
		it.resp.Header = &pb.ResponseHeader{Revision: it.rev}
		out = append(out, it.resp)
	}
	if st.wantKick.Swap(false) {
		h.kick()
	}
	return out
}

// waitResp pops responses until one satisfies cond, returning all popped.
func waitResp(t *testing.T, h *Hub, st *stream, cond func(*pb.WatchResponse) bool) []*pb.WatchResponse {
	t.Helper()
	var all []*pb.WatchResponse
	eventually(t, "a matching response", func() bool {
		for _, r := range drain(h, st) {
			all = append(all, r)
			if cond(r) {
				return true
			}
		}
		return false
	})
	return all
}

func TestCompactedWhileUnsynced(t *testing.T) {
	src := newFakeSource()
	h := NewHub(src, HubConfig{ChanSize: 2}, testLogger(t))
	defer h.Close()
	st := newTestStream(h)
	h.create(st, createReq("a", "", 0))
	for range 10 {
		write(src, h, put("a", "v"))
	}
	if _, slow := h.Stats(); slow != 1 {
		t.Fatalf("slow = %d", slow)
	}
	src.compactTo(6)
	all := waitResp(t, h, st, func(r *pb.WatchResponse) bool { return r.Canceled })
	var revs []int64
	for _, r := range all {
		for _, e := range r.Events {
			revs = append(revs, e.Kv.ModRevision)
		}
	}
	last := all[len(all)-1]
	if !all[0].Created || fmt.Sprint(revs) != "[1 2]" || last.CompactRevision != 6 {
		t.Fatalf("responses %v", all)
	}
	if w, s := h.Stats(); w != 0 || s != 0 {
		t.Fatalf("stats %d %d", w, s)
	}
}

func TestNotifyAfterCloseAndStaleRev(t *testing.T) {
	src := newFakeSource()
	h := NewHub(src, HubConfig{}, testLogger(t))
	st := newTestStream(h)
	h.create(st, createReq("a", "", 0))
	write(src, h, put("a", "1"))
	h.Notify(1, nil) // stale: ignored
	h.Close()
	h.Close()
	write(src, h, put("a", "2"))
	var n int
	for _, r := range drain(h, st) {
		n += len(r.Events)
	}
	if n > 1 {
		t.Fatalf("events after close: %d", n)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (HubConfig{}).Validate(); err != nil {
		t.Fatal(err)
	}
	err := HubConfig{ChanSize: -1, MaxResponseBytes: -1}.Validate()
	if err == nil {
		t.Fatal("want error")
	}
	for _, f := range []string{"ChanSize", "MaxResponseBytes"} {
		if !strings.Contains(err.Error(), f) {
			t.Fatalf("%v does not name %s", err, f)
		}
	}
}

// BenchmarkNotifyFanout measures Notify of one event on a key watched by
// 10,000 watchers, each on its own stream (queues drained off the clock).
func BenchmarkNotifyFanout(b *testing.B) {
	for _, prevKV := range []bool{false, true} {
		b.Run(fmt.Sprintf("watchers=10000/prevKV=%v", prevKV), func(b *testing.B) {
			src := newFakeSource()
			h := NewHub(src, HubConfig{ChanSize: 128}, testLogger(b))
			defer h.Close()
			streams := make([]*stream, 10000)
			for i := range streams {
				streams[i] = newTestStream(h)
				cr := createReq("key", "", 0)
				cr.PrevKv = prevKV
				h.create(streams[i], cr)
			}
			for _, st := range streams {
				drain(h, st)
			}
			_, evs := src.apply(put("key", "value"), put("other", "x"))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i%64 == 63 {
					b.StopTimer()
					for _, st := range streams {
						drain(h, st)
					}
					b.StartTimer()
				}
				h.Notify(int64(i+1), evs)
			}
			b.StopTimer()
			if _, slow := h.Stats(); slow != 0 {
				b.Fatalf("%d watchers fell behind", slow)
			}
		})
	}
}

func TestNotifyGapResyncs(t *testing.T) {
	src := newFakeSource()
	h := NewHub(src, HubConfig{}, testLogger(t))
	defer h.Close()
	st := newTestStream(h)
	h.create(st, createReq("a", "", 0))
	h.create(st, createReq("a", "", 10)) // future watcher survives the resync
	write(src, h, put("a", "1"))
	src.apply(put("a", "2")) // revision 2 is never notified
	write(src, h, put("a", "3"))
	for range 7 {
		write(src, h, put("a", "x")) // 4..10
	}
	got := map[int64][]int64{}
	eventually(t, "all events", func() bool {
		for _, r := range drain(h, st) {
			for _, e := range r.Events {
				got[r.WatchId] = append(got[r.WatchId], e.Kv.ModRevision)
			}
		}
		return len(got[0]) >= 10 && len(got[1]) >= 1
	})
	if fmt.Sprint(got[0]) != "[1 2 3 4 5 6 7 8 9 10]" || fmt.Sprint(got[1]) != "[10]" {
		t.Fatalf("got %v", got)
	}
}
