package raftnode

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Config configures a Node. Zero values of the tuning fields pick defaults.
type Config struct {
	Name           string
	DB             *pebble.DB
	ClusterToken   string
	InitialCluster []Member // names + peer URLs from --initial-cluster; IDs computed with MemberID
	// NewCluster (--initial-cluster-state new) bootstraps the cluster from
	// InitialCluster if the store holds no raft state. With NewCluster=false
	// and an empty store the member joins an existing cluster: it asks the
	// peers in InitialCluster (Members RPC) for the cluster ID and for the ID
	// that `member add` assigned to its PeerURLs.
	NewCluster bool
	ClientURLs []string // this member's advertised client URLs (published into its member record)
	PeerURLs   []string // this member's advertised peer URLs

	TickInterval           time.Duration // one raft tick (= heartbeat interval); default 100ms
	ElectionTicks          int           // election timeout in ticks; default 10
	SnapshotCount          uint64        // applied entries between log compactions; default 10000
	SnapshotCatchUpEntries uint64        // entries kept behind a compaction; default 5000 (may exceed SnapshotCount, as in etcd)
	MaxRequestBytes        int           // bounds MaxSizePerMsg and peer frames and messages; default 1.5 MiB
	// DeferLinger bounds how long the leader holds a deferrable proposal
	// (ProposalDeferrer) waiting for another to share its round; default
	// DefaultDeferLinger.
	DeferLinger time.Duration
	// ThriftyDelay, when positive, turns on thrifty replication (see
	// thrifty.go): the leader holds its appends to the followers no commit
	// needs for up to this long and sends them merged. Zero, the default,
	// sends every append to every follower at once.
	ThriftyDelay time.Duration
	// StrictReconfigCheck refuses membership changes that could leave the
	// cluster without a quorum of running members (etcd's
	// --strict-reconfig-check, on by default there; see strict.go).
	StrictReconfigCheck bool
	// InitialElectionTickAdvance fast-forwards a starting voter's election
	// clock once its raft streams reach a quorum (etcd's
	// --initial-election-tick-advance, on by default there; see
	// tickadvance.go). A sole voter's clock is advanced regardless.
	InitialElectionTickAdvance bool
	// WarnApplyDuration: an entry whose apply takes longer is logged
	// ("apply request took too long"); default SlowApply (etcd's
	// --warning-apply-duration).
	WarnApplyDuration time.Duration

	StateMachine   StateMachine
	Logger         *slog.Logger
	OnLeaderChange func(LeaderEvent) // called in order from one goroutine; must not block for long
	// OnNotice receives the notices other members' state machines sent
	// with Node.SendNotice (from: the sender's member ID). It runs on the
	// goroutine that reads the sender's raft stream: it must not block.
	OnNotice func(from uint64, payload []byte)
	// WantsEager, polled a few times per election timeout on a follower,
	// reports whether the member serves clients that need every entry
	// applied promptly (watchers); while it does, the follower tells its
	// leader, and thrifty replication (ThriftyDelay) does not hold its
	// appends. Must be cheap.
	WantsEager func() bool
	// Observer, when set, receives disk sync, apply and snapshot timings.
	Observer *Observer
	// PeerTLS secures the peer transport's outgoing connections (https://
	// peer URLs): its raft streams and its gRPC part (snapshots, Members).
	// nil dials in plaintext.
	PeerTLS *tls.Config
	// Transport carries raft messages and snapshots between members. nil
	// selects the peer transport (NewPeerTransport); tests inject MemNetwork's.
	Transport Transport
}

// Validate reports every problem with c, naming the field.
func (c *Config) Validate() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("raftnode: Config.Name is empty"))
	}
	if c.DB == nil {
		errs = append(errs, errors.New("raftnode: Config.DB is nil"))
	}
	if c.StateMachine == nil {
		errs = append(errs, errors.New("raftnode: Config.StateMachine is nil"))
	}
	if c.ThriftyDelay < 0 || c.ThriftyDelay > MaxThriftyDelay {
		errs = append(errs, fmt.Errorf("raftnode: Config.ThriftyDelay=%v, want 0 to %v", c.ThriftyDelay, MaxThriftyDelay))
	}
	if c.TickInterval < 0 {
		errs = append(errs, errors.New("raftnode: Config.TickInterval is negative"))
	}
	if c.ElectionTicks != 0 && c.ElectionTicks < 3 {
		errs = append(errs, fmt.Errorf("raftnode: Config.ElectionTicks=%d, want >= 3", c.ElectionTicks))
	}
	return errors.Join(errs...)
}

func (c *Config) setDefaults() {
	if c.TickInterval == 0 {
		c.TickInterval = 100 * time.Millisecond
	}
	if c.ElectionTicks == 0 {
		c.ElectionTicks = 10
	}
	if c.SnapshotCount == 0 {
		c.SnapshotCount = 10000
	}
	if c.SnapshotCatchUpEntries == 0 {
		c.SnapshotCatchUpEntries = 5000
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = 1536 * 1024
	}
	if c.WarnApplyDuration == 0 {
		c.WarnApplyDuration = SlowApply
	}
	if c.DeferLinger == 0 {
		c.DeferLinger = DefaultDeferLinger
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Status is a snapshot of this member's raft state.
type Status struct {
	ID, Leader, Term, CommitIndex, AppliedIndex, LastIndex uint64
	IsLearner                                              bool
}

// MemberID derives a member's ID from its name, peer URLs and the cluster
// token: the first 8 bytes of sha256(sorted URLs, name, token), never 0.
func MemberID(name string, peerURLs []string, clusterToken string) uint64 {
	urls := slices.Clone(peerURLs)
	slices.Sort(urls)
	h := sha256.New()
	for _, u := range urls {
		h.Write([]byte(u))
		h.Write([]byte{0})
	}
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write([]byte(clusterToken))
	id := binary.BigEndian.Uint64(h.Sum(nil)[:8])
	if id == 0 {
		id = 1
	}
	return id
}

// clusterIDFor derives the cluster ID from the initial member IDs and token.
func clusterIDFor(ids []uint64, token string) uint64 {
	s := slices.Clone(ids)
	slices.Sort(s)
	h := sha256.New()
	for _, id := range s {
		h.Write(binary.BigEndian.AppendUint64(nil, id))
	}
	h.Write([]byte(token))
	id := binary.BigEndian.Uint64(h.Sum(nil)[:8])
	if id == 0 {
		id = 1
	}
	return id
}
