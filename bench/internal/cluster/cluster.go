// Package cluster starts and stops a 3-member cluster of a system that takes
// etcd's server flags (etcd itself, or `tenure serve`) on loopback, and waits
// until it has a leader and accepts writes.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// System describes a server binary that accepts etcd's flag names.
type System struct {
	Label   string   // shown in result tables, e.g. "etcd 3.7.3"
	Kind    string   // "etcd" or "tenure"
	Bin     string   // path to the binary
	PreArgs []string // arguments before the flags, e.g. ["serve"] for tenure
}

// Options are the server flags shared by every system under test, so that
// both sides of a comparison run with exactly the same settings.
type Options struct {
	Size              int   // members; 3
	HeartbeatMS       int   // --heartbeat-interval
	ElectionMS        int   // --election-timeout
	SnapshotCount     int   // --snapshot-count (0: the server's default)
	QuotaBackendBytes int64 // --quota-backend-bytes (0: the server's default)
	LogLevel          string
	ReadyTimeout      time.Duration
	// ClientWindowBytes fixes the HTTP/2 stream and connection windows of
	// the harness's clientv3 clients (every system alike); 0 leaves gRPC's
	// dynamic windows. See ClientConfig.
	ClientWindowBytes int32
}

// FixedClientWindowBytes is the window to try with -client-window: 1 MiB,
// what Tenure's members use towards their clients.
const FixedClientWindowBytes = 1 << 20

// DefaultOptions are the settings from issue 5: heartbeat 100 ms, election
// 1000 ms; the harness's clients keep clientv3's defaults.
func DefaultOptions() Options {
	return Options{Size: 3, HeartbeatMS: 100, ElectionMS: 1000, LogLevel: "warn", ReadyTimeout: 30 * time.Second}
}

// ClientConfig is the clientv3 configuration of every client the harness
// opens on an etcd-compatible cluster. With windowBytes > 0 the HTTP/2
// stream and connection windows are fixed at that size, which turns gRPC-go's
// BDP estimation off: with it on (clientv3's default), a client answers a
// data frame that arrives while no estimate is running with a window update
// and a PING the server must acknowledge, so in request/response traffic of
// small messages nearly every response costs one more write on each side and
// one more wake-up of each process. The harness keeps clientv3's default
// (windowBytes 0), as users run it; -client-window sets one for every
// system alike. bench/README.md ("Clients") has what it changed.
func ClientConfig(endpoints []string, windowBytes int32) clientv3.Config {
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if windowBytes > 0 {
		cfg.DialOptions = []grpc.DialOption{grpc.WithInitialWindowSize(windowBytes), grpc.WithInitialConnWindowSize(windowBytes)}
	}
	return cfg
}

type member struct {
	name, clientURL, peerURL, dataDir, logPath string
	cmd                                        *exec.Cmd
	args                                       []string
	done                                       chan struct{}
	waitErr                                    error
}

// Cluster is a running set of members.
type Cluster struct {
	Sys       System
	Dir       string
	Endpoints []string // client URLs, member order
	Leader    string   // client URL of the leader found by WaitReady
	members   []*member
	clientWin int32 // Options.ClientWindowBytes
}

// ErrExited is returned (wrapped) when a member process exits during start.
var ErrExited = errors.New("member exited")

// Start launches the members under dir (dir/data/mN, dir/logs/mN.log) and
// waits for a leader. A member that exits during start (e.g. a port taken by
// another process between our probe and its bind) is retried with new ports;
// a cluster that runs but finds no leader within ReadyTimeout is not.
func Start(ctx context.Context, sys System, dir string, o Options) (*Cluster, error) {
	return retryExited(ctx, dir, func(try string) (*Cluster, error) { return start(ctx, sys, try, o) })
}

// retryExited runs start in dir/try0, dir/try1, … up to three times while
// it fails with ErrExited (a member lost its port to another process).
func retryExited[T any](ctx context.Context, dir string, start func(try string) (T, error)) (T, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		v, err := start(filepath.Join(dir, fmt.Sprintf("try%d", attempt)))
		if err == nil {
			return v, nil
		}
		lastErr = err
		if ctx.Err() != nil || !errors.Is(err, ErrExited) {
			break
		}
	}
	var zero T
	return zero, lastErr
}

func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func start(ctx context.Context, sys System, dir string, o Options) (*Cluster, error) {
	ports, err := freePorts(2 * o.Size)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Sys: sys, Dir: dir, clientWin: o.ClientWindowBytes}
	var initial string
	c.members, initial = layout(dir, ports, o.Size)
	for _, m := range c.members {
		c.Endpoints = append(c.Endpoints, m.clientURL)
	}
	token := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	for _, m := range c.members {
		if err := os.MkdirAll(filepath.Dir(m.logPath), 0o755); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(m.dataDir), 0o755); err != nil {
			return nil, err
		}
		m.args = memberArgs(sys, o, m, initial, token)
		if err := c.launch(m, os.O_CREATE|os.O_TRUNC|os.O_WRONLY); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if err := c.WaitReady(ctx, o.ReadyTimeout); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// layout names the size members m1…mN under dir (data/mN, logs/mN.log) and
// gives member i the client port ports[2i] and the peer port ports[2i+1]
// on 127.0.0.1; initial is the --initial-cluster value.
func layout(dir string, ports []int, size int) (members []*member, initial string) {
	var ini []string
	for i := 0; i < size; i++ {
		m := &member{
			name:      fmt.Sprintf("m%d", i+1),
			clientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			peerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
		}
		m.dataDir = filepath.Join(dir, "data", m.name)
		m.logPath = filepath.Join(dir, "logs", m.name+".log")
		members = append(members, m)
		ini = append(ini, m.name+"="+m.peerURL)
	}
	return members, strings.Join(ini, ",")
}

// memberArgs is member m's command line after the binary: the system's
// PreArgs, then etcd's server flags, the same for every system.
func memberArgs(sys System, o Options, m *member, initial, token string) []string {
	args := append([]string{}, sys.PreArgs...)
	args = append(args,
		"--name="+m.name,
		"--data-dir="+m.dataDir,
		"--listen-client-urls="+m.clientURL,
		"--advertise-client-urls="+m.clientURL,
		"--listen-peer-urls="+m.peerURL,
		"--initial-advertise-peer-urls="+m.peerURL,
		"--initial-cluster="+initial,
		"--initial-cluster-state=new",
		"--initial-cluster-token="+token,
		fmt.Sprintf("--heartbeat-interval=%d", o.HeartbeatMS),
		fmt.Sprintf("--election-timeout=%d", o.ElectionMS),
	)
	if o.SnapshotCount > 0 {
		args = append(args, fmt.Sprintf("--snapshot-count=%d", o.SnapshotCount))
	}
	if o.QuotaBackendBytes > 0 {
		args = append(args, fmt.Sprintf("--quota-backend-bytes=%d", o.QuotaBackendBytes))
	}
	if o.LogLevel != "" {
		args = append(args, "--log-level="+o.LogLevel)
	}
	return args
}

// CommandLine returns the command line of member i, for the report.
func (c *Cluster) CommandLine(i int) string {
	m := c.members[i]
	return c.Sys.Bin + " " + strings.Join(m.args, " ")
}

func (c *Cluster) exited() error {
	for _, m := range c.members {
		select {
		case <-m.done:
			return fmt.Errorf("%s member %s: %w (%v); log tail:\n%s", c.Sys.Label, m.name, ErrExited, m.waitErr, tail(m.logPath, 2000))
		default:
		}
	}
	return nil
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// ClientConfig is the configuration of the harness's clients on all
// endpoints (the package-level ClientConfig with the cluster's window).
func (c *Cluster) ClientConfig() clientv3.Config {
	return ClientConfig(c.Endpoints, c.clientWin)
}

// Client returns a clientv3 client on all endpoints (ClientConfig).
func (c *Cluster) Client() (*clientv3.Client, error) {
	return clientv3.New(c.ClientConfig())
}

// WaitReady waits until every member reports the same non-zero leader and a
// write through the cluster succeeds.
func (c *Cluster) WaitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cli, err := c.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	var last error
	for {
		if err := c.exited(); err != nil {
			return err
		}
		last = c.probe(ctx, cli)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: no leader within %v: %v", c.Sys.Label, timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) probe(ctx context.Context, cli *clientv3.Client) error {
	_, leaderEP, err := AgreedLeader(ctx, cli, c.Endpoints)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := cli.Put(pctx, "bench/ready", "1"); err != nil {
		return fmt.Errorf("put: %w", err)
	}
	if leaderEP == "" {
		return errors.New("leader is not one of the endpoints")
	}
	c.Leader = leaderEP
	return nil
}

// AgreedLeader asks every endpoint for its status through cli (a second
// per endpoint at most) and returns the leader's member id and the endpoint
// that is that leader ("" if none of them is); see agreedLeader for when it
// fails.
func AgreedLeader(ctx context.Context, cli *clientv3.Client, eps []string) (uint64, string, error) {
	return agreedLeader(eps, func(ep string) (leader, self uint64, err error) {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		st, err := cli.Status(sctx, ep)
		if err != nil {
			return 0, 0, err
		}
		if st.Header != nil {
			self = st.Header.MemberId
		}
		return st.Leader, self, nil
	})
}

// agreedLeader asks every endpoint, in order, for its member id (self) and
// the leader it knows (status), and fails at the first endpoint that
// cannot answer, knows no leader, or names another leader than the ones
// before it. It returns that leader's member id and the endpoint whose
// member it is ("" if none of them is).
func agreedLeader(eps []string, status func(ep string) (leader, self uint64, err error)) (uint64, string, error) {
	var agreed uint64
	leaderEP := ""
	for _, ep := range eps {
		leader, self, err := status(ep)
		if err != nil {
			return 0, "", fmt.Errorf("status %s: %w", ep, err)
		}
		if leader == 0 {
			return 0, "", fmt.Errorf("%s: no leader yet", ep)
		}
		if agreed != 0 && leader != agreed {
			return 0, "", fmt.Errorf("members disagree on the leader")
		}
		agreed = leader
		if self == leader {
			leaderEP = ep
		}
	}
	return agreed, leaderEP, nil
}

// Stop terminates every member (SIGTERM, then SIGKILL after 3 s: a benchmark
// cluster's data is thrown away, and a graceful leader transfer to members
// that are stopping too only delays the next run).
func (c *Cluster) Stop() {
	for _, m := range c.members {
		if m.cmd != nil && m.cmd.Process != nil && m.done != nil {
			_ = m.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, m := range c.members {
		if m.done == nil {
			continue
		}
		select {
		case <-m.done:
		case <-time.After(3 * time.Second):
			_ = m.cmd.Process.Kill()
			<-m.done
		}
	}
}

// RemoveData deletes the members' data directories (logs are kept).
func (c *Cluster) RemoveData() error {
	return os.RemoveAll(filepath.Join(c.Dir, "data"))
}

// KillEndpoint sends SIGKILL to the member serving the client URL ep and
// waits for it to exit. It returns when the kill was sent.
func (c *Cluster) KillEndpoint(ep string) (time.Time, error) {
	for _, m := range c.members {
		if m.clientURL != ep {
			continue
		}
		if m.cmd == nil || m.cmd.Process == nil {
			return time.Time{}, fmt.Errorf("member %s not running", m.name)
		}
		t := time.Now()
		if err := m.cmd.Process.Kill(); err != nil {
			return t, err
		}
		<-m.done
		return t, nil
	}
	return time.Time{}, fmt.Errorf("no member serves %s", ep)
}

func (c *Cluster) launch(m *member, flags int) error {
	lf, err := os.OpenFile(m.logPath, flags, 0o644)
	if err != nil {
		return err
	}
	m.cmd = exec.Command(c.Sys.Bin, m.args...)
	m.cmd.Stdout, m.cmd.Stderr = lf, lf
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := m.cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("start %s %s: %w", c.Sys.Label, m.name, err)
	}
	m.done = make(chan struct{})
	go func(m *member, lf *os.File) {
		m.waitErr = m.cmd.Wait()
		lf.Close()
		close(m.done)
	}(m, lf)
	return nil
}

// Restart stops every member (SIGTERM, SIGKILL after 3 s), starts them again
// with the same flags and data, and waits until ready. It returns the time
// from the start of the processes until the cluster is ready.
func (c *Cluster) Restart(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	c.Stop()
	t := time.Now()
	for _, m := range c.members {
		if err := c.launch(m, os.O_CREATE|os.O_APPEND|os.O_WRONLY); err != nil {
			return 0, err
		}
	}
	if err := c.WaitReady(ctx, timeout); err != nil {
		return 0, err
	}
	return time.Since(t), nil
}

// RSS returns the members' resident set sizes in bytes (VmRSS), member order.
func (c *Cluster) RSS() ([]int64, error) {
	var out []int64
	for _, m := range c.members {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.cmd.Process.Pid))
		if err != nil {
			return nil, err
		}
		out = append(out, vmRSS(string(b)))
	}
	return out, nil
}

// vmRSS returns the VmRSS line of a /proc/<pid>/status text in bytes (the
// kernel prints kB, i.e. KiB); 0 if there is none.
func vmRSS(status string) int64 {
	var kb int64
	for _, l := range strings.Split(status, "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:")), "%d", &kb)
		}
	}
	return kb * 1024
}

// DiskUsage returns the bytes under each member's data dir, member order.
func (c *Cluster) DiskUsage() ([]int64, error) {
	var out []int64
	for _, m := range c.members {
		var n int64
		err := filepath.Walk(m.dataDir, func(_ string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			if !fi.IsDir() {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					n += st.Blocks * 512 // allocated, as du
				} else {
					n += fi.Size()
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}
