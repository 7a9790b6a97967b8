package api

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/tenure-io/tenure/api/tenurev1"
)

// With LockConfig.RelaySessions (on with thrifty replication), a follower
// carries a client's Session stream to the leader's own Session service
// instead of serving it: the leader decides every grant at its apply, and a
// follower that serves lock sessions must apply each hand-off before it can
// tell its waiter, which keeps it from being the follower thrifty
// replication holds back. A relayed stream is the leader's: it ends when
// the leadership moves (the client opens a new one, as after losing the
// member it talked to), and its responses carry the leader's member ID.

// sessionRelayConn returns a connection to the leader's client URL, or nil
// when this member is the leader, knows none, or cannot dial it (then it
// serves the stream itself).
func (l *Locks) sessionRelayConn() *grpc.ClientConn {
	node := l.s.cfg.Node
	lead, _ := node.LeaderTerm()
	if lead == 0 || lead == node.ID() {
		return nil
	}
	l.relayMu.Lock()
	defer l.relayMu.Unlock()
	if l.relayConn != nil && l.relayTo == lead {
		return l.relayConn
	}
	if l.relayConn != nil {
		_ = l.relayConn.Close() // streams on it end; their clients reopen
		l.relayConn, l.relayTo = nil, 0
	}
	if conn := l.s.dialMemberID(lead); conn != nil {
		l.relayConn, l.relayTo = conn, lead
	}
	return l.relayConn
}

// relaySession copies st's requests to a Session stream on conn and that
// stream's responses back, until either side ends. A client's half-close
// is passed on, so the leader answers what is still running first.
func relaySession(st tenurev1.Locks_SessionServer, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(st.Context(), forwardedKey, "1"))
	defer cancel()
	up, err := tenurev1.NewLocksClient(conn).Session(ctx)
	if err != nil {
		return err
	}
	// The copier is not waited for: it ends when st does, which is when
	// this handler returns (or the client goes first).
	go func() {
		for {
			req, err := st.Recv()
			if errors.Is(err, io.EOF) {
				_ = up.CloseSend()
				return
			}
			if err != nil {
				cancel() // the client is gone: so is its stream on the leader
				return
			}
			if up.Send(req) != nil {
				return // up.Recv reports why
			}
		}
	}()
	for {
		resp, err := up.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := st.Send(resp); err != nil {
			return err
		}
	}
}
