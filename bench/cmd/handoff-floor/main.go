// Command handoff-floor measures what a lock hand-off can cost at best on
// this machine: three member processes that replicate a FIFO lock queue
// with an fdatasync per append on each member, and nothing else — no raft
// library, no storage engine, no MVCC, no state machine on the followers
// (the leader decides every grant and tells the member that holds the
// waiting call). It is not a coordination service and is unsafe by design
// (no elections, no recovery); it exists so that the lock suites' targets
// can be compared with the floor an idealised implementation reaches here,
// driven the way the harness drives Tenure and etcd: 50 clients looping
// acquire → release, each request to the next member in turn (as clientv3's
// balancer does), through a unary gRPC call — or, like the tenure.v1
// Session row, each client on one gRPC stream (-client stream) — or raw TCP.
//
//	handoff-floor -locks 1 -clients 50 -duration 8s -client grpc -peer tcp
//
// It prints cycles/s, the grant-to-grant p50/p90 (one lock) and the three
// members' CPU per cycle. -peer grpc carries the members' messages on gRPC
// streams behind a sender goroutine instead of writing TCP frames directly.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	opLock   = 1
	opUnlock = 2

	frAppend  = 10 // leader → follower: index, ops
	frAck     = 11 // follower → leader: index persisted
	frRespond = 12 // leader → member: answer client c with op
	frForward = 13 // member → leader: a client's op
)

var (
	role     = flag.String("role", "run", "run (start 3 members and drive them), member or client")
	id       = flag.Int("id", 0, "member id (0 leads)")
	basePort = flag.Int("port", 17300, "first of 9 loopback ports (peer, raw client, gRPC client ports of 3 members)")
	dir      = flag.String("dir", "", "directory for the members' log files (default: a temporary one)")
	clients  = flag.Int("clients", 50, "clients")
	locks    = flag.Int("locks", 1, "locks (client i uses lock i % locks)")
	duration = flag.Duration("duration", 8*time.Second, "how long the clients loop")
	clientAP = flag.String("client", "grpc", "client API: grpc (unary calls), stream (one gRPC stream per client, a message per call) or tcp")
	peerTr   = flag.String("peer", "tcp", "member transport: tcp (frames written directly) or grpc (streams behind a sender goroutine)")
	nosync   = flag.Bool("nosync", false, "skip fdatasync (shows what the disk costs)")
)

func port(kind, member int) string { return "127.0.0.1:" + strconv.Itoa(*basePort+kind*3+member) }

type op struct {
	kind   byte
	client uint32
	member byte
}

func frame(typ byte, payload []byte) []byte {
	b := make([]byte, 5, 5+len(payload))
	b[0] = typ
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

func readFrame(r *bufio.Reader) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	p := make([]byte, binary.BigEndian.Uint32(h[1:]))
	_, err := io.ReadFull(r, p)
	return h[0], p, err
}

// link sends frames to one peer: straight to the socket, or through a
// sender goroutine and a gRPC stream.
type link struct {
	mu   sync.Mutex
	conn net.Conn
	q    chan []byte
}

func (l *link) send(b []byte) {
	if l.q != nil {
		l.q <- b
		return
	}
	l.mu.Lock()
	_, _ = l.conn.Write(b)
	l.mu.Unlock()
}

func grpcLink(s interface{ SendMsg(any) error }) *link {
	l := &link{q: make(chan []byte, 4096)}
	go func() {
		for b := range l.q {
			_ = s.SendMsg(&wrapperspb.BytesValue{Value: b})
		}
	}()
	return l
}

// streamReader reads the frames a gRPC stream carries as one byte stream.
type streamReader struct {
	s   interface{ RecvMsg(any) error }
	buf []byte
}

func (r *streamReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		m := &wrapperspb.BytesValue{}
		if err := r.s.RecvMsg(m); err != nil {
			return 0, err
		}
		r.buf = m.Value
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

var bidi = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

type member struct {
	id      int
	log     *os.File
	off     int64
	peers   map[int]*link
	pending chan op
	acks    chan uint64
	wmu     sync.Mutex
	waiters map[uint32]chan byte
	owner   map[uint32]int64
	queue   map[uint32][]op
}

func (m *member) persist(b []byte) {
	_, _ = m.log.WriteAt(b, m.off)
	m.off += int64(len(b))
	if !*nosync {
		_ = unix.Fdatasync(int(m.log.Fd()))
	}
}

func (m *member) deliver(client uint32, o byte) {
	m.wmu.Lock()
	ch := m.waiters[client]
	delete(m.waiters, client)
	m.wmu.Unlock()
	if ch != nil {
		ch <- o
	}
}

// submit registers the client's waiter here and hands the op to the leader.
func (m *member) submit(kind byte, client uint32) byte {
	ch := make(chan byte, 1)
	m.wmu.Lock()
	m.waiters[client] = ch
	m.wmu.Unlock()
	if m.id == 0 {
		m.pending <- op{kind, client, 0}
	} else {
		p := []byte{kind, 0, 0, 0, 0, byte(m.id)}
		binary.BigEndian.PutUint32(p[1:], client)
		m.peers[0].send(frame(frForward, p))
	}
	return <-ch
}

func (m *member) respond(to byte, client uint32, o byte) {
	if int(to) == m.id {
		m.deliver(client, o)
		return
	}
	p := []byte{0, 0, 0, 0, o}
	binary.BigEndian.PutUint32(p, client)
	m.peers[int(to)].send(frame(frRespond, p))
}

// lead batches whatever ops are pending, sends them to both followers,
// persists them, waits for one follower's ack, then applies them.
func (m *member) lead() {
	for idx := uint64(1); ; idx++ {
		batch := []op{<-m.pending}
	drain:
		for {
			select {
			case o := <-m.pending:
				batch = append(batch, o)
			default:
				break drain
			}
		}
		p := binary.BigEndian.AppendUint64(nil, idx)
		for _, o := range batch {
			p = append(p, o.kind)
			p = binary.BigEndian.AppendUint32(p, o.client)
			p = append(p, o.member)
		}
		f := frame(frAppend, p)
		for _, l := range m.peers {
			l.send(f)
		}
		m.persist(p)
		for a := <-m.acks; a < idx; a = <-m.acks {
		}
		for _, o := range batch {
			lk := o.client % uint32(*locks)
			own, held := m.owner[lk]
			switch o.kind {
			case opLock:
				if !held || own < 0 {
					m.owner[lk] = int64(o.client)
					m.respond(o.member, o.client, opLock)
				} else {
					m.queue[lk] = append(m.queue[lk], o)
				}
			case opUnlock:
				if held && own == int64(o.client) {
					m.owner[lk] = -1
					if q := m.queue[lk]; len(q) > 0 {
						m.owner[lk] = int64(q[0].client)
						m.queue[lk] = q[1:]
						m.respond(q[0].member, q[0].client, opLock)
					}
				}
				m.respond(o.member, o.client, opUnlock)
			}
		}
	}
}

func (m *member) readLeaderFrames(r *bufio.Reader) {
	for {
		t, p, err := readFrame(r)
		if err != nil {
			os.Exit(0) // a peer went away: the run is over
		}
		switch t {
		case frAck:
			m.acks <- binary.BigEndian.Uint64(p)
		case frForward:
			m.pending <- op{p[0], binary.BigEndian.Uint32(p[1:]), p[5]}
		}
	}
}

func (m *member) readFollowerFrames(r *bufio.Reader, l *link) {
	for {
		t, p, err := readFrame(r)
		if err != nil {
			os.Exit(0) // the leader went away: the run is over
		}
		switch t {
		case frAppend:
			m.persist(p)
			l.send(frame(frAck, p[:8]))
		case frRespond:
			m.deliver(binary.BigEndian.Uint32(p), p[4])
		}
	}
}

func runMember() {
	f, err := os.OpenFile(filepath.Join(*dir, fmt.Sprintf("log-%d", *id)), os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	_ = unix.Fallocate(int(f.Fd()), 0, 0, 256<<20) // as Tenure's and etcd's logs are
	_ = f.Sync()
	m := &member{id: *id, log: f, peers: map[int]*link{}, pending: make(chan op, 4096), acks: make(chan uint64, 64),
		waiters: map[uint32]chan byte{}, owner: map[uint32]int64{}, queue: map[uint32][]op{}}
	if m.id == 0 {
		type accepted struct {
			id int
			r  *bufio.Reader
			l  *link
		}
		acc := make(chan accepted)
		ln, err := net.Listen("tcp", port(0, 0))
		if err != nil {
			log.Fatal(err)
		}
		if *peerTr == "grpc" {
			s := grpc.NewServer()
			s.RegisterService(&grpc.ServiceDesc{ServiceName: "floor.Peer", HandlerType: (*any)(nil), Streams: []grpc.StreamDesc{{
				StreamName: "P", ServerStreams: true, ClientStreams: true,
				Handler: func(_ any, st grpc.ServerStream) error {
					r := bufio.NewReader(&streamReader{s: st})
					b, _ := r.ReadByte()
					acc <- accepted{int(b), r, grpcLink(st)}
					select {}
				}}}}, m)
			go func() { _ = s.Serve(ln) }()
		} else {
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					r := bufio.NewReader(c)
					b, _ := r.ReadByte()
					acc <- accepted{int(b), r, &link{conn: c}}
				}
			}()
		}
		for len(m.peers) < 2 {
			a := <-acc
			m.peers[a.id] = a.l
			go m.readLeaderFrames(a.r)
		}
		go m.lead()
	} else {
		var r *bufio.Reader
		var l *link
		if *peerTr == "grpc" {
			cc, err := grpc.NewClient(port(0, 0), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				log.Fatal(err)
			}
			st, err := cc.NewStream(context.Background(), bidi, "/floor.Peer/P", grpc.WaitForReady(true))
			if err != nil {
				log.Fatal(err)
			}
			_ = st.SendMsg(&wrapperspb.BytesValue{Value: []byte{byte(m.id)}})
			r, l = bufio.NewReader(&streamReader{s: st}), grpcLink(st)
		} else {
			var c net.Conn
			for c == nil {
				if c, err = net.Dial("tcp", port(0, 0)); err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
			_, _ = c.Write([]byte{byte(m.id)})
			r, l = bufio.NewReader(c), &link{conn: c}
		}
		m.peers[0] = l
		go m.readFollowerFrames(r, l)
	}
	// Clients reach every member over raw TCP (-client tcp) and gRPC.
	go func() {
		ln, err := net.Listen("tcp", port(1, m.id))
		if err != nil {
			log.Fatal(err)
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				r := bufio.NewReader(c)
				var b [5]byte
				for {
					if _, err := io.ReadFull(r, b[:]); err != nil {
						return
					}
					_, _ = c.Write([]byte{m.submit(b[0], binary.BigEndian.Uint32(b[1:]))})
				}
			}()
		}
	}()
	s := grpc.NewServer()
	s.RegisterService(&grpc.ServiceDesc{ServiceName: "floor.Lock", HandlerType: (*any)(nil), Methods: []grpc.MethodDesc{{
		MethodName: "Do",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := &wrapperspb.BytesValue{}
			if err := dec(in); err != nil {
				return nil, err
			}
			return &wrapperspb.BytesValue{Value: []byte{m.submit(in.Value[0], binary.BigEndian.Uint32(in.Value[1:]))}}, nil
		}}}, Streams: []grpc.StreamDesc{{StreamName: "S", ServerStreams: true, ClientStreams: true,
		Handler: func(_ any, st grpc.ServerStream) error {
			for { // one call at a time per stream: the clients loop serially
				in := &wrapperspb.BytesValue{}
				if err := st.RecvMsg(in); err != nil {
					return nil
				}
				out := m.submit(in.Value[0], binary.BigEndian.Uint32(in.Value[1:]))
				if err := st.SendMsg(&wrapperspb.BytesValue{Value: []byte{out}}); err != nil {
					return nil
				}
			}
		}}}}, m)
	ln, err := net.Listen("tcp", port(2, m.id))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ready")
	_ = s.Serve(ln)
}

// runClient loops acquire → release on every client, each request to the
// next member in turn, and prints the rates.
func runClient() (cycles int64, handoffs []time.Duration) {
	call := make([]func(b []byte) byte, *clients)
	if *clientAP == "tcp" {
		for i := range call {
			var conns []net.Conn
			var rs []*bufio.Reader
			for mb := 0; mb < 3; mb++ {
				c, err := net.Dial("tcp", port(1, mb))
				if err != nil {
					log.Fatal(err)
				}
				conns, rs = append(conns, c), append(rs, bufio.NewReader(c))
			}
			k := i
			call[i] = func(b []byte) byte {
				k++
				_, _ = conns[k%3].Write(b)
				var r [1]byte
				_, _ = io.ReadFull(rs[k%3], r[:])
				return r[0]
			}
		}
	} else {
		// Clients share connections, 10 to one round-robin gRPC client
		// over the 3 members, as the harness's clientv3 clients do.
		var ccs []*grpc.ClientConn
		for j := 0; j < (*clients+9)/10; j++ {
			r := manual.NewBuilderWithScheme(fmt.Sprintf("floor%d", j))
			var st resolver.State
			for mb := 0; mb < 3; mb++ {
				st.Addresses = append(st.Addresses, resolver.Address{Addr: port(2, mb)})
			}
			r.InitialState(st)
			cc, err := grpc.NewClient(r.Scheme()+":///members", grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`))
			if err != nil {
				log.Fatal(err)
			}
			ccs = append(ccs, cc)
		}
		for i := range call {
			cc := ccs[i%len(ccs)]
			if *clientAP == "stream" {
				st, err := cc.NewStream(context.Background(), bidi, "/floor.Lock/S")
				if err != nil {
					log.Fatal(err)
				}
				call[i] = func(b []byte) byte {
					out := &wrapperspb.BytesValue{}
					if err := st.SendMsg(&wrapperspb.BytesValue{Value: b}); err != nil {
						log.Fatal(err)
					}
					if err := st.RecvMsg(out); err != nil {
						log.Fatal(err)
					}
					return out.Value[0]
				}
				continue
			}
			call[i] = func(b []byte) byte {
				out := &wrapperspb.BytesValue{}
				if err := cc.Invoke(context.Background(), "/floor.Lock/Do", &wrapperspb.BytesValue{Value: b}, out); err != nil {
					log.Fatal(err)
				}
				return out.Value[0]
			}
		}
	}
	var n atomic.Int64
	var last atomic.Int64
	var mu sync.Mutex
	end := time.Now().Add(*duration)
	var wg sync.WaitGroup
	for i := range call {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req := func(o byte) {
				b := []byte{o, 0, 0, 0, 0}
				binary.BigEndian.PutUint32(b[1:], uint32(i))
				call[i](b)
			}
			for time.Now().Before(end) {
				req(opLock)
				now := time.Now().UnixNano()
				if prev := last.Swap(now); prev != 0 && *locks == 1 {
					mu.Lock()
					handoffs = append(handoffs, time.Duration(now-prev))
					mu.Unlock()
				}
				n.Add(1)
				req(opUnlock)
			}
		}(i)
	}
	wg.Wait()
	return n.Load(), handoffs
}

func cpuTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

func run() {
	if *dir == "" {
		d, err := os.MkdirTemp("", "handoff-floor")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	self, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	}()
	for i := 0; i < 3; i++ {
		cmd := exec.Command(self, "-role", "member", "-id", strconv.Itoa(i), "-port", strconv.Itoa(*basePort), "-dir", *dir,
			"-locks", strconv.Itoa(*locks), "-peer", *peerTr, "-nosync="+strconv.FormatBool(*nosync))
		out, err := cmd.StdoutPipe()
		if err != nil {
			log.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			log.Fatal(err)
		}
		procs = append(procs, cmd)
		go func(r io.Reader) { _, _ = io.Copy(io.Discard, r) }(bufio.NewReader(out))
	}
	time.Sleep(500 * time.Millisecond) // the members connect
	var before int64
	for _, p := range procs {
		before += cpuTicks(p.Process.Pid)
	}
	cycles, handoffs := runClient()
	var after int64
	for _, p := range procs {
		after += cpuTicks(p.Process.Pid)
	}
	rate := float64(cycles) / duration.Seconds()
	fmt.Printf("client=%s peer=%s locks=%d clients=%d sync=%v: %.0f cycles/s, members' CPU %.0f µs per cycle",
		*clientAP, *peerTr, *locks, *clients, !*nosync, rate, float64(after-before)*1e4/float64(cycles))
	if len(handoffs) > 0 {
		sort.Slice(handoffs, func(i, j int) bool { return handoffs[i] < handoffs[j] })
		fmt.Printf(", hand-off p50 %v p90 %v", handoffs[len(handoffs)/2].Round(time.Microsecond), handoffs[len(handoffs)*9/10].Round(time.Microsecond))
	}
	fmt.Println()
}

func main() {
	flag.Parse()
	switch *role {
	case "member":
		runMember()
	case "client":
		c, _ := runClient()
		fmt.Println(c)
	default:
		run()
	}
}
