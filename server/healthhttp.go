package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/status"
)

// The HTTP health endpoints answer what etcd 3.7's do, with its query
// parameters and its output, because probes are written against etcd:
// kubeadm's etcd manifests probe /livez and /readyz (and, before them,
// /health?exclude=NOSPACE&serializable=true), and a probe that reads a
// different answer from Tenure restarts or unroutes members at the wrong
// time. What each one promises:
//
//	/health   JSON {"health","reason"}: no alarm (minus ?exclude=ALARM),
//	          a known leader and a linearizable read; with
//	          ?serializable=true only the alarms and a local read, so it
//	          stays true on a member that lost its quorum.
//	/livez    the member serves a local (serializable) read: the process is
//	          alive, whatever the cluster's state.
//	/readyz   no CORRUPT alarm, a local read, a linearizable read (a quorum
//	          and a leader) and not a learner.
//
// /livez and /readyz list each check as "[+]name ok" / "[-]name failed:
// reason" (always on failure, with ?verbose on success), run one check at
// /livez/<name> or /readyz/<name>, and skip checks named by ?exclude=.

// healthCheck is one named check of /livez or /readyz.
type healthCheck struct {
	name string
	run  func(context.Context) error
}

func (m *Member) livezChecks() []healthCheck {
	return []healthCheck{{"serializable_read", m.readCheck(true)}}
}

func (m *Member) readyzChecks() []healthCheck {
	return []healthCheck{
		{"data_corruption", m.alarmCheck(pb.AlarmType_CORRUPT)},
		{"serializable_read", m.readCheck(true)},
		{"linearizable_read", m.readCheck(false)},
		{"non_learner", m.learnerCheck},
	}
}

// readCheck reads one key as a client would, through the member's own
// Range (the same barrier and request timeout as a client's read).
func (m *Member) readCheck(serializable bool) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := m.edge.Range(ctx, &pb.RangeRequest{Key: []byte("health"), KeysOnly: true, Limit: 1, Serializable: serializable})
		if err != nil {
			return errors.New(status.Convert(err).Message())
		}
		return nil
	}
}

func (m *Member) alarmCheck(t pb.AlarmType) func(context.Context) error {
	return func(context.Context) error {
		if len(m.ap.Alarms(t)) > 0 {
			return fmt.Errorf("alarm activated: %s", t)
		}
		return nil
	}
}

func (m *Member) learnerCheck(context.Context) error {
	if m.node.Status().IsLearner {
		return errors.New("not supported for learner")
	}
	return nil
}

// onlyGet refuses other methods as etcd does (405 with an Allow header).
func onlyGet(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet {
		return true
	}
	w.Header().Set("Allow", http.MethodGet)
	http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
	return false
}

// excluded is the set of names given as ?exclude= (repeatable).
func excluded(r *http.Request) map[string]bool {
	set := map[string]bool{}
	for _, v := range r.URL.Query()["exclude"] {
		if v != "" {
			set[v] = true
		}
	}
	return set
}

// handleChecks installs root (all checks but the excluded ones) and
// root/<name> (that check alone) for a list of checks.
func handleChecks(mux *http.ServeMux, root string, checks []healthCheck) {
	mux.HandleFunc(root, func(w http.ResponseWriter, r *http.Request) {
		skip := excluded(r)
		var run []healthCheck
		for _, c := range checks {
			if !skip[c.name] {
				run = append(run, c)
			}
		}
		writeChecks(w, r, run)
	})
	for _, c := range checks {
		mux.HandleFunc(root+"/"+c.name, func(w http.ResponseWriter, r *http.Request) {
			writeChecks(w, r, []healthCheck{c})
		})
	}
}

func writeChecks(w http.ResponseWriter, r *http.Request, checks []healthCheck) {
	if !onlyGet(w, r) {
		return
	}
	var out bytes.Buffer
	failed := false
	for _, c := range checks {
		if err := c.run(r.Context()); err != nil {
			failed = true
			fmt.Fprintf(&out, "[-]%s failed: %v\n", c.name, err)
		} else {
			fmt.Fprintf(&out, "[+]%s ok\n", c.name)
		}
	}
	if failed {
		http.Error(w, out.String(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if _, verbose := r.URL.Query()["verbose"]; verbose {
		_, _ = w.Write(out.Bytes())
	}
	_, _ = w.Write([]byte("ok\n"))
}

// healthAnswer is etcd's /health body; reason is always present, empty
// when healthy.
type healthAnswer struct {
	Health string `json:"health"`
	Reason string `json:"reason"`
}

func (m *Member) handleHealth(w http.ResponseWriter, r *http.Request) {
	if !onlyGet(w, r) {
		return
	}
	serializable := r.URL.Query().Get("serializable") == "true"
	h := m.checkHealth(r.Context(), excluded(r), serializable)
	w.Header().Set("Content-Type", "application/json")
	if h.Health != "true" {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(h)
}

func (m *Member) checkHealth(ctx context.Context, skipAlarms map[string]bool, serializable bool) healthAnswer {
	for _, a := range m.ap.Alarms(pb.AlarmType_NONE) {
		if skipAlarms[a.Alarm.String()] {
			continue
		}
		return healthAnswer{Health: "false", Reason: "ALARM " + a.Alarm.String()}
	}
	if !serializable && m.node.Status().Leader == 0 {
		return healthAnswer{Health: "false", Reason: "RAFT NO LEADER"}
	}
	if err := m.readCheck(serializable)(ctx); err != nil {
		return healthAnswer{Health: "false", Reason: "RANGE ERROR:" + err.Error()}
	}
	return healthAnswer{Health: "true"}
}
