package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// Where a proxy's CPU goes: during its second profile run (profile.go)
// perf record samples the proxy's call stacks, and each sample is put in
// one category: in the kernel, by the system call it was in (or none:
// interrupts, page faults); in user space, by whose code ran: the proxy's
// own (a Go package of the module, or the nutcracker binary), the Go
// runtime, its garbage collector, or the C library. The shares are of the
// proxy's CPU time.

// profileHz is perf record's sampling frequency.
const profileHz = 2999

// Category names of CPUProfile.
const (
	catInterrupts = "kernel: not in a system call (interrupts, page faults)"
	catReturn     = "kernel: return to user space (signals, rescheduling)"
	catRuntime    = "user: Go runtime (scheduler, sysmon, timers)"
	catGC         = "user: Go garbage collector"
	catLibc       = "user: C library (system call wrappers, memcpy)"
	catOtherUser  = "user: other"
)

// CPUProfile counts perf samples of one proxy by category.
type CPUProfile struct {
	Samples int
	ByCat   map[string]int
}

// Share is the fraction of the samples in category c.
func (p *CPUProfile) Share(c string) float64 {
	if p == nil || p.Samples == 0 {
		return 0
	}
	return float64(p.ByCat[c]) / float64(p.Samples)
}

// top lists the n largest categories with their shares.
func (p *CPUProfile) top(n int) string {
	cats := p.categories()
	var parts []string
	for _, c := range cats[:min(n, len(cats))] {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", c, 100*p.Share(c)))
	}
	return strings.Join(parts, ", ")
}

// categories returns p's categories, largest first.
func (p *CPUProfile) categories() []string {
	var cats []string
	for c := range p.ByCat {
		cats = append(cats, c)
	}
	slices.SortFunc(cats, func(a, b string) int { return cmp.Or(cmp.Compare(p.ByCat[b], p.ByCat[a]), strings.Compare(a, b)) })
	return cats
}

// perfRecord is perf record sampling a process's call stacks into out.
type perfRecord struct {
	*perfProc
	perf, out string
}

func startPerfRecord(ctx context.Context, perf string, pid int, out string) (*perfRecord, error) {
	p, err := startPerf(ctx, perf, "record", "-g", "-F", strconv.Itoa(profileHz), "-o", out, "-p", strconv.Itoa(pid))
	if err != nil {
		return nil, err
	}
	return &perfRecord{perfProc: p, perf: perf, out: out}, nil
}

// profile stops perf record and sorts its samples.
func (pr *perfRecord) profile(ctx context.Context) (*CPUProfile, error) {
	if err := pr.stop(); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, pr.perf, "script", "-i", pr.out, "-F", "ip,sym,dso")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("perf script: %w (%s)", err, strings.TrimSpace(stderr.String()))
	}
	p := parsePerfScript(out)
	if p.Samples == 0 {
		return nil, fmt.Errorf("perf record took no sample of the proxy")
	}
	return p, nil
}

// frame is one line of a perf script call stack: "ffffffff81 ksys_write
// ([kernel.kallsyms])".
type frame struct {
	sym    string
	kernel bool
	dso    string
}

// parsePerfScript reads the output of perf script -F ip,sym,dso: one call
// stack per sample, leaf first, samples separated by blank lines.
func parsePerfScript(out []byte) *CPUProfile {
	p := &CPUProfile{ByCat: map[string]int{}}
	var stack []frame
	flush := func() {
		if len(stack) > 0 {
			p.ByCat[category(stack)]++
			p.Samples++
			stack = stack[:0]
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			flush()
			continue
		}
		ip, rest, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		f := frame{kernel: strings.HasPrefix(ip, "ffffffff")}
		if i := strings.LastIndex(rest, " ("); i >= 0 {
			f.sym, f.dso = rest[:i], strings.Trim(rest[i+1:], "()")
		} else {
			f.sym = rest
		}
		stack = append(stack, f)
	}
	flush()
	return p
}

// category sorts one sample's stack (leaf first).
func category(stack []frame) string {
	if stack[0].kernel {
		return kernelCategory(stack)
	}
	for _, f := range stack {
		if strings.HasPrefix(f.sym, "runtime.gcBgMarkWorker") || strings.HasPrefix(f.sym, "runtime.gcAssist") ||
			strings.HasPrefix(f.sym, "runtime.bgsweep") || strings.HasPrefix(f.sym, "runtime.bgscavenge") {
			return catGC
		}
	}
	// Runtime helpers (memmove, map hashing, malloc) count for the module
	// code that called them.
	module := strings.TrimSuffix(benchPkg, "bench")
	for _, f := range stack {
		if pkg, ok := strings.CutPrefix(f.sym, module); ok {
			return "user: " + goPackage(pkg)
		}
	}
	leaf := stack[0]
	switch {
	case strings.Contains(leaf.dso, "libc.so") || strings.Contains(leaf.dso, "ld-linux"):
		return catLibc
	case strings.HasSuffix(leaf.dso, "nutcracker"):
		return "user: nutcracker"
	case strings.HasPrefix(leaf.sym, "runtime.") || strings.HasPrefix(leaf.sym, "internal/runtime") || strings.HasPrefix(leaf.sym, "syscall."):
		return catRuntime
	}
	return catOtherUser
}

// goPackage returns the package path of a Go symbol relative to the module:
// "quorum.(*Request).complete" is "quorum", "internal/evloop.Read" is
// "internal/evloop". The module's package paths have no dots, so the path
// ends at the first.
func goPackage(sym string) string {
	pkg, _, _ := strings.Cut(sym, ".")
	return pkg
}

// kernelCategory names the system call a kernel stack is in, from the frame
// that do_syscall_64 called (ksys_write, do_writev, __x64_sys_epoll_wait…).
func kernelCategory(stack []frame) string {
	for i, f := range stack {
		if !f.kernel {
			break
		}
		if f.sym != "do_syscall_64" {
			continue
		}
		for j := i - 1; j >= 0; j-- {
			s := stack[j].sym
			if s == "x64_sys_call" || s == "" || strings.HasPrefix(s, "[unknown]") || strings.Contains(s, "_thunk") {
				continue // dispatch, unknown frames, mitigation thunks
			}
			if s == "exit_to_user_mode_loop" || strings.HasPrefix(s, "syscall_exit") {
				return catReturn
			}
			for _, prefix := range []string{"__x64_sys_", "__se_sys_", "__do_sys_", "ksys_", "do_"} {
				s = strings.TrimPrefix(s, prefix)
			}
			switch s {
			case "epoll_pwait", "epoll_wait", "epoll_pwait2":
				s = "epoll_wait"
			}
			return "kernel: " + s
		}
		return "kernel: other system calls"
	}
	return catInterrupts
}
