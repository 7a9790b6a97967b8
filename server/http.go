package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tenure-io/tenure/server/raftnode"
)

// httpHandler serves what operators scrape next to the gRPC API, on the
// client URLs (as etcd does) and on --listen-metrics-urls:
//
//	/health   {"health":"true"} only when the member has a leader and a
//	          linearizable read barrier succeeds; 503 otherwise
//	/livez    the process is up
//	/readyz   the member has a leader and has applied what it committed
//	/metrics  Prometheus, names prefixed tenure_
func (m *Member) httpHandler(withPprof bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		err := m.node.ReadIndex(ctx)
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]string{"health": "false", "reason": err.Error()})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"health": "true"})
	})
	mux.HandleFunc("/livez", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if st := m.node.Status(); st.Leader == 0 {
			http.Error(w, "no leader", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
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
	return reg
}
