package apply

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/server/lease"
	"github.com/tenure-io/tenure/server/mvcc"
	"github.com/tenure-io/tenure/server/storage"
)

// recordingProposer hands every proposal to the test instead of raft.
type recordingProposer struct {
	id    uint64
	props chan []byte
}

func (p *recordingProposer) Propose(_ context.Context, data []byte) error {
	p.props <- append([]byte(nil), data...)
	return nil
}
func (p *recordingProposer) ID() uint64 { return p.id }

type applyHarness struct {
	t     *testing.T
	a     *Applier
	p     *recordingProposer
	index uint64
}

func newApplyHarness(t *testing.T) *applyHarness {
	t.Helper()
	db, err := storage.Open(t.TempDir(), storage.Options{CacheBytes: 8 << 20, MemTableBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	lg := slog.New(slog.NewTextHandler(io.Discard, nil))
	kv, err := mvcc.Open(db, lg)
	if err != nil {
		t.Fatal(err)
	}
	lessor, err := lease.New(db, lg)
	if err != nil {
		t.Fatal(err)
	}
	a := New(Config{KV: kv, Lessor: lessor, DB: db, Logger: lg})
	p := &recordingProposer{id: 7, props: make(chan []byte, 64)}
	a.SetProposer(p)
	return &applyHarness{t: t, a: a, p: p}
}

// apply applies data as the next committed entry, as raftnode would.
func (h *applyHarness) apply(data []byte) {
	h.t.Helper()
	h.index++
	b := h.a.db.NewIndexedBatch()
	defer b.Close()
	h.a.ApplyEntry(b, h.index, 1, data)
	h.a.SealBatch(b)
	if err := b.Commit(nil); err != nil {
		h.t.Fatal(err)
	}
	h.a.Committed()
}

func (h *applyHarness) grant(id int64) {
	h.t.Helper()
	body, err := proto.Marshal(&pb.InternalRaftRequest{LeaseGrant: &pb.LeaseGrantRequest{ID: id, TTL: 30}})
	if err != nil {
		h.t.Fatal(err)
	}
	h.apply(append([]byte{KindEtcd}, body...))
}

func (h *applyHarness) nextProposal() []byte {
	h.t.Helper()
	select {
	case d := <-h.p.props:
		return d
	case <-time.After(5 * time.Second):
		h.t.Fatal("no proposal within 5s")
		return nil
	}
}

func (h *applyHarness) noProposal(d time.Duration) {
	h.t.Helper()
	select {
	case data := <-h.p.props:
		h.t.Fatalf("unexpected proposal %x", data)
	case <-time.After(d):
	}
}

func renewEntry(pairs ...[2]uint64) []byte {
	data := []byte{KindLeaseRenew}
	for _, p := range pairs {
		data = binary.BigEndian.AppendUint64(data, p[0])
		data = binary.BigEndian.AppendUint64(data, p[1])
	}
	return data
}

func renewPairs(t *testing.T, data []byte) map[uint64]uint64 {
	t.Helper()
	if !validRenewEntry(data) {
		t.Fatalf("not a renew entry: %x", data)
	}
	out := map[uint64]uint64{}
	for p := 1; p < len(data); p += renewPairBytes {
		out[binary.BigEndian.Uint64(data[p:])] = binary.BigEndian.Uint64(data[p+8:])
	}
	return out
}

// A leader merges the renewals followers forward into its own batches: one
// raft entry per round for the whole cluster, every pair kept, and the
// forwarded pairs hold the one-batch pipeline until their entry is applied.
func TestAbsorbedRenewalsJoinTheLeadersBatch(t *testing.T) {
	h := newApplyHarness(t)
	h.grant(100)
	h.grant(200)

	if h.a.AbsorbProposal([]byte{KindEtcd, 1, 2}) {
		t.Fatal("absorbed an entry that is not a renewal")
	}
	if h.a.AbsorbProposal([]byte{KindLeaseRenew, 1, 2, 3}) {
		t.Fatal("absorbed a malformed renewal entry")
	}

	// A follower's entry arrives with the pipeline empty: proposed at once,
	// with a marker pair (lease 0) of this member.
	fwd1 := renewEntry([2]uint64{0x0001_0000_0000_0001, 100}, [2]uint64{0x0001_0000_0000_0002, 200})
	if !h.a.AbsorbProposal(fwd1) {
		t.Fatal("renewal entry not absorbed")
	}
	first := renewPairs(t, h.nextProposal())
	if len(first) != 3 || first[0x0001_0000_0000_0001] != 100 || first[0x0001_0000_0000_0002] != 200 {
		t.Fatalf("first batch pairs = %v, want the two forwarded pairs and a marker", first)
	}
	var marker uint64
	for id, l := range first {
		if l == 0 {
			marker = id
		}
	}
	if marker == 0 || marker>>48 != 7 {
		t.Fatalf("marker pair missing or not this member's (%x) in %v", marker, first)
	}

	// While it is in flight, a second follower's entry and a local renewal
	// wait in one open batch: nothing is proposed.
	fwd2 := renewEntry([2]uint64{0x0002_0000_0000_0001, 200})
	if !h.a.AbsorbProposal(fwd2) {
		t.Fatal("second renewal entry not absorbed")
	}
	local := make(chan error, 1)
	go func() {
		_, err := h.a.Renew(context.Background(), 100, 10*time.Second)
		local <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.a.renews.mu.Lock()
		waiting := 0
		if h.a.renews.cur != nil {
			waiting = h.a.renews.cur.waiting
		}
		h.a.renews.mu.Unlock()
		if waiting == 2 { // the second batch's marker and the local renewal
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("open batch has %d waiters, want 2", waiting)
		}
		time.Sleep(time.Millisecond)
	}
	h.noProposal(5 * time.Millisecond)

	// Applying the first batch answers its marker and releases the next
	// batch: both waiting sources in one entry.
	h.apply(renewEntryFrom(first))
	second := renewPairs(t, h.nextProposal())
	if second[0x0002_0000_0000_0001] != 200 {
		t.Fatalf("second batch %v lacks the forwarded pair", second)
	}
	var localPairs, markers int
	for id, l := range second {
		switch {
		case l == 100 && id>>48 == 7:
			localPairs++
		case l == 0:
			markers++
		}
	}
	if len(second) != 3 || localPairs != 1 || markers != 1 {
		t.Fatalf("second batch %v: want the forwarded pair, the local renewal and one marker", second)
	}
	h.apply(renewEntryFrom(second))
	select {
	case err := <-local:
		if err != nil {
			t.Fatalf("local renewal: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("local renewal not answered")
	}
}

func renewEntryFrom(pairs map[uint64]uint64) []byte {
	var ps [][2]uint64
	for id, l := range pairs {
		ps = append(ps, [2]uint64{id, l})
	}
	return renewEntry(ps...)
}
