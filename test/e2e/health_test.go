package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/test/cluster"
)

// getHTTP answers a GET with its status and body, or an error (a member
// without a quorum may take its request timeout to answer).
func getHTTP(url string) (int, string, error) {
	resp, err := (&http.Client{Timeout: 15 * time.Second}).Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestHealthEndpointsWithoutQuorum: on a member whose cluster lost its
// quorum, /health fails, /health?serializable=true (the liveness check of
// kubeadm's older etcd manifests) and /livez stay healthy so that probes do
// not restart every member, and /readyz fails on its linearizable_read
// check alone. Runs against etcd too (TENURE_TEST_TARGET=etcd), which
// answers the same.
func TestHealthEndpointsWithoutQuorum(t *testing.T) {
	c := start(t, cluster.Options{Size: 3})
	base := c.DirectEndpoint(0)
	eventually(t, 20*time.Second, "/health true with a quorum", func() error {
		code, body, err := getHTTP(base + "/health")
		if err != nil {
			return err
		}
		if code != 200 || !strings.Contains(body, `"health":"true"`) {
			return fmt.Errorf("%d %q", code, body)
		}
		return nil
	})
	code, body, err := getHTTP(base + "/readyz?verbose")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"[+]data_corruption ok\n", "[+]serializable_read ok\n", "[+]linearizable_read ok\n", "[+]non_learner ok\n"} {
		if code != 200 || !strings.Contains(body, line) || !strings.HasSuffix(body, "ok\n") {
			t.Fatalf("/readyz?verbose with a quorum = %d %q, want 200 listing %q", code, body, line)
		}
	}

	c.Kill(1)
	c.Kill(2)
	eventually(t, 30*time.Second, "/health false without a quorum", func() error {
		code, body, err := getHTTP(base + "/health")
		if err != nil {
			return err
		}
		var h struct{ Health, Reason string }
		if err := json.Unmarshal([]byte(body), &h); err != nil {
			return fmt.Errorf("body %q: %v", body, err)
		}
		if code != http.StatusServiceUnavailable || h.Health != "false" ||
			(h.Reason != "RAFT NO LEADER" && !strings.HasPrefix(h.Reason, "RANGE ERROR:")) {
			return fmt.Errorf("%d %q", code, body)
		}
		return nil
	})
	for _, path := range []string{"/health?serializable=true", "/health?exclude=NOSPACE&serializable=true"} {
		code, body, err := getHTTP(base + path)
		if err != nil || code != 200 || !strings.Contains(body, `"health":"true"`) {
			t.Fatalf("%s without a quorum = %d %q %v, want 200 true", path, code, body, err)
		}
	}
	if code, body, err := getHTTP(base + "/livez"); err != nil || code != 200 || body != "ok\n" {
		t.Fatalf("/livez without a quorum = %d %q %v, want 200 ok", code, body, err)
	}
	code, body, err = getHTTP(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "[-]linearizable_read failed: ") ||
		!strings.Contains(body, "[+]serializable_read ok\n") || !strings.Contains(body, "[+]data_corruption ok\n") {
		t.Fatalf("/readyz without a quorum = %d %q, want 503 failing linearizable_read only", code, body)
	}
}
