package server

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// scrapeCounter reads one unlabelled counter from the member's /metrics.
func scrapeCounter(t *testing.T, clientURL, name string) float64 {
	t.Helper()
	resp, err := http.Get(clientURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("%s not in /metrics", name)
	return 0
}

// Back-to-back keepalives (one stream each, as clientv3's KeepAliveOnce and
// etcd's benchmark send them) are acknowledged by the leader without a raft
// round while a replicated renewal it started is within its grace, and
// still answer the granted TTL; the grace never shows in TimeToLive.
func TestKeepAliveWithinGraceAnsweredWithoutRaft(t *testing.T) {
	cli, cfg := startSingleConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g, err := cli.Grant(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	url := cfg.AdvertiseClientURLs[0]
	before := scrapeCounter(t, url, "tenure_lease_renewals_local_total")
	// Keep renewing until some renewal was acknowledged locally; every one
	// answers the granted TTL. A slow machine may push renewals past the
	// grace (they then go through raft); the deadline bounds the wait.
	for scrapeCounter(t, url, "tenure_lease_renewals_local_total") == before {
		if ctx.Err() != nil {
			t.Fatal("no keepalive was acknowledged without raft within 20 s")
		}
		for range 20 {
			ka, err := cli.KeepAliveOnce(ctx, g.ID)
			if err != nil {
				t.Fatal(err)
			}
			if ka.TTL != 10 {
				t.Fatalf("keepalive answered TTL %d, want the granted 10", ka.TTL)
			}
		}
	}
	ttl, err := cli.TimeToLive(ctx, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL > 10 || ttl.TTL < 9 || ttl.GrantedTTL != 10 {
		t.Fatalf("TimeToLive: TTL %d granted %d, want 9..10 of 10", ttl.TTL, ttl.GrantedTTL)
	}
	// A revoked lease is gone from the leader's table: no local answer.
	if _, err := cli.Revoke(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.KeepAliveOnce(ctx, g.ID); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("keepalive of a revoked lease: %v, want %v", err, rpctypes.ErrLeaseNotFound)
	}
}
