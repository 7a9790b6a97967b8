package raftnode

import (
	"encoding/binary"
	"errors"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// peerCodecName is the gRPC content-subtype of the raft message stream.
// The sender selects it per call (grpc.CallContentSubtype) and the receiver
// looks it up by the request's content type, so the codec applies to that
// stream only: the client services and the other peer RPCs keep gRPC's
// standard proto codec.
const peerCodecName = "tenure-raft"

func init() { encoding.RegisterCodecV2(peerCodec{}) }

// msgBatch is one gRPC message of the raft stream: every raft message the
// sender had queued for the peer when it was ready to send, so that a
// burst of appends, heartbeats and responses costs one stream write (one
// HTTP/2 frame and, usually, one syscall) instead of one per message.
//
// Wire format: for each message, its proto encoding's length as a uvarint,
// then the encoding. Encoding straight into the frame also saves the copy
// a wrapper message (BytesValue) around each encoding would cost.
type msgBatch struct {
	msgs  []*raftpb.Message
	sizes []int // encoded sizes of msgs, filled by the sender as it batches
}

func (b *msgBatch) reset() { b.msgs, b.sizes = b.msgs[:0], b.sizes[:0] }

func (b *msgBatch) add(m *raftpb.Message) {
	b.msgs = append(b.msgs, m)
	b.sizes = append(b.sizes, proto.Size(m))
}

// peerCodec encodes *msgBatch in the format above and anything else (the
// empty BytesValue that closes the stream) as standard proto.
type peerCodec struct{}

func (peerCodec) Name() string { return peerCodecName }

func (peerCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch v := v.(type) {
	case *msgBatch:
		return mem.BufferSlice{mem.SliceBuffer(encodeBatch(v))}, nil
	case proto.Message:
		b, err := proto.Marshal(v)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	default:
		return nil, fmt.Errorf("raftnode: peer codec cannot marshal %T", v)
	}
}

func (peerCodec) Unmarshal(data mem.BufferSlice, v any) error {
	var b []byte
	if len(data) == 1 {
		b = data[0].ReadOnlyData() // valid until we return; decoding copies
	} else {
		b = data.Materialize()
	}
	switch v := v.(type) {
	case *msgBatch:
		msgs, err := decodeBatch(b)
		v.msgs = msgs
		return err
	case proto.Message:
		return proto.Unmarshal(b, v)
	default:
		return fmt.Errorf("raftnode: peer codec cannot unmarshal into %T", v)
	}
}

// encodeBatch encodes msgs into one frame; the frame is a fresh slice
// because gRPC may still hold it after SendMsg returns.
func encodeBatch(batch *msgBatch) []byte {
	if len(batch.sizes) != len(batch.msgs) {
		batch.sizes = batch.sizes[:0]
		for _, m := range batch.msgs {
			batch.sizes = append(batch.sizes, proto.Size(m))
		}
	}
	total := 0
	for _, sz := range batch.sizes {
		total += binary.MaxVarintLen64 + sz
	}
	b := make([]byte, 0, total)
	// proto.Size cached every (sub)message's size as it computed it
	opts := proto.MarshalOptions{UseCachedSize: true}
	for i, m := range batch.msgs {
		b = binary.AppendUvarint(b, uint64(batch.sizes[i]))
		var err error
		if b, err = opts.MarshalAppend(b, m); err != nil {
			// A raft message always encodes; if one ever does not, sending
			// a truncated frame would be worse than an empty one: the
			// receiver rejects the frame and the stream reconnects.
			return nil
		}
	}
	return b
}

var errCorruptBatch = errors.New("raftnode: corrupt raft message batch")

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
