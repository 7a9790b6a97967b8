package raftnode

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/cockroachdb/pebble/v2"
	"github.com/tenure-io/tenure/server/storage"
)

// ErrNotLeader is returned by PromoteMember on a member that is not the
// leader (only the leader knows how far a learner is behind).
var ErrNotLeader = errors.New("tenure: not leader")

// MembersFetcher is implemented by transports that can ask a peer for the
// cluster's ID and members (used when joining an existing cluster).
type MembersFetcher interface {
	FetchMembers(ctx context.Context, peerURLs []string) (clusterID uint64, members []Member, err error)
}

func sameURLs(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// joinExisting learns the cluster ID and this member's ID (assigned by
// `member add` for its peer URLs) from the peers in InitialCluster.
func (n *Node) joinExisting() error {
	f, ok := n.tr.(MembersFetcher)
	if !ok {
		return errors.New("raftnode: joining an existing cluster needs a transport that can fetch members")
	}
	var urls []string
	for _, m := range n.cfg.InitialCluster {
		if m.Name != n.cfg.Name {
			urls = append(urls, m.PeerURLs...)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cid, ms, id, err := findSelf(ctx, f, urls, n.cfg.PeerURLs)
	if err != nil {
		return err
	}
	n.id = id
	b := n.db.NewBatch()
	defer b.Close()
	_ = storage.SetU64(b, keyLocalID, n.id)
	_ = storage.SetU64(b, storage.KeyClusterID, cid)
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	n.membersMu.Lock()
	for i := range ms {
		n.members[ms[i].ID] = &ms[i]
	}
	n.membersMu.Unlock()
	n.log.Info("joining existing cluster", "id", fmt.Sprintf("%x", n.id), "cluster", fmt.Sprintf("%x", cid))
	return nil
}

// findSelf finds the member record a new member joins as: the one whose
// peer URLs are ours and that has not started yet (no name, no client
// URLs). A started record at our peer URLs is a previous incarnation: the
// member that was removed before this one was added at the same URLs, seen
// in a stale view (the asked member has not applied the removal and the
// addition yet), or a member that lost its data. Taking its id would be
// fatal — raft keeps that id's old log position and never repairs a log
// that went missing — so findSelf asks again, rotating through the peers,
// until a view shows the new record or ctx ends.
func findSelf(ctx context.Context, f MembersFetcher, peers, self []string) (cid uint64, ms []Member, id uint64, err error) {
	for attempt := 0; ; attempt++ {
		k := attempt % max(len(peers), 1)
		order := append(append([]string(nil), peers[k:]...), peers[:k]...)
		cid, ms, err = f.FetchMembers(ctx, order)
		if err != nil {
			err = fmt.Errorf("raftnode: fetch members from existing cluster: %w", err)
		} else {
			var started uint64
			for _, m := range ms {
				if !sameURLs(m.PeerURLs, self) {
					continue
				}
				if m.Name == "" && len(m.ClientURLs) == 0 {
					return cid, ms, m.ID, nil
				}
				started = m.ID
			}
			if started != 0 {
				err = fmt.Errorf("raftnode: peer URLs %v belong to member %x, which has already started: either the cluster has not applied its removal and this member's addition yet, or this member lost its data (remove it and add it again: member remove, member add)", self, started)
			} else {
				err = fmt.Errorf("raftnode: peer URLs %v are not a member of the existing cluster (run member add first)", self)
			}
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, nil, 0, err
		case <-t.C:
		}
	}
}

// publishAttrs proposes this member's name and client URLs until its member
// record carries them (etcd's ClusterMemberAttrSet).
func (n *Node) publishAttrs() {
	defer n.wg.Done()
	for {
		n.membersMu.RLock()
		m := n.members[n.id]
		done := m != nil && m.Name == n.cfg.Name && sameURLs(m.ClientURLs, n.cfg.ClientURLs)
		n.membersMu.RUnlock()
		if done {
			n.attrsApplied.Store(true)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(n.cfg.ElectionTicks)*n.cfg.TickInterval*2)
		if m != nil {
			data, _ := json.Marshal(attrSet{ID: n.id, Name: n.cfg.Name, ClientURLs: n.cfg.ClientURLs})
			_ = n.Propose(ctx, append([]byte{internalPrefix, internalAttrSet}, data...))
		}
		// wait for the apply loop to move (or the timeout) before re-checking
		_, ch := n.appliedWait()
		select {
		case <-ch:
		case <-ctx.Done():
		case <-n.stopc:
			cancel()
			return
		}
		cancel()
	}
}

func (n *Node) member(id uint64) (Member, bool) {
	n.membersMu.RLock()
	defer n.membersMu.RUnlock()
	m, ok := n.members[id]
	if !ok {
		return Member{}, false
	}
	return *m, true
}

// proposeConfChange proposes cc and waits until it is applied.
func (n *Node) proposeConfChange(ctx context.Context, cc *raftpb.ConfChange) error {
	if !n.started.Load() || n.isStopped() {
		return ErrStopped
	}
	if err := n.waitLeader(ctx); err != nil {
		return err
	}
	id := uint64(time.Now().UnixNano())<<8 | n.ccSeq.Add(1)&0xff
	cc.Id = new(id)
	w := ccWaiter{done: make(chan error, 1), dropped: make(chan struct{}, 1)}
	n.ccMu.Lock()
	n.ccWaiters[id] = w
	n.ccMu.Unlock()
	defer func() {
		n.ccMu.Lock()
		delete(n.ccWaiters, id)
		n.ccMu.Unlock()
	}()
	// Raft replaces a conf change with an empty entry while an earlier one
	// may be unapplied, as far as raft knows — always true for a leader that
	// has just been elected (e.g. right after RemoveMember handed leadership
	// away). On the leader the refusal is seen at once
	// (errConfChangeDropped); a follower hears of it from the leader
	// (msgConfChangeDropped). Either way the change is proposed again once
	// something more is applied here, or after a tick. A removal is also
	// proposed again, same Id, every election timeout until one is applied:
	// it is idempotent, and a forwarded proposal can be lost on its way
	// (found by the chaos soak: removing the leader timed out). Other changes
	// lost that way wait for their deadline.
	var retry <-chan time.Time
	if cc.GetType() == raftpb.ConfChangeRemoveNode {
		t := time.NewTicker(n.cfg.TickInterval * time.Duration(n.cfg.ElectionTicks))
		defer t.Stop()
		retry = t.C
	}
	logged := false
	// waitRefused waits, after a refusal, for more to be applied or a tick.
	waitRefused := func(appliedc <-chan struct{}) error {
		if !logged {
			n.log.Info("membership change waits for an earlier one to be applied", "change", cc.GetType().String(), "member", fmt.Sprintf("%x", cc.GetNodeId()))
			logged = true
		}
		t := time.NewTimer(n.cfg.TickInterval)
		defer t.Stop()
		select {
		case <-appliedc:
		case <-t.C:
		case <-ctx.Done():
			return n.mapErr(ctx, ctx.Err())
		case <-n.stopc:
			return ErrStopped
		}
		return nil
	}
	// propose proposes cc until raft here takes it.
	propose := func() error {
		for {
			_, appliedc := n.appliedWait()
			err := n.rn.ProposeConfChange(ctx, cc)
			if !errors.Is(err, errConfChangeDropped) {
				return n.mapErr(ctx, err)
			}
			if err := waitRefused(appliedc); err != nil {
				return err
			}
		}
	}
	if err := propose(); err != nil {
		return err
	}
	for {
		select {
		case err := <-w.done:
			return err
		case <-w.dropped:
			_, appliedc := n.appliedWait()
			if err := waitRefused(appliedc); err != nil {
				return err
			}
			if err := propose(); err != nil {
				return err
			}
		case <-retry:
			if err := n.rn.ProposeConfChange(ctx, cc); err != nil && !errors.Is(err, errConfChangeDropped) {
				return n.mapErr(ctx, err)
			}
		case <-ctx.Done():
			return n.mapErr(ctx, ctx.Err())
		case <-n.stopc:
			return ErrStopped
		}
	}
}

// ccWaiter is a proposeConfChange caller: done gets the change's outcome
// once it is applied, dropped a signal when the leader refused it
// (msgConfChangeDropped).
type ccWaiter struct {
	done    chan error
	dropped chan struct{}
}

// stepForwardedConfChanges steps at once, not through the proposal buffer,
// the conf changes in a proposal a follower forwarded to this leader, so
// that raft's refusal is seen while the entry still says which change it
// was, and tells that follower (msgConfChangeDropped). It returns m with
// its other entries, or nil when none are left. It never waits: it runs
// on the peer stream's reader.
func (n *Node) stepForwardedConfChanges(m *raftpb.Message) *raftpb.Message {
	ents := m.GetEntries()
	if !slices.ContainsFunc(ents, isConfChange) {
		return m
	}
	var rest []*raftpb.Entry
	for _, e := range ents {
		if !isConfChange(e) {
			rest = append(rest, e)
			continue
		}
		id := confChangeID(e)
		err := n.rn.StepConfChangeNow(&raftpb.Message{Type: raftpb.MsgProp.Enum(), Entries: []*raftpb.Entry{e}})
		// Any other error loses it like any forwarded proposal: see proposeConfChange.
		if errors.Is(err, errConfChangeDropped) && id != 0 {
			var ctx [8]byte
			binary.BigEndian.PutUint64(ctx[:], id)
			n.tr.Send([]*raftpb.Message{{Type: msgConfChangeDropped.Enum(), To: new(m.GetFrom()), From: new(n.id), Context: ctx[:]}})
		}
	}
	if len(rest) == 0 {
		return nil
	}
	return &raftpb.Message{Type: m.Type, To: m.To, From: m.From, Entries: rest}
}

// confChangeID is the Id of the (version 1) conf change in e, 0 if none.
func confChangeID(e *raftpb.Entry) uint64 {
	if e.GetType() != raftpb.EntryConfChange {
		return 0
	}
	var cc raftpb.ConfChange
	if proto.Unmarshal(e.GetData(), &cc) != nil {
		return 0
	}
	return cc.GetId()
}

// confChangeDropped wakes the caller waiting on the change the leader
// refused (msgConfChangeDropped), so that it proposes it again.
func (n *Node) confChangeDropped(m *raftpb.Message) {
	if len(m.GetContext()) != 8 {
		return
	}
	id := binary.BigEndian.Uint64(m.GetContext())
	n.ccMu.Lock()
	defer n.ccMu.Unlock()
	if w, ok := n.ccWaiters[id]; ok {
		select {
		case w.dropped <- struct{}{}:
		default:
		}
	}
}

// AddMember adds a member (a voter, or a learner) with the given peer URLs.
// It returns the new member and the member list after the change.
// Errors: ErrPeerURLExists, ErrTooManyLearners, ErrUnhealthyCluster and
// ErrNotEnoughStartedMembers (strict.go), plus Propose's errors.
func (n *Node) AddMember(ctx context.Context, peerURLs []string, learner bool) (Member, []Member, error) {
	learners := 0
	for _, m := range n.Members() {
		for _, u := range m.PeerURLs {
			if slices.Contains(peerURLs, u) {
				return Member{}, nil, ErrPeerURLExists
			}
		}
		if m.IsLearner {
			learners++
		}
	}
	if learner && learners >= 1 {
		return Member{}, nil, ErrTooManyLearners
	}
	if err := n.mayAdd(learner); err != nil {
		return Member{}, nil, err
	}
	var id uint64
	for {
		id = MemberID("", peerURLs, n.cfg.ClusterToken+"/"+strconv.FormatInt(time.Now().UnixNano(), 10))
		if _, ok := n.member(id); !ok && !n.IsRemoved(id) {
			break
		}
	}
	m := Member{ID: id, PeerURLs: slices.Clone(peerURLs), IsLearner: learner}
	ctxb, _ := json.Marshal(m)
	typ := raftpb.ConfChangeAddNode
	if learner {
		typ = raftpb.ConfChangeAddLearnerNode
	}
	if err := n.proposeConfChange(ctx, &raftpb.ConfChange{Type: typ.Enum(), NodeId: new(id), Context: ctxb}); err != nil {
		return Member{}, nil, err
	}
	return m, n.Members(), nil
}

// RemoveMember removes a member. Removing the leader first hands leadership
// to another voter (the most caught-up one when known), so the cluster is
// not left following a leader that is no longer in its configuration
// (which would drop every proposal). Errors: ErrMemberNotFound, plus
// Propose's errors, ErrTimeout and ErrStopped.
func (n *Node) RemoveMember(ctx context.Context, id uint64) ([]Member, error) {
	if _, ok := n.member(id); !ok {
		return nil, ErrMemberNotFound
	}
	if err := n.mayRemove(id); err != nil {
		return nil, err
	}
	if lead, _ := n.leader(); lead == id {
		if to := n.transferTarget(id); to != 0 {
			n.log.Info("removing the leader: transferring leadership first", "leader", fmt.Sprintf("%x", id), "to", fmt.Sprintf("%x", to))
			if err := n.moveLeadershipOff(ctx, id, to); err != nil {
				return nil, err
			}
		}
	}
	if err := n.proposeConfChange(ctx, &raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: new(id)}); err != nil {
		return nil, err
	}
	return n.Members(), nil
}

// UpdateMember changes a member's peer URLs. Errors: ErrMemberNotFound, ErrPeerURLExists.
func (n *Node) UpdateMember(ctx context.Context, id uint64, peerURLs []string) ([]Member, error) {
	m, ok := n.member(id)
	if !ok {
		return nil, ErrMemberNotFound
	}
	for _, o := range n.Members() {
		if o.ID == id {
			continue
		}
		for _, u := range o.PeerURLs {
			if slices.Contains(peerURLs, u) {
				return nil, ErrPeerURLExists
			}
		}
	}
	m.PeerURLs = slices.Clone(peerURLs)
	ctxb, _ := json.Marshal(m)
	if err := n.proposeConfChange(ctx, &raftpb.ConfChange{Type: raftpb.ConfChangeUpdateNode.Enum(), NodeId: new(id), Context: ctxb}); err != nil {
		return nil, err
	}
	return n.Members(), nil
}

// PromoteMember turns a learner into a voter. It must run on the leader.
// Errors: ErrMemberNotFound, ErrNotLearner, ErrNotLeader, ErrLearnerNotReady.
func (n *Node) PromoteMember(ctx context.Context, id uint64) ([]Member, error) {
	m, ok := n.member(id)
	if !ok {
		return nil, ErrMemberNotFound
	}
	if !m.IsLearner {
		return nil, ErrNotLearner
	}
	st := n.rn.Status()
	if st.RaftState != raft.StateLeader {
		return nil, ErrNotLeader
	}
	leaderMatch := st.Progress[n.id].Match
	pr, ok := st.Progress[id]
	if !ok || float64(pr.Match) < float64(leaderMatch)*0.9 {
		return nil, ErrLearnerNotReady
	}
	if err := n.mayPromote(); err != nil {
		return nil, err
	}
	m.IsLearner = false
	ctxb, _ := json.Marshal(m)
	if err := n.proposeConfChange(ctx, &raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: new(id), Context: ctxb}); err != nil {
		return nil, err
	}
	return n.Members(), nil
}

// TransferLeadership asks the leader to hand leadership to member to and
// waits until it has. Errors: ErrBadLeaderTransferee, ErrNoLeader, ErrTimeout, ErrStopped.
func (n *Node) TransferLeadership(ctx context.Context, to uint64) error {
	if m, ok := n.member(to); !ok || m.IsLearner {
		return ErrBadLeaderTransferee
	}
	if err := n.waitLeader(ctx); err != nil {
		return err
	}
	for {
		lead, ch := n.leader()
		if lead == to {
			return nil
		}
		if lead != 0 {
			n.rn.TransferLeadership(ctx, lead, to)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ErrTimeout
		case <-n.stopc:
			return ErrStopped
		}
	}
}

// moveLeadershipOff asks leader id to hand leadership to member to, and
// returns once any leader other than id is known. Any one will do: the
// removal only needs id not to lead. Waiting for exactly to (as
// TransferLeadership does) made removing the leader time out whenever
// another member won the election the transfer set off — a new leader
// then tried to hand over to to in turn, dropping proposals meanwhile
// (found by the 5-member chaos run). The request is repeated every
// election timeout while id still leads: raft abandons a transfer that has
// not finished within one, and the message can be lost.
func (n *Node) moveLeadershipOff(ctx context.Context, id, to uint64) error {
	retry := time.NewTicker(n.cfg.TickInterval * time.Duration(n.cfg.ElectionTicks))
	defer retry.Stop()
	for {
		lead, ch := n.leader()
		if lead != 0 && lead != id {
			return nil
		}
		if lead == id {
			n.rn.TransferLeadership(ctx, lead, to)
		}
		select {
		case <-ch:
		case <-retry.C:
		case <-ctx.Done():
			return ErrTimeout
		case <-n.stopc:
			return ErrStopped
		}
	}
}

// transferTarget picks a voter other than except to take over leadership:
// the one with the highest match index when this member leads, else any.
func (n *Node) transferTarget(except uint64) uint64 {
	st := n.rn.Status()
	var best, bestMatch uint64
	for _, m := range n.Members() {
		if m.ID == except || m.IsLearner {
			continue
		}
		match := uint64(0)
		if pr, ok := st.Progress[m.ID]; ok {
			match = pr.Match
		}
		if best == 0 || match > bestMatch {
			best, bestMatch = m.ID, match
		}
	}
	return best
}
