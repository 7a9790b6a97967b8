package mvcc

import (
	"bytes"
	"encoding/binary"

	"github.com/tenure-io/tenure/server/storage"
)

// Version record keys:
//
//	PrefixKV | escape(key) | 0x00 0x01 | bigendian(^mainRev)
//
// escape turns every 0x00 byte of the user key into 0x00 0xFF. The terminator
// 0x00 0x01 sorts below any continuation of an escaped key (0x00 0xFF or a
// non-zero byte), so the encoding preserves the order of user keys and all
// versions of one key are contiguous, newest first.

const (
	escByte  = 0xFF
	termByte = 0x01
	revLen   = 8
)

const (
	flagPut       byte = 0
	flagTombstone byte = 1
)

// appendEscaped appends escape(key) to dst.
func appendEscaped(dst, key []byte) []byte {
	for {
		i := bytes.IndexByte(key, 0)
		if i < 0 {
			return append(dst, key...)
		}
		dst = append(dst, key[:i+1]...)
		dst = append(dst, escByte)
		key = key[i+1:]
	}
}

// unescape decodes an escaped key (without terminator). ok is false if enc
// is not a valid escaping.
func unescape(dst, enc []byte) ([]byte, bool) {
	for {
		i := bytes.IndexByte(enc, 0)
		if i < 0 {
			return append(dst, enc...), true
		}
		if i+1 >= len(enc) || enc[i+1] != escByte {
			return dst, false
		}
		dst = append(dst, enc[:i+1]...)
		enc = enc[i+2:]
	}
}

// appendKeyPrefix appends PrefixKV|escape(key)|terminator: the common prefix
// of every version record of key.
func appendKeyPrefix(dst, key []byte) []byte {
	dst = append(dst, storage.PrefixKV)
	dst = appendEscaped(dst, key)
	return append(dst, 0, termByte)
}

// appendVersionKey appends the record key of (key, rev).
func appendVersionKey(dst, key []byte, rev int64) []byte {
	dst = appendKeyPrefix(dst, key)
	return binary.BigEndian.AppendUint64(dst, ^uint64(rev))
}

// keyUpper returns the exclusive upper bound of all version records of key.
func keyUpper(key []byte) []byte {
	b := appendKeyPrefix(nil, key)
	b[len(b)-1]++
	return b
}

// recordRev decodes the main revision from a version record key.
func recordRev(k []byte) int64 {
	return int64(^binary.BigEndian.Uint64(k[len(k)-revLen:]))
}

// recordPrefix is the part of a record key that identifies the user key.
func recordPrefix(k []byte) []byte { return k[:len(k)-revLen] }

// decodeVersionKey splits a record key into user key and revision.
func decodeVersionKey(k []byte) (key []byte, rev int64, ok bool) {
	if len(k) < 1+2+revLen || k[0] != storage.PrefixKV {
		return nil, 0, false
	}
	p := k[1 : len(k)-revLen]
	if p[len(p)-2] != 0 || p[len(p)-1] != termByte {
		return nil, 0, false
	}
	key, ok = unescape(nil, p[:len(p)-2])
	return key, recordRev(k), ok
}

// kvBounds maps the user-space interval [key, end) to record-key bounds.
// end == nil means the single key; end == "\x00" means every key >= key.
// ok is false when the interval is empty.
func kvBounds(key, end []byte) (lo, hi []byte, ok bool) {
	if len(end) == 0 {
		return appendKeyPrefix(nil, key), keyUpper(key), true
	}
	lo = append([]byte{storage.PrefixKV}, appendEscaped(nil, key)...)
	if len(end) == 1 && end[0] == 0 {
		return lo, []byte{storage.PrefixKV + 1}, true
	}
	if bytes.Compare(key, end) >= 0 {
		return nil, nil, false
	}
	return lo, appendKeyPrefix(nil, end), true
}

// inRange reports whether k is in [key, end) with the same conventions as kvBounds.
func inRange(k, key, end []byte) bool {
	if len(end) == 0 {
		return bytes.Equal(k, key)
	}
	if bytes.Compare(k, key) < 0 {
		return false
	}
	if len(end) == 1 && end[0] == 0 {
		return true
	}
	return bytes.Compare(k, end) < 0
}

// Revision log: PrefixRevLog | bigendian(main) | bigendian(sub) → type | key.
func revLogKey(main, sub int64) []byte {
	k := make([]byte, 0, 17)
	k = append(k, storage.PrefixRevLog)
	k = binary.BigEndian.AppendUint64(k, uint64(main))
	return binary.BigEndian.AppendUint64(k, uint64(sub))
}

func decodeRevLogKey(k []byte) (main, sub int64, ok bool) {
	if len(k) != 17 || k[0] != storage.PrefixRevLog {
		return 0, 0, false
	}
	return int64(binary.BigEndian.Uint64(k[1:9])), int64(binary.BigEndian.Uint64(k[9:])), true
}
