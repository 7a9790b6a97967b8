package main

import (
	"strings"
	"testing"

	"github.com/tenure-io/tenure/bench/internal/cluster"
	"github.com/tenure-io/tenure/bench/internal/suite"
)

func TestSelectSuites(t *testing.T) {
	all := suite.All()
	got, err := selectSuites(all, "lock-50x1, put-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID() != "lock-50x1" || got[1].ID() != "put-1" {
		t.Errorf("got %d suites: %v", len(got), got)
	}
	if got, _ := selectSuites(all, ""); len(got) != len(all) {
		t.Errorf("empty selection: %d suites, want all %d", len(got), len(all))
	}
	if _, err := selectSuites(all, "put-1,nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown suite: %v", err)
	}
}

func TestRowLabelAndSlug(t *testing.T) {
	sys := cluster.System{Label: "etcd 3.7.3 (as SUT)"}
	if got := rowLabel(sys, ""); got != "etcd 3.7.3 (as SUT)" {
		t.Errorf("rowLabel without variant: %q", got)
	}
	l := rowLabel(sys, suite.LockV3)
	if l != "etcd 3.7.3 (as SUT) · v3lock" {
		t.Errorf("rowLabel: %q", l)
	}
	// Directory names under work/: lower case, digits and dots kept, the
	// rest dashes, no leading/trailing dash.
	if got, want := slug(l), "etcd-3.7.3--as-sut----v3lock"; got != want {
		t.Errorf("slug(%q) = %q, want %q", l, got, want)
	}
	if got, want := slug("Redis 7.0 (1 node, unreplicated) · SET NX PX + Lua unlock"), "redis-7.0--1-node--unreplicated----set-nx-px---lua-unlock"; got != want {
		t.Errorf("slug = %q, want %q", got, want)
	}
}

func TestReversed(t *testing.T) {
	in := []cluster.System{{Label: "a"}, {Label: "b"}, {Label: "c"}}
	out := reversed(in)
	if out[0].Label != "c" || out[1].Label != "b" || out[2].Label != "a" || in[0].Label != "a" {
		t.Errorf("reversed %v → %v", in, out)
	}
}
