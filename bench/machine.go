package bench

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Machine describes where a run happened, for the report's first line.
type Machine struct {
	CPUs     int    // logical CPUs this process may use
	CPUModel string // "model name" of /proc/cpuinfo
	Kernel   string
	Go       string // runtime.Version()
	Redis    string // redis-server version
	Date     time.Time
}

// probeMachine fills a Machine; fields it cannot read say "unknown".
func probeMachine(ctx context.Context) Machine {
	m := Machine{CPUs: runtime.NumCPU(), CPUModel: "unknown", Kernel: "unknown", Go: runtime.Version(),
		Redis: "unknown", Date: time.Now().UTC()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 ..."
	if out, err := exec.CommandContext(ctx, "redis-server", "--version").Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if v, ok := strings.CutPrefix(f, "v="); ok {
				m.Redis = v
			}
		}
	}
	return m
}

// String is the report's machine line.
func (m Machine) String() string {
	return m.Date.Format("2006-01-02 15:04 UTC") + " · " + strconv.Itoa(m.CPUs) + " CPUs (" + m.CPUModel + ") · " +
		m.Kernel + " · " + m.Go + " · redis " + m.Redis
}

// loadAvg is the machine's 1-minute load average (/proc/loadavg), this
// benchmark's own processes included: on a machine shared with other work
// it tells a run slowed by others from one that was not. -1 when
// unreadable.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	return parseLoadAvg(string(b))
}

// parseLoadAvg reads the first field of a /proc/loadavg line, -1 if bad.
func parseLoadAvg(s string) float64 {
	f := strings.Fields(s)
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// fmtLoad renders a loadAvg figure for a table.
func fmtLoad(l float64) string {
	if l < 0 {
		return "–"
	}
	return strconv.FormatFloat(l, 'f', 1, 64)
}
