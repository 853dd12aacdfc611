package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

// The masters' truth. During each multiproxy run every master's MONITOR
// stream is recorded (unless Config.MultiProxyNoMonitor). MONITOR stamps
// each command with the master's clock, in microseconds, when it runs it,
// and the masters run on this machine, so that clock is the benchmark's
// wall clock. Replaying each master's SET NX and DEL (those lockproxy's
// release and undo scripts run show as their own lines) in order gives,
// per key, the exact intervals during which one token was on a quorum of
// masters: the lock was held. That is the refused-while-free figure the
// targets judge (refused.go), and a check of the replay itself: every +OK a
// worker read must show as its token reaching a quorum between the SET NX
// being sent and the +OK being read.
//
// MONITOR costs the masters CPU (each command is formatted and written to
// the stream) and this process some to read it; the report says how much.

// monitorEvent is one command of a master that changed one of the run's
// keys.
type monitorEvent struct {
	at    time.Time
	del   bool // a DEL, else a SET NX
	key   int32
	token uint64
}

// monitors records the MONITOR streams of the masters.
type monitors struct {
	conns  []net.Conn
	once   sync.Once
	wg     sync.WaitGroup
	events [][]monitorEvent // per master, in its order
	errs   []error
}

// startMonitors sends MONITOR to every master at addrs and records the
// commands on keys named prefix+<number>.
func startMonitors(addrs []string, prefix string) (*monitors, error) {
	m := &monitors{events: make([][]monitorEvent, len(addrs)), errs: make([]error, len(addrs))}
	for i, a := range addrs {
		c, err := net.DialTimeout("tcp", a, 2*time.Second)
		if err != nil {
			m.stop()
			return nil, err
		}
		m.conns = append(m.conns, c)
		r := bufio.NewReaderSize(c, 1<<20)
		// Wait for +OK, so that MONITOR is on before the run starts.
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		_, err = c.Write([]byte("MONITOR\r\n"))
		line, rerr := r.ReadString('\n')
		if err = errors.Join(err, rerr); err != nil || !strings.HasPrefix(line, "+OK") {
			m.stop()
			return nil, fmt.Errorf("MONITOR on %s: %q %v", a, line, err)
		}
		_ = c.SetDeadline(time.Time{})
		m.wg.Go(func() { m.events[i], m.errs[i] = readMonitor(r, []byte(prefix)) })
	}
	return m, nil
}

// stop closes the streams and returns the events of each master. Calling
// it again is a no-op.
func (m *monitors) stop() ([][]monitorEvent, error) {
	m.once.Do(func() {
		for _, c := range m.conns {
			c.Close()
		}
		m.wg.Wait()
	})
	return m.events, errors.Join(m.errs...)
}

// readMonitor reads MONITOR lines until the connection closes.
func readMonitor(r *bufio.Reader, prefix []byte) ([]monitorEvent, error) {
	evs := make([]monitorEvent, 0, 1<<16)
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				err = nil
			}
			return evs, err
		}
		if ev, ok := parseMonitorLine(line, prefix); ok {
			evs = append(evs, ev)
		}
	}
}

// parseMonitorLine reads a line such as
//
//	+1700000000.123456 [0 127.0.0.1:5000] "SET" "lb7:1" "tok" "NX" "PX" "10000"
//	+1700000000.123460 [0 lua] "DEL" "lb7:1"
//
// and returns it when it is a SET NX or a DEL of a key prefix+<number>
// with a token in base 36, the only keys and tokens of the workload: they
// need no quoting. It allocates nothing: it reads a few hundred thousand
// lines a second.
func parseMonitorLine(line, prefix []byte) (monitorEvent, bool) {
	var ev monitorEvent
	if len(line) < 2 || line[0] != '+' {
		return ev, false
	}
	line = bytes.TrimRight(line[1:], "\r\n")
	dot := bytes.IndexByte(line, '.')
	sp := bytes.IndexByte(line, ' ')
	if dot < 0 || sp < dot {
		return ev, false
	}
	sec, ok1 := parseUint(line[:dot], 10)
	usec, ok2 := parseUint(line[dot+1:sp], 10)
	i := bytes.Index(line, []byte(`] "`))
	if !ok1 || !ok2 || i < 0 {
		return ev, false
	}
	args := line[i+3 : len(line)-1] // without the outer quotes
	name, args, _ := bytes.Cut(args, []byte(`" "`))
	key, args, _ := bytes.Cut(args, []byte(`" "`))
	num, ok := bytes.CutPrefix(key, prefix)
	if !ok {
		return ev, false
	}
	k, ok := parseUint(num, 10)
	if !ok {
		return ev, false
	}
	ev.at, ev.key = time.Unix(int64(sec), int64(usec)*1000), int32(k)
	switch {
	case bytes.EqualFold(name, []byte("DEL")):
		ev.del = true
	case bytes.EqualFold(name, []byte("SET")):
		tok, rest, _ := bytes.Cut(args, []byte(`" "`))
		t, ok := parseUint(tok, 36)
		if !ok || !bytes.Contains(bytes.ToUpper(rest), []byte("NX")) {
			return ev, false
		}
		ev.token = t
	default:
		return ev, false
	}
	return ev, true
}

// parseUint parses b in base 10 or 36 (lower case), without allocating.
func parseUint(b []byte, base uint64) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case c >= 'a' && c <= 'z':
			d = uint64(c-'a') + 10
		default:
			return 0, false
		}
		if d >= base || n > (1<<64-1-d)/base {
			return 0, false
		}
		n = n*base + d
	}
	return n, true
}

// masterEvent is a monitorEvent of one master.
type masterEvent struct {
	master int
	monitorEvent
}

// mergeStreams merges the masters' streams by their stamps, keeping each
// master's own order whatever its stamps do (a stepped clock).
func mergeStreams(events [][]monitorEvent) []masterEvent {
	n := 0
	for _, es := range events {
		n += len(es)
	}
	out := make([]masterEvent, 0, n)
	next := make([]int, len(events))
	for {
		m := -1
		for i, es := range events {
			if next[i] < len(es) && (m < 0 || es[next[i]].at.Before(events[m][next[m]].at)) {
				m = i
			}
		}
		if m < 0 {
			return out
		}
		out = append(out, masterEvent{m, events[m][next[m]]})
		next[m]++
	}
}

// quorumHold is one token on a quorum of masters, over span on the run's
// clock.
type quorumHold struct {
	span
	token uint64
}

// quorumHolds replays the masters' events and returns, per key and in
// order, the tokens that were on at least q masters and when.
func quorumHolds(events [][]monitorEvent, keys, q int, start time.Time) [][]quorumHold {
	holds := make([][]quorumHold, keys)
	state := make([][]uint64, keys) // per key, per master: the token it holds, 0 for none
	count := make([]map[uint64]int, keys)
	cur := make([]quorumHold, keys) // the token on a quorum now, token 0 if none
	for k := range keys {
		state[k] = make([]uint64, len(events))
		count[k] = map[uint64]int{}
	}
	for _, me := range mergeStreams(events) {
		m, e := me.master, me.monitorEvent
		k := e.key
		if int(k) >= keys {
			continue
		}
		switch {
		case e.del && state[k][m] != 0:
			count[k][state[k][m]]--
			state[k][m] = 0
		case !e.del && e.token != 0 && state[k][m] == 0: // SET NX applies on an absent key
			state[k][m] = e.token
			count[k][e.token]++
		default:
			continue
		}
		at := e.at.Sub(start)
		switch {
		case cur[k].token == 0 && !e.del && count[k][e.token] >= q:
			cur[k] = quorumHold{span{at, at}, e.token}
		case cur[k].token != 0 && count[k][cur[k].token] < q:
			cur[k].to = at
			holds[k] = append(holds[k], cur[k])
			cur[k] = quorumHold{}
		}
	}
	for k := range keys {
		if cur[k].token != 0 {
			cur[k].to = time.Duration(1<<63 - 1)
			holds[k] = append(holds[k], cur[k])
		}
	}
	return holds
}

// grantedHolds matches the workers' grants with the masters' record. A
// grant is backed when its token reached a quorum between the SET NX being
// sent and the +OK being read (MONITOR stamps microseconds: one of slack).
// Its hold runs from then to the end of the token's quorum in effect when
// the +OK was read: the token may dip below a quorum in between, when a
// master applies the SET NX of the holder's earlier refused attempt (a
// worker retries with its token) late and lockproxy undoes it. The token's
// quorums at other times are not holds: an earlier attempt that lockproxy
// refused though a master applied it after node_timeout (undone when its
// reply came), or a stalled master's late SET NX after the release began.
// It returns the holds per key, the grants the record does not back (0,
// unless the replay or lockproxy is wrong) and the quorums no grant owns.
//
// It also counts the holds cut short: the token was on fewer than a quorum
// before its holder sent the release. Only an undo of the holder's own
// earlier attempt with the same token could do that, and then a stranger
// may be granted the lock while the holder still holds it.
func grantedHolds(logs []contentionLog, quorum [][]quorumHold) (held [][]span, unbacked, unowned, cutShort int64) {
	byToken := make([]map[uint64][]span, len(quorum))
	total := 0
	for k, hs := range quorum {
		byToken[k] = make(map[uint64][]span, len(hs))
		for _, h := range hs {
			byToken[k][h.token] = append(byToken[k][h.token], h.span)
		}
		total += len(hs)
	}
	held = make([][]span, len(quorum))
	owned := 0
	for _, l := range logs {
		for _, h := range l.holds {
			spans := byToken[h.key][h.token] // in order
			first := slices.IndexFunc(spans, func(s span) bool {
				return s.from >= h.sent-time.Microsecond && s.from <= h.reply+time.Microsecond
			})
			if first < 0 {
				unbacked++
				continue
			}
			last := first
			for last+1 < len(spans) && spans[last+1].from <= h.reply+time.Microsecond {
				last++
			}
			owned += last - first + 1
			held[h.key] = append(held[h.key], span{spans[first].from, spans[last].to})
			if spans[last].to < h.releaseSent {
				cutShort++
			}
		}
	}
	for k := range held {
		held[k] = union(held[k])
	}
	return held, unbacked, int64(total - owned), cutShort
}
