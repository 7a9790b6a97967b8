package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcd's --listen-client-http-urls: the HTTP services (the /v3/ JSON
// gateway, /health, /metrics, /version) are served there, and the client
// URLs serve gRPC alone.
func TestClientHTTPURLsTakeTheHTTPServices(t *testing.T) {
	httpURL := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	cli, cfg := startSingleConfig(t, func(c *Config) { c.ListenClientHTTPURLs = []string{httpURL} })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("gRPC on the client URL: %v", err)
	}

	if a := httpGet(t, http.MethodGet, httpURL+"/health"); a.code != http.StatusOK || !strings.Contains(a.body, `"health":"true"`) {
		t.Fatalf("/health on the client HTTP URL: %d %s", a.code, a.body)
	}
	if a := httpGet(t, http.MethodGet, httpURL+"/version"); a.code != http.StatusOK || !strings.Contains(a.body, "etcdserver") {
		t.Fatalf("/version on the client HTTP URL: %d %s", a.code, a.body)
	}
	if a := httpGet(t, http.MethodGet, httpURL+"/metrics"); a.code != http.StatusOK || !strings.Contains(a.body, "etcd_server_has_leader") {
		t.Fatalf("/metrics on the client HTTP URL: %d", a.code)
	}
	// "k" in base64 is "aw=="; the gateway answers with the value's, "dg==".
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Post(httpURL+"/v3/kv/range", "application/json", strings.NewReader(`{"key":"aw=="}`))
	if err != nil {
		t.Fatalf("/v3/kv/range on the client HTTP URL: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"value":"dg=="`) {
		t.Fatalf("/v3/kv/range on the client HTTP URL: %d %s", resp.StatusCode, body)
	}

	// The client URL no longer answers HTTP/1.1 ...
	if r, err := (&http.Client{Timeout: 5 * time.Second}).Get(cfg.AdvertiseClientURLs[0] + "/health"); err == nil {
		r.Body.Close()
		if r.StatusCode == http.StatusOK {
			t.Fatalf("/health still served on the client URL")
		}
	}
	// ... and the HTTP URL does not answer gRPC.
	hcli, err := clientv3.New(clientv3.Config{Endpoints: []string{httpURL}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer hcli.Close()
	gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
	defer gcancel()
	if _, err := hcli.Get(gctx, "k"); err == nil {
		t.Fatal("gRPC answered on the client HTTP URL")
	}
}
