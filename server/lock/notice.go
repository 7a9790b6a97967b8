package lock

import (
	"encoding/binary"
	"errors"
)

// A grant notice is a NoteGranted as the leader pushes it to the member
// holding the waiting call (Machine.SetGrantHook, Machine.DeliverGrant).
// Format: a version byte (1), Token, Lease and Rev (int64 big-endian
// each), ReqID (uint64 big-endian), then the lock name and the key, each a uint32 big-endian length
// followed by the bytes.

const grantNoticeV1 = 1

var errMalformedNotice = errors.New("tenure: lock: malformed grant notice")

// MarshalGrantNotice encodes a NoteGranted for the wire.
func MarshalGrantNotice(n Note) []byte {
	b := make([]byte, 0, 1+32+8+len(n.Lock)+len(n.Key))
	b = append(b, grantNoticeV1)
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
	if len(b) < fixed+4 || b[0] != grantNoticeV1 {
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
