#!/usr/bin/env bash
# cluster3.sh — a 3-member loopback cluster of Tenure or etcd for quick A/B
# measurements next to tenure-bench (which is what RESULTS.md comes from).
#
#   bench/scripts/cluster3.sh start tenure|etcd [extra server flags...]
#   bench/scripts/cluster3.sh leader     # client URL of the current leader
#   bench/scripts/cluster3.sh cpu        # utime+stime ticks of the 3 members
#   bench/scripts/cluster3.sh stop
#
# Binaries come from bench/bin (make -C bench tenure refs); TENURE_BIN
# overrides the Tenure binary (e.g. one built from another commit). Members
# listen on 127.0.0.1:{1,2,3}2379 (clients) and {1,2,3}2380 (peers); data and
# logs go to $CLUSTER3_DIR (default: a directory under ${TMPDIR:-/tmp}).
# Server flags are the harness's (internal/cluster): etcd's names, heartbeat
# 100 ms, election 1000 ms, log level warn; extra flags follow them.
# Example, server CPU per request:
#   a=$(cluster3.sh cpu); bench/bin/benchmark --endpoints=... put --total=20000; b=$(cluster3.sh cpu)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=$here/bin
dir=${CLUSTER3_DIR:-${TMPDIR:-/tmp}/tenure-cluster3}
endpoints=127.0.0.1:12379,127.0.0.1:22379,127.0.0.1:32379

case "${1:-}" in
start)
	sut=${2:?tenure or etcd}
	shift 2
	case $sut in
	tenure) cmd=("${TENURE_BIN:-$bin/tenure}" serve) ;;
	etcd) cmd=("$bin/etcd") ;;
	*) echo "unknown system $sut" >&2; exit 2 ;;
	esac
	rm -rf "$dir"
	mkdir -p "$dir"
	ic=m1=http://127.0.0.1:12380,m2=http://127.0.0.1:22380,m3=http://127.0.0.1:32380
	for i in 1 2 3; do
		"${cmd[@]}" --name "m$i" --data-dir "$dir/m$i" \
			--listen-client-urls "http://127.0.0.1:${i}2379" --advertise-client-urls "http://127.0.0.1:${i}2379" \
			--listen-peer-urls "http://127.0.0.1:${i}2380" --initial-advertise-peer-urls "http://127.0.0.1:${i}2380" \
			--initial-cluster "$ic" --initial-cluster-state new --initial-cluster-token cluster3 \
			--heartbeat-interval=100 --election-timeout=1000 --log-level=warn "$@" >"$dir/m$i.log" 2>&1 &
		echo $! >>"$dir/pids"
	done
	for _ in $(seq 1 100); do
		"$bin/etcdctl" --endpoints=$endpoints put /cluster3-ready x >/dev/null 2>&1 && exit 0
		sleep 0.1
	done
	echo "cluster did not accept a write within 10 s; logs in $dir" >&2
	exit 1
	;;
leader)
	"$bin/etcdctl" --endpoints=$endpoints endpoint status -w simple | awk -F', ' '$9 == "true" {print $1}'
	;;
cpu)
	for p in $(cat "$dir/pids"); do awk '{printf "%d ", $14 + $15}' "/proc/$p/stat"; done
	echo
	;;
stop)
	[ -f "$dir/pids" ] || exit 0
	kill $(cat "$dir/pids") 2>/dev/null || true
	for p in $(cat "$dir/pids"); do
		while kill -0 "$p" 2>/dev/null; do sleep 0.1; done
	done
	rm -f "$dir/pids"
	;;
*)
	sed -n '2,17p' "$0" >&2
	exit 2
	;;
esac
