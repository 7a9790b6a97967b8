package raftnode

import (
	"errors"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3/raftpb"
)

// Errors returned by Node.
var (
	ErrNoLeader         = errors.New("tenure: no leader")
	ErrTimeout          = errors.New("tenure: request timed out")
	ErrStopped          = errors.New("tenure: server stopped")
	ErrProposalDropped  = errors.New("tenure: proposal dropped")
	ErrMemberNotFound   = errors.New("tenure: member not found")
	ErrMemberExists     = errors.New("tenure: member ID already exists")
	ErrPeerURLExists    = errors.New("tenure: Peer URLs already exists")
	ErrLearnerNotReady  = errors.New("tenure: can only promote a learner member which is in sync with leader")
	ErrNotLearner       = errors.New("tenure: can only promote a learner member")
	ErrTooManyLearners  = errors.New("tenure: too many learner members in cluster")
	ErrUnhealthyCluster = errors.New("tenure: unhealthy cluster")
	// ErrNotEnoughStartedMembers: a membership change that would leave fewer
	// members that have ever started than a quorum (etcd's wording).
	ErrNotEnoughStartedMembers = errors.New("tenure: re-configuration failed due to not enough started members")
	// ErrBadLeaderTransferee: TransferLeadership to a member that does not
	// exist or is a learner (etcd answers MoveLeader the same way).
	ErrBadLeaderTransferee = errors.New("tenure: bad leader transferee")
	// ErrMemberRemoved: this member was removed from the cluster (etcd's
	// wording). Its raft state can never rejoin: member IDs are not reused.
	ErrMemberRemoved = errors.New("tenure: the member has been permanently removed from the cluster")
)

// StateMachine is the deterministic state machine the node feeds. All calls
// come from the node's single apply goroutine, in log order.
type StateMachine interface {
	// ApplyEntry stages the effects of one committed EntryNormal entry in b
	// (an indexed batch: reads through b see earlier staged writes). It must be
	// deterministic: no wall clock, randomness or map iteration order. Empty
	// entries (raft's leader no-ops) are not passed.
	ApplyEntry(b *pebble.Batch, index, term uint64, data []byte)
	// Committed is called after the batch holding every entry staged since the
	// previous call has been committed to Pebble: the state machine may now
	// publish its new revision, answer waiting proposers and notify watchers.
	Committed()
	// Reload rebuilds all in-memory state from the store; called after a
	// snapshot received from the leader has replaced the state-machine range.
	Reload() error
}

// BatchSealer is optionally implemented by a StateMachine: SealBatch is
// called once per apply batch, after its last ApplyEntry and before the
// batch is committed, so that per-batch records (the current revision) are
// written once instead of once per entry.
type BatchSealer interface {
	SealBatch(b *pebble.Batch)
}

// ProposalAbsorber is optionally implemented by a StateMachine. On the
// leader, each normal entry of a proposal forwarded by a follower is offered
// to AbsorbProposal before raft sees it; an entry it absorbs (returns true
// for) is not appended as an entry of its own: the state machine takes over
// proposing its content, typically merged with its own pending entries. It
// runs on the forwarding goroutine and must not block on raft.
type ProposalAbsorber interface {
	AbsorbProposal(data []byte) bool
}

// Member is one cluster member as MemberList reports it.
type Member struct {
	ID         uint64   `json:"id"`
	Name       string   `json:"name"`
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs,omitempty"`
	IsLearner  bool     `json:"isLearner,omitempty"`
}

// LeaderEvent reports a change of leader as this member sees it.
type LeaderEvent struct {
	Leader   uint64 // 0: no leader known
	Term     uint64
	IsLeader bool // this member is the leader
}

// ensure raftpb is referenced for implementers of this file's contracts.
var _ = raftpb.EntryNormal
