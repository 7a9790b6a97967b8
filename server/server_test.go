package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// freePort returns a loopback port nothing listens on, for a member started
// later. It picks below Linux's ephemeral range (32768 and up): a port the
// kernel handed out for ":0" could meanwhile be taken as the local port of
// one of the test's own outgoing connections, and the member's bind then
// failed with "address already in use" (seen once in CI, in
// TestInitialCorruptCheckRefusesADivergedMember).
func freePort(t *testing.T) int {
	t.Helper()
	for range 1000 {
		port := 20000 + rand.IntN(32768-20000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatal("no free loopback port in 20000-32767")
	return 0
}

// startSingle runs an in-process single-member server and returns a client.
// testMemberConfig is a member on free loopback ports with a temporary
// data-dir and fast raft timing.
func testMemberConfig(t *testing.T) Config {
	cfg := DefaultConfig()
	client := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	cfg.DataDir = t.TempDir()
	cfg.ListenClientURLs, cfg.AdvertiseClientURLs = []string{client}, []string{client}
	cfg.ListenPeerURLs, cfg.InitialAdvertisePeerURLs = []string{peer}, []string{peer}
	cfg.HeartbeatInterval, cfg.ElectionTimeout = 10*time.Millisecond, 100*time.Millisecond
	return cfg
}

func startSingle(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, _ := startSingleConfig(t)
	return cli
}

// startSingleConfig starts a single-member server and returns a client and
// the member's configuration (its URLs).
func startSingleConfig(t *testing.T, tweaks ...func(*Config)) (*clientv3.Client, Config) {
	t.Helper()
	cfg := testMemberConfig(t)
	for _, f := range tweaks {
		f(&cfg)
	}
	client := cfg.AdvertiseClientURLs[0]
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m, err := Start(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli, cfg
}

// startLogged starts a member with cfg (defaults applied by the caller),
// logging text to w, and a client of it; stop both with the returned func.
func startLogged(t *testing.T, cfg Config, w io.Writer) (*Member, *clientv3.Client, func()) {
	t.Helper()
	m, err := Start(cfg, slog.New(slog.NewTextHandler(w, nil)))
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.AdvertiseClientURLs, DialTimeout: 5 * time.Second})
	if err != nil {
		m.Stop()
		t.Fatal(err)
	}
	return m, cli, func() { cli.Close(); m.Stop() }
}

// Watchers that ask for prev_kv get the previous value even though the
// write path no longer reads it (mvcc's latest-version index); watchers that
// did not ask get none; put/delete prev_kv answers carry it too.
func TestWatchPrevKVThroughServer(t *testing.T) {
	cli := startSingle(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	withPrev := cli.Watch(ctx, "k", clientv3.WithPrevKV())
	plain := cli.Watch(ctx, "k")
	if err := cli.RequestProgress(ctx); err != nil { // both watches are registered once a progress arrives
		t.Fatal(err)
	}
	for _, ch := range []clientv3.WatchChan{withPrev, plain} {
		if r := <-ch; !r.IsProgressNotify() {
			t.Fatalf("want a progress notification first, got %+v", r)
		}
	}
	pr, err := cli.Put(ctx, "k", "v2", clientv3.WithPrevKV())
	if err != nil || pr.PrevKv == nil || string(pr.PrevKv.Value) != "v1" {
		t.Fatalf("put prev_kv: %v %v", pr, err)
	}
	dr, err := cli.Delete(ctx, "k", clientv3.WithPrevKV())
	if err != nil || len(dr.PrevKvs) != 1 || string(dr.PrevKvs[0].Value) != "v2" {
		t.Fatalf("delete prev_kv: %v %v", dr, err)
	}
	var got []string
	for len(got) < 2 {
		r := <-withPrev
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range r.Events {
			if ev.PrevKv == nil {
				t.Fatalf("prev_kv watcher got an event without PrevKv: %v", ev)
			}
			got = append(got, fmt.Sprintf("%s:%s<-%s", ev.Type, ev.Kv.Value, ev.PrevKv.Value))
		}
	}
	if got[0] != "PUT:v2<-v1" || got[1] != "DELETE:<-v2" {
		t.Fatalf("prev_kv events: %v", got)
	}
	n := 0
	for n < 2 {
		r := <-plain
		for _, ev := range r.Events {
			if ev.PrevKv != nil {
				t.Fatalf("plain watcher got PrevKv: %v", ev)
			}
			n++
		}
	}
}
