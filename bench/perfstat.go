package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// perfTimeout bounds each exchange with perf: an answer on its control
// descriptor, its exit after SIGINT.
const perfTimeout = 10 * time.Second

var errPerfNoCounts = errors.New("perf stat counted nothing")

// perfEvent is one counter of perf stat: an event and its tracepoint filter.
type perfEvent struct{ name, filter string }

// perfProc is a perf command (stat or record) attached to a process, its
// events enabled from start until stop: it starts with them disabled
// (-D -1) and is told when to count through its control descriptor, so that
// what it records covers the measured run and not perf's own start.
type perfProc struct {
	cmd    *exec.Cmd
	ctl    *os.File // we write enable/disable
	ack    *os.File // perf answers "ack"
	stderr strings.Builder
	exited chan struct{}
}

// startPerf runs `perf sub args...` with control descriptors and enables
// its events.
func startPerf(ctx context.Context, perf, sub string, args ...string) (*perfProc, error) {
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	ackR, ackW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, err
	}
	args = append([]string{sub, "-D", "-1", "--control", "fd:3,4"}, args...)
	p := &perfProc{cmd: exec.CommandContext(ctx, perf, args...), ctl: ctlW, ack: ackR, exited: make(chan struct{})}
	p.cmd.ExtraFiles = []*os.File{ctlR, ackW} // fds 3 and 4
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd.Stderr = &p.stderr
	err = p.cmd.Start()
	ctlR.Close()
	ackW.Close()
	if err != nil {
		ctlW.Close()
		ackR.Close()
		return nil, fmt.Errorf("start perf %s: %w", sub, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	if err := p.command("enable"); err != nil {
		p.kill()
		return nil, fmt.Errorf("perf %s: %w (%s)", strings.Join(args, " "), err, strings.TrimSpace(p.stderr.String()))
	}
	return p, nil
}

// command sends cmd on perf's control descriptor and waits for its ack.
func (p *perfProc) command(cmd string) error {
	if _, err := p.ctl.Write([]byte(cmd + "\n")); err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	_ = p.ack.SetReadDeadline(time.Now().Add(perfTimeout))
	line, err := bufio.NewReader(p.ack).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ack" {
		return fmt.Errorf("%s: no ack from perf (%q, %v)", cmd, line, err)
	}
	return nil
}

// kill ends perf at once and waits for it.
func (p *perfProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
	p.ctl.Close()
	p.ack.Close()
}

// stop disables the events and waits for perf to write its output and exit.
func (p *perfProc) stop() error {
	if err := p.command("disable"); err != nil {
		p.kill()
		return err
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exited:
	case <-time.After(perfTimeout):
		p.kill()
		return fmt.Errorf("perf did not exit within %v of SIGINT", perfTimeout)
	}
	p.ctl.Close()
	p.ack.Close()
	return nil
}

// perfStat is perf stat attached to a process, writing CSV to out.
type perfStat struct {
	*perfProc
	out    string
	events int
}

// startPerfStat attaches perf stat to pid with events, counting from now.
func startPerfStat(ctx context.Context, perf string, pid int, out string, events []perfEvent) (*perfStat, error) {
	args := []string{"-x", ",", "-o", out, "-p", strconv.Itoa(pid)}
	for _, e := range events {
		args = append(args, "-e", e.name)
		if e.filter != "" {
			args = append(args, "--filter", e.filter)
		}
	}
	p, err := startPerf(ctx, perf, "stat", args...)
	if err != nil {
		return nil, err
	}
	return &perfStat{perfProc: p, out: out, events: len(events)}, nil
}

// counts stops perf stat and returns its counts in the order of the events.
func (ps *perfStat) counts() ([]int64, error) {
	if err := ps.stop(); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(ps.out)
	if err != nil {
		return nil, err
	}
	counts, err := parsePerfCSV(string(b))
	if err == nil && len(counts) != ps.events {
		err = fmt.Errorf("perf stat printed %d counts for %d events", len(counts), ps.events)
	}
	return counts, err
}

// parsePerfCSV returns the counts of perf stat's -x , output, in order:
//
//	# started on Mon Nov 23 14:57:54 2026
//
//	164,,syscalls:sys_enter_write,6423638,100.00,,
//	<not counted>,,context-switches,0,100.00,,
//
// A counter that never ran ("<not counted>") is 0; one the machine does
// not have ("<not supported>") is an error, and so is output where nothing
// was counted at all.
func parsePerfCSV(out string) ([]int64, error) {
	var counts []int64
	counted := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(strings.TrimSpace(line), ",")
		if len(f) < 4 || strings.HasPrefix(f[0], "#") {
			continue // the header, blank lines, "Events enabled"
		}
		switch f[0] {
		case "<not counted>":
			counts = append(counts, 0)
			continue
		case "<not supported>":
			return nil, fmt.Errorf("perf stat: event %s not supported here", f[2])
		}
		n, err := strconv.ParseFloat(f[0], 64) // counts are integers, but the format allows decimals
		if err != nil {
			return nil, fmt.Errorf("perf stat: bad count in %q", line)
		}
		counts = append(counts, int64(n))
		counted = counted || n > 0
	}
	if !counted {
		return nil, errPerfNoCounts
	}
	return counts, nil
}
