package mvcc

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

type fakeLeases struct {
	live     map[int64]bool
	attached map[int64]map[string]bool
}

func newFakeLeases(ids ...int64) *fakeLeases {
	f := &fakeLeases{live: map[int64]bool{}, attached: map[int64]map[string]bool{}}
	for _, id := range ids {
		f.live[id] = true
	}
	return f
}

func (f *fakeLeases) Exists(id int64) bool { return f.live[id] }
func (f *fakeLeases) Attach(id int64, key []byte) {
	if f.attached[id] == nil {
		f.attached[id] = map[string]bool{}
	}
	f.attached[id][string(key)] = true
}
func (f *fakeLeases) Detach(id int64, key []byte) { delete(f.attached[id], string(key)) }

type env struct {
	t      testing.TB
	fs     vfs.FS
	db     *pebble.DB
	s      *Store
	leases *fakeLeases
}

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{t: t, fs: vfs.NewMem(), leases: newFakeLeases(100, 200)}
	e.open()
	t.Cleanup(e.close)
	return e
}

func (e *env) open() {
	e.t.Helper()
	db, err := pebble.Open("db", &pebble.Options{FS: e.fs, Logger: quietLogger{}})
	if err != nil {
		e.t.Fatal(err)
	}
	s, err := Open(db, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.db, e.s = db, s
}

func (e *env) close() {
	if e.s != nil {
		e.s.Close()
		e.s = nil
	}
	if e.db != nil {
		if err := e.db.Close(); err != nil {
			e.t.Error(err)
		}
		e.db = nil
	}
}

func (e *env) reopen() {
	e.close()
	e.open()
}

// apply runs fn in one txn on one batch, commits and publishes.
func (e *env) apply(fn func(tx *Txn) error) (int64, []*mvccpb.Event, error) {
	e.t.Helper()
	b := e.db.NewIndexedBatch()
	defer b.Close()
	tx := e.s.Begin(b, e.leases)
	err := fn(tx)
	rev, evs := tx.End()
	if err := e.s.Seal(b); err != nil {
		e.t.Fatal(err)
	}
	if cerr := b.Commit(pebble.NoSync); cerr != nil {
		e.t.Fatal(cerr)
	}
	e.s.Publish(rev)
	// Events leave the write path without previous values (index.go); load
	// them the way the watch hub does, so assertions see what watchers get.
	for _, ev := range evs {
		if ev.PrevKv != nil && ev.PrevKv.Value == nil {
			ev.PrevKv = e.s.LoadPrevValue(ev.PrevKv)
		}
	}
	return rev, evs, err
}

func (e *env) put(k, v string) int64 {
	e.t.Helper()
	rev, _, err := e.apply(func(tx *Txn) error {
		_, err := tx.Put(&pb.PutRequest{Key: []byte(k), Value: []byte(v)})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return rev
}

func (e *env) del(k, end string) (int64, *pb.DeleteRangeResponse) {
	e.t.Helper()
	var resp *pb.DeleteRangeResponse
	rev, _, err := e.apply(func(tx *Txn) error {
		var err error
		resp, err = tx.DeleteRange(&pb.DeleteRangeRequest{Key: []byte(k), RangeEnd: bs(end), PrevKv: true})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return rev, resp
}

func (e *env) txn(req *pb.TxnRequest) (*pb.TxnResponse, int64, error) {
	e.t.Helper()
	var resp *pb.TxnResponse
	rev, _, err := e.apply(func(tx *Txn) error {
		var err error
		resp, err = tx.Txn(req)
		return err
	})
	return resp, rev, err
}

func (e *env) compact(rev int64, wait bool) error {
	e.t.Helper()
	_, _, err := e.apply(func(tx *Txn) error { return tx.Compact(rev) })
	if err == nil && wait {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.s.WaitCompaction(ctx, rev); err != nil {
			e.t.Fatal(err)
		}
	}
	return err
}

func (e *env) get(req *pb.RangeRequest) *pb.RangeResponse {
	e.t.Helper()
	r, err := e.s.Range(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// bs maps "" to nil so table cases can leave range_end out.
func bs(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

// kvsString renders kvs compactly: key=value@create/mod/version[lease].
func kvsString(kvs []*mvccpb.KeyValue) string {
	var b bytes.Buffer
	for i, kv := range kvs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%q=%q@%d/%d/%d", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version)
		if kv.Lease != 0 {
			fmt.Fprintf(&b, "[%d]", kv.Lease)
		}
	}
	return b.String()
}

func keysString(kvs []*mvccpb.KeyValue) string {
	var b bytes.Buffer
	for i, kv := range kvs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%q", kv.Key)
	}
	return b.String()
}

func evString(evs []*mvccpb.Event) string {
	var b bytes.Buffer
	for i, ev := range evs {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s %s", ev.Type, kvsString([]*mvccpb.KeyValue{ev.Kv}))
		if ev.PrevKv != nil {
			fmt.Fprintf(&b, " prev %s", kvsString([]*mvccpb.KeyValue{ev.PrevKv}))
		}
	}
	return b.String()
}

// countRecords counts raw records under a prefix byte.
func countRecords(t testing.TB, db *pebble.DB, prefix byte) int {
	t.Helper()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefix}, UpperBound: []byte{prefix + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)      {}
func (quietLogger) Errorf(f string, a ...any) { fmt.Printf("pebble: "+f+"\n", a...) }
func (quietLogger) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
