package lock

import (
	"encoding/binary"
	"errors"

	"github.com/tenure-io/tenure/server/mvcc"
)

// Notices the leader pushes to the member where a lock call waits, ahead of
// that member's own apply. The first byte is the kind.
//
// A grant notice (kind 1) is a NoteGranted (Machine.SetGrantHook,
// Machine.DeliverGrant): Token, Lease and Rev (int64 big-endian each),
// ReqID (uint64 big-endian), then the lock name and the key, each a uint32
// big-endian length followed by the bytes.
//
// A result notice (kind 2) is the outcome of a lock op that member
// proposed (MarshalResultNotice): ReqID, then a byte for the outcome (an
// *AcquireResult, a *ReleaseResult, or one of resultErrors) and its
// fields.

// Notice kinds (the first byte).
const (
	NoticeGrant  = 1
	NoticeResult = 2
)

var errMalformedNotice = errors.New("tenure: lock: malformed grant notice")

// MarshalGrantNotice encodes a NoteGranted for the wire.
func MarshalGrantNotice(n Note) []byte {
	b := make([]byte, 0, 1+32+8+len(n.Lock)+len(n.Key))
	b = append(b, NoticeGrant)
	b = binary.BigEndian.AppendUint64(b, uint64(n.Token))
	b = binary.BigEndian.AppendUint64(b, uint64(n.Lease))
	b = binary.BigEndian.AppendUint64(b, uint64(n.Rev))
	b = binary.BigEndian.AppendUint64(b, n.ReqID)
	b = binary.BigEndian.AppendUint32(b, uint32(len(n.Lock)))
	b = append(b, n.Lock...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(n.Key)))
	return append(b, n.Key...)
}

// UnmarshalGrantNotice decodes what MarshalGrantNotice wrote.
func UnmarshalGrantNotice(b []byte) (Note, error) {
	const fixed = 1 + 32
	if len(b) < fixed+4 || b[0] != NoticeGrant {
		return Note{}, errMalformedNotice
	}
	n := Note{Kind: NoteGranted}
	n.Token = int64(binary.BigEndian.Uint64(b[1:]))
	n.Lease = int64(binary.BigEndian.Uint64(b[9:]))
	n.Rev = int64(binary.BigEndian.Uint64(b[17:]))
	n.ReqID = binary.BigEndian.Uint64(b[25:])
	rest := b[fixed:]
	var parts [2]string
	for i := range parts {
		if len(rest) < 4 {
			return Note{}, errMalformedNotice
		}
		l := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(len(rest)) < uint64(l) {
			return Note{}, errMalformedNotice
		}
		parts[i], rest = string(rest[:l]), rest[l:]
	}
	if len(rest) != 0 || parts[1] == "" {
		return Note{}, errMalformedNotice
	}
	n.Lock, n.Key = parts[0], parts[1]
	return n, nil
}

// resultErrors are the errors a lock op's result notice can carry; any
// other outcome is not pushed (the member's own apply answers it).
var resultErrors = []error{ErrLeaseRequired, ErrInvalidName, ErrTooManyWaiters, ErrDelayTooLong, ErrUnknownLock, mvcc.ErrLeaseNotFound}

const (
	outcomeAcquire = 1
	outcomeRelease = 2
	outcomeError   = 3 // followed by the index in resultErrors
)

// MarshalResultNotice encodes the outcome of the lock op reqID; ok is false
// for an outcome it cannot carry (nil, or an error not in resultErrors).
func MarshalResultNotice(reqID uint64, out any, err error) (b []byte, ok bool) {
	b = append(make([]byte, 0, 64), NoticeResult)
	b = binary.BigEndian.AppendUint64(b, reqID)
	if err != nil {
		for i, e := range resultErrors {
			if errors.Is(err, e) {
				return append(b, outcomeError, byte(i)), true
			}
		}
		return nil, false
	}
	switch r := out.(type) {
	case *AcquireResult:
		b = append(b, outcomeAcquire, boolByte(r.Granted), boolByte(r.Blocked))
		for _, v := range []int64{r.Token, r.ModRev, r.Rev, r.Owner.Token, r.Owner.Lease, int64(r.Waiters)} {
			b = binary.BigEndian.AppendUint64(b, uint64(v))
		}
		for _, s := range []string{r.Key, r.Owner.Key} {
			b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
			b = append(b, s...)
		}
		return b, true
	case *ReleaseResult:
		b = append(b, outcomeRelease, boolByte(r.Released))
		return binary.BigEndian.AppendUint64(b, uint64(r.Rev)), true
	}
	return nil, false
}

// UnmarshalResultNotice decodes what MarshalResultNotice wrote: the op's
// request, and its outcome (out) or error (opErr).
func UnmarshalResultNotice(b []byte) (reqID uint64, out any, opErr error, err error) {
	if len(b) < 10 || b[0] != NoticeResult {
		return 0, nil, nil, errMalformedNotice
	}
	reqID = binary.BigEndian.Uint64(b[1:])
	kind, rest := b[9], b[10:]
	switch kind {
	case outcomeError:
		if len(rest) != 1 || int(rest[0]) >= len(resultErrors) {
			return 0, nil, nil, errMalformedNotice
		}
		return reqID, nil, resultErrors[rest[0]], nil
	case outcomeRelease:
		if len(rest) != 9 || rest[0] > 1 {
			return 0, nil, nil, errMalformedNotice
		}
		return reqID, &ReleaseResult{Released: rest[0] == 1, Rev: int64(binary.BigEndian.Uint64(rest[1:]))}, nil, nil
	case outcomeAcquire:
		if len(rest) < 2+48 || rest[0] > 1 || rest[1] > 1 {
			return 0, nil, nil, errMalformedNotice
		}
		r := &AcquireResult{Granted: rest[0] == 1, Blocked: rest[1] == 1}
		rest = rest[2:]
		var v [6]int64
		for i := range v {
			v[i] = int64(binary.BigEndian.Uint64(rest))
			rest = rest[8:]
		}
		r.Token, r.ModRev, r.Rev, r.Owner.Token, r.Owner.Lease, r.Waiters = v[0], v[1], v[2], v[3], v[4], int(v[5])
		var strs [2]string
		for i := range strs {
			if len(rest) < 4 {
				return 0, nil, nil, errMalformedNotice
			}
			l := binary.BigEndian.Uint32(rest)
			rest = rest[4:]
			if uint64(len(rest)) < uint64(l) {
				return 0, nil, nil, errMalformedNotice
			}
			strs[i], rest = string(rest[:l]), rest[l:]
		}
		if len(rest) != 0 {
			return 0, nil, nil, errMalformedNotice
		}
		r.Key, r.Owner.Key = strs[0], strs[1]
		return reqID, r, nil, nil
	}
	return 0, nil, nil, errMalformedNotice
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// PeekOrigin reads Op.Origin and Op.ReqID from an encoded op without
// decoding the rest; ok is false for a malformed payload. An op encoded
// before Origin existed reports 0.
func PeekOrigin(b []byte) (origin, reqID uint64, ok bool) {
	if len(b) < opFixedLen+4 {
		return 0, 0, false
	}
	reqID = binary.BigEndian.Uint64(b[2:])
	p := uint64(opFixedLen)
	for range 2 { // name, value
		if uint64(len(b)) < p+4 {
			return 0, 0, false
		}
		p += 4 + uint64(binary.BigEndian.Uint32(b[p:]))
	}
	switch uint64(len(b)) {
	case p:
		return 0, reqID, true
	case p + 8:
		return binary.BigEndian.Uint64(b[p:]), reqID, true
	}
	return 0, 0, false
}
