package apply

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/tenure-io/tenure/server/storage"
)

// ErrNoSpace is returned for a write (Put, a Txn with a put, LeaseGrant)
// applied while a NOSPACE alarm is raised; the API edge maps it to etcd's
// "etcdserver: mvcc: database space exceeded".
var ErrNoSpace = errors.New("tenure: mvcc: database space exceeded")

// Alarms are state-machine data: an AlarmRequest (ACTIVATE / DEACTIVATE)
// travels through raft as a KindEtcd entry, so every member agrees on the
// set, and each alarm is one key in the state-machine range — persisted with
// the entry that raised it and shipped in snapshots:
//
//	PrefixMeta 'A' | uint64 member id | uint32 alarm type → empty
var alarmPrefix = []byte{storage.PrefixMeta, 'A'}

func alarmKey(member uint64, t pb.AlarmType) []byte {
	k := append(append([]byte(nil), alarmPrefix...), storage.U64(member)...)
	return binary.BigEndian.AppendUint32(k, uint32(t))
}

// alarmSet is the in-memory copy of the replicated alarms. Written by the
// apply goroutine only; read by the API edge (NoSpace, Alarms) concurrently.
type alarmSet struct {
	mu     sync.RWMutex
	loaded bool
	list   []*pb.AlarmMember // sorted by (member, type)
}

func (s *alarmSet) load(db storage.Iterable) error {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: alarmPrefix, UpperBound: []byte{storage.PrefixMeta, 'A' + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	var list []*pb.AlarmMember
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != len(alarmPrefix)+12 {
			return fmt.Errorf("tenure: corrupt alarm key %x", k)
		}
		list = append(list, &pb.AlarmMember{
			MemberID: binary.BigEndian.Uint64(k[2:]),
			Alarm:    pb.AlarmType(binary.BigEndian.Uint32(k[10:])),
		})
	}
	if err := it.Error(); err != nil {
		return err
	}
	s.mu.Lock()
	s.list, s.loaded = list, true
	s.mu.Unlock()
	return nil
}

func (a *Applier) ensureAlarms() {
	a.alarms.mu.RLock()
	ok := a.alarms.loaded
	a.alarms.mu.RUnlock()
	if ok || a.db == nil {
		return
	}
	if err := a.alarms.load(a.db); err != nil {
		a.lg.Error("loading alarms", "err", err)
	}
}

// Alarms returns the raised alarms (all of them, or those of type t when t
// is not NONE).
func (a *Applier) Alarms(t pb.AlarmType) []*pb.AlarmMember {
	a.ensureAlarms()
	a.alarms.mu.RLock()
	defer a.alarms.mu.RUnlock()
	var out []*pb.AlarmMember
	for _, m := range a.alarms.list {
		if t == pb.AlarmType_NONE || m.Alarm == t {
			out = append(out, &pb.AlarmMember{MemberID: m.MemberID, Alarm: m.Alarm})
		}
	}
	return out
}

// NoSpace reports whether a NOSPACE alarm is raised by any member.
func (a *Applier) NoSpace() bool { return len(a.Alarms(pb.AlarmType_NOSPACE)) > 0 }

// applyAlarm applies an ACTIVATE or DEACTIVATE and answers with the alarms
// it changed (as etcd does: activating an alarm already raised, or
// deactivating one that is not, changes nothing and answers no alarm).
func (a *Applier) applyAlarm(b *pebble.Batch, r *pb.AlarmRequest, rev int64) Result {
	a.ensureAlarms()
	resp := &pb.AlarmResponse{Header: hdr(rev)}
	if r.Alarm == pb.AlarmType_NONE && r.Action != pb.AlarmRequest_GET {
		return Result{Resp: resp}
	}
	m := &pb.AlarmMember{MemberID: r.MemberID, Alarm: r.Alarm}
	cmp := func(x *pb.AlarmMember) int {
		if x.MemberID != m.MemberID {
			if x.MemberID < m.MemberID {
				return -1
			}
			return 1
		}
		return int(x.Alarm) - int(m.Alarm)
	}
	a.alarms.mu.Lock()
	defer a.alarms.mu.Unlock()
	i, found := slices.BinarySearchFunc(a.alarms.list, m, func(x, _ *pb.AlarmMember) int { return cmp(x) })
	switch r.Action {
	case pb.AlarmRequest_ACTIVATE:
		if found {
			return Result{Resp: resp}
		}
		if err := b.Set(alarmKey(m.MemberID, m.Alarm), nil, nil); err != nil {
			return Result{Err: err}
		}
		a.alarms.list = slices.Insert(a.alarms.list, i, m)
		resp.Alarms = []*pb.AlarmMember{m}
		a.lg.Warn("alarm raised", "alarm", m.Alarm.String(), "member-id", fmt.Sprintf("%x", m.MemberID))
	case pb.AlarmRequest_DEACTIVATE:
		if !found {
			return Result{Resp: resp}
		}
		if err := b.Delete(alarmKey(m.MemberID, m.Alarm), nil); err != nil {
			return Result{Err: err}
		}
		a.alarms.list = slices.Delete(a.alarms.list, i, i+1)
		resp.Alarms = []*pb.AlarmMember{m}
		a.lg.Warn("alarm cleared", "alarm", m.Alarm.String(), "member-id", fmt.Sprintf("%x", m.MemberID))
	default:
		for _, x := range a.alarms.list {
			resp.Alarms = append(resp.Alarms, &pb.AlarmMember{MemberID: x.MemberID, Alarm: x.Alarm})
		}
	}
	return Result{Resp: resp}
}

// capped refuses, while NOSPACE is raised, the requests that can grow the
// store: Put, a Txn with a put on either branch, LeaseGrant (etcd's
// applierV3Capped). Deletes, reads, compaction and revokes stay allowed.
// It runs inside apply, so the decision is the same on every member.
func (a *Applier) capped(r *pb.InternalRaftRequest) error {
	if r.Put == nil && r.Txn == nil && r.LeaseGrant == nil {
		return nil
	}
	if !a.NoSpace() {
		return nil
	}
	if r.Txn != nil && !TxnHasPuts(r.Txn) {
		return nil
	}
	return ErrNoSpace
}

// TxnHasPuts reports whether a Txn may write a key (a put on either branch,
// nested txns included).
func TxnHasPuts(t *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{t.Success, t.Failure} {
		for _, op := range ops {
			switch {
			case op.GetRequestPut() != nil:
				return true
			case op.GetRequestTxn() != nil && TxnHasPuts(op.GetRequestTxn()):
				return true
			}
		}
	}
	return false
}

func (a *Applier) reloadAlarms() error {
	if a.db == nil {
		return nil
	}
	return a.alarms.load(a.db)
}

// LeaseExpiries counts leases this member revoked because they expired
// (applied KindLeaseExpire entries), for metrics.
func (a *Applier) LeaseExpiries() uint64 { return a.leaseExpired.Load() }
