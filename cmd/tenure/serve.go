package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tenure-io/tenure/server"
	"github.com/tenure-io/tenure/server/gctune"
	"github.com/tenure-io/tenure/server/procs"
)

// urlList is a comma-separated list flag. Each Set replaces the whole list
// (as etcd's URL flags do); blanks around entries and empty entries are
// dropped. Syntax is checked by Config.Validate, so that every problem is
// reported at once, named by its flag.
type urlList struct{ p *[]string }

func (u urlList) String() string {
	if u.p == nil {
		return ""
	}
	return strings.Join(*u.p, ",")
}

func (u urlList) Set(s string) error {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	*u.p = out
	return nil
}

func (u urlList) Type() string { return "urls" }

// featureGates is etcd's --feature-gates (Name=bool, comma-separated).
// Gates etcd has and Tenure does not are refused by name rather than
// accepted and ignored: a gate asks for a behaviour, and silently not
// having it is worse than not starting.
type featureGates struct{ c *server.Config }

func (g featureGates) String() string {
	if g.c == nil || !g.c.InitialCorruptCheck {
		return ""
	}
	return "InitialCorruptCheck=true"
}

func (g featureGates) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		if !ok {
			return fmt.Errorf("missing bool value for %s (want Name=true or Name=false)", part)
		}
		on, err := strconv.ParseBool(strings.TrimSpace(val))
		if err != nil {
			return fmt.Errorf("invalid value of %s=%s: %v", name, val, err)
		}
		switch strings.TrimSpace(name) {
		case "InitialCorruptCheck":
			g.c.InitialCorruptCheck = on
		default:
			return fmt.Errorf("unrecognized feature gate: %s (Tenure knows InitialCorruptCheck)", name)
		}
	}
	return nil
}

func (featureGates) Type() string { return "mapStringBool" }

// serveFlags holds what `tenure serve` parses before it becomes a Config.
type serveFlags struct {
	cfg         server.Config
	heartbeatMs int64
	electionMs  int64
	gcMinHeap   int64 // --gc-min-heap-bytes: a process setting, not the server's
	adaptProcs  bool  // --adaptive-procs: a process setting too
}

// defaultGCMinHeap is --gc-min-heap-bytes' default. On the project's
// reference machine (2 vCPUs, three members and 50 lock clients on one
// lock), raising the GC's heap goal from GOGC=200's 12–17 MiB to this cut
// collections from 1–3 per second per member to one every few seconds, and
// hand-offs went up by about 6% in ten alternating pairs
// (docs/architecture.md, "Performance decisions").
const defaultGCMinHeap = 64 << 20

// bindServeFlags defines etcd's flags, with defaults from server.DefaultConfig().
func bindServeFlags(fs *pflag.FlagSet) *serveFlags {
	o := &serveFlags{cfg: server.DefaultConfig()}
	c := &o.cfg
	o.heartbeatMs = c.HeartbeatInterval.Milliseconds()
	o.electionMs = c.ElectionTimeout.Milliseconds()
	fs.SortFlags = false

	fs.StringVar(&c.Name, "name", c.Name, "human-readable name for this member")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "path to the data directory (default \"<name>.tenure\")")
	fs.StringVar(&c.WALDir, "wal-dir", c.WALDir, "path to a directory for the write-ahead log (every raft log sync), e.g. on a disk of its own (default: inside --data-dir)")
	fs.Var(urlList{&c.ListenClientURLs}, "listen-client-urls", "comma-separated URLs to listen on for client traffic")
	fs.Var(urlList{&c.AdvertiseClientURLs}, "advertise-client-urls", "comma-separated client URLs of this member to advertise to the cluster and clients")
	fs.Var(urlList{&c.ListenPeerURLs}, "listen-peer-urls", "comma-separated URLs to listen on for peer traffic")
	fs.Var(urlList{&c.InitialAdvertisePeerURLs}, "initial-advertise-peer-urls", "comma-separated peer URLs of this member to advertise to the rest of the cluster")
	fs.StringVar(&c.InitialCluster, "initial-cluster", c.InitialCluster, "initial cluster configuration for bootstrapping, name=url[,name=url...] (default \"<name>=<each initial-advertise-peer-url>\")")
	fs.StringVar(&c.InitialClusterState, "initial-cluster-state", c.InitialClusterState, "initial cluster state: new (all members present during bootstrap) or existing (join a running cluster)")
	fs.StringVar(&c.InitialClusterToken, "initial-cluster-token", c.InitialClusterToken, "initial cluster token, unique per cluster during bootstrap")
	fs.Int64Var(&o.heartbeatMs, "heartbeat-interval", o.heartbeatMs, "time (in milliseconds) of a heartbeat interval")
	fs.Int64Var(&o.electionMs, "election-timeout", o.electionMs, "time (in milliseconds) for an election to time out; at least 5 × --heartbeat-interval, at most 50000")
	fs.Uint64Var(&c.SnapshotCount, "snapshot-count", c.SnapshotCount, "number of committed transactions to trigger a snapshot to disk")
	fs.Uint64Var(&c.SnapshotCatchUpEntries, "snapshot-catchup-entries", c.SnapshotCatchUpEntries, "raft log entries kept behind a log compaction, so a slow follower can catch up without a snapshot")
	fs.Int64Var(&c.QuotaBackendBytes, "quota-backend-bytes", c.QuotaBackendBytes, "raise an alarm when the store exceeds this size in bytes (0 = default)")
	fs.IntVar(&c.MaxRequestBytes, "max-request-bytes", c.MaxRequestBytes, "maximum client request size in bytes the server will accept (at most 64 MiB)")
	fs.IntVar(&c.MaxTxnOps, "max-txn-ops", c.MaxTxnOps, "maximum number of operations permitted in a transaction")
	fs.Var(urlList{&c.ListenClientHTTPURLs}, "listen-client-http-urls", "comma-separated URLs to serve the HTTP services on (/v3/ JSON gateway, /health, /metrics, /version); when given, --listen-client-urls serve gRPC only")
	fs.Var(urlList{&c.ListenMetricsURLs}, "listen-metrics-urls", "comma-separated URLs to serve /metrics, /livez and /readyz on (in addition to the client URLs)")
	fs.DurationVar(&c.LeaseCheckpointInterval, "lease-checkpoint-interval", c.LeaseCheckpointInterval, "how often the leader records remaining lease TTLs through raft; a leader change may extend a lease by at most this much")
	fs.IntVar(&c.LeaseExpiryRate, "lease-expiry-rate", c.LeaseExpiryRate, "maximum lease revocations per second (an expiry storm is spread out at this rate)")
	fs.StringVar(&c.AutoCompactionMode, "auto-compaction-mode", c.AutoCompactionMode, "interpret --auto-compaction-retention as a period ('periodic') or a number of revisions ('revision')")
	fs.StringVar(&c.AutoCompactionRetention, "auto-compaction-retention", c.AutoCompactionRetention, "history to keep: in periodic mode a duration (e.g. 30m) or hours (e.g. 1), in revision mode a number of revisions; 0 = no automatic compaction")
	fs.DurationVar(&c.WatchProgressNotifyInterval, "watch-progress-notify-interval", c.WatchProgressNotifyInterval, "period of progress notifications to watches that asked for them")
	fs.DurationVar(&c.WarningApplyDuration, "warning-apply-duration", c.WarningApplyDuration, "log an apply that takes longer than this (\"apply request took too long\")")
	fs.DurationVar(&c.WarningUnaryRequestDuration, "warning-unary-request-duration", c.WarningUnaryRequestDuration, "log a unary request that takes longer than this (\"request stats\")")
	fs.BoolVar(&c.InitialElectionTickAdvance, "initial-election-tick-advance", c.InitialElectionTickAdvance, "fast-forward a starting member's election clock once it reaches a quorum of peers, so a cluster started together elects a leader sooner")
	fs.BoolVar(&c.StrictReconfigCheck, "strict-reconfig-check", c.StrictReconfigCheck, "refuse membership changes that could leave the cluster without a quorum of running members")
	fs.Var(featureGates{c}, "feature-gates", "etcd's feature gates, Name=true|false,...; Tenure knows InitialCorruptCheck (compare this member's HashKV with its peers' before it starts, and refuse to start on a mismatch)")
	// etcd 3.5 spelled it as a flag of its own (kubeadm's manifests still do).
	fs.BoolVar(&c.InitialCorruptCheck, "experimental-initial-corrupt-check", c.InitialCorruptCheck, "same as --feature-gates=InitialCorruptCheck=true")
	_ = fs.MarkHidden("experimental-initial-corrupt-check")
	fs.BoolVar(&c.EnableGRPCGateway, "enable-grpc-gateway", c.EnableGRPCGateway, "serve etcd's JSON gateway to the v3 API at /v3/ on the client URLs")
	fs.DurationVar(&c.ThriftyReplication, "thrifty-replication", c.ThriftyReplication, "hold the leader's appends to followers no commit needs (none with watchers or clients writing or reading linearizably through them) for up to this long and send them merged (0 = off; at most 50ms); a held follower's serializable reads lag by up to this much")
	o.gcMinHeap = defaultGCMinHeap
	fs.Int64Var(&o.gcMinHeap, "gc-min-heap-bytes", o.gcMinHeap, "keep the Go garbage collector's heap goal at least this many bytes while the live heap is smaller (0 = off; also off when GOGC is set in the environment, which then governs alone)")
	o.adaptProcs = true
	fs.BoolVar(&o.adaptProcs, "adaptive-procs", o.adaptProcs, "run the Go scheduler on one processor while the member is lightly loaded and on all of them once it is busy (off also when GOMAXPROCS is set in the environment, which then governs alone)")
	fs.BoolVar(&c.EnablePprof, "enable-pprof", c.EnablePprof, "serve runtime profiling data at /debug/pprof/ on the client URLs")
	fs.StringVar(&c.ClientTLS.CertFile, "cert-file", "", "path to the client server TLS cert file (needed for https:// client URLs)")
	fs.StringVar(&c.ClientTLS.KeyFile, "key-file", "", "path to the client server TLS key file")
	fs.StringVar(&c.ClientTLS.TrustedCAFile, "trusted-ca-file", "", "path to the client server TLS trusted CA file (verifies client certificates)")
	fs.BoolVar(&c.ClientTLS.ClientCertAuth, "client-cert-auth", false, "refuse clients without a certificate signed by --trusted-ca-file")
	fs.StringVar(&c.ClientTLS.ClientCertFile, "client-cert-file", "", "certificate this member presents when it dials another member's client URL (forwarded requests, the corruption check); default --cert-file")
	fs.StringVar(&c.ClientTLS.ClientKeyFile, "client-key-file", "", "key of --client-cert-file")
	fs.StringVar(&c.PeerTLS.CertFile, "peer-cert-file", "", "path to the peer TLS cert file (needed for https:// peer URLs; also presented when dialing peers)")
	fs.StringVar(&c.PeerTLS.KeyFile, "peer-key-file", "", "path to the peer TLS key file")
	fs.StringVar(&c.PeerTLS.TrustedCAFile, "peer-trusted-ca-file", "", "path to the peer TLS trusted CA file")
	fs.BoolVar(&c.PeerTLS.ClientCertAuth, "peer-client-cert-auth", false, "refuse peers without a certificate signed by --peer-trusted-ca-file")
	fs.BoolVar(&c.PeerTLS.SkipClientSANVerify, "peer-skip-client-san-verification", false, "do not check that a dialing peer's certificate names the address it connects from (an IP SAN, or a DNS SAN resolving to it)")
	fs.StringVar(&c.PeerTLS.ClientCertFile, "peer-client-cert-file", "", "certificate this member presents when it dials a peer; default --peer-cert-file")
	fs.StringVar(&c.PeerTLS.ClientKeyFile, "peer-client-key-file", "", "key of --peer-client-cert-file")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level: debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log format: json or text")
	fs.DurationVar(&c.GRPCKeepAliveMinTime, "grpc-keepalive-min-time", c.GRPCKeepAliveMinTime, "minimum interval a client should wait before pinging the server; a client pinging more often is disconnected")
	fs.DurationVar(&c.GRPCKeepAliveInterval, "grpc-keepalive-interval", c.GRPCKeepAliveInterval, "how long a quiet client connection waits before the server pings it")
	fs.DurationVar(&c.GRPCKeepAliveTimeout, "grpc-keepalive-timeout", c.GRPCKeepAliveTimeout, "how long the server waits for a ping's answer before closing the connection")
	bindEtcdOnlyFlags(fs)
	// etcd before 3.6 spelled these with experimental- (kubeadm's manifests still do).
	experimentalSpellings(fs, "snapshot-catchup-entries", "watch-progress-notify-interval", "warning-unary-request-duration")
	return o
}

// finish applies environment variables to flags not given on the command
// line, builds the Config, applies defaults and validates it. The command
// line's own warnings (shadowed environment variables) come back even with an
// error; the Config's (Config.Warnings) are server.Run's to log.
func (o *serveFlags) finish(fs *pflag.FlagSet, env func(string) string) (server.Config, []string, error) {
	warnings, fromEnv, err := applyEnv(fs, flagNames(fs), env)
	if err != nil {
		return server.Config{}, warnings, err
	}
	// etcd's own variables (ETCD_NAME, ETCD_INITIAL_CLUSTER, ...) as an etcd
	// container's environment sets them; TENURE_ ones win.
	setBefore := map[string]string{}
	for name := range fromEnv {
		setBefore[name] = envName(name)
	}
	etcdWarnings, fromEtcdEnv, err := applyEnvPrefix(fs, flagNames(fs), env, etcdEnvPrefix, setBefore)
	warnings = append(warnings, etcdWarnings...)
	if err != nil {
		return server.Config{}, warnings, err
	}
	warnings = append(warnings, etcdOnlyWarnings(fs)...)
	cfg := o.cfg
	cfg.HeartbeatInterval = time.Duration(o.heartbeatMs) * time.Millisecond
	cfg.ElectionTimeout = time.Duration(o.electionMs) * time.Millisecond
	// Slices are shared with the flag values; copy so the Config is independent.
	for _, p := range []*[]string{&cfg.ListenClientURLs, &cfg.AdvertiseClientURLs, &cfg.ListenPeerURLs, &cfg.InitialAdvertisePeerURLs, &cfg.ListenMetricsURLs, &cfg.ListenClientHTTPURLs} {
		*p = slices.Clone(*p)
	}
	cfg.ApplyDefaults()
	errs := flagsGivenAFlag(fs, func(flag string) string { return flagSource(flag, fromEnv, fromEtcdEnv) })
	if o.gcMinHeap < 0 {
		errs = append(errs, fmt.Errorf("--gc-min-heap-bytes: must be >= 0 (0 turns it off), got %d", o.gcMinHeap))
	}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return cfg, warnings, err
	}
	return cfg, warnings, nil
}

// parseServeConfig parses `tenure serve` arguments and environment (env is
// os.Getenv or a test's map lookup) into a validated Config, with warnings.
func parseServeConfig(args []string, env func(string) string) (server.Config, []string, error) {
	_, cfg, warnings, err := parseServeFlags(args, env)
	return cfg, warnings, err
}

// parseServeFlags is parseServeConfig with the parsed flags, for the
// settings that are the process's rather than the server's.
func parseServeFlags(args []string, env func(string) string) (*serveFlags, server.Config, []string, error) {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := bindServeFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, server.Config{}, nil, err
	}
	if fs.NArg() > 0 {
		return o, server.Config{}, nil, fmt.Errorf("serve takes no arguments, got %q", fs.Args())
	}
	cfg, warnings, err := o.finish(fs, env)
	return o, cfg, warnings, err
}

// etcdEnvPrefix starts etcd's variables for its flags; tenure serve reads
// them for the flags it shares with etcd.
const etcdEnvPrefix = "ETCD_"

// unknownEnv lists TENURE_* and ETCD_* variables in environ that no flag
// reads (known: the names that are read).
func unknownEnv(environ []string, known map[string]bool) []string {
	var ws []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case known[k]:
		case strings.HasPrefix(k, envPrefix):
			ws = append(ws, fmt.Sprintf("unrecognized environment variable %s", k))
		case strings.HasPrefix(k, etcdEnvPrefix):
			ws = append(ws, fmt.Sprintf("unrecognized environment variable %s (no tenure serve flag of that name; ignored)", k))
		}
	}
	return ws
}

// startGCTuner starts the heap-goal floor (--gc-min-heap-bytes) unless it
// is 0 or the operator chose GOGC in the environment, which then governs.
func startGCTuner(floor int64, env func(string) string, lg *slog.Logger) *gctune.Tuner {
	if gogc := env("GOGC"); gogc != "" {
		lg.Info("GOGC is set in the environment; --gc-min-heap-bytes is not applied", "gogc", gogc)
		return gctune.Start(0)
	}
	t := gctune.Start(uint64(max(floor, 0)))
	if t.Active() {
		lg.Info("garbage collector heap goal kept at least --gc-min-heap-bytes", "bytes", floor, "base-gogc", t.Base())
	}
	return t
}

// prefaultGCFloor touches the floor's heap memory in the background
// (gctune.Tuner.Prefault), so the first seconds of load do not pay a page
// fault for each new page of heap; the member serves meanwhile. The
// returned func ends the wait for its log line and returns once nothing
// logs any more: serve calls it before it returns, since its caller may
// reuse the log's writer (tests read it).
func prefaultGCFloor(t *gctune.Tuner, lg *slog.Logger) (stopReporting func()) {
	if !t.Active() {
		return func() {}
	}
	start := time.Now()
	done := t.Prefault()
	stop, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-done:
			lg.Info("garbage collector heap floor prefaulted", "took", time.Since(start).Round(time.Millisecond).String())
		case <-stop:
		}
	}()
	return func() {
		close(stop)
		<-exited
	}
}

// startProcs starts the processor-count controller (--adaptive-procs)
// unless it is off or the operator chose GOMAXPROCS in the environment.
func startProcs(enabled bool, env func(string) string, lg *slog.Logger) *procs.Controller {
	if !enabled {
		return procs.Start(procs.Config{Max: 1})
	}
	if n := env("GOMAXPROCS"); n != "" {
		lg.Info("GOMAXPROCS is set in the environment; --adaptive-procs is not applied", "gomaxprocs", n)
		return procs.Start(procs.Config{Max: 1})
	}
	c := procs.Start(procs.Config{Logger: lg})
	if c.Active() {
		lg.Info("GOMAXPROCS adapts to load (--adaptive-procs)", "max", c.Max())
	}
	return c
}

func newServeCmd(a *app) *cobra.Command {
	var o *serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a Tenure member",
		Long: "Run a Tenure member. Flags have etcd's names and meanings; each can also be set by\n" +
			"TENURE_<FLAG_NAME> (e.g. TENURE_INITIAL_CLUSTER), and a command-line flag wins.\n" +
			"A bad configuration prints every problem and exits with status 2.",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return withCode(exitConfig, fmt.Errorf("serve takes no arguments, got %q", args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, warnings, err := o.finish(cmd.Flags(), a.env)
			if err != nil {
				for _, w := range warnings {
					fmt.Fprintf(a.stderr, "Warning: %s\n", w)
				}
				return withCode(exitConfig, err)
			}
			known := map[string]bool{}
			for _, n := range flagNames(cmd.Flags()) {
				known[envName(n)] = true
				known[prefixedEnvName(etcdEnvPrefix, n)] = true
			}
			for _, n := range clientFlagNames {
				known[envName(n)] = true
			}
			known["TENURE_FAILPOINTS"] = true // read by server/failpoint (crash tests)
			warnings = append(warnings, unknownEnv(a.environ(), known)...)

			lg, err := server.NewLogger(cfg.LogLevel, cfg.LogFormat, a.stderr)
			if err != nil {
				return withCode(exitConfig, err)
			}
			cfg.Logger = lg
			for _, w := range warnings {
				lg.Warn(w)
			}
			tuner := startGCTuner(o.gcMinHeap, a.env, lg)
			defer tuner.Stop()
			defer prefaultGCFloor(tuner, lg)()
			pc := startProcs(o.adaptProcs, a.env, lg)
			defer pc.Stop()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := server.Run(ctx, cfg); err != nil && !errors.Is(err, context.Canceled) {
				return withCode(exitError, err)
			}
			return nil
		},
	}
	o = bindServeFlags(cmd.Flags())
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return withCode(exitConfig, fmt.Errorf("%w (see 'tenure serve --help')", err))
	})
	return cmd
}

// experimentalSpellings accepts --experimental-<name>, hidden, for each
// named flag: the same setting under etcd's pre-3.6 spelling.
func experimentalSpellings(fs *pflag.FlagSet, names ...string) {
	for _, name := range names {
		f := fs.Lookup(name)
		fs.Var(f.Value, "experimental-"+name, "same as --"+name)
		_ = fs.MarkHidden("experimental-" + name)
	}
}
