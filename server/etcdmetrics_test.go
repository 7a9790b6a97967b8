package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// /metrics serves each metric of etcdMetricNames under its etcd name too,
// with the same samples in the same scrape, so that etcd's dashboards and
// alerts (and the "wal fsync p99 under 10 ms" advice) work against Tenure.
func TestMetricsUnderEtcdNames(t *testing.T) {
	cli, cfg := startSingleConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 3; i++ {
		if _, err := cli.Put(ctx, "k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	a := httpGet(t, http.MethodGet, cfg.AdvertiseClientURLs[0]+"/metrics")
	if a.code != 200 {
		t.Fatalf("/metrics: %d", a.code)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(a.body, "\n") {
		if l != "" && l[0] != '#' {
			lines[l] = true
		}
	}
	for tenure, etcd := range etcdMetricNames {
		n := 0
		for l := range lines {
			rest, ok := strings.CutPrefix(l, tenure)
			if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{' && rest[0] != '_') {
				continue
			}
			if rest[0] == '_' && !strings.HasPrefix(rest, "_bucket") && !strings.HasPrefix(rest, "_sum") && !strings.HasPrefix(rest, "_count") {
				continue // another metric whose name starts with this one
			}
			n++
			if !lines[etcd+rest] {
				t.Errorf("%s has %q, but no %q", tenure, l, etcd+rest)
			}
		}
		if n == 0 {
			t.Errorf("no samples of %s (aliased as %s)", tenure, etcd)
		}
	}
	for _, want := range []string{
		"etcd_server_has_leader 1",
		"etcd_server_is_leader 1",
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Put",grpc_service="etcdserverpb.KV",grpc_type="unary"} 3`,
	} {
		if !lines[want] {
			t.Errorf("no line %q", want)
		}
	}
	if lines["etcd_disk_wal_fsync_duration_seconds_count 0"] {
		t.Errorf("etcd_disk_wal_fsync_duration_seconds counted no fsync after 3 puts")
	}
}
