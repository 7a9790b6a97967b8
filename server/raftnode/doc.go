// Package raftnode is the glue between etcd's raft library and Tenure: it owns
// the raft log and hard state in Pebble, the peer transport (raft streams
// for messages, gRPC for snapshots and membership lookups),
// the Ready loop, the apply loop's batch lifecycle, log compaction, snapshot
// send/receive, membership, and linearizable read barriers (ReadIndex).
//
// It imports no state machine. The server wires one in through StateMachine:
// raftnode opens an indexed Pebble batch for each group of committed entries,
// lets the state machine add its effects to it, adds the applied index and
// conf state to the same batch, commits it, and only then calls Committed —
// so results are published only when they are in the store, and a crash
// anywhere re-applies exactly the entries above the stored applied index.
//
// Invariants:
//   - New entries, term and vote are synced to disk before messages that
//     depend on them are sent. A committed entry is handed to apply only once
//     it is on disk: committed entries that earlier Readys wrote (and this
//     one does not rewrite) are handed over before this Ready is persisted,
//     so under load an entry's apply does not wait for the next entries'
//     fsync (etcd does the same); the rest after. A Ready that only advances
//     the commit index writes nothing: the new commit index rides with the
//     next synced write (or a clean stop), as it is recoverable from a quorum
//     (raft's MustSync rule). A stored applied index may therefore pass the
//     stored commit index after a crash, never the stored log; restart
//     raises the commit index to it.
//   - On the leader, proposals forwarded by followers are first offered to a
//     StateMachine that implements ProposalAbsorber (renewal batches are
//     merged into the leader's own).
//   - On the leader, proposals (local or forwarded) wait in a buffer that the
//     Ready loop steps as one MsgProp before it takes each Ready, so raft
//     sends each follower one append per Ready, not one per proposal. The
//     Ready loop alone steps the leader's proposals: their order is their
//     arrival order. A local proposer learns raft's verdict (dropped, …).
//   - On the leader, a proposal that a StateMachine implementing
//     ProposalDeferrer calls deferrable (local or forwarded) waits for the
//     next other proposal and goes to raft in the same message, after the
//     ones deferred before it, or alone after Config.DeferLinger.
//   - A follower sends its proposals and ReadIndex requests straight to the
//     leader it knows (as raft forwards them, without a term) instead of
//     leaving them to its next Ready, which waits behind its own disk sync.
//   - With Config.ThriftyDelay (off by default), the leader holds its appends
//     to the followers no commit needs (all but the most advanced majority;
//     never one that forwarded a read index, or a proposal a StateMachine
//     implementing LazyApplyTolerant does not accept, within an election
//     timeout) for up to that long and sends them merged; any other message
//     to such a follower releases them first (thrifty.go). To the other
//     followers, when none of those conditions holds, an append that only
//     carries a commit index waits likewise for the next message to them.
//   - Notices (SendNotice → the peer's Config.OnNotice) ride the raft stream
//     as messages of a type raft keeps local (notice.go); Process hands them
//     to OnNotice and never to raft. They are hints: they may be lost or
//     overtake raft messages, skip thrifty replication's hold, and nothing
//     may depend on them for correctness (the lock service uses them to push
//     grants ahead of a member's own apply). Those sent while the state
//     machine's Committed runs go out together when it returns, one
//     Transport.Send per apply batch.
//   - PreVote and CheckQuorum are on; ReadIndex runs in ReadOnlySafe mode.
//   - ReadIndex requests that arrive together share one raft round.
//   - A snapshot sent to a follower is the sender's whole state-machine key
//     range (storage.StateMachineStart ... StateMachineEnd) at its applied
//     index, taken from one Pebble snapshot.
//
// Implementation notes:
//
//   - Driven by a raft.RawNode that callers step under a mutex (rawNode),
//     not by raft.Node: raft.Node's own goroutine added a goroutine hand-off
//     to every proposal, peer message and Ready. Proposals still wait for a
//     known leader, as with raft.Node. The Ready loop takes each Ready,
//     persists hard state + entries (+ snapshot metadata) in one synced Pebble
//     batch before followers send; the leader sends its appends first (raft
//     thesis §10.2.1). Committed entries go to a separate apply goroutine over
//     a bounded channel; a group containing a conf change is waited for before
//     Advance so raft never counts votes from removed members.
//
//   - Raft accepts one unapplied conf change at a time and turns a second
//     into an empty entry. A conf change's caller is therefore answered only
//     after Advance has told raft it is applied, so a script's next change
//     is not refused; and the leader, which sees raft swap the entry
//     (errConfChangeDropped), proposes a refused change again once more is
//     applied. A follower forwards changes and cannot see the refusal: the
//     leader steps a forwarded change at once (not through the proposal
//     buffer) and, when raft swaps it, tells that follower
//     (msgConfChangeDropped, with the change's Id), which proposes it again
//     the same way. A forwarded change lost on its way is not seen by
//     anyone: removals (idempotent) are proposed again every election
//     timeout; an addition lost that way runs to its deadline.
//
//   - A starting voter fast-forwards its election clock (tickadvance.go,
//     etcd's --initial-election-tick-advance): a sole voter by all but one
//     tick, one with peers by all but two once its streams reach a quorum.
//
//   - Restart replays entries from the last compaction snapshot; the apply
//     loop skips entries <= the stored applied index but still hands every
//     conf change to raft (ApplyConfChange), as etcd does.
//
//   - Log compaction keeps no snapshot data: the state lives in Pebble. A
//     MsgSnap is rewritten to the sender's applied index/term/ConfState from
//     one Pebble snapshot and the state-machine range is streamed in chunks
//     (etcd's "merged snapshot"). The receiver replaces the range in one
//     synced batch under the apply lock, calls Reload, then steps the MsgSnap.
//
//   - Entries whose data starts with 0xFE are internal (member attribute
//     publishing) and never reach the StateMachine.
//
//   - Member records (JSON) live under storage.PrefixMembers followed by the
//     id (and the id plus 'r' marks a removed member); conf changes carry
//     the Member JSON in their context.
//
//   - Raft messages travel on raft streams (stream.go): a TCP (or TLS)
//     connection per ordered pair of members on the peer port, told apart
//     from the peer gRPC server by its first bytes (ServePeerListener). The
//     Ready loop writes a peer's frame to the socket itself when nothing is
//     queued for it; the rest waits, bounded, for a writer goroutine. The
//     acceptor checks the cluster and member IDs and steps what it reads.
//
//   - A removed member learns it either by applying its own removal or, if
//     it never saw that committed, from a peer: an acceptor refuses the
//     stream of a member it has applied the removal of (hello answer 2), and
//     RemovePeer closes that member's open streams so it redials and is
//     refused. Either way Node.Removed is closed and logged; the owner stops
//     the node. New refuses a store whose member applied its own removal
//     (ErrMemberRemoved).
//
//   - With Config.StrictReconfigCheck (strict.go, etcd's
//     --strict-reconfig-check), AddMember, RemoveMember and PromoteMember
//     first check that the change cannot leave the cluster without a quorum
//     of running members: a peer counts as running once this member's raft
//     stream to it has been up for 5 s (Transport.ActiveSince), and voters
//     need a quorum of members that have ever started (published a name).
//     Refusals: ErrUnhealthyCluster, ErrNotEnoughStartedMembers.
//
// Observability: Config.Observer receives disk sync, apply and snapshot-send
// timings (hot paths: callbacks must be cheap); syncs and applies over 100 ms
// are logged ("slow fdatasync", "apply request took too long"). TLS for the
// peer transport comes in through Config.PeerTLS.
//
// Errors: ErrNoLeader, ErrTimeout, ErrStopped, ErrMemberRemoved, ErrProposalDropped,
// ErrMemberNotFound, ErrMemberExists, ErrLearnerNotReady, ErrPeerURLExists,
// ErrNotLearner, ErrTooManyLearners, ErrNotLeader (PromoteMember off-leader),
// ErrBadLeaderTransferee (TransferLeadership to an unknown member or a learner),
// ErrUnhealthyCluster and ErrNotEnoughStartedMembers (the strict
// reconfiguration check).
package raftnode
