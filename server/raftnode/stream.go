package raftnode

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// Raft message streams.
//
// Raft messages travel on connections of their own, one per ordered pair of
// members (the dialer only writes, the acceptor only reads), next to the
// gRPC peer server on the peer port: ServePeerListener routes a connection
// that opens with streamMagic here and everything else to gRPC. Snapshots
// and the Members RPC stay on gRPC; they are rare and large.
//
// Why not a gRPC stream: every raft message then crossed two goroutines on
// the way out (the peer sender, then gRPC's HTTP/2 writer, which also
// yields once per small batch hoping for more) and two on the way in
// (gRPC's reader, then the stream handler). On a small machine each
// crossing can wait for a sleeping CPU, and raft messages are the critical
// path of every commit. Here the Ready loop writes a peer's frame to the
// socket itself when nothing is queued for that peer (one non-blocking
// write; what the socket does not take goes to a writer goroutine), and
// the acceptor's reader steps what it decodes straight into raft.
//
// Wire format, after TLS when the peer URL is https:
//
//	dialer → acceptor  streamMagic, then cluster ID, sender ID, receiver ID (uint64 big-endian each)
//	acceptor → dialer  one byte: 0 = accepted; 1 = refused, or 2 = refused because the dialer
//	                   was removed from the cluster; after 1 or 2, a uint16 big-endian length and the reason
//	dialer → acceptor  frames: a uint32 big-endian length, then a message batch (encodeBatch's format)
//
// The acceptor writes nothing after its answer; the dialer reads only to
// learn that the connection ended.

const (
	streamMagic = "TNRAFT1\n"
	// streamHelloLen: magic + cluster ID + from + to.
	streamHelloLen = len(streamMagic) + 24
	// streamHandshakeTimeout bounds dialing, TLS and the hello exchange.
	streamHandshakeTimeout = 5 * time.Second
	// streamWriteTimeout bounds one blocking write of the writer goroutine:
	// a peer that takes nothing for this long is treated as gone.
	streamWriteTimeout = 10 * time.Second
	// streamMaxPending bounds the bytes queued for one peer behind a write
	// in progress; beyond it frames are dropped (raft resends what matters)
	// and the peer is reported unreachable.
	streamMaxPending = 32 << 20
)

var (
	errStreamRefused = errors.New("raftnode: peer refused the raft stream")
	// errRemovedByPeer: the peer refused the stream because it has applied
	// this member's removal (a refusal like any other, told apart).
	errRemovedByPeer = fmt.Errorf("%w: this member was removed from the cluster", errStreamRefused)
)

// Hello answers (the acceptor's first byte).
const (
	helloAccepted = 0
	helloRefused  = 1
	helloRemoved  = 2
)

// encodeFrames appends msgs to dst as frames of at most budget bytes of
// batch each (a single larger message travels alone in its own frame).
func encodeFrames(dst []byte, msgs []*raftpb.Message, budget int) []byte {
	opts := proto.MarshalOptions{UseCachedSize: true}
	start := -1 // offset of the open frame's length field
	for _, m := range msgs {
		sz := proto.Size(m) // caches the sizes MarshalAppend then uses
		need := binary.MaxVarintLen64 + sz
		if start >= 0 && len(dst)-start-4+need > budget {
			binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
			start = -1
		}
		if start < 0 {
			start = len(dst)
			dst = append(dst, 0, 0, 0, 0)
		}
		dst = binary.AppendUvarint(dst, uint64(sz))
		var err error
		if dst, err = opts.MarshalAppend(dst, m); err != nil {
			// A raft message always encodes. If one ever does not, drop
			// this message's frame rather than send a truncated one.
			return dst[:start]
		}
	}
	if start >= 0 {
		binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	}
	return dst
}

// writeNow makes one non-blocking write of b to the socket behind rc and
// reports how much it took; a full socket buffer is not an error.
func writeNow(rc syscall.RawConn, b []byte) (int, error) {
	var n int
	var werr error
	err := rc.Write(func(fd uintptr) bool {
		n, werr = unix.Write(int(fd), b)
		return true // never wait for the socket to drain: the writer goroutine does
	})
	if err != nil {
		return 0, err
	}
	if n < 0 {
		n = 0
	}
	if errors.Is(werr, unix.EAGAIN) || errors.Is(werr, unix.EINTR) {
		werr = nil
	}
	return n, werr
}

// streamPeer is the sending side of the raft stream to one peer: a dial
// loop that keeps one connection up, and the frames queued on it.
type streamPeer struct {
	t      *PeerTransport
	id     uint64
	urls   []string
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	conn    net.Conn        // nil while not connected
	raw     syscall.RawConn // conn's socket for writeNow; nil for TLS
	pending []byte          // frames behind a write in progress, for the writer goroutine
	spare   []byte          // the writer's previous buffer, reused for pending
	writing bool            // the writer goroutine owns writes until pending drains
	direct  bool            // a sender is writing pending itself (send)
	wake    chan struct{}   // the current connection's writer: pending has data
	down    bool            // unreachable already reported since the last connection
	full    bool            // the backlog overflowed and was logged; cleared when it drains
	since   time.Time       // when conn came up; zero while not connected
}

// send writes or queues one or more frames; it never blocks on the peer.
//
// The first caller to find the stream idle writes itself, outside the
// lock, then also writes whatever other callers queued meanwhile (a
// follower forwarding many clients' proposals at once then makes one
// write for all of them); a socket that takes less than offered hands the
// rest to the writer goroutine, which alone may block.
func (p *streamPeer) send(frames []byte) {
	if len(frames) == 0 {
		return
	}
	p.mu.Lock()
	switch {
	case p.conn == nil:
		report := !p.down
		p.down = true
		p.mu.Unlock()
		if report {
			p.t.reportUnreachable(p.id)
		}
		return
	case p.writing || p.direct:
		if len(p.pending)+len(frames) > streamMaxPending {
			warn := !p.full
			p.full = true
			p.mu.Unlock()
			if warn {
				p.t.log.Warn("raft stream backlog full; dropping messages", "peer", fmt.Sprintf("%x", p.id), "bytes", streamMaxPending)
			}
			p.t.reportUnreachable(p.id)
			return
		}
		p.pending = append(p.pending, frames...)
		p.mu.Unlock()
		return
	case p.raw == nil: // TLS: only the writer goroutine writes
		p.pending = append(p.pending, frames...)
		p.startWriterLocked()
		p.mu.Unlock()
		return
	}
	conn, raw := p.conn, p.raw
	p.direct = true
	p.mu.Unlock()
	if h := p.t.directWriteHook; h != nil {
		h()
	}
	buf := frames // the caller's until we return; then p.spare's
	for {
		n, err := writeNow(raw, buf)
		p.t.writes.Add(1)
		p.mu.Lock()
		switch {
		case p.conn != conn:
			// Broken meanwhile (breakLocked cleared the flags); the state
			// now belongs to the next connection, if any.
			p.mu.Unlock()
			return
		case err != nil:
			p.direct = false
			p.breakLocked(err)
			p.mu.Unlock()
			return
		case n < len(buf): // the socket is full: the rest goes first
			rest := append(p.spare[:0], buf[n:]...)
			p.spare = nil
			p.pending, rest = append(rest, p.pending...), p.pending
			if &buf[0] != &frames[0] {
				p.spare = buf[:0]
			} else if rest != nil {
				p.spare = rest[:0]
			}
			p.direct = false
			p.startWriterLocked()
			p.mu.Unlock()
			return
		case len(p.pending) == 0:
			if &buf[0] != &frames[0] {
				p.spare = buf[:0]
			}
			p.direct = false
			p.mu.Unlock()
			return
		}
		next := p.pending
		if &buf[0] != &frames[0] {
			p.pending = buf[:0]
		} else {
			p.pending = p.spare[:0]
			p.spare = nil
		}
		buf = next
		p.mu.Unlock()
	}
}

// startWriterLocked hands pending to the writer goroutine. p.mu is held.
func (p *streamPeer) startWriterLocked() {
	p.writing = true
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// breakLocked drops the current connection; the dial loop notices and
// redials. p.mu is held.
func (p *streamPeer) breakLocked(err error) {
	if p.conn == nil {
		return
	}
	p.t.log.Debug("raft stream broken", "peer", fmt.Sprintf("%x", p.id), "err", err)
	_ = p.conn.Close()
	p.conn, p.raw, p.pending, p.writing, p.direct = nil, nil, nil, false, false
	p.since = time.Time{}
}

// writeLoop drains pending for one connection with blocking writes.
func (p *streamPeer) writeLoop(conn net.Conn, wake <-chan struct{}) {
	defer p.t.wg.Done()
	var buf []byte
	for {
		select {
		case <-wake:
		case <-p.ctx.Done():
			return
		}
		for {
			p.mu.Lock()
			if p.conn != conn {
				p.mu.Unlock()
				return
			}
			if len(p.pending) == 0 {
				p.writing, p.full = false, false
				p.mu.Unlock()
				break
			}
			buf, p.pending = p.pending, p.spare[:0]
			p.mu.Unlock()
			_ = conn.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
			_, err := conn.Write(buf)
			p.t.writes.Add(1)
			// writeNow bypasses deadlines but fails once one has passed
			_ = conn.SetWriteDeadline(time.Time{})
			p.mu.Lock()
			if err != nil {
				if p.conn == conn {
					p.breakLocked(err)
				}
				p.mu.Unlock()
				return
			}
			p.spare = buf
			p.mu.Unlock()
		}
	}
}

// run keeps a connection to the peer up until the peer is removed or the
// transport stops.
func (p *streamPeer) run() {
	defer p.t.wg.Done()
	backoff := initialBackoff
	for p.ctx.Err() == nil {
		conn, err := p.dial()
		if err != nil {
			if errors.Is(err, errRemovedByPeer) {
				p.t.reportRemoved(p.id)
			} else if errors.Is(err, errStreamRefused) {
				p.t.log.Warn("peer refused the raft stream", "peer", fmt.Sprintf("%x", p.id), "err", err)
			} else {
				p.t.log.Debug("dialing peer failed", "peer", fmt.Sprintf("%x", p.id), "err", err)
			}
			p.markDown()
			tm := time.NewTimer(backoff)
			select {
			case <-tm.C:
			case <-p.ctx.Done():
				tm.Stop()
				return
			}
			backoff = min(backoff*2, maxBackoff)
			continue
		}
		backoff = initialBackoff
		wake := make(chan struct{}, 1)
		p.mu.Lock()
		p.conn, p.wake, p.down, p.pending, p.writing, p.direct = conn, wake, false, nil, false, false
		p.since = time.Now()
		if tc, ok := conn.(*net.TCPConn); ok {
			p.raw, _ = tc.SyscallConn()
		}
		p.mu.Unlock()
		p.t.wg.Add(1)
		go p.writeLoop(conn, wake)
		stop := context.AfterFunc(p.ctx, func() { _ = conn.Close() })
		// The acceptor never writes: a read returns when the connection ends.
		var b [1]byte
		_, err = conn.Read(b[:])
		stop()
		p.mu.Lock()
		if p.conn == conn {
			p.breakLocked(err)
		}
		p.mu.Unlock()
		_ = conn.Close()
		p.markDown()
	}
}

func (p *streamPeer) markDown() {
	p.mu.Lock()
	report := !p.down
	p.down = true
	p.mu.Unlock()
	if report && p.ctx.Err() == nil {
		p.t.reportUnreachable(p.id)
	}
}

// dial connects to the peer (each URL in turn), runs TLS when the
// transport has a client TLS configuration, and exchanges the hello.
func (p *streamPeer) dial() (net.Conn, error) {
	var errs []error
	for _, u := range p.urls {
		conn, err := p.dialURL(u)
		if err == nil {
			return conn, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", u, err))
		if errors.Is(err, errStreamRefused) {
			break
		}
	}
	if len(errs) == 0 {
		return nil, errors.New("raftnode: peer has no URLs")
	}
	return nil, errors.Join(errs...)
}

func (p *streamPeer) dialURL(u string) (net.Conn, error) {
	addr := target(u)
	ctx, cancel := context.WithTimeout(p.ctx, streamHandshakeTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	if cfg := p.t.cfg.TLS; cfg != nil {
		cfg = cfg.Clone()
		if cfg.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				cfg.ServerName = host
			}
		}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return nil, err
		}
		conn = tc
	}
	hello := make([]byte, 0, streamHelloLen)
	hello = append(hello, streamMagic...)
	hello = binary.BigEndian.AppendUint64(hello, p.t.h.ClusterID())
	hello = binary.BigEndian.AppendUint64(hello, p.t.id)
	hello = binary.BigEndian.AppendUint64(hello, p.id)
	if _, err := conn.Write(hello); err != nil {
		_ = conn.Close()
		return nil, err
	}
	var status [1]byte
	if _, err := io.ReadFull(conn, status[:]); err != nil {
		_ = conn.Close()
		return nil, err
	}
	if status[0] != helloAccepted {
		var l [2]byte
		reason := "(no reason given)"
		if _, err := io.ReadFull(conn, l[:]); err == nil {
			r := make([]byte, binary.BigEndian.Uint16(l[:]))
			if _, err := io.ReadFull(conn, r); err == nil {
				reason = string(r)
			}
		}
		_ = conn.Close()
		if status[0] == helloRemoved {
			return nil, errRemovedByPeer
		}
		return nil, fmt.Errorf("%w: %s", errStreamRefused, reason)
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

// serveStreams accepts raft streams on l (a listener that only yields
// connections opening with streamMagic, see ServePeerListener) until l is
// closed.
func (t *PeerTransport) serveStreams(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		t.mu.Lock()
		select {
		case <-t.stopc:
			t.mu.Unlock()
			_ = c.Close()
			continue
		default:
		}
		t.accepted[c] = 0
		t.wg.Add(1)
		t.mu.Unlock()
		go t.serveStream(c)
	}
}

// refuse answers a hello with the reason the stream is not accepted.
func refuse(c net.Conn, reason string) { refuseWith(c, helloRefused, reason) }

func refuseWith(c net.Conn, status byte, reason string) {
	if len(reason) > 1024 {
		reason = reason[:1024]
	}
	b := []byte{status, byte(len(reason) >> 8), byte(len(reason))}
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write(append(b, reason...))
}

func (t *PeerTransport) serveStream(c net.Conn) {
	defer t.wg.Done()
	defer func() {
		_ = c.Close()
		t.mu.Lock()
		delete(t.accepted, c)
		t.mu.Unlock()
	}()
	_ = c.SetReadDeadline(time.Now().Add(streamHandshakeTimeout))
	br := bufio.NewReaderSize(c, 64<<10)
	hello := make([]byte, streamHelloLen)
	if _, err := io.ReadFull(br, hello); err != nil || string(hello[:len(streamMagic)]) != streamMagic {
		return
	}
	theirs := binary.BigEndian.Uint64(hello[len(streamMagic):])
	from := binary.BigEndian.Uint64(hello[len(streamMagic)+8:])
	to := binary.BigEndian.Uint64(hello[len(streamMagic)+16:])
	var h Handler
	select {
	case <-t.ready:
		h = t.h
	case <-t.stopc:
		refuse(c, "raft transport stopped")
		return
	case <-time.After(streamHandshakeTimeout):
		refuse(c, "raft transport not started")
		return
	}
	if ours := h.ClusterID(); ours != 0 && theirs != 0 && ours != theirs {
		refuse(c, fmt.Sprintf("cluster ID mismatch: ours %x, theirs %x", ours, theirs))
		return
	}
	if to != t.id {
		refuse(c, fmt.Sprintf("member ID mismatch: this is member %x, the sender dialed %x", t.id, to))
		return
	}
	// Recorded before the removal check: RemovePeer, which runs after the
	// removal is in the store, then finds this stream if the check missed it.
	t.mu.Lock()
	if _, open := t.accepted[c]; open {
		t.accepted[c] = from
	}
	t.mu.Unlock()
	if h.IsRemoved(from) {
		refuseWith(c, helloRemoved, fmt.Sprintf("member %x was removed from the cluster", from))
		return
	}
	_ = c.SetWriteDeadline(time.Now().Add(streamHandshakeTimeout))
	if _, err := c.Write([]byte{0}); err != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})
	var hdr [4]byte
	var buf []byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[:]))
		if n == 0 || n > t.maxFrame() {
			t.log.Warn("raft stream frame out of bounds; closing", "peer", fmt.Sprintf("%x", from), "bytes", n, "max", t.maxFrame())
			return
		}
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return
		}
		msgs, err := decodeBatch(buf) // copies: buf is reused
		if err != nil {
			t.log.Warn("corrupt raft message batch; closing the stream", "peer", fmt.Sprintf("%x", from), "err", err)
			return
		}
		t.batchesRecv.Add(1)
		for _, m := range msgs {
			_ = h.Process(t.ctx, m)
		}
	}
}
