// Package cluster runs a real multi-process cluster of Tenure (or, to
// validate the harness and the tests themselves, real etcd) for end-to-end,
// fault-injection and chaos tests.
//
// Network model (Options.Proxied): every member m has a private peer
// listener (--listen-peer-urls) that nobody dials directly. Its advertised
// peer URL (--initial-advertise-peer-urls, --initial-cluster) is a proxy.Mux
// in front of that listener. The Mux identifies which member dialed each
// connection (on Linux, by finding the owner of the dialing socket in /proc)
// and hands it to a per-source link, so PeerLink(i, j) — the link that
// carries the connections member i opens to member j — can be faulted on its
// own. A TCP connection carries both directions of one stream, so faulting
// link (i,j) cuts what i sends to j over its own connections and the answers
// on them; raft messages j→i travel over link (j,i). Partition(groups...)
// faults both links of every cross-group pair; OneWayPartition(i, j) faults
// only (i,j). Client traffic likewise goes through ClientProxy(i), which is
// the advertised client URL and what Endpoints returns.
package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tenure-io/tenure/test/proxy"
)

// Binary selects the server under test.
type Binary int

const (
	Tenure Binary = iota // ./cmd/tenure, run as "tenure serve"
	Etcd                 // real etcd, harness validation only
)

func (b Binary) String() string {
	if b == Etcd {
		return "etcd"
	}
	return "tenure"
}

// Options configures Start. Zero values take the defaults noted.
type Options struct {
	Size          int      // members; default 3
	Binary        Binary   // default Tenure
	Proxied       bool     // put fault-injecting proxies on every peer and client link
	HeartbeatMs   int      // default 50
	ElectionMs    int      // default 500
	SnapshotCount int      // 0: server default
	ExtraArgs     []string // appended to every member's command line
	Env           []string // extra environment for every member ("K=V")
	// MemberEnv adds environment for one member (index → "K=V" list), e.g.
	// {0: {"TENURE_FAILPOINTS=raft-after-save=3*exit"}}. It applies to the
	// first start only; Restart takes the env explicitly (RestartWithEnv).
	MemberEnv    map[int][]string
	StartTimeout time.Duration // default 30s
	LogLevel     string        // default "info"
}

// Member is one server process of a cluster.
type Member struct {
	Index   int
	Name    string
	DataDir string
	LogPath string

	peerListen, clientListen string // private host:port the process binds
	peerAdv, clientAdv       string // advertised host:port (proxies when Proxied)

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	exit    int // valid after done is closed
	running bool
	env     []string
	logFile *os.File
	// joined: the member was replaced (Replace) and starts with
	// --initial-cluster-state existing.
	joined bool
}

// TB is the part of testing.TB the harness uses. *testing.T and
// *testing.B satisfy it; a program (the chaos runner) can supply its own,
// whose Fatal ends the run after its Cleanup functions have run.
type TB interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Failed() bool
	Cleanup(func())
	TempDir() string
}

// Cluster is a running cluster. Methods are safe for concurrent use.
type Cluster struct {
	t       TB
	Opts    Options
	Members []*Member
	bin     string
	token   string

	peerMux  []*proxy.Mux
	clientPx []*proxy.Proxy

	mu        sync.Mutex
	clients   map[int]*clientv3.Client
	extra     []*clientv3.Client
	allClient *clientv3.Client
}

// Start lays out and starts a cluster, and waits until every member serves
// a linearizable read and a leader exists. Everything is torn down in
// t.Cleanup; when the test failed, each member's log path and last 50 lines
// are printed.
func Start(t TB, opts Options) *Cluster {
	t.Helper()
	if opts.Size == 0 {
		opts.Size = 3
	}
	if opts.HeartbeatMs == 0 {
		opts.HeartbeatMs = 50
	}
	if opts.ElectionMs == 0 {
		opts.ElectionMs = 500
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 30 * time.Second
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "info"
	}
	c := &Cluster{t: t, Opts: opts, clients: map[int]*clientv3.Client{},
		token: fmt.Sprintf("tenure-test-%d", time.Now().UnixNano())}
	switch opts.Binary {
	case Etcd:
		c.bin = EtcdBinary(t)
	default:
		c.bin = TenureBinary(t)
	}

	base := t.TempDir()
	nports := 2 * opts.Size
	if opts.Proxied {
		nports = 4 * opts.Size
	}
	ports := FreeAddrs(t, nports)
	for i := 0; i < opts.Size; i++ {
		m := &Member{
			Index:        i,
			Name:         fmt.Sprintf("m%d", i),
			DataDir:      filepath.Join(base, fmt.Sprintf("m%d", i), "data"),
			LogPath:      filepath.Join(base, fmt.Sprintf("m%d.log", i)),
			peerListen:   ports[2*i],
			clientListen: ports[2*i+1],
			env:          opts.MemberEnv[i],
		}
		m.peerAdv, m.clientAdv = m.peerListen, m.clientListen
		if opts.Proxied {
			m.peerAdv, m.clientAdv = ports[2*opts.Size+2*i], ports[2*opts.Size+2*i+1]
		}
		if err := os.MkdirAll(filepath.Dir(m.DataDir), 0o755); err != nil {
			t.Fatal(err)
		}
		c.Members = append(c.Members, m)
	}
	t.Cleanup(c.dumpLogsIfFailed) // runs last: after processes are gone
	if opts.Proxied {
		for i, m := range c.Members {
			mux, err := proxy.NewMux(m.peerAdv, m.peerListen, c.classifyPeer)
			if err != nil {
				t.Fatalf("peer proxy for member %d: %v", i, err)
			}
			c.peerMux = append(c.peerMux, mux)
			cp, err := proxy.New(m.clientAdv, m.clientListen)
			if err != nil {
				t.Fatalf("client proxy for member %d: %v", i, err)
			}
			c.clientPx = append(c.clientPx, cp)
		}
	}
	t.Cleanup(c.teardown)

	for i := range c.Members {
		if err := c.startMember(i); err != nil {
			t.Fatalf("starting member %d: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.StartTimeout)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatalf("cluster (%s) did not become ready within %v: %v", opts.Binary, opts.StartTimeout, err)
	}
	return c
}

// FreeAddrs reserves n distinct loopback addresses (held open together so
// they are distinct, then released for the servers to bind).
func FreeAddrs(t TB, n int) []string {
	var lns []net.Listener
	var out []string
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

func (c *Cluster) classifyPeer(conn net.Conn) string {
	pids := map[int]int{}
	for i, m := range c.Members {
		m.mu.Lock()
		if m.running && m.cmd != nil && m.cmd.Process != nil {
			pids[m.cmd.Process.Pid] = i
		}
		m.mu.Unlock()
	}
	if i := socketOwner(conn, pids); i >= 0 {
		return c.Members[i].Name
	}
	return ""
}

func (c *Cluster) args(m *Member) []string {
	var ic []string
	for _, o := range c.Members {
		ic = append(ic, fmt.Sprintf("%s=http://%s", o.Name, o.peerAdv))
	}
	var a []string
	if c.Opts.Binary == Tenure {
		a = append(a, "serve")
	}
	a = append(a,
		"--name", m.Name,
		"--data-dir", m.DataDir,
		"--listen-client-urls", "http://"+m.clientListen,
		"--advertise-client-urls", "http://"+m.clientAdv,
		"--listen-peer-urls", "http://"+m.peerListen,
		"--initial-advertise-peer-urls", "http://"+m.peerAdv,
		"--initial-cluster", strings.Join(ic, ","),
		"--initial-cluster-state", map[bool]string{false: "new", true: "existing"}[m.joined],
		"--initial-cluster-token", c.token,
		"--heartbeat-interval", fmt.Sprint(c.Opts.HeartbeatMs),
		"--election-timeout", fmt.Sprint(c.Opts.ElectionMs),
		"--log-level", c.Opts.LogLevel,
	)
	if c.Opts.SnapshotCount > 0 {
		a = append(a, "--snapshot-count", fmt.Sprint(c.Opts.SnapshotCount))
	}
	return append(a, c.Opts.ExtraArgs...)
}

func (c *Cluster) startMember(i int) error {
	m := c.Members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running {
		return fmt.Errorf("member %d is already running", i)
	}
	lf, err := os.OpenFile(m.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := c.args(m)
	fmt.Fprintf(lf, "==== harness: %s start %s %s env=%v\n", time.Now().Format(time.RFC3339Nano), c.bin, strings.Join(args, " "), m.env)
	cmd := exec.Command(c.bin, args...)
	cmd.Env = append(append(os.Environ(), c.Opts.Env...), m.env...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return err
	}
	m.cmd, m.logFile, m.running = cmd, lf, true
	m.done = make(chan struct{})
	done := m.done
	go func() {
		err := cmd.Wait()
		code := 0
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					code = 128 + int(ws.Signal())
				}
			} else {
				code = -1
			}
		}
		m.mu.Lock()
		m.exit, m.running = code, false
		fmt.Fprintf(lf, "==== harness: %s exited code=%d (%v)\n", time.Now().Format(time.RFC3339Nano), code, err)
		lf.Close()
		m.mu.Unlock()
		close(done)
	}()
	return nil
}

func (c *Cluster) signal(i int, sig syscall.Signal) (chan struct{}, error) {
	m := c.Members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.running {
		return m.done, fmt.Errorf("member %d is not running", i)
	}
	return m.done, m.cmd.Process.Signal(sig)
}

// Kill sends SIGKILL to member i and waits for it to exit.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	done, err := c.signal(i, syscall.SIGKILL)
	if err != nil {
		c.t.Fatalf("kill member %d: %v", i, err)
	}
	<-done
}

// KillIfRunning kills member i unless its process has ended on its own (a
// removed member stops by itself), and waits for it to exit; it reports
// whether the process had ended before the kill.
func (c *Cluster) KillIfRunning(i int) (exitedByItself bool) {
	c.t.Helper()
	done, err := c.signal(i, syscall.SIGKILL)
	if done == nil {
		c.t.Fatalf("kill member %d: it never started", i)
	}
	<-done
	return err != nil
}

// Stop sends SIGTERM to member i and waits (up to 10s, then SIGKILL) for it
// to exit; returns its exit code.
func (c *Cluster) Stop(i int) int {
	c.t.Helper()
	done, err := c.signal(i, syscall.SIGTERM)
	if err != nil {
		c.t.Fatalf("stop member %d: %v", i, err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		c.t.Errorf("member %d did not exit within 10s of SIGTERM; killing", i)
		c.signal(i, syscall.SIGKILL)
		<-done
	}
	return c.ExitCode(i)
}

// Pause stops member i with SIGSTOP (a process-wide GC pause, a VM freeze).
func (c *Cluster) Pause(i int) {
	c.t.Helper()
	if _, err := c.signal(i, syscall.SIGSTOP); err != nil {
		c.t.Fatalf("pause member %d: %v", i, err)
	}
	// SIGSTOP is asynchronous: wait until every thread is stopped, so the
	// caller's next request cannot be answered by a process about to stop.
	m := c.Members[i]
	m.mu.Lock()
	pid := m.cmd.Process.Pid
	m.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for !AllThreadsStopped(pid) {
		if time.Now().After(deadline) {
			c.t.Fatalf("member %d (pid %d) did not stop within 5s of SIGSTOP", i, pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// Resume continues a paused member with SIGCONT.
func (c *Cluster) Resume(i int) {
	c.t.Helper()
	if _, err := c.signal(i, syscall.SIGCONT); err != nil {
		c.t.Fatalf("resume member %d: %v", i, err)
	}
}

// Restart starts a stopped member again with the same flags, data dir and
// environment as its previous run.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	if err := c.startMember(i); err != nil {
		c.t.Fatalf("restart member %d: %v", i, err)
	}
}

// RestartWithEnv restarts member i with env replacing its per-member
// environment (nil: no extra environment, e.g. without failpoints).
func (c *Cluster) RestartWithEnv(i int, env []string) {
	c.t.Helper()
	m := c.Members[i]
	m.mu.Lock()
	m.env = env
	m.mu.Unlock()
	c.Restart(i)
}

// PeerURL is member i's advertised peer URL (what `member add` takes).
func (c *Cluster) PeerURL(i int) string { return "http://" + c.Members[i].peerAdv }

// Replace starts member i again as a new member: its old data dir is
// deleted and it joins with --initial-cluster-state existing (so do its
// later restarts), at the same URLs and behind the same proxies. The caller
// stops the old process and does the `member remove` of the old member and
// the `member add` of PeerURL(i) first.
func (c *Cluster) Replace(i int) {
	c.t.Helper()
	m := c.Members[i]
	m.mu.Lock()
	running := m.running
	m.joined = true
	m.env = nil
	m.mu.Unlock()
	if running {
		c.t.Fatalf("replace member %d: it is still running", i)
	}
	if err := os.RemoveAll(m.DataDir); err != nil {
		c.t.Fatalf("replace member %d: %v", i, err)
	}
	if err := c.startMember(i); err != nil {
		c.t.Fatalf("replace member %d: %v", i, err)
	}
}

// Running reports whether member i's process is alive (possibly paused).
func (c *Cluster) Running(i int) bool {
	m := c.Members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.running
}

// ExitCode is the exit status of member i's last run (128+signal when it
// was killed by a signal); -2 while it runs.
func (c *Cluster) ExitCode(i int) int {
	m := c.Members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running {
		return -2
	}
	return m.exit
}

// WaitExit waits until member i exits on its own (e.g. a failpoint) and
// returns its exit code, or ctx's error.
func (c *Cluster) WaitExit(ctx context.Context, i int) (int, error) {
	m := c.Members[i]
	m.mu.Lock()
	done := m.done
	m.mu.Unlock()
	if done == nil {
		return 0, fmt.Errorf("member %d never started", i)
	}
	select {
	case <-done:
		return c.ExitCode(i), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Exited returns a channel closed when member i's current run ends.
func (c *Cluster) Exited(i int) <-chan struct{} {
	m := c.Members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.done
}

// Endpoint is member i's client endpoint as clients should dial it
// (the client proxy when Proxied).
func (c *Cluster) Endpoint(i int) string { return "http://" + c.Members[i].clientAdv }

// Endpoints are every member's client endpoint.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for i := range c.Members {
		eps = append(eps, c.Endpoint(i))
	}
	return eps
}

// DirectEndpoint is member i's client listener, bypassing any proxy.
func (c *Cluster) DirectEndpoint(i int) string { return "http://" + c.Members[i].clientListen }

// NewClient makes a clientv3 client for the given endpoints, closed on cleanup.
func (c *Cluster) NewClient(endpoints ...string) *clientv3.Client {
	c.t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          2 * time.Second,
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		c.t.Fatalf("clientv3.New(%v): %v", endpoints, err)
	}
	c.mu.Lock()
	c.extra = append(c.extra, cli)
	c.mu.Unlock()
	return cli
}

// Client is a shared client bound to member i only.
func (c *Cluster) Client(i int) *clientv3.Client {
	c.t.Helper()
	c.mu.Lock()
	cli := c.clients[i]
	c.mu.Unlock()
	if cli != nil {
		return cli
	}
	cli = c.NewClient(c.Endpoint(i))
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev := c.clients[i]; prev != nil {
		return prev
	}
	c.clients[i] = cli
	return cli
}

// ClientAll is a shared client balancing over every member.
func (c *Cluster) ClientAll() *clientv3.Client {
	c.t.Helper()
	c.mu.Lock()
	cli := c.allClient
	c.mu.Unlock()
	if cli != nil {
		return cli
	}
	cli = c.NewClient(c.Endpoints()...)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.allClient == nil {
		c.allClient = cli
	}
	return c.allClient
}

// memberStatus asks member i for its status with a short per-call timeout.
func (c *Cluster) memberStatus(ctx context.Context, i int) (*clientv3.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return c.Client(i).Status(ctx, c.Endpoint(i))
}

// Leader returns the index of a running member that reports itself leader,
// asking all running members in parallel (Maintenance.Status); -1 and an
// error when none does.
func (c *Cluster) Leader(ctx context.Context) (int, error) {
	type res struct {
		i  int
		st *clientv3.StatusResponse
	}
	ch := make(chan res, len(c.Members))
	n := 0
	for i := range c.Members {
		if !c.Running(i) {
			continue
		}
		n++
		go func() {
			st, err := c.memberStatus(ctx, i)
			if err != nil {
				st = nil
			}
			ch <- res{i, st}
		}()
	}
	leader := -1
	for ; n > 0; n-- {
		r := <-ch
		if r.st != nil && r.st.Leader != 0 && r.st.Leader == r.st.Header.MemberId {
			if leader < 0 || r.i < leader {
				leader = r.i
			}
		}
	}
	if leader < 0 {
		return -1, errors.New("no member reports itself leader")
	}
	return leader, nil
}

// WaitLeader waits until a running member not in exclude reports itself
// leader, and returns its index.
func (c *Cluster) WaitLeader(ctx context.Context, exclude ...int) (int, error) {
	var last error
	for {
		l, err := c.Leader(ctx)
		if err == nil {
			skip := false
			for _, e := range exclude {
				skip = skip || e == l
			}
			if !skip {
				return l, nil
			}
			err = fmt.Errorf("leader is excluded member %d", l)
		}
		last = err
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("waiting for leader: %w (last: %v)", ctx.Err(), last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WaitReady waits until every running member answers a linearizable Get
// and a leader exists.
func (c *Cluster) WaitReady(ctx context.Context) error {
	for i := range c.Members {
		if !c.Running(i) {
			continue
		}
		if err := c.WaitMemberReady(ctx, i); err != nil {
			return err
		}
	}
	_, err := c.WaitLeader(ctx)
	return err
}

// WaitMemberReady waits until member i answers a linearizable Get.
func (c *Cluster) WaitMemberReady(ctx context.Context, i int) error {
	cli := c.Client(i)
	var last error
	for {
		select {
		case <-c.Exited(i):
			return fmt.Errorf("member %d exited with code %d while waiting for it to serve", i, c.ExitCode(i))
		default:
		}
		actx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Get(actx, "tenure-harness-ready")
		cancel()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("member %d not serving: %w (last error: %v)", i, ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Etcdctl runs etcdctl against all endpoints (unless args has an explicit
// --endpoints) and returns its stdout; a failure's error carries stderr.
func (c *Cluster) Etcdctl(ctx context.Context, args ...string) (string, error) {
	cmd := c.EtcdctlCmd(ctx, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		err = fmt.Errorf("%w; stderr: %s", err, strings.TrimSpace(stderr.String()))
	}
	return string(out), err
}

// EtcdctlCmd prepares an etcdctl command (for stdin or streaming output).
func (c *Cluster) EtcdctlCmd(ctx context.Context, args ...string) *exec.Cmd {
	c.t.Helper()
	bin := EtcdctlBinary(c.t)
	has := false
	for _, a := range args {
		has = has || strings.HasPrefix(a, "--endpoints")
	}
	if !has {
		args = append([]string{"--endpoints", strings.Join(c.Endpoints(), ",")}, args...)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	// etcdctl 3.7 speaks only the v3 API and warns about ETCDCTL_API, so
	// it is removed from the environment rather than set.
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "ETCDCTL_API=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// PeerLink is the link carrying connections member from opens to member to
// (requires Proxied).
func (c *Cluster) PeerLink(from, to int) *proxy.Proxy {
	c.t.Helper()
	if !c.Opts.Proxied {
		c.t.Fatal("PeerLink requires Options.Proxied")
	}
	return c.peerMux[to].Link(c.Members[from].Name)
}

// ClientProxy is the proxy in front of member i's client listener (requires Proxied).
func (c *Cluster) ClientProxy(i int) *proxy.Proxy {
	c.t.Helper()
	if !c.Opts.Proxied {
		c.t.Fatal("ClientProxy requires Options.Proxied")
	}
	return c.clientPx[i]
}

// Partition blackholes every peer link between members of different
// groups. Members in no group are left connected to everyone.
func (c *Cluster) Partition(groups ...[]int) {
	c.t.Helper()
	group := map[int]int{}
	for g, ms := range groups {
		for _, m := range ms {
			group[m] = g
		}
	}
	for i := range c.Members {
		for j := range c.Members {
			gi, oki := group[i]
			gj, okj := group[j]
			if i != j && oki && okj && gi != gj {
				c.PeerLink(i, j).Blackhole()
			}
		}
	}
}

// OneWayPartition drops what member from sends to member to over its own
// connections, leaving to → from intact.
func (c *Cluster) OneWayPartition(from, to int) {
	c.t.Helper()
	c.PeerLink(from, to).Blackhole()
}

// Heal removes every fault from every peer and client link.
func (c *Cluster) Heal() {
	for _, m := range c.peerMux {
		for _, l := range m.Links() {
			l.Heal()
		}
	}
	for _, p := range c.clientPx {
		p.Heal()
	}
}

func (c *Cluster) teardown() {
	c.mu.Lock()
	clis := append([]*clientv3.Client(nil), c.extra...)
	c.mu.Unlock()
	for _, cli := range clis {
		cli.Close()
	}
	for i, m := range c.Members {
		m.mu.Lock()
		running, cmd, done := m.running, m.cmd, m.done
		m.mu.Unlock()
		if running {
			cmd.Process.Signal(syscall.SIGKILL)
		}
		if done != nil {
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				c.t.Logf("member %d did not exit after SIGKILL", i)
			}
		}
	}
	for _, mx := range c.peerMux {
		mx.Close()
	}
	for _, p := range c.clientPx {
		p.Close()
	}
}

func (c *Cluster) dumpLogsIfFailed() {
	if !c.t.Failed() {
		return
	}
	for _, m := range c.Members {
		c.t.Logf("member %d (%s) log: %s\n%s", m.Index, m.Name, m.LogPath, tail(m.LogPath, 50))
	}
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read: %v)", err)
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return "    " + strings.Join(lines, "\n    ")
}
