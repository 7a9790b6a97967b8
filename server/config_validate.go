package server

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tenure-io/tenure/server/compactor"
	"github.com/tenure-io/tenure/server/raftnode"
)

// Limits enforced by Validate.
const (
	// MaxElectionTimeout is the longest accepted --election-timeout (etcd's
	// maxElectionMs).
	MaxElectionTimeout = 50 * time.Second
	// MinElectionHeartbeatRatio: --election-timeout must be at least this many
	// times --heartbeat-interval (etcd's rule).
	MinElectionHeartbeatRatio = 5
	// MaxMaxRequestBytes is the largest accepted --max-request-bytes.
	MaxMaxRequestBytes = 64 << 20
	// RecommendedMaxRequestBytes: above this Warnings says so (etcd: 10 MiB).
	RecommendedMaxRequestBytes = 10 << 20
	// RecommendedMaxQuotaBackendBytes: above this Warnings says so (etcd: 8 GiB).
	RecommendedMaxQuotaBackendBytes = 8 << 30
)

// ClusterMember is one member of --initial-cluster: a name and every peer URL
// listed for it (a name may be given several times, once per URL).
type ClusterMember struct {
	Name     string
	PeerURLs []string
}

// ParseInitialCluster parses --initial-cluster syntax, name=url[,name=url...].
// A name may repeat to list several peer URLs for one member, as etcd allows;
// the result has one entry per distinct name, in order of first appearance,
// with its URLs in the order given. Every URL must be http(s)://host:port.
// All problems are reported at once (errors.Join), and a URL given twice,
// for the same or different members, is an error.
func ParseInitialCluster(s string) ([]ClusterMember, error) {
	ms, probs := parseInitialCluster(s)
	if len(probs) > 0 {
		errs := make([]error, len(probs))
		for i, p := range probs {
			errs[i] = errors.New(p)
		}
		return nil, errors.Join(errs...)
	}
	return ms, nil
}

// parseInitialCluster returns the members it could parse and a list of
// problems (without the flag prefix).
func parseInitialCluster(s string) ([]ClusterMember, []string) {
	var probs []string
	if strings.TrimSpace(s) == "" {
		return nil, []string{"is empty (want name=url[,name=url...])"}
	}
	var members []ClusterMember
	index := map[string]int{}
	seenURL := map[string]string{} // normalized URL -> member name
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			probs = append(probs, fmt.Sprintf("entry %d is empty (want name=url)", i+1))
			continue
		}
		name, rawURL, ok := strings.Cut(entry, "=")
		name, rawURL = strings.TrimSpace(name), strings.TrimSpace(rawURL)
		if !ok {
			probs = append(probs, fmt.Sprintf("entry %q is not name=url", entry))
			continue
		}
		if name == "" {
			probs = append(probs, fmt.Sprintf("entry %q has no member name", entry))
			continue
		}
		if rawURL == "" {
			probs = append(probs, fmt.Sprintf("member %q has no URL", name))
			continue
		}
		norm, err := checkURL(rawURL, false)
		if err != nil {
			probs = append(probs, fmt.Sprintf("member %q: %v", name, err))
			continue
		}
		if other, dup := seenURL[norm]; dup {
			if other == name {
				probs = append(probs, fmt.Sprintf("member %q lists URL %q twice", name, rawURL))
			} else {
				probs = append(probs, fmt.Sprintf("URL %q is listed for both member %q and member %q", rawURL, other, name))
			}
			continue
		}
		seenURL[norm] = name
		j, ok := index[name]
		if !ok {
			j = len(members)
			index[name] = j
			members = append(members, ClusterMember{Name: name})
		}
		members[j].PeerURLs = append(members[j].PeerURLs, rawURL)
	}
	return members, probs
}

// checkURL checks that s is http(s)://host:port with nothing else (no path,
// query, fragment or user info) and returns a normalized form for
// comparisons. listen allows port 0 (pick any free port).
func checkURL(s string, listen bool) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("URL %q does not parse: %v", s, unwrapURLError(err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("URL %q: scheme must be http or https (want http(s)://host:port)", s)
	}
	if u.Opaque != "" || u.Host == "" {
		return "", fmt.Errorf("URL %q has no host (want http(s)://host:port)", s)
	}
	if u.User != nil {
		return "", fmt.Errorf("URL %q must not contain user info", s)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("URL %q must not contain a path, query or fragment (want http(s)://host:port)", s)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || port == "" {
		return "", fmt.Errorf("URL %q has no port (want http(s)://host:port)", s)
	}
	if host == "" {
		return "", fmt.Errorf("URL %q has no host (want http(s)://host:port)", s)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 || (p == 0 && !listen) {
		return "", fmt.Errorf("URL %q has an invalid port %q", s, port)
	}
	return u.Scheme + "://" + strings.ToLower(net.JoinHostPort(host, strconv.Itoa(p))), nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// ApplyDefaults fills settings whose empty value means "the default":
//
//   - DataDir ""                → "<name>.tenure" (./default.tenure for the default member)
//   - InitialCluster ""         → "<name>=<url>" for each --initial-advertise-peer-urls URL
//     (etcd does the same; listing only the first would fail the rule that a
//     member's advertised peer URLs match its --initial-cluster entry)
//   - InitialClusterState ""    → "new"
//   - InitialClusterToken ""    → DefaultClusterToken
//   - QuotaBackendBytes 0       → DefaultQuotaBackendBytes
//   - LogLevel "", LogFormat "" → "info", "json"
//   - RequestTimeout, LeaseCheckpointInterval, LeaseExpiryRate, WatchProgressNotifyInterval,
//     WarningApplyDuration, WarningUnaryRequestDuration 0 → their defaults
//
// It does not touch Name, the URL lists, or the tunables where an explicit 0
// is a mistake (HeartbeatInterval, ElectionTimeout, SnapshotCount, SnapshotCatchUpEntries,
// MaxRequestBytes, MaxTxnOps): Validate reports those, as etcd does. Start
// from DefaultConfig() to get every default.
func (c *Config) ApplyDefaults() {
	if c.DataDir == "" && c.Name != "" {
		c.DataDir = c.Name + ".tenure"
	}
	if strings.TrimSpace(c.InitialCluster) == "" && c.Name != "" && len(c.InitialAdvertisePeerURLs) > 0 {
		parts := make([]string, 0, len(c.InitialAdvertisePeerURLs))
		for _, u := range c.InitialAdvertisePeerURLs {
			parts = append(parts, c.Name+"="+u)
		}
		c.InitialCluster = strings.Join(parts, ",")
	}
	if c.InitialClusterState == "" {
		c.InitialClusterState = "new"
	}
	if c.InitialClusterToken == "" {
		c.InitialClusterToken = DefaultClusterToken
	}
	if c.QuotaBackendBytes == 0 {
		c.QuotaBackendBytes = DefaultQuotaBackendBytes
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.LogFormat == "" {
		c.LogFormat = "json"
	}
	if c.LeaseExpiryRate == 0 {
		c.LeaseExpiryRate = DefaultLeaseExpiryRate
	}
	// The keepalive ones: 0 would mean gRPC's own defaults, whose 5-minute
	// minimum ping interval makes the server close clientv3 connections
	// that ping every few seconds (etcd's default is 5 s).
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{&c.RequestTimeout, DefaultRequestTimeout},
		{&c.LeaseCheckpointInterval, DefaultLeaseCheckpoint},
		{&c.WatchProgressNotifyInterval, DefaultWatchProgressNotify},
		{&c.GRPCKeepAliveMinTime, DefaultGRPCKeepAliveMin},
		{&c.GRPCKeepAliveInterval, DefaultGRPCKeepAlive},
		{&c.GRPCKeepAliveTimeout, DefaultGRPCKeepAliveWait},
		{&c.WarningApplyDuration, DefaultWarningApply},
		{&c.WarningUnaryRequestDuration, DefaultWarningUnary},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
}

// Validate reports every problem in the configuration at once (errors.Join,
// one error per problem), each prefixed with the flag it concerns, e.g.
// `--initial-cluster: member "b" has no URL`. It checks the configuration as
// it will run, i.e. with ApplyDefaults applied to a copy; c is not changed.
func (c *Config) Validate() error {
	cc := *c
	cc.ApplyDefaults()
	var errs []error
	add := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", flag, fmt.Sprintf(format, args...)))
	}

	if strings.TrimSpace(cc.Name) == "" {
		add("--name", "must not be empty")
	} else if strings.ContainsAny(cc.Name, "=,") {
		add("--name", "%q must not contain '=' or ','", cc.Name)
	}
	if strings.TrimSpace(cc.DataDir) == "" {
		add("--data-dir", "must not be empty")
	}

	checkURLs := func(flag string, urls []string, required, listen bool) []string {
		if len(urls) == 0 {
			if required {
				add(flag, "must list at least one URL")
			}
			return nil
		}
		var norm []string
		for _, u := range urls {
			n, err := checkURL(strings.TrimSpace(u), listen)
			if err != nil {
				add(flag, "%v", err)
				continue
			}
			norm = append(norm, n)
		}
		return norm
	}
	checkURLs("--listen-client-urls", cc.ListenClientURLs, true, true)
	checkURLs("--advertise-client-urls", cc.AdvertiseClientURLs, true, false)
	checkURLs("--listen-peer-urls", cc.ListenPeerURLs, true, true)
	advPeers := checkURLs("--initial-advertise-peer-urls", cc.InitialAdvertisePeerURLs, true, false)
	checkURLs("--listen-metrics-urls", cc.ListenMetricsURLs, false, true)
	checkURLs("--listen-client-http-urls", cc.ListenClientHTTPURLs, false, true)

	members, probs := parseInitialCluster(cc.InitialCluster)
	for _, p := range probs {
		add("--initial-cluster", "%s", p)
	}
	if len(probs) == 0 && strings.TrimSpace(cc.Name) != "" {
		i := slices.IndexFunc(members, func(m ClusterMember) bool { return m.Name == cc.Name })
		if i < 0 {
			add("--initial-cluster", "this member's --name %q is not listed (want %s=<peer URL>)", cc.Name, cc.Name)
		} else if len(advPeers) == len(cc.InitialAdvertisePeerURLs) && len(advPeers) > 0 {
			var listed []string
			for _, u := range members[i].PeerURLs {
				n, _ := checkURL(u, false) // already checked by parseInitialCluster
				listed = append(listed, n)
			}
			if !sameSet(listed, advPeers) {
				add("--initial-advertise-peer-urls", "%s does not match the URLs --initial-cluster lists for member %q (%s)",
					strings.Join(cc.InitialAdvertisePeerURLs, ","), cc.Name, strings.Join(members[i].PeerURLs, ","))
			}
		}
	}

	switch cc.InitialClusterState {
	case "new", "existing":
	default:
		add("--initial-cluster-state", "%q is not one of new, existing", cc.InitialClusterState)
	}

	hbOK := true
	if cc.HeartbeatInterval <= 0 {
		add("--heartbeat-interval", "must be > 0 (set to %dms)", cc.HeartbeatInterval.Milliseconds())
		hbOK = false
	}
	switch {
	case cc.ElectionTimeout <= 0:
		add("--election-timeout", "must be > 0 (set to %dms)", cc.ElectionTimeout.Milliseconds())
	case cc.ElectionTimeout > MaxElectionTimeout:
		add("--election-timeout", "%dms is too long, must be at most %dms", cc.ElectionTimeout.Milliseconds(), MaxElectionTimeout.Milliseconds())
	case hbOK && cc.ElectionTimeout < MinElectionHeartbeatRatio*cc.HeartbeatInterval:
		add("--election-timeout", "%dms must be at least %d times --heartbeat-interval (%dms), i.e. >= %dms",
			cc.ElectionTimeout.Milliseconds(), MinElectionHeartbeatRatio, cc.HeartbeatInterval.Milliseconds(),
			(MinElectionHeartbeatRatio * cc.HeartbeatInterval).Milliseconds())
	}

	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--grpc-keepalive-min-time", cc.GRPCKeepAliveMinTime},
		{"--warning-apply-duration", cc.WarningApplyDuration},
		{"--warning-unary-request-duration", cc.WarningUnaryRequestDuration},
		{"--grpc-keepalive-interval", cc.GRPCKeepAliveInterval},
		{"--grpc-keepalive-timeout", cc.GRPCKeepAliveTimeout},
	} {
		if d.v < 0 {
			add(d.flag, "must be > 0 (0 for the default), got %v", d.v)
		}
	}

	if cc.SnapshotCount == 0 {
		add("--snapshot-count", "must be > 0")
	}
	if cc.SnapshotCatchUpEntries == 0 {
		add("--snapshot-catchup-entries", "must be > 0")
	}
	if cc.QuotaBackendBytes < 0 {
		add("--quota-backend-bytes", "must be >= 0 (0 means the default, %d), got %d", DefaultQuotaBackendBytes, cc.QuotaBackendBytes)
	}
	if cc.MaxRequestBytes <= 0 {
		add("--max-request-bytes", "must be > 0, got %d", cc.MaxRequestBytes)
	} else if cc.MaxRequestBytes > MaxMaxRequestBytes {
		add("--max-request-bytes", "%d is more than the maximum %d (64 MiB)", cc.MaxRequestBytes, MaxMaxRequestBytes)
	}
	if cc.MaxTxnOps <= 0 {
		add("--max-txn-ops", "must be > 0, got %d", cc.MaxTxnOps)
	}

	switch cc.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		add("--log-level", "%q is not one of debug, info, warn, error", cc.LogLevel)
	}
	switch cc.LogFormat {
	case "json", "text":
	default:
		add("--log-format", "%q is not one of json, text", cc.LogFormat)
	}

	type urlFlag struct {
		flag string
		urls []string
	}
	checkTLS := func(flagPrefix string, t TLSInfo, lists ...urlFlag) {
		if (t.CertFile == "") != (t.KeyFile == "") {
			add("--"+flagPrefix+"cert-file", "--%scert-file and --%skey-file must be given together", flagPrefix, flagPrefix)
		}
		if (t.ClientCertFile == "") != (t.ClientKeyFile == "") {
			add("--"+flagPrefix+"client-cert-file", "--%sclient-cert-file and --%sclient-key-file must be given together", flagPrefix, flagPrefix)
		} else if t.ClientCertFile != "" {
			if t.CertFile == "" {
				add("--"+flagPrefix+"client-cert-file", "needs --%scert-file: it replaces that certificate when this member dials", flagPrefix)
			} else if _, err := t.ClientConfig(); err != nil {
				add("--"+flagPrefix+"client-cert-file", "%v", err)
			}
		}
		if t.ClientCertAuth && t.TrustedCAFile == "" {
			add("--"+flagPrefix+"client-cert-auth", "needs --%strusted-ca-file", flagPrefix)
		}
		for _, l := range lists {
			for _, u := range l.urls {
				if strings.HasPrefix(strings.TrimSpace(u), "https://") && t.CertFile == "" {
					add(l.flag, "%s is https but --%scert-file and --%skey-file are not set", u, flagPrefix, flagPrefix)
				}
			}
		}
		if t.CertFile != "" && t.KeyFile != "" {
			if _, err := t.ServerConfig(); err != nil {
				add("--"+flagPrefix+"cert-file", "%v", err)
			}
		} else if t.TrustedCAFile != "" {
			if _, err := loadCAPool(t.TrustedCAFile); err != nil {
				add("--"+flagPrefix+"trusted-ca-file", "%v", err)
			}
		}
	}
	checkTLS("", cc.ClientTLS, urlFlag{"--listen-client-urls", cc.ListenClientURLs}, urlFlag{"--listen-metrics-urls", cc.ListenMetricsURLs}, urlFlag{"--listen-client-http-urls", cc.ListenClientHTTPURLs})
	checkTLS("peer-", cc.PeerTLS, urlFlag{"--listen-peer-urls", cc.ListenPeerURLs})

	if cc.RequestTimeout < 0 {
		add("RequestTimeout", "must be > 0, got %v", cc.RequestTimeout)
	}
	if cc.LeaseCheckpointInterval < 0 {
		add("--lease-checkpoint-interval", "must be > 0, got %v", cc.LeaseCheckpointInterval)
	}
	if cc.LeaseExpiryRate < 0 {
		add("--lease-expiry-rate", "must be > 0 revocations per second, got %d", cc.LeaseExpiryRate)
	}
	if _, err := compactor.Parse(cc.AutoCompactionMode, cc.AutoCompactionRetention); err != nil {
		errs = append(errs, err) // it names its flag
	}
	if cc.ThriftyReplication < 0 || cc.ThriftyReplication > raftnode.MaxThriftyDelay {
		add("--thrifty-replication", "must be between 0 (off) and %v, got %v", raftnode.MaxThriftyDelay, cc.ThriftyReplication)
	}
	if cc.WatchProgressNotifyInterval < 0 {
		add("--watch-progress-notify-interval", "must be > 0, got %v", cc.WatchProgressNotifyInterval)
	}
	return errors.Join(errs...)
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// Warnings returns advice about a configuration that is valid but unwise,
// checked (like Validate) with ApplyDefaults applied to a copy. An
// even-sized initial cluster is the main one.
func (c *Config) Warnings() []string {
	cc := *c
	cc.ApplyDefaults()
	var ws []string
	if members, err := ParseInitialCluster(cc.InitialCluster); err == nil {
		if n := len(members); n > 0 && n%2 == 0 {
			ws = append(ws, evenClusterWarning(n))
		}
	}
	if cc.MaxRequestBytes > RecommendedMaxRequestBytes && cc.MaxRequestBytes <= MaxMaxRequestBytes {
		ws = append(ws, fmt.Sprintf("--max-request-bytes: %d is more than the recommended %d (10 MiB); "+
			"large requests delay heartbeats and can cause needless elections", cc.MaxRequestBytes, RecommendedMaxRequestBytes))
	}
	if cc.QuotaBackendBytes > RecommendedMaxQuotaBackendBytes {
		ws = append(ws, fmt.Sprintf("--quota-backend-bytes: %d is more than the recommended %d (8 GiB); "+
			"a coordinator is not a database, and big stores make snapshots and recovery slow", cc.QuotaBackendBytes, int64(RecommendedMaxQuotaBackendBytes)))
	}
	return ws
}

func evenClusterWarning(n int) string {
	quorum := n/2 + 1
	tolerates := (n - 1) / 2
	return fmt.Sprintf("--initial-cluster: %d members is an even number, which adds no failure tolerance: "+
		"%d members tolerate %d failure(s), the same as %d member(s) do, but a quorum needs %d of %d instead of %d of %d, "+
		"so there are more ways to lose it; use an odd size such as 3 or 5",
		n, n, tolerates, n-1, quorum, n, (n-1)/2+1, n-1)
}
