// Package redisproc starts and controls real redis-server processes for tests,
// benchmarks and make run.
//
// Every server binds 127.0.0.1 only, keeps no data on disk (--save "",
// --appendonly no) and writes its log into its own directory. The package
// only ever signals the processes it started, by their pid: it never looks
// processes up by name.
package redisproc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Timings of the process lifecycle.
const (
	// readyTimeout bounds how long Start and Restart wait for a new process
	// to answer.
	readyTimeout = 10 * time.Second
	// readyPoll is the pause between two polls while waiting, and
	// readyPollTimeout the deadline of one poll: short, so that a process
	// that exits (bind failure) is noticed at once even when something
	// else holds the port and never answers.
	readyPoll        = 10 * time.Millisecond
	readyPollTimeout = 200 * time.Millisecond
	// stopGrace is how long Stop waits after SIGTERM before SIGKILL.
	stopGrace = 5 * time.Second
	// portAttempts bounds Start's retries when another process took the
	// free port it picked before redis-server could bind it.
	portAttempts = 5
)

// Names of the files a server writes in its directory.
const (
	logName = "redis.log" // redis-server's own log (--logfile)
	outName = "redis.out" // stdout and stderr: errors printed before the log is open
)

// Errors of the package, checked with errors.Is.
var (
	// ErrNotRunning: Pause or Resume of a server that is not running.
	ErrNotRunning = errors.New("redisproc: server is not running")
	// errPortInUse marks a start that failed because the port was taken;
	// Start retries those with a fresh port when it picked the port itself.
	errPortInUse = errors.New("port already in use")
)

// installHint is the command that gives a Debian machine redis-server.
const installHint = "apt-get install -y redis-server redis-tools"

// EnvBinary names the environment variable that picks the redis-server
// binary the tests, benchmarks and make run start, for running them
// against another version of the masters (a Redis 7.4 or Valkey 8 built
// from source: docs/compat.md). Its value is a path, or a name looked up
// on PATH.
const EnvBinary = "LOCKPROXY_REDIS_SERVER"

// Binary returns the path of the redis-server executable: the one
// LOCKPROXY_REDIS_SERVER names when it is set, else the one on PATH, else
// /usr/bin/redis-server.
func Binary() (string, error) {
	return findBinary(os.Getenv(EnvBinary), "/usr/bin/redis-server")
}

// findBinary is Binary with the variable's value and the fallback path as
// parameters, for tests. A variable naming no executable is an error, not a
// fall back to the default: a run meant for one version must not pass on
// another.
func findBinary(env, fallback string) (string, error) {
	if env != "" {
		p, err := exec.LookPath(env)
		if err != nil {
			return "", fmt.Errorf("redisproc: %s=%q names no executable redis-server (%v); give the path of a built one, e.g. redis/src/redis-server", EnvBinary, env, err)
		}
		return filepath.Abs(p)
	}
	if p, err := exec.LookPath("redis-server"); err == nil {
		return filepath.Abs(p)
	}
	if fi, err := os.Stat(fallback); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
		return fallback, nil
	}
	return "", fmt.Errorf("redisproc: redis-server not found on PATH nor at %s; install it with: %s", fallback, installHint)
}

// Options configure Start. The zero value is not usable: Dir is required.
type Options struct {
	// Dir is the server's working directory (--dir) and holds its log. It is
	// created when missing. Required.
	Dir string
	// Port is the TCP port on 127.0.0.1. 0 picks a free one (and picks
	// again if another process takes it first).
	Port int
	// ExtraArgs are appended to the redis-server command line, for example
	// []string{"--maxmemory", "10mb"}. They come last, so they override the
	// package's defaults.
	ExtraArgs []string
}

// Server is one redis-server process started by this package. Its methods
// are safe for concurrent use.
type Server struct {
	// Addr is "127.0.0.1:<Port>", the address clients dial.
	Addr string
	// Port is the TCP port; it stays the same across Restart.
	Port int
	// Dir is the absolute working directory.
	Dir string
	// LogFile is the absolute path of redis-server's log, for debugging a
	// failed test.
	LogFile string

	bin       string
	extraArgs []string

	mu     sync.Mutex // protects the fields below, held during signals and waits
	cmd    *exec.Cmd  // the current process; nil before the first start
	exited chan struct{}
	paused bool
}

// Start starts redis-server as opt says and returns once it answers (polled
// every 10ms for up to 10s, and checked to be this process, not another one
// on the same port). On failure the error carries the tail of its log.
func Start(opt Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if opt.Dir == "" {
		return nil, errors.New("redisproc: Options.Dir is required")
	}
	dir, err := filepath.Abs(opt.Dir)
	if err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	s := &Server{
		Dir:       dir,
		LogFile:   filepath.Join(dir, logName),
		bin:       bin,
		extraArgs: append([]string(nil), opt.ExtraArgs...),
	}
	for attempt := 1; ; attempt++ {
		port := opt.Port
		if port == 0 {
			if port, err = freePort(); err != nil {
				return nil, err
			}
		}
		s.Port = port
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.mu.Lock()
		err = s.startLocked()
		s.mu.Unlock()
		if err == nil {
			return s, nil
		}
		// A port we picked ourselves can be taken by anyone between our
		// probe and redis-server's bind: pick another one. A port the
		// caller chose is the caller's business.
		if opt.Port != 0 || !errors.Is(err, errPortInUse) || attempt == portAttempts {
			return nil, err
		}
	}
}

// freePort asks the kernel for a port that is free on 127.0.0.1 right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redisproc: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startLocked starts a fresh process on s.Port and waits until it answers.
// s.mu must be held and no process of s may be running.
func (s *Server) startLocked() error {
	out, err := os.OpenFile(filepath.Join(s.Dir, outName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("redisproc: %w", err)
	}
	defer out.Close() // the child holds its own copy
	// Both files are appended to across restarts; remember where this
	// run's part starts so a failure reports only its own lines.
	from := [2]int64{fileSize(s.LogFile), fileSize(out.Name())}

	args := []string{
		"--port", strconv.Itoa(s.Port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.Dir,
		"--logfile", s.LogFile,
		"--daemonize", "no",
	}
	args = append(args, s.extraArgs...)
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.Dir
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redisproc: start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // reaps the child; the exit status is not interesting
		close(exited)
	}()
	s.cmd, s.exited, s.paused = cmd, exited, false

	if err := s.waitReady(cmd.Process.Pid, exited); err != nil {
		s.killLocked()
		tail := s.logTail(from)
		if strings.Contains(tail, "Address already in use") && !errors.Is(err, errPortInUse) {
			err = fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return fmt.Errorf("redisproc: redis-server on %s: %w\n%s", s.Addr, err, tail)
	}
	return nil
}

// waitReady polls INFO until the process pid answers on s.Addr, it exits, or
// readyTimeout passes. Any answer from the port is not enough: when
// redis-server could not bind because another one listens there, the other
// one answers, so the process_id must be ours.
func (s *Server) waitReady(pid int, exited <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	var lastErr error
	for {
		select {
		case <-exited:
			return errors.New("redis-server exited during start-up")
		default:
		}
		info, err := s.do(readyPollTimeout, []string{"INFO", "server"})
		if err == nil {
			if other := infoField(info, "process_id"); other != strconv.Itoa(pid) {
				return fmt.Errorf("%w: another redis-server (pid %s) answers on it", errPortInUse, other)
			}
			return nil
		}
		// With --requirepass in ExtraArgs the server answers only NOAUTH:
		// it is up, though its identity cannot be checked.
		if re := ReplyError(""); errors.As(err, &re) && strings.HasPrefix(string(re), "NOAUTH") {
			return nil
		}
		lastErr = err
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer after %v: %w", readyTimeout, lastErr)
		}
		time.Sleep(readyPoll)
	}
}

// infoField returns the value of "name:value" in an INFO reply, "" if absent.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// Pid returns the pid of the current process, or of the last one if it was
// killed or stopped.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Kill sends SIGKILL and waits for the process to exit. The data is lost:
// nothing is persisted. Killing a server that is not running is a no-op.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
	return nil
}

// killLocked SIGKILLs the current process, if running, and waits for it.
// SIGKILL also ends a stopped (paused) process. s.mu must be held.
func (s *Server) killLocked() {
	if !s.runningLocked() {
		return
	}
	// Process.Signal fails only once the process is reaped, which the wait
	// below also covers.
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
	s.paused = false
}

// Pause sends SIGSTOP: the server keeps its sockets and data but answers
// nothing (the kernel still accepts connections) until Resume.
func (s *Server) Pause() error {
	return s.signal(syscall.SIGSTOP, true)
}

// Resume sends SIGCONT to a paused server.
func (s *Server) Resume() error {
	return s.signal(syscall.SIGCONT, false)
}

func (s *Server) signal(sig syscall.Signal, paused bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return fmt.Errorf("%w: %v on %s", ErrNotRunning, sig, s.Addr)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("redisproc: %v to pid %d: %w", sig, s.cmd.Process.Pid, err)
	}
	s.paused = paused
	return nil
}

// Restart starts a fresh, empty process on the same port and directory and
// waits until it answers. It is meant to follow Kill; a server that is still
// running is killed first.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
	// The port is ours to reuse, but for a moment something else (an
	// outgoing connection's ephemeral port) may hold it: retry until the
	// readiness deadline rather than give the port up.
	deadline := time.Now().Add(readyTimeout)
	for {
		err := s.startLocked()
		if err == nil || !errors.Is(err, errPortInUse) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop ends the server: SIGCONT if paused, SIGTERM, and SIGKILL if it has not
// exited after 5s. Stop is idempotent and returns once the process is gone.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return nil
	}
	p := s.cmd.Process
	if s.paused {
		_ = p.Signal(syscall.SIGCONT) // SIGTERM waits in a stopped process
		s.paused = false
	}
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(stopGrace):
		_ = p.Signal(syscall.SIGKILL)
		<-s.exited
	}
	return nil
}

// runningLocked reports whether the current process has not exited yet.
// s.mu must be held.
func (s *Server) runningLocked() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// fileSize returns the size of path, 0 if it does not exist.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logTail returns the end of what this start wrote to the log and to
// stdout/stderr, from the offsets in from on, for error messages.
func (s *Server) logTail(from [2]int64) string {
	var b strings.Builder
	for i, path := range [2]string{s.LogFile, filepath.Join(s.Dir, outName)} {
		data, err := os.ReadFile(path)
		if err != nil || int64(len(data)) <= from[i] {
			continue
		}
		data = data[from[i]:]
		const max = 2000
		if len(data) > max {
			data = data[len(data)-max:]
		}
		fmt.Fprintf(&b, "--- %s:\n%s", path, strings.TrimRight(string(data), "\n"))
		b.WriteString("\n")
	}
	return strings.TrimRight(b.String(), "\n")
}
