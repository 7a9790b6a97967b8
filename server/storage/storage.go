package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/wal"
)

// Key prefixes. Values below StateMachineStart belong to the raft layer and are
// never shipped in a snapshot; everything from StateMachineStart up is
// state-machine data and is shipped whole.
const (
	PrefixRaftLog byte = 0x01 // + uint64 index → raftpb.Entry (proto)
	PrefixRaft    byte = 0x02 // raft-layer singletons (hard state, snapshot metadata)

	StateMachineStart byte = 0x10
	PrefixMeta        byte = 0x10 // state-machine singletons (applied index, conf state, revisions)
	PrefixMembers     byte = 0x11 // + uint64 member id → member record
	PrefixKV          byte = 0x20 // mvcc versions: escaped key + terminator + ^revision
	PrefixRevLog      byte = 0x21 // mvcc revision log: uint64 main rev + uint64 sub rev → event pointer
	PrefixLease       byte = 0x30 // + uint64 lease id → lease record
	PrefixLock        byte = 0x40 // lock service state
	StateMachineEnd   byte = 0x7f // exclusive upper bound of state-machine data
)

// Singleton keys.
var (
	KeyHardState    = []byte{PrefixRaft, 'h'}
	KeySnapshotMeta = []byte{PrefixRaft, 's'}

	KeyAppliedIndex = []byte{PrefixMeta, 'a'} // uint64: last raft index whose effects are in the store
	KeyConfState    = []byte{PrefixMeta, 'c'} // raftpb.ConfState as of KeyAppliedIndex
	KeyAppliedTerm  = []byte{PrefixMeta, 't'} // uint64: term of the entry at KeyAppliedIndex
	KeyClusterID    = []byte{PrefixMeta, 'C'} // uint64
	KeyCurrentRev   = []byte{PrefixMeta, 'r'} // int64: mvcc current revision
	KeyCompactRev   = []byte{PrefixMeta, 'k'} // int64: mvcc compacted revision (scheduled)
	KeyCompactDone  = []byte{PrefixMeta, 'K'} // int64: mvcc compacted revision (physically finished)
	KeyLeaseMeta    = []byte{PrefixMeta, 'l'} // lessor singletons
)

// ErrNotFound is returned by the Get helpers when a key is absent.
var ErrNotFound = errors.New("tenure: storage: key not found")

// Options tunes the store. Zero values pick defaults.
type Options struct {
	// CacheBytes is the block cache size (default 64 MiB).
	CacheBytes int64
	// MemTableBytes is the memtable size (default 32 MiB).
	MemTableBytes uint64
	// WALDir, when set, holds the store's write-ahead log — the durable
	// raft log's every fsync — instead of dir/db (etcd's --wal-dir: a
	// dedicated disk keeps the log's syncs away from compactions).
	WALDir string
	// OnWALMoved is told when Open found the log's earlier files in
	// another directory than the one it now uses (WALDir given, changed
	// or dropped), recovered them from there, and writes the log here
	// from now on.
	OnWALMoved func(from, to string)
}

// Open opens (creating if needed) the Pebble store in dir/db.
func Open(dir string, o Options) (*pebble.DB, error) {
	if o.CacheBytes == 0 {
		o.CacheBytes = 64 << 20
	}
	if o.MemTableBytes == 0 {
		o.MemTableBytes = 32 << 20
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tenure: storage: create data dir: %w", err)
	}
	cache := pebble.NewCache(o.CacheBytes)
	defer cache.Unref()
	fs := walExtendFS{vfs.Default}
	opts := &pebble.Options{
		Cache:        cache,
		MemTableSize: o.MemTableBytes,
		Logger:       quietLogger{},
		FS:           fs,
	}
	storeDir := filepath.Join(dir, "db")
	walDir := storeDir
	if o.WALDir != "" {
		if err := os.MkdirAll(o.WALDir, 0o700); err != nil {
			return nil, fmt.Errorf("tenure: storage: create WAL dir: %w", err)
		}
		opts.WALDir, walDir = o.WALDir, o.WALDir
	}
	db, err := pebble.Open(storeDir, opts)
	// The log was last written elsewhere (the WAL dir was given, changed or
	// dropped since): Pebble refuses rather than lose what only those
	// files hold. Recover from there; new log files go to walDir.
	var moved pebble.ErrMissingWALRecoveryDir
	if errors.As(err, &moved) {
		opts.WALRecoveryDirs = append(opts.WALRecoveryDirs, wal.Dir{FS: fs, Dirname: moved.Dir})
		if db, err = pebble.Open(storeDir, opts); err == nil && o.OnWALMoved != nil {
			o.OnWALMoved(moved.Dir, walDir)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("tenure: storage: open %s: %w", dir, err)
	}
	return db, nil
}

// U64 encodes v big-endian.
func U64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

// AppendU64 appends v big-endian to dst.
func AppendU64(dst []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(dst, v) }

// Key builds prefix+parts.
func Key(prefix byte, parts ...[]byte) []byte {
	n := 1
	for _, p := range parts {
		n += len(p)
	}
	k := make([]byte, 0, n)
	k = append(k, prefix)
	for _, p := range parts {
		k = append(k, p...)
	}
	return k
}

// Reader is what both *pebble.DB, *pebble.Batch and *pebble.Snapshot provide.
type Reader interface {
	Get(key []byte) ([]byte, io.Closer, error)
}

// GetU64 reads a big-endian uint64; a missing key reads as 0.
func GetU64(r Reader, key []byte) (uint64, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("tenure: storage: corrupt uint64 at %q (len %d)", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// GetCopy reads a value and returns a copy; ErrNotFound if absent.
func GetCopy(r Reader, key []byte) ([]byte, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// SetU64 stages a big-endian uint64 write in b.
func SetU64(b *pebble.Batch, key []byte, v uint64) error { return b.Set(key, U64(v), nil) }

type quietLogger struct{}

func (quietLogger) Infof(string, ...interface{}) {}
func (quietLogger) Errorf(f string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "pebble: "+f+"\n", a...)
}
func (quietLogger) Fatalf(f string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "pebble: fatal: "+f+"\n", a...)
	os.Exit(2)
}

// Iterable is what *pebble.DB, *pebble.Batch (indexed) and *pebble.Snapshot provide.
type Iterable interface {
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}
