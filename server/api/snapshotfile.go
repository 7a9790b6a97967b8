package api

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tenure-io/tenure/server/storage"
)

// Snapshot file format (what Maintenance.Snapshot streams and `etcdctl
// snapshot save` / `tenure snapshot save` store), integers big-endian:
//
//	magic    "TENURE-SNAPSHOT\n" (16 bytes)
//	version  uint32 (1)
//	records  uvarint len(key) (> 0) | key | uvarint len(value) | value,
//	         every key of the state-machine range (storage.StateMachineStart
//	         up to storage.StateMachineEnd) in key order, from one Pebble
//	         snapshot
//	end      uvarint 0
//	count    uint64: number of records
//	padding  zero bytes up to a multiple of 512
//	checksum sha256 of everything before it (32 bytes)
//
// The file size is therefore 512·n + 32, which is how etcdctl recognises a
// snapshot with an appended sha256 (client/v3/snapshot hasChecksum).
const (
	snapshotMagic   = "TENURE-SNAPSHOT\n"
	snapshotVersion = 1
	snapshotAlign   = 512
)

// Snapshot file errors.
var (
	ErrSnapshotFormat   = errors.New("tenure: not a Tenure snapshot file")
	ErrSnapshotChecksum = errors.New("tenure: snapshot checksum mismatch (file is corrupt or truncated)")
)

func smIter(r storage.Iterable) (*pebble.Iterator, error) {
	return r.NewIter(&pebble.IterOptions{LowerBound: []byte{storage.StateMachineStart}, UpperBound: []byte{storage.StateMachineEnd}})
}

func uvarintLen(v uint64) int64 {
	var b [binary.MaxVarintLen64]byte
	return int64(binary.PutUvarint(b[:], v))
}

func paddedSize(n int64) int64 {
	if r := n % snapshotAlign; r != 0 {
		n += snapshotAlign - r
	}
	return n + sha256.Size
}

// SnapshotSize is the exact size WriteSnapshot produces for r.
func SnapshotSize(r storage.Iterable) (int64, error) {
	it, err := smIter(r)
	if err != nil {
		return 0, err
	}
	defer it.Close()
	n := int64(len(snapshotMagic) + 4)
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		n += uvarintLen(uint64(len(k))) + int64(len(k)) + uvarintLen(uint64(len(v))) + int64(len(v))
	}
	if err := it.Error(); err != nil {
		return 0, err
	}
	n += 1 + 8
	return paddedSize(n), nil
}

// WriteSnapshot writes the state-machine range of r (a Pebble snapshot) to
// w in the snapshot file format and returns the bytes written.
func WriteSnapshot(w io.Writer, r storage.Iterable) (int64, error) {
	it, err := smIter(r)
	if err != nil {
		return 0, err
	}
	defer it.Close()
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, h), 64<<10)
	var n int64
	put := func(p []byte) error {
		m, err := bw.Write(p)
		n += int64(m)
		return err
	}
	var hdr [len(snapshotMagic) + 4]byte
	copy(hdr[:], snapshotMagic)
	binary.BigEndian.PutUint32(hdr[len(snapshotMagic):], snapshotVersion)
	if err := put(hdr[:]); err != nil {
		return n, err
	}
	var count uint64
	var lb [binary.MaxVarintLen64]byte
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		if err := put(lb[:binary.PutUvarint(lb[:], uint64(len(k)))]); err != nil {
			return n, err
		}
		if err := put(k); err != nil {
			return n, err
		}
		if err := put(lb[:binary.PutUvarint(lb[:], uint64(len(v)))]); err != nil {
			return n, err
		}
		if err := put(v); err != nil {
			return n, err
		}
		count++
	}
	if err := it.Error(); err != nil {
		return n, err
	}
	if err := put([]byte{0}); err != nil {
		return n, err
	}
	if err := put(binary.BigEndian.AppendUint64(nil, count)); err != nil {
		return n, err
	}
	if pad := paddedSize(n) - sha256.Size - n; pad > 0 {
		if err := put(make([]byte, pad)); err != nil {
			return n, err
		}
	}
	if err := bw.Flush(); err != nil {
		return n, err
	}
	m, err := w.Write(h.Sum(nil))
	return n + int64(m), err
}

// SnapshotInfo describes a snapshot file.
type SnapshotInfo struct {
	Records  uint64 // state-machine records
	Keys     uint64 // mvcc version records
	Revision int64  // mvcc current revision
	Compact  int64  // mvcc compaction revision
	Size     int64  // file size
	Hash     uint32 // CRC-32 (Castagnoli) of the records, as Hash would report on an idle member
	SHA256   []byte // the trailing checksum
}

// ReadSnapshot reads a snapshot file, calling fn (if not nil) for every
// record in key order, and verifies its structure and trailing checksum.
// fn's effects must be discarded if ReadSnapshot returns an error: the
// checksum is only known at the end.
func ReadSnapshot(r io.Reader, fn func(key, value []byte) error) (SnapshotInfo, error) {
	var info SnapshotInfo
	h := sha256.New()
	cr := &countingReader{r: bufio.NewReaderSize(r, 64<<10), h: h}
	var hdr [len(snapshotMagic) + 4]byte
	if _, err := io.ReadFull(cr, hdr[:]); err != nil || string(hdr[:len(snapshotMagic)]) != snapshotMagic {
		return info, ErrSnapshotFormat
	}
	if v := binary.BigEndian.Uint32(hdr[len(snapshotMagic):]); v != snapshotVersion {
		return info, fmt.Errorf("%w: version %d, want %d", ErrSnapshotFormat, v, snapshotVersion)
	}
	crc := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	var prev []byte
	for {
		kl, err := binary.ReadUvarint(cr)
		if err != nil {
			return info, fmt.Errorf("%w: %v", ErrSnapshotChecksum, err)
		}
		if kl == 0 {
			break
		}
		if kl > 1<<20 {
			return info, cr.structural(fmt.Sprintf("key length %d", kl))
		}
		k := make([]byte, kl)
		if _, err := io.ReadFull(cr, k); err != nil {
			return info, fmt.Errorf("%w: %v", ErrSnapshotChecksum, err)
		}
		vl, err := binary.ReadUvarint(cr)
		if err != nil {
			return info, fmt.Errorf("%w: %v", ErrSnapshotChecksum, err)
		}
		if vl > 1<<30 {
			return info, cr.structural(fmt.Sprintf("value length %d", vl))
		}
		v := make([]byte, vl)
		if _, err := io.ReadFull(cr, v); err != nil {
			return info, fmt.Errorf("%w: %v", ErrSnapshotChecksum, err)
		}
		if k[0] < storage.StateMachineStart || k[0] >= storage.StateMachineEnd || (prev != nil && bytes.Compare(prev, k) >= 0) {
			return info, cr.structural(fmt.Sprintf("key %x out of order or outside the state-machine range", k))
		}
		prev = k
		crc.Write(k)
		crc.Write(v)
		info.Records++
		switch {
		case k[0] == storage.PrefixKV:
			info.Keys++
		case bytes.Equal(k, storage.KeyCurrentRev) && len(v) == 8:
			info.Revision = int64(binary.BigEndian.Uint64(v))
		case bytes.Equal(k, storage.KeyCompactRev) && len(v) == 8:
			info.Compact = int64(binary.BigEndian.Uint64(v))
		}
		if fn != nil {
			if err := fn(k, v); err != nil {
				return info, err
			}
		}
	}
	var cnt [8]byte
	if _, err := io.ReadFull(cr, cnt[:]); err != nil {
		return info, fmt.Errorf("%w: %v", ErrSnapshotChecksum, err)
	}
	if c := binary.BigEndian.Uint64(cnt[:]); c != info.Records {
		return info, fmt.Errorf("%w: %d records, trailer says %d", ErrSnapshotChecksum, info.Records, c)
	}
	if pad := paddedSize(cr.n) - sha256.Size - cr.n; pad > 0 {
		p := make([]byte, pad)
		if _, err := io.ReadFull(cr, p); err != nil {
			return info, fmt.Errorf("%w: %v", ErrSnapshotChecksum, err)
		}
	}
	want := h.Sum(nil)
	cr.h = nil
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(cr, got); err != nil {
		return info, fmt.Errorf("%w: %v", ErrSnapshotChecksum, err)
	}
	if !bytes.Equal(got, want) {
		return info, ErrSnapshotChecksum
	}
	if m, _ := cr.Read(make([]byte, 1)); m != 0 {
		return info, fmt.Errorf("%w: trailing data after the checksum", ErrSnapshotFormat)
	}
	info.Size = cr.n
	info.Hash = crc.Sum32()
	info.SHA256 = got
	return info, nil
}

// structural classifies a fault in the records found before the checksum
// could be read. A flipped bit in a key or a length shows up as a structural
// fault long before the trailer, so the rest of the file is hashed first: if
// the trailing sha256 does not match, the file is corrupt and the error is
// ErrSnapshotChecksum; only a file whose checksum matches is reported as
// malformed (ErrSnapshotFormat). Both name the fault.
func (c *countingReader) structural(fault string) error {
	t := &tailHasher{h: c.h}
	c.h = nil
	if _, err := io.Copy(t, c.r); err != nil {
		return fmt.Errorf("%w: %s (reading the rest: %v)", ErrSnapshotChecksum, fault, err)
	}
	if len(t.tail) < sha256.Size || !bytes.Equal(t.h.Sum(nil), t.tail) {
		return fmt.Errorf("%w: %s", ErrSnapshotChecksum, fault)
	}
	return fmt.Errorf("%w: %s", ErrSnapshotFormat, fault)
}

// tailHasher hashes everything written to it except the last sha256.Size
// bytes, which it keeps in tail: the checksum of a stream of unknown length.
type tailHasher struct {
	h    hash.Hash
	tail []byte
}

func (t *tailHasher) Write(p []byte) (int, error) {
	t.tail = append(t.tail, p...)
	if n := len(t.tail) - sha256.Size; n > 0 {
		t.h.Write(t.tail[:n])
		t.tail = append(t.tail[:0], t.tail[n:]...)
	}
	return len(p), nil
}

// countingReader counts bytes and feeds them to h (when set).
type countingReader struct {
	r *bufio.Reader
	h hash.Hash
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.h != nil {
		c.h.Write(p[:n])
	}
	return n, err
}

func (c *countingReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
		if c.h != nil {
			c.h.Write([]byte{b})
		}
	}
	return b, err
}
