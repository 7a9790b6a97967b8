package raftnode

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// recordingHandler collects what a transport delivers.
type recordingHandler struct {
	cluster     uint64
	mu          sync.Mutex
	msgs        []*raftpb.Message
	got         chan struct{} // signalled on every delivery
	gate        chan struct{} // when non-nil, Process waits for it to close
	unreachable atomic.Uint64 // ReportUnreachable calls
	removedIDs  sync.Map      // IsRemoved answers true for these
	removedBy   atomic.Uint64 // the peer of the last ReportRemoved
}

func newRecorder() *recordingHandler {
	return &recordingHandler{cluster: 7, got: make(chan struct{}, 1)}
}

func (h *recordingHandler) ClusterID() uint64 { return h.cluster }
func (h *recordingHandler) Process(_ context.Context, m *raftpb.Message) error {
	if h.gate != nil {
		<-h.gate
	}
	h.mu.Lock()
	h.msgs = append(h.msgs, m)
	h.mu.Unlock()
	select {
	case h.got <- struct{}{}:
	default:
	}
	return nil
}
func (h *recordingHandler) ReceiveSnapshot(context.Context, *raftpb.Message, SnapshotReader) error {
	return nil
}
func (h *recordingHandler) ReportUnreachable(uint64)        { h.unreachable.Add(1) }
func (h *recordingHandler) MembersInfo() (uint64, []Member) { return h.cluster, nil }
func (h *recordingHandler) IsRemoved(id uint64) bool {
	_, ok := h.removedIDs.Load(id)
	return ok
}
func (h *recordingHandler) ReportRemoved(peer uint64) { h.removedBy.Store(peer) }

func (h *recordingHandler) received() []*raftpb.Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*raftpb.Message(nil), h.msgs...)
}

// waitReceived waits until h holds n messages.
func (h *recordingHandler) waitReceived(t *testing.T, n int, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for len(h.received()) < n {
		select {
		case <-h.got:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("received %d of %d messages", len(h.received()), n)
		}
	}
}

// servedTransport is a receiving transport serving raft streams and gRPC on
// one listener, as a member's peer port does.
type servedTransport struct {
	tr   *PeerTransport
	srv  *grpc.Server
	addr string
	done chan error
}

func serveTransport(t *testing.T, id uint64, h Handler, addr string, cfg PeerTransportConfig) *servedTransport {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	st := &servedTransport{tr: NewPeerTransport(cfg), srv: grpc.NewServer(), addr: lis.Addr().String(), done: make(chan error, 1)}
	st.tr.Register(st.srv)
	if err := st.tr.Start(id, h); err != nil {
		t.Fatal(err)
	}
	go func() { st.done <- ServePeerListener(lis, st.srv, st.tr) }()
	return st
}

// stop stops the gRPC server (which closes the listener) and the transport,
// and waits for ServePeerListener to return.
func (st *servedTransport) stop(t *testing.T) {
	t.Helper()
	st.srv.Stop()
	st.tr.Stop()
	select {
	case err := <-st.done:
		if err != nil && !strings.Contains(err.Error(), "closed") {
			t.Errorf("ServePeerListener: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServePeerListener did not return after the server stopped")
	}
}

func appMsg(to, idx uint64, size int) *raftpb.Message {
	return &raftpb.Message{Type: raftpb.MsgApp.Enum(), To: proto.Uint64(to), From: proto.Uint64(1),
		Index: proto.Uint64(idx), Entries: []*raftpb.Entry{{Index: proto.Uint64(idx), Data: bytes.Repeat([]byte{byte(idx)}, size)}}}
}

func sameMessages(t *testing.T, got, want []*raftpb.Message) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("received %d messages, sent %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("message %d: got index %d (%d bytes), want index %d (%d bytes)", i,
				got[i].GetIndex(), proto.Size(got[i]), want[i].GetIndex(), proto.Size(want[i]))
		}
	}
}

// sender starts a transport as member 1 with peer 2 at addr and waits for
// its raft stream to connect.
func sender(t *testing.T, addr string, cfg PeerTransportConfig) (*PeerTransport, *recordingHandler) {
	t.Helper()
	h := newRecorder()
	tr := NewPeerTransport(cfg)
	tr.AddPeer(2, []string{"http://" + addr})
	if err := tr.Start(1, h); err != nil {
		t.Fatal(err)
	}
	waitConnected(t, tr, 2)
	return tr, h
}

func waitConnected(t *testing.T, tr *PeerTransport, id uint64) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("raft stream to %x to connect", id), func() bool {
		tr.mu.Lock()
		p := tr.peers[id]
		tr.mu.Unlock()
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.conn != nil
	})
}

// Messages sent in bursts over real raft streams arrive complete and in
// order, including bursts bigger than one frame's byte budget and single
// messages bigger than the budget, and travel in fewer frames than messages.
func TestPeerTransportDeliversBurstsInOrder(t *testing.T) {
	const maxMsg = 64 << 10 // frame budget 32 KiB
	h := newRecorder()
	recv := serveTransport(t, 2, h, "", PeerTransportConfig{MaxMessageBytes: maxMsg})
	defer recv.stop(t)
	send, _ := sender(t, recv.addr, PeerTransportConfig{MaxMessageBytes: maxMsg})
	defer send.Stop()

	var want []*raftpb.Message
	for burst := 0; burst < 20; burst++ {
		var msgs []*raftpb.Message
		for i := 0; i < 50; i++ {
			idx := uint64(len(want) + 1)
			size := 100
			switch {
			case i%10 == 3:
				size = 10 << 10 // several per frame, then a new frame
			case burst%5 == 4 && i == 0:
				size = 40 << 10 // alone over the budget
			}
			m := appMsg(2, idx, size)
			msgs = append(msgs, m)
			want = append(want, m)
		}
		send.Send(msgs)
	}
	h.waitReceived(t, len(want), 20*time.Second)
	sameMessages(t, h.received(), want)
	// Each burst of 50 is written at once, so the 1,000 messages travel in
	// far fewer frames (one per message would mean batching is broken).
	if frames := recv.tr.batchesRecv.Load(); frames == 0 || frames > uint64(len(want)/2) {
		t.Fatalf("%d messages arrived in %d frames; want batching (at most %d)", len(want), frames, len(want)/2)
	}
}

// Messages addressed to several peers in one Send reach each peer, each
// peer's in the order sent.
func TestPeerTransportSplitsASendByPeer(t *testing.T) {
	h2, h3 := newRecorder(), newRecorder()
	r2 := serveTransport(t, 2, h2, "", PeerTransportConfig{})
	defer r2.stop(t)
	r3 := serveTransport(t, 3, h3, "", PeerTransportConfig{})
	defer r3.stop(t)
	tr := NewPeerTransport(PeerTransportConfig{})
	tr.AddPeer(2, []string{"http://" + r2.addr})
	tr.AddPeer(3, []string{"http://" + r3.addr})
	if err := tr.Start(1, newRecorder()); err != nil {
		t.Fatal(err)
	}
	defer tr.Stop()
	waitConnected(t, tr, 2)
	waitConnected(t, tr, 3)
	var all, want2, want3 []*raftpb.Message
	for i := uint64(1); i <= 30; i++ {
		to := 2 + i%2
		m := appMsg(to, i, 10)
		all = append(all, m)
		if to == 2 {
			want2 = append(want2, m)
		} else {
			want3 = append(want3, m)
		}
	}
	all = append(all, appMsg(9, 99, 1)) // an unknown peer: dropped
	tr.Send(all)
	h2.waitReceived(t, len(want2), 10*time.Second)
	h3.waitReceived(t, len(want3), 10*time.Second)
	sameMessages(t, h2.received(), want2)
	sameMessages(t, h3.received(), want3)
}

// Concurrent senders (a follower forwarding many clients' proposals) share
// the stream: every frame arrives intact, each sender's messages in its
// order, and writes made while another is in progress are combined. The
// first direct write is held until the other senders have queued behind it,
// so the overlap does not depend on how the scheduler ran them (on a busy
// 2-core machine it sometimes ran them one after another: as many writes
// as messages).
func TestPeerTransportConcurrentSenders(t *testing.T) {
	h := newRecorder()
	recv := serveTransport(t, 2, h, "", PeerTransportConfig{})
	defer recv.stop(t)
	send, _ := sender(t, recv.addr, PeerTransportConfig{})
	defer send.Stop()
	const senders, each = 8, 500
	var returned atomic.Int64 // Sends that have returned
	var hold sync.Once
	send.directWriteHook = func() {
		hold.Do(func() { // runs in a sender goroutine: t.Error, not t.Fatal
			deadline := time.Now().Add(10 * time.Second)
			for returned.Load() < senders-1 {
				if time.Now().After(deadline) {
					t.Error("the other senders did not queue behind the first write within 10s")
					return
				}
				time.Sleep(time.Millisecond) // polling interval, not synchronisation
			}
		})
	}
	var wg sync.WaitGroup
	for g := 0; g < senders; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				m := appMsg(2, uint64(g*each+i), 50+i%200)
				m.Term = proto.Uint64(uint64(g)) // the sender, for the order check
				send.Send([]*raftpb.Message{m})
				returned.Add(1)
			}
		}(g)
	}
	wg.Wait()
	h.waitReceived(t, senders*each, 20*time.Second)
	next := make([]uint64, senders)
	for _, m := range h.received() {
		g := m.GetTerm()
		if want := g*each + next[g]; m.GetIndex() != want {
			t.Fatalf("sender %d: got index %d, want %d", g, m.GetIndex(), want)
		}
		if d := m.GetEntries()[0].GetData(); len(d) != 50+int(next[g])%200 || d[0] != byte(m.GetIndex()) {
			t.Fatalf("sender %d message %d: corrupt entry data", g, next[g])
		}
		next[g]++
	}
	if w := send.writes.Load(); w >= senders*each {
		t.Fatalf("%d messages from %d concurrent senders took %d writes; want combined writes", senders*each, senders, w)
	}
}

// When the receiver stops reading, frames queue behind the socket (the
// writer goroutine's path) and still arrive complete and in order once it
// reads again.
func TestPeerTransportQueuesBehindAFullSocket(t *testing.T) {
	h := newRecorder()
	h.gate = make(chan struct{})
	recv := serveTransport(t, 2, h, "", PeerTransportConfig{})
	defer recv.stop(t)
	send, _ := sender(t, recv.addr, PeerTransportConfig{})
	defer send.Stop()
	var want []*raftpb.Message
	// 24 MiB in 64 KiB messages: far more than the socket buffers hold.
	for i := uint64(1); i <= 384; i++ {
		m := appMsg(2, i, 64<<10)
		want = append(want, m)
		send.Send([]*raftpb.Message{m})
	}
	p := send.peers[2]
	p.mu.Lock()
	queued := p.writing
	p.mu.Unlock()
	if !queued {
		t.Fatal("24 MiB to a receiver that does not read fitted in the socket: the queued path was not exercised")
	}
	close(h.gate)
	h.waitReceived(t, len(want), 30*time.Second)
	sameMessages(t, h.received(), want)
}

// A receiver of another cluster, or a different member at the dialed
// address, refuses the stream: nothing is delivered and the sender keeps
// reporting the peer unreachable.
func TestPeerTransportRefusesMismatchedStreams(t *testing.T) {
	for name, c := range map[string]struct {
		cluster uint64
		id      uint64
	}{
		"cluster": {cluster: 8, id: 2},
		"member":  {cluster: 7, id: 5},
	} {
		t.Run(name, func(t *testing.T) {
			h := newRecorder()
			h.cluster = c.cluster
			recv := serveTransport(t, c.id, h, "", PeerTransportConfig{})
			defer recv.stop(t)
			sh := newRecorder()
			tr := NewPeerTransport(PeerTransportConfig{})
			tr.AddPeer(2, []string{"http://" + recv.addr})
			if err := tr.Start(1, sh); err != nil {
				t.Fatal(err)
			}
			defer tr.Stop()
			p := tr.peers[2]
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := p.dialURL("http://" + recv.addr)
			if err == nil || !strings.Contains(err.Error(), "mismatch") {
				t.Fatalf("dial: %v, want a refusal naming the mismatch", err)
			}
			for sh.unreachable.Load() == 0 {
				select {
				case <-ctx.Done():
					t.Fatal("the refused peer was never reported unreachable")
				case <-time.After(5 * time.Millisecond):
				}
			}
			tr.Send([]*raftpb.Message{appMsg(2, 1, 10)})
			if got := len(h.received()); got != 0 {
				t.Fatalf("%d messages delivered over a refused stream", got)
			}
		})
	}
}

// A receiver that restarts on the same address gets the sender's later
// messages: the sender notices the broken stream and redials.
func TestPeerTransportReconnectsAfterThePeerRestarts(t *testing.T) {
	h := newRecorder()
	recv := serveTransport(t, 2, h, "", PeerTransportConfig{})
	addr := recv.addr
	send, sh := sender(t, addr, PeerTransportConfig{})
	defer send.Stop()
	send.Send([]*raftpb.Message{appMsg(2, 1, 10)})
	h.waitReceived(t, 1, 10*time.Second)
	recv.stop(t)

	h2 := newRecorder()
	recv2 := serveTransport(t, 2, h2, addr, PeerTransportConfig{})
	defer recv2.stop(t)
	// The broken stream is reported before or while it redials.
	waitFor(t, 10*time.Second, "the broken raft stream reported unreachable", func() bool { return sh.unreachable.Load() > 0 })
	// Raft resends what a broken stream lost; here the test does.
	waitFor(t, 10*time.Second, "a message to reach the restarted peer", func() bool {
		if len(h2.received()) > 0 {
			return true
		}
		send.Send([]*raftpb.Message{appMsg(2, 2, 10)})
		return false
	})
	if got := h2.received()[0].GetIndex(); got != 2 {
		t.Fatalf("restarted peer got index %d, want 2", got)
	}
}

// Stop ends the raft streams it serves and the serveStreams loop ends with
// the listener.
func TestPeerTransportStopClosesServedStreams(t *testing.T) {
	h := newRecorder()
	recv := serveTransport(t, 2, h, "", PeerTransportConfig{})
	send, _ := sender(t, recv.addr, PeerTransportConfig{})
	defer send.Stop()
	send.Send([]*raftpb.Message{appMsg(2, 1, 10)})
	h.waitReceived(t, 1, 10*time.Second)
	stopped := make(chan struct{})
	go func() { recv.stop(t); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("stopping the receiving transport hung on its open raft stream")
	}
	recv.tr.mu.Lock()
	n := len(recv.tr.accepted)
	recv.tr.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d raft streams still open after Stop", n)
	}
}

// A peer added while the transport stops (the apply loop syncing peers as
// the member shuts down) must not start a dial loop that Stop never waits
// for or cancels.
func TestPeerTransportAddPeerAfterStopIsIgnored(t *testing.T) {
	tr := NewPeerTransport(PeerTransportConfig{})
	if err := tr.Start(1, newRecorder()); err != nil {
		t.Fatal(err)
	}
	tr.Stop()
	tr.AddPeer(2, []string{"http://127.0.0.1:1"})
	tr.mu.Lock()
	n := len(tr.peers)
	tr.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d peer(s) registered after Stop, want 0", n)
	}
}
