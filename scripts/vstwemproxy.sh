#!/usr/bin/env bash
# vstwemproxy.sh LOCKPROXY [PAIRS] [DEPTH] [REQUESTS]: lockproxy's CPU per
# SET NX PX request against twemproxy's (nutcracker), both running at the
# same time, each with its own redis-benchmark: lockproxy over 5 local
# masters, twemproxy forwarding to a sixth. With FLOOR=path/to/lockbench
# the floor fan-out (bench/floor: the least work a fan-out to 5 masters
# does, no lock work) runs beside them too, over 5 masters of its own.
# Run one after the other, the proxies meet different machine loads on a
# shared machine, and the rounds of scenario 1 (make bench) swing more
# than the gap being judged; side by side, they pay for the same load
# (docs/bench/proxy-cpu.md, 2026-11-29). The ratio still depends on how
# loaded the machine is: measure on a quiet one.
# Each pair swaps start order. Prints each proxy's user+system CPU per
# request (from /proc/<pid>/stat), lockproxy/twemproxy per pair, and the
# median ratio; a pair where a benchmark got an error does not count.
#
# Masters on ports 17211-17216 (17221-17225 for the floor), proxies on
# 17292 (lockproxy), 17293 (twemproxy, stats on 17294) and 17295 (the
# floor), all started and stopped here, by pid.
# node_timeout is 5s so that a loaded machine does not end a run with
# NOQUORUM: it changes nothing on the path measured, where no deadline
# fires.
set -euo pipefail

lp=$(realpath "$1")
pairs=${2:-8} depth=${3:-16} n=${4:-500000}
command -v nutcracker >/dev/null || { echo "vstwemproxy.sh: nutcracker not found (apt-get install nutcracker)" >&2; exit 1; }
. "$(dirname "$0")/benchlib.sh"
dir=$(mktemp -d /tmp/vstwemproxy.XXXXXX)
floorbin=${FLOOR:+$(realpath "$FLOOR")}
pids=()
trap bench_cleanup EXIT

fmasters=
if [ -n "$floorbin" ]; then
	start_masters 17221 17222 17223 17224 17225
	fmasters=$addrs
fi
start_masters 17216 # twemproxy's
start_masters 17211 17212 17213 17214 17215
lockproxy_toml "$dir/lp.toml" 17292 5s
# The configuration lockbench gives twemproxy (bench/twemproxy.go).
cat >"$dir/tw.yml" <<CONF
lockbench:
  listen: 127.0.0.1:17293
  redis: true
  hash: fnv1a_64
  distribution: ketama
  auto_eject_hosts: false
  preconnect: true
  server_connections: 1
  servers:
   - 127.0.0.1:17216:1
CONF

tck=$(getconf CLK_TCK)
bench() { redis-benchmark -p "$1" -c 50 -P "$depth" -n "$n" -r 100000 -q SET "$2:__rand_int__" v NX PX 10000; }
ratios=() fratios=()
for k in $(seq "$pairs"); do
	if ((k % 2)); then
		"$lp" -config "$dir/lp.toml" >"$dir/lp.log" 2>&1 & il=$!
		nutcracker -c "$dir/tw.yml" -a 127.0.0.1 -s 17294 >"$dir/tw.log" 2>&1 & it=$!
	else
		nutcracker -c "$dir/tw.yml" -a 127.0.0.1 -s 17294 >"$dir/tw.log" 2>&1 & it=$!
		"$lp" -config "$dir/lp.toml" >"$dir/lp.log" 2>&1 & il=$!
	fi
	pids+=("$il" "$it")
	if [ -n "$floorbin" ]; then
		"$floorbin" -serve-floor 127.0.0.1:17295 -floor-masters "$fmasters" >"$dir/fl.log" 2>&1 & ifl=$!
		pids+=("$ifl")
		ready 17295
	fi
	ready 17292 && ready 17293
	l0=$(cpu "$il") t0=$(cpu "$it")
	[ -z "$floorbin" ] || { f0=$(cpu "$ifl"); bench 17295 "f$k" >"$dir/fl.out" 2>&1 & rf=$!; }
	if ((k % 2)); then
		bench 17292 "l$k" >"$dir/lp.out" 2>&1 & rl=$!
		bench 17293 "t$k" >"$dir/tw.out" 2>&1 & rt=$!
	else
		bench 17293 "t$k" >"$dir/tw.out" 2>&1 & rt=$!
		bench 17292 "l$k" >"$dir/lp.out" 2>&1 & rl=$!
	fi
	wait "$rl"; l1=$(cpu "$il")
	wait "$rt"; t1=$(cpu "$it")
	if [ -n "$floorbin" ]; then
		wait "$rf"; f1=$(cpu "$ifl")
		kill "$ifl"; wait "$ifl" 2>/dev/null || true
	fi
	kill "$il" "$it"; wait "$il" "$it" 2>/dev/null || true
	if grep -q "Error\|NOQUORUM" "$dir"/*.out; then
		echo "pair $k: a benchmark got an error, not counted: $(grep -h "Error\|NOQUORUM" "$dir/lp.out" "$dir/tw.out" | head -1)"
		continue
	fi
	line=$(awk -v a=$((l1 - l0)) -v b=$((t1 - t0)) -v n="$n" -v t="$tck" -v k="$k" -v l="$(cut -d' ' -f1 /proc/loadavg)" \
		'BEGIN { x = a / t * 1e6 / n; y = b / t * 1e6 / n; printf "pair %d load %s lockproxy %.3f twemproxy %.3f us/request lockproxy/twemproxy %.3f\n", k, l, x, y, x / y }')
	echo "$line"
	ratios+=("${line##* }")
	if [ -n "$floorbin" ]; then
		line=$(awk -v a=$((f1 - f0)) -v b=$((t1 - t0)) -v n="$n" -v t="$tck" -v k="$k" \
			'BEGIN { x = a / t * 1e6 / n; y = b / t * 1e6 / n; printf "pair %d floor %.3f us/request floor/twemproxy %.3f\n", k, x, x / y }')
		echo "$line"
		fratios+=("${line##* }")
	fi
done
median() { # median NAME RATIOS...
	local name=$1
	shift
	printf '%s\n' "$@" | sort -n | awk -v name="$name" -v d="$depth" '{ r[NR] = $1 } END { m = NR % 2 ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2; printf "median %s/twemproxy %.3f over %d pairs (min %.3f, max %.3f), -P %s\n", name, m, NR, r[1], r[NR], d }'
}
((${#ratios[@]} == 0)) || median lockproxy "${ratios[@]}"
((${#fratios[@]} == 0)) || median floor "${fratios[@]}"
