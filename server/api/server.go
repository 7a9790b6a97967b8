package api

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/tenure-io/tenure/server/apply"
	"github.com/tenure-io/tenure/server/lease"
	"github.com/tenure-io/tenure/server/mvcc"
	"github.com/tenure-io/tenure/server/raftnode"
)

// Version is the etcd API version Tenure speaks; reported by Status so
// etcd's tools and clients that parse it keep working.
const Version = "3.7.3"

// ClusterVersion is the cluster version etcd would report for a cluster of
// Version members (its /version "etcdcluster").
const ClusterVersion = "3.7.0"

// Node is what the edge needs from the raft node.
type Node interface {
	ReadIndex(ctx context.Context) error
	Status() raftnode.Status
	LeaderTerm() (leader, term uint64)
	Members() []raftnode.Member
	ID() uint64
	ClusterID() uint64
	AddMember(ctx context.Context, peerURLs []string, learner bool) (raftnode.Member, []raftnode.Member, error)
	RemoveMember(ctx context.Context, id uint64) ([]raftnode.Member, error)
	UpdateMember(ctx context.Context, id uint64, peerURLs []string) ([]raftnode.Member, error)
	PromoteMember(ctx context.Context, id uint64) ([]raftnode.Member, error)
	TransferLeadership(ctx context.Context, to uint64) error
}

// Config wires the services.
type Config struct {
	Node            Node
	Applier         *apply.Applier
	KV              *mvcc.Store
	Lessor          *lease.Lessor
	DB              *pebble.DB
	MaxTxnOps       int
	MaxRequestBytes int
	RequestTimeout  time.Duration
	MinLeaseTTL     int64 // seconds; shorter grants are raised to it
	QuotaBytes      int64 // --quota-backend-bytes: NOSPACE is raised above it (0: no quota)
	// ForwardCreds dials other members' https:// client URLs when a request
	// must be forwarded (nil: only http:// URLs are used).
	ForwardCreds credentials.TransportCredentials
	Logger       *slog.Logger
}

// Server implements the etcd KV, Lease, Cluster and Maintenance services.
type Server struct {
	pb.UnimplementedKVServer
	pb.UnimplementedLeaseServer
	pb.UnimplementedClusterServer
	pb.UnimplementedMaintenanceServer
	cfg   Config
	size  sizer         // cached store size (maintenance.go)
	props proposalStats // metrics.go
	// forwardedIn counts membership requests (self-removal, promotion) that
	// another member forwarded here (metrics; tests prove forwarding by it).
	forwardedIn atomic.Uint64
}

// New builds the services.
func New(cfg Config) *Server {
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Server{cfg: cfg}
}

// Register adds the services to g.
func (s *Server) Register(g *grpc.Server) {
	pb.RegisterKVServer(g, s)
	pb.RegisterLeaseServer(g, s)
	pb.RegisterClusterServer(g, s)
	pb.RegisterMaintenanceServer(g, s)
	pb.RegisterAuthServer(g, authService{s: s})
}

// Header fills an etcd response header for revision rev.
func (s *Server) Header(rev int64) *pb.ResponseHeader {
	_, term := s.cfg.Node.LeaderTerm()
	return &pb.ResponseHeader{ClusterId: s.cfg.Node.ClusterID(), MemberId: s.cfg.Node.ID(), Revision: rev, RaftTerm: term}
}

func (s *Server) fill(h **pb.ResponseHeader) {
	rev := int64(0)
	if *h != nil {
		rev = (*h).Revision
	}
	if rev == 0 {
		rev = s.cfg.KV.Rev()
	}
	*h = s.Header(rev)
}

func (s *Server) timeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.RequestTimeout)
}

// requireLeader fails fast, as etcd does, when the client asked for a leader
// (clientv3.WithRequireLeader) and this member knows none.
func (s *Server) requireLeader(ctx context.Context) error {
	if wantsLeader(ctx) {
		if lead, _ := s.cfg.Node.LeaderTerm(); lead == 0 {
			return rpctypes.ErrGRPCNoLeader
		}
	}
	return nil
}

// linearize waits until this member has applied everything committed when
// the call began.
func (s *Server) linearize(ctx context.Context) error {
	if err := s.requireLeader(ctx); err != nil {
		return err
	}
	ctx, cancel := s.timeout(ctx)
	defer cancel()
	return ToGRPC(s.cfg.Node.ReadIndex(ctx))
}

func (s *Server) do(ctx context.Context, r *pb.InternalRaftRequest) (apply.Result, error) {
	if err := s.requireLeader(ctx); err != nil {
		return apply.Result{}, err
	}
	if err := s.checkQuota(ctx, r); err != nil {
		return apply.Result{}, err
	}
	res := s.propose(ctx, func(ctx context.Context) apply.Result { return s.cfg.Applier.Do(ctx, r) })
	return res, ToGRPC(res.Err)
}

// propose runs one client proposal (call proposes and waits for the apply)
// within the request timeout, counted in the proposal metrics. Every client
// write goes through it: etcd requests (do) and lock ops (Locks.do).
func (s *Server) propose(ctx context.Context, call func(context.Context) apply.Result) apply.Result {
	ctx, cancel := s.timeout(ctx)
	defer cancel()
	s.props.pending.Add(1)
	res := call(ctx)
	s.props.done(res.Err)
	return res
}

// ---- KV ----

// Range serves reads: linearizable (default) after a ReadIndex barrier,
// serializable from the local store.
func (s *Server) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := checkRange(r); err != nil {
		return nil, err
	}
	if !r.Serializable {
		if err := s.linearize(ctx); err != nil {
			return nil, err
		}
	}
	resp, err := s.cfg.KV.Range(r)
	if err != nil {
		return nil, ToGRPC(err)
	}
	s.fill(&resp.Header)
	return resp, nil
}

// Put proposes a put.
func (s *Server) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	if err := checkPut(r); err != nil {
		return nil, err
	}
	res, err := s.do(ctx, &pb.InternalRaftRequest{Put: r})
	if err != nil {
		return nil, err
	}
	resp := res.Resp.(*pb.PutResponse)
	s.fill(&resp.Header)
	return resp, nil
}

// DeleteRange proposes a delete.
func (s *Server) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	if err := checkDelete(r); err != nil {
		return nil, err
	}
	res, err := s.do(ctx, &pb.InternalRaftRequest{DeleteRange: r})
	if err != nil {
		return nil, err
	}
	resp := res.Resp.(*pb.DeleteRangeResponse)
	s.fill(&resp.Header)
	return resp, nil
}

// Txn proposes a transaction; a read-only txn that asks for serializable
// reads only is served locally.
func (s *Server) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := checkTxn(r, s.cfg.MaxTxnOps); err != nil {
		return nil, err
	}
	res, err := s.do(ctx, &pb.InternalRaftRequest{Txn: r})
	if err != nil {
		return nil, err
	}
	resp := res.Resp.(*pb.TxnResponse)
	s.fill(&resp.Header)
	return resp, nil
}

// Compact proposes a compaction; with physical set it returns once the
// compacted versions are gone from the store.
func (s *Server) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	res, err := s.do(ctx, &pb.InternalRaftRequest{Compaction: r})
	if err != nil {
		return nil, err
	}
	if r.Physical {
		wctx, cancel := s.timeout(ctx)
		defer cancel()
		if err := s.cfg.KV.WaitCompaction(wctx, r.Revision); err != nil {
			return nil, ToGRPC(err)
		}
	}
	resp := res.Resp.(*pb.CompactionResponse)
	s.fill(&resp.Header)
	return resp, nil
}

// ---- Lease ----

// LeaseGrant creates a lease. A TTL below the safe minimum (derived from the
// election timeout) is raised to it and the response says what was granted.
func (s *Server) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	if r.TTL > lease.MaxTTL {
		return nil, rpctypes.ErrGRPCLeaseTTLTooLarge
	}
	req := &pb.LeaseGrantRequest{TTL: r.TTL, ID: r.ID}
	if req.TTL < s.cfg.MinLeaseTTL {
		req.TTL = s.cfg.MinLeaseTTL
	}
	if req.ID == 0 {
		req.ID = randomLeaseID()
	}
	res, err := s.do(ctx, &pb.InternalRaftRequest{LeaseGrant: req})
	if err != nil {
		return nil, err
	}
	resp := res.Resp.(*pb.LeaseGrantResponse)
	s.fill(&resp.Header)
	return resp, nil
}

func randomLeaseID() int64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		id := int64(binary.BigEndian.Uint64(b[:]) &^ (1 << 63))
		if id != 0 {
			return id
		}
	}
}

// LeaseRevoke revokes a lease and deletes its keys in one revision.
func (s *Server) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	res, err := s.do(ctx, &pb.InternalRaftRequest{LeaseRevoke: r})
	if err != nil {
		return nil, err
	}
	resp := res.Resp.(*pb.LeaseRevokeResponse)
	s.fill(&resp.Header)
	return resp, nil
}

// LeaseKeepAlive renews leases; a lease that does not exist answers TTL 0
// (as etcd does). A renewal this member may acknowledge without raft
// (Lessor.RenewLocal: its own replicated renewal of the lease is less than
// the grace old) is answered inline, so a stream that carries one renewal —
// clientv3's KeepAliveOnce, etcd's benchmark — costs no goroutine. The first
// renewal that needs raft switches the stream to keepAliveConcurrent.
func (s *Server) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	needLeader := wantsLeader(stream.Context())
	for {
		req, err := stream.Recv()
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if lead, _ := s.cfg.Node.LeaderTerm(); needLeader && lead == 0 {
			return rpctypes.ErrGRPCNoLeader
		}
		ttl, ok := s.cfg.Lessor.RenewLocal(req.ID)
		if !ok {
			return s.keepAliveConcurrent(stream, req)
		}
		if err := stream.Send(s.keepAliveResponse(req.ID, ttl)); err != nil {
			return err
		}
	}
}

// keepAliveResponse answers a renewal of lease id with ttl (0: not found).
func (s *Server) keepAliveResponse(id, ttl int64) *pb.LeaseKeepAliveResponse {
	resp := &pb.LeaseKeepAliveResponse{ID: id, TTL: ttl}
	s.fill(&resp.Header)
	return resp
}

// keepAliveConcurrent serves the rest of a keepalive stream, starting with
// first. Renewals are processed concurrently (up to keepAliveInFlight) and
// answered as they complete; the ones RenewLocal accepts are answered
// without a goroutine. When no leader can be reached within the request
// timeout the stream ends with an error ("no leader" or "request timed
// out") instead of going silent.
func (s *Server) keepAliveConcurrent(stream pb.Lease_LeaseKeepAliveServer, first *pb.LeaseKeepAliveRequest) error {
	ctx, cancel := context.WithCancel(stream.Context())
	var (
		sendMu  sync.Mutex
		errOnce sync.Once
		failed  = make(chan error, 1)
		wg      sync.WaitGroup
		slots   = make(chan struct{}, keepAliveInFlight)
	)
	fail := func(err error) {
		errOnce.Do(func() { failed <- err; cancel() })
	}
	send := func(id, ttl int64) error {
		resp := s.keepAliveResponse(id, ttl)
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(resp)
	}
	defer func() { cancel(); wg.Wait() }()
	// requireLeader per renewal, with the stream's metadata read once.
	needLeader := wantsLeader(ctx)
	reqs := make(chan *pb.LeaseKeepAliveRequest)
	go func() {
		defer close(reqs)
		select {
		case reqs <- first:
		case <-ctx.Done():
			return
		}
		for {
			req, err := stream.Recv()
			if err != nil {
				if err != io.EOF {
					fail(err)
				}
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		var req *pb.LeaseKeepAliveRequest
		select {
		case err := <-failed:
			return err
		case r, ok := <-reqs:
			if !ok {
				wg.Wait()
				select {
				case err := <-failed:
					return err
				default:
					return nil
				}
			}
			req = r
		}
		if lead, _ := s.cfg.Node.LeaderTerm(); needLeader && lead == 0 {
			return rpctypes.ErrGRPCNoLeader
		}
		if ttl, ok := s.cfg.Lessor.RenewLocal(req.ID); ok {
			if err := send(req.ID, ttl); err != nil {
				return err
			}
			continue
		}
		select {
		case slots <- struct{}{}:
		case err := <-failed:
			return err
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			ttl, err := s.renew(ctx, req.ID)
			switch {
			case err == nil:
			case errorsIsLeaseNotFound(err):
				ttl = 0
			default:
				if stream.Context().Err() != nil {
					fail(stream.Context().Err())
					return
				}
				fail(ToGRPC(err))
				return
			}
			if err := send(req.ID, ttl); err != nil {
				fail(err)
			}
		}()
	}
}

// wantsLeader reports whether the client asked for a leader
// (clientv3.WithRequireLeader). ValueFromIncomingContext reads the one key
// where FromIncomingContext would copy the whole metadata map, on every
// request.
func wantsLeader(ctx context.Context) bool {
	v := metadata.ValueFromIncomingContext(ctx, rpctypes.MetadataRequireLeaderKey)
	return len(v) > 0 && v[0] == rpctypes.MetadataHasLeader
}

// keepAliveInFlight bounds concurrent renewals on one keepalive stream.
const keepAliveInFlight = 256

// renew proposes a keepalive, re-proposing it when an attempt is lost (a
// renewal forwarded to a leader that died, a dropped proposal): renewals are
// idempotent, and a lost one must not stall the stream until the request
// timeout while the lease runs out. It fails with the last error once the
// request timeout passes (ErrNoLeader when no leader was found).
func (s *Server) renew(ctx context.Context, id int64) (int64, error) {
	// Deadlines as plain timers inside Applier.Renew: no derived contexts
	// on the keepalive hot path.
	deadline := time.Now().Add(s.cfg.RequestTimeout)
	attempt := s.cfg.RequestTimeout / 5
	if attempt < 500*time.Millisecond {
		attempt = 500 * time.Millisecond
	}
	var (
		ttl int64
		err error
	)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			if err == nil {
				err = apply.ErrTimeout
			}
			return ttl, err // the last attempt's error
		}
		ttl, err = s.cfg.Applier.Renew(ctx, id, min(attempt, left))
		if err == nil || errorsIsLeaseNotFound(err) || ctx.Err() != nil || time.Until(deadline) <= 0 {
			return ttl, err
		}
		if !errors.Is(err, apply.ErrTimeout) && !errors.Is(err, raftnode.ErrTimeout) &&
			!errors.Is(err, raftnode.ErrProposalDropped) && !errors.Is(err, raftnode.ErrNoLeader) {
			return ttl, err
		}
		select {
		case <-ctx.Done():
			return ttl, err
		case <-time.After(min(10*time.Millisecond, max(time.Until(deadline), 0))):
		}
	}
}

func errorsIsLeaseNotFound(err error) bool { return ToGRPC(err) == rpctypes.ErrGRPCLeaseNotFound }

// LeaseTimeToLive reports a lease's granted and remaining TTL (-1 if absent).
func (s *Server) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	if err := s.linearize(ctx); err != nil {
		return nil, err
	}
	resp := &pb.LeaseTimeToLiveResponse{ID: r.ID, TTL: -1}
	if l, ok := s.cfg.Lessor.Get(r.ID, r.Keys); ok {
		resp.TTL = int64(math.Ceil(l.Remaining.Seconds()))
		resp.GrantedTTL = l.TTL
		resp.Keys = l.Keys
	}
	s.fill(&resp.Header)
	return resp, nil
}

// LeaseLeases lists every lease.
func (s *Server) LeaseLeases(ctx context.Context, _ *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	if err := s.linearize(ctx); err != nil {
		return nil, err
	}
	resp := &pb.LeaseLeasesResponse{}
	for _, id := range s.cfg.Lessor.IDs() {
		resp.Leases = append(resp.Leases, &pb.LeaseStatus{ID: id})
	}
	s.fill(&resp.Header)
	return resp, nil
}

// ---- Cluster ----

func toPBMembers(ms []raftnode.Member) []*pb.Member {
	out := make([]*pb.Member, 0, len(ms))
	for _, m := range ms {
		out = append(out, toPBMember(m))
	}
	return out
}

func toPBMember(m raftnode.Member) *pb.Member {
	return &pb.Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner}
}

// MemberList lists members (after a ReadIndex barrier when asked to be linearizable).
func (s *Server) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	if r.Linearizable {
		if err := s.linearize(ctx); err != nil {
			return nil, err
		}
	}
	resp := &pb.MemberListResponse{Members: toPBMembers(s.cfg.Node.Members())}
	s.fill(&resp.Header)
	return resp, nil
}

// MemberAdd adds a voter or a learner.
func (s *Server) MemberAdd(ctx context.Context, r *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	ctx, cancel := s.timeout(ctx)
	defer cancel()
	m, ms, err := s.cfg.Node.AddMember(ctx, r.PeerURLs, r.IsLearner)
	if err != nil {
		return nil, ToGRPC(err)
	}
	resp := &pb.MemberAddResponse{Member: toPBMember(m), Members: toPBMembers(ms)}
	s.fill(&resp.Header)
	return resp, nil
}

// MemberRemove removes a member (the leader too).
func (s *Server) MemberRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	s.countForwarded(ctx)
	ctx, cancel := s.timeout(ctx)
	defer cancel()
	if r.ID == s.cfg.Node.ID() {
		// A member removing itself may never apply its own removal: once the
		// leader has applied it, it stops replicating to the removed member.
		// Another member, which stays, proposes it and sees it applied.
		if resp, err, ok := s.forwardRemove(ctx, r); ok {
			return resp, err
		}
	}
	ms, err := s.cfg.Node.RemoveMember(ctx, r.ID)
	if err != nil {
		return nil, ToGRPC(err)
	}
	resp := &pb.MemberRemoveResponse{Members: toPBMembers(ms)}
	s.fill(&resp.Header)
	return resp, nil
}

// MemberUpdate changes a member's peer URLs.
func (s *Server) MemberUpdate(ctx context.Context, r *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	ctx, cancel := s.timeout(ctx)
	defer cancel()
	ms, err := s.cfg.Node.UpdateMember(ctx, r.ID, r.PeerURLs)
	if err != nil {
		return nil, ToGRPC(err)
	}
	resp := &pb.MemberUpdateResponse{Members: toPBMembers(ms)}
	s.fill(&resp.Header)
	return resp, nil
}

// MemberPromote promotes a caught-up learner to voter.
func (s *Server) MemberPromote(ctx context.Context, r *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	s.countForwarded(ctx)
	ctx, cancel := s.timeout(ctx)
	defer cancel()
	ms, err := s.cfg.Node.PromoteMember(ctx, r.ID)
	if errors.Is(err, raftnode.ErrNotLeader) {
		// Only the leader knows how far a learner is behind: forward, as
		// etcd does.
		return s.forwardPromote(ctx, r)
	}
	if err != nil {
		return nil, ToGRPC(err)
	}
	resp := &pb.MemberPromoteResponse{Members: toPBMembers(ms)}
	s.fill(&resp.Header)
	return resp, nil
}

// countForwarded counts a request another member forwarded here.
func (s *Server) countForwarded(ctx context.Context) {
	if isForwarded(ctx) {
		s.forwardedIn.Add(1)
	}
}

// ForwardedMembershipRequests is how many membership requests (a member's
// self-removal, a promotion sent to a follower) other members forwarded here.
func (s *Server) ForwardedMembershipRequests() uint64 { return s.forwardedIn.Load() }

// forwardedKey marks a request forwarded by another member (no second hop).
const forwardedKey = "tenure-forwarded"

func isForwarded(ctx context.Context) bool {
	return len(metadata.ValueFromIncomingContext(ctx, forwardedKey)) > 0
}

// forwardPromote sends a MemberPromote to the leader's client URL. Without
// a usable leader URL (see DialMember) it answers etcd's "not leader".
func (s *Server) forwardPromote(ctx context.Context, r *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	if isForwarded(ctx) {
		return nil, rpctypes.ErrGRPCNotLeader
	}
	lead := s.cfg.Node.Status().Leader
	if lead == 0 {
		return nil, rpctypes.ErrGRPCNoLeader
	}
	if conn := s.dialMemberID(lead); conn != nil {
		resp, err := pb.NewClusterClient(conn).MemberPromote(metadata.AppendToOutgoingContext(ctx, forwardedKey, "1"), r)
		_ = conn.Close()
		return resp, err
	}
	return nil, rpctypes.ErrGRPCNotLeader
}

// dialMemberID is DialMember for the member with that ID (nil if none).
func (s *Server) dialMemberID(id uint64) *grpc.ClientConn {
	for _, m := range s.cfg.Node.Members() {
		if m.ID == id {
			return DialMember(m, s.cfg.ForwardCreds)
		}
	}
	return nil
}

// DialMember connects to the first of m's client URLs it can use: http://
// in plaintext, https:// with tlsCreds (skipped when nil). Requests this
// member cannot complete itself are forwarded there, and the initial
// corruption check asks peers for their hashes there; nil if none is usable.
func DialMember(m raftnode.Member, tlsCreds credentials.TransportCredentials) *grpc.ClientConn {
	for _, raw := range m.ClientURLs {
		u, err := url.Parse(raw)
		if err != nil {
			continue
		}
		var creds credentials.TransportCredentials
		switch {
		case u.Scheme == "http":
			creds = insecure.NewCredentials()
		case u.Scheme == "https" && tlsCreds != nil:
			creds = tlsCreds
		default:
			continue
		}
		if conn, err := grpc.NewClient(u.Host, grpc.WithTransportCredentials(creds)); err == nil {
			return conn
		}
	}
	return nil
}

// forwardRemove sends a MemberRemove to another member's client URL (the
// leader when that is another member; see DialMember for which URLs). ok is false when no other
// member could be asked, and the caller proposes the removal itself.
func (s *Server) forwardRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error, bool) {
	if isForwarded(ctx) {
		return nil, nil, false
	}
	self := s.cfg.Node.ID()
	lead, _ := s.cfg.Node.LeaderTerm()
	members := s.cfg.Node.Members()
	slices.SortStableFunc(members, func(a, b raftnode.Member) int { // the leader first
		return cmpBool(b.ID == lead, a.ID == lead)
	})
	for _, m := range members {
		if m.ID == self || m.IsLearner {
			continue
		}
		if conn := DialMember(m, s.cfg.ForwardCreds); conn != nil {
			resp, err := pb.NewClusterClient(conn).MemberRemove(metadata.AppendToOutgoingContext(ctx, forwardedKey, "1"), r)
			_ = conn.Close()
			return resp, err, true
		}
	}
	return nil, nil, false
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	default:
		return -1
	}
}

// The Maintenance service is in maintenance.go.
