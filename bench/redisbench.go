package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RedisBenchResult is one redis-benchmark run of the SET NX PX command.
type RedisBenchResult struct {
	Target   Target
	Clients  int // -c
	Pipeline int // -P
	Requests int // -n
	Round    int // 1-based (Config.Rounds)
	// RPS is redis-benchmark's own throughput figure (requests per second).
	RPS float64
	// Latency quantiles as redis-benchmark reports them (per request; with
	// -P 16 a request waits for its whole pipeline). P999 comes from its
	// percentile distribution, which is coarser than the others.
	Lat Quantiles
	CPU CPU
}

// redisBenchArgs returns the command line of one redis-benchmark run. The key
// prefix keeps each run's keys apart from the keys earlier runs left behind
// (they live 10s), so every run starts on the same, empty key space.
func redisBenchArgs(addr string, clients, pipeline, requests, keys int, prefix string) ([]string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	return []string{
		"-h", host, "-p", port,
		"-c", strconv.Itoa(clients), "-P", strconv.Itoa(pipeline),
		"-n", strconv.Itoa(requests), "-r", strconv.Itoa(keys),
		"SET", prefix + "key:__rand_int__", "val", "NX", "PX", "10000",
	}, nil
}

// runRedisBenchmark runs redis-benchmark once against addr and measures the
// CPU of the cluster's processes meanwhile; the client's CPU is
// redis-benchmark's own (from its rusage).
func runRedisBenchmark(ctx context.Context, addr string, clients, pipeline, requests, keys int, prefix string, meter *cpuMeter, limit time.Duration) (RedisBenchResult, error) {
	r := RedisBenchResult{Clients: clients, Pipeline: pipeline, Requests: requests}
	args, err := redisBenchArgs(addr, clients, pipeline, requests, keys, prefix)
	if err != nil {
		return r, err
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "redis-benchmark", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = time.Second
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	s0 := meter.snap()
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return r, fmt.Errorf("bench: redis-benchmark %s stopped after %v: %w", strings.Join(args, " "), limit, ctx.Err())
		}
		var hint string
		if bytes.Contains(stderr.Bytes(), []byte("NOQUORUM")) || bytes.Contains(out.Bytes(), []byte("NOQUORUM")) {
			// redis-benchmark stops at the first error reply. Masters that
			// miss node_timeout under this load mean the machine is busier
			// than the benchmark's node_timeout allows, not a fault.
			hint = "\nlockproxy answered NOQUORUM: masters on this machine missed node_timeout under this load; " +
				"run again with a longer one, e.g. make bench BENCHFLAGS=-node-timeout=200ms (the degraded p99 goal follows it)"
		}
		return r, fmt.Errorf("bench: redis-benchmark %s: %w\n%s%s", strings.Join(args, " "), err, stderr.Bytes(), hint)
	}
	s1 := meter.snap()
	r.CPU = meter.since(s0, s1)
	r.CPU.Client = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if err := parseRedisBenchmark(out.Bytes(), &r); err != nil {
		return r, fmt.Errorf("%w\n%s", err, lastLines(out.String(), 12))
	}
	return r, nil
}

// parseRedisBenchmark reads the throughput and latency summary that
// redis-benchmark (7.x, default output mode) prints after a run, and the
// 99.9th percentile from its "Latency by percentile distribution" section:
//
//	Latency by percentile distribution:
//	0.000% <= 0.791 milliseconds (cumulative count 16)
//	...
//	99.902% <= 4.319 milliseconds (cumulative count 19984)
//	Summary:
//	  throughput summary: 400000.00 requests per second
//	  latency summary (msec):
//	          avg       min       p50       p95       p99       max
//	        1.813     0.784     1.743     2.695     4.095     4.335
func parseRedisBenchmark(out []byte, r *RedisBenchResult) error {
	// Progress lines end in \r, not \n: split on both.
	sc := bufio.NewScanner(bytes.NewReader(bytes.ReplaceAll(out, []byte("\r"), []byte("\n"))))
	var header []string
	haveRPS, haveLat, haveP999 := false, false, false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "throughput summary:") && len(f) >= 3:
			v, err := strconv.ParseFloat(f[2], 64)
			if err != nil {
				return fmt.Errorf("bench: redis-benchmark throughput %q: %w", line, err)
			}
			r.RPS, haveRPS = v, true
		case len(f) > 0 && f[0] == "avg":
			header = f
		case header != nil && len(f) == len(header):
			for i, name := range header {
				v, err := strconv.ParseFloat(f[i], 64)
				if err != nil {
					return fmt.Errorf("bench: redis-benchmark latency %q: %w", line, err)
				}
				d := time.Duration(v * float64(time.Millisecond))
				switch name {
				case "p50":
					r.Lat.P50 = d
				case "p99":
					r.Lat.P99 = d
				case "max":
					r.Lat.Max = d
				}
			}
			header, haveLat = nil, true
		case !haveP999 && len(f) >= 3 && strings.HasSuffix(f[0], "%") && f[1] == "<=":
			pct, err1 := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
			ms, err2 := strconv.ParseFloat(f[2], 64)
			if err1 == nil && err2 == nil && pct >= 99.9 {
				r.Lat.P999, haveP999 = time.Duration(ms*float64(time.Millisecond)), true
			}
		}
	}
	if !haveRPS || !haveLat {
		return errors.New("bench: no throughput/latency summary in redis-benchmark output")
	}
	if !haveP999 {
		r.Lat.P999 = r.Lat.Max
	}
	return nil
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(strings.ReplaceAll(s, "\r", "\n"), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
