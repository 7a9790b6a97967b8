package raftnode

import (
	"context"
	"errors"
	"io"
	"math/rand"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// MemNetwork is an in-memory network of Transports for tests: links can be
// cut, delayed or made lossy per direction.
type MemNetwork struct {
	mu       sync.Mutex
	handlers map[uint64]Handler
	urls     map[string]uint64
	cut      map[[2]uint64]bool
	delay    map[[2]uint64]time.Duration
	dropRate map[[2]uint64]float64
	tap      func(*raftpb.Message)
	rnd      *rand.Rand
}

// NewMemNetwork creates a network whose random choices come from seed.
func NewMemNetwork(seed int64) *MemNetwork {
	return &MemNetwork{
		handlers: map[uint64]Handler{},
		urls:     map[string]uint64{},
		cut:      map[[2]uint64]bool{},
		delay:    map[[2]uint64]time.Duration{},
		dropRate: map[[2]uint64]float64{},
		rnd:      rand.New(rand.NewSource(seed)),
	}
}

// Cut blocks messages from → to (one direction).
func (nw *MemNetwork) Cut(from, to uint64) {
	nw.mu.Lock()
	nw.cut[[2]uint64{from, to}] = true
	nw.mu.Unlock()
}

// Isolate cuts every link between id and the other members, both directions.
func (nw *MemNetwork) Isolate(id uint64, others ...uint64) {
	for _, o := range others {
		if o != id {
			nw.Cut(id, o)
			nw.Cut(o, id)
		}
	}
}

// Heal restores every link and removes delays and loss.
func (nw *MemNetwork) Heal() {
	nw.mu.Lock()
	nw.cut = map[[2]uint64]bool{}
	nw.delay = map[[2]uint64]time.Duration{}
	nw.dropRate = map[[2]uint64]float64{}
	nw.mu.Unlock()
}

// Delay delays messages from → to by d (plus up to d of jitter).
func (nw *MemNetwork) Delay(from, to uint64, d time.Duration) {
	nw.mu.Lock()
	nw.delay[[2]uint64{from, to}] = d
	nw.mu.Unlock()
}

// Drop drops messages from → to with probability p.
func (nw *MemNetwork) Drop(from, to uint64, p float64) {
	nw.mu.Lock()
	nw.dropRate[[2]uint64{from, to}] = p
	nw.mu.Unlock()
}

// Tap calls f with every message the network delivers (tests that check
// what crossed a link); nil removes it. f runs on delivery goroutines.
func (nw *MemNetwork) Tap(f func(*raftpb.Message)) {
	nw.mu.Lock()
	nw.tap = f
	nw.mu.Unlock()
}

func (nw *MemNetwork) tapped(m *raftpb.Message) {
	nw.mu.Lock()
	f := nw.tap
	nw.mu.Unlock()
	if f != nil {
		f(m)
	}
}

// Transport returns the transport for member id reachable at urls.
func (nw *MemNetwork) Transport(id uint64, urls []string) Transport {
	nw.mu.Lock()
	for _, u := range urls {
		nw.urls[u] = id
	}
	nw.mu.Unlock()
	return &memTransport{nw: nw, id: id}
}

func (nw *MemNetwork) handler(id uint64) Handler {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.handlers[id]
}

// reachable is whether from → to delivers at all (not cut, the receiver
// running), random drops aside.
func (nw *MemNetwork) reachable(from, to uint64) bool {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.handlers[to] != nil && !nw.cut[[2]uint64{from, to}]
}

// verdict decides the fate of one message on from → to.
func (nw *MemNetwork) verdict(from, to uint64) (h Handler, delay time.Duration, ok bool) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	k := [2]uint64{from, to}
	h = nw.handlers[to]
	if h == nil || nw.cut[k] {
		return nil, 0, false
	}
	if p := nw.dropRate[k]; p > 0 && nw.rnd.Float64() < p {
		return nil, 0, false
	}
	if d := nw.delay[k]; d > 0 {
		delay = d + time.Duration(nw.rnd.Int63n(int64(d)))
	}
	return h, delay, true
}

type memTransport struct {
	nw      *MemNetwork
	id      uint64
	mu      sync.Mutex
	peers   map[uint64]time.Time // known peers, and when each was added (ActiveSince)
	queues  map[uint64]chan *raftpb.Message
	stopc   chan struct{}
	wg      sync.WaitGroup
	stopped bool
}

func (t *memTransport) Start(id uint64, h Handler) error {
	t.mu.Lock()
	t.id = id
	if t.peers == nil {
		t.peers = map[uint64]time.Time{}
	}
	t.queues = map[uint64]chan *raftpb.Message{}
	t.stopc = make(chan struct{})
	t.mu.Unlock()
	t.nw.mu.Lock()
	t.nw.handlers[id] = h
	t.nw.mu.Unlock()
	return nil
}

func (t *memTransport) AddPeer(id uint64, _ []string) {
	t.mu.Lock()
	if t.peers == nil {
		t.peers = map[uint64]time.Time{}
	}
	if _, ok := t.peers[id]; !ok {
		t.peers[id] = time.Now()
	}
	t.mu.Unlock()
}

// ActiveSince: an in-memory peer is up from when it was added while the
// network delivers to it (a cut link or a stopped peer is down).
func (t *memTransport) ActiveSince(id uint64) time.Time {
	t.mu.Lock()
	since, ok := t.peers[id]
	t.mu.Unlock()
	if !ok {
		return time.Time{}
	}
	if !t.nw.reachable(t.id, id) {
		return time.Time{}
	}
	return since
}

func (t *memTransport) RemovePeer(id uint64) {
	t.mu.Lock()
	delete(t.peers, id)
	t.mu.Unlock()
}

func (t *memTransport) Send(msgs []*raftpb.Message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || t.queues == nil {
		return
	}
	for _, m := range msgs {
		to := m.GetTo()
		if _, ok := t.peers[to]; !ok {
			continue
		}
		q := t.queues[to]
		if q == nil {
			q = make(chan *raftpb.Message, 4096)
			t.queues[to] = q
			t.wg.Add(1)
			go t.deliver(to, q)
		}
		select {
		case q <- proto.Clone(m).(*raftpb.Message):
		default: // queue full: drop
		}
	}
}

func (t *memTransport) deliver(to uint64, q chan *raftpb.Message) {
	defer t.wg.Done()
	for {
		select {
		case m := <-q:
			h, d, ok := t.nw.verdict(t.id, to)
			if !ok {
				continue
			}
			if h.IsRemoved(t.id) {
				// As the raft stream's acceptor does: refused, and told why.
				if self := t.nw.handler(t.id); self != nil {
					self.ReportRemoved(to)
				}
				continue
			}
			t.nw.tapped(m)
			if d > 0 {
				// delayed messages may overtake each other, as on a real network
				t.wg.Add(1)
				go func() {
					defer t.wg.Done()
					tm := time.NewTimer(d)
					defer tm.Stop()
					select {
					case <-tm.C:
						_ = h.Process(context.Background(), m)
					case <-t.stopc:
					}
				}()
				continue
			}
			_ = h.Process(context.Background(), m)
		case <-t.stopc:
			return
		}
	}
}

func (t *memTransport) SendSnapshot(ctx context.Context, m *raftpb.Message, next SnapshotReader) error {
	h, _, ok := t.nw.verdict(t.id, m.GetTo())
	if !ok {
		return errors.New("memtransport: peer unreachable")
	}
	cut := func() bool { _, _, ok := t.nw.verdict(t.id, m.GetTo()); return !ok }
	wrapped := func() ([]KV, error) {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if cut() {
			return nil, errors.New("memtransport: link cut during snapshot")
		}
		c, err := next()
		if err != nil {
			return nil, err
		}
		out := make([]KV, len(c))
		for i, kv := range c {
			out[i] = KV{Key: append([]byte(nil), kv.Key...), Value: append([]byte(nil), kv.Value...)}
		}
		return out, nil
	}
	if err := h.ReceiveSnapshot(ctx, proto.Clone(m).(*raftpb.Message), wrapped); err != nil {
		return err
	}
	return nil
}

func (t *memTransport) FetchMembers(ctx context.Context, urls []string) (uint64, []Member, error) {
	for _, u := range urls {
		t.nw.mu.Lock()
		id, ok := t.nw.urls[u]
		h := t.nw.handlers[id]
		t.nw.mu.Unlock()
		if ok && h != nil {
			cid, ms := h.MembersInfo()
			return cid, ms, nil
		}
	}
	return 0, nil, io.ErrUnexpectedEOF
}

func (t *memTransport) Stop() {
	t.mu.Lock()
	if t.stopped || t.stopc == nil {
		t.stopped = true
		t.mu.Unlock()
		return
	}
	t.stopped = true
	close(t.stopc)
	t.mu.Unlock()
	t.nw.mu.Lock()
	if t.nw.handlers[t.id] != nil {
		delete(t.nw.handlers, t.id)
	}
	t.nw.mu.Unlock()
	t.wg.Wait()
}
