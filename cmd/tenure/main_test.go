package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/server"
)

func mapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseServeConfigDefaults(t *testing.T) {
	cfg, warnings, err := parseServeConfig(nil, mapEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	if w := append(warnings, cfg.Warnings()...); len(w) != 0 {
		t.Errorf("warnings = %q", w)
	}
	want := server.DefaultConfig()
	want.ApplyDefaults()
	if cfg.Name != "default" || cfg.DataDir != "default.tenure" || cfg.InitialCluster != "default=http://127.0.0.1:2380" ||
		cfg.HeartbeatInterval != want.HeartbeatInterval || cfg.ElectionTimeout != want.ElectionTimeout ||
		cfg.SnapshotCount != want.SnapshotCount || cfg.QuotaBackendBytes != want.QuotaBackendBytes ||
		cfg.MaxRequestBytes != want.MaxRequestBytes || cfg.MaxTxnOps != want.MaxTxnOps ||
		!slices.Equal(cfg.ListenClientURLs, want.ListenClientURLs) || cfg.LogFormat != "json" || cfg.LogLevel != "info" ||
		cfg.InitialClusterState != "new" || cfg.InitialClusterToken != server.DefaultClusterToken || len(cfg.ListenMetricsURLs) != 0 ||
		cfg.RequestTimeout != want.RequestTimeout {
		t.Errorf("defaults: got %+v\nwant %+v", cfg, want)
	}
}

func TestParseServeConfig(t *testing.T) {
	cluster3 := "a=http://10.0.0.1:2380,b=http://10.0.0.2:2380,c=http://10.0.0.3:2380"
	member := []string{"--name=a", "--initial-advertise-peer-urls=http://10.0.0.1:2380"}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, c server.Config)
		wantErr []string // substrings of the error; nil = success
		wantW   []string // substrings each expected in some warning
		noWarn  bool
	}{
		{
			name: "every flag",
			args: []string{
				"--name", "a", "--data-dir", "/var/lib/a",
				"--listen-client-urls", "http://0.0.0.0:2379, http://127.0.0.1:12379",
				"--advertise-client-urls=http://10.0.0.1:2379",
				"--listen-peer-urls=http://0.0.0.0:2380",
				"--initial-advertise-peer-urls=http://10.0.0.1:2380",
				"--initial-cluster=" + cluster3,
				"--initial-cluster-state=existing", "--initial-cluster-token=tok",
				"--heartbeat-interval=50", "--election-timeout=500",
				"--snapshot-count=5", "--quota-backend-bytes=1024", "--max-request-bytes=2048", "--max-txn-ops=7",
				"--listen-metrics-urls=http://127.0.0.1:9090",
				"--log-level=debug", "--log-format=text",
			},
			check: func(t *testing.T, c server.Config) {
				if c.Name != "a" || c.DataDir != "/var/lib/a" || c.InitialCluster != cluster3 ||
					c.InitialClusterState != "existing" || c.InitialClusterToken != "tok" ||
					c.HeartbeatInterval != 50*time.Millisecond || c.ElectionTimeout != 500*time.Millisecond ||
					c.SnapshotCount != 5 || c.QuotaBackendBytes != 1024 || c.MaxRequestBytes != 2048 || c.MaxTxnOps != 7 ||
					c.LogLevel != "debug" || c.LogFormat != "text" ||
					!slices.Equal(c.ListenClientURLs, []string{"http://0.0.0.0:2379", "http://127.0.0.1:12379"}) ||
					!slices.Equal(c.AdvertiseClientURLs, []string{"http://10.0.0.1:2379"}) ||
					!slices.Equal(c.ListenPeerURLs, []string{"http://0.0.0.0:2380"}) ||
					!slices.Equal(c.InitialAdvertisePeerURLs, []string{"http://10.0.0.1:2380"}) ||
					!slices.Equal(c.ListenMetricsURLs, []string{"http://127.0.0.1:9090"}) {
					t.Errorf("got %+v", c)
				}
			},
			noWarn: true,
		},
		{
			name: "every flag from the environment",
			env: map[string]string{
				"TENURE_NAME": "b", "TENURE_DATA_DIR": "/d",
				"TENURE_LISTEN_CLIENT_URLS":          "http://0.0.0.0:2379,http://0.0.0.0:22379",
				"TENURE_ADVERTISE_CLIENT_URLS":       "http://10.0.0.2:2379",
				"TENURE_LISTEN_PEER_URLS":            "http://0.0.0.0:2380",
				"TENURE_INITIAL_ADVERTISE_PEER_URLS": "http://10.0.0.2:2380",
				"TENURE_INITIAL_CLUSTER":             cluster3,
				"TENURE_INITIAL_CLUSTER_STATE":       "existing",
				"TENURE_INITIAL_CLUSTER_TOKEN":       "tok",
				"TENURE_HEARTBEAT_INTERVAL":          "200",
				"TENURE_ELECTION_TIMEOUT":            "2000",
				"TENURE_SNAPSHOT_COUNT":              "9",
				"TENURE_QUOTA_BACKEND_BYTES":         "0",
				"TENURE_MAX_REQUEST_BYTES":           "4096",
				"TENURE_MAX_TXN_OPS":                 "3",
				"TENURE_LISTEN_METRICS_URLS":         "http://127.0.0.1:9091",
				"TENURE_LOG_LEVEL":                   "warn",
				"TENURE_LOG_FORMAT":                  "text",
			},
			check: func(t *testing.T, c server.Config) {
				if c.Name != "b" || c.DataDir != "/d" || c.InitialCluster != cluster3 ||
					c.InitialClusterState != "existing" || c.InitialClusterToken != "tok" ||
					c.HeartbeatInterval != 200*time.Millisecond || c.ElectionTimeout != 2*time.Second ||
					c.SnapshotCount != 9 || c.QuotaBackendBytes != server.DefaultQuotaBackendBytes ||
					c.MaxRequestBytes != 4096 || c.MaxTxnOps != 3 || c.LogLevel != "warn" || c.LogFormat != "text" ||
					!slices.Equal(c.ListenClientURLs, []string{"http://0.0.0.0:2379", "http://0.0.0.0:22379"}) ||
					!slices.Equal(c.InitialAdvertisePeerURLs, []string{"http://10.0.0.2:2380"}) ||
					!slices.Equal(c.ListenMetricsURLs, []string{"http://127.0.0.1:9091"}) {
					t.Errorf("got %+v", c)
				}
			},
			noWarn: true,
		},
		{
			name: "command line wins over the environment, with a warning",
			args: []string{"--log-level=error", "--heartbeat-interval", "10", "--election-timeout", "50"},
			env:  map[string]string{"TENURE_LOG_LEVEL": "debug", "TENURE_HEARTBEAT_INTERVAL": "garbage", "TENURE_LOG_FORMAT": "text"},
			check: func(t *testing.T, c server.Config) {
				if c.LogLevel != "error" || c.HeartbeatInterval != 10*time.Millisecond || c.LogFormat != "text" {
					t.Errorf("got level %q heartbeat %v format %q", c.LogLevel, c.HeartbeatInterval, c.LogFormat)
				}
			},
			wantW: []string{"TENURE_LOG_LEVEL is ignored: --log-level was given", "TENURE_HEARTBEAT_INTERVAL is ignored"},
		},
		{
			name: "empty environment variable is unset",
			env:  map[string]string{"TENURE_NAME": ""},
			check: func(t *testing.T, c server.Config) {
				if c.Name != "default" {
					t.Errorf("name = %q", c.Name)
				}
			},
		},
		{
			name: "data dir and initial cluster follow the name",
			args: []string{"--name=n1"},
			check: func(t *testing.T, c server.Config) {
				if c.DataDir != "n1.tenure" || c.InitialCluster != "n1=http://127.0.0.1:2380" {
					t.Errorf("data dir %q, initial cluster %q", c.DataDir, c.InitialCluster)
				}
			},
		},
		{
			name:    "malformed env values name the variable",
			env:     map[string]string{"TENURE_HEARTBEAT_INTERVAL": "100ms", "TENURE_SNAPSHOT_COUNT": "-1", "TENURE_MAX_TXN_OPS": "x"},
			wantErr: []string{`TENURE_HEARTBEAT_INTERVAL="100ms": invalid value for --heartbeat-interval`, `TENURE_SNAPSHOT_COUNT="-1"`, `TENURE_MAX_TXN_OPS="x"`},
		},
		{
			name:    "malformed flag names the flag",
			args:    []string{"--election-timeout=1s"},
			wantErr: []string{`"--election-timeout"`},
		},
		{
			name:    "unknown flag",
			args:    []string{"--no-such-flag"},
			wantErr: []string{"unknown flag: --no-such-flag"},
		},
		{
			name:    "a path flag given another flag as its value",
			args:    []string{"--data-dir", "--help"},
			wantErr: []string{`--data-dir: got "--help", which is spelled like a flag: its value is missing`},
		},
		{
			name:    "the same from the environment, naming the variable",
			env:     map[string]string{"TENURE_WAL_DIR": "--name=x", "ETCD_DATA_DIR": "--help"},
			wantErr: []string{`TENURE_WAL_DIR: got "--name=x"`, `ETCD_DATA_DIR: got "--help"`},
		},
		{
			name: "a path starting with dashes written as ./",
			args: []string{"--data-dir", "./--help"},
			check: func(t *testing.T, c server.Config) {
				if c.DataDir != "./--help" {
					t.Errorf("data dir %q", c.DataDir)
				}
			},
		},
		{
			name:    "positional argument",
			args:    []string{"extra"},
			wantErr: []string{"serve takes no arguments"},
		},
		{
			name: "every validation problem, each naming its flag",
			args: []string{"--heartbeat-interval=300", "--election-timeout=1000", "--log-format=xml", "--initial-cluster-state=maybe",
				"--listen-client-urls=127.0.0.1:2379", "--max-request-bytes=0"},
			wantErr: []string{
				"--election-timeout: 1000ms must be at least 5 times --heartbeat-interval (300ms)",
				`--log-format: "xml"`, `--initial-cluster-state: "maybe"`, `--listen-client-urls: URL "127.0.0.1:2379"`,
				"--max-request-bytes: must be > 0",
			},
		},
		{
			name:    "bad env value caught by validation names the flag",
			env:     map[string]string{"TENURE_INITIAL_CLUSTER": "default=http://127.0.0.1:2380,b="},
			wantErr: []string{`--initial-cluster: member "b" has no URL`},
		},
		{
			name:    "member missing from initial cluster",
			args:    []string{"--name=z", "--initial-cluster=" + cluster3},
			wantErr: []string{`--initial-cluster: this member's --name "z" is not listed`},
		},
		{
			name:    "advertised peer URLs must match the initial cluster",
			args:    []string{"--name=a", "--initial-cluster=" + cluster3},
			wantErr: []string{`--initial-advertise-peer-urls: http://127.0.0.1:2380 does not match the URLs --initial-cluster lists for member "a" (http://10.0.0.1:2380)`},
		},
		{
			name:   "three members: no warning",
			args:   append(slices.Clone(member), "--initial-cluster="+cluster3),
			noWarn: true,
		},
		{
			name:  "four members: warning",
			args:  append(slices.Clone(member), "--initial-cluster="+cluster3+",d=http://10.0.0.4:2380"),
			wantW: []string{"4 members is an even number", "tolerate 1 failure(s), the same as 3", "quorum needs 3 of 4", "3 or 5"},
		},
		{
			name:  "two members from the environment: warning",
			args:  member,
			env:   map[string]string{"TENURE_INITIAL_CLUSTER": "a=http://10.0.0.1:2380,b=http://10.0.0.2:2380"},
			wantW: []string{"2 members is an even number"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, cliWarnings, err := parseServeConfig(tt.args, mapEnv(tt.env))
			// what a member logs at start: the command line's warnings, then
			// the Config's (server.Run).
			warnings := append(cliWarnings, cfg.Warnings()...)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("err = nil, want %q", tt.wantErr)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("err = %q\nwant it to contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if tt.check != nil {
				tt.check(t, cfg)
			}
			all := strings.Join(warnings, "\n")
			for _, w := range tt.wantW {
				if !strings.Contains(all, w) {
					t.Errorf("warnings %q lack %q", warnings, w)
				}
			}
			if tt.noWarn && len(warnings) != 0 {
				t.Errorf("warnings = %q, want none", warnings)
			}
		})
	}
}

func TestParseServeConfigRepeatedListFlagReplaces(t *testing.T) {
	cfg, _, err := parseServeConfig([]string{"--listen-client-urls=http://a:1", "--listen-client-urls=http://b:2,http://c:3"}, mapEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.ListenClientURLs, []string{"http://b:2", "http://c:3"}) {
		t.Errorf("ListenClientURLs = %q", cfg.ListenClientURLs)
	}
	// The Config does not alias the defaults.
	if d := server.DefaultConfig(); !slices.Equal(d.ListenClientURLs, []string{server.DefaultListenClientURL}) {
		t.Errorf("DefaultConfig changed: %q", d.ListenClientURLs)
	}
}

func TestEnvName(t *testing.T) {
	for flag, want := range map[string]string{
		"initial-cluster":             "TENURE_INITIAL_CLUSTER",
		"initial-advertise-peer-urls": "TENURE_INITIAL_ADVERTISE_PEER_URLS",
		"name":                        "TENURE_NAME",
		"endpoints":                   "TENURE_ENDPOINTS",
		"write-out":                   "TENURE_WRITE_OUT",
	} {
		if got := envName(flag); got != want {
			t.Errorf("envName(%q) = %q, want %q", flag, got, want)
		}
	}
}

func TestUnknownEnv(t *testing.T) {
	ws := unknownEnv([]string{"TENURE_NAME=x", "TENURE_NAEM=y", "HOME=/root", "TENURE_ENDPOINTS=z", "ETCD_NAME=e", "ETCD_ENABLE_V2=true", "ETCDCTL_API=3"},
		map[string]bool{"TENURE_NAME": true, "TENURE_ENDPOINTS": true, "ETCD_NAME": true})
	if len(ws) != 2 || !strings.Contains(ws[0], "TENURE_NAEM") || !strings.Contains(ws[1], "ETCD_ENABLE_V2") {
		t.Errorf("unknownEnv = %q", ws)
	}
}

// run executes the CLI in-process.
func run(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	a := &app{env: mapEnv(env), environ: func() []string { return nil }, stdin: strings.NewReader(""), stdout: &out, stderr: &errOut}
	code = execute(a, args)
	return code, out.String(), errOut.String()
}

func TestServeBadConfigExits2WithEveryProblem(t *testing.T) {
	code, _, stderr := run(t, map[string]string{"TENURE_LOG_FORMAT": "xml"},
		"serve", "--heartbeat-interval=0", "--initial-cluster=default=http://127.0.0.1:2380,b=")
	if code != exitConfig {
		t.Errorf("exit code = %d, want %d", code, exitConfig)
	}
	for _, w := range []string{
		"Error: --initial-cluster: member \"b\" has no URL\n",
		"Error: --heartbeat-interval: must be > 0 (set to 0ms)\n",
		"Error: --log-format: \"xml\" is not one of json, text\n",
	} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr = %q\nwant it to contain %q", stderr, w)
		}
	}
	for _, args := range [][]string{{"serve", "--bogus"}, {"serve", "extra"}, {"serve", "--heartbeat-interval=x"}} {
		if code, _, stderr := run(t, nil, args...); code != exitConfig || !strings.HasPrefix(stderr, "Error: ") {
			t.Errorf("%q: exit %d, stderr %q; want exit %d with an error", args, code, stderr, exitConfig)
		}
	}
	if code, _, stderr := run(t, map[string]string{"TENURE_ELECTION_TIMEOUT": "soon"}, "serve"); code != exitConfig ||
		!strings.Contains(stderr, `Error: TENURE_ELECTION_TIMEOUT="soon": invalid value for --election-timeout`) {
		t.Errorf("bad env: exit %d, stderr %q", code, stderr)
	}
}

func TestClientArgumentValidation(t *testing.T) {
	// Every case fails before any connection is made; the endpoint is unreachable anyway.
	tests := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"get"}, nil, "get command needs one argument as key and an optional argument as range_end, got 0 arguments"},
		{[]string{"get", "a", "b", "c"}, nil, "get command needs one argument as key"},
		{[]string{"get", "a", "b", "--prefix"}, nil, "get command takes no range_end argument with --prefix"},
		{[]string{"get", "a", "--rev", "-1"}, nil, "--rev: must be >= 0"},
		{[]string{"get", "a", "--rev", "x"}, nil, `invalid argument "x" for "--rev"`},
		{[]string{"get", "a", "--limit", "-2"}, nil, "--limit: must be >= 0"},
		{[]string{"put"}, nil, "put command needs 2 arguments, KEY and VALUE, got 0"},
		{[]string{"put", "k"}, nil, "put command needs 2 arguments, KEY and VALUE, got 1"},
		{[]string{"put", "k", "v", "extra"}, nil, "put command needs 2 arguments"},
		{[]string{"put", "k", "v", "--lease", "xyz"}, nil, `--lease: bad lease ID "xyz"`},
		{[]string{"del"}, nil, "del command needs one argument as key"},
		{[]string{"del", "a", "b", "--prefix"}, nil, "del command takes no range_end argument with --prefix"},
		{[]string{"watch"}, nil, "watch command needs one argument as key"},
		{[]string{"watch", "a", "--rev", "-5"}, nil, "--rev: must be >= 0"},
		{[]string{"lease"}, nil, "lease command needs a subcommand"},
		{[]string{"lease", "grant"}, nil, "lease grant command needs 1 argument, the TTL in seconds, got 0"},
		{[]string{"lease", "grant", "ten"}, nil, `bad TTL "ten"`},
		{[]string{"lease", "grant", "0"}, nil, `bad TTL "0"`},
		{[]string{"lease", "revoke"}, nil, "lease revoke command needs 1 argument, the lease ID (hexadecimal), got 0"},
		{[]string{"lease", "revoke", "1", "2"}, nil, "lease revoke command needs 1 argument"},
		{[]string{"lease", "revoke", "0x12g"}, nil, `bad lease ID "0x12g"`},
		{[]string{"lease", "keep-alive"}, nil, "lease keep-alive command needs 1 argument"},
		{[]string{"lease", "timetolive"}, nil, "lease timetolive command needs 1 argument"},
		{[]string{"lease", "timetolive", "zz", "--keys"}, nil, `bad lease ID "zz"`},
		{[]string{"member"}, nil, "member command needs a subcommand: list"},
		{[]string{"member", "list", "x"}, nil, "member list command takes no arguments, got 1"},
		{[]string{"endpoint"}, nil, "endpoint command needs a subcommand: status or health"},
		{[]string{"endpoint", "status", "x"}, nil, "endpoint status command takes no arguments"},
		{[]string{"endpoint", "health", "x"}, nil, "endpoint health command takes no arguments"},
		{[]string{"compact"}, nil, "compact command needs 1 argument, the revision, got 0"},
		{[]string{"compact", "abc"}, nil, `bad revision "abc"`},
		{[]string{"compact", "0"}, nil, `bad revision "0"`},
		{[]string{"version", "x"}, nil, "version command takes no arguments"},
		{[]string{"nosuchcommand"}, nil, `unknown command "nosuchcommand"`},
		{[]string{"get", "k", "-w", "yaml"}, nil, `--write-out: unsupported output format "yaml" (want simple or json)`},
		{[]string{"get", "k"}, map[string]string{"TENURE_WRITE_OUT": "yaml"}, `TENURE_WRITE_OUT: unsupported output format "yaml"`},
		{[]string{"get", "k"}, map[string]string{"TENURE_DIAL_TIMEOUT": "soon"}, `TENURE_DIAL_TIMEOUT="soon": invalid value for --dial-timeout`},
		{[]string{"get", "k", "--command-timeout=0s"}, nil, "--command-timeout: must be > 0"},
		{[]string{"get", "k", "--endpoints="}, nil, "--endpoints: no endpoints given"},
		{[]string{"lease", "grant", "5"}, map[string]string{"TENURE_ENDPOINTS": ","}, "TENURE_ENDPOINTS: no endpoints given"},
		{[]string{"serve", "--endpoints=x"}, nil, "unknown flag: --endpoints"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			env := map[string]string{"TENURE_ENDPOINTS": "127.0.0.1:1"}
			for k, v := range tt.env {
				env[k] = v
			}
			code, stdout, stderr := run(t, env, tt.args...)
			if code == 0 {
				t.Fatalf("exit code 0, stdout %q", stdout)
			}
			if !strings.HasPrefix(stderr, "Error: ") || !strings.Contains(stderr, tt.want) {
				t.Errorf("stderr = %q\nwant \"Error: ...%s...\"", stderr, tt.want)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
		})
	}
}

func TestClientExitCodeIsOne(t *testing.T) {
	code, _, _ := run(t, nil, "put", "k")
	if code != exitError {
		t.Errorf("exit code = %d, want %d", code, exitError)
	}
	// A command-line -w wins over a bad TENURE_WRITE_OUT; the command then
	// fails to reach the (closed) endpoint, with exit code 1.
	code, _, stderr := run(t, map[string]string{"TENURE_WRITE_OUT": "yaml", "TENURE_ENDPOINTS": "127.0.0.1:1"},
		"get", "k", "-w", "json", "--command-timeout=300ms", "--dial-timeout=100ms")
	if code != exitError || strings.Contains(stderr, "write-out") || !strings.HasPrefix(stderr, "Error: ") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

func TestVersion(t *testing.T) {
	code, stdout, _ := run(t, nil, "version")
	if code != 0 || !strings.HasPrefix(stdout, "tenure version: ") || !strings.Contains(stdout, "etcd API version: 3.") {
		t.Errorf("exit %d, stdout %q", code, stdout)
	}
}
