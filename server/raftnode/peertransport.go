package raftnode

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/soheilhy/cmux"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The gRPC part of the peer service (snapshots and the Members RPC) is
// described by hand (no protoc). Its messages are wrapperspb.BytesValue
// whose value is a proto-marshaled raftpb.Message, a snapshot chunk, or
// JSON. Raft messages themselves travel on raft streams (stream.go).
const (
	peerService    = "tenure.raftpeer.v1.RaftPeer"
	mdClusterID    = "tenure-cluster-id"
	mdFrom         = "tenure-from"
	maxBackoff     = 2 * time.Second
	initialBackoff = 50 * time.Millisecond

	// Static HTTP/2 flow-control windows of the peer gRPC server, which now
	// carries only snapshots (large, one-way: dialer to server). An explicit
	// window turns off gRPC's BDP estimation and its PINGs.
	peerStreamWindowBytes = 8 << 20
	peerConnWindowBytes   = 16 << 20
)

// PeerServerOptions are the gRPC server options the peer listener needs
// (flow control; see peerStreamWindowBytes).
func PeerServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InitialWindowSize(peerStreamWindowBytes),
		grpc.InitialConnWindowSize(peerConnWindowBytes),
	}
}

var peerServiceDesc = grpc.ServiceDesc{
	ServiceName: peerService,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Members",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := &wrapperspb.BytesValue{}
			if err := dec(in); err != nil {
				return nil, err
			}
			return srv.(*PeerTransport).members()
		},
	}},
	Streams: []grpc.StreamDesc{
		{StreamName: "Snapshot", ClientStreams: true, Handler: func(srv any, s grpc.ServerStream) error {
			return srv.(*PeerTransport).serveSnapshot(s)
		}},
	},
	Metadata: "tenure/raftpeer.proto",
}

// PeerTransportConfig configures the peer transport.
type PeerTransportConfig struct {
	Logger *slog.Logger
	// TLS secures raft streams and the gRPC part (snapshots, Members);
	// nil: plaintext (http:// peer URLs).
	TLS *tls.Config
	// MaxMessageBytes bounds one raft message batch (a stream frame) and
	// one gRPC message.
	MaxMessageBytes int
}

// PeerTransport moves raft messages on raft streams (stream.go: a
// connection per ordered pair of members, frames written by the Ready
// loop itself when nothing is queued, a dial loop per peer that reconnects
// with backoff and reports the peer unreachable while it is down, bounded
// backlog) and snapshots and the Members RPC over gRPC. Both check the
// cluster ID and refuse a mismatch.
type PeerTransport struct {
	cfg   PeerTransportConfig
	log   *slog.Logger
	mu    sync.Mutex
	id    uint64
	h     Handler
	peers map[uint64]*streamPeer
	// accepted holds the raft streams being served, closed at Stop, with
	// the sending member's ID once its hello is read (0 before).
	accepted map[net.Conn]uint64
	ready    chan struct{} // closed by Start
	// ctx is the context raft messages are processed under; cancelled by Stop.
	ctx       context.Context
	cancelCtx context.CancelFunc
	// batchesRecv counts raft message batches received (tests: that a
	// burst travels in fewer stream writes than messages).
	batchesRecv atomic.Uint64
	writes      atomic.Uint64 // socket writes of raft streams (tests: combining)
	// directWriteHook, when set (tests only, before any Send), runs in a
	// sender that has just claimed a peer's stream for a direct write,
	// before it writes: senders arriving meanwhile queue behind it.
	directWriteHook func()
	stopc           chan struct{}
	once            sync.Once
	wg              sync.WaitGroup
	grpcMu          sync.Mutex
	grpcConns       map[uint64]*grpc.ClientConn // snapshot connections, dialed when first needed
}

// NewPeerTransport creates a peer transport. Register it on the peer gRPC
// server and serve its listener with ServePeerListener (raft streams and
// gRPC on one listener).
func NewPeerTransport(cfg PeerTransportConfig) *PeerTransport {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = 8 << 20
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &PeerTransport{cfg: cfg, log: cfg.Logger, peers: map[uint64]*streamPeer{}, accepted: map[net.Conn]uint64{},
		ready: make(chan struct{}), stopc: make(chan struct{}), ctx: ctx, cancelCtx: cancel, grpcConns: map[uint64]*grpc.ClientConn{}}
}

// Register adds the peer gRPC service to s.
func (t *PeerTransport) Register(s *grpc.Server) { s.RegisterService(&peerServiceDesc, t) }

// ServePeerListener serves a peer listener: raft streams go to t and every
// other connection (gRPC: snapshots, Members) to s. It returns when l is
// closed (stopping s closes it).
func ServePeerListener(l net.Listener, s *grpc.Server, t *PeerTransport) error {
	mux := cmux.New(l)
	streams := mux.Match(cmux.PrefixMatcher(streamMagic))
	rest := mux.Match(cmux.Any())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = t.serveStreams(streams) }()
	go func() { defer wg.Done(); _ = s.Serve(rest) }()
	err := mux.Serve()
	wg.Wait() // both sub-listeners end when mux.Serve does
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// maxFrame is the largest frame a stream accepts: a batch is cut at half
// the message limit, and a single message may be as large as the limit.
func (t *PeerTransport) maxFrame() int { return t.cfg.MaxMessageBytes + 1<<16 }

func (t *PeerTransport) Start(id uint64, h Handler) error {
	t.mu.Lock()
	t.id, t.h = id, h
	for _, p := range t.peers {
		t.startPeer(p)
	}
	t.mu.Unlock()
	close(t.ready)
	return nil
}

func (t *PeerTransport) reportUnreachable(id uint64) {
	if h := t.h; h != nil {
		go h.ReportUnreachable(id)
	}
}

func (t *PeerTransport) reportRemoved(by uint64) {
	if h := t.h; h != nil {
		h.ReportRemoved(by)
	}
}

func (t *PeerTransport) handler(ctx context.Context) (Handler, error) {
	select {
	case <-t.ready:
		return t.h, nil
	case <-t.stopc:
		return nil, status.Error(codes.Unavailable, "raft transport stopped")
	case <-ctx.Done():
		return nil, status.Error(codes.Unavailable, "raft transport not started")
	}
}

func (t *PeerTransport) checkCluster(ctx context.Context, h Handler) error {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(mdClusterID)
	if len(vals) == 0 {
		return nil
	}
	theirs, err := strconv.ParseUint(vals[0], 16, 64)
	if err != nil {
		return status.Error(codes.InvalidArgument, "bad cluster id")
	}
	if ours := h.ClusterID(); ours != 0 && theirs != 0 && ours != theirs {
		return status.Errorf(codes.FailedPrecondition, "cluster ID mismatch: ours %x, theirs %x", ours, theirs)
	}
	return nil
}

func (t *PeerTransport) serveSnapshot(s grpc.ServerStream) error {
	h, err := t.handler(s.Context())
	if err != nil {
		return err
	}
	if err := t.checkCluster(s.Context(), h); err != nil {
		return err
	}
	in := &wrapperspb.BytesValue{}
	if err := s.RecvMsg(in); err != nil {
		return err
	}
	m := &raftpb.Message{}
	if err := proto.Unmarshal(in.GetValue(), m); err != nil {
		return status.Errorf(codes.InvalidArgument, "decode snapshot message: %v", err)
	}
	next := func() ([]KV, error) {
		c := &wrapperspb.BytesValue{}
		if err := s.RecvMsg(c); err != nil {
			return nil, err // io.EOF at the end
		}
		return decodeChunk(c.GetValue())
	}
	if err := h.ReceiveSnapshot(s.Context(), m, next); err != nil {
		return status.Errorf(codes.Internal, "install snapshot: %v", err)
	}
	return s.SendMsg(&wrapperspb.BytesValue{})
}

type membersReply struct {
	ClusterID uint64   `json:"clusterID"`
	Members   []Member `json:"members"`
}

func (t *PeerTransport) members() (any, error) {
	h, err := t.handler(context.Background())
	if err != nil {
		return nil, err
	}
	cid, ms := h.MembersInfo()
	b, _ := json.Marshal(membersReply{ClusterID: cid, Members: ms})
	return &wrapperspb.BytesValue{Value: b}, nil
}

func encodeChunk(kvs []KV) []byte {
	var b []byte
	for _, kv := range kvs {
		b = binary.AppendUvarint(b, uint64(len(kv.Key)))
		b = append(b, kv.Key...)
		b = binary.AppendUvarint(b, uint64(len(kv.Value)))
		b = append(b, kv.Value...)
	}
	return b
}

func decodeChunk(b []byte) ([]KV, error) {
	var out []KV
	for len(b) > 0 {
		var kv KV
		for i := 0; i < 2; i++ {
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return nil, errors.New("raftnode: corrupt snapshot chunk")
			}
			v := append([]byte(nil), b[n:n+int(l)]...)
			if i == 0 {
				kv.Key = v
			} else {
				kv.Value = v
			}
			b = b[n+int(l):]
		}
		out = append(out, kv)
	}
	return out, nil
}

// target turns http://host:port into host:port.
func target(u string) string {
	if p, err := url.Parse(u); err == nil && p.Host != "" {
		return p.Host
	}
	return u
}

func (t *PeerTransport) dial(urls []string) (*grpc.ClientConn, error) {
	if len(urls) == 0 {
		return nil, errors.New("raftnode: peer has no URLs")
	}
	creds := insecure.NewCredentials()
	if t.cfg.TLS != nil {
		creds = credentials.NewTLS(t.cfg.TLS)
	}
	return grpc.NewClient(target(urls[0]), grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(t.cfg.MaxMessageBytes), grpc.MaxCallSendMsgSize(t.cfg.MaxMessageBytes)))
}

func (t *PeerTransport) outgoing(ctx context.Context) context.Context {
	var cid uint64
	if t.h != nil {
		cid = t.h.ClusterID()
	}
	return metadata.AppendToOutgoingContext(ctx, mdClusterID, strconv.FormatUint(cid, 16), mdFrom, strconv.FormatUint(t.id, 16))
}

// AddPeer does nothing once Stop has begun: the apply loop can still sync
// peers (a conf change applied at start-up) while the member stops, and a
// peer started then would race Stop's wait and never be cancelled.
func (t *PeerTransport) AddPeer(id uint64, urls []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-t.stopc: // Stop closes stopc before it takes t.mu
		return
	default:
	}
	if p, ok := t.peers[id]; ok {
		if sameURLs(p.urls, urls) {
			return
		}
		p.cancel()
		delete(t.peers, id)
		t.dropGRPCConn(id)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &streamPeer{t: t, id: id, urls: append([]string(nil), urls...), ctx: ctx, cancel: cancel}
	t.peers[id] = p
	if t.h != nil {
		t.startPeer(p)
	}
}

// startPeer starts p's dial loop; t.mu is held.
func (t *PeerTransport) startPeer(p *streamPeer) {
	t.wg.Add(1)
	go p.run()
}

// ActiveSince is when the raft stream to peer id last came up (zero while
// it is down).
func (t *PeerTransport) ActiveSince(id uint64) time.Time {
	t.mu.Lock()
	p := t.peers[id]
	t.mu.Unlock()
	if p == nil {
		return time.Time{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.since
}

func (t *PeerTransport) RemovePeer(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.peers[id]; ok {
		p.cancel()
		delete(t.peers, id)
		t.dropGRPCConn(id)
	}
	// Its streams to this member go too: a removed member that never
	// applied its removal learns it only when it redials and is refused.
	for c, from := range t.accepted {
		if from == id {
			_ = c.Close()
		}
	}
}

// Send writes each peer's messages as frames on its raft stream (or queues
// them behind a write in progress); it never blocks on a peer.
func (t *PeerTransport) Send(msgs []*raftpb.Message) {
	budget := t.cfg.MaxMessageBytes / 2
	var seenArr [8]uint64
	var groupArr [16]*raftpb.Message
	seen := seenArr[:0]
	for i, m := range msgs {
		to := m.GetTo()
		if slices.Contains(seen, to) {
			continue
		}
		seen = append(seen, to)
		t.mu.Lock()
		p := t.peers[to]
		t.mu.Unlock()
		if p == nil {
			continue
		}
		// this peer's messages, in order
		group := groupArr[:0]
		for _, n := range msgs[i:] {
			if n.GetTo() == to {
				group = append(group, n)
			}
		}
		buf := framePool.Get().(*[]byte)
		*buf = encodeFrames((*buf)[:0], group, budget)
		p.send(*buf)
		framePool.Put(buf)
	}
}

var framePool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

func (t *PeerTransport) grpcConn(id uint64, urls []string) (*grpc.ClientConn, error) {
	t.grpcMu.Lock()
	defer t.grpcMu.Unlock()
	if c := t.grpcConns[id]; c != nil {
		return c, nil
	}
	c, err := t.dial(urls)
	if err != nil {
		return nil, err
	}
	t.grpcConns[id] = c
	return c, nil
}

// dropGRPCConn closes the snapshot connection to id, if any.
func (t *PeerTransport) dropGRPCConn(id uint64) {
	t.grpcMu.Lock()
	if c := t.grpcConns[id]; c != nil {
		_ = c.Close()
		delete(t.grpcConns, id)
	}
	t.grpcMu.Unlock()
}

func (t *PeerTransport) SendSnapshot(ctx context.Context, m *raftpb.Message, next SnapshotReader) error {
	t.mu.Lock()
	p := t.peers[m.GetTo()]
	t.mu.Unlock()
	if p == nil {
		return fmt.Errorf("raftnode: unknown peer %x", m.GetTo())
	}
	conn, err := t.grpcConn(p.id, p.urls)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(t.outgoing(ctx))
	defer cancel()
	s, err := conn.NewStream(ctx, &peerServiceDesc.Streams[0], "/"+peerService+"/Snapshot")
	if err != nil {
		return err
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	if err := s.SendMsg(&wrapperspb.BytesValue{Value: b}); err != nil {
		return err
	}
	for {
		kvs, err := next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if err := s.SendMsg(&wrapperspb.BytesValue{Value: encodeChunk(kvs)}); err != nil {
			if err == io.EOF {
				return s.RecvMsg(&wrapperspb.BytesValue{})
			}
			return err
		}
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	return s.RecvMsg(&wrapperspb.BytesValue{})
}

// FetchMembers asks the peers at urls (first that answers) for the cluster
// ID and member list.
func (t *PeerTransport) FetchMembers(ctx context.Context, urls []string) (uint64, []Member, error) {
	var errs []error
	for _, u := range urls {
		conn, err := t.dial([]string{u})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out := &wrapperspb.BytesValue{}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = conn.Invoke(cctx, "/"+peerService+"/Members", &wrapperspb.BytesValue{}, out, grpc.WaitForReady(true))
		cancel()
		conn.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", u, err))
			continue
		}
		var r membersReply
		if err := json.Unmarshal(out.GetValue(), &r); err != nil {
			errs = append(errs, err)
			continue
		}
		return r.ClusterID, r.Members, nil
	}
	return 0, nil, errors.Join(append(errs, errors.New("no peer answered"))...)
}

func (t *PeerTransport) Stop() {
	t.once.Do(func() {
		close(t.stopc)
		t.cancelCtx()
		t.mu.Lock()
		for id, p := range t.peers {
			p.cancel()
			delete(t.peers, id)
		}
		for c := range t.accepted {
			_ = c.Close()
		}
		t.mu.Unlock()
		t.wg.Wait()
		t.grpcMu.Lock()
		for id, c := range t.grpcConns {
			_ = c.Close()
			delete(t.grpcConns, id)
		}
		t.grpcMu.Unlock()
	})
}
