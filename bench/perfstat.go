package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// perfTimeout bounds each exchange with perf stat: an answer on its control
// descriptor, its exit after SIGINT.
const perfTimeout = 10 * time.Second

var errPerfNoCounts = errors.New("perf stat counted nothing")

// perfEvent is one counter of perf stat: an event and its tracepoint filter.
type perfEvent struct{ name, filter string }

// perfStat is a `perf stat` attached to a process, its counters enabled
// from start until stop: it starts with them disabled (-D -1) and is told
// when to count through its control descriptor, so that the counts cover
// the measured run and not perf's own start.
type perfStat struct {
	cmd    *exec.Cmd
	ctl    *os.File // we write enable/disable
	ack    *os.File // perf answers "ack"
	out    string   // its CSV output (-x , -o)
	events int
	exited chan struct{}
}

// startPerfStat attaches perf stat to pid and enables its counters.
func startPerfStat(ctx context.Context, perf string, pid int, out string, events []perfEvent) (*perfStat, error) {
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
	args := []string{"stat", "-x", ",", "-o", out, "-D", "-1", "--control", "fd:3,4", "-p", strconv.Itoa(pid)}
	for _, e := range events {
		args = append(args, "-e", e.name)
		if e.filter != "" {
			args = append(args, "--filter", e.filter)
		}
	}
	ps := &perfStat{cmd: exec.CommandContext(ctx, perf, args...), ctl: ctlW, ack: ackR, out: out, events: len(events),
		exited: make(chan struct{})}
	ps.cmd.ExtraFiles = []*os.File{ctlR, ackW} // fds 3 and 4
	ps.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	ps.cmd.Stderr = &stderr
	err = ps.cmd.Start()
	ctlR.Close()
	ackW.Close()
	if err != nil {
		ctlW.Close()
		ackR.Close()
		return nil, fmt.Errorf("start perf stat: %w", err)
	}
	go func() { _ = ps.cmd.Wait(); close(ps.exited) }()
	if err := ps.command("enable"); err != nil {
		ps.kill()
		<-ps.exited
		return nil, fmt.Errorf("perf stat %s: %w (%s)", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return ps, nil
}

// command sends cmd on perf's control descriptor and waits for its ack.
func (ps *perfStat) command(cmd string) error {
	if _, err := ps.ctl.Write([]byte(cmd + "\n")); err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	_ = ps.ack.SetReadDeadline(time.Now().Add(perfTimeout))
	line, err := bufio.NewReader(ps.ack).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ack" {
		return fmt.Errorf("%s: no ack from perf (%q, %v)", cmd, line, err)
	}
	return nil
}

func (ps *perfStat) kill() {
	_ = ps.cmd.Process.Kill()
	ps.ctl.Close()
	ps.ack.Close()
}

// stop disables the counters, ends perf and returns the counts in the order
// of the events.
func (ps *perfStat) stop() ([]int64, error) {
	if err := ps.command("disable"); err != nil {
		ps.kill()
		<-ps.exited
		return nil, err
	}
	_ = ps.cmd.Process.Signal(os.Interrupt)
	select {
	case <-ps.exited:
	case <-time.After(perfTimeout):
		ps.kill()
		<-ps.exited
		return nil, fmt.Errorf("perf stat did not exit within %v of SIGINT", perfTimeout)
	}
	ps.ctl.Close()
	ps.ack.Close()
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

// readProxyFds returns pid's descriptors, those among them connected to a
// master, and how many of its sockets are connected to anything else (a
// client).
func readProxyFds(pid int, masters []string) (proxyFds, int, error) {
	var fds proxyFds
	masterPorts := map[int]bool{}
	for _, m := range masters {
		_, port, err := net.SplitHostPort(m)
		if err != nil {
			return fds, 0, err
		}
		p, _ := strconv.Atoi(port)
		masterPorts[p] = true
	}
	socks, err := tcpSockets()
	if err != nil {
		return fds, 0, err
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fds, 0, err
	}
	clients := 0
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fds.all = append(fds.all, fd)
		link, err := os.Readlink(dir + "/" + e.Name())
		if err != nil {
			continue // closed meanwhile
		}
		inode, ok := strings.CutPrefix(link, "socket:[")
		if !ok {
			continue
		}
		s, ok := socks[strings.TrimSuffix(inode, "]")]
		switch {
		case !ok || s.listening:
		case masterPorts[s.remotePort]:
			fds.master = append(fds.master, fd)
		default:
			clients++
		}
	}
	return fds, clients, nil
}

// tcpSocket is what readProxyFds needs of a line of /proc/net/tcp.
type tcpSocket struct {
	remotePort int
	listening  bool
}

// tcpSockets reads /proc/net/tcp and tcp6, by inode.
func tcpSockets() (map[string]tcpSocket, error) {
	socks := map[string]tcpSocket{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) && f != "/proc/net/tcp" {
			continue // no IPv6
		}
		if err != nil {
			return nil, err
		}
		parseNetTCP(string(b), socks)
	}
	return socks, nil
}

// parseNetTCP adds the sockets of a /proc/net/tcp file to socks:
//
//	sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
//	 0: 0100007F:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 123456 ...
func parseNetTCP(s string, socks map[string]tcpSocket) {
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || !strings.HasSuffix(f[0], ":") {
			continue
		}
		_, rport, ok := strings.Cut(f[2], ":")
		if !ok {
			continue
		}
		port, err := strconv.ParseInt(rport, 16, 32)
		if err != nil {
			continue
		}
		socks[f[9]] = tcpSocket{remotePort: int(port), listening: f[3] == "0A"}
	}
}
