package server

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// gwPost posts body to the gateway path and decodes the JSON answer.
func gwPost(t *testing.T, base, path, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := map[string]any{}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: not JSON (%v): %s", path, err, raw)
	}
	return resp.StatusCode, out
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// etcd's JSON gateway on the client URL: writes and reads as etcd's curl
// examples make them, errors with etcd's codes and messages, a watch
// streamed as JSON lines, and the v3lock service.
func TestGatewayServesTheV3APIAsJSON(t *testing.T) {
	_, cfg := startSingleConfig(t)
	base := cfg.AdvertiseClientURLs[0]

	if code, out := gwPost(t, base, "/v3/kv/put", `{"key":"`+b64("foo")+`","value":"`+b64("bar")+`"}`); code != 200 || out["header"] == nil {
		t.Fatalf("put: %d %v", code, out)
	}
	code, out := gwPost(t, base, "/v3/kv/range", `{"key":"`+b64("foo")+`"}`)
	kvs, _ := out["kvs"].([]any)
	if code != 200 || len(kvs) != 1 || kvs[0].(map[string]any)["value"] != b64("bar") || out["count"] != "1" {
		t.Fatalf("range: %d %v", code, out)
	}
	// etcd still answers its old beta prefix.
	if code, out := gwPost(t, base, "/v3beta/kv/range", `{"key":"`+b64("foo")+`"}`); code != 200 || out["count"] != "1" {
		t.Fatalf("range under /v3beta/: %d %v", code, out)
	}

	// Bad input: a clear error, nothing written.
	code, out = gwPost(t, base, "/v3/kv/put", `{"key":"`+b64("foo")+`","value":"`+b64("other")+`","lease":"12345"}`)
	if code != http.StatusNotFound || out["message"] != "etcdserver: requested lease not found" || out["code"] != float64(5) {
		t.Fatalf("put with an unknown lease: %d %v", code, out)
	}
	code, out = gwPost(t, base, "/v3/kv/put", `{"key":`)
	if code != http.StatusBadRequest || out["code"] != float64(3) {
		t.Fatalf("malformed JSON: %d %v", code, out)
	}
	code, out = gwPost(t, base, "/v3/kv/put", `{"value":"`+b64("v")+`"}`)
	if code != http.StatusBadRequest || out["message"] != "etcdserver: key is not provided" {
		t.Fatalf("put without a key: %d %v", code, out)
	}
	if _, out := gwPost(t, base, "/v3/kv/range", `{"key":"`+b64("foo")+`"}`); out["kvs"].([]any)[0].(map[string]any)["value"] != b64("bar") {
		t.Fatalf("a refused put changed the value: %v", out)
	}
	code, out = gwPost(t, base, "/v3/lock/lock", `{"name":"`+b64("l")+`"}`)
	if code != http.StatusBadRequest || out["code"] != float64(3) {
		t.Fatalf("lock without a lease: %d %v", code, out)
	}

	// A lease, then the lock service with it.
	code, out = gwPost(t, base, "/v3/lease/grant", `{"TTL":30}`)
	id, _ := out["ID"].(string)
	if code != 200 || id == "" {
		t.Fatalf("lease grant: %d %v", code, out)
	}
	code, out = gwPost(t, base, "/v3/lock/lock", `{"name":"`+b64("l")+`","lease":"`+id+`"}`)
	if key, _ := out["key"].(string); code != 200 || key == "" {
		t.Fatalf("lock: %d %v", code, out)
	}

	// A watch streams its events as JSON lines on one response.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v3/watch", strings.NewReader(`{"create_request":{"key":"`+b64("foo")+`"}}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	if !lines.Scan() || !strings.Contains(lines.Text(), `"created":true`) {
		t.Fatalf("watch: first line %q, %v", lines.Text(), lines.Err())
	}
	gwPost(t, base, "/v3/kv/put", `{"key":"`+b64("foo")+`","value":"`+b64("baz")+`"}`)
	if !lines.Scan() || !strings.Contains(lines.Text(), b64("baz")) {
		t.Fatalf("watch: no event for the put: %q, %v", lines.Text(), lines.Err())
	}
}

// The standard gRPC health service answers on the client port, as etcd's.
func TestGRPCHealthService(t *testing.T) {
	_, cfg := startSingleConfig(t)
	conn, err := grpc.NewClient(strings.TrimPrefix(cfg.AdvertiseClientURLs[0], "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(conn)
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check: %v %v, want SERVING", resp, err)
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "no.such.Service"}); status.Code(err) != codes.NotFound {
		t.Fatalf("Check of an unknown service: %v, want NotFound", err)
	}
}

// --enable-grpc-gateway=false: no /v3/ on the client URLs; the rest stays.
func TestGatewayCanBeTurnedOff(t *testing.T) {
	_, cfg := startSingleConfig(t, func(c *Config) { c.EnableGRPCGateway = false })
	base := cfg.AdvertiseClientURLs[0]
	resp, err := http.Post(base+"/v3/kv/range", "application/json", strings.NewReader(`{"key":"Zm9v"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/v3/kv/range with the gateway off: HTTP %d, want 404", resp.StatusCode)
	}
	resp, err = http.Get(base + "/livez")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/livez with the gateway off: HTTP %d", resp.StatusCode)
	}
}

// etcd's /version answers as etcd 3.7.3 would.
func TestVersionEndpoint(t *testing.T) {
	_, cfg := startSingleConfig(t)
	resp, err := http.Get(cfg.AdvertiseClientURLs[0] + "/version")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/version: HTTP %d, %v", resp.StatusCode, err)
	}
	if v["etcdserver"] != "3.7.3" || v["etcdcluster"] != "3.7.0" {
		t.Fatalf("/version = %v", v)
	}
}
