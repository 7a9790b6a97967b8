package mvcc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/btree"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/server/storage"
)

// LeaseIndex is what the store needs from the lessor. It may be nil, in
// which case leases are neither checked nor tracked.
type LeaseIndex interface {
	Exists(id int64) bool
	Attach(id int64, key []byte)
	Detach(id int64, key []byte)
}

var (
	// ErrCompacted: the requested revision is below the compacted revision.
	ErrCompacted = errors.New("mvcc: required revision has been compacted")
	// ErrFutureRev: the requested revision is above the current revision.
	ErrFutureRev = errors.New("mvcc: required revision is a future revision")
	// ErrKeyNotFound: ignore_value / ignore_lease on a key that does not exist.
	ErrKeyNotFound = errors.New("tenure: key not found")
	// ErrLeaseNotFound: a put names a lease the LeaseIndex does not know.
	ErrLeaseNotFound = errors.New("tenure: requested lease not found")
	// ErrClosed: WaitCompaction on a closed store.
	ErrClosed = errors.New("tenure: mvcc store closed")
)

// Store is the MVCC store. Readers (Range, History, Rev, CompactRev,
// WaitCompaction) are safe for concurrent use; the write side (Begin, Txn
// methods, Publish, Reload, Abandon) belongs to one goroutine.
type Store struct {
	db *pebble.DB
	lg *slog.Logger

	rev        atomic.Int64 // published current revision
	compactRev atomic.Int64 // published compacted revision (scheduled)

	// snap is a read-only clone of index at a published revision. Publish
	// makes one only while somebody reads: every range at the newest
	// revision renews snapDemand, and each Publish spends one unit of it. A
	// clone makes the writer copy the nodes it touches next, which is worth
	// paying only then; and under a steady stream of writes a reader finds
	// a snapshot of the newest revision only if every Publish made one.
	snap       atomic.Pointer[indexSnap]
	snapDemand atomic.Int32

	// writer-only state
	index         *btree.BTreeG[indexItem] // live key → newest version (see index.go)
	staged        int64                    // latest revision staged into a batch (>= rev)
	sealed        int64                    // latest revision recorded in a batch by Seal (<= staged)
	stagedCompact int64                    // latest compaction revision staged (>= compactRev)

	mu          sync.Mutex
	compactDone int64
	doneCh      chan struct{} // closed and replaced whenever compactDone changes or the store closes
	closed      bool

	// background physical compaction
	kick   chan struct{}
	stop   chan struct{}
	wg     sync.WaitGroup
	runGen int
}

// Open loads the revisions from db and resumes an unfinished physical
// compaction in the background.
func Open(db *pebble.DB, lg *slog.Logger) (*Store, error) {
	if lg == nil {
		lg = slog.Default()
	}
	s := &Store{db: db, lg: lg, doneCh: make(chan struct{})}
	if err := s.load(); err != nil {
		return nil, err
	}
	s.startCompactor()
	return s, nil
}

func (s *Store) load() error {
	cur, err := storage.GetU64(s.db, storage.KeyCurrentRev)
	if err != nil {
		return fmt.Errorf("tenure: mvcc: read current revision: %w", err)
	}
	comp, err := storage.GetU64(s.db, storage.KeyCompactRev)
	if err != nil {
		return fmt.Errorf("tenure: mvcc: read compact revision: %w", err)
	}
	done, err := storage.GetU64(s.db, storage.KeyCompactDone)
	if err != nil {
		return fmt.Errorf("tenure: mvcc: read compact-done revision: %w", err)
	}
	if cur == 0 {
		cur = 1
	}
	s.rev.Store(int64(cur))
	s.staged, s.sealed = int64(cur), int64(cur)
	s.compactRev.Store(int64(comp))
	s.stagedCompact = int64(comp)
	s.setDone(int64(done), true)
	return s.buildIndex()
}

// Rev returns the last published revision (1 for an empty store).
func (s *Store) Rev() int64 { return s.rev.Load() }

// CompactRev returns the published compaction revision (0 if never compacted).
func (s *Store) CompactRev() int64 { return s.compactRev.Load() }

// Reload re-reads all state after the state-machine key range was replaced
// (snapshot install). The physical compactor is stopped first and restarted
// afterwards; callers that replace the key range should call
// PauseCompaction before replacing it so that no stale deletes race the
// replacement.
func (s *Store) Reload() error {
	s.stopCompactor()
	if err := s.load(); err != nil {
		return err
	}
	s.startCompactor()
	return nil
}

// PauseCompaction stops the background physical compaction (waiting for the
// in-flight batch) until the next Reload. Work left is resumed by Reload.
func (s *Store) PauseCompaction() { s.stopCompactor() }

// Close stops background work. It does not close db.
func (s *Store) Close() {
	s.stopCompactor()
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.doneCh)
	}
	s.mu.Unlock()
}

// Abandon discards staged (unpublished) revisions: call it if a batch that
// Begin/End wrote into is dropped instead of committed.
func (s *Store) Abandon() {
	s.staged = s.rev.Load()
	s.sealed = s.staged
	s.stagedCompact = s.compactRev.Load()
	if err := s.buildIndex(); err != nil {
		panic(fmt.Sprintf("tenure: mvcc: rebuilding the key index: %v", err))
	}
}

// Seal records the latest staged revision in b (storage.KeyCurrentRev),
// once for all the txns staged into b since the last Seal: call it after
// the batch's last End and before committing it. One record per batch
// instead of one per txn spares the memtable an insert per txn.
func (s *Store) Seal(b *pebble.Batch) error {
	if s.staged == s.sealed {
		return nil
	}
	if err := storage.SetU64(b, storage.KeyCurrentRev, uint64(s.staged)); err != nil {
		return err
	}
	s.sealed = s.staged
	return nil
}

// Publish makes rev visible to readers. Call it after committing the batch
// (or batches) that staged and sealed rev. It also publishes and starts any
// staged compaction. Publishing a revision no batch recorded (a missing
// Seal) panics: a restart would have gone back to an older revision.
func (s *Store) Publish(rev int64) {
	if rev > s.sealed {
		panic(fmt.Sprintf("tenure: mvcc: publishing revision %d, but only %d was sealed into a batch", rev, s.sealed))
	}
	if rev > s.rev.Load() {
		s.rev.Store(rev)
	}
	if d := s.snapDemand.Load(); rev == s.staged && d > 0 {
		s.snapDemand.CompareAndSwap(d, d-1)
		s.snap.Store(&indexSnap{rev: rev, idx: s.index.Clone()})
	}
	if s.stagedCompact > s.compactRev.Load() {
		s.compactRev.Store(s.stagedCompact)
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// CompactDone returns the revision up to which physical compaction has finished.
func (s *Store) CompactDone() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.compactDone
}

// WaitCompaction waits until physical compaction has reached rev.
func (s *Store) WaitCompaction(ctx context.Context, rev int64) error {
	for {
		s.mu.Lock()
		done, ch, closed := s.compactDone, s.doneCh, s.closed
		s.mu.Unlock()
		if done >= rev {
			return nil
		}
		if closed {
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *Store) setDone(rev int64, force bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev == s.compactDone || (!force && rev < s.compactDone) {
		return
	}
	s.compactDone = rev
	if !s.closed {
		close(s.doneCh)
		s.doneCh = make(chan struct{})
	}
}

func (s *Store) startCompactor() {
	s.kick = make(chan struct{}, 1)
	s.stop = make(chan struct{})
	s.kick <- struct{}{} // resume unfinished work, if any
	s.wg.Add(1)
	go s.compactLoop(s.kick, s.stop)
}

func (s *Store) stopCompactor() {
	if s.stop == nil {
		return
	}
	close(s.stop)
	s.wg.Wait()
	s.stop = nil
}

func (s *Store) compactLoop(kick, stop chan struct{}) {
	defer s.wg.Done()
	for {
		select {
		case <-stop:
			return
		case <-kick:
		}
		target := s.compactRev.Load()
		if target <= s.CompactDone() {
			continue
		}
		if err := s.physicalCompact(target, stop); err != nil {
			if errors.Is(err, errStopped) {
				return
			}
			s.lg.Error("tenure: mvcc: physical compaction failed", "rev", target, "err", err)
			continue
		}
		s.setDone(target, false)
	}
}

// decodeKV decodes a put record value.
func decodeKV(v []byte) (*mvccpb.KeyValue, error) {
	kv := &mvccpb.KeyValue{}
	if err := proto.Unmarshal(v[1:], kv); err != nil {
		return nil, fmt.Errorf("tenure: mvcc: corrupt version record: %w", err)
	}
	if kv.Value == nil {
		kv.Value = []byte{} // nil means "not loaded" (index.go)
	}
	return kv, nil
}

// decodeMeta reads what the index keeps of a put version record (create
// and mod revision, version, lease) without decoding the key and value:
// rebuilding the index at start reads every live key's newest version.
func decodeMeta(v []byte) (keyMeta, error) {
	var m keyMeta
	err := decodeRecord(v, &m, nil)
	return m, err
}

// decodeValue returns a copy of the value of a put version record (what
// decodeKV would put in Value, never nil) without decoding the rest: the
// index already has the other fields.
func decodeValue(v []byte) ([]byte, error) {
	val := []byte{}
	err := decodeRecord(v, nil, &val)
	return val, err
}

// decodeRecord walks the mvccpb.KeyValue of a put version record and fills
// m and *val (either may be nil), skipping every other field.
func decodeRecord(v []byte, m *keyMeta, val *[]byte) error {
	if len(v) == 0 || v[0] != flagPut {
		return errors.New("tenure: mvcc: corrupt version record: not a put")
	}
	b := v[1:]
	if m != nil {
		m.empty = true // proto3 leaves an empty value out
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("tenure: mvcc: corrupt version record: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch { // mvccpb.KeyValue field numbers: 2 create, 3 mod, 4 version, 5 value, 6 lease
		case m != nil && typ == protowire.VarintType && num >= 2 && num <= 6 && num != 5:
			x, k := protowire.ConsumeVarint(b)
			if k < 0 {
				return fmt.Errorf("tenure: mvcc: corrupt version record: %w", protowire.ParseError(k))
			}
			b = b[k:]
			switch num {
			case 2:
				m.create = int64(x)
			case 3:
				m.mod = int64(x)
			case 4:
				m.version = int64(x)
			case 6:
				m.lease = int64(x)
			}
		case (val != nil || m != nil) && typ == protowire.BytesType && num == 5:
			f, k := protowire.ConsumeBytes(b)
			if k < 0 {
				return fmt.Errorf("tenure: mvcc: corrupt version record: %w", protowire.ParseError(k))
			}
			b = b[k:]
			if val != nil {
				*val = append((*val)[:0], f...)
			}
			if m != nil {
				m.empty = len(f) == 0
			}
		default:
			k := protowire.ConsumeFieldValue(num, typ, b)
			if k < 0 {
				return fmt.Errorf("tenure: mvcc: corrupt version record: %w", protowire.ParseError(k))
			}
			b = b[k:]
		}
	}
	return nil
}
