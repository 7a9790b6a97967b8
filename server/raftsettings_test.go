package server

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/server/storage"
	"github.com/tenure-io/tenure/test/logbuf"
)

// --snapshot-catchup-entries reaches the raft log's compaction: with a
// compaction every 10 entries keeping 20 behind, the log's start moves up
// behind the applied index and stays exactly 20 entries back at a
// compaction (etcd's default, 5000, would have kept all 60).
func TestSnapshotCatchUpEntriesKeepsThatMuchLog(t *testing.T) {
	cfg := testMemberConfig(t)
	cfg.SnapshotCount, cfg.SnapshotCatchUpEntries = 10, 20
	cfg.ApplyDefaults()
	m, cli, stop := startLogged(t, cfg, io.Discard)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 60; i++ {
		if _, err := cli.Put(ctx, "k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	has := func(index uint64) bool {
		_, c, err := m.db.Get(storage.Key(storage.PrefixRaftLog, storage.U64(index)))
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	applied := m.Node().Status().AppliedIndex
	if has(1) || has(applied-30) {
		t.Fatalf("applied %d: entries 1 and %d still in the log; the catch-up setting did not reach the compaction", applied, applied-30)
	}
	if !has(applied - 19) {
		t.Fatalf("applied %d: entry %d compacted, closer than the 20 catch-up entries", applied, applied-19)
	}
}

// --initial-election-tick-advance reaches raft: each member of a 3-member
// cluster started together advances its election clock once its peers are
// connected; with the setting off none does.
func TestInitialElectionTickAdvanceReachesRaft(t *testing.T) {
	for _, advance := range []bool{true, false} {
		tr := newTrio(t)
		logs := make([]*logbuf.Buffer, 3)
		for i := range 3 {
			tr.cfgs[i].InitialElectionTickAdvance = advance
			logs[i] = &logbuf.Buffer{}
		}
		cli := tr.startAll(logs...)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		tr.putOnce(ctx, cli, "k") // a leader was elected
		cancel()
		for i, l := range logs {
			// A member checks for its peers every 50 ms for at most 5 s.
			deadline := time.Now().Add(6 * time.Second)
			advanced := false
			for !advanced && advance && time.Now().Before(deadline) {
				advanced = strings.Contains(l.String(), "advanced the election clock at start")
				time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
			}
			advanced = strings.Contains(l.String(), "advanced the election clock at start")
			if advanced != advance {
				t.Fatalf("setting %v: member %d advanced %v:\n%s", advance, i, advanced, l.String())
			}
		}
		for i := range 3 {
			tr.stop(i)
		}
	}
}
