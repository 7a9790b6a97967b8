package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/test/logbuf"
)

// etcd's --warning-unary-request-duration and --warning-apply-duration: a
// request or an apply slower than the threshold is logged under etcd's
// messages, with the method and the sizes but not the request's content.
func TestSlowRequestAndApplyWarnings(t *testing.T) {
	cfg := testMemberConfig(t)
	cfg.WarningUnaryRequestDuration = time.Nanosecond
	cfg.WarningApplyDuration = time.Nanosecond
	cfg.ApplyDefaults()
	var logs logbuf.Buffer
	_, cli, stop := startLogged(t, cfg, &logs)
	defer stop()
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
