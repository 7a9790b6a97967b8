package cluster

import (
	"bufio"
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// pingCountingListener hands the server its connections and parses a copy of
// what each client sends as HTTP/2 frames, counting the PINGs that are not
// acknowledgements (gRPC's BDP probes; keepalive is off in these clients).
type pingCountingListener struct {
	net.Listener
	pings atomic.Int64
	wg    sync.WaitGroup
}

type teeConn struct {
	net.Conn
	w *io.PipeWriter
}

func (c *teeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		_, _ = c.w.Write(p[:n])
	}
	if err != nil {
		c.w.CloseWithError(err)
	}
	return n, err
}

func (l *pingCountingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	r, w := io.Pipe()
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		br := bufio.NewReader(r)
		if _, err := io.ReadFull(br, make([]byte, len(http2.ClientPreface))); err != nil {
			return
		}
		fr := http2.NewFramer(nil, br)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				_, _ = io.Copy(io.Discard, r) // keep the server's reads flowing
				return
			}
			if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
				l.pings.Add(1)
			}
		}
	}()
	return &teeConn{Conn: c, w: w}, nil
}

// pingsFor makes calls unary round trips through a client built from
// ClientConfig(…, window) and returns how many PINGs the server received.
func pingsFor(t *testing.T, window int32, calls int) int64 {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &pingCountingListener{Listener: inner}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(l) }()

	cli, err := clientv3.New(ClientConfig([]string{inner.Addr().String()}, window))
	if err != nil {
		t.Fatal(err)
	}
	hc := healthpb.NewHealthClient(cli.ActiveConnection())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < calls; i++ {
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	cli.Close()
	srv.Stop()
	l.wg.Wait()
	return l.pings.Load()
}

// TestClientConfigWindowStopsBDPPings: with clientv3's default dynamic
// windows the client pings the server on most responses (gRPC's BDP
// estimation); with a fixed window (-client-window) it never does.
func TestClientConfigWindowStopsBDPPings(t *testing.T) {
	const calls = 200
	dynamic := pingsFor(t, 0, calls)
	fixed := pingsFor(t, FixedClientWindowBytes, calls)
	t.Logf("PINGs over %d calls: %d with dynamic windows, %d with a fixed %d-byte window", calls, dynamic, fixed, FixedClientWindowBytes)
	if dynamic < calls/4 {
		t.Errorf("dynamic windows: %d PINGs over %d calls; the counter or gRPC's BDP estimation changed", dynamic, calls)
	}
	if fixed != 0 {
		t.Errorf("fixed window: %d PINGs over %d calls, want none", fixed, calls)
	}
}
