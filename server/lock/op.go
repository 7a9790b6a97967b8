package lock

import (
	"encoding/binary"
	"errors"
)

// OpKind is the first byte of a lock entry's payload.
type OpKind byte

// Lock operations carried in raft entries (apply.KindLock).
const (
	OpAcquire  OpKind = 1 // enqueue (put name/<lease hex>) and report the outcome
	OpRegister OpKind = 2 // make the lock known to the state machine (Observe, ownership streams)
	OpSetDelay OpKind = 3 // set the lock-delay of a lock
	OpEndDelay OpKind = 4 // leader: the lock-delay started at Epoch is over
	OpRelease  OpKind = 5 // delete name/<lease hex> if its create revision is Epoch (the token)
	OpDelete   OpKind = 6 // delete name/<lease hex> whatever its create revision (etcd's v3lock Unlock)
)

// Op flags.
const (
	FlagTry      byte = 1 << 0 // TryLock: do not enqueue when someone else owns or waits
	FlagElection byte = 1 << 1 // Campaign: put the value even if the key exists
)

// Op is one lock operation. Every field that affects the outcome travels in
// the entry (limits included), so every member decides the same.
type Op struct {
	Kind       OpKind
	ReqID      uint64
	Name       []byte // lock name, without the trailing '/'
	Lease      int64
	Value      []byte
	Flags      byte
	MaxWaiters uint32
	DelayMs    int64
	Epoch      uint64 // OpEndDelay: the delay's epoch; OpRelease: the key's token (create revision)
	// Origin is the member whose call waits for the outcome. It only
	// routes: the leader pushes the op's result there (apply's result
	// pusher) and, for an OpAcquire, the key's grant (Machine.SetGrantHook).
	// It never changes an outcome. Entries written before it existed decode
	// with 0.
	Origin uint64
}

var errMalformed = errors.New("tenure: lock: malformed entry")

// opFixedLen is the fixed part of an encoded op: kind, flags, ReqID, Lease,
// MaxWaiters, DelayMs, Epoch. The name and the value (each length-prefixed)
// and the origin follow.
const opFixedLen = 2 + 8 + 8 + 4 + 8 + 8

// Marshal encodes op.
func (op *Op) Marshal() []byte {
	b := make([]byte, 0, 48+len(op.Name)+len(op.Value))
	b = append(b, byte(op.Kind), op.Flags)
	b = binary.BigEndian.AppendUint64(b, op.ReqID)
	b = binary.BigEndian.AppendUint64(b, uint64(op.Lease))
	b = binary.BigEndian.AppendUint32(b, op.MaxWaiters)
	b = binary.BigEndian.AppendUint64(b, uint64(op.DelayMs))
	b = binary.BigEndian.AppendUint64(b, op.Epoch)
	b = binary.BigEndian.AppendUint32(b, uint32(len(op.Name)))
	b = append(b, op.Name...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(op.Value)))
	b = append(b, op.Value...)
	return binary.BigEndian.AppendUint64(b, op.Origin)
}

// Unmarshal decodes an op encoded by Marshal.
func Unmarshal(b []byte) (*Op, error) {
	if len(b) < opFixedLen+4 {
		return nil, errMalformed
	}
	op := &Op{Kind: OpKind(b[0]), Flags: b[1]}
	op.ReqID = binary.BigEndian.Uint64(b[2:])
	op.Lease = int64(binary.BigEndian.Uint64(b[10:]))
	op.MaxWaiters = binary.BigEndian.Uint32(b[18:])
	op.DelayMs = int64(binary.BigEndian.Uint64(b[22:]))
	op.Epoch = binary.BigEndian.Uint64(b[30:])
	p := opFixedLen
	n := int(binary.BigEndian.Uint32(b[p:]))
	p += 4
	if n < 0 || len(b) < p+n+4 {
		return nil, errMalformed
	}
	op.Name = append([]byte(nil), b[p:p+n]...)
	p += n
	n = int(binary.BigEndian.Uint32(b[p:]))
	p += 4
	// The origin trails the value; an entry without it predates the field.
	if n < 0 || (len(b) != p+n && len(b) != p+n+8) {
		return nil, errMalformed
	}
	op.Value = append([]byte(nil), b[p:p+n]...)
	if len(b) == p+n+8 {
		op.Origin = binary.BigEndian.Uint64(b[p+n:])
	}
	return op, nil
}

// PeekAcquire reads, without copying, the lock name and flags of an
// encoded OpAcquire; ok is false for any other op or a malformed payload.
func PeekAcquire(b []byte) (name []byte, flags byte, ok bool) {
	if len(b) < opFixedLen+4 || OpKind(b[0]) != OpAcquire {
		return nil, 0, false
	}
	n := int(binary.BigEndian.Uint32(b[opFixedLen:]))
	if n < 0 || len(b) < opFixedLen+4+n {
		return nil, 0, false
	}
	return b[opFixedLen+4 : opFixedLen+4+n], b[1], true
}
