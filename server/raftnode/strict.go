package raftnode

import "time"

// The strict reconfiguration check is etcd's (--strict-reconfig-check):
// before proposing a membership change, the member that received it makes
// sure the change cannot leave the cluster without a quorum of members that
// run. Adding a voter to a 3-member cluster with one member down makes 4
// members, 2 of them up, and quorum 3: the cluster stops until the new
// member starts, and stays stopped if it never does. The check uses what
// this member sees: its raft streams to the peers (up for at least
// healthInterval) and which members have ever started (published their
// name). Learners need no quorum check to be removed.

// healthInterval is how long a peer's stream must have been up for the
// peer to count as running (etcd's HealthInterval).
var healthInterval = 5 * time.Second // a var so tests can shorten it

func quorumOf(n int) int { return n/2 + 1 }

// voters is the member list's voting members.
func (n *Node) voters() []Member {
	var vs []Member
	for _, m := range n.Members() {
		if !m.IsLearner {
			vs = append(vs, m)
		}
	}
	return vs
}

// connectedSince counts the voters in vs this member has been connected to
// since before t, itself included.
func (n *Node) connectedSince(vs []Member, t time.Time) int {
	c := 0
	for _, m := range vs {
		if m.ID == n.id {
			c++
			continue
		}
		if s := n.tr.ActiveSince(m.ID); !s.IsZero() && s.Before(t) {
			c++
		}
	}
	return c
}

// started counts the members in vs that have ever started (a member added
// but never started has published no name).
func started(vs []Member, except uint64) (members, startedN int) {
	for _, m := range vs {
		if m.ID == except {
			continue
		}
		members++
		if m.Name != "" {
			startedN++
		}
	}
	return members, startedN
}

// mayAdd refuses adding a member (a learner too) when this member has not
// been connected, for healthInterval, to a quorum of the grown voter set;
// and adding a voter when fewer members have ever started than its quorum.
func (n *Node) mayAdd(learner bool) error {
	if !n.cfg.StrictReconfigCheck {
		return nil
	}
	vs := n.voters()
	if !learner {
		members, st := started(vs, 0)
		members++ // the new one, not started yet
		if !(st == 1 && members == 2) && st < quorumOf(members) {
			n.log.Warn("rejecting member add request; not enough started members", "started", st, "voters-after", members)
			return ErrNotEnoughStartedMembers
		}
	}
	if len(vs) == 1 {
		return nil // growing a single-member cluster is how clusters are built
	}
	if c := n.connectedSince(vs, time.Now().Add(-healthInterval)); c < quorumOf(len(vs)+1) {
		n.log.Warn("rejecting member add request; local member has not been connected to a quorum of the grown cluster",
			"connected", c, "voters-after", len(vs)+1, "quorum-after", quorumOf(len(vs)+1))
		return ErrUnhealthyCluster
	}
	return nil
}

// mayRemove refuses removing a running voter when the voters left that
// this member has been connected to would be fewer than their quorum.
func (n *Node) mayRemove(id uint64) error {
	if !n.cfg.StrictReconfigCheck {
		return nil
	}
	if m, ok := n.member(id); ok && m.IsLearner {
		return nil
	}
	vs := n.voters()
	members, st := started(vs, id)
	if st < quorumOf(members) {
		n.log.Warn("rejecting member remove request; not enough started members", "started", st, "voters-after", members)
		return ErrNotEnoughStartedMembers
	}
	if id != n.id && n.tr.ActiveSince(id).IsZero() {
		return nil // a member that is down is no part of the running quorum
	}
	if c := n.connectedSince(vs, time.Now().Add(-healthInterval)); c-1 < quorumOf(len(vs)-1) {
		n.log.Warn("rejecting member remove request; the running members left would be fewer than a quorum",
			"connected", c, "voters-after", len(vs)-1)
		return ErrUnhealthyCluster
	}
	return nil
}

// mayPromote refuses promoting a learner when fewer members have ever
// started (the learner counted) than the grown voter set's quorum.
func (n *Node) mayPromote() error {
	if !n.cfg.StrictReconfigCheck {
		return nil
	}
	members, st := started(n.voters(), 0)
	if st+1 < quorumOf(members+1) {
		n.log.Warn("rejecting member promote request; not enough started members", "started", st+1, "voters-after", members+1)
		return ErrNotEnoughStartedMembers
	}
	return nil
}
