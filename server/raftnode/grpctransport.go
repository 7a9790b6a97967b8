package raftnode

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

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

// The peer service is described by hand (no protoc). The Message stream
// carries batches of raft messages in its own codec (peercodec.go); the
// Snapshot stream and the Members RPC carry wrapperspb.BytesValue whose
// value is a proto-marshaled raftpb.Message, a snapshot chunk, or JSON.
const (
	peerService    = "tenure.raftpeer.v1.RaftPeer"
	mdClusterID    = "tenure-cluster-id"
	mdFrom         = "tenure-from"
	peerQueueSize  = 4096
	maxBackoff     = 2 * time.Second
	initialBackoff = 50 * time.Millisecond

	// Static HTTP/2 flow-control windows of the peer gRPC server. Raft
	// traffic only flows from dialer to server (each member sends its
	// messages on a stream it opened), so the server's receive windows are
	// the ones that matter. An explicit window turns off gRPC's BDP
	// estimation, which answered every received raft batch with a
	// connection WINDOW_UPDATE and a BDP PING (and the sender with a PING
	// ack): with one batch per raft round that doubled the peer streams'
	// write and read syscalls. At the default request limit a stream window
	// holds about six full batches (MaxMessageBytes/2); larger batches still
	// pass, a window update at a time.
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
			return srv.(*GRPCTransport).members()
		},
	}},
	Streams: []grpc.StreamDesc{
		{StreamName: "Message", ClientStreams: true, Handler: func(srv any, s grpc.ServerStream) error {
			return srv.(*GRPCTransport).serveMessages(s)
		}},
		{StreamName: "Snapshot", ClientStreams: true, Handler: func(srv any, s grpc.ServerStream) error {
			return srv.(*GRPCTransport).serveSnapshot(s)
		}},
	},
	Metadata: "tenure/raftpeer.proto",
}

// GRPCTransportConfig configures the gRPC peer transport.
type GRPCTransportConfig struct {
	Logger *slog.Logger
	// Creds secures peer connections; nil = plaintext (http:// peer URLs).
	Creds           credentials.TransportCredentials
	MaxMessageBytes int
}

// GRPCTransport is the gRPC peer transport: one long-lived client stream per
// peer for raft messages (bounded queue, drop + ReportUnreachable when full,
// reconnect with backoff), a client stream per snapshot, and a unary Members
// RPC. The cluster ID travels in metadata and mismatches are rejected.
type GRPCTransport struct {
	cfg   GRPCTransportConfig
	log   *slog.Logger
	mu    sync.Mutex
	id    uint64
	h     Handler
	peers map[uint64]*grpcPeer
	ready chan struct{} // closed by Start
	// batchesRecv counts raft message batches received (tests: that a
	// burst travels in fewer stream writes than messages).
	batchesRecv atomic.Uint64
	stopc       chan struct{}
	once        sync.Once
	wg          sync.WaitGroup
}

// NewGRPCTransport creates a gRPC transport; Register it on the peer server.
func NewGRPCTransport(cfg GRPCTransportConfig) *GRPCTransport {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = 8 << 20
	}
	return &GRPCTransport{cfg: cfg, log: cfg.Logger, peers: map[uint64]*grpcPeer{},
		ready: make(chan struct{}), stopc: make(chan struct{})}
}

// Register adds the peer service to s.
func (t *GRPCTransport) Register(s *grpc.Server) { s.RegisterService(&peerServiceDesc, t) }

func (t *GRPCTransport) Start(id uint64, h Handler) error {
	t.mu.Lock()
	t.id, t.h = id, h
	for _, p := range t.peers {
		t.startPeer(p)
	}
	t.mu.Unlock()
	close(t.ready)
	return nil
}

func (t *GRPCTransport) handler(ctx context.Context) (Handler, error) {
	select {
	case <-t.ready:
		return t.h, nil
	case <-t.stopc:
		return nil, status.Error(codes.Unavailable, "raft transport stopped")
	case <-ctx.Done():
		return nil, status.Error(codes.Unavailable, "raft transport not started")
	}
}

func (t *GRPCTransport) checkCluster(ctx context.Context, h Handler) error {
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

func (t *GRPCTransport) serveMessages(s grpc.ServerStream) error {
	h, err := t.handler(s.Context())
	if err != nil {
		return err
	}
	if err := t.checkCluster(s.Context(), h); err != nil {
		return err
	}
	for {
		in := &msgBatch{}
		if err := s.RecvMsg(in); err != nil {
			if err == io.EOF {
				return s.SendMsg(&wrapperspb.BytesValue{})
			}
			return err // a corrupt batch arrives as a codes.Internal error
		}
		t.batchesRecv.Add(1)
		for _, m := range in.msgs {
			_ = h.Process(s.Context(), m)
		}
	}
}

func (t *GRPCTransport) serveSnapshot(s grpc.ServerStream) error {
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

func (t *GRPCTransport) members() (any, error) {
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

func (t *GRPCTransport) dial(urls []string) (*grpc.ClientConn, error) {
	if len(urls) == 0 {
		return nil, errors.New("raftnode: peer has no URLs")
	}
	creds := t.cfg.Creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	return grpc.NewClient(target(urls[0]), grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(t.cfg.MaxMessageBytes), grpc.MaxCallSendMsgSize(t.cfg.MaxMessageBytes)))
}

func (t *GRPCTransport) outgoing(ctx context.Context) context.Context {
	var cid uint64
	if t.h != nil {
		cid = t.h.ClusterID()
	}
	return metadata.AppendToOutgoingContext(ctx, mdClusterID, strconv.FormatUint(cid, 16), mdFrom, strconv.FormatUint(t.id, 16))
}

type grpcPeer struct {
	id      uint64
	urls    []string
	q       chan *raftpb.Message
	ctx     context.Context
	cancel  context.CancelFunc
	started bool
	mu      sync.Mutex
	conn    *grpc.ClientConn
}

// AddPeer does nothing once Stop has begun: the apply loop can still sync
// peers (a conf change applied at start-up) while the member stops, and a
// peer started then would race Stop's wait and never be cancelled.
func (t *GRPCTransport) AddPeer(id uint64, urls []string) {
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
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &grpcPeer{id: id, urls: append([]string(nil), urls...), q: make(chan *raftpb.Message, peerQueueSize), ctx: ctx, cancel: cancel}
	t.peers[id] = p
	if t.h != nil {
		t.startPeer(p)
	}
}

// startPeer starts p's sender goroutine; t.mu is held.
func (t *GRPCTransport) startPeer(p *grpcPeer) {
	if p.started {
		return
	}
	p.started = true
	t.wg.Add(1)
	go t.runPeer(p)
}

func (t *GRPCTransport) RemovePeer(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.peers[id]; ok {
		p.cancel()
		delete(t.peers, id)
	}
}

func (t *GRPCTransport) Send(msgs []*raftpb.Message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range msgs {
		p := t.peers[m.GetTo()]
		if p == nil {
			continue
		}
		select {
		case p.q <- m:
		default:
			if t.h != nil {
				go t.h.ReportUnreachable(p.id)
			}
		}
	}
}

func (t *GRPCTransport) peerConn(p *grpcPeer) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		return p.conn, nil
	}
	c, err := t.dial(p.urls)
	if err != nil {
		return nil, err
	}
	p.conn = c
	return c, nil
}

func (t *GRPCTransport) runPeer(p *grpcPeer) {
	defer t.wg.Done()
	defer func() {
		p.mu.Lock()
		if p.conn != nil {
			p.conn.Close()
		}
		p.mu.Unlock()
	}()
	backoff := initialBackoff
	for p.ctx.Err() == nil {
		err := t.streamTo(p)
		if p.ctx.Err() != nil {
			return
		}
		t.log.Debug("peer stream broken", "peer", fmt.Sprintf("%x", p.id), "err", err)
		t.h.ReportUnreachable(p.id)
		// drop what queued up while the peer was unreachable
		for drained := false; !drained; {
			select {
			case <-p.q:
			default:
				drained = true
			}
		}
		tm := time.NewTimer(backoff)
		select {
		case <-tm.C:
		case <-p.ctx.Done():
			tm.Stop()
			return
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

func (t *GRPCTransport) streamTo(p *grpcPeer) error {
	conn, err := t.peerConn(p)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(t.outgoing(p.ctx))
	defer cancel()
	s, err := conn.NewStream(ctx, &peerServiceDesc.Streams[0], "/"+peerService+"/Message",
		grpc.CallContentSubtype(peerCodecName))
	if err != nil {
		return err
	}
	// Each write carries everything queued for the peer (up to a byte
	// budget well under the receiver's message limit): under load raft
	// produces appends, responses and heartbeats faster than one stream
	// write per message can carry them cheaply.
	budget := t.cfg.MaxMessageBytes / 2
	batch := &msgBatch{}
	var carry *raftpb.Message // taken from the queue but over the last batch's budget
	for {
		batch.reset()
		first := carry
		carry = nil
		if first == nil {
			select {
			case first = <-p.q:
			case <-p.ctx.Done():
				return p.ctx.Err()
			}
		}
		batch.add(first)
		size := batch.sizes[0]
	drain:
		for size < budget {
			select {
			case m := <-p.q:
				sz := proto.Size(m)
				if size+sz > budget {
					carry = m
					break drain
				}
				size += sz
				batch.msgs = append(batch.msgs, m)
				batch.sizes = append(batch.sizes, sz)
			default:
				break drain
			}
		}
		if err := s.SendMsg(batch); err != nil {
			if err == io.EOF {
				err = s.RecvMsg(&wrapperspb.BytesValue{})
			}
			return err
		}
	}
}

func (t *GRPCTransport) SendSnapshot(ctx context.Context, m *raftpb.Message, next SnapshotReader) error {
	t.mu.Lock()
	p := t.peers[m.GetTo()]
	t.mu.Unlock()
	if p == nil {
		return fmt.Errorf("raftnode: unknown peer %x", m.GetTo())
	}
	conn, err := t.peerConn(p)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(t.outgoing(ctx))
	defer cancel()
	s, err := conn.NewStream(ctx, &peerServiceDesc.Streams[1], "/"+peerService+"/Snapshot")
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
func (t *GRPCTransport) FetchMembers(ctx context.Context, urls []string) (uint64, []Member, error) {
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

func (t *GRPCTransport) Stop() {
	t.once.Do(func() {
		close(t.stopc)
		t.mu.Lock()
		for id, p := range t.peers {
			p.cancel()
			delete(t.peers, id)
		}
		t.mu.Unlock()
		t.wg.Wait()
	})
}
