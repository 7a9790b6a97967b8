package raftnode

import (
	"maps"
	"slices"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"
)

// refreshView caches the configuration between Readies; a conf change and a
// new term must both refresh it, or thrifty replication would pick lazy
// followers from voters that are gone and miss new ones.
func TestProgressViewFollowsConfChangesAndTerms(t *testing.T) {
	ms := raft.NewMemoryStorage()
	r, err := newRawNode(&raft.Config{ID: 1, ElectionTick: 10, HeartbeatTick: 1, Storage: ms,
		MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 16}, []raft.Peer{{ID: 1}})
	if err != nil {
		t.Fatal(err)
	}
	// Persist and apply the bootstrap entries as the Ready loop would.
	drain := func() {
		for r.rn.HasReady() {
			rd := r.rn.Ready()
			if err := ms.Append(rd.Entries); err != nil {
				t.Fatal(err)
			}
			for _, e := range rd.CommittedEntries {
				if e.GetType() == raftpb.EntryConfChange {
					cc := &raftpb.ConfChange{}
					if err := proto.Unmarshal(e.GetData(), cc); err != nil {
						t.Fatal(err)
					}
					r.ApplyConfChange(cc)
				}
			}
			r.rn.Advance(rd)
		}
	}
	drain()
	if err := r.rn.Campaign(); err != nil {
		t.Fatal(err)
	}
	drain()

	var v progressView
	voters := func() []uint64 { return slices.Sorted(maps.Keys(v.cfg.Voters[0])) }
	r.refreshView(&v)
	if got := voters(); !slices.Equal(got, []uint64{1}) || len(v.prs) != 1 || v.term == 0 {
		t.Fatalf("single voter: voters %v, progress of %d peers, term %d", got, len(v.prs), v.term)
	}

	r.ApplyConfChange(&raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: new(uint64(2))})
	r.refreshView(&v)
	if got := voters(); !slices.Equal(got, []uint64{1, 2}) || len(v.prs) != 2 {
		t.Fatalf("after adding 2: voters %v, progress of %d peers; want the new configuration", got, len(v.prs))
	}

	// A cached view with a stale term is taken again even without a conf
	// change (a member may restore a snapshot's configuration as a
	// follower, then lead in a later term).
	v.cfg = tracker.Config{}
	v.term--
	r.refreshView(&v)
	if got := voters(); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("stale term: voters %v; want the configuration taken again", got)
	}
	// With nothing changed, the cached configuration is kept (no Status).
	v.cfg = tracker.Config{}
	r.refreshView(&v)
	if len(v.cfg.Voters[0]) != 0 || len(v.prs) != 2 {
		t.Fatalf("unchanged term and configuration: voters %v, progress of %d peers; want the cache kept and progress refreshed", voters(), len(v.prs))
	}
}
