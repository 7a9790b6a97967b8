package raftnode

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// recordingHandler collects what a transport delivers.
type recordingHandler struct {
	mu   sync.Mutex
	msgs []*raftpb.Message
	got  chan struct{} // signalled on every delivery
}

func (h *recordingHandler) ClusterID() uint64 { return 7 }
func (h *recordingHandler) Process(_ context.Context, m *raftpb.Message) error {
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
func (h *recordingHandler) ReportUnreachable(uint64)        {}
func (h *recordingHandler) MembersInfo() (uint64, []Member) { return 7, nil }

func (h *recordingHandler) received() []*raftpb.Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*raftpb.Message(nil), h.msgs...)
}

// Messages sent in bursts over real gRPC arrive complete and in order,
// including bursts bigger than one frame's byte budget (the sender carries
// the message that does not fit over to the next frame) and single messages
// bigger than the budget.
func TestGRPCTransportDeliversBurstsInOrder(t *testing.T) {
	const maxMsg = 64 << 10 // frame budget 32 KiB
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(maxMsg))
	recv := NewGRPCTransport(GRPCTransportConfig{MaxMessageBytes: maxMsg})
	recv.Register(srv)
	go srv.Serve(lis)
	defer srv.Stop()
	h := &recordingHandler{got: make(chan struct{}, 1)}
	if err := recv.Start(2, h); err != nil {
		t.Fatal(err)
	}
	defer recv.Stop()

	send := NewGRPCTransport(GRPCTransportConfig{MaxMessageBytes: maxMsg})
	send.AddPeer(2, []string{"http://" + lis.Addr().String()})
	if err := send.Start(1, &recordingHandler{got: make(chan struct{}, 1)}); err != nil {
		t.Fatal(err)
	}
	defer send.Stop()

	var want []*raftpb.Message
	for burst := 0; burst < 20; burst++ {
		var msgs []*raftpb.Message
		for i := 0; i < 50; i++ {
			idx := uint64(len(want) + 1)
			size := 100
			switch {
			case i%10 == 3:
				size = 10 << 10 // several per frame, then a carry
			case burst%5 == 4 && i == 0:
				size = 40 << 10 // alone over the budget
			}
			m := &raftpb.Message{Type: raftpb.MsgApp.Enum(), To: proto.Uint64(2), From: proto.Uint64(1),
				Index: proto.Uint64(idx), Entries: []*raftpb.Entry{{Index: proto.Uint64(idx), Data: bytes.Repeat([]byte{byte(idx)}, size)}}}
			msgs = append(msgs, m)
			want = append(want, m)
		}
		send.Send(msgs)
	}

	deadline := time.After(20 * time.Second)
	for len(h.received()) < len(want) {
		select {
		case <-h.got:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("received %d of %d messages", len(h.received()), len(want))
		}
	}
	got := h.received()
	if len(got) != len(want) {
		t.Fatalf("received %d messages, sent %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("message %d: got index %d (%d bytes), want index %d (%d bytes)", i,
				got[i].GetIndex(), proto.Size(got[i]), want[i].GetIndex(), proto.Size(want[i]))
		}
	}
	// Each burst of 50 is queued at once: the sender takes what is queued
	// per write, so the 1,000 messages travel in far fewer writes (one per
	// message would mean batching is broken). The 40 KiB messages and the
	// 32 KiB budget force a few extra writes; half is a generous bound.
	if frames := recv.batchesRecv.Load(); frames == 0 || frames > uint64(len(want)/2) {
		t.Fatalf("%d messages arrived in %d stream writes; want batching (at most %d)", len(want), frames, len(want)/2)
	}
}

// A peer added while the transport stops (the apply loop syncing peers as
// the member shuts down) must not start a sender that Stop never waits for
// or cancels.
func TestGRPCTransportAddPeerAfterStopIsIgnored(t *testing.T) {
	tr := NewGRPCTransport(GRPCTransportConfig{})
	if err := tr.Start(1, &recordingHandler{got: make(chan struct{}, 1)}); err != nil {
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
