// Package bench measures lockproxy side by side with the alternatives a user
// would otherwise pick, in one run and on the same Redis masters:
//
//   - lockproxy: a single-node lock client (go-redis, redis-benchmark) pointed
//     at lockproxy, which turns every command into a Redlock quorum over the
//     masters;
//   - redsync: github.com/go-redsync/redsync/v4, client-side Redlock over the
//     same masters (one round trip per master per acquire and per release);
//   - direct: the same single-node client against one of the masters, the
//     upper bound without any quorum;
//   - twemproxy: redis-benchmark through twemproxy (nutcracker), the Redis
//     proxy people already run, forwarding to that one master: the
//     yardstick for lockproxy's own CPU per request (scenario 1 only).
//
// Run starts its own masters (internal/redisproc) and lockproxy, then runs the
// scenarios one after the other so they never compete for the machine's CPUs:
//
//  1. redis-benchmark SET NX PX with 50 plain and 50 pipelined (-P 16)
//     connections, against one direct master, twemproxy in front of it
//     (the twemproxy scenario: nutcracker must be installed) and lockproxy,
//     with each proxy's CPU per request, user and kernel, and, counted
//     with perf in extra runs, its system calls per request on the client
//     and on the master side and where its CPU goes (proxycpu.go,
//     profile.go);
//  2. go-redis acquire (SET NX PX of a random key out of 100k) + release (the
//     compare-and-delete script), 16 and 64 workers, per target;
//  3. hot key: 64 workers contend for one key, hold it 1ms, release;
//  4. degraded: scenario 2 at 64 workers through lockproxy with one master
//     paused (SIGSTOP), compared with the unpaused figure;
//  5. multiproxy: 1, 2 and 3 lockproxy processes on the same masters, 32
//     workers spread over them contending on 2 keys, then 1 and 3 with a
//     master paused: acquisitions/s, acquire latency, and the attempts
//     refused while the key was free (split votes between proxies), read
//     from the masters' own MONITOR streams (refused.go, truth.go);
//  6. waiters: two lockproxy processes on the same masters, pairs of
//     clients (one on each proxy) passing a lock back and forth, the
//     waiter woken by pub/sub (Redisson 4's scripts), by BLPOP
//     (python-redis-lock's) or polling every 50ms: release → the waiter's
//     acquisition, p50/p99, and whether every release woke its waiter
//     once (waiters.go, waitstyles.go). It runs before 4 and 5.
//
// Scenarios 1, 2, 5 and 6 repeat in Config.Rounds rounds (default 3), each
// target or variant once per round, back to back; their targets are judged
// on the median round, because one run of each swings by about ±10% on a
// shared 2-core machine.
//
// Each run records throughput, acquire latency quantiles and the CPU time of
// every process involved (from /proc/<pid>/stat). Results.WriteReport renders
// a markdown report with the ratios the project targets, benchstat-compatible
// "Benchmark..." lines, and PNG charts.
//
// Every load loop stops by itself at its deadline and every process Run starts
// is stopped by pid before it returns, on error paths too.
package bench
