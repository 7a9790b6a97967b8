package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

type httpAnswer struct {
	code int
	body string
}

func httpGet(t *testing.T, method, url string) httpAnswer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return httpAnswer{resp.StatusCode, string(b)}
}

// The health endpoints answer as etcd 3.7's do, so that probes written for
// etcd (kubeadm's /livez and /readyz, /health?exclude=NOSPACE&serializable=true)
// read the same thing: /health reports alarms unless excluded, /readyz fails
// its data_corruption check on a CORRUPT alarm only, /livez is only about the
// local read, each check is listed with ?verbose and reachable alone, and
// only GET is served. (Quorum loss: test/e2e TestMetricsHealthAndSlowSync.)
func TestHealthEndpointsAnswerAsEtcd(t *testing.T) {
	cli, cfg := startSingleConfig(t)
	base := cfg.AdvertiseClientURLs[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}

	health := func(query string) (int, healthAnswer) {
		a := httpGet(t, http.MethodGet, base+"/health"+query)
		var h healthAnswer
		if err := json.Unmarshal([]byte(a.body), &h); err != nil {
			t.Fatalf("/health%s body %q: %v", query, a.body, err)
		}
		if !strings.Contains(a.body, `"reason"`) {
			t.Fatalf("/health%s body %q has no reason field (etcd always sends it)", query, a.body)
		}
		return a.code, h
	}
	want := func(what string, got httpAnswer, code int, body string) {
		t.Helper()
		if got.code != code || got.body != body {
			t.Fatalf("%s = %d %q, want %d %q", what, got.code, got.body, code, body)
		}
	}

	if code, h := health(""); code != 200 || h.Health != "true" || h.Reason != "" {
		t.Fatalf("/health = %d %+v, want 200 true", code, h)
	}
	want("/livez", httpGet(t, http.MethodGet, base+"/livez"), 200, "ok\n")
	want("/livez?verbose", httpGet(t, http.MethodGet, base+"/livez?verbose"), 200, "[+]serializable_read ok\nok\n")
	want("/readyz?verbose", httpGet(t, http.MethodGet, base+"/readyz?verbose"), 200,
		"[+]data_corruption ok\n[+]serializable_read ok\n[+]linearizable_read ok\n[+]non_learner ok\nok\n")
	want("/readyz/linearizable_read", httpGet(t, http.MethodGet, base+"/readyz/linearizable_read"), 200, "ok\n")
	for _, path := range []string{"/health", "/livez", "/readyz", "/readyz/non_learner"} {
		if a := httpGet(t, http.MethodPost, base+path); a.code != http.StatusMethodNotAllowed {
			t.Fatalf("POST %s = %d %q, want 405", path, a.code, a.body)
		}
	}
	if a := httpGet(t, http.MethodGet, base+"/readyz/no_such_check"); a.code != http.StatusNotFound {
		t.Fatalf("/readyz/no_such_check = %d %q, want 404", a.code, a.body)
	}

	mc := pb.NewMaintenanceClient(cli.ActiveConnection())
	st, err := cli.Status(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	raise := func(a pb.AlarmType, action pb.AlarmRequest_AlarmAction) {
		if _, err := mc.Alarm(ctx, &pb.AlarmRequest{Action: action, MemberID: st.Header.MemberId, Alarm: a}); err != nil {
			t.Fatalf("alarm %v %v: %v", action, a, err)
		}
	}

	raise(pb.AlarmType_NOSPACE, pb.AlarmRequest_ACTIVATE)
	if code, h := health(""); code != http.StatusServiceUnavailable || h.Health != "false" || h.Reason != "ALARM NOSPACE" {
		t.Fatalf("/health with NOSPACE = %d %+v, want 503 ALARM NOSPACE", code, h)
	}
	if code, h := health("?exclude=NOSPACE&serializable=true"); code != 200 || h.Health != "true" {
		t.Fatalf("/health?exclude=NOSPACE&serializable=true with NOSPACE = %d %+v, want 200 true", code, h)
	}
	want("/readyz with NOSPACE", httpGet(t, http.MethodGet, base+"/readyz"), 200, "ok\n")

	raise(pb.AlarmType_CORRUPT, pb.AlarmRequest_ACTIVATE)
	want("/readyz with CORRUPT", httpGet(t, http.MethodGet, base+"/readyz"), http.StatusServiceUnavailable,
		"[-]data_corruption failed: alarm activated: CORRUPT\n[+]serializable_read ok\n[+]linearizable_read ok\n[+]non_learner ok\n\n")
	want("/readyz?exclude=data_corruption with CORRUPT", httpGet(t, http.MethodGet, base+"/readyz?exclude=data_corruption"), 200, "ok\n")
	want("/livez with CORRUPT", httpGet(t, http.MethodGet, base+"/livez"), 200, "ok\n")
	if code, h := health("?exclude=NOSPACE"); code != http.StatusServiceUnavailable || h.Reason != "ALARM CORRUPT" {
		t.Fatalf("/health?exclude=NOSPACE with CORRUPT = %d %+v, want 503 ALARM CORRUPT", code, h)
	}

	raise(pb.AlarmType_NOSPACE, pb.AlarmRequest_DEACTIVATE)
	raise(pb.AlarmType_CORRUPT, pb.AlarmRequest_DEACTIVATE)
	if code, h := health(""); code != 200 || h.Health != "true" {
		t.Fatalf("/health after disarming = %d %+v, want 200 true", code, h)
	}
}
