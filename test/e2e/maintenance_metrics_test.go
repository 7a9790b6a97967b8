package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-io/tenure/test/cluster"
)

// memberMetric reads one metric from member i's /metrics; it fails the test
// when the member does not export it.
func memberMetric(t *testing.T, c *cluster.Cluster, i int, name string) float64 {
	t.Helper()
	v, ok := scrape(t, c.DirectEndpoint(i)+"/metrics")[name]
	if !ok {
		t.Fatalf("%s missing from /metrics", name)
	}
	return v
}

// scrape fetches url's Prometheus text and sums each metric over its labels.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[name] += v
	}
	return out
}

// TestMetricsHealthAndSlowSync: /metrics on the client URL has the
// documented tenure_ metrics and they move with writes; a slow disk sync
// (failpoint sleep) is logged. (/health without a quorum: health_test.go.)
func TestMetricsHealthAndSlowSync(t *testing.T) {
	if cluster.TargetFromEnv(t) != cluster.Tenure {
		t.Skip("tenure metrics and log lines")
	}
	c := start(t, cluster.Options{Size: 3, MemberEnv: map[int][]string{
		0: {"TENURE_FAILPOINTS=raft-before-save=30*sleep:150ms"},
	}})
	ctx := testCtx(t, 60*time.Second)
	url := c.DirectEndpoint(0) + "/metrics"
	names := []string{
		"tenure_raft_term", "tenure_raft_commit_index", "tenure_raft_applied_index",
		"tenure_server_has_leader", "tenure_server_is_leader", "tenure_server_leader_changes_seen_total",
		"tenure_server_proposals_committed_total", "tenure_server_proposals_failed_total", "tenure_server_proposals_pending",
		"tenure_disk_wal_fsync_duration_seconds_count", "tenure_disk_wal_fsync_duration_seconds_bucket",
		"tenure_server_apply_duration_seconds_count",
		"tenure_storage_db_size_bytes", "tenure_storage_quota_backend_bytes", "tenure_mvcc_keys", "tenure_mvcc_revision",
		"tenure_lease_count", "tenure_lease_expired_total", "tenure_watch_watchers", "tenure_watch_slow_watchers",
		"tenure_lock_abandoned_keys_pending",
		"tenure_grpc_server_started_total", "tenure_grpc_server_handled_total", "tenure_grpc_server_handling_seconds_count",
		"tenure_server_alarms",
	}
	before := scrape(t, url)
	for _, n := range names {
		if _, ok := before[n]; !ok {
			t.Errorf("metric %s missing", n)
		}
	}
	if before["tenure_server_has_leader"] != 1 || before["tenure_server_leader_changes_seen_total"] < 1 {
		t.Errorf("has_leader %v leader_changes %v", before["tenure_server_has_leader"], before["tenure_server_leader_changes_seen_total"])
	}

	cli := c.Client(0)
	for i := 0; i < 20; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("m%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Grant(ctx, 60); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	wch := cli.Watch(wctx, "m", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	<-wch
	eventually(t, 10*time.Second, "metrics follow the writes", func() error {
		after := scrape(t, url)
		for _, n := range []string{"tenure_raft_commit_index", "tenure_raft_applied_index", "tenure_server_proposals_committed_total",
			"tenure_disk_wal_fsync_duration_seconds_count", "tenure_server_apply_duration_seconds_count", "tenure_mvcc_revision",
			"tenure_grpc_server_handled_total"} {
			if after[n] < before[n]+20 {
				return fmt.Errorf("%s: %v before, %v after 20 puts", n, before[n], after[n])
			}
		}
		if after["tenure_lease_count"] < 1 || after["tenure_watch_watchers"] < 1 || after["tenure_mvcc_keys"] < 20 {
			return fmt.Errorf("leases %v watchers %v keys %v", after["tenure_lease_count"], after["tenure_watch_watchers"], after["tenure_mvcc_keys"])
		}
		return nil
	})

	// The failpoint stalled one disk sync of member 0 for 150 ms.
	// The failpoint fires on member 0's 30th raft write; keep writing until
	// it has (how many writes the cluster made so far depends on timing).
	eventually(t, 20*time.Second, "slow fdatasync logged", func() error {
		if _, err := cli.Put(ctx, "m/drive", "x"); err != nil {
			return err
		}
		b, err := os.ReadFile(c.Members[0].LogPath)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "slow fdatasync") && strings.Contains(line, "took") && strings.Contains(line, "expected-duration") {
				return nil
			}
		}
		return fmt.Errorf("no slow fdatasync line in %s", c.Members[0].LogPath)
	})
}

// TestMetricsURL: --listen-metrics-urls serves /metrics (and /health) on
// its own port.
func TestMetricsURL(t *testing.T) {
	c := newProcCluster(t, procOptions{Size: 1})
	addr := cluster.FreeAddrs(t, 1)[0]
	c.startAll("--listen-metrics-urls", "http://"+addr)
	ctx := testCtx(t, 30*time.Second)
	if err := c.waitReady(ctx, nil); err != nil {
		t.Fatal(err)
	}
	m := scrape(t, "http://"+addr+"/metrics")
	if m["tenure_server_is_leader"] != 1 || m["tenure_raft_term"] < 1 {
		t.Fatalf("metrics URL: is_leader %v term %v", m["tenure_server_is_leader"], m["tenure_raft_term"])
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/health on the metrics URL: %s", resp.Status)
	}
}
