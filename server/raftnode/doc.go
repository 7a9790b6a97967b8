// Package raftnode is the glue between etcd's raft library and Tenure: it owns
// the raft log and hard state in Pebble, the peer transport (gRPC streams),
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
//   - Entries and hard state are synced to disk before messages that depend
//     on them are sent, and before committed entries are handed to apply.
//   - PreVote and CheckQuorum are on; ReadIndex runs in ReadOnlySafe mode.
//   - ReadIndex requests that arrive together share one raft round.
//   - A snapshot sent to a follower is the sender's whole state-machine key
//     range (storage.StateMachineStart ... StateMachineEnd) at its applied
//     index, taken from one Pebble snapshot.
//
// Errors: ErrNoLeader, ErrTimeout, ErrStopped, ErrProposalDropped,
// ErrMemberNotFound, ErrMemberExists, ErrLearnerNotReady, ErrPeerURLExists.
package raftnode
