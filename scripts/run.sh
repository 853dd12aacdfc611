#!/usr/bin/env bash
# make run: start 5 local redis masters on 127.0.0.1:7001-7005 and lockproxy
# in front of them with config.toml, in the foreground. Ctrl-C (or SIGTERM)
# stops lockproxy first, then the masters, each by the pid this script got
# when it started it.
#
# The masters keep nothing on disk (--save "", --appendonly no): every run
# starts from empty masters, which is why config.toml sets bootstrap = true.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
ports=(7001 7002 7003 7004 7005)
listen=127.0.0.1:7379

die() { echo "run.sh: $*" >&2; exit 1; }

# --- redis-server ---------------------------------------------------------
if ! command -v redis-server >/dev/null 2>&1 && [ ! -x /usr/bin/redis-server ]; then
	if [ "$(id -u)" -eq 0 ]; then
		echo "run.sh: redis-server is missing; installing it"
		apt-get update && apt-get install -y redis-server redis-tools
	else
		echo "run.sh: redis-server is missing; install it with:" >&2
		echo "  sudo apt-get update && sudo apt-get install -y redis-server redis-tools" >&2
		exit 1
	fi
fi
redis_server=$(command -v redis-server || echo /usr/bin/redis-server)

# --- helpers --------------------------------------------------------------

# listening PORT: something accepts TCP connections on 127.0.0.1:PORT.
listening() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# pong PORT: a redis server on 127.0.0.1:PORT answers PING (within 1s).
pong() (
	exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
	printf 'PING\r\n' >&3
	IFS= read -r -t 1 reply <&3 || exit 1
	[ "${reply%$'\r'}" = "+PONG" ]
) 2>/dev/null

# Pids this script started; cleanup stops lockproxy first, then the masters.
redis_pids=()
proxy_pid=

# stop PID: SIGTERM, then SIGKILL if it is still there after 5s.
stop() {
	local pid=$1 i
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

cleanup() {
	# A second signal must not cut the cleanup short and orphan the
	# masters: make, sent SIGTERM with its process group, sends its
	# children SIGTERM again while this runs.
	trap - EXIT
	trap '' INT TERM
	if [ -n "$proxy_pid" ]; then
		echo "run.sh: stopping lockproxy (pid $proxy_pid)"
		stop "$proxy_pid"
	fi
	local i
	for i in "${!redis_pids[@]}"; do
		stop "${redis_pids[$i]}"
		rm -f ".run/${ports[$i]}/redis.pid"
	done
	if [ ${#redis_pids[@]} -gt 0 ]; then
		echo "run.sh: stopped redis masters (pids ${redis_pids[*]})"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- free ports, checked before the build to fail fast ------------------------
for port in "${ports[@]}"; do
	if listening "$port"; then
		hint=
		old_pid=$(cat ".run/$port/redis.pid" 2>/dev/null || true)
		if [ -n "$old_pid" ] && [ "$(cat "/proc/$old_pid/comm" 2>/dev/null)" = redis-server ]; then
			hint=" by redis-server pid $old_pid, left by an earlier make run (kill $old_pid)"
		fi
		die "port $port on 127.0.0.1 is already in use$hint; free it and try again"
	fi
done
if listening "${listen##*:}"; then
	die "port ${listen##*:} on 127.0.0.1 (lockproxy's listen in config.toml) is already in use"
fi

# --- build ----------------------------------------------------------------
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH=/usr/local/go/bin:$PATH
fi
command -v go >/dev/null 2>&1 || die "the Go toolchain is not on PATH (expected in /usr/local/go/bin); see https://go.dev/doc/install"
echo "run.sh: building bin/lockproxy"
go build -o bin/lockproxy ./cmd/lockproxy

# --- masters --------------------------------------------------------------
# setsid puts the masters in their own session, so a Ctrl-C in the terminal
# reaches lockproxy but not them: lockproxy can finish (and undo) in-flight
# operations before cleanup stops the masters.
setsid=()
if command -v setsid >/dev/null 2>&1; then
	setsid=(setsid)
fi
for port in "${ports[@]}"; do
	dir=$root/.run/$port
	mkdir -p "$dir"
	"${setsid[@]}" "$redis_server" --port "$port" --bind 127.0.0.1 \
		--save "" --appendonly no --dir "$dir" \
		--logfile "$dir/redis.log" --daemonize no \
		</dev/null >>"$dir/redis.out" 2>&1 &
	redis_pids+=($!)
	echo $! >"$dir/redis.pid"
done
for i in "${!ports[@]}"; do
	port=${ports[$i]} pid=${redis_pids[$i]}
	for ((try = 0; ; try++)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 5 ".run/$port/redis.log" >&2 || true
			die "redis-server on port $port (pid $pid) exited; log in .run/$port/redis.log"
		fi
		pong "$port" && break
		((try < 100)) || die "redis-server on port $port (pid $pid) does not answer PING after 10s"
		sleep 0.1
	done
	echo "run.sh: redis master 127.0.0.1:$port  pid $pid  log .run/$port/redis.log"
done

# --- lockproxy, in the foreground ------------------------------------------
bin/lockproxy -config config.toml &
proxy_pid=$!
cat <<EOF
run.sh: lockproxy pid $proxy_pid on $listen (metrics on http://127.0.0.1:9379/metrics)

Try it from another terminal:
  redis-cli -p 7379 SET mylock tok NX PX 10000      # OK: acquired on a quorum
  redis-cli -p 7379 SET mylock other NX PX 10000    # (nil): held
  redis-cli -p 7379 PTTL mylock
  redis-cli -p 7379 INFO quorum

Ctrl-C stops lockproxy and the 5 masters.
EOF
# wait returns early when a trapped signal arrives, so the trap runs at once.
set +e
wait "$proxy_pid"
status=$?
set -e
proxy_pid=
echo "run.sh: lockproxy exited with status $status"
exit "$status"
