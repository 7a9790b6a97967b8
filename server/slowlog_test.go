package server

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcd's --warning-unary-request-duration and --warning-apply-duration: a
// request or an apply slower than the threshold is logged under etcd's
// messages, with the method and the sizes but not the request's content.
func TestSlowRequestAndApplyWarnings(t *testing.T) {
	cfg := testMemberConfig(t)
	cfg.WarningUnaryRequestDuration = time.Nanosecond
	cfg.WarningApplyDuration = time.Nanosecond
	cfg.ApplyDefaults()
	var logs syncBuffer
	m, err := Start(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.AdvertiseClientURLs, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "secret-key", "secret-value"); err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `msg="request stats"`) && strings.Contains(l, "method=/etcdserverpb.KV/Put") {
			line = l
		}
	}
	if line == "" || !strings.Contains(line, "request-size=") || !strings.Contains(line, "response-size=") || !strings.Contains(line, "expected-duration=1ns") {
		t.Fatalf("no request stats line for the put with its sizes:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "secret") {
		t.Fatalf("the request's content was logged:\n%s", line)
	}
	if !strings.Contains(logs.String(), `msg="apply request took too long"`) {
		t.Fatalf("no slow apply warning:\n%s", logs.String())
	}
}
