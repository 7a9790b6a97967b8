package raftnode

import (
	"context"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// KV is one state-machine key/value pair of a streamed snapshot.
type KV struct{ Key, Value []byte }

// SnapshotReader yields a streamed snapshot's pairs chunk by chunk; it
// returns io.EOF after the last chunk.
type SnapshotReader func() ([]KV, error)

// Handler is the node side of a Transport: what a transport calls when
// something arrives from a peer.
type Handler interface {
	// ClusterID is the local cluster ID (0 while unknown); transports reject
	// peers that present another one.
	ClusterID() uint64
	// Process steps a raft message received from a peer.
	Process(ctx context.Context, m *raftpb.Message) error
	// ReceiveSnapshot installs a snapshot streamed by the leader: m is the
	// MsgSnap (metadata only, no Data), next yields the state-machine pairs.
	ReceiveSnapshot(ctx context.Context, m *raftpb.Message, next SnapshotReader) error
	// ReportUnreachable tells raft a peer could not be reached.
	ReportUnreachable(id uint64)
	// IsRemoved reports whether member id was removed from the cluster;
	// transports refuse its streams and tell it so.
	IsRemoved(id uint64) bool
	// ReportRemoved tells the local member that peer refused it as a member
	// removed from the cluster.
	ReportRemoved(peer uint64)
	// MembersInfo answers the Members RPC.
	MembersInfo() (clusterID uint64, members []Member)
}

// Transport moves raft messages and snapshots between members.
type Transport interface {
	// Start begins serving; h receives everything that arrives.
	Start(localID uint64, h Handler) error
	// Send queues messages for delivery; it never blocks. Messages to
	// unknown or unreachable peers are dropped (and reported unreachable).
	Send(msgs []*raftpb.Message)
	// SendSnapshot streams m (a MsgSnap without Data) and the pairs next
	// yields to m.To and returns once the receiver has installed it or failed.
	SendSnapshot(ctx context.Context, m *raftpb.Message, next SnapshotReader) error
	// ActiveSince is when the current connection to peer id came up (zero
	// while there is none): etcd's measure of a peer being up, for the
	// strict reconfiguration check.
	ActiveSince(id uint64) time.Time
	// AddPeer adds or updates a peer's URLs; RemovePeer forgets a peer.
	AddPeer(id uint64, urls []string)
	RemovePeer(id uint64)
	Stop()
}
