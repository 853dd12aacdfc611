#!/usr/bin/env bash
# pgo.sh: refresh cmd/lockproxy/default.pgo, the CPU profile the Go compiler
# uses for profile-guided optimization of lockproxy (go build picks up a
# main package's default.pgo by itself). It profiles bin/lockproxy under
# the workload `make bench` judges its CPU on: redis-benchmark SET NX PX
# through lockproxy on 5 local masters, at -P 16 and at -P 1, and merges
# the two profiles. Re-run it when the request path changes much; a stale
# profile costs only the optimization, never correctness.
#
# Masters on 127.0.0.1:17311-17315 and lockproxy on 17399, started and
# stopped by this script, by pid.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v redis-benchmark >/dev/null || { echo "pgo.sh: redis-benchmark is missing (apt-get install redis-tools)" >&2; exit 1; }
go build -o bin/lockproxy ./cmd/lockproxy
. scripts/benchlib.sh
dir=$(mktemp -d /tmp/pgo.XXXXXX)
pids=()
trap bench_cleanup EXIT
start_masters 17311 17312 17313 17314 17315
lockproxy_toml "$dir/c.toml" 17399 200ms
profile() { # profile DEPTH REQUESTS OUT
	bin/lockproxy -config "$dir/c.toml" -cpuprofile "$3" >"$dir/lp.log" 2>&1 &
	local lp=$!
	ready 17399
	redis-benchmark -p 17399 -c 50 -P "$1" -n "$2" -r 100000 -q SET "k:__rand_int__" v NX PX 10000 >/dev/null 2>&1
	kill "$lp"
	wait "$lp" || true
}
profile 16 2000000 "$dir/p16.prof"
profile 1 300000 "$dir/p1.prof"
go tool pprof -proto "$dir/p16.prof" "$dir/p1.prof" >cmd/lockproxy/default.pgo
echo "pgo.sh: wrote cmd/lockproxy/default.pgo ($(wc -c <cmd/lockproxy/default.pgo) bytes)"
