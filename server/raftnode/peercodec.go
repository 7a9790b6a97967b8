package raftnode

import (
	"encoding/binary"
	"errors"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// A message batch is the body of one raft stream frame (stream.go): every
// raft message the sender had for the peer when it wrote, so that a burst
// of appends, heartbeats and responses costs one write instead of one per
// message. Format: for each message, its proto encoding's length as a
// uvarint, then the encoding. encodeFrames (stream.go) writes it.

var errCorruptBatch = errors.New("raftnode: corrupt raft message batch")

// decodeBatch decodes a batch. The messages own their bytes: the caller may
// reuse b.
func decodeBatch(b []byte) ([]*raftpb.Message, error) {
	if len(b) == 0 {
		return nil, errCorruptBatch
	}
	var msgs []*raftpb.Message
	for len(b) > 0 {
		l, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < l {
			return nil, errCorruptBatch
		}
		m := &raftpb.Message{}
		if err := proto.Unmarshal(b[n:n+int(l)], m); err != nil {
			return nil, fmt.Errorf("%w: %v", errCorruptBatch, err)
		}
		msgs = append(msgs, m)
		b = b[n+int(l):]
	}
	return msgs, nil
}
