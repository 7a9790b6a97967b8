package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
)

func freeURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String()
}

// An even-sized initial cluster is warned about exactly once at start,
// although both the command line and server.Run see the configuration.
// Warnings are logged before the member starts serving, so a context that
// is already cancelled runs serve from start to stop with nothing left
// writing to stderr when it returns.
func TestServeEvenClusterWarnsOnce(t *testing.T) {
	client, peer, otherPeer := freeURL(t), freeURL(t), freeURL(t)
	var stderr bytes.Buffer
	a := &app{env: mapEnv(nil), environ: func() []string { return nil }, stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &stderr}
	root := newRootCmd(a)
	root.SetArgs([]string{"serve", "--name=a", "--data-dir=" + t.TempDir(),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		fmt.Sprintf("--initial-cluster=a=%s,b=%s", peer, otherPeer)})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatalf("serve: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), `"msg":"serving"`) {
		t.Fatalf("serve stopped before serving:\n%s", stderr.String())
	}
	if n := strings.Count(stderr.String(), "2 members is an even number"); n != 1 {
		t.Errorf("even-cluster warning logged %d times, want 1:\n%s", n, stderr.String())
	}
}
