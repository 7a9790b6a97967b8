package watch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// fakeSource is an in-memory event history with compaction.
type fakeSource struct {
	mu      sync.Mutex
	rev     int64
	compact int64
	log     []*mvccpb.Event
	kv      map[string]*mvccpb.KeyValue
	gate    chan struct{} // if non-nil, History waits for it to close
	calls   int
}

func newFakeSource() *fakeSource { return &fakeSource{kv: make(map[string]*mvccpb.KeyValue)} }

func (f *fakeSource) Rev() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rev
}

func (f *fakeSource) CompactRev() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.compact
}

func inRange(k, key, end []byte) bool {
	switch {
	case end == nil:
		return bytes.Equal(k, key)
	case len(end) == 1 && end[0] == 0:
		return bytes.Compare(k, key) >= 0
	default:
		return bytes.Compare(k, key) >= 0 && bytes.Compare(k, end) < 0
	}
}

func (f *fakeSource) History(from, to int64, key, end []byte, limit int) ([]*mvccpb.Event, int64, error) {
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if from < f.compact {
		return nil, 0, errors.New("fake: compacted")
	}
	var out []*mvccpb.Event
	for _, ev := range f.log {
		r := ev.Kv.ModRevision
		if r < from {
			continue
		}
		if r > to {
			break
		}
		if len(out) >= limit && out[len(out)-1].Kv.ModRevision != r {
			return out, r, nil
		}
		if inRange(ev.Kv.Key, key, end) {
			out = append(out, ev)
		}
	}
	return out, to + 1, nil
}

type op struct {
	key, val string
	del      bool
}

func put(k, v string) op { return op{key: k, val: v} }
func del(k string) op    { return op{key: k, del: true} }

// apply commits ops as one revision and returns the revision and events,
// without notifying anyone.
func (f *fakeSource) apply(ops ...op) (int64, []*mvccpb.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev++
	rev := f.rev
	var evs []*mvccpb.Event
	for _, o := range ops {
		prev := f.kv[o.key]
		if o.del {
			if prev == nil {
				continue
			}
			delete(f.kv, o.key)
			evs = append(evs, &mvccpb.Event{Type: mvccpb.Event_DELETE, Kv: &mvccpb.KeyValue{Key: []byte(o.key), ModRevision: rev}, PrevKv: prev})
			continue
		}
		kv := &mvccpb.KeyValue{Key: []byte(o.key), Value: []byte(o.val), ModRevision: rev, CreateRevision: rev, Version: 1}
		if prev != nil {
			kv.CreateRevision, kv.Version = prev.CreateRevision, prev.Version+1
		}
		f.kv[o.key] = kv
		evs = append(evs, &mvccpb.Event{Type: mvccpb.Event_PUT, Kv: kv, PrevKv: prev})
	}
	f.log = append(f.log, evs...)
	return rev, evs
}

func (f *fakeSource) compactTo(rev int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.compact = rev
	i := 0
	for i < len(f.log) && f.log[i].Kv.ModRevision < rev {
		i++
	}
	f.log = append([]*mvccpb.Event(nil), f.log[i:]...)
}

// write applies ops and notifies the hub.
func write(f *fakeSource, h *Hub, ops ...op) int64 {
	rev, evs := f.apply(ops...)
	h.Notify(rev, evs)
	return rev
}

// ---- gRPC harness ----

type env struct {
	t   *testing.T
	src *fakeSource
	hub *Hub
	srv *grpc.Server
	lis net.Listener
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newEnv(t *testing.T, cfg HubConfig) *env {
	t.Helper()
	e := &env{t: t, src: newFakeSource()}
	e.hub = NewHub(e.src, cfg, testLogger(t))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.lis = lis
	e.srv = grpc.NewServer()
	pb.RegisterWatchServer(e.srv, e.hub.Server(func(rev int64) *pb.ResponseHeader {
		return &pb.ResponseHeader{ClusterId: 7, MemberId: 9, RaftTerm: 3, Revision: rev}
	}))
	go func() { _ = e.srv.Serve(lis) }()
	t.Cleanup(func() {
		e.hub.Close()
		e.srv.Stop()
	})
	return e
}

func (e *env) addr() string { return e.lis.Addr().String() }

func (e *env) dial(opts ...grpc.DialOption) *grpc.ClientConn {
	e.t.Helper()
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	cc, err := grpc.NewClient(e.addr(), opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cc.Close() })
	return cc
}

// tstream is a raw Watch stream whose responses are read by a goroutine
// into a channel (unless stalled).
type tstream struct {
	t      *testing.T
	s      pb.Watch_WatchClient
	cancel context.CancelFunc
	ch     chan *pb.WatchResponse
	errc   chan error
	start  chan struct{}
	stash  []*pb.WatchResponse // read by create while looking for its response
}

func (e *env) stream(cc *grpc.ClientConn, stalled bool) *tstream {
	e.t.Helper()
	if cc == nil {
		cc = e.dial()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := pb.NewWatchClient(cc).Watch(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	ts := &tstream{t: e.t, s: s, cancel: cancel, ch: make(chan *pb.WatchResponse, 1<<16), errc: make(chan error, 1), start: make(chan struct{})}
	if !stalled {
		close(ts.start)
	}
	go func() {
		select {
		case <-ts.start:
		case <-ctx.Done():
			return
		}
		for {
			r, err := s.Recv()
			if err != nil {
				ts.errc <- err
				return
			}
			ts.ch <- r
		}
	}()
	e.t.Cleanup(cancel)
	return ts
}

const waitFor = 10 * time.Second

func (ts *tstream) next() *pb.WatchResponse {
	ts.t.Helper()
	if len(ts.stash) > 0 {
		r := ts.stash[0]
		ts.stash = ts.stash[1:]
		return r
	}
	return ts.recv()
}

func (ts *tstream) recv() *pb.WatchResponse {
	ts.t.Helper()
	select {
	case r := <-ts.ch:
		return r
	case err := <-ts.errc:
		ts.t.Fatalf("stream ended: %v", err)
	case <-time.After(waitFor):
		ts.t.Fatalf("no watch response within %v", waitFor)
	}
	return nil
}

func (ts *tstream) send(req *pb.WatchRequest) {
	ts.t.Helper()
	if err := ts.s.Send(req); err != nil {
		ts.t.Fatal(err)
	}
}

func (ts *tstream) create(cr *pb.WatchCreateRequest) *pb.WatchResponse {
	ts.t.Helper()
	ts.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: cr}})
	for {
		r := ts.recv()
		if r.Created {
			return r
		}
		ts.stash = append(ts.stash, r)
	}
}

// ev is a compact, comparable form of an event.
type ev struct {
	Rev  int64
	Type mvccpb.Event_EventType
	Key  string
	Prev bool
}

func (e ev) String() string { return fmt.Sprintf("%d:%v:%s:prev=%v", e.Rev, e.Type, e.Key, e.Prev) }

func evsOf(r *pb.WatchResponse) []ev {
	var out []ev
	for _, e := range r.Events {
		out = append(out, ev{e.Kv.ModRevision, e.Type, string(e.Kv.Key), e.PrevKv != nil})
	}
	return out
}

// collect reads responses for watch id until stop says so.
func (ts *tstream) collect(id int64, stop func([]ev) bool) ([]ev, []*pb.WatchResponse) {
	ts.t.Helper()
	var got []ev
	var resps, others []*pb.WatchResponse
	defer func() { ts.stash = append(others, ts.stash...) }()
	for !stop(got) {
		r := ts.next()
		if r.WatchId != id {
			others = append(others, r)
			continue
		}
		resps = append(resps, r)
		got = append(got, evsOf(r)...)
	}
	return got, resps
}

func untilRev(rev int64) func([]ev) bool {
	return func(got []ev) bool { return len(got) > 0 && got[len(got)-1].Rev >= rev }
}

func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling interval, not synchronisation
	}
}

func createReq(key, end string, start int64) *pb.WatchCreateRequest {
	cr := &pb.WatchCreateRequest{Key: []byte(key), StartRevision: start}
	if end != "" {
		cr.RangeEnd = []byte(end)
	}
	return cr
}
