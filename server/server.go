package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/soheilhy/cmux"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/keepalive"

	"github.com/tenure-io/tenure/server/api"
	"github.com/tenure-io/tenure/server/apply"
	"github.com/tenure-io/tenure/server/compactor"
	"github.com/tenure-io/tenure/server/lease"
	"github.com/tenure-io/tenure/server/lock"
	"github.com/tenure-io/tenure/server/mvcc"
	"github.com/tenure-io/tenure/server/procs"
	"github.com/tenure-io/tenure/server/raftnode"
	"github.com/tenure-io/tenure/server/storage"
	"github.com/tenure-io/tenure/server/watch"
)

// grpcOverheadBytes is added to --max-request-bytes for the gRPC receive
// limit, so a request just under the limit is refused by Tenure's own check
// with etcd's "request is too large" rather than by gRPC.
const grpcOverheadBytes = 512 * 1024

// streamWorkers is the size of gRPC's reusable handler pool per server. A
// handler holds its worker until the request is applied or read-indexed
// (milliseconds under load), and a request finding every worker busy runs
// on a fresh goroutine whose stack grows again through the storage
// engine's call chain: with 8 workers (4 per core), 100 clients' reads
// spent 9-16% of each member's CPU copying stacks. Idle workers cost only
// their parked stacks.
const streamWorkers = 256

// Flow-control windows of the client gRPC server (see its options in Start).
const (
	clientStreamWindowBytes = 1 << 20
	clientConnWindowBytes   = 4 << 20
)

// Run starts a member with cfg and serves until ctx is cancelled.
func Run(ctx context.Context, cfg Config) error {
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	lg := cfg.Logger
	if lg == nil {
		var err error
		if lg, err = NewLogger(cfg.LogLevel, cfg.LogFormat, os.Stderr); err != nil {
			return err
		}
	}
	for _, w := range cfg.Warnings() {
		lg.Warn(w)
	}
	m, err := Start(cfg, lg)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		m.Stop()
		return nil
	case <-m.node.Removed():
	}
	// Removed from the cluster (raftnode logged how it learnt it). As etcd
	// does, the member stops: nothing it could answer would be true. The
	// grace lets the answer to a MemberRemove that this member itself
	// served leave, and a leader that applied its own removal pass the
	// commit on.
	err = removedHint(raftnode.ErrMemberRemoved, cfg.DataDir)
	lg.Error("stopping", "err", err)
	select {
	case <-ctx.Done():
	case <-time.After(removedGrace):
	}
	m.Stop()
	return err
}

// compactTarget is what the automatic compactor works on.
type compactTarget struct {
	node *raftnode.Node
	kv   *mvcc.Store
	edge *api.Server
}

func (t compactTarget) Rev() int64 { return t.kv.Rev() }

func (t compactTarget) IsLeader() bool {
	lead, _ := t.node.LeaderTerm()
	return lead != 0 && lead == t.node.ID()
}

func (t compactTarget) Compact(ctx context.Context, rev int64) error {
	_, err := t.edge.Compact(ctx, &pb.CompactionRequest{Revision: rev})
	return err
}

// removedGrace is how long a member that learnt it was removed keeps
// serving before it stops (etcd waits 10 heartbeats of 100 ms).
const removedGrace = time.Second

// removedHint says what an operator does about a removed member.
func removedHint(err error, dataDir string) error {
	return fmt.Errorf("%w; the data-dir used by this member must be removed (%s): to bring it back, add it again with 'etcdctl member add' and start it on an empty data-dir with --initial-cluster-state existing", err, dataDir)
}

// Member is a running Tenure member.
type Member struct {
	cfg      Config
	lg       *slog.Logger
	node     *raftnode.Node
	kv       *mvcc.Store
	hub      *watch.Hub
	lessor   *lease.Lessor
	db       *pebble.DB
	registry *prometheus.Registry
	metrics  *memberMetrics
	edge     *api.Server
	locks    *api.Locks
	lockm    *lock.Machine
	ap       *apply.Applier
	grpcs    []*grpc.Server
	https    []*http.Server
	// listeners are the TCP listeners of every listen flag; Stop closes
	// what they accepted that no server took over (connlistener.go).
	listeners []*trackingListener
	gateway   *gateway
	health    *health.Server
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	stopOnce  sync.Once
}

var errUnknownNotice = errors.New("empty or unknown notice")

// Start opens the store, starts raft and the listeners, and returns once
// the member is serving (it may not have a leader yet).
func Start(cfg Config, lg *slog.Logger) (_ *Member, err error) {
	cc, err := compactor.Parse(cfg.AutoCompactionMode, cfg.AutoCompactionRetention)
	if err != nil {
		return nil, err
	}
	db, err := storage.Open(cfg.DataDir, storage.Options{WALDir: cfg.WALDir, OnWALMoved: func(from, to string) {
		lg.Warn("write-ahead log moved: recovered its earlier files and writes it here from now on", "from", from, "to", to)
	}})
	if err != nil {
		return nil, err
	}
	closers := []func(){func() { _ = db.Close() }}
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()
	kv, err := mvcc.Open(db, lg)
	if err != nil {
		return nil, err
	}
	closers = append(closers, kv.Close)
	lessor, err := lease.New(db, lg)
	if err != nil {
		return nil, err
	}
	if err := apply.AttachLeases(kv, lessor); err != nil {
		return nil, err
	}
	locks, err := lock.New(db, kv, lg)
	if err != nil {
		return nil, err
	}
	var eagerNode atomic.Pointer[raftnode.Node] // set once the node exists
	hub := watch.NewHub(kv, watch.HubConfig{
		ProgressNotifyInterval: cfg.WatchProgressNotifyInterval,
		MaxResponseBytes:       cfg.MaxRequestBytes,
		OnWideFanOut:           procs.Boost, // a no-op unless tenure serve runs the controller
		// On its own goroutine: SayEager asks the hub (WantsEager below),
		// whose lock is held here.
		OnFirstWatcher: func() {
			if n := eagerNode.Load(); n != nil {
				go n.SayEager()
			}
		},
	}, lg)
	closers = append(closers, hub.Close)
	ap := apply.New(apply.Config{KV: kv, Lessor: lessor, Hub: hub, DB: db, MaxRequestBytes: cfg.MaxRequestBytes, Logger: lg, Locks: locks})
	delays := lock.NewDelayScheduler(locks, func(ctx context.Context, op *lock.Op) error { return ap.DoLock(ctx, op).Err })

	initial, err := ParseInitialCluster(cfg.InitialCluster)
	if err != nil {
		return nil, fmt.Errorf("--initial-cluster: %w", err)
	}
	members := make([]raftnode.Member, 0, len(initial))
	for _, im := range initial {
		members = append(members, raftnode.Member{Name: im.Name, PeerURLs: im.PeerURLs})
	}
	electionTicks := int(cfg.ElectionTimeout / cfg.HeartbeatInterval)
	mm := newMemberMetrics()
	mm.slowUnary, mm.lg = cfg.WarningUnaryRequestDuration, lg
	clientTLS, peerTLS, peerDial, err := tlsConfigs(cfg)
	if err != nil {
		return nil, err
	}
	// A member forwards some requests (removing itself, promoting a learner)
	// to another member's client URL; over https it presents
	// --client-cert-file, or else --cert-file (which --client-cert-auth
	// clusters then issue for client use too), and trusts --trusted-ca-file.
	var forwardCreds credentials.TransportCredentials
	if cfg.ClientTLS.CertFile != "" {
		dial, err := cfg.ClientTLS.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("--cert-file: %w", err)
		}
		forwardCreds = credentials.NewTLS(dial)
	}
	node, err := raftnode.New(raftnode.Config{
		Name:                       cfg.Name,
		DB:                         db,
		ClusterToken:               cfg.InitialClusterToken,
		InitialCluster:             members,
		NewCluster:                 cfg.InitialClusterState != "existing",
		ClientURLs:                 cfg.AdvertiseClientURLs,
		PeerURLs:                   cfg.InitialAdvertisePeerURLs,
		TickInterval:               cfg.HeartbeatInterval,
		ElectionTicks:              electionTicks,
		SnapshotCount:              cfg.SnapshotCount,
		SnapshotCatchUpEntries:     cfg.SnapshotCatchUpEntries,
		WarnApplyDuration:          cfg.WarningApplyDuration,
		MaxRequestBytes:            cfg.MaxRequestBytes,
		ThriftyDelay:               cfg.ThriftyReplication,
		StrictReconfigCheck:        cfg.StrictReconfigCheck,
		InitialElectionTickAdvance: cfg.InitialElectionTickAdvance,
		StateMachine:               ap,
		Logger:                     lg,
		Observer:                   mm.observer(),
		PeerTLS:                    peerDial,
		OnLeaderChange: func(ev raftnode.LeaderEvent) {
			if ev.Leader != 0 {
				mm.leaderChanges.Inc()
			}
			if ev.IsLeader {
				lessor.Promote()
			} else {
				lessor.Demote()
			}
			delays.SetLeader(ev.IsLeader)
		},
		// A member with watchers is never the follower thrifty replication
		// holds back: their events would lag by the delay.
		WantsEager: func() bool { w, _ := hub.Stats(); return w > 0 },
		// Members send each other lock grants and lock op results (below).
		OnNotice: func(from uint64, payload []byte) {
			err := errUnknownNotice
			switch {
			case len(payload) == 0:
			case payload[0] == lock.NoticeGrant:
				var n lock.Note
				if n, err = lock.UnmarshalGrantNotice(payload); err == nil {
					locks.DeliverGrant(n)
				}
			case payload[0] == lock.NoticeResult:
				var (
					id    uint64
					out   any
					opErr error
				)
				if id, out, opErr, err = lock.UnmarshalResultNotice(payload); err == nil {
					ap.DeliverResult(id, apply.Result{Lock: out, Err: opErr})
				}
			}
			if err != nil {
				lg.Warn("undecodable notice from a peer; ignored", "peer", fmt.Sprintf("%x", from), "err", err)
			}
		},
	})
	if errors.Is(err, raftnode.ErrMemberRemoved) {
		return nil, removedHint(err, cfg.DataDir)
	}
	if err != nil {
		return nil, err
	}
	eagerNode.Store(node)
	ap.SetProposer(node)
	// The leader, which usually applies an entry first, pushes each grant
	// to the member where the waiting call is: that member answers it
	// without first learning the commit and applying the entry, which on a
	// follower waits behind its own log fsync (one raft round's share of a
	// hand-off's time; docs/locks.md).
	locks.SetGrantHook(func(n lock.Note) {
		if lead, _ := node.LeaderTerm(); lead == node.ID() && n.Origin != lead {
			node.SendNotice(n.Origin, lock.MarshalGrantNotice(n))
		}
	})
	// Likewise the result of each lock op a follower proposed: its caller
	// (an Unlock, an acquire's enqueue) is answered without waiting for
	// that member's apply. Outcomes the notice cannot carry are left to it.
	ap.SetResultPusher(func(origin, id uint64, res apply.Result) {
		if lead, _ := node.LeaderTerm(); lead == node.ID() && origin != lead {
			if b, ok := lock.MarshalResultNotice(id, res.Lock, res.Err); ok {
				node.SendNotice(origin, b)
			}
		}
	})

	// etcd's minimum lease TTL: leases shorter than 1.5 election timeouts
	// could expire during an ordinary leader election.
	minTTL := int64(math.Ceil(1.5 * cfg.ElectionTimeout.Seconds()))
	edge := api.New(api.Config{
		Node: node, Applier: ap, KV: kv, Lessor: lessor, DB: db,
		MaxTxnOps: cfg.MaxTxnOps, MaxRequestBytes: cfg.MaxRequestBytes,
		RequestTimeout: cfg.RequestTimeout, MinLeaseTTL: minTTL, QuotaBytes: cfg.QuotaBackendBytes, Logger: lg,
		ForwardCreds: forwardCreds,
	})

	if cfg.InitialCorruptCheck {
		local, err := edge.HashKV(context.Background(), &pb.HashKVRequest{})
		if err != nil {
			return nil, fmt.Errorf("initial corruption check: local hash: %w", err)
		}
		if local.HashRevision > 1 { // an empty store has nothing to compare
			if err := initialCorruptCheck(context.Background(), lg, node.ID(), local, node.Members(), forwardCreds, cfg.RequestTimeout); err != nil {
				return nil, err
			}
		}
	}

	mem := &Member{cfg: cfg, lg: lg, node: node, kv: kv, hub: hub, lessor: lessor, db: db, metrics: mm, edge: edge, ap: ap, lockm: locks}
	mem.registry = mem.newRegistry()
	clientSrv := grpc.NewServer(
		grpc.MaxRecvMsgSize(cfg.MaxRequestBytes+grpcOverheadBytes),
		grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.MaxConcurrentStreams(math.MaxUint32),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: cfg.GRPCKeepAliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: cfg.GRPCKeepAliveInterval, Timeout: cfg.GRPCKeepAliveTimeout}),
		grpc.ChainUnaryInterceptor(mm.unary),
		grpc.ChainStreamInterceptor(mm.stream),
		// Reused handler goroutines keep their grown stacks: a fresh
		// goroutine per request spent ~14% of a member's CPU growing its
		// stack through the storage engine's call chain.
		grpc.NumStreamWorkers(streamWorkers),
		// Static flow-control windows turn off gRPC's BDP estimation, which
		// answered each request's DATA frame with a WINDOW_UPDATE and a BDP
		// PING (one more write, and a read for the client's ack, per
		// request). The sizes stay within what BDP would grow to (16 MiB a
		// connection); a request larger than the stream window is still
		// accepted (gRPC widens the window for a message in progress).
		grpc.InitialWindowSize(clientStreamWindowBytes),
		grpc.InitialConnWindowSize(clientConnWindowBytes),
	)
	edge.Register(clientSrv)
	mem.locks = edge.NewLocks(api.LockConfig{Machine: locks, Delays: delays})
	mem.locks.Register(clientSrv)
	pb.RegisterWatchServer(clientSrv, hub.Server(edge.Header))
	// Server reflection lets grpcurl and similar tools describe and call
	// every service, etcd's and tenure.v1, without a copy of the protos.
	registerReflection(clientSrv)
	mem.health = registerHealth(clientSrv)
	peerSrv := grpc.NewServer(append(raftnode.PeerServerOptions(),
		grpc.MaxRecvMsgSize(math.MaxInt32), grpc.MaxSendMsgSize(math.MaxInt32))...)
	node.RegisterPeerService(peerSrv)
	mem.grpcs = []*grpc.Server{clientSrv, peerSrv}

	var gwh http.Handler // nil: no /v3/ on the client URLs
	if cfg.EnableGRPCGateway {
		gway, err := newGateway(context.Background())
		if err != nil {
			return nil, fmt.Errorf("grpc gateway: %w", err)
		}
		closers = append(closers, gway.close)
		mem.gateway, gwh = gway, gway
		mem.serve(clientSrv, gway.lis)
	}

	// open binds one URL of a listen flag; on an error it closes what was
	// bound before it, so a failed start leaves no port taken.
	open := func(flag, u string, tlsCfg *tls.Config) (net.Listener, error) {
		l, tl, err := listen(u, tlsCfg)
		if err != nil {
			for _, l := range mem.listeners {
				_ = l.Close()
			}
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		mem.listeners = append(mem.listeners, tl)
		return l, nil
	}
	for _, u := range cfg.ListenPeerURLs {
		l, lerr := open("--listen-peer-urls", u, peerTLS)
		if lerr != nil {
			return nil, lerr
		}
		if peerTLS != nil && !cfg.PeerTLS.SkipClientSANVerify {
			l = sanCheckListener{l}
		}
		mem.wg.Add(1)
		go func() {
			defer mem.wg.Done()
			if err := node.ServePeer(l, peerSrv); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				lg.Error("peer listener stopped", "addr", l.Addr().String(), "err", err)
			}
		}()
	}
	for _, u := range cfg.ListenClientURLs {
		l, lerr := open("--listen-client-urls", u, clientTLS)
		if lerr != nil {
			return nil, lerr
		}
		if len(cfg.ListenClientHTTPURLs) > 0 {
			// etcd's --listen-client-http-urls: the HTTP services move there
			// and the client URLs serve gRPC alone.
			mem.serve(clientSrv, l)
			continue
		}
		// gRPC and HTTP share the client port, as in etcd: cmux routes by
		// the HTTP/2 content-type.
		mux := cmux.New(l)
		grpcL := mux.MatchWithWriters(cmux.HTTP2MatchHeaderFieldSendSettings("content-type", "application/grpc"))
		httpL := mux.Match(cmux.Any())
		mem.serve(clientSrv, grpcL)
		mem.serveHTTP(mem.httpHandler(cfg.EnablePprof, gwh), httpL)
		mem.wg.Add(1)
		go func() { defer mem.wg.Done(); _ = mux.Serve() }()
	}
	for _, u := range cfg.ListenClientHTTPURLs {
		l, lerr := open("--listen-client-http-urls", u, clientTLS)
		if lerr != nil {
			return nil, lerr
		}
		mem.serveHTTP(mem.httpHandler(cfg.EnablePprof, gwh), l)
	}
	for _, u := range cfg.ListenMetricsURLs {
		l, lerr := open("--listen-metrics-urls", u, clientTLS)
		if lerr != nil {
			return nil, lerr
		}
		mem.serveHTTP(mem.httpHandler(false, nil), l)
	}
	node.Start()
	ctx, cancel := context.WithCancel(context.Background())
	mem.cancel = cancel
	mem.wg.Add(1)
	go func() {
		defer mem.wg.Done()
		ap.RunLeaseLoop(ctx, apply.LeaseLoopConfig{CheckpointInterval: cfg.LeaseCheckpointInterval, MaxExpiriesPerSecond: cfg.LeaseExpiryRate})
	}()
	if cc != nil {
		c := compactor.New(*cc, compactTarget{node: node, kv: kv, edge: edge}, lg, func(err error) bool {
			return errors.Is(err, rpctypes.ErrGRPCCompacted)
		})
		mem.wg.Add(1)
		go func() { defer mem.wg.Done(); c.Run(ctx) }()
	}
	lg.Info("serving", "name", cfg.Name, "member-id", fmt.Sprintf("%x", node.ID()),
		"cluster-id", fmt.Sprintf("%x", node.ClusterID()), "client-urls", cfg.ListenClientURLs,
		"peer-urls", cfg.ListenPeerURLs, "data-dir", cfg.DataDir)
	return mem, nil
}

// listen binds an http:// or https:// URL; https is served with tlsCfg
// (TLS terminates at the listener, so gRPC and HTTP behind cmux, and the
// peer gRPC server, see plaintext connections).
func listen(raw string, tlsCfg *tls.Config) (net.Listener, *trackingListener, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, nil, errors.New("URL scheme must be http or https: " + raw)
	}
	if u.Scheme == "https" && tlsCfg == nil {
		return nil, nil, errors.New("https URL without a certificate: " + raw)
	}
	tcp, err := net.Listen("tcp", u.Host)
	if err != nil {
		return nil, nil, err
	}
	tl := trackConns(tcp)
	if u.Scheme == "https" {
		return tls.NewListener(tl, tlsCfg), tl, nil
	}
	return tl, tl, nil
}

// tlsConfigs builds the client and peer listeners' TLS configurations and
// the configuration peers dial each other with (nil when not configured).
func tlsConfigs(cfg Config) (client, peer, peerDial *tls.Config, err error) {
	if cfg.ClientTLS.CertFile != "" {
		if client, err = cfg.ClientTLS.ServerConfig(); err != nil {
			return nil, nil, nil, fmt.Errorf("--cert-file: %w", err)
		}
	}
	if cfg.PeerTLS.CertFile != "" {
		if peer, err = cfg.PeerTLS.ServerConfig(); err != nil {
			return nil, nil, nil, fmt.Errorf("--peer-cert-file: %w", err)
		}
	}
	if !cfg.PeerTLS.Empty() {
		if peerDial, err = cfg.PeerTLS.ClientConfig(); err != nil {
			return nil, nil, nil, fmt.Errorf("--peer-cert-file: %w", err)
		}
	}
	return client, peer, peerDial, nil
}

func (m *Member) serve(s *grpc.Server, l net.Listener) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if err := s.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			m.lg.Error("listener stopped", "addr", l.Addr().String(), "err", err)
		}
	}()
}

func (m *Member) serveHTTP(h http.Handler, l net.Listener) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	// TLS ends at the listener, so an HTTPS client that negotiated h2 by
	// ALPN arrives here as cleartext HTTP/2.
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	m.https = append(m.https, srv)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		_ = srv.Serve(l)
	}()
}

func (m *Member) diskUsage() int64 { return m.edge.DBSize() }

// Node exposes the raft node (tests and tools).
func (m *Member) Node() *raftnode.Node { return m.node }

// Stop shuts the member down: listeners first, then raft, then the store.
func (m *Member) Stop() {
	m.stopOnce.Do(func() {
		m.health.Shutdown() // NOT_SERVING to health watchers before the port closes
		m.cancel()
		for _, g := range m.grpcs {
			g.Stop()
		}
		for _, h := range m.https {
			_ = h.Close()
		}
		if m.gateway != nil {
			m.gateway.close()
		}
		for _, l := range m.listeners {
			l.closeConns()
		}
		m.locks.Close() // background deletes of departed waiters' keys
		m.node.Stop()
		m.wg.Wait()
		m.hub.Close()
		m.kv.Close()
		if err := m.db.Close(); err != nil {
			m.lg.Error("closing store", "err", err)
		}
		m.lg.Info("stopped", "name", m.cfg.Name)
	})
}
