package api

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-io/tenure/server/apply"
	"github.com/tenure-io/tenure/server/storage"
)

// sizeCacheTTL bounds how stale the store size used by the quota check may
// be; Pebble's Metrics is too expensive to call on every write.
const sizeCacheTTL = 100 * time.Millisecond

// sizer caches the store's disk usage.
type sizer struct {
	mu    sync.Mutex
	at    time.Time
	size  int64
	inUse int64
}

func (s *Server) dbSize() (size, inUse int64) {
	z := &s.size
	z.mu.Lock()
	defer z.mu.Unlock()
	if s.cfg.DB != nil && time.Since(z.at) >= sizeCacheTTL {
		m := s.cfg.DB.Metrics()
		z.size = int64(m.DiskSpaceUsage())
		z.inUse = z.size - int64(m.WAL.ObsoletePhysicalSize+m.Table.Local.ObsoleteSize+m.Table.Local.ZombieSize+
			m.BlobFiles.Local.ObsoleteSize+m.BlobFiles.Local.ZombieSize)
		z.at = time.Now()
	}
	return z.size, z.inUse
}

// DBSize is the store's disk usage (cached for up to 100 ms); metrics read it.
func (s *Server) DBSize() int64 { sz, _ := s.dbSize(); return sz }

// DBSizeInUse is DBSize less the files Pebble no longer needs and has not
// deleted yet (what endpoint status reports as in use).
func (s *Server) DBSizeInUse() int64 { _, inUse := s.dbSize(); return inUse }

// growsStore reports whether r is refused while NOSPACE is raised.
func growsStore(r *pb.InternalRaftRequest) bool {
	return r.Put != nil || r.LeaseGrant != nil || (r.Txn != nil && apply.TxnHasPuts(r.Txn))
}

// checkQuota is etcd's quota gate in front of raft: a request that can grow
// the store fails with "database space exceeded" while NOSPACE is raised, and
// when the store is over --quota-backend-bytes this member raises NOSPACE
// through raft (so every member refuses the same writes) before refusing.
// Deletes, reads and compaction never reach here.
func (s *Server) checkQuota(ctx context.Context, r *pb.InternalRaftRequest) error {
	if !growsStore(r) || s.cfg.Applier == nil {
		return nil
	}
	if s.cfg.Applier.NoSpace() {
		return rpctypes.ErrGRPCNoSpace
	}
	if s.cfg.QuotaBytes <= 0 || s.cfg.DB == nil {
		return nil
	}
	size, _ := s.dbSize()
	if size <= s.cfg.QuotaBytes {
		return nil
	}
	s.cfg.Logger.Warn("database space exceeded; raising NOSPACE alarm", "db-size", size, "quota-size", s.cfg.QuotaBytes)
	actx, cancel := s.timeout(ctx)
	defer cancel()
	res := s.cfg.Applier.Do(actx, &pb.InternalRaftRequest{Alarm: &pb.AlarmRequest{
		Action: pb.AlarmRequest_ACTIVATE, MemberID: s.cfg.Node.ID(), Alarm: pb.AlarmType_NOSPACE,
	}})
	if res.Err != nil {
		s.cfg.Logger.Warn("raising NOSPACE alarm failed", "err", res.Err)
	}
	return rpctypes.ErrGRPCNoSpace
}

// ---- Maintenance ----

// Status reports this member's view (etcdctl endpoint status).
func (s *Server) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	st := s.cfg.Node.Status()
	size, inUse := s.dbSize()
	resp := &pb.StatusResponse{
		Version:          Version,
		DbSize:           size,
		DbSizeInUse:      inUse,
		Leader:           st.Leader,
		RaftIndex:        st.CommitIndex,
		RaftTerm:         st.Term,
		RaftAppliedIndex: st.AppliedIndex,
		IsLearner:        st.IsLearner,
		StorageVersion:   "3.7.0",
		DbSizeQuota:      s.cfg.QuotaBytes,
	}
	if st.Leader == 0 {
		resp.Errors = append(resp.Errors, rpctypes.ErrGRPCNoLeader.Error())
	}
	if s.cfg.Applier != nil {
		for _, a := range s.cfg.Applier.Alarms(pb.AlarmType_NONE) {
			resp.Errors = append(resp.Errors, fmt.Sprintf("memberID:%d alarm:%s", a.MemberID, a.Alarm))
		}
	}
	s.fill(&resp.Header)
	return resp, nil
}

// Alarm lists (GET), raises (ACTIVATE) or clears (DEACTIVATE) alarms.
// Changes go through raft so every member agrees and they survive restarts.
func (s *Server) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	if r.Action == pb.AlarmRequest_GET {
		if err := s.linearize(ctx); err != nil {
			return nil, err
		}
		resp := &pb.AlarmResponse{Alarms: s.cfg.Applier.Alarms(r.Alarm)}
		s.fill(&resp.Header)
		return resp, nil
	}
	res, err := s.do(ctx, &pb.InternalRaftRequest{Alarm: &pb.AlarmRequest{Action: r.Action, MemberID: r.MemberID, Alarm: r.Alarm}})
	if err != nil {
		return nil, err
	}
	resp := res.Resp.(*pb.AlarmResponse)
	s.fill(&resp.Header)
	return resp, nil
}

// Defragment reclaims space: a manual Pebble compaction of the whole key
// range (flushes memtables, drops deleted and compacted-away versions).
func (s *Server) Defragment(ctx context.Context, _ *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	start := time.Now()
	before, _ := s.dbSize()
	if err := s.cfg.DB.Compact(ctx, []byte{0}, []byte{0xff}, true); err != nil {
		return nil, ToGRPC(err)
	}
	s.size.mu.Lock()
	s.size.at = time.Time{}
	s.size.mu.Unlock()
	after, _ := s.dbSize()
	s.cfg.Logger.Info("defragmented", "took", time.Since(start), "size-before", before, "size-after", after)
	resp := &pb.DefragmentResponse{}
	s.fill(&resp.Header)
	return resp, nil
}

// MoveLeader transfers leadership to another voting member.
func (s *Server) MoveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	ctx, cancel := s.timeout(ctx)
	defer cancel()
	if err := s.cfg.Node.TransferLeadership(ctx, r.TargetID); err != nil {
		return nil, ToGRPC(err)
	}
	resp := &pb.MoveLeaderResponse{}
	s.fill(&resp.Header)
	return resp, nil
}

// errDowngradeUnsupported answers every Downgrade call. etcd lowers its
// cluster version so that members of the older release can join; no etcd
// release can open a Tenure data directory, so there is nothing a downgrade
// could lead to. Saying so, with the way out that does exist, beats gRPC's
// bare "method Downgrade not implemented".
var errDowngradeUnsupported = status.Error(codes.Unimplemented,
	"tenure: downgrade is not supported: etcd cannot open a Tenure data directory; to move the keys to an etcd cluster, use etcdctl make-mirror")

// Downgrade refuses validate, enable and cancel alike and changes nothing.
func (s *Server) Downgrade(context.Context, *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	return nil, errDowngradeUnsupported
}

// Hash is a CRC-32 (Castagnoli) of this member's whole state-machine key
// range, read from one Pebble snapshot. It includes member-local data (the
// applied index), so it is equal across members only when they are idle at
// the same index; use HashKV to compare members.
func (s *Server) Hash(ctx context.Context, _ *pb.HashRequest) (*pb.HashResponse, error) {
	snap := s.cfg.DB.NewSnapshot()
	defer snap.Close()
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: []byte{storage.StateMachineStart}, UpperBound: []byte{storage.StateMachineEnd}})
	if err != nil {
		return nil, ToGRPC(err)
	}
	defer it.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		h.Write(it.Key())
		h.Write(it.Value())
		if n++; n%4096 == 0 && ctx.Err() != nil {
			return nil, ToGRPC(ctx.Err())
		}
	}
	if err := it.Error(); err != nil {
		return nil, ToGRPC(err)
	}
	resp := &pb.HashResponse{Hash: h.Sum32()}
	s.fill(&resp.Header)
	return resp, nil
}

// HashKV hashes the key-value history up to revision r.Revision (0: the
// current revision), equal on every member that has applied the same log:
// the state at the compaction revision (per key, the newest version at or
// below it, unless that is a delete) plus every version above it and at or
// below the requested revision, in key order (a key's versions newest
// first), each as its raw record (key and value bytes). It does not depend on
// how far the background physical compaction has got. The response carries
// compact_revision and hash_revision, as etcd's does.
func (s *Server) HashKV(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	snap := s.cfg.DB.NewSnapshot()
	defer snap.Close()
	cur, err := getI64(snap, storage.KeyCurrentRev)
	if err != nil {
		return nil, ToGRPC(err)
	}
	if cur == 0 {
		cur = 1
	}
	compact, err := getI64(snap, storage.KeyCompactRev)
	if err != nil {
		return nil, ToGRPC(err)
	}
	rev := r.Revision
	switch {
	case rev == 0:
		rev = cur
	case rev > cur:
		return nil, rpctypes.ErrGRPCFutureRev
	case rev < compact:
		return nil, rpctypes.ErrGRPCCompacted
	}
	hash, err := hashKV(ctx, snap, rev, compact)
	if err != nil {
		return nil, ToGRPC(err)
	}
	resp := &pb.HashKVResponse{Hash: hash, CompactRevision: compact, HashRevision: rev}
	s.fill(&resp.Header)
	resp.Header.Revision = cur
	return resp, nil
}

// mvcc version records (see package mvcc): PrefixKV | escaped key | 0x00
// 0x01 | bigendian(^rev) → flag byte (0 put, 1 tombstone) | KeyValue.
const (
	mvccRevLen    = 8
	mvccTombstone = 1
)

func hashKV(ctx context.Context, snap *pebble.Snapshot, rev, compact int64) (uint32, error) {
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: []byte{storage.PrefixKV}, UpperBound: []byte{storage.PrefixKV + 1}})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	var (
		cur      []byte // user-key part of the record key being scanned
		baseDone bool   // the version at or below the compaction was seen
		n        int
	)
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) < 1+2+mvccRevLen {
			continue
		}
		prefix := k[:len(k)-mvccRevLen]
		if string(prefix) != string(cur) {
			cur = append(cur[:0], prefix...)
			baseDone = false
		}
		v := it.Value()
		r := int64(^binary.BigEndian.Uint64(k[len(k)-mvccRevLen:]))
		switch {
		case r > rev:
			continue
		case r > compact:
		case baseDone:
			continue
		default:
			baseDone = true
			if len(v) > 0 && v[0] == mvccTombstone {
				continue
			}
		}
		h.Write(k)
		h.Write(v)
		if n++; n%4096 == 0 && ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
	return h.Sum32(), it.Error()
}

func getI64(r storage.Reader, key []byte) (int64, error) {
	v, err := storage.GetCopy(r, key)
	if err == storage.ErrNotFound {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, nil
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// snapshotChunk is the size of each SnapshotResponse blob.
const snapshotChunk = 64 << 10

// Snapshot streams a consistent copy of this member's state-machine data in
// Tenure's snapshot file format (snapshotfile.go): one Pebble snapshot,
// records, zero padding, and a trailing sha256 that etcdctl's `snapshot save`
// checks for.
func (s *Server) Snapshot(_ *pb.SnapshotRequest, stream pb.Maintenance_SnapshotServer) error {
	ctx := stream.Context()
	snap := s.cfg.DB.NewSnapshot()
	defer snap.Close()
	start := time.Now()
	total, err := SnapshotSize(snap)
	if err != nil {
		return ToGRPC(err)
	}
	rev, _ := getI64(snap, storage.KeyCurrentRev)
	hdr := s.Header(rev)
	s.cfg.Logger.Info("sending database snapshot to client", "size-bytes", total, "revision", rev)
	remaining := total
	first := true
	w := &chunkWriter{flush: func(p []byte) error {
		remaining -= int64(len(p))
		resp := &pb.SnapshotResponse{RemainingBytes: uint64(remaining), Blob: p}
		if first {
			resp.Header, resp.Version, first = hdr, Version, false
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
		return ctx.Err()
	}}
	if _, err := WriteSnapshot(w, snap); err != nil {
		s.cfg.Logger.Warn("sending database snapshot to client failed", "err", err)
		return ToGRPC(err)
	}
	if err := w.Close(); err != nil {
		s.cfg.Logger.Warn("sending database snapshot to client failed", "err", err)
		return ToGRPC(err)
	}
	s.cfg.Logger.Info("sent database snapshot to client", "size-bytes", total, "revision", rev, "took", time.Since(start))
	return nil
}

// chunkWriter buffers writes into snapshotChunk-sized blobs.
type chunkWriter struct {
	buf   []byte
	flush func([]byte) error
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		room := snapshotChunk - len(w.buf)
		if room > len(p) {
			room = len(p)
		}
		w.buf = append(w.buf, p[:room]...)
		p = p[room:]
		if len(w.buf) == snapshotChunk {
			if err := w.flush(w.buf); err != nil {
				return 0, err
			}
			w.buf = make([]byte, 0, snapshotChunk)
		}
	}
	return n, nil
}

func (w *chunkWriter) Close() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.flush(w.buf)
	w.buf = nil
	return err
}
