package api

import (
	"errors"
	"sync/atomic"

	"github.com/tenure-io/tenure/server/apply"
	"github.com/tenure-io/tenure/server/raftnode"
)

// proposalStats counts this member's client proposals (atomics only: they
// are updated on every write).
type proposalStats struct {
	pending   atomic.Int64
	committed atomic.Uint64
	failed    atomic.Uint64
}

func (p *proposalStats) done(err error) {
	p.pending.Add(-1)
	if proposalFailed(err) {
		p.failed.Add(1)
	} else {
		p.committed.Add(1)
	}
}

// proposalFailed: the proposal never got applied (no leader, dropped, timed
// out, stopped); errors of the request itself (compacted, lease not found…)
// were committed and applied.
func proposalFailed(err error) bool {
	if err == nil {
		return false
	}
	for _, e := range []error{raftnode.ErrNoLeader, raftnode.ErrTimeout, raftnode.ErrProposalDropped, raftnode.ErrStopped, apply.ErrTimeout, apply.ErrStopped, apply.ErrRequestTooLarge} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// ProposalStats reports client proposals in flight on this member, and how
// many were applied or failed (timed out, dropped, no leader) since start.
func (s *Server) ProposalStats() (pending int64, committed, failed uint64) {
	return s.props.pending.Load(), s.props.committed.Load(), s.props.failed.Load()
}
