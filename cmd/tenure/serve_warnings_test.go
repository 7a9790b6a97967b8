package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for a server's logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freeURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String()
}

// An even-sized initial cluster is warned about exactly once: both the
// command line and server.Run know the configuration's warnings.
func TestServeEvenClusterWarnsOnce(t *testing.T) {
	client, peer, otherPeer := freeURL(t), freeURL(t), freeURL(t)
	var stderr syncBuffer
	a := &app{env: mapEnv(nil), environ: func() []string { return nil }, stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &stderr}
	root := newRootCmd(a)
	root.SetArgs([]string{"serve", "--name=a", "--data-dir=" + t.TempDir(),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		fmt.Sprintf("--initial-cluster=a=%s,b=%s", peer, otherPeer)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(stderr.String(), `"msg":"serving"`) {
		select {
		case err := <-done:
			t.Fatalf("serve returned before serving: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no \"serving\" log line within 20s:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if n := strings.Count(stderr.String(), "2 members is an even number"); n != 1 {
		t.Errorf("even-cluster warning logged %d times, want 1:\n%s", n, stderr.String())
	}
}
