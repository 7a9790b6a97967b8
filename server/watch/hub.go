package watch

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// Source is the event history the hub reads when a watcher is behind. The
// MVCC store satisfies it.
// PrevValueLoader is implemented by a Source whose Notify events may carry a
// PrevKv without its value (Value == nil means "not loaded"); the hub loads
// it only for watchers that asked for prev_kv.
type PrevValueLoader interface {
	LoadPrevValue(kv *mvccpb.KeyValue) *mvccpb.KeyValue
}

type Source interface {
	// Rev returns the last published revision.
	Rev() int64
	// CompactRev returns the compacted revision. History must serve any
	// fromRev >= CompactRev() (etcd semantics: compaction at R keeps R
	// readable; a watch from R is valid, a watch from R-1 is compacted).
	CompactRev() int64
	// History returns the events with main revision in [fromRev, toRev] on
	// keys in [key, end) — end nil means the single key, end "\x00" every key
	// >= key — in ascending revision order, PrevKv filled, at most about limit
	// events but never splitting one revision's events. next is the revision
	// to continue from (toRev+1 when everything up to toRev was returned).
	// The hub never mutates the returned events. Any error is fatal to the
	// watcher that asked (it is canceled; with compact_revision if fromRev is
	// then at or below CompactRev()).
	History(fromRev, toRev int64, key, end []byte, limit int) (events []*mvccpb.Event, next int64, err error)
}

// HubConfig configures a Hub. Zero values take the defaults.
type HubConfig struct {
	// ProgressNotifyInterval is how often a synced watcher created with
	// progress_notify that received no events gets an empty progress
	// response. Default 10m (etcd's default).
	ProgressNotifyInterval time.Duration
	// MaxResponseBytes is the fragmentation threshold for watchers that asked
	// for fragment, and the size at which catch-up responses are split (at
	// revision boundaries) for all watchers. Default 1.5 MiB.
	MaxResponseBytes int
	// ChanSize bounds, per stream, the event slots queued for sending: a
	// slot is one catch-up response, or every live response of one revision
	// on the stream. When full, a watcher is moved to unsynced instead of
	// blocking Notify.
	// Default 128. It also bounds queued control responses (created,
	// canceled) before the stream stops reading requests.
	ChanSize int
	// CatchUpBatch is the limit passed to Source.History for one catch-up
	// step of one watcher. Default 1000.
	CatchUpBatch int
	// SyncRetryInterval is the fallback period at which unsynced watchers are
	// retried (they are also retried as soon as their stream drains).
	// Default 100ms.
	SyncRetryInterval time.Duration
	// HasLeader, if set, reports whether this member currently knows a raft
	// leader. A stream whose client set gRPC metadata hasleader=true
	// (clientv3.WithRequireLeader) is refused with rpctypes.ErrGRPCNoLeader
	// when there is no leader, and ended with it when a periodic check (every
	// LeaderCheckInterval) finds none.
	HasLeader func() bool
	// LeaderCheckInterval: see HasLeader. Default 1s.
	LeaderCheckInterval time.Duration
	// OnWideFanOut, if set, is called (under the hub's lock, so it must not
	// call the hub) before a revision's events are handed to at least
	// WideFanOut watchers: the stream senders about to encode and write
	// them are work for every core (tenure serve: procs.Boost).
	OnWideFanOut func()
	// WideFanOut: see OnWideFanOut. Default 256.
	WideFanOut int
	// OnFirstWatcher, if set, is called (under the hub's lock, so it must
	// not call the hub) when a watcher is created while the hub has none:
	// tenure serve tells the raft leader at once that this member now
	// needs every commit promptly (raftnode.Node.SayEager), rather than at
	// its next periodic reminder, which would let the first events after
	// the watch was created lag by thrifty replication's delay.
	OnFirstWatcher func()
}

// Validate reports every invalid field.
func (c HubConfig) Validate() error {
	var errs []error
	if c.ProgressNotifyInterval < 0 {
		errs = append(errs, fmt.Errorf("watch: HubConfig.ProgressNotifyInterval must be >= 0, got %v", c.ProgressNotifyInterval))
	}
	if c.MaxResponseBytes < 0 {
		errs = append(errs, fmt.Errorf("watch: HubConfig.MaxResponseBytes must be >= 0, got %d", c.MaxResponseBytes))
	}
	if c.ChanSize < 0 {
		errs = append(errs, fmt.Errorf("watch: HubConfig.ChanSize must be >= 0, got %d", c.ChanSize))
	}
	if c.CatchUpBatch < 0 {
		errs = append(errs, fmt.Errorf("watch: HubConfig.CatchUpBatch must be >= 0, got %d", c.CatchUpBatch))
	}
	if c.SyncRetryInterval < 0 {
		errs = append(errs, fmt.Errorf("watch: HubConfig.SyncRetryInterval must be >= 0, got %v", c.SyncRetryInterval))
	}
	if c.LeaderCheckInterval < 0 {
		errs = append(errs, fmt.Errorf("watch: HubConfig.LeaderCheckInterval must be >= 0, got %v", c.LeaderCheckInterval))
	}
	if c.WideFanOut < 0 {
		errs = append(errs, fmt.Errorf("watch: HubConfig.WideFanOut must be >= 0, got %d", c.WideFanOut))
	}
	return errors.Join(errs...)
}

func (c HubConfig) withDefaults() HubConfig {
	if c.ProgressNotifyInterval <= 0 {
		c.ProgressNotifyInterval = 10 * time.Minute
	}
	if c.MaxResponseBytes <= 0 {
		c.MaxResponseBytes = 3 << 19 // 1.5 MiB
	}
	if c.ChanSize <= 0 {
		c.ChanSize = 128
	}
	if c.WideFanOut <= 0 {
		c.WideFanOut = 256
	}
	if c.CatchUpBatch <= 0 {
		c.CatchUpBatch = 1000
	}
	if c.SyncRetryInterval <= 0 {
		c.SyncRetryInterval = 100 * time.Millisecond
	}
	if c.LeaderCheckInterval <= 0 {
		c.LeaderCheckInterval = time.Second
	}
	return c
}

type wstate uint8

const (
	stSynced wstate = iota
	stUnsynced
	stRemoved
)

// watcher is one watch on one stream. Fields after the blank line are
// guarded by Hub.mu.
type watcher struct {
	id       int64
	st       *stream
	key      []byte
	end      []byte // nil: single key; {0}: every key >= key; else [key, end)
	fromKey  bool
	noPut    bool
	noDelete bool
	prevKV   bool
	progress bool
	fragment bool

	state wstate
	set   *wset
	pos   int
	// minRev: synced — the first revision it may receive (> Hub.rev for a
	// future start); unsynced — the next revision to read from History.
	minRev        int64
	sentSinceTick bool
	pend          []*mvccpb.Event // Notify scratch
	tnode         *inode          // in Hub.rangeW (synced range watcher)
}

func (w *watcher) matches(key []byte) bool {
	if w.end == nil {
		return bytes.Equal(key, w.key)
	}
	if bytes.Compare(key, w.key) < 0 {
		return false
	}
	return w.fromKey || bytes.Compare(key, w.end) < 0
}

func (w *watcher) wants(ev *mvccpb.Event) bool {
	switch ev.Type {
	case mvccpb.Event_PUT:
		return !w.noPut
	case mvccpb.Event_DELETE:
		return !w.noDelete
	}
	return true
}

// wset is an unordered set of watchers with O(1) add and remove.
type wset struct{ ws []*watcher }

func (s *wset) add(w *watcher) {
	w.set, w.pos = s, len(s.ws)
	s.ws = append(s.ws, w)
}

func (s *wset) remove(w *watcher) {
	last := len(s.ws) - 1
	s.ws[w.pos] = s.ws[last]
	s.ws[w.pos].pos = w.pos
	s.ws[last] = nil
	s.ws = s.ws[:last]
	w.set = nil
}

// Hub fans published events out to watchers. See the package doc.
type Hub struct {
	src Source
	cfg HubConfig
	lg  *slog.Logger
	// prevLoader is src when it can read a previous value that Notify's
	// events carry without one (mvcc.Store does).
	prevLoader PrevValueLoader

	mu  sync.Mutex
	rev int64
	// deferredProgress: some stream's WatchProgressRequest waits for this
	// member to reach a revision one of its watchers started beyond.
	deferredProgress bool
	keyW             map[string]*wset // synced single-key watchers
	rangeW           itree            // synced range and from-key watchers
	unsynced         wset
	streams          map[*stream]struct{}
	nWatch           int
	closed           bool
	touched          []*watcher // Notify scratch
	touchedSt        []*stream  // Notify scratch

	kickc chan struct{}
	donec chan struct{}
	wg    sync.WaitGroup
}

// NewHub returns a running hub positioned at src.Rev(). Non-positive config
// values take their defaults (see HubConfig.Validate to reject them).
func NewHub(src Source, cfg HubConfig, lg *slog.Logger) *Hub {
	if lg == nil {
		lg = slog.Default()
	}
	pl, _ := src.(PrevValueLoader)
	h := &Hub{
		prevLoader: pl,
		src:        src,
		cfg:        cfg.withDefaults(),
		lg:         lg,
		rev:        src.Rev(),
		keyW:       make(map[string]*wset),
		streams:    make(map[*stream]struct{}),
		kickc:      make(chan struct{}, 1),
		donec:      make(chan struct{}),
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		h.syncLoop()
	}()
	return h
}

// Close stops the hub: every open stream ends with rpctypes.ErrGRPCStopped
// and the background catch-up loop exits. Notify after Close is a no-op.
func (h *Hub) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	for st := range h.streams {
		st.out.close()
	}
	h.mu.Unlock()
	close(h.donec)
	h.wg.Wait()
}

// Stats returns the number of watchers and how many of them are unsynced
// (behind: catching up from history).
func (h *Hub) Stats() (watchers, slow int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nWatch, len(h.unsynced.ws)
}

func (h *Hub) kick() {
	select {
	case h.kickc <- struct{}{}:
	default:
	}
}

// Notify publishes revision rev with its events (all with main revision rev;
// possibly none). It is called by the apply loop after rev is visible in the
// Source, in increasing rev order, and never blocks on watchers: a watcher
// whose stream queue is full becomes unsynced and catches up from History.
// The hub does not mutate events; watchers that did not ask for prev_kv get
// copies without PrevKv.
func (h *Hub) Notify(rev int64, events []*mvccpb.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	if rev <= h.rev {
		h.lg.Warn("watch: Notify with a revision not above the last one; ignored", "rev", rev, "last", h.rev)
		return
	}
	if rev != h.rev+1 && h.nWatch > 0 {
		// A revision was never notified: nobody may skip it. Every synced
		// watcher that could have wanted it catches up from History.
		h.lg.Warn("watch: Notify skipped revisions; resyncing watchers from history", "last", h.rev, "rev", rev)
		h.resyncFrom(h.rev + 1)
		h.rev = rev
		return
	}
	h.rev = rev
	if h.deferredProgress {
		h.retryDeferredProgress()
	}
	if len(events) == 0 || h.nWatch == 0 {
		return
	}
	var stripped, filled []*mvccpb.Event
	touched := h.touched[:0]
	add := func(w *watcher, i int) {
		ev := events[i]
		if rev < w.minRev || !w.wants(ev) {
			return
		}
		if !w.prevKV && ev.PrevKv != nil {
			if stripped == nil {
				stripped = make([]*mvccpb.Event, len(events))
			}
			if stripped[i] == nil {
				stripped[i] = &mvccpb.Event{Type: ev.Type, Kv: ev.Kv}
			}
			ev = stripped[i]
		} else if w.prevKV && ev.PrevKv != nil && ev.PrevKv.Value == nil && h.prevLoader != nil {
			// The store leaves the previous value unread on the write path
			// (a nil Value means "not loaded"); only prev_kv watchers pay for it.
			if filled == nil {
				filled = make([]*mvccpb.Event, len(events))
			}
			if filled[i] == nil {
				filled[i] = &mvccpb.Event{Type: ev.Type, Kv: ev.Kv, PrevKv: h.prevLoader.LoadPrevValue(ev.PrevKv)}
			}
			ev = filled[i]
		}
		if len(w.pend) == 0 {
			touched = append(touched, w)
		}
		w.pend = append(w.pend, ev)
	}
	for i, ev := range events {
		if ev == nil || ev.Kv == nil {
			continue
		}
		if s := h.keyW[string(ev.Kv.Key)]; s != nil {
			for _, w := range s.ws {
				add(w, i)
			}
		}
		if h.rangeW.n > 0 {
			h.rangeW.stab(ev.Kv.Key, func(w *watcher) { add(w, i) })
		}
	}
	if len(touched) >= h.cfg.WideFanOut && h.cfg.OnWideFanOut != nil {
		h.cfg.OnWideFanOut()
	}
	// Group the responses by stream; watchers with the same events (all the
	// watchers of one key, usually) share one Events slice.
	sts := h.touchedSt[:0]
	var last []*mvccpb.Event
	var shared *sharedEvents
	for j, w := range touched {
		evs := last
		if !sameEvents(w.pend, last) {
			evs = make([]*mvccpb.Event, len(w.pend))
			copy(evs, w.pend)
			last = evs
			shared = &sharedEvents{}
		}
		clear(w.pend)
		w.pend = w.pend[:0]
		touched[j] = nil
		st := w.st
		if len(st.pendWs) == 0 {
			sts = append(sts, st)
		}
		st.pendWs = append(st.pendWs, w)
		st.pendEv = append(st.pendEv, evs)
		st.pendIt = append(st.pendIt, item{rev: rev, frag: w.fragment, shared: shared})
	}
	h.touched = touched[:0]
	moved := false
	for j, st := range sts {
		sts[j] = nil
		// The stream's responses of this revision are one allocation (it
		// lives as long as the stream's queue holds any of them).
		resps := make([]pbWatchResponse, len(st.pendIt))
		for k := range st.pendIt {
			resps[k].WatchId, resps[k].Events = st.pendWs[k].id, st.pendEv[k]
			st.pendIt[k].resp = &resps[k]
		}
		// One event slot for the whole revision on this stream.
		st.pendIt[len(st.pendIt)-1].counted = true
		ok := st.out.tryPush(st.pendIt...)
		for _, w := range st.pendWs {
			if ok {
				w.sentSinceTick = true
			} else {
				// Slow: it will read this revision (and later ones) from History.
				h.toUnsynced(w, rev)
				moved = true
			}
		}
		clear(st.pendWs)
		st.pendWs = st.pendWs[:0]
		clear(st.pendIt)
		st.pendIt = st.pendIt[:0]
		clear(st.pendEv)
		st.pendEv = st.pendEv[:0]
	}
	h.touchedSt = sts[:0]
	if moved {
		h.kick()
	}
}

// sameEvents reports whether a and b hold the same event pointers.
func sameEvents(a, b []*mvccpb.Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// resyncFrom moves every synced watcher that could receive revision from
// to unsynced; h.mu held.
func (h *Hub) resyncFrom(from int64) {
	var ws []*watcher
	for _, s := range h.keyW {
		ws = append(ws, s.ws...)
	}
	ws = h.rangeW.all(ws)
	for _, w := range ws {
		h.toUnsynced(w, max(from, w.minRev))
	}
	h.kick()
}

// addSynced, toUnsynced, toSynced and remove move a watcher between sets;
// h.mu held.
func (h *Hub) addSynced(w *watcher) {
	w.state = stSynced
	if w.end == nil {
		s := h.keyW[string(w.key)]
		if s == nil {
			s = &wset{}
			h.keyW[string(w.key)] = s
		}
		s.add(w)
		return
	}
	h.rangeW.add(w)
}

func (h *Hub) detach(w *watcher) {
	if w.tnode != nil {
		h.rangeW.remove(w)
		return
	}
	if w.set == nil {
		return
	}
	s := w.set
	s.remove(w)
	if w.state == stSynced && w.end == nil && len(s.ws) == 0 {
		delete(h.keyW, string(w.key))
	}
	if w.state == stUnsynced {
		w.st.unsynced--
	}
}

func (h *Hub) toUnsynced(w *watcher, from int64) {
	h.detach(w)
	w.state = stUnsynced
	w.minRev = from
	h.unsynced.add(w)
	w.st.unsynced++
}

func (h *Hub) toSynced(w *watcher) {
	h.detach(w)
	h.addSynced(w)
	h.maybeProgressAll(w.st)
}

func (h *Hub) remove(w *watcher) {
	h.detach(w)
	w.state = stRemoved
	delete(w.st.watchers, w.id)
	h.nWatch--
	h.maybeProgressAll(w.st)
}

// maybeProgressAll answers a deferred WatchProgressRequest once every watcher
// of the stream is synced; h.mu held.
func (h *Hub) maybeProgressAll(st *stream) {
	if !st.progressPending || st.unsynced != 0 {
		return
	}
	for _, w := range st.watchers {
		if h.ahead(w) {
			h.deferredProgress = true // answered by Notify once this member catches up
			return
		}
	}
	st.progressPending = false
	st.out.push(item{resp: &pbWatchResponse{WatchId: -1}, rev: h.rev})
}

// ahead reports whether w was created from a revision this member has not
// reached yet (a client resuming here after another member delivered more):
// a progress report at h.rev would go backwards for it; h.mu held.
func (h *Hub) ahead(w *watcher) bool { return w.minRev > h.rev+1 }

// retryDeferredProgress answers WatchProgressRequests deferred because a
// watcher was ahead of this member; h.mu held.
func (h *Hub) retryDeferredProgress() {
	h.deferredProgress = false
	for st := range h.streams {
		if st.progressPending {
			h.maybeProgressAll(st)
		}
	}
}

// cancelCompacted cancels w because its next revision is compacted; h.mu held.
func (h *Hub) cancelCompacted(w *watcher, compactRev int64) {
	h.remove(w)
	w.st.out.push(item{resp: &pbWatchResponse{
		WatchId:         w.id,
		Canceled:        true,
		CompactRevision: compactRev,
		CancelReason:    reasonCompacted,
	}, rev: h.rev})
}

func (h *Hub) syncLoop() {
	t := time.NewTicker(h.cfg.SyncRetryInterval)
	defer t.Stop()
	for {
		if h.syncPass() {
			select {
			case <-h.donec:
				return
			default:
			}
			continue
		}
		select {
		case <-h.donec:
			return
		case <-h.kickc:
		case <-t.C:
		}
	}
}

type syncTask struct {
	w    *watcher
	from int64
}

// syncPass advances every unsynced watcher whose stream has room by one
// History chunk. It reports whether anything moved.
func (h *Hub) syncPass() (progressed bool) {
	h.mu.Lock()
	if h.closed || len(h.unsynced.ws) == 0 {
		h.mu.Unlock()
		return false
	}
	target := h.rev
	compact := h.src.CompactRev()
	var tasks []syncTask
	var compacted, caughtUp []*watcher
	for _, w := range h.unsynced.ws {
		switch {
		case w.minRev < compact:
			compacted = append(compacted, w)
		case w.minRev > target:
			caughtUp = append(caughtUp, w)
		case w.st.out.full():
			w.st.wantKick.Store(true)
		default:
			tasks = append(tasks, syncTask{w, w.minRev})
		}
	}
	for _, w := range compacted {
		h.cancelCompacted(w, compact)
	}
	for _, w := range caughtUp {
		h.toSynced(w)
	}
	h.mu.Unlock()
	progressed = len(compacted)+len(caughtUp) > 0

	for _, t := range tasks {
		w := t.w
		evs, next, err := h.src.History(t.from, target, w.key, w.end, h.cfg.CatchUpBatch)
		var items []item
		if err == nil {
			if next <= t.from && len(evs) == 0 {
				err = fmt.Errorf("watch: Source.History(%d, %d) made no progress (next %d)", t.from, target, next)
			} else {
				items = h.catchUpItems(w, evs, next, target)
			}
		}
		h.mu.Lock()
		if w.state != stUnsynced || w.minRev != t.from || h.closed {
			h.mu.Unlock()
			continue
		}
		if err != nil {
			if cr := h.src.CompactRev(); t.from <= cr {
				h.cancelCompacted(w, cr)
			} else {
				h.lg.Warn("watch: history read failed; canceling watcher", "watch_id", w.id, "from", t.from, "err", err)
				h.remove(w)
				w.st.out.push(item{resp: &pbWatchResponse{WatchId: w.id, Canceled: true, CancelReason: err.Error()}, rev: h.rev})
			}
			h.mu.Unlock()
			progressed = true
			continue
		}
		if len(items) > 0 && !w.st.out.tryPush(items...) {
			w.st.wantKick.Store(true)
			h.mu.Unlock()
			continue
		}
		if len(items) > 0 {
			w.sentSinceTick = true
		}
		if next <= t.from {
			next = t.from + 1
		}
		w.minRev = next
		if w.minRev > h.rev {
			h.toSynced(w)
		}
		h.mu.Unlock()
		progressed = true
	}
	return progressed
}

// catchUpItems turns one History chunk into responses for w: filtered,
// PrevKv stripped unless asked for, split at revision boundaries when a
// response would exceed MaxResponseBytes. The header revision of each
// response is the revision w has been delivered through.
func (h *Hub) catchUpItems(w *watcher, evs []*mvccpb.Event, next, target int64) []item {
	var items []item
	var cur []*mvccpb.Event
	size := 0
	flush := func(through int64) {
		if len(cur) > 0 {
			items = append(items, item{resp: newEventsResp(w.id, cur), rev: through, frag: w.fragment, counted: true})
		}
		cur, size = nil, 0
	}
	for _, ev := range evs {
		if ev == nil || ev.Kv == nil || !w.wants(ev) {
			continue
		}
		rev := ev.Kv.ModRevision
		if size >= h.cfg.MaxResponseBytes && len(cur) > 0 && cur[len(cur)-1].Kv.ModRevision != rev {
			flush(cur[len(cur)-1].Kv.ModRevision)
		}
		if !w.prevKV && ev.PrevKv != nil {
			ev = &mvccpb.Event{Type: ev.Type, Kv: ev.Kv}
		}
		cur = append(cur, ev)
		size += proto.Size(ev)
	}
	through := target
	if next <= target {
		through = next - 1
	}
	flush(through)
	return items
}
