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

// procCPU returns the user+system CPU time pid has used so far.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStat(b)
}

// parseStat extracts utime+stime (fields 14 and 15) from a /proc/<pid>/stat
// line. The command name (field 2) is in parentheses and may itself contain
// spaces and parentheses, so fields are counted from the last ')'.
func parseStat(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("bench: malformed /proc stat line %q", b)
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 13 {
		return 0, fmt.Errorf("bench: short /proc stat line %q", b)
	}
	utime, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	stime, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bench: bad utime/stime in /proc stat line %q", b)
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// CPU is the CPU time each process used during one measured run.
type CPU struct {
	// Wall is the measured interval the CPU times refer to.
	Wall time.Duration
	// Proxy is lockproxy's CPU time (of every lockproxy measured); -1 when
	// no lockproxy was running.
	Proxy time.Duration
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
	at      time.Time
	proxy   time.Duration
	masters []time.Duration
	self    time.Duration
}

func (m *cpuMeter) snap() cpuSnap {
	s := cpuSnap{at: time.Now(), masters: make([]time.Duration, len(m.masterPids))}
	for _, pid := range m.proxyPids {
		d, _ := procCPU(pid)
		s.proxy += d
	}
	for i, pid := range m.masterPids {
		s.masters[i], _ = procCPU(pid)
	}
	s.self, _ = procCPU(os.Getpid())
	return s
}

// since returns the CPU used between s0 and s1, with this process as the
// client.
func (m *cpuMeter) since(s0, s1 cpuSnap) CPU {
	c := CPU{Wall: s1.at.Sub(s0.at), Proxy: -1, Client: s1.self - s0.self}
	if len(m.proxyPids) > 0 {
		c.Proxy = s1.proxy - s0.proxy
	}
	c.Masters = make([]time.Duration, len(s0.masters))
	for i := range s0.masters {
		c.Masters[i] = s1.masters[i] - s0.masters[i]
	}
	return c
}
