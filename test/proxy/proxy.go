// Package proxy is a fault-injecting TCP proxy for multi-process tests.
//
// A Proxy forwards one logical link (connections to a listen address are
// forwarded to a target address) and can be told at run time to
// blackhole traffic, delay it, forward only one direction, or drop all of its
// current connections. A Mux puts one listener in front of a target and
// hands each accepted connection to a per-source Proxy chosen by a Classify
// function, which gives per-link control (source → destination) with a single
// advertised address per destination.
//
// Faults are applied to bytes in flight, so a connection that carried a
// blackholed or one-way stream has lost bytes in the middle of its framing;
// Heal closes such "tainted" connections so that both ends reconnect cleanly
// (this is how a real partition ends, too: TCP connections time out).
package proxy

import (
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Direction selects which direction of a connection is forwarded.
type Direction int

const (
	Both     Direction = iota
	Forward            // client (dialer) → target only
	Backward           // target → client (dialer) only
	None               // blackhole: nothing is forwarded
)

// Proxy is one logical link. Its zero value is not usable; use New or Mux.
type Proxy struct {
	target string
	ln     net.Listener // nil when owned by a Mux

	mu       sync.Mutex
	dir      Direction
	delay    time.Duration
	jitter   time.Duration
	conns    map[*pconn]struct{}
	closed   bool
	accepted int
}

type pconn struct {
	client, server net.Conn
	tainted        bool // lost bytes while faulted
	once           sync.Once
}

func (c *pconn) close() {
	c.once.Do(func() {
		c.client.Close()
		if c.server != nil {
			c.server.Close()
		}
	})
}

func newProxy(target string) *Proxy {
	return &Proxy{target: target, conns: map[*pconn]struct{}{}}
}

// New listens on listenAddr ("127.0.0.1:0" for any port) and forwards every
// accepted connection to target.
func New(listenAddr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return nil, err
	}
	p := newProxy(target)
	p.ln = ln
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p, nil
}

// Addr is the listen address (host:port). Empty for a Mux-owned link.
func (p *Proxy) Addr() string {
	if p.ln == nil {
		return ""
	}
	return p.ln.Addr().String()
}

// Target is the address connections are forwarded to.
func (p *Proxy) Target() string { return p.target }

// Blackhole makes the link accept connections and data but forward nothing
// in either direction (packets "dropped", no RST), until Heal.
func (p *Proxy) Blackhole() { p.SetDirection(None) }

// OneWay forwards only one direction (Forward: dialer → target; Backward:
// target → dialer) until Heal.
func (p *Proxy) OneWay(d Direction) { p.SetDirection(d) }

// SetDirection sets which directions are forwarded.
func (p *Proxy) SetDirection(d Direction) {
	p.mu.Lock()
	p.dir = d
	p.mu.Unlock()
}

// Delay delays every chunk of forwarded data by d plus a uniformly random
// extra in [0, jitter). Order within a connection is preserved.
func (p *Proxy) Delay(d, jitter time.Duration) {
	p.mu.Lock()
	p.delay, p.jitter = d, jitter
	p.mu.Unlock()
}

// DropConnections closes every current connection through the link
// (both ends see the close). New connections are accepted as usual.
func (p *Proxy) DropConnections() {
	p.mu.Lock()
	cs := make([]*pconn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.close()
	}
}

// Heal removes every fault (direction, delay) and closes the connections
// that lost data while faulted.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.dir, p.delay, p.jitter = Both, 0, 0
	var tainted []*pconn
	for c := range p.conns {
		if c.tainted {
			tainted = append(tainted, c)
		}
	}
	p.mu.Unlock()
	for _, c := range tainted {
		c.close()
	}
}

// Close stops listening (if this Proxy owns a listener) and closes every
// connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	var err error
	if p.ln != nil {
		err = p.ln.Close()
	}
	p.DropConnections()
	return err
}

// Accepted is the number of connections the link has accepted.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// pass reports whether a chunk of pc's data in direction d is forwarded,
// and its delay. When the chunk is dropped, pc is marked tainted under the
// same lock, so that a Heal either sees the taint (and closes pc) or
// happened before the decision (and the chunk passes). Once the link is
// healed, a tainted pc forwards nothing more: Heal closes it after lifting
// the fault, and data forwarded in between would reach a peer that silently
// missed whole frames before it (a gRPC watch stream delivering the events
// after a gap, then resuming after them on the next connection).
func (p *Proxy) pass(pc *pconn, d Direction) (ok bool, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ok = p.dir == Both || p.dir == d
	if ok && pc.tainted && p.dir == Both {
		ok = false // healed: pc lost data and is being closed
	}
	if !ok {
		pc.tainted = true
		return false, 0
	}
	delay = p.delay
	if p.jitter > 0 {
		delay += rand.N(p.jitter)
	}
	return true, delay
}

func (p *Proxy) serve(client net.Conn) {
	pc := &pconn{client: client}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		client.Close()
		return
	}
	p.conns[pc] = struct{}{}
	p.accepted++
	p.mu.Unlock()
	defer func() {
		pc.close()
		p.mu.Lock()
		delete(p.conns, pc)
		p.mu.Unlock()
	}()

	// While blackholed, a new connection is accepted but not dialed through:
	// hold it (discarding its bytes) until the fault is lifted.
	for {
		p.mu.Lock()
		if p.dir != None {
			p.mu.Unlock()
			break
		}
		pc.tainted = true
		p.mu.Unlock()
		client.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		buf := make([]byte, 4096)
		if _, err := client.Read(buf); err != nil && !isTimeout(err) {
			return
		}
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if closed {
			return
		}
	}
	client.SetReadDeadline(time.Time{})
	server, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		return
	}
	p.mu.Lock()
	pc.server = server
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { p.pipe(pc, client, server, Forward); done <- struct{}{} }()
	go func() { p.pipe(pc, server, client, Backward); done <- struct{}{} }()
	<-done
	pc.close()
	<-done
}

type chunk struct {
	data []byte
	at   time.Time
}

// pipe copies src → dst applying the link's faults for direction d.
func (p *Proxy) pipe(pc *pconn, src, dst net.Conn, d Direction) {
	q := make(chan chunk, 1024)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for c := range q {
			if w := time.Until(c.at); w > 0 {
				time.Sleep(w)
			}
			if _, err := dst.Write(c.data); err != nil {
				pc.close()
				for range q {
				}
				return
			}
		}
	}()
	defer func() {
		close(q)
		<-writerDone
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	var last time.Time
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			ok, delay := p.pass(pc, d)
			if ok {
				at := time.Now().Add(delay)
				if at.Before(last) {
					at = last
				}
				last = at
				q <- chunk{data: append([]byte(nil), buf[:n]...), at: at}
			}
		}
		if err != nil {
			return
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Mux is one listener in front of a target whose accepted connections are
// split into per-source links by Classify. Connections whose source is not
// recognised use the link named "".
type Mux struct {
	ln       net.Listener
	target   string
	classify func(net.Conn) string

	mu    sync.Mutex
	links map[string]*Proxy
}

// NewMux listens on listenAddr and forwards to target. classify names the
// source of a connection (for example the member that dialed it); it may be nil.
func NewMux(listenAddr, target string, classify func(net.Conn) string) (*Mux, error) {
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return nil, err
	}
	m := &Mux{ln: ln, target: target, classify: classify, links: map[string]*Proxy{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				src := ""
				if m.classify != nil {
					src = m.classify(c)
				}
				m.Link(src).serve(c)
			}()
		}
	}()
	return m, nil
}

// Addr is the listen address.
func (m *Mux) Addr() string { return m.ln.Addr().String() }

// Link returns the link for connections from src, creating it if needed.
func (m *Mux) Link(src string) *Proxy {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.links[src]
	if !ok {
		p = newProxy(m.target)
		m.links[src] = p
	}
	return p
}

// Links returns every link created so far.
func (m *Mux) Links() []*Proxy {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Proxy, 0, len(m.links))
	for _, p := range m.links {
		out = append(out, p)
	}
	return out
}

// Close closes the listener and every link.
func (m *Mux) Close() error {
	err := m.ln.Close()
	for _, p := range m.Links() {
		p.Close()
	}
	return err
}
