package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// Kinds of systems that do not take etcd's flags. Each has its own starter
// below; suites check Env.Ext.Kind to pick the protocol (zk, RESP, SQL).
const (
	KindZooKeeper = "zookeeper"
	KindRedis     = "redis"
	KindPostgres  = "postgres"
)

// External is a running reference system that is not etcd-compatible.
type External struct {
	Kind  string
	Label string
	Addrs []string // zk: host:port per member; redis: host:port; postgres: a DSN
	Dir   string
	Cmds  []string // command lines, for the report
	procs []*proc
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  string
}

func launch(bin string, args []string, logPath string, env []string) (*proc, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &proc{cmd: exec.Command(bin, args...), done: make(chan struct{}), log: logPath}
	p.cmd.Stdout, p.cmd.Stderr = lf, lf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	if err := p.cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	go func() { p.err = p.cmd.Wait(); lf.Close(); close(p.done) }()
	return p, nil
}

func (e *External) exited() error {
	for _, p := range e.procs {
		select {
		case <-p.done:
			return fmt.Errorf("%s: %w (%v); log tail:\n%s", e.Label, ErrExited, p.err, tail(p.log, 2000))
		default:
		}
	}
	return nil
}

// Stop terminates the processes this starter launched (SIGTERM, SIGKILL after 3 s).
func (e *External) Stop() {
	for _, p := range e.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range e.procs {
		select {
		case <-p.done:
		case <-time.After(3 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// RemoveData deletes data directories (logs are kept).
func (e *External) RemoveData() error {
	if e.Dir == "" {
		return nil
	}
	return os.RemoveAll(filepath.Join(e.Dir, "data"))
}

// ZooKeeperJar is Debian's ZooKeeper 3.8 (package zookeeper); its manifest
// names its dependencies.
const ZooKeeperJar = "/usr/share/java/zookeeper.jar"

// StartZooKeeper starts a 3-member ZooKeeper ensemble on loopback (Debian's
// package, QuorumPeerMain; forceSync on, the default), tick 100 ms so
// failure detection is comparable with the etcd clusters' 100/1000 ms.
func StartZooKeeper(ctx context.Context, label, dir string, size int) (*External, error) {
	if _, err := os.Stat(ZooKeeperJar); err != nil {
		return nil, fmt.Errorf("ZooKeeper not installed (make refsys installs Debian's zookeeper): %w", err)
	}
	return retryExited(ctx, dir, func(try string) (*External, error) { return startZK(ctx, label, try, size) })
}

func startZK(ctx context.Context, label, dir string, size int) (*External, error) {
	ports, err := freePorts(3 * size)
	if err != nil {
		return nil, err
	}
	e := &External{Kind: KindZooKeeper, Label: label, Dir: dir}
	var servers []string
	for i := 0; i < size; i++ {
		servers = append(servers, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", i+1, ports[3*i+1], ports[3*i+2]))
		e.Addrs = append(e.Addrs, fmt.Sprintf("127.0.0.1:%d", ports[3*i]))
	}
	for i := 0; i < size; i++ {
		data := filepath.Join(dir, "data", fmt.Sprintf("m%d", i+1))
		if err := os.MkdirAll(data, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(fmt.Sprintf("%d\n", i+1)), 0o644); err != nil {
			return nil, err
		}
		cfg := []string{
			"tickTime=100", "initLimit=100", "syncLimit=10", // sync 1 s, as the etcd clusters' election timeout
			"dataDir=" + data,
			fmt.Sprintf("clientPort=%d", ports[3*i]),
			"clientPortAddress=127.0.0.1",
			"maxClientCnxns=0",
			"admin.enableServer=false",
			"4lw.commands.whitelist=srvr,ruok",
			"autopurge.purgeInterval=0",
		}
		cfg = append(cfg, servers...)
		cfgPath := filepath.Join(dir, fmt.Sprintf("m%d.cfg", i+1))
		if err := os.WriteFile(cfgPath, []byte(strings.Join(cfg, "\n")+"\n"), 0o644); err != nil {
			return nil, err
		}
		args := []string{"-Xmx512m", "-Dzookeeper.jmx.log4j.disable=true", "-cp", ZooKeeperJar,
			"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgPath}
		p, err := launch("java", args, filepath.Join(dir, "logs", fmt.Sprintf("m%d.log", i+1)), nil)
		if err != nil {
			e.Stop()
			return nil, err
		}
		e.procs = append(e.procs, p)
		e.Cmds = append(e.Cmds, "java "+strings.Join(args, " ")+"  # "+strings.Join(cfg, "; "))
	}
	if err := e.waitZK(ctx, 60*time.Second); err != nil {
		e.Stop()
		return nil, err
	}
	return e, nil
}

// waitZK waits until a session through every member can create and delete a
// node (a quorum with a leader exists and every member serves).
func (e *External) waitZK(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if err := e.exited(); err != nil {
			return err
		}
		last = e.probeZK()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not ready within %v: %v", e.Label, timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (e *External) probeZK() error {
	for _, a := range e.Addrs {
		c, ev, err := zk.Connect([]string{a}, 4*time.Second, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}))
		if err != nil {
			return err
		}
		ok := false
		deadline := time.After(3 * time.Second)
	wait:
		for {
			select {
			case x := <-ev:
				if x.State == zk.StateHasSession {
					ok = true
					break wait
				}
			case <-deadline:
				break wait
			}
		}
		if !ok {
			c.Close()
			return fmt.Errorf("no session with %s", a)
		}
		p, err := c.Create("/bench-ready-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
		if err == nil {
			err = c.Delete(p, -1)
		}
		c.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
	}
	return nil
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// NopZKLogger silences go-zookeeper's logging.
var NopZKLogger zk.Logger = nopLogger{}

// StartRedis starts a single redis-server (Debian's binary) on a free
// loopback port: append-only file with appendfsync always, so an
// acknowledged write is on disk as in the replicated systems. Single node:
// an unreplicated reference.
func StartRedis(ctx context.Context, label, dir string) (*External, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not installed (make refsys installs it): %w", err)
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	args := []string{"--port", fmt.Sprint(ports[0]), "--bind", "127.0.0.1", "--dir", data,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no",
		"--protected-mode", "no", "--maxclients", "10000", "--loglevel", "warning"}
	p, err := launch(bin, args, filepath.Join(dir, "logs", "redis.log"), nil)
	if err != nil {
		return nil, err
	}
	e := &External{Kind: KindRedis, Label: label, Dir: dir, Addrs: []string{fmt.Sprintf("127.0.0.1:%d", ports[0])},
		Cmds: []string{bin + " " + strings.Join(args, " ")}, procs: []*proc{p}}
	cli := redis.NewClient(&redis.Options{Addr: e.Addrs[0]})
	defer cli.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := e.exited(); err != nil {
			return nil, err
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := cli.Set(pctx, "bench-ready", "1", 0).Err()
		cancel()
		if err == nil {
			return e, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			e.Stop()
			return nil, fmt.Errorf("%s: not ready: %v", label, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// DefaultPostgresDSN is the machine's PostgreSQL (Debian's postgresql
// package, trust auth on loopback); make refsys starts it if it is down.
const DefaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// UsePostgres checks that the PostgreSQL server at dsn answers. Nothing is
// started or stopped: it is one shared single-node server (an unreplicated
// reference; advisory locks are in memory and write nothing).
func UsePostgres(ctx context.Context, label, dsn string) (*External, error) {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(pctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("%s at %s (make refsys starts it): %w", label, dsn, err)
	}
	defer c.Close(ctx)
	var v string
	if err := c.QueryRow(pctx, "SHOW server_version").Scan(&v); err != nil {
		return nil, err
	}
	return &External{Kind: KindPostgres, Label: label, Addrs: []string{dsn}, Cmds: []string{"PostgreSQL " + v + " at " + dsn}}, nil
}
