package server

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// Stop returns while clients hold connections that sent nothing yet: the
// client port's cmux, which waits for a connection's first bytes with no
// deadline, would otherwise hold Stop (and SIGTERM) until they went away.
// A connection that did send a request is closed as well.
func TestStopDoesNotWaitForSilentConnections(t *testing.T) {
	cfg := testMemberConfig(t)
	cfg.ApplyDefaults()
	m, cli, _ := startLogged(t, cfg, io.Discard)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	silent := dialURL(t, cfg.AdvertiseClientURLs[0])
	defer silent.Close()
	stopped := make(chan struct{})
	go func() { m.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("Stop still waiting with a silent client connection open")
	}
	_ = silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := silent.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); err == nil || ok && ne.Timeout() {
		t.Fatalf("the silent connection is still open after Stop (read: %v)", err)
	}
}
