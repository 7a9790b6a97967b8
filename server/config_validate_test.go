package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func threeMember(name string) Config {
	c := DefaultConfig()
	c.Name = name
	c.InitialCluster = "a=http://10.0.0.1:2380,b=http://10.0.0.2:2380,c=http://10.0.0.3:2380"
	switch name {
	case "a":
		c.InitialAdvertisePeerURLs = []string{"http://10.0.0.1:2380"}
	case "b":
		c.InitialAdvertisePeerURLs = []string{"http://10.0.0.2:2380"}
	case "c":
		c.InitialAdvertisePeerURLs = []string{"http://10.0.0.3:2380"}
	}
	return c
}

func TestValidateDefaultConfigIsValid(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	if c.DataDir != "" || c.InitialCluster != "" {
		t.Fatalf("Validate changed the config: %+v", c)
	}
	if ws := c.Warnings(); len(ws) != 0 {
		t.Fatalf("DefaultConfig().Warnings() = %q, want none", ws)
	}
	c3 := threeMember("b")
	if err := c3.Validate(); err != nil {
		t.Fatalf("three-member config: %v", err)
	}
}

func TestValidateRules(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want []string // substrings; each must appear in the error
	}{
		{"empty name", func(c *Config) { c.Name = ""; c.DataDir = "x"; c.InitialCluster = "default=http://127.0.0.1:2380" },
			[]string{"--name: must not be empty"}},
		{"name with comma", func(c *Config) { c.Name = "a,b" }, []string{`--name: "a,b" must not contain`}},
		{"no port", func(c *Config) { c.ListenClientURLs = []string{"http://127.0.0.1"} },
			[]string{`--listen-client-urls: URL "http://127.0.0.1" has no port`}},
		{"bad scheme", func(c *Config) { c.AdvertiseClientURLs = []string{"ftp://h:1"} },
			[]string{`--advertise-client-urls: URL "ftp://h:1": scheme must be http or https`}},
		{"no scheme", func(c *Config) { c.AdvertiseClientURLs = []string{"127.0.0.1:2379"} },
			[]string{`--advertise-client-urls: URL "127.0.0.1:2379"`}},
		{"path", func(c *Config) { c.ListenPeerURLs = []string{"http://h:2380/x"} },
			[]string{`--listen-peer-urls: URL "http://h:2380/x" must not contain a path`}},
		{"bad port", func(c *Config) { c.ListenPeerURLs = []string{"http://h:99999"} },
			[]string{`--listen-peer-urls: URL "http://h:99999" has an invalid port`}},
		{"port 0 advertised", func(c *Config) { c.AdvertiseClientURLs = []string{"http://h:0"} },
			[]string{`--advertise-client-urls: URL "http://h:0" has an invalid port`}},
		{"empty host", func(c *Config) { c.ListenPeerURLs = []string{"http://:2380"} },
			[]string{`--listen-peer-urls: URL "http://:2380" has no host`}},
		{"bad metrics", func(c *Config) { c.ListenMetricsURLs = []string{"http://h"} },
			[]string{`--listen-metrics-urls: URL "http://h" has no port`}},
		{"no catch-up entries", func(c *Config) { c.SnapshotCatchUpEntries = 0 }, []string{"--snapshot-catchup-entries: must be > 0"}},
		{"client cert without key", func(c *Config) { c.ClientTLS.ClientCertFile = "c.pem" },
			[]string{"--client-cert-file: --client-cert-file and --client-key-file must be given together"}},
		{"peer client cert without a peer cert", func(c *Config) { c.PeerTLS.ClientCertFile, c.PeerTLS.ClientKeyFile = "c.pem", "k.pem" },
			[]string{"--peer-client-cert-file: needs --peer-cert-file"}},
		{"bad client http", func(c *Config) { c.ListenClientHTTPURLs = []string{"ftp://h:1"} },
			[]string{`--listen-client-http-urls: URL "ftp://h:1": scheme must be http or https`}},
		{"empty listen client", func(c *Config) { c.ListenClientURLs = nil }, []string{"--listen-client-urls: must list at least one URL"}},
		{"empty advertise client", func(c *Config) { c.AdvertiseClientURLs = nil }, []string{"--advertise-client-urls: must list at least one URL"}},
		{"empty listen peer", func(c *Config) { c.ListenPeerURLs = nil }, []string{"--listen-peer-urls: must list at least one URL"}},
		{"empty advertise peer", func(c *Config) { c.InitialAdvertisePeerURLs = nil; c.InitialCluster = "default=http://127.0.0.1:2380" },
			[]string{"--initial-advertise-peer-urls: must list at least one URL"}},
		{"member without URL", func(c *Config) { c.InitialCluster = "a=http://10.0.0.1:2380,b=" },
			[]string{`--initial-cluster: member "b" has no URL`}},
		{"entry without =", func(c *Config) { c.InitialCluster = "a=http://10.0.0.1:2380,b" },
			[]string{`--initial-cluster: entry "b" is not name=url`}},
		{"entry without name", func(c *Config) { c.InitialCluster = "a=http://10.0.0.1:2380,=http://10.0.0.9:2380" },
			[]string{`--initial-cluster: entry "=http://10.0.0.9:2380" has no member name`}},
		{"empty entry", func(c *Config) { c.InitialCluster = "a=http://10.0.0.1:2380,,b=http://10.0.0.2:2380" },
			[]string{"--initial-cluster: entry 2 is empty"}},
		{"cluster bad URL", func(c *Config) { c.InitialCluster = "a=http://10.0.0.1:2380,b=10.0.0.2" },
			[]string{`--initial-cluster: member "b": URL "10.0.0.2"`}},
		{"duplicate URL", func(c *Config) { c.InitialCluster = "a=http://10.0.0.1:2380,b=http://10.0.0.1:2380" },
			[]string{`--initial-cluster: URL "http://10.0.0.1:2380" is listed for both member "a" and member "b"`}},
		{"name not in cluster", func(c *Config) { c.Name = "z"; c.DataDir = "z" },
			[]string{`--initial-cluster: this member's --name "z" is not listed (want z=<peer URL>)`}},
		{"advertise mismatch", func(c *Config) { c.InitialAdvertisePeerURLs = []string{"http://10.0.0.9:2380"} },
			[]string{`--initial-advertise-peer-urls: http://10.0.0.9:2380 does not match the URLs --initial-cluster lists for member "a" (http://10.0.0.1:2380)`}},
		{"advertise subset", func(c *Config) {
			c.InitialCluster = "a=http://10.0.0.1:2380,a=http://10.0.1.1:2380,b=http://10.0.0.2:2380,c=http://10.0.0.3:2380"
		}, []string{`--initial-advertise-peer-urls: http://10.0.0.1:2380 does not match`}},
		{"cluster state", func(c *Config) { c.InitialClusterState = "old" },
			[]string{`--initial-cluster-state: "old" is not one of new, existing`}},
		{"heartbeat zero", func(c *Config) { c.HeartbeatInterval = 0 }, []string{"--heartbeat-interval: must be > 0 (set to 0ms)"}},
		{"heartbeat negative", func(c *Config) { c.HeartbeatInterval = -time.Millisecond }, []string{"--heartbeat-interval: must be > 0"}},
		{"election zero", func(c *Config) { c.ElectionTimeout = 0 }, []string{"--election-timeout: must be > 0"}},
		{"election < 5x heartbeat", func(c *Config) {
			c.HeartbeatInterval = 250 * time.Millisecond
			c.ElectionTimeout = 1000 * time.Millisecond
		},
			[]string{"--election-timeout: 1000ms must be at least 5 times --heartbeat-interval (250ms), i.e. >= 1250ms"}},
		{"election too long", func(c *Config) { c.ElectionTimeout = 50001 * time.Millisecond },
			[]string{"--election-timeout: 50001ms is too long, must be at most 50000ms"}},
		{"snapshot count", func(c *Config) { c.SnapshotCount = 0 }, []string{"--snapshot-count: must be > 0"}},
		{"quota negative", func(c *Config) { c.QuotaBackendBytes = -1 }, []string{"--quota-backend-bytes: must be >= 0"}},
		{"max request zero", func(c *Config) { c.MaxRequestBytes = 0 }, []string{"--max-request-bytes: must be > 0"}},
		{"max request too big", func(c *Config) { c.MaxRequestBytes = 64<<20 + 1 }, []string{"--max-request-bytes: 67108865 is more than the maximum"}},
		{"max txn ops", func(c *Config) { c.MaxTxnOps = 0 }, []string{"--max-txn-ops: must be > 0"}},
		{"log level", func(c *Config) { c.LogLevel = "verbose" }, []string{`--log-level: "verbose" is not one of debug, info, warn, error`}},
		{"log format", func(c *Config) { c.LogFormat = "xml" }, []string{`--log-format: "xml" is not one of json, text`}},
		{"request timeout", func(c *Config) { c.RequestTimeout = -1 }, []string{"RequestTimeout: must be > 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := threeMember("a")
			tt.mod(&c)
			err := c.Validate()
			if err == nil {
				t.Fatalf("Validate() = nil, want errors containing %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

func TestValidateBoundariesAccepted(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
	}{
		{"election exactly 5x heartbeat", func(c *Config) { c.HeartbeatInterval = 200 * time.Millisecond; c.ElectionTimeout = time.Second }},
		{"election exactly 50s", func(c *Config) { c.HeartbeatInterval = time.Second; c.ElectionTimeout = 50 * time.Second }},
		{"quota 0 means default", func(c *Config) { c.QuotaBackendBytes = 0 }},
		{"max request exactly 64MiB", func(c *Config) { c.MaxRequestBytes = 64 << 20 }},
		{"https and hostnames", func(c *Config) {
			c.AdvertiseClientURLs = []string{"https://node-a.example.com:2379", "http://[::1]:2379"}
		}},
		{"listen on port 0", func(c *Config) { c.ListenClientURLs = []string{"http://127.0.0.1:0"} }},
		{"trailing slash", func(c *Config) { c.ListenClientURLs = []string{"http://127.0.0.1:2379/"} }},
		{"repeated name, several URLs, any order", func(c *Config) {
			c.InitialCluster = "a=http://10.0.1.1:2380,b=http://10.0.0.2:2380,a=http://10.0.0.1:2380,c=http://10.0.0.3:2380"
			c.InitialAdvertisePeerURLs = []string{"http://10.0.0.1:2380", "http://10.0.1.1:2380"}
		}},
		{"existing", func(c *Config) { c.InitialClusterState = "existing" }},
		{"debug text", func(c *Config) { c.LogLevel = "debug"; c.LogFormat = "text" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := threeMember("a")
			tt.mod(&c)
			if err := c.Validate(); err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := threeMember("a")
	c.InitialCluster = "a=http://10.0.0.1:2380,b="
	c.HeartbeatInterval = 0
	c.LogLevel = "loud"
	c.MaxTxnOps = -1
	c.ListenClientURLs = []string{"http://x", "http://y:1"}
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate() = nil")
	}
	want := []string{
		`--listen-client-urls: URL "http://x" has no port`,
		`--initial-cluster: member "b" has no URL`,
		"--heartbeat-interval: must be > 0",
		"--max-txn-ops: must be > 0",
		`--log-level: "loud"`,
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%s", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("problem %d = %q, want prefix %q", i, lines[i], w)
		}
	}
	// errors.Join: each problem is its own error.
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != len(want) {
		t.Errorf("error is not a join of %d errors: %#v", len(want), err)
	}
}

func TestApplyDefaults(t *testing.T) {
	c := DefaultConfig()
	c.ApplyDefaults()
	if c.DataDir != "default.tenure" {
		t.Errorf("DataDir = %q, want default.tenure", c.DataDir)
	}
	if c.InitialCluster != "default=http://127.0.0.1:2380" {
		t.Errorf("InitialCluster = %q", c.InitialCluster)
	}

	c = Config{Name: "n1", InitialAdvertisePeerURLs: []string{"http://h:1", "http://h:2"}, DataDir: "/d", InitialCluster: ""}
	c.ApplyDefaults()
	if c.DataDir != "/d" {
		t.Errorf("DataDir overwritten: %q", c.DataDir)
	}
	if c.InitialCluster != "n1=http://h:1,n1=http://h:2" {
		t.Errorf("InitialCluster = %q", c.InitialCluster)
	}
	if c.InitialClusterState != "new" || c.InitialClusterToken != DefaultClusterToken ||
		c.QuotaBackendBytes != DefaultQuotaBackendBytes || c.LogLevel != "info" || c.LogFormat != "json" ||
		c.RequestTimeout != DefaultRequestTimeout || c.LeaseCheckpointInterval != DefaultLeaseCheckpoint ||
		c.WatchProgressNotifyInterval != DefaultWatchProgressNotify {
		t.Errorf("defaults not filled: %+v", c)
	}
	// Explicit zeros that are mistakes stay, for Validate to report.
	if c.HeartbeatInterval != 0 || c.SnapshotCount != 0 || c.MaxTxnOps != 0 {
		t.Errorf("ApplyDefaults filled a tunable that Validate must report: %+v", c)
	}
	// Explicit values are kept.
	c = threeMember("b")
	c.InitialClusterState = "existing"
	before := c.InitialCluster
	c.ApplyDefaults()
	if c.InitialCluster != before || c.InitialClusterState != "existing" || c.DataDir != "b.tenure" {
		t.Errorf("ApplyDefaults changed explicit values: %+v", c)
	}
}

func TestWarnings(t *testing.T) {
	tests := []struct {
		cluster string
		want    []string // substrings of the single warning; nil = no warning
	}{
		{"a=http://h:1", nil},
		{"a=http://h:1,b=http://h:2", []string{"2 members", "tolerate 0 failure(s), the same as 1", "2 of 2"}},
		{"a=http://h:1,b=http://h:2,c=http://h:3", nil},
		{"a=http://h:1,b=http://h:2,c=http://h:3,d=http://h:4", []string{"4 members", "tolerate 1 failure(s), the same as 3", "quorum needs 3 of 4", "3 or 5"}},
		{"a=http://h:1,a=http://h:5,b=http://h:2,c=http://h:3", nil}, // 3 members, 4 URLs
		{"a=http://h:1,b=http://h:2,c=http://h:3,d=http://h:4,e=http://h:5,f=http://h:6", []string{"6 members", "tolerate 2 failure(s), the same as 5", "4 of 6"}},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		c.Name = "a"
		c.InitialCluster = tt.cluster
		ws := c.Warnings()
		if tt.want == nil {
			if len(ws) != 0 {
				t.Errorf("%s: Warnings() = %q, want none", tt.cluster, ws)
			}
			continue
		}
		if len(ws) != 1 {
			t.Fatalf("%s: Warnings() = %q, want one", tt.cluster, ws)
		}
		for _, w := range tt.want {
			if !strings.Contains(ws[0], w) {
				t.Errorf("%s: warning %q lacks %q", tt.cluster, ws[0], w)
			}
		}
	}
	c := DefaultConfig()
	c.MaxRequestBytes = 20 << 20
	c.QuotaBackendBytes = 16 << 30
	if ws := c.Warnings(); len(ws) != 2 {
		t.Errorf("Warnings() = %q, want request-size and quota warnings", ws)
	}
}

func TestParseInitialCluster(t *testing.T) {
	ms, err := ParseInitialCluster(" a=http://h:1 , b=https://h:2,a=http://h:3")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Name != "a" || ms[1].Name != "b" ||
		strings.Join(ms[0].PeerURLs, ",") != "http://h:1,http://h:3" || strings.Join(ms[1].PeerURLs, ",") != "https://h:2" {
		t.Fatalf("ParseInitialCluster = %+v", ms)
	}
	for _, bad := range []string{"", "a", "a=", "=http://h:1", "a=http://h", "a=http://h:1,a=http://h:1", "a=http://h:1,"} {
		if _, err := ParseInitialCluster(bad); err == nil {
			t.Errorf("ParseInitialCluster(%q) = nil error", bad)
		}
	}
	_, err = ParseInitialCluster("a=,b=x,c")
	if err == nil || strings.Count(err.Error(), "\n") != 2 {
		t.Errorf("want three problems, got %v", err)
	}
}

func FuzzParseInitialCluster(f *testing.F) {
	f.Add("a=http://h:1,b=http://h:2")
	f.Add("a=,=b,,c=http://[::1]:0")
	f.Fuzz(func(t *testing.T, s string) {
		ms, err := ParseInitialCluster(s)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, m := range ms {
			if m.Name == "" || len(m.PeerURLs) == 0 || seen[m.Name] {
				t.Fatalf("bad member %+v from %q", m, s)
			}
			seen[m.Name] = true
			for _, u := range m.PeerURLs {
				if _, err := checkURL(u, false); err != nil {
					t.Fatalf("accepted bad URL %q: %v", u, err)
				}
			}
		}
	})
}

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	lg, err := NewLogger("warn", "json", &buf)
	if err != nil {
		t.Fatal(err)
	}
	lg.Info("hidden")
	lg.Warn("shown", LogKeyMember, "a")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("not one JSON record: %q: %v", buf.String(), err)
	}
	if rec["msg"] != "shown" || rec["level"] != "WARN" || rec["member"] != "a" {
		t.Errorf("record = %v", rec)
	}
	if ts, ok := rec["time"].(string); !ok || !strings.HasSuffix(ts, "Z") {
		t.Errorf("time = %v, want UTC RFC 3339", rec["time"])
	}

	buf.Reset()
	lg, err = NewLogger("debug", "text", &buf)
	if err != nil {
		t.Fatal(err)
	}
	lg.Debug("hello", "k", 1)
	if s := buf.String(); !strings.Contains(s, "level=DEBUG") || !strings.Contains(s, "msg=hello") || !strings.Contains(s, "k=1") {
		t.Errorf("text record = %q", s)
	}

	if _, err := NewLogger("loud", "json", &buf); err == nil || !strings.Contains(err.Error(), "--log-level") {
		t.Errorf("bad level: err = %v", err)
	}
	if _, err := NewLogger("info", "xml", &buf); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("bad format: err = %v", err)
	}
}
