package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat. USER_HZ is
// 100 on every Linux architecture Go supports (the kernel converts to it for
// userspace whatever CONFIG_HZ is), and reading sysconf(_SC_CLK_TCK) would
// need cgo.
const clockTick = 10 * time.Millisecond

// procTimes is the CPU time a process has used so far, in user space and in
// the kernel on its behalf.
type procTimes struct{ user, sys time.Duration }

func (t procTimes) total() time.Duration { return t.user + t.sys }

// procCPU returns the user and system CPU time pid has used so far.
func procCPU(pid int) (procTimes, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procTimes{}, err
	}
	return parseStat(b)
}

// parseStat extracts utime and stime (fields 14 and 15) from a
// /proc/<pid>/stat line. The command name (field 2) is in parentheses and may
// itself contain spaces and parentheses, so fields are counted from the last
// ')'.
func parseStat(b []byte) (procTimes, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procTimes{}, fmt.Errorf("bench: malformed /proc stat line %q", b)
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 13 {
		return procTimes{}, fmt.Errorf("bench: short /proc stat line %q", b)
	}
	utime, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	stime, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return procTimes{}, fmt.Errorf("bench: bad utime/stime in /proc stat line %q", b)
	}
	return procTimes{time.Duration(utime) * clockTick, time.Duration(stime) * clockTick}, nil
}

// Syscalls counts a process's read-family (read, readv, pread…) and
// write-family (write, writev, pwrite…) system calls, sockets included, as
// /proc/<pid>/io's syscr and syscw do for all its threads. recv*/send* are
// not counted; none of the measured processes uses them on its sockets.
type Syscalls struct{ Reads, Writes int64 }

// Total is reads plus writes.
func (s Syscalls) Total() int64 { return s.Reads + s.Writes }

func (s Syscalls) sub(o Syscalls) Syscalls { return Syscalls{s.Reads - o.Reads, s.Writes - o.Writes} }
func (s Syscalls) add(o Syscalls) Syscalls { return Syscalls{s.Reads + o.Reads, s.Writes + o.Writes} }

// procIO returns pid's read and write system calls so far.
func procIO(pid int) (Syscalls, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
	if err != nil {
		return Syscalls{}, err
	}
	return parseIO(b)
}

// parseIO reads syscr and syscw out of a /proc/<pid>/io file.
func parseIO(b []byte) (Syscalls, error) {
	var s Syscalls
	found := 0
	for _, line := range bytes.Split(b, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		var dst *int64
		switch string(k) {
		case "syscr":
			dst = &s.Reads
		case "syscw":
			dst = &s.Writes
		default:
			continue
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		if err != nil {
			return Syscalls{}, fmt.Errorf("bench: bad /proc io line %q", line)
		}
		*dst = n
		found++
	}
	if found != 2 {
		return Syscalls{}, fmt.Errorf("bench: no syscr/syscw in /proc io %q", b)
	}
	return s, nil
}

// CPU is the CPU time each process used during one measured run.
type CPU struct {
	// Wall is the measured interval the CPU times refer to.
	Wall time.Duration
	// Proxy is the proxy's CPU time (of every lockproxy measured, or of
	// twemproxy); -1 when no proxy was measured. ProxySys is the part of
	// it spent in the kernel.
	Proxy, ProxySys time.Duration
	// ProxyIO and MastersIO are the read and write system calls of the
	// proxy (or proxies) and of all masters.
	ProxyIO, MastersIO Syscalls
	// Masters holds each master's CPU time, in master order.
	Masters []time.Duration
	// Client is the load generator's CPU time: this process for the Go
	// workloads, redis-benchmark for scenario 1.
	Client time.Duration
}

// MastersTotal is the CPU time of all masters together.
func (c CPU) MastersTotal() time.Duration {
	var t time.Duration
	for _, m := range c.Masters {
		t += m
	}
	return t
}

// Total is the CPU time of every measured process.
func (c CPU) Total() time.Duration {
	t := c.MastersTotal() + c.Client
	if c.Proxy > 0 {
		t += c.Proxy
	}
	return t
}

// Cores expresses d as the number of cores busy on average over c.Wall.
func (c CPU) Cores(d time.Duration) float64 {
	if c.Wall <= 0 {
		return 0
	}
	return d.Seconds() / c.Wall.Seconds()
}

// cpuMeter samples the CPU time of a fixed set of processes. A pid that
// cannot be read (a process that exited) counts as 0, so a dead process shows
// as idle instead of failing the run.
type cpuMeter struct {
	proxyPids  []int // none when no lockproxy runs
	masterPids []int // in master order
}

// cpuSnap is one sample of a cpuMeter.
type cpuSnap struct {
	at                 time.Time
	proxy              procTimes
	masters            []time.Duration
	self               time.Duration
	proxyIO, mastersIO Syscalls
}

func (m *cpuMeter) snap() cpuSnap {
	s := cpuSnap{at: time.Now(), masters: make([]time.Duration, len(m.masterPids))}
	for _, pid := range m.proxyPids {
		t, _ := procCPU(pid)
		s.proxy.user += t.user
		s.proxy.sys += t.sys
		io, _ := procIO(pid)
		s.proxyIO = s.proxyIO.add(io)
	}
	for i, pid := range m.masterPids {
		t, _ := procCPU(pid)
		s.masters[i] = t.total()
		io, _ := procIO(pid)
		s.mastersIO = s.mastersIO.add(io)
	}
	self, _ := procCPU(os.Getpid())
	s.self = self.total()
	return s
}

// since returns the CPU used between s0 and s1, with this process as the
// client.
func (m *cpuMeter) since(s0, s1 cpuSnap) CPU {
	c := CPU{Wall: s1.at.Sub(s0.at), Proxy: -1, Client: s1.self - s0.self, MastersIO: s1.mastersIO.sub(s0.mastersIO)}
	if len(m.proxyPids) > 0 {
		c.Proxy = s1.proxy.total() - s0.proxy.total()
		c.ProxySys = s1.proxy.sys - s0.proxy.sys
		c.ProxyIO = s1.proxyIO.sub(s0.proxyIO)
	}
	c.Masters = make([]time.Duration, len(s0.masters))
	for i := range s0.masters {
		c.Masters[i] = s1.masters[i] - s0.masters[i]
	}
	return c
}
