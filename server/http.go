package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/server/api"
	"github.com/tenure-io/tenure/server/mvcc"
	"github.com/tenure-io/tenure/server/raftnode"
)

// httpHandler serves what operators scrape next to the gRPC API, on the
// client URLs (as etcd does; on --listen-client-http-urls instead when that
// is given) and on --listen-metrics-urls:
//
//	/health, /livez, /readyz  etcd's health checks (healthhttp.go)
//	/version  etcd's: {"etcdserver":"3.7.3","etcdcluster":"3.7.0"}
//	/metrics  Prometheus: tenure_ names, and etcd's names for those that
//	          mean the same (etcdmetrics.go)
//	/v3/      etcd's gRPC gateway (JSON over HTTP), when gateway is not nil:
//	          the client (or client HTTP) URLs only
func (m *Member) httpHandler(withPprof bool, gateway http.Handler) http.Handler {
	mux := http.NewServeMux()
	if gateway != nil {
		mux.Handle("/v3/", gateway)
		mux.Handle("/v3beta/", gateway)
	}
	mux.HandleFunc("/health", m.handleHealth)
	// etcd's /version: the versions Tenure's API answers as (the etcd
	// release and the cluster version), which etcd's HTTP clients (etcd3gw
	// among them) read to pick the API path.
	mux.HandleFunc("/version", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"etcdserver": api.Version, "etcdcluster": api.ClusterVersion})
	})
	handleChecks(mux, "/livez", m.livezChecks())
	handleChecks(mux, "/readyz", m.readyzChecks())
	mux.Handle("/metrics", promhttp.HandlerFor(withEtcdNames{m.registry, etcdMetricNames}, promhttp.HandlerOpts{}))
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// newRegistry registers the member's metrics. Values are read at scrape
// time from the components, so nothing on the hot path updates a metric.
func (m *Member) newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	status := func() raftnode.Status { return m.node.Status() }
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	gauge("tenure_server_has_leader", "1 if this member knows a leader.", func() float64 {
		if status().Leader != 0 {
			return 1
		}
		return 0
	})
	gauge("tenure_server_is_leader", "1 if this member is the leader.", func() float64 {
		if st := status(); st.Leader == st.ID {
			return 1
		}
		return 0
	})
	gauge("tenure_raft_term", "Current raft term.", func() float64 { return float64(status().Term) })
	gauge("tenure_raft_commit_index", "Raft commit index.", func() float64 { return float64(status().CommitIndex) })
	gauge("tenure_raft_applied_index", "Raft applied index.", func() float64 { return float64(status().AppliedIndex) })
	gauge("tenure_mvcc_revision", "Current mvcc revision.", func() float64 { return float64(m.kv.Rev()) })
	gauge("tenure_mvcc_compact_revision", "Compacted mvcc revision.", func() float64 { return float64(m.kv.CompactRev()) })
	gauge("tenure_lease_count", "Number of leases.", func() float64 { return float64(m.lessor.Count()) })
	gauge("tenure_watch_watchers", "Number of watchers.", func() float64 { w, _ := m.hub.Stats(); return float64(w) })
	gauge("tenure_watch_slow_watchers", "Watchers catching up from history.", func() float64 { _, s := m.hub.Stats(); return float64(s) })
	gauge("tenure_storage_db_size_bytes", "Disk space used by the store.", func() float64 { return float64(m.diskUsage()) })
	gauge("tenure_storage_db_size_in_use_bytes", "Disk space used by the store, less obsolete files not yet deleted.", func() float64 { return float64(m.edge.DBSizeInUse()) })
	gauge("tenure_storage_quota_backend_bytes", "--quota-backend-bytes: NOSPACE is raised above it.", func() float64 { return float64(m.cfg.QuotaBackendBytes) })
	gauge("tenure_mvcc_keys", "Number of keys (counted at most every 5 s).", func() float64 { return float64(m.metrics.keys(m.kv)) })
	gauge("tenure_server_proposals_pending", "Client proposals waiting to be applied on this member.", func() float64 {
		p, _, _ := m.edge.ProposalStats()
		return float64(p)
	})
	gauge("tenure_lock_abandoned_keys_pending", "Keys of waiters that left (cancelled, disconnected) whose delete could not commit at once and is being retried.", func() float64 {
		return float64(m.locks.PendingAbandons())
	})
	counter := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
	}
	counter("tenure_server_proposals_committed_total", "Client proposals of this member applied (including requests that failed their own checks).", func() float64 {
		_, c, _ := m.edge.ProposalStats()
		return float64(c)
	})
	counter("tenure_server_proposals_failed_total", "Client proposals of this member that were never applied (no leader, dropped, timed out).", func() float64 {
		_, _, f := m.edge.ProposalStats()
		return float64(f)
	})
	counter("tenure_server_forwarded_membership_requests_total", "Membership requests (a member's self-removal, a promotion sent to a follower) other members forwarded to this one.", func() float64 {
		return float64(m.edge.ForwardedMembershipRequests())
	})
	counter("tenure_raft_deferred_proposals_total", "Proposals this leader held back to share the raft round of the next one (lock acquires that queue behind an owner).", func() float64 {
		return float64(m.node.DeferredProposals())
	})
	counter("tenure_raft_eager_requests_sent_total", "Messages this follower sent its leader asking that thrifty replication not hold its appends (it has watchers): at its first watcher, and every quarter election timeout while it has any.", func() float64 {
		all, _ := m.node.EagerRequestsSent()
		return float64(all)
	})
	counter("tenure_raft_eager_requests_first_watcher_total", "Of tenure_raft_eager_requests_sent_total, those sent at once when this follower's first watcher was created.", func() float64 {
		_, atOnce := m.node.EagerRequestsSent()
		return float64(atOnce)
	})
	counter("tenure_lock_grants_pushed_total", "Lock grants this leader sent to the member where the waiting call is, ahead of that member's own apply.", func() float64 {
		return float64(m.node.NoticesSent())
	})
	counter("tenure_lock_pushed_results_delivered_total", "Lock calls on this member answered by the result of their op the leader pushed, before this member applied it.", func() float64 {
		return float64(m.ap.PushedResults())
	})
	counter("tenure_lock_pushed_grants_delivered_total", "Waiting lock calls on this member woken by a grant the leader pushed, before this member applied it.", func() float64 {
		return float64(m.lockm.PushedGrantsDelivered())
	})
	counter("tenure_lease_renewals_local_total", "Keepalives this member acknowledged without a raft round, within the grace of its own replicated renewal of the lease.", func() float64 {
		return float64(m.lessor.RenewedLocally())
	})
	counter("tenure_lease_expired_total", "Leases revoked by expiry on this member.", func() float64 { return float64(m.ap.LeaseExpiries()) })
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tenure_server_alarms", Help: "Raised alarms of this type (any member).", ConstLabels: prometheus.Labels{"alarm": "NOSPACE"},
	}, func() float64 { return float64(len(m.ap.Alarms(pb.AlarmType_NOSPACE))) }))
	m.metrics.register(reg)
	return reg
}

// memberMetrics are the metrics updated on hot paths: atomic counters and
// histograms only.
type memberMetrics struct {
	// slowUnary (--warning-unary-request-duration) and lg: a unary request
	// slower than this is logged as etcd does ("request stats").
	slowUnary     time.Duration
	lg            *slog.Logger
	leaderChanges prometheus.Counter
	walSync       prometheus.Histogram
	apply         prometheus.Histogram
	snapSent      *prometheus.HistogramVec
	grpcStarted   *prometheus.CounterVec
	grpcHandled   *prometheus.CounterVec
	grpcSeconds   *prometheus.HistogramVec

	keysMu  sync.Mutex
	keysAt  time.Time
	keysVal int64
}

func newMemberMetrics() *memberMetrics {
	return &memberMetrics{
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tenure_server_leader_changes_seen_total", Help: "Leader changes this member has seen (to a known leader).",
		}),
		walSync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tenure_disk_wal_fsync_duration_seconds", Help: "Synced writes of raft hard state and entries (the raft log's fsync).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14), // 1ms .. 8s, as etcd
		}),
		apply: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tenure_server_apply_duration_seconds", Help: "Applying one committed entry to the state machine.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 20),
		}),
		snapSent: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tenure_network_snapshot_send_duration_seconds", Help: "Snapshots streamed to followers, by result.",
			Buckets: prometheus.ExponentialBuckets(0.1, 2, 10),
		}, []string{"result"}),
		grpcStarted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_grpc_server_started_total", Help: "gRPC calls started on the client API.",
		}, []string{"grpc_type", "grpc_service", "grpc_method"}),
		grpcHandled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_grpc_server_handled_total", Help: "gRPC calls completed on the client API, by status code.",
		}, []string{"grpc_type", "grpc_service", "grpc_method", "grpc_code"}),
		grpcSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tenure_grpc_server_handling_seconds", Help: "Latency of unary gRPC calls on the client API.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"grpc_type", "grpc_service", "grpc_method"}),
	}
}

func (mm *memberMetrics) register(reg *prometheus.Registry) {
	reg.MustRegister(mm.leaderChanges, mm.walSync, mm.apply, mm.snapSent, mm.grpcStarted, mm.grpcHandled, mm.grpcSeconds)
}

func (mm *memberMetrics) observer() *raftnode.Observer {
	return &raftnode.Observer{
		DiskSync: func(d time.Duration) { mm.walSync.Observe(d.Seconds()) },
		Apply:    func(d time.Duration) { mm.apply.Observe(d.Seconds()) },
		SnapshotSent: func(d time.Duration, ok bool) {
			r := "ok"
			if !ok {
				r = "failed"
			}
			mm.snapSent.WithLabelValues(r).Observe(d.Seconds())
		},
	}
}

// keys counts the keys at most every 5 s (a scan: too slow for every scrape).
func (mm *memberMetrics) keys(kv *mvcc.Store) int64 {
	mm.keysMu.Lock()
	defer mm.keysMu.Unlock()
	if time.Since(mm.keysAt) > 5*time.Second {
		if resp, err := kv.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, CountOnly: true, Serializable: true}); err == nil {
			mm.keysVal = resp.Count
			mm.keysAt = time.Now()
		}
	}
	return mm.keysVal
}

func splitMethod(full string) (service, method string) {
	full = strings.TrimPrefix(full, "/")
	if i := strings.LastIndexByte(full, '/'); i >= 0 {
		return full[:i], full[i+1:]
	}
	return "unknown", full
}

// unary and stream are the client gRPC server's interceptors (counts by
// code, unary latency), named as go-grpc-prometheus names them.
func (mm *memberMetrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	svc, meth := splitMethod(info.FullMethod)
	mm.grpcStarted.WithLabelValues("unary", svc, meth).Inc()
	start := time.Now()
	resp, err := h(ctx, req)
	took := time.Since(start)
	mm.grpcSeconds.WithLabelValues("unary", svc, meth).Observe(took.Seconds())
	if mm.slowUnary > 0 && took > mm.slowUnary && mm.lg != nil {
		mm.logSlowUnary(ctx, info.FullMethod, took, req, resp, err)
	}
	mm.grpcHandled.WithLabelValues("unary", svc, meth, status.Code(err).String()).Inc()
	return resp, err
}

func (mm *memberMetrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	svc, meth := splitMethod(info.FullMethod)
	typ := "bidi_stream"
	switch {
	case info.IsClientStream && !info.IsServerStream:
		typ = "client_stream"
	case !info.IsClientStream && info.IsServerStream:
		typ = "server_stream"
	}
	mm.grpcStarted.WithLabelValues(typ, svc, meth).Inc()
	err := h(srv, ss)
	mm.grpcHandled.WithLabelValues(typ, svc, meth, status.Code(err).String()).Inc()
	return err
}

// logSlowUnary is etcd's warning for a unary request slower than
// --warning-unary-request-duration: its method, time, caller, and the
// request's and answer's sizes (not their content: keys and values stay out
// of the log).
func (mm *memberMetrics) logSlowUnary(ctx context.Context, method string, took time.Duration, req, resp any, err error) {
	attrs := []any{"method", method, "took", took, "expected-duration", mm.slowUnary}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		attrs = append(attrs, "remote", p.Addr.String())
	}
	if n, ok := messageSize(req); ok {
		attrs = append(attrs, "request-size", n)
	}
	if n, ok := messageSize(resp); ok && err == nil {
		attrs = append(attrs, "response-size", n)
	}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	mm.lg.Warn("request stats", attrs...)
}

// messageSize is a message's encoded size, for etcd's gogo-generated types
// (Size method) and protobuf-go ones alike.
func messageSize(m any) (int, bool) {
	switch v := m.(type) {
	case interface{ Size() int }:
		return v.Size(), true
	case proto.Message:
		return proto.Size(v), true
	}
	return 0, false
}
