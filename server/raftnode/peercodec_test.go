package raftnode

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
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

// splitFrames cuts a stream of frames into their batches.
func splitFrames(t testing.TB, b []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for len(b) > 0 {
		if len(b) < 4 {
			t.Fatalf("%d bytes left after the last frame", len(b))
		}
		n := int(binary.BigEndian.Uint32(b))
		if n > len(b)-4 {
			t.Fatalf("frame of %d bytes with %d left", n, len(b)-4)
		}
		out = append(out, b[4:4+n])
		b = b[4+n:]
	}
	return out
}

// Messages survive framing exactly, message by message and in order.
func TestFramesRoundTrip(t *testing.T) {
	in := sampleMsgs()
	for n := 1; n <= len(in); n++ {
		frames := splitFrames(t, encodeFrames(nil, in[:n], 1<<20))
		if len(frames) != 1 {
			t.Fatalf("%d messages under the budget took %d frames, want 1", n, len(frames))
		}
		out, err := decodeBatch(frames[0])
		if err != nil {
			t.Fatalf("%d messages: %v", n, err)
		}
		if len(out) != n {
			t.Fatalf("%d messages in, %d out", n, len(out))
		}
		for i := range out {
			if !proto.Equal(in[i], out[i]) {
				t.Fatalf("message %d: sent %v, received %v", i, in[i], out[i])
			}
		}
	}
}

// A frame holds at most the budget of batch bytes: messages that do not fit
// start the next frame, and a message larger than the budget travels alone.
func TestFramesRespectTheBudget(t *testing.T) {
	var msgs []*raftpb.Message
	for i, size := range []int{100, 100, 700, 100, 3000, 100} {
		msgs = append(msgs, &raftpb.Message{Type: raftpb.MsgApp.Enum(), To: proto.Uint64(2), Index: proto.Uint64(uint64(i)),
			Entries: []*raftpb.Entry{{Data: bytes.Repeat([]byte{'d'}, size)}}})
	}
	const budget = 1000
	frames := splitFrames(t, encodeFrames(nil, msgs, budget))
	var got []*raftpb.Message
	for i, f := range frames {
		batch, err := decodeBatch(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(f) > budget && len(batch) > 1 {
			t.Errorf("frame %d: %d bytes over the %d budget with %d messages", i, len(f), budget, len(batch))
		}
		got = append(got, batch...)
	}
	if len(frames) < 3 {
		t.Errorf("%d frames for %d bytes of messages at a %d budget", len(frames), 4100, budget)
	}
	if len(got) != len(msgs) {
		t.Fatalf("%d messages out of %d", len(got), len(msgs))
	}
	for i := range msgs {
		if !proto.Equal(msgs[i], got[i]) {
			t.Fatalf("message %d changed or reordered", i)
		}
	}
}

// The receiver reuses its read buffer: decoded messages must not alias it.
func TestDecodedMessagesOwnTheirBytes(t *testing.T) {
	raw := splitFrames(t, encodeFrames(nil, sampleMsgs()[:1], 1<<20))[0]
	out, err := decodeBatch(raw)
	if err != nil {
		t.Fatal(err)
	}
	for i := range raw {
		raw[i] = 0xAA
	}
	if got := out[0].GetEntries()[0].GetData(); !bytes.Equal(got, bytes.Repeat([]byte("x"), 300)) {
		t.Fatalf("entry data changed with the receive buffer: %q…", got[:8])
	}
}

// Corrupt batches are rejected, never half-applied.
func TestDecodeBatchRejectsCorruptFrames(t *testing.T) {
	whole := splitFrames(t, encodeFrames(nil, sampleMsgs(), 1<<20))[0]
	cases := map[string][]byte{
		"empty":            {},
		"truncated":        whole[:len(whole)-5],
		"length overflow":  {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"length past end":  {0x7f, 0x08, 0x01},
		"not a raft proto": {0x02, 0xff, 0xff},
	}
	for name, b := range cases {
		msgs, err := decodeBatch(b)
		if !errors.Is(err, errCorruptBatch) {
			t.Errorf("%s: got %v, want errCorruptBatch", name, err)
		}
		if len(msgs) != 0 {
			t.Errorf("%s: %d messages decoded from a corrupt frame", name, len(msgs))
		}
	}
}

// FuzzDecodeBatch: the batch decoder never panics on garbage (a frame comes
// from the network) and what it decodes re-encodes to the same messages.
func FuzzDecodeBatch(f *testing.F) {
	f.Add(encodeFrames(nil, sampleMsgs(), 1<<20)[4:])
	f.Add([]byte{})
	f.Add([]byte{0x00})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		msgs, err := decodeBatch(b)
		if err != nil {
			return
		}
		frames := splitFrames(t, encodeFrames(nil, msgs, 1<<30))
		if len(frames) != 1 {
			t.Fatalf("re-encoded into %d frames", len(frames))
		}
		again, err := decodeBatch(frames[0])
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
