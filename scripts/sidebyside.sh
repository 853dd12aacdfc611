#!/usr/bin/env bash
# sidebyside.sh OLD NEW [PAIRS] [DEPTH] [REQUESTS]: compare two lockproxy
# binaries' CPU per SET NX PX request by running them at the same time,
# each with its own redis-benchmark and key prefix, on the same 5 local
# masters, so that both see the same machine load. On a machine shared with
# other work, runs one after the other differ by more than the changes
# being measured; side by side, both binaries pay for the same load
# (docs/bench/proxy-cpu.md, 2026-11-29). Each pair swaps the two proxies'
# ports and start order. Prints each proxy's user+system CPU per request
# (from /proc/<pid>/stat) and NEW/OLD; a pair where a benchmark got an
# error (NOQUORUM on an overloaded machine) says so and does not count.
#
# The masters (ports 17201-17205) and proxies (17290, 17291) are started
# and stopped by this script, by pid. node_timeout is 5s so that a loaded
# machine does not end a run with NOQUORUM: it changes nothing on the path
# measured, where no deadline fires.
set -euo pipefail

old=$(realpath "$1") new=$(realpath "$2")
pairs=${3:-6} depth=${4:-16} n=${5:-500000}
. "$(dirname "$0")/benchlib.sh"
dir=$(mktemp -d /tmp/sidebyside.XXXXXX)
pids=()
trap bench_cleanup EXIT

start_masters 17201 17202 17203 17204 17205
for port in 17290 17291; do
	lockproxy_toml "$dir/$port.toml" "$port" 5s
done

tck=$(getconf CLK_TCK)
for k in $(seq "$pairs"); do
	if ((k % 2)); then pa=17290 pb=17291; else pa=17291 pb=17290; fi
	"$old" -config "$dir/$pa.toml" >"$dir/old.log" 2>&1 & ia=$!
	"$new" -config "$dir/$pb.toml" >"$dir/new.log" 2>&1 & ib=$!
	pids+=("$ia" "$ib")
	ready "$pa" && ready "$pb"
	a0=$(cpu "$ia") b0=$(cpu "$ib")
	redis-benchmark -p "$pa" -c 50 -P "$depth" -n "$n" -r 100000 -q SET "a$k:__rand_int__" v NX PX 10000 >"$dir/old.out" 2>&1 & ra=$!
	redis-benchmark -p "$pb" -c 50 -P "$depth" -n "$n" -r 100000 -q SET "b$k:__rand_int__" v NX PX 10000 >"$dir/new.out" 2>&1 & rb=$!
	wait "$ra"; a1=$(cpu "$ia")
	wait "$rb"; b1=$(cpu "$ib")
	kill "$ia" "$ib"; wait "$ia" "$ib" 2>/dev/null || true
	note=
	if grep -q "Error\|NOQUORUM" "$dir/old.out" "$dir/new.out"; then note=" (a benchmark got an error: not counted)"; fi
	awk -v a=$((a1 - a0)) -v b=$((b1 - b0)) -v n="$n" -v t="$tck" -v k="$k" -v l="$(cut -d' ' -f1 /proc/loadavg)" -v note="$note" \
		'BEGIN { x = a / t * 1e6 / n; y = b / t * 1e6 / n; printf "pair %d load %s old %.3f new %.3f us/request new/old %.3f%s\n", k, l, x, y, y / x, note }'
done
