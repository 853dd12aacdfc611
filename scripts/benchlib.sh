# benchlib.sh: what the measuring scripts (sidebyside.sh, vstwemproxy.sh,
# pgo.sh) share; sourced, not run. The caller sets dir (a scratch
# directory) and pids (an array); every process started here is appended
# to pids, and bench_cleanup (the caller's EXIT trap) stops them by pid and
# removes dir.

bench_cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}

# start_masters PORT...: a redis-server on 127.0.0.1:PORT for each port,
# without persistence, and waits until each answers PING (the floor proxy
# dials its masters once, at its start). Sets masters to their TOML list
# and addrs to them comma-separated.
start_masters() {
	local p i
	masters= addrs=
	for p in "$@"; do
		redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no \
			--maxmemory-policy noeviction --dir "$dir" >"$dir/redis.$p.log" 2>&1 &
		pids+=($!)
		masters+="${masters:+, }\"127.0.0.1:$p\""
		addrs+="${addrs:+,}127.0.0.1:$p"
	done
	for p in "$@"; do
		for i in $(seq 100); do
			[ "$(redis-cli -p "$p" ping 2>/dev/null)" = PONG ] && break
			sleep 0.1
		done
	done
}

# lockproxy_toml FILE PORT NODE_TIMEOUT: a lockproxy configuration
# listening on 127.0.0.1:PORT over $masters, metrics off.
lockproxy_toml() {
	cat >"$1" <<CONF
listen = "127.0.0.1:$2"
metrics_listen = ""
[quorum]
masters = [$masters]
node_timeout = "$3"
max_ttl = "60s"
bootstrap = true
CONF
}

# cpu PID: the process's user+system CPU so far, in clock ticks.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# ready PORT: the proxy on PORT sets a key within 10s.
ready() {
	local i
	for i in $(seq 100); do
		[ "$(redis-cli -p "$1" set "warm:$1:$i" v NX PX 1000 2>/dev/null)" = OK ] && return 0
		sleep 0.1
	done
	echo "$(basename "$0"): the proxy on port $1 did not set a key within 10s" >&2
	return 1
}
