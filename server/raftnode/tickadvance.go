package raftnode

import "time"

// Initial election tick advance (etcd's --initial-election-tick-advance).
//
// A member starts with its election clock at zero and raft's randomized
// timeout between one and two election timeouts: a cluster started or
// restarted together would sit leaderless for that long. etcd fast-forwards
// the clock of a starting member, and so does Tenure:
//
//   - a sole voter skips all but one tick of the election timeout, always;
//   - with InitialElectionTickAdvance, a voter with peers waits (at most
//     tickAdvanceWait) until its raft streams reach enough peers to make a
//     quorum with it, and then skips all but two ticks. The two left give a
//     leader's heartbeat, already on its way, time to arrive (raft resets
//     the clock on it); with pre-vote and check-quorum a member that does
//     time out cannot disturb a leader its peers still hear.
//
// Without that many peers up in time nothing is advanced: an election
// could not win anyway.

// tickAdvanceWait bounds how long a starting member waits for its peers
// before it gives up advancing its election clock (etcd: 5 s).
var tickAdvanceWait = 5 * time.Second

// initialTickAdvance returns how many ticks a starting voter skips, given
// how many voters the configuration has and how many of its peers among
// them are connected; 0 means none (yet).
func initialTickAdvance(electionTicks, voters, connectedPeers int, enabled bool) int {
	switch {
	case voters == 1:
		return electionTicks - 1
	case !enabled:
		return 0
	case connectedPeers+1 >= voters/2+1:
		return electionTicks - 2
	}
	return 0
}

// advanceElectionClock runs once at Start (see above).
func (n *Node) advanceElectionClock() {
	defer n.wg.Done()
	voters := n.rn.Status().Config.Voters.IDs()
	if _, ok := voters[n.id]; !ok {
		return // a learner never campaigns
	}
	deadline := time.NewTimer(tickAdvanceWait)
	defer deadline.Stop()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for {
		connected := 0
		for id := range voters {
			if id != n.id && !n.tr.ActiveSince(id).IsZero() {
				connected++
			}
		}
		if k := initialTickAdvance(n.cfg.ElectionTicks, len(voters), connected, n.cfg.InitialElectionTickAdvance); k > 0 {
			for range k {
				n.rn.Tick()
			}
			n.log.Info("advanced the election clock at start", "ticks", k, "election-ticks", n.cfg.ElectionTicks, "voters", len(voters), "connected-peers", connected)
			return
		}
		if !n.cfg.InitialElectionTickAdvance {
			return
		}
		select {
		case <-poll.C:
		case <-deadline.C:
			n.log.Info("not advancing the election clock: too few peers connected", "voters", len(voters), "connected-peers", connected, "waited", tickAdvanceWait)
			return
		case <-n.stopc:
			return
		}
	}
}
