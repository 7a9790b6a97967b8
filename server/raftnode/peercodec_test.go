package raftnode

import (
	"bytes"
	"errors"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func sampleMsgs() []*raftpb.Message {
	u := proto.Uint64
	ents := []*raftpb.Entry{
		{Term: u(3), Index: u(10), Type: raftpb.EntryNormal.Enum(), Data: bytes.Repeat([]byte("x"), 300)},
		{Term: u(3), Index: u(11), Type: raftpb.EntryNormal.Enum(), Data: []byte("y")},
		{Term: u(3), Index: u(12), Type: raftpb.EntryConfChangeV2.Enum()},
	}
	return []*raftpb.Message{
		{Type: raftpb.MsgApp.Enum(), To: u(2), From: u(1), Term: u(3), LogTerm: u(3), Index: u(9), Commit: u(9), Entries: ents},
		// the same entries to another peer: raft shares them between messages
		{Type: raftpb.MsgApp.Enum(), To: u(3), From: u(1), Term: u(3), LogTerm: u(3), Index: u(9), Commit: u(9), Entries: ents},
		{Type: raftpb.MsgHeartbeat.Enum(), To: u(2), From: u(1), Term: u(3), Commit: u(12), Context: []byte("ctx")},
		{Type: raftpb.MsgAppResp.Enum(), To: u(1), From: u(2), Term: u(3), Index: u(12), Reject: proto.Bool(true), RejectHint: u(7)},
	}
}

// A batch survives the codec exactly, message by message and in order.
func TestPeerCodecRoundTrip(t *testing.T) {
	in := sampleMsgs()
	for n := 1; n <= len(in); n++ {
		b := &msgBatch{}
		for _, m := range in[:n] {
			b.add(m)
		}
		data, err := peerCodec{}.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		out := &msgBatch{}
		if err := (peerCodec{}).Unmarshal(data, out); err != nil {
			t.Fatalf("%d messages: %v", n, err)
		}
		if len(out.msgs) != n {
			t.Fatalf("%d messages in, %d out", n, len(out.msgs))
		}
		for i := range out.msgs {
			if !proto.Equal(in[i], out.msgs[i]) {
				t.Fatalf("message %d: sent %v, received %v", i, in[i], out.msgs[i])
			}
		}
	}
}

// The receiver's buffer is gRPC's and is reused after Unmarshal: decoded
// messages must not alias it.
func TestPeerCodecDecodedMessagesOwnTheirBytes(t *testing.T) {
	b := &msgBatch{msgs: sampleMsgs()[:1]} // sizes left empty: the codec computes them
	data, err := peerCodec{}.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	raw := data.Materialize()
	out := &msgBatch{}
	if err := (peerCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw)}, out); err != nil {
		t.Fatal(err)
	}
	for i := range raw {
		raw[i] = 0xAA
	}
	if got := out.msgs[0].GetEntries()[0].GetData(); !bytes.Equal(got, bytes.Repeat([]byte("x"), 300)) {
		t.Fatalf("entry data changed with the receive buffer: %q…", got[:8])
	}
}

// Corrupt frames are rejected, never half-applied.
func TestPeerCodecRejectsCorruptFrames(t *testing.T) {
	good, _ := peerCodec{}.Marshal(&msgBatch{msgs: sampleMsgs()})
	whole := good.Materialize()
	cases := map[string][]byte{
		"empty":            {},
		"truncated":        whole[:len(whole)-5],
		"length overflow":  {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"length past end":  {0x7f, 0x08, 0x01},
		"not a raft proto": {0x02, 0xff, 0xff},
	}
	for name, b := range cases {
		out := &msgBatch{}
		err := peerCodec{}.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, out)
		if !errors.Is(err, errCorruptBatch) {
			t.Errorf("%s: got %v, want errCorruptBatch", name, err)
		}
		if len(out.msgs) != 0 {
			t.Errorf("%s: %d messages decoded from a corrupt frame", name, len(out.msgs))
		}
	}
}

// Messages other than a batch (the stream's closing BytesValue) use proto.
func TestPeerCodecFallsBackToProto(t *testing.T) {
	data, err := peerCodec{}.Marshal(&wrapperspb.BytesValue{Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	out := &wrapperspb.BytesValue{}
	if err := (peerCodec{}).Unmarshal(data, out); err != nil || string(out.GetValue()) != "v" {
		t.Fatalf("got %q, %v", out.GetValue(), err)
	}
	if _, err := (peerCodec{}).Marshal(42); err == nil {
		t.Fatal("marshaling an int succeeded")
	}
}

// FuzzDecodeBatch: the batch decoder never panics on garbage (a frame comes
// from the network) and what it decodes re-encodes to the same messages.
func FuzzDecodeBatch(f *testing.F) {
	good, _ := peerCodec{}.Marshal(&msgBatch{msgs: sampleMsgs()})
	f.Add(good.Materialize())
	f.Add([]byte{})
	f.Add([]byte{0x00})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		msgs, err := decodeBatch(b)
		if err != nil {
			return
		}
		again, err := decodeBatch(encodeBatch(&msgBatch{msgs: msgs}))
		if err != nil || len(again) != len(msgs) {
			t.Fatalf("re-encoded batch: %d messages, %v; want %d", len(again), err, len(msgs))
		}
		for i := range msgs {
			if !proto.Equal(msgs[i], again[i]) {
				t.Fatalf("message %d changed on re-encoding", i)
			}
		}
	})
}
