package watch

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

const (
	PUT = mvccpb.Event_PUT
	DEL = mvccpb.Event_DELETE
)

func TestKeyRanges(t *testing.T) {
	// Writes, one revision each: a, ab, abc, b, c, then the sentinel "zz"/"a"
	// write that tells the test it has seen everything.
	keys := []string{"a", "ab", "abc", "b", "c", "a0"}
	cases := []struct {
		name     string
		key, end string
		want     []string
	}{
		{"single", "ab", "", []string{"ab"}},
		{"prefix", "ab", "ac", []string{"ab", "abc"}},
		{"range", "ab", "c", []string{"ab", "abc", "b"}},
		{"fromkey", "b", "\x00", []string{"b", "c"}},
		{"all", "\x00", "\x00", keys},
		{"empty key all", "", "\x00", keys},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, HubConfig{})
			ts := e.stream(nil, false)
			cr := ts.create(createReq(tc.key, tc.end, 0))
			if cr.Header.Revision != 0 || cr.Header.ClusterId != 7 || cr.Header.MemberId != 9 || cr.Header.RaftTerm != 3 {
				t.Fatalf("created header = %v", cr.Header)
			}
			revOf := map[string]int64{}
			for _, k := range keys {
				revOf[k] = write(e.src, e.hub, put(k, "v"))
			}
			last := tc.want[len(tc.want)-1]
			got, _ := ts.collect(cr.WatchId, untilRev(revOf[last]))
			var want []ev
			for _, k := range tc.want {
				want = append(want, ev{revOf[k], PUT, k, false})
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %v\nwant %v", got, want)
			}
		})
	}
}

func TestEmptyRangeRejected(t *testing.T) {
	e := newEnv(t, HubConfig{})
	ts := e.stream(nil, false)
	r := ts.create(createReq("b", "a", 0))
	if !r.Canceled || r.WatchId != -1 || r.CancelReason == "" {
		t.Fatalf("got %v", r)
	}
	r = ts.create(&pb.WatchCreateRequest{Key: []byte("a"), StartRevision: -1})
	if !r.Canceled || r.WatchId != -1 {
		t.Fatalf("negative start: got %v", r)
	}
}

func TestStartRevision(t *testing.T) {
	e := newEnv(t, HubConfig{CatchUpBatch: 2})
	for i := range 10 {
		write(e.src, e.hub, put(fmt.Sprintf("k%d", i%3), "v"), put("other", "x")) // revs 1..10
	}
	ts := e.stream(nil, false)

	// In the past: replay from 4 (limit 2 forces several History chunks), then live.
	past := ts.create(createReq("k", "l", 4))
	if past.Header.Revision != 10 {
		t.Fatalf("created header rev %d", past.Header.Revision)
	}
	// In the future.
	fut := ts.create(createReq("k", "l", 13))
	for i := 10; i < 14; i++ {
		write(e.src, e.hub, put(fmt.Sprintf("k%d", i%3), "v")) // revs 11..14
	}
	got, resps := ts.collect(past.WatchId, untilRev(14))
	var want []ev
	for r := int64(4); r <= 14; r++ {
		want = append(want, ev{r, PUT, fmt.Sprintf("k%d", (r-1)%3), false})
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("past watcher got %v\nwant %v", got, want)
	}
	for _, r := range resps {
		// The header revision is what clientv3 resumes from: never past the
		// last event delivered to this watcher... and never before it.
		if last := r.Events[len(r.Events)-1].Kv.ModRevision; r.Header.Revision < last {
			t.Fatalf("header rev %d < last event %d", r.Header.Revision, last)
		}
	}
	got, _ = ts.collect(fut.WatchId, untilRev(14))
	if want := []ev{{13, PUT, "k0", false}, {14, PUT, "k1", false}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("future watcher got %v want %v", got, want)
	}
}

func TestCompactedStart(t *testing.T) {
	e := newEnv(t, HubConfig{})
	for range 10 {
		write(e.src, e.hub, put("a", "v"))
	}
	e.src.compactTo(5)
	ts := e.stream(nil, false)
	c := ts.create(createReq("a", "", 4))
	r := ts.next()
	if r.WatchId != c.WatchId || !r.Canceled || r.CompactRevision != 5 {
		t.Fatalf("want canceled with compact_revision 5, got %v", r)
	}
	// start == compact revision is still served (etcd: minRev < compactRev is compacted).
	c = ts.create(createReq("a", "", 5))
	got, _ := ts.collect(c.WatchId, untilRev(10))
	if len(got) != 6 || got[0].Rev != 5 {
		t.Fatalf("got %v", got)
	}

	// clientv3 sees ErrCompacted.
	cli := newClient(t, e)
	wr := <-cli.Watch(context.Background(), "a", clientv3.WithRev(2))
	if wr.CompactRevision != 5 || wr.Err() != rpctypes.ErrCompacted {
		t.Fatalf("clientv3: %+v err %v", wr, wr.Err())
	}
}

func TestFiltersAndPrevKV(t *testing.T) {
	e := newEnv(t, HubConfig{})
	write(e.src, e.hub, put("a", "0")) // rev 1
	ts := e.stream(nil, false)
	noput := &pb.WatchCreateRequest{Key: []byte("a"), Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}}
	nodel := &pb.WatchCreateRequest{Key: []byte("a"), Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NODELETE}, PrevKv: true}
	plain := &pb.WatchCreateRequest{Key: []byte("a")}
	hist := &pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 1, PrevKv: true, Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NODELETE}}
	ids := map[string]int64{}
	for name, cr := range map[string]*pb.WatchCreateRequest{"noput": noput, "nodel": nodel, "plain": plain} {
		ids[name] = ts.create(cr).WatchId
	}
	write(e.src, e.hub, put("a", "1"))    // 2
	write(e.src, e.hub, del("a"))         // 3
	write(e.src, e.hub, put("a", "2"))    // 4
	ids["hist"] = ts.create(hist).WatchId // replays 1..4
	write(e.src, e.hub, put("a", "3"))    // 5
	got := map[int64][]ev{}
	var prevVal string
	for len(got[ids["noput"]]) < 1 || len(got[ids["nodel"]]) < 3 || len(got[ids["plain"]]) < 4 || len(got[ids["hist"]]) < 4 {
		r := ts.next()
		got[r.WatchId] = append(got[r.WatchId], evsOf(r)...)
		if r.WatchId == ids["nodel"] && r.Events[0].Kv.ModRevision == 2 {
			prevVal = string(r.Events[0].PrevKv.Value)
		}
	}
	want := map[string][]ev{
		"noput": {{3, DEL, "a", false}},
		"nodel": {{2, PUT, "a", true}, {4, PUT, "a", false}, {5, PUT, "a", true}},
		"plain": {{2, PUT, "a", false}, {3, DEL, "a", false}, {4, PUT, "a", false}, {5, PUT, "a", false}},
		"hist":  {{1, PUT, "a", false}, {2, PUT, "a", true}, {4, PUT, "a", false}, {5, PUT, "a", true}},
	}
	for name, w := range want {
		if !reflect.DeepEqual(got[ids[name]], w) {
			t.Errorf("%s: got %v want %v", name, got[ids[name]], w)
		}
	}
	if prevVal != "0" {
		t.Errorf("prev_kv value %q", prevVal)
	}
}

func TestManyWatchesCancelDuplicate(t *testing.T) {
	e := newEnv(t, HubConfig{})
	ts := e.stream(nil, false)
	const n = 50
	ids := map[int64]bool{}
	for i := range n {
		r := ts.create(createReq(fmt.Sprintf("k%02d", i), "", 0))
		if ids[r.WatchId] {
			t.Fatalf("auto id %d reused", r.WatchId)
		}
		ids[r.WatchId] = true
	}
	// Client-chosen id, then a duplicate of it.
	r := ts.create(&pb.WatchCreateRequest{Key: []byte("k00"), WatchId: 1000})
	if r.WatchId != 1000 || r.Canceled {
		t.Fatalf("chosen id: %v", r)
	}
	r = ts.create(&pb.WatchCreateRequest{Key: []byte("k00"), WatchId: 1000})
	if !r.Canceled || r.WatchId != -1 || !strings.Contains(r.CancelReason, "duplicate") {
		t.Fatalf("duplicate id: %v", r)
	}
	// Cancel watch 1000 and the watcher of k01.
	ts.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: 1000}}})
	if r := ts.next(); !r.Canceled || r.WatchId != 1000 {
		t.Fatalf("cancel: %v", r)
	}
	ts.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: 1}}})
	if r := ts.next(); !r.Canceled || r.WatchId != 1 {
		t.Fatalf("cancel: %v", r)
	}
	if w, _ := e.hub.Stats(); w != n-1 {
		t.Fatalf("watchers = %d", w)
	}
	for i := range n {
		write(e.src, e.hub, put(fmt.Sprintf("k%02d", i), "v"))
	}
	seen := map[int64]int{}
	for len(seen) < n-1 {
		r := ts.next()
		if len(r.Events) != 1 || r.WatchId == 1000 || r.WatchId == 1 {
			t.Fatalf("unexpected %v", r)
		}
		seen[r.WatchId]++
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("watch %d got %d responses", id, c)
		}
	}
}

func TestRequestProgress(t *testing.T) {
	e := newEnv(t, HubConfig{})
	for range 5 {
		write(e.src, e.hub, put("a", "v"))
	}
	ts := e.stream(nil, false)
	ts.create(createReq("a", "", 0))
	progressReq := &pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}}
	ts.send(progressReq)
	r := ts.next()
	if r.WatchId != -1 || len(r.Events) != 0 || r.Header.Revision != 5 || r.Created || r.Canceled {
		t.Fatalf("progress: %v", r)
	}

	// With an unsynced watcher the answer waits until it has caught up.
	gate := make(chan struct{})
	e.src.mu.Lock()
	e.src.gate = gate
	e.src.mu.Unlock()
	c := ts.create(createReq("a", "", 1))
	ts.send(progressReq)
	write(e.src, e.hub, put("a", "v")) // 6
	close(gate)
	var order []string
	for len(order) == 0 || order[len(order)-1] != "progress" {
		r := ts.next()
		switch {
		case r.WatchId == -1:
			if r.Header.Revision != 6 {
				t.Fatalf("progress rev %d", r.Header.Revision)
			}
			order = append(order, "progress")
		case r.WatchId == c.WatchId:
			for _, e := range r.Events {
				order = append(order, fmt.Sprint(e.Kv.ModRevision))
			}
		}
	}
	if want := []string{"1", "2", "3", "4", "5", "6", "progress"}; !reflect.DeepEqual(order, want) {
		t.Fatalf("order %v", order)
	}
}

func TestProgressNotify(t *testing.T) {
	e := newEnv(t, HubConfig{ProgressNotifyInterval: 20 * time.Millisecond})
	write(e.src, e.hub, put("a", "v"))
	ts := e.stream(nil, false)
	c := ts.create(&pb.WatchCreateRequest{Key: []byte("a"), ProgressNotify: true})
	ts.create(&pb.WatchCreateRequest{Key: []byte("b")}) // no progress for this one
	write(e.src, e.hub, put("zzz", "v"))                // rev 2, no event for the watcher
	for {
		r := ts.next()
		if r.WatchId != c.WatchId {
			t.Fatalf("unexpected response %v", r)
		}
		if len(r.Events) == 0 && r.Header.Revision == 2 {
			break
		}
	}
}

func TestFragment(t *testing.T) {
	e := newEnv(t, HubConfig{MaxResponseBytes: 1000})
	ts := e.stream(nil, false)
	frag := ts.create(&pb.WatchCreateRequest{Key: []byte("k"), RangeEnd: []byte("l"), Fragment: true})
	whole := ts.create(&pb.WatchCreateRequest{Key: []byte("k"), RangeEnd: []byte("l")})
	var ops []op
	for i := range 10 {
		ops = append(ops, put(fmt.Sprintf("k%d", i), strings.Repeat("x", 300)))
	}
	write(e.src, e.hub, ops...)
	var frags, wholes []*pb.WatchResponse
	n := 0
	for n < 20 {
		r := ts.next()
		n += len(r.Events)
		if r.WatchId == frag.WatchId {
			frags = append(frags, r)
		} else if r.WatchId == whole.WatchId {
			wholes = append(wholes, r)
		}
	}
	if len(wholes) != 1 || len(wholes[0].Events) != 10 || wholes[0].Fragment {
		t.Fatalf("unfragmented watcher got %d responses", len(wholes))
	}
	if len(frags) < 3 {
		t.Fatalf("fragmented watcher got %d responses", len(frags))
	}
	k := 0
	for i, r := range frags {
		if r.Fragment != (i < len(frags)-1) {
			t.Fatalf("fragment %d: flag %v", i, r.Fragment)
		}
		if proto.Size(r) > 1000+400 {
			t.Fatalf("fragment %d is %d bytes", i, proto.Size(r))
		}
		for _, e := range r.Events {
			if string(e.Kv.Key) != fmt.Sprintf("k%d", k) {
				t.Fatalf("fragment order: %s at %d", e.Kv.Key, k)
			}
			k++
		}
	}

	// clientv3 reassembles.
	cli := newClient(t, e)
	wch := cli.Watch(context.Background(), "k", clientv3.WithPrefix(), clientv3.WithFragment(), clientv3.WithRev(1))
	wr := <-wch
	if len(wr.Events) != 10 {
		t.Fatalf("clientv3 got %d events", len(wr.Events))
	}
}

func TestRequireLeader(t *testing.T) {
	leader := true
	var mu = make(chan struct{}, 1)
	mu <- struct{}{}
	hasLeader := func() bool { <-mu; defer func() { mu <- struct{}{} }(); return leader }
	setLeader := func(v bool) { <-mu; leader = v; mu <- struct{}{} }
	e := newEnv(t, HubConfig{HasLeader: hasLeader, LeaderCheckInterval: 10 * time.Millisecond})
	cc := e.dial()
	ctx := metadata.AppendToOutgoingContext(context.Background(), rpctypes.MetadataRequireLeaderKey, rpctypes.MetadataHasLeader)

	s, err := pb.NewWatchClient(cc).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: createReq("a", "", 0)}}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Recv(); err != nil || !r.Created {
		t.Fatalf("%v %v", r, err)
	}
	setLeader(false)
	if _, err := s.Recv(); err == nil || err.Error() != rpctypes.ErrGRPCNoLeader.Error() {
		t.Fatalf("want no leader, got %v", err)
	}
	// New streams are refused; without the metadata they are served.
	s, _ = pb.NewWatchClient(cc).Watch(ctx)
	if _, err := s.Recv(); err == nil || err.Error() != rpctypes.ErrGRPCNoLeader.Error() {
		t.Fatalf("want no leader, got %v", err)
	}
	ts := e.stream(cc, false)
	ts.create(createReq("a", "", 0))
}

// TestStalledWatcher: a client that never reads must not block Notify or a
// watcher on another connection; when it resumes it gets every event, in
// order, exactly once.
func TestStalledWatcher(t *testing.T) {
	e := newEnv(t, HubConfig{ChanSize: 4, CatchUpBatch: 50})
	small := []grpc.DialOption{grpc.WithInitialWindowSize(64 << 10), grpc.WithInitialConnWindowSize(64 << 10)}
	stalled := e.stream(e.dial(small...), true)
	live := e.stream(e.dial(), false)
	// The stalled client reads nothing until told to. Its create may reach
	// the server after the first writes: start at 1 so it wants them all.
	stalled.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: createReq("k", "l", 1)}})
	lc := live.create(createReq("k", "l", 0))

	const n = 2000
	val := strings.Repeat("v", 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			write(e.src, e.hub, put(fmt.Sprintf("k%d", i%7), val), put(fmt.Sprintf("k%d", (i+1)%7), val))
		}
	}()
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("Notify blocked behind a stalled watcher")
	}
	got, _ := live.collect(lc.WatchId, func(g []ev) bool { return len(g) >= 2*n })
	checkSeq(t, got, n)
	eventually(t, "stalled watcher to be marked slow", func() bool { _, slow := e.hub.Stats(); return slow == 1 })

	close(stalled.start)
	c := stalled.next()
	if !c.Created {
		t.Fatalf("first response %v", c)
	}
	got, _ = stalled.collect(c.WatchId, func(g []ev) bool { return len(g) >= 2*n })
	checkSeq(t, got, n)
	eventually(t, "stalled watcher to sync", func() bool { _, slow := e.hub.Stats(); return slow == 0 })
	write(e.src, e.hub, put("k0", "last"))
	got, _ = stalled.collect(c.WatchId, func(g []ev) bool { return len(g) >= 1 })
	if got[0].Rev != n+1 || len(got) != 1 {
		t.Fatalf("after sync got %v", got)
	}
}

// checkSeq checks events of revisions 1..n, two per revision, in order, once.
func checkSeq(t *testing.T, got []ev, n int) {
	t.Helper()
	if len(got) != 2*n {
		t.Fatalf("got %d events, want %d", len(got), 2*n)
	}
	for i, e := range got {
		if e.Rev != int64(i/2+1) {
			t.Fatalf("event %d has rev %d (want %d)", i, e.Rev, i/2+1)
		}
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	e := newEnv(t, HubConfig{ChanSize: 2})
	cc := e.dial(grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	cc2 := e.dial()
	// Warm up connections so their goroutines are in the baseline.
	for _, c := range []*grpc.ClientConn{cc, cc2} {
		ts := e.stream(c, false)
		ts.create(createReq("warm", "", 0))
		ts.cancel()
	}
	eventually(t, "warm-up streams to end", func() bool { w, _ := e.hub.Stats(); return w == 0 })
	base := runtime.NumGoroutine()

	var streams []*tstream
	for i := range 20 {
		c := cc2
		if i%2 == 0 {
			c = cc
		}
		ts := e.stream(c, i%2 == 0) // half of them never read
		for j := range 3 {
			ts.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: createReq(fmt.Sprintf("k%d", j), "", 0)}})
		}
		streams = append(streams, ts)
	}
	eventually(t, "60 watchers", func() bool { w, _ := e.hub.Stats(); return w == 60 })
	val := strings.Repeat("v", 4096)
	for range 100 {
		write(e.src, e.hub, put("k0", val), put("k1", val), put("k2", val))
	}
	for _, ts := range streams {
		ts.cancel()
	}
	eventually(t, "watchers freed", func() bool { w, s := e.hub.Stats(); return w == 0 && s == 0 })
	deadline := time.Now().Add(waitFor)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d > baseline %d\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}

func TestClientv3(t *testing.T) {
	e := newEnv(t, HubConfig{})
	cli := newClient(t, e)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wch := cli.Watch(ctx, "p/", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithCreatedNotify())
	if wr := <-wch; !wr.Created {
		t.Fatalf("%+v", wr)
	}
	write(e.src, e.hub, put("p/a", "1"))
	write(e.src, e.hub, put("q", "1"))
	write(e.src, e.hub, put("p/a", "2"))
	var got []string
	for len(got) < 2 {
		wr := <-wch
		if wr.Err() != nil {
			t.Fatal(wr.Err())
		}
		for _, ev := range wr.Events {
			prev := ""
			if ev.PrevKv != nil {
				prev = string(ev.PrevKv.Value)
			}
			got = append(got, fmt.Sprintf("%d %s=%s prev=%s", ev.Kv.ModRevision, ev.Kv.Key, ev.Kv.Value, prev))
		}
	}
	if want := []string{"1 p/a=1 prev=", "3 p/a=2 prev=1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v", got)
	}
	if err := cli.RequestProgress(ctx); err != nil {
		t.Fatal(err)
	}
	wr := <-wch
	if !wr.IsProgressNotify() || wr.Header.Revision != 3 {
		t.Fatalf("progress: %+v", wr)
	}
}

func newClient(t *testing.T, e *env) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.addr()}, DialTimeout: 5 * time.Second, Logger: nil})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// A client that resumes a watch on a member that is behind it (start
// revision beyond the member's revision, as after reconnecting from a member
// that delivered more) must never be told a progress revision below what it
// already received: progress notifications and RequestProgress answers wait
// until the member reaches the watch's start. (Found by the chaos suite.)
func TestProgressNeverGoesBackwardsOnALaggingMember(t *testing.T) {
	e := newEnv(t, HubConfig{ProgressNotifyInterval: 10 * time.Millisecond})
	for range 3 {
		write(e.src, e.hub, put("a", "v")) // member at rev 3
	}
	ts := e.stream(nil, false)
	// The client already received everything through rev 5 elsewhere.
	c := ts.create(&pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 6, ProgressNotify: true})
	ts.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}})
	write(e.src, e.hub, put("z", "v")) // 4
	write(e.src, e.hub, put("z", "v")) // 5: the member has caught up with the client
	for {
		r := ts.next()
		if r.Header.Revision < 5 {
			t.Fatalf("progress went backwards: watch %d got revision %d after the client saw 5", r.WatchId, r.Header.Revision)
		}
		if r.WatchId == -1 || r.WatchId == c.WatchId {
			return // a progress report at or beyond 5
		}
	}
}
