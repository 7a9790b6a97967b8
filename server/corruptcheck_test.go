package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/server/storage"
	"github.com/tenure-io/tenure/test/logbuf"
)

// trio is a 3-member in-process cluster whose members can be stopped and
// started again on their data-dirs.
type trio struct {
	t       *testing.T
	cfgs    [3]Config
	members [3]*Member
}

func newTrio(t *testing.T) *trio {
	tr := &trio{t: t}
	var ic []string
	for i := range tr.cfgs {
		cfg := testMemberConfig(t)
		cfg.Name = fmt.Sprintf("m%d", i+1)
		cfg.RequestTimeout = 3 * time.Second
		tr.cfgs[i] = cfg
		ic = append(ic, cfg.Name+"="+cfg.InitialAdvertisePeerURLs[0])
	}
	for i := range tr.cfgs {
		tr.cfgs[i].InitialCluster = strings.Join(ic, ",")
		tr.cfgs[i].ApplyDefaults()
		if err := tr.cfgs[i].Validate(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, m := range tr.members {
			if m != nil {
				m.Stop()
			}
		}
	})
	return tr
}

func (tr *trio) start(i int, check bool, log *logbuf.Buffer) error {
	cfg := tr.cfgs[i]
	cfg.InitialCorruptCheck = check
	var w io.Writer = io.Discard
	if log != nil {
		w = log
	}
	m, err := Start(cfg, slog.New(slog.NewTextHandler(w, nil)))
	if err == nil {
		tr.members[i] = m
	}
	return err
}

// startAll starts the three members (member i logging to logs[i] when
// given) and returns a client of all of them, closed at the test's end.
func (tr *trio) startAll(logs ...*logbuf.Buffer) *clientv3.Client {
	for i := range tr.cfgs {
		var log *logbuf.Buffer
		if i < len(logs) {
			log = logs[i]
		}
		if err := tr.start(i, false, log); err != nil {
			tr.t.Fatal(err)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: tr.endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		tr.t.Fatal(err)
	}
	tr.t.Cleanup(func() { cli.Close() })
	return cli
}

// putOnce puts key until one put succeeds: right after the members start,
// a put fails with "request timed out" (the trio's 3 s) while the first
// election runs late on a loaded machine. It fails the test at ctx's end.
func (tr *trio) putOnce(ctx context.Context, cli *clientv3.Client, key string) {
	for {
		_, err := cli.Put(ctx, key, "v")
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			tr.t.Fatalf("no put succeeded: %v", err)
		case <-time.After(10 * time.Millisecond): // a failure without a leader is quick
		}
	}
}

func (tr *trio) stop(i int) {
	tr.members[i].Stop()
	tr.members[i] = nil
}

func (tr *trio) endpoints() []string {
	var eps []string
	for _, c := range tr.cfgs {
		eps = append(eps, c.AdvertiseClientURLs...)
	}
	return eps
}

// corruptOneValue rewrites the value of the first mvcc version record in a
// stopped member's store, as a bad disk or a bug could, without touching
// anything raft knows about.
func corruptOneValue(t *testing.T, dir string) {
	db, err := storage.Open(dir, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{storage.PrefixKV}, UpperBound: []byte{storage.PrefixKV + 1}})
	if err != nil {
		t.Fatal(err)
	}
	if !it.First() {
		t.Fatal("no mvcc record to corrupt")
	}
	key := append([]byte(nil), it.Key()...)
	val := append([]byte(nil), it.Value()...)
	_ = it.Close()
	var kv mvccpb.KeyValue
	if len(val) < 2 || val[0] != 0 || proto.Unmarshal(val[1:], &kv) != nil {
		t.Fatalf("unexpected record %x = %x", key, val)
	}
	kv.Value = []byte("not what was written")
	b, err := proto.Marshal(&kv)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set(key, append([]byte{0}, b...), pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// A member restarted with the initial corruption check on a store whose
// data diverged from its peers' refuses to start (and says why); a member
// whose data agrees starts, with a peer down and skipped.
func TestInitialCorruptCheckRefusesADivergedMember(t *testing.T) {
	tr := newTrio(t)
	cli := tr.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last int64
	for i := range 20 {
		r, err := cli.Put(ctx, fmt.Sprintf("k%02d", i), "v")
		if err != nil {
			t.Fatal(err)
		}
		last = r.Header.Revision
	}
	// Every member has applied the last put before one is stopped.
	for _, ep := range tr.endpoints() {
		for {
			st, err := cli.Status(ctx, ep)
			if err != nil {
				t.Fatal(err)
			}
			if st.Header.Revision >= last {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s stuck at revision %d < %d", ep, st.Header.Revision, last)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	tr.stop(2)
	corruptOneValue(t, tr.cfgs[2].DataDir)
	var log3 logbuf.Buffer
	err := tr.start(2, true, &log3)
	if !errors.Is(err, ErrDataInconsistency) {
		t.Fatalf("start on a corrupted store: err = %v, want %v", err, ErrDataInconsistency)
	}
	if !strings.Contains(log3.String(), "found different hash values from remote peer") {
		t.Fatalf("no mismatch logged:\n%s", log3.String())
	}
	// Without the check the same store starts: the refusal was the check's.
	if err := tr.start(2, false, nil); err != nil {
		t.Fatalf("the corrupted store without the check: %v", err)
	}
	tr.stop(2)

	tr.stop(1)
	var log2 logbuf.Buffer
	if err := tr.start(1, true, &log2); err != nil {
		t.Fatalf("start on a store that agrees with its peers: %v\n%s", err, log2.String())
	}
	out := log2.String()
	if !strings.Contains(out, "initial corruption checking passed") || !strings.Contains(out, "cannot fetch hash from remote peer") {
		t.Fatalf("want the check passed with the stopped peer skipped:\n%s", out)
	}
}
