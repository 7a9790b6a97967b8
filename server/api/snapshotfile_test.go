package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tenure-io/tenure/server/storage"
)

func testSnapshotDB(t *testing.T) *pebble.DB { return testSnapshotDBN(t, 300) }

// testSnapshotDBN holds the two revision keys, a raft-layer key that must not
// be shipped, and n KV records of growing size.
func testSnapshotDBN(t *testing.T, n int) *pebble.DB {
	t.Helper()
	db, err := storage.Open(t.TempDir(), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	b := db.NewBatch()
	_ = b.Set([]byte{storage.PrefixRaftLog, 1}, []byte("raft log: never shipped"), nil)
	_ = b.Set(storage.KeyCurrentRev, storage.U64(42), nil)
	_ = b.Set(storage.KeyCompactRev, storage.U64(7), nil)
	for i := 0; i < n; i++ {
		_ = b.Set([]byte(fmt.Sprintf("%c%05d", storage.PrefixKV, i)), bytes.Repeat([]byte{byte(i)}, i), nil)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	return db
}

func TestSnapshotFileRoundTrip(t *testing.T) {
	db := testSnapshotDB(t)
	snap := db.NewSnapshot()
	defer snap.Close()
	want, err := SnapshotSize(snap)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	n, err := WriteSnapshot(&buf, snap)
	if err != nil {
		t.Fatal(err)
	}
	if n != want || int64(buf.Len()) != want {
		t.Fatalf("wrote %d (buffer %d), SnapshotSize said %d", n, buf.Len(), want)
	}
	if buf.Len()%512 != sha256.Size {
		t.Fatalf("size %d is not 512n+32", buf.Len())
	}
	var keys int
	info, err := ReadSnapshot(bytes.NewReader(buf.Bytes()), func(k, v []byte) error {
		if k[0] < storage.StateMachineStart {
			t.Errorf("raft-layer key %x in the snapshot", k)
		}
		keys++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if info.Revision != 42 || info.Compact != 7 || info.Keys != 300 || info.Records != 302 || keys != 302 || info.Size != want {
		t.Fatalf("info %+v, %d records seen", info, keys)
	}
}

// testSnapshotFile is the snapshot file of testSnapshotDBN(t, n).
func testSnapshotFile(t *testing.T, n int) []byte {
	t.Helper()
	snap := testSnapshotDBN(t, n).NewSnapshot()
	defer snap.Close()
	var buf bytes.Buffer
	if _, err := WriteSnapshot(&buf, snap); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestSnapshotFileErrors(t *testing.T) {
	good := testSnapshotFile(t, 300)
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x01
		return b
	}
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrSnapshotFormat},
		{"not a snapshot", []byte("SQLite format 3\x00 and more bytes"), ErrSnapshotFormat},
		{"bad version", flip(len(snapshotMagic) + 3), ErrSnapshotFormat},
		{"flipped value byte", flip(len(good) / 2), ErrSnapshotChecksum},
		{"flipped checksum", flip(len(good) - 1), ErrSnapshotChecksum},
		{"truncated", good[:len(good)-100], ErrSnapshotChecksum},
		{"trailing data", append(bytes.Clone(good), 0), ErrSnapshotFormat},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadSnapshot(bytes.NewReader(tc.data), nil)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// Every damaged byte after the header is reported as corruption, wherever it
// lands: a flipped key or length byte shows up as a structural fault before
// the checksum is reached, and must not be reported as "not a snapshot".
func TestSnapshotFileEveryFlipIsCorruption(t *testing.T) {
	good := testSnapshotFile(t, 40) // every byte is tried twice: keep the file small
	for i := len(snapshotMagic) + 4; i < len(good); i++ {
		for _, mask := range []byte{0x01, 0xff} {
			b := bytes.Clone(good)
			b[i] ^= mask
			if _, err := ReadSnapshot(bytes.NewReader(b), nil); !errors.Is(err, ErrSnapshotChecksum) {
				t.Fatalf("byte %d of %d ^%#x: got %v, want %v", i, len(good), mask, err, ErrSnapshotChecksum)
			}
		}
	}
}

// A file whose checksum matches but whose records are out of order was
// written by something other than Tenure: that is a format error, named.
func TestSnapshotFileMalformedWithGoodChecksum(t *testing.T) {
	rec := func(k, v string) []byte {
		b := binary.AppendUvarint(nil, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		return append(b, v...)
	}
	kv := func(i int) string { return fmt.Sprintf("%c%05d", storage.PrefixKV, i) }
	b := append([]byte(snapshotMagic), 0, 0, 0, snapshotVersion)
	b = append(b, rec(kv(2), "b")...)
	b = append(b, rec(kv(1), "a")...)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint64(b, 2)
	b = append(b, make([]byte, paddedSize(int64(len(b)))-sha256.Size-int64(len(b)))...)
	sum := sha256.Sum256(b)
	b = append(b, sum[:]...)
	_, err := ReadSnapshot(bytes.NewReader(b), nil)
	if !errors.Is(err, ErrSnapshotFormat) || errors.Is(err, ErrSnapshotChecksum) || !strings.Contains(err.Error(), "out of order") {
		t.Fatalf("got %v, want %v naming the out-of-order key", err, ErrSnapshotFormat)
	}
}
