package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tenure-io/tenure/test/cluster"
)

// procCluster runs tenure members as plain processes, for what the shared
// harness does not do: pre-built data directories (snapshot restore) and
// https:// URLs (TLS).
type procCluster struct {
	t        *testing.T
	bin      string
	scheme   string // http or https
	token    string
	names    []string
	dataDirs []string
	logs     []string
	peer     []string // host:port
	clients  []string // host:port
	procs    []*exec.Cmd
	done     []chan struct{}
}

type procOptions struct {
	Size      int
	Scheme    string   // default http
	DataDirs  []string // default: fresh dirs under t.TempDir()
	Token     string
	ExtraArgs []string
}

// newProcCluster lays out a cluster without starting it.
func newProcCluster(t *testing.T, o procOptions) *procCluster {
	t.Helper()
	if cluster.TargetFromEnv(t) != cluster.Tenure {
		t.Skip("uses tenure-only commands and flags")
	}
	if o.Scheme == "" {
		o.Scheme = "http"
	}
	if o.Token == "" {
		o.Token = fmt.Sprintf("proc-%d", time.Now().UnixNano())
	}
	c := &procCluster{t: t, bin: cluster.TenureBinary(t), scheme: o.Scheme, token: o.Token}
	base := t.TempDir()
	addrs := cluster.FreeAddrs(t, 2*o.Size)
	for i := 0; i < o.Size; i++ {
		c.names = append(c.names, fmt.Sprintf("n%d", i))
		dd := filepath.Join(base, fmt.Sprintf("n%d", i))
		if i < len(o.DataDirs) {
			dd = o.DataDirs[i]
		}
		c.dataDirs = append(c.dataDirs, dd)
		c.logs = append(c.logs, filepath.Join(base, fmt.Sprintf("n%d.log", i)))
		c.peer = append(c.peer, addrs[2*i])
		c.clients = append(c.clients, addrs[2*i+1])
	}
	c.procs = make([]*exec.Cmd, o.Size)
	c.done = make([]chan struct{}, o.Size)
	t.Cleanup(c.stopAll)
	return c
}

func (c *procCluster) initialCluster() string {
	var ic []string
	for i, n := range c.names {
		ic = append(ic, fmt.Sprintf("%s=%s://%s", n, c.scheme, c.peer[i]))
	}
	return strings.Join(ic, ",")
}

// memberArgs are the cluster flags of member i (also what restore takes).
func (c *procCluster) memberArgs(i int) []string {
	return []string{
		"--name", c.names[i], "--data-dir", c.dataDirs[i],
		"--initial-cluster", c.initialCluster(), "--initial-cluster-token", c.token,
		"--initial-advertise-peer-urls", c.scheme + "://" + c.peer[i],
	}
}

func (c *procCluster) start(i int, extra ...string) {
	c.t.Helper()
	args := append([]string{"serve"}, c.memberArgs(i)...)
	args = append(args,
		"--listen-peer-urls", c.scheme+"://"+c.peer[i],
		"--listen-client-urls", c.scheme+"://"+c.clients[i],
		"--advertise-client-urls", c.scheme+"://"+c.clients[i],
		"--initial-cluster-state", "new",
		"--heartbeat-interval", fmt.Sprint(heartbeatMs), "--election-timeout", fmt.Sprint(electionMs),
		"--log-format", "text",
	)
	args = append(args, extra...)
	lf, err := os.OpenFile(c.logs[i], os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); lf.Close(); close(done) }()
	c.procs[i], c.done[i] = cmd, done
}

func (c *procCluster) startAll(extra ...string) {
	c.t.Helper()
	for i := range c.names {
		c.start(i, extra...)
	}
}

func (c *procCluster) stop(i int) {
	if p := c.procs[i]; p != nil && p.Process != nil {
		_ = p.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done[i]:
		case <-time.After(10 * time.Second):
			_ = p.Process.Kill()
			<-c.done[i]
		}
		c.procs[i] = nil
	}
}

func (c *procCluster) stopAll() {
	for i := range c.procs {
		c.stop(i)
	}
	if c.t.Failed() {
		for i, l := range c.logs {
			b, _ := os.ReadFile(l)
			lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			c.t.Logf("member %d log %s (last lines):\n%s", i, l, strings.Join(lines, "\n"))
		}
	}
}

func (c *procCluster) endpoint(i int) string { return c.scheme + "://" + c.clients[i] }

func (c *procCluster) endpoints() []string {
	var eps []string
	for i := range c.names {
		eps = append(eps, c.endpoint(i))
	}
	return eps
}

func (c *procCluster) client(tlsCfg *tls.Config, eps ...string) *clientv3.Client {
	c.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, TLS: tlsCfg, Logger: zap.NewNop()})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cli.Close() })
	return cli
}

// waitReady waits until every member serves a linearizable read.
func (c *procCluster) waitReady(ctx context.Context, tlsCfg *tls.Config) error {
	for i := range c.names {
		cli := c.client(tlsCfg, c.endpoint(i))
		var last error
		for {
			select {
			case <-c.done[i]:
				return fmt.Errorf("member %d exited", i)
			default:
			}
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := cli.Get(rctx, "ready")
			cancel()
			if err == nil {
				break
			}
			last = err
			select {
			case <-ctx.Done():
				return errors.Join(ctx.Err(), last)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// tenure runs the tenure binary (client or offline commands).
func (c *procCluster) tenure(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, c.bin, args...).CombinedOutput()
	return string(out), err
}
