package watch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

type pbWatchResponse = pb.WatchResponse

// Cancel reasons sent on the wire. They are etcd's strings, so that clients
// matching on them behave the same against Tenure.
const (
	reasonDuplicateID = "mvcc: duplicate watch ID provided on the WatchStream"
	reasonEmptyRange  = "mvcc: watcher range is empty"
)

var reasonCompacted = rpctypes.ErrCompacted.Error()

func newEventsResp(id int64, evs []*mvccpb.Event) *pb.WatchResponse {
	return &pb.WatchResponse{WatchId: id, Events: evs}
}

// item is one queued response; its header is filled at send time.
type item struct {
	resp    *pb.WatchResponse
	rev     int64 // header revision
	frag    bool  // the watcher asked for fragmentation
	counted bool  // takes one of the ChanSize event slots
	ctrl    bool  // a control response (push)
	// shared, if set, encodes resp.Events once for every response (of any
	// stream) that carries the same Events slice.
	shared *sharedEvents
}

// sharedEvents is the wire encoding of one Events slice, made once by the
// first send loop that needs it and reused by every response carrying it:
// with thousands of watchers on a key, marshaling each event once instead of
// once per watcher.
type sharedEvents struct {
	once sync.Once
	raw  []byte
}

// encode returns evs as the bytes of WatchResponse field events (11), as
// proto.Marshal would write them.
func (se *sharedEvents) encode(evs []*mvccpb.Event) []byte {
	se.once.Do(func() {
		n := 0
		for _, ev := range evs {
			n += protowire.SizeTag(eventsField) + protowire.SizeBytes(proto.Size(ev))
		}
		b := make([]byte, 0, n)
		for _, ev := range evs {
			b = protowire.AppendTag(b, eventsField, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(proto.Size(ev)))
			b, _ = proto.MarshalOptions{}.MarshalAppend(b, ev)
		}
		se.raw = b
	})
	return se.raw
}

// eventsField is the field number of WatchResponse.events.
const eventsField protowire.Number = 11

// outbox is a stream's send queue. Event responses are bounded (tryPush
// fails when full, never blocks); control responses are always accepted
// (their producers are bounded: the recv loop waits for room first, and the
// hub pushes at most one cancel and one progress per watcher at a time).
//
// An event slot is one catch-up response, or all of one revision's live
// responses for the stream (Notify pushes them together, the last one
// counted): a stream carrying thousands of watchers of one key queues one
// slot per revision, not one per watcher, so it is not declared slow (and
// sent to History) merely for having many watchers.
type outbox struct {
	cap int

	mu     sync.Mutex
	q      []item
	head   int
	events int
	ctrl   int
	closed bool

	wake  chan struct{} // to the send loop
	space chan struct{} // to the recv loop waiting for control room
}

func newOutbox(capacity int) *outbox {
	return &outbox{cap: capacity, wake: make(chan struct{}, 1), space: make(chan struct{}, 1)}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (o *outbox) full() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.events >= o.cap
}

// tryPush appends all items or none. Counted items are refused when they do
// not fit (a batch larger than the capacity fits an empty queue). After
// close it drops silently and reports success.
func (o *outbox) tryPush(its ...item) bool {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return true
	}
	n, c := 0, 0
	for _, it := range its {
		if it.counted {
			n++
		}
		if it.ctrl {
			c++
		}
	}
	if n > 0 && o.events > 0 && o.events+n > o.cap {
		o.mu.Unlock()
		return false
	}
	o.q = append(o.q, its...)
	o.events += n
	o.ctrl += c
	o.mu.Unlock()
	signal(o.wake)
	return true
}

// push appends a control item unconditionally.
func (o *outbox) push(it item) {
	it.counted, it.ctrl = false, true
	o.tryPush(it)
}

func (o *outbox) pop() (item, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.head == len(o.q) {
		o.q, o.head = o.q[:0], 0
		return item{}, false
	}
	it := o.q[o.head]
	o.q[o.head] = item{}
	o.head++
	if it.counted {
		o.events--
	}
	if it.ctrl {
		o.ctrl--
		signal(o.space)
	}
	return it, true
}

func (o *outbox) lowWater() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.events <= o.cap/2
}

// waitCtrlRoom blocks until fewer than cap control responses are queued; it
// returns false if the outbox closed or done fired.
func (o *outbox) waitCtrlRoom(done <-chan struct{}) bool {
	for {
		o.mu.Lock()
		closed, ok := o.closed, o.ctrl < o.cap
		o.mu.Unlock()
		if closed {
			return false
		}
		if ok {
			return true
		}
		select {
		case <-o.space:
		case <-done:
			return false
		}
	}
}

func (o *outbox) close() {
	o.mu.Lock()
	o.closed = true
	o.q, o.head, o.events, o.ctrl = nil, 0, 0, 0
	o.mu.Unlock()
	signal(o.wake)
	signal(o.space)
}

// stream is one Watch RPC. Fields after the blank line are guarded by Hub.mu.
type stream struct {
	out      *outbox
	wantKick atomic.Bool // an unsynced watcher waits for room in out

	watchers        map[int64]*watcher
	nextID          int64
	unsynced        int
	progressPending bool
	pendWs          []*watcher // Notify scratch: this revision's watchers
	pendIt          []item     // and their responses
	pendEv          [][]*mvccpb.Event
}

type server struct {
	pb.UnimplementedWatchServer
	h      *Hub
	header func(rev int64) *pb.ResponseHeader
}

// Server returns the etcd v3 Watch gRPC service backed by h. header fills
// cluster_id, member_id and raft_term for a response at the given revision;
// nil yields headers with only the revision.
func (h *Hub) Server(header func(rev int64) *pb.ResponseHeader) pb.WatchServer {
	if header == nil {
		header = func(rev int64) *pb.ResponseHeader { return &pb.ResponseHeader{Revision: rev} }
	}
	return &server{h: h, header: header}
}

func requiresLeader(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return false
	}
	for _, v := range md.Get(rpctypes.MetadataRequireLeaderKey) {
		if v == rpctypes.MetadataHasLeader {
			return true
		}
	}
	return false
}

// Watch serves one bidirectional watch stream.
func (s *server) Watch(gs grpc.BidiStreamingServer[pb.WatchRequest, pb.WatchResponse]) error {
	h := s.h
	ctx := gs.Context()
	needLeader := requiresLeader(ctx) && h.cfg.HasLeader != nil
	if needLeader && !h.cfg.HasLeader() {
		return rpctypes.ErrGRPCNoLeader
	}
	st := &stream{out: newOutbox(h.cfg.ChanSize), watchers: make(map[int64]*watcher)}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return rpctypes.ErrGRPCStopped
	}
	h.streams[st] = struct{}{}
	h.mu.Unlock()
	defer h.closeStream(st)

	stopRecv := make(chan struct{})
	defer close(stopRecv)
	recvErr := make(chan error, 1)
	go func() { recvErr <- s.recvLoop(gs, st, stopRecv) }()

	progress := time.NewTicker(h.cfg.ProgressNotifyInterval)
	defer progress.Stop()
	var leaderC <-chan time.Time
	if needLeader {
		t := time.NewTicker(h.cfg.LeaderCheckInterval)
		defer t.Stop()
		leaderC = t.C
	}
	// Responses at one revision share a header (gRPC marshals a response
	// before Send returns, so sharing it is safe).
	var hdr *pb.ResponseHeader
	for {
		// Send everything queued, checking the other events between items.
		for {
			it, ok := st.out.pop()
			if !ok {
				break
			}
			if hdr == nil || hdr.Revision != it.rev {
				hdr = s.header(it.rev)
			}
			if err := s.send(gs, it, hdr); err != nil {
				return err
			}
			if it.counted && st.wantKick.Load() && st.out.lowWater() {
				st.wantKick.Store(false)
				h.kick()
			}
			select {
			case <-ctx.Done():
				return rpctypes.ErrGRPCWatchCanceled
			case <-h.donec:
				return rpctypes.ErrGRPCStopped
			default:
			}
		}
		hdr = nil // the next batch gets a fresh term and leader
		select {
		case <-st.out.wake:
		case <-progress.C:
			h.progressTick(st)
		case <-leaderC:
			if !h.cfg.HasLeader() {
				return rpctypes.ErrGRPCNoLeader
			}
		case err := <-recvErr:
			if err != nil {
				if errors.Is(err, context.Canceled) {
					return rpctypes.ErrGRPCWatchCanceled
				}
				return err
			}
			recvErr = nil // client half-closed: keep sending until it goes away
		case <-ctx.Done():
			return rpctypes.ErrGRPCWatchCanceled
		case <-h.donec:
			return rpctypes.ErrGRPCStopped
		}
	}
}

func (s *server) send(gs grpc.BidiStreamingServer[pb.WatchRequest, pb.WatchResponse], it item, hdr *pb.ResponseHeader) error {
	wr := it.resp
	wr.Header = hdr
	limit := s.h.cfg.MaxResponseBytes
	if !it.frag || len(wr.Events) < 2 || proto.Size(wr) < limit {
		if it.shared != nil && len(wr.Events) > 0 {
			// The events go out as already-encoded bytes: protobuf writes
			// a message's unknown fields verbatim, and the client decodes
			// them as field 11 like any other encoding of the events.
			raw := it.shared.encode(wr.Events)
			wr.Events = nil
			wr.ProtoReflect().SetUnknown(raw)
		}
		return gs.Send(wr)
	}
	// Fragment: each piece under the limit (a single event may exceed it),
	// fragment=true on all but the last.
	evs := wr.Events
	for len(evs) > 0 {
		cur := &pb.WatchResponse{Header: wr.Header, WatchId: wr.WatchId, Fragment: true}
		size := proto.Size(cur)
		n := 0
		for n < len(evs) {
			es := proto.Size(evs[n]) + 5 // tag + length prefix, generously
			if n > 0 && size+es >= limit {
				break
			}
			size += es
			n++
		}
		cur.Events = evs[:n:n]
		evs = evs[n:]
		if len(evs) == 0 {
			cur.Fragment = false
		}
		if err := gs.Send(cur); err != nil {
			return err
		}
	}
	return nil
}

func (s *server) recvLoop(gs grpc.BidiStreamingServer[pb.WatchRequest, pb.WatchResponse], st *stream, stop <-chan struct{}) error {
	h := s.h
	for {
		req, err := gs.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if !st.out.waitCtrlRoom(stop) {
			return nil
		}
		switch u := req.RequestUnion.(type) {
		case *pb.WatchRequest_CreateRequest:
			if u.CreateRequest != nil {
				h.create(st, u.CreateRequest)
			}
		case *pb.WatchRequest_CancelRequest:
			if u.CancelRequest != nil {
				h.cancel(st, u.CancelRequest.WatchId)
			}
		case *pb.WatchRequest_ProgressRequest:
			if u.ProgressRequest != nil {
				h.progressAll(st)
			}
		default:
			// Unknown request kinds are ignored, as etcd does.
		}
	}
}

// create registers a watcher and queues its created response (and, if its
// start is compacted, its cancel) before any of its events.
func (h *Hub) create(st *stream, cr *pb.WatchCreateRequest) {
	key := cr.Key
	if len(key) == 0 {
		key = []byte{0}
	}
	var end []byte
	fromKey := false
	switch {
	case len(cr.RangeEnd) == 0:
	case len(cr.RangeEnd) == 1 && cr.RangeEnd[0] == 0:
		end, fromKey = []byte{0}, true
	default:
		end = cr.RangeEnd
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	fail := func(reason string) {
		st.out.push(item{resp: &pb.WatchResponse{WatchId: -1, Created: true, Canceled: true, CancelReason: reason}, rev: h.rev})
	}
	if h.closed {
		return
	}
	if cr.StartRevision < 0 {
		fail(reasonCompacted) // etcd's answer to a negative start
		return
	}
	if end != nil && !fromKey && bytes.Compare(key, end) >= 0 {
		fail(reasonEmptyRange)
		return
	}
	id := cr.WatchId
	if id <= 0 { // 0 is clientv3.AutoWatchID; -1 is InvalidWatchID
		for st.watchers[st.nextID] != nil {
			st.nextID++
		}
		id = st.nextID
		st.nextID++
	} else if st.watchers[id] != nil {
		fail(reasonDuplicateID)
		return
	}
	w := &watcher{
		id: id, st: st, key: bytes.Clone(key), end: bytes.Clone(end), fromKey: fromKey,
		prevKV: cr.PrevKv, progress: cr.ProgressNotify, fragment: cr.Fragment,
	}
	for _, f := range cr.Filters {
		switch f {
		case pb.WatchCreateRequest_NOPUT:
			w.noPut = true
		case pb.WatchCreateRequest_NODELETE:
			w.noDelete = true
		}
	}
	st.watchers[id] = w
	h.nWatch++
	if h.nWatch == 1 && h.cfg.OnFirstWatcher != nil {
		h.cfg.OnFirstWatcher()
	}
	st.out.push(item{resp: &pb.WatchResponse{WatchId: id, Created: true}, rev: h.rev})

	start := cr.StartRevision
	switch {
	case start == 0 || start > h.rev:
		w.minRev = max(start, h.rev+1)
		h.addSynced(w)
	default:
		if cr := h.src.CompactRev(); start < cr {
			h.cancelCompacted(w, cr)
			return
		}
		h.toUnsynced(w, start)
		h.kick()
	}
}

func (h *Hub) cancel(st *stream, id int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := st.watchers[id]
	if w == nil || h.closed {
		return // etcd answers nothing for an unknown id
	}
	h.remove(w)
	st.out.push(item{resp: &pb.WatchResponse{WatchId: id, Canceled: true}, rev: h.rev})
}

// progressAll handles a WatchProgressRequest: a progress response with
// watch_id -1 at the current revision, sent once every watcher of the stream
// is synced (deferred until then).
func (h *Hub) progressAll(st *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	st.progressPending = true
	h.maybeProgressAll(st)
}

// progressTick sends a progress response to every synced progress_notify
// watcher of st that received no events since the previous tick.
func (h *Hub) progressTick(st *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range st.watchers {
		if !w.progress {
			continue
		}
		if w.sentSinceTick {
			w.sentSinceTick = false
			continue
		}
		// A watcher resumed on a member that is behind it (minRev beyond this
		// member's revision) would hear of a revision below what it already
		// received: progress must never go backwards, so it waits.
		if w.state == stSynced && !h.ahead(w) {
			st.out.push(item{resp: &pb.WatchResponse{WatchId: w.id}, rev: h.rev})
		}
	}
}

// closeStream frees everything the stream holds.
func (h *Hub) closeStream(st *stream) {
	h.mu.Lock()
	for _, w := range st.watchers {
		h.detach(w)
		w.state = stRemoved
		h.nWatch--
	}
	clear(st.watchers)
	delete(h.streams, st)
	h.mu.Unlock()
	st.out.close()
}
