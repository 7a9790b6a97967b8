package server

import (
	"net"
	"sync"
)

// trackingListener remembers the connections it accepted that are still
// open, so that Member.Stop can close the ones no server took over. The
// client port's cmux reads a new connection's first bytes with no deadline
// to choose gRPC or HTTP, and its Serve waits for every such read when the
// port closes: one client that connected and sent nothing (a gRPC client's
// idle subconnection, a TCP health check) held Stop, and so SIGTERM,
// until it went away. It wraps the TCP listener under TLS, so the
// connections servers see keep their types.
type trackingListener struct {
	net.Listener
	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool
}

func trackConns(l net.Listener) *trackingListener {
	return &trackingListener{Listener: l, conns: map[*trackedConn]struct{}{}}
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, l: l}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = c.Close()
		return nil, net.ErrClosed
	}
	l.conns[tc] = struct{}{}
	return tc, nil
}

// closeConns closes the listener and every connection it accepted that is
// still open, and refuses any accepted later.
func (l *trackingListener) closeConns() {
	_ = l.Listener.Close()
	l.mu.Lock()
	l.closed = true
	conns := l.conns
	l.conns = map[*trackedConn]struct{}{}
	l.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
}

type trackedConn struct {
	net.Conn
	l    *trackingListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
