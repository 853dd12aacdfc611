package proxy_test

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// pipeline writes every command in one write and reads one reply each.
func (r *rawConn) pipeline(cmds ...[]string) []string {
	r.t.Helper()
	var b strings.Builder
	for _, args := range cmds {
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	r.c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(r.c, b.String()); err != nil {
		r.t.Fatal(err)
	}
	out := make([]string, len(cmds))
	for i := range cmds {
		var o strings.Builder
		if err := readRaw(r.rd, &o); err != nil {
			r.t.Fatalf("reply %d of %v: %v (so far %q)", i, cmds, err, o.String())
		}
		out[i] = o.String()
	}
	return out
}

// TestWatchMultiRelease is StackExchange.Redis's LockRelease and
// LockExtend on a server before Redis 8.4, as they go on the wire: WATCH
// key and GET key; the client compares the value with its token and sends
// UNWATCH if it is not its lock, else MULTI, DEL key (or PEXPIRE key ms),
// EXEC. Through lockproxy the EXEC is a quorum compare-and-delete (or
// compare-and-extend) with the value the connection read: [1] when a
// quorum held it, the aborted transaction's null when the key changed.
func TestWatchMultiRelease(t *testing.T) {
	c := startCluster(t, 3)
	p := dialRaw(t, c.addr)
	other := dialRaw(t, c.addr)
	const (
		ok     = "+OK\r\n"
		queued = "+QUEUED\r\n"
	)
	set := func(conn *rawConn, k, v string) {
		t.Helper()
		if got := conn.do("SET", k, v, "NX", "PX", "10000"); got != ok {
			t.Fatalf("SET %s %s NX = %q", k, v, got)
		}
	}
	want := func(got, want, what string) {
		t.Helper()
		if got != want {
			t.Fatalf("%s = %q, want %q", what, got, want)
		}
	}

	// LockRelease of its own lock.
	set(p, "k", "tok")
	want(p.do("WATCH", "k"), ok, "WATCH")
	want(p.do("GET", "k"), "$3\r\ntok\r\n", "GET")
	want(p.do("MULTI"), ok, "MULTI")
	want(p.do("DEL", "k"), queued, "DEL in MULTI")
	want(p.do("EXEC"), "*1\r\n:1\r\n", "EXEC")
	// Answered at a quorum: the last master may apply it a moment later.
	waitFor(t, func() bool { return count(c.onMasters("k"), "(nil)") == 3 }, "the release on every master")
	if v := c.onMasters("k"); count(v, "(nil)") != 3 {
		t.Fatalf("after the release the masters hold %v", v)
	}

	// Another's lock: the client sees the value and sends UNWATCH.
	set(other, "k", "theirs")
	want(p.do("WATCH", "k"), ok, "WATCH")
	want(p.do("GET", "k"), "$6\r\ntheirs\r\n", "GET")
	want(p.do("UNWATCH"), ok, "UNWATCH")
	if v := c.onMasters("k"); count(v, "theirs") != 3 {
		t.Fatalf("UNWATCH touched the lock: %v", v)
	}

	// The key changes between GET and EXEC: released and taken again
	// with another token. One Redis aborts (null); so does lockproxy,
	// and the new holder's lock stays.
	want(other.do("DEL", "k"), ":1\r\n", "DEL")
	set(p, "k", "tok")
	want(p.do("WATCH", "k"), ok, "WATCH")
	want(p.do("GET", "k"), "$3\r\ntok\r\n", "GET")
	want(other.do("DEL", "k"), ":1\r\n", "DEL by another")
	set(other, "k", "theirs")
	want(p.do("MULTI"), ok, "MULTI")
	want(p.do("DEL", "k"), queued, "DEL in MULTI")
	want(p.do("EXEC"), "*-1\r\n", "EXEC after the key changed")
	if v := c.onMasters("k"); count(v, "theirs") != 3 {
		t.Fatalf("an aborted EXEC deleted another's lock: %v", v)
	}
	want(other.do("DEL", "k"), ":1\r\n", "DEL")

	// LockExtend: PEXPIRE, and EXPIRE in seconds.
	set(p, "k", "tok")
	for _, ext := range [][]string{{"PEXPIRE", "k", "20000"}, {"EXPIRE", "k", "30"}} {
		want(p.do("WATCH", "k"), ok, "WATCH")
		want(p.do("GET", "k"), "$3\r\ntok\r\n", "GET")
		want(p.do("MULTI"), ok, "MULTI")
		want(p.do(ext...), queued, ext[0]+" in MULTI")
		want(p.do("EXEC"), "*1\r\n:1\r\n", "EXEC of "+ext[0])
		floor := int64(19000)
		if ext[0] == "EXPIRE" {
			floor = 29000
		}
		var pttls []string
		extended := 0
		for _, m := range c.masters {
			v, err := m.Do("PTTL", "k")
			var ms int64
			fmt.Sscan(v, &ms)
			if err == nil && ms >= floor {
				extended++
			}
			pttls = append(pttls, v)
		}
		if extended < 2 { // the reply came once a quorum had answered
			t.Fatalf("after %s the masters' PTTLs are %v: not extended on a quorum", ext[0], pttls)
		}
	}

	// The whole release in one write: EXEC waits for the GET's reply.
	got := p.pipeline([]string{"WATCH", "k"}, []string{"GET", "k"}, []string{"MULTI"}, []string{"DEL", "k"}, []string{"EXEC"})
	want(strings.Join(got, ""), ok+"$3\r\ntok\r\n"+ok+queued+"*1\r\n:1\r\n", "pipelined release")

	// A key read absent: EXEC answers [0], or null once it exists.
	want(p.do("WATCH", "k"), ok, "WATCH")
	want(p.do("GET", "k"), "$-1\r\n", "GET")
	want(p.do("MULTI"), ok, "MULTI")
	want(p.do("DEL", "k"), queued, "DEL")
	want(p.do("EXEC"), "*1\r\n:0\r\n", "EXEC of an absent key")
	want(p.do("WATCH", "k"), ok, "WATCH")
	want(p.do("GET", "k"), "$-1\r\n", "GET")
	set(other, "k", "theirs")
	want(p.do("MULTI"), ok, "MULTI")
	want(p.do("DEL", "k"), queued, "DEL")
	want(p.do("EXEC"), "*-1\r\n", "EXEC once the absent key exists")
	if v := c.onMasters("k"); count(v, "theirs") != 3 {
		t.Fatalf("EXEC deleted a lock taken after the read: %v", v)
	}

	// RESP3: an aborted EXEC is null.
	want(p.do("HELLO", "3")[:1], "%", "HELLO 3")
	want(p.do("WATCH", "k"), ok, "WATCH")
	want(p.do("GET", "k"), "$6\r\ntheirs\r\n", "GET")
	want(other.do("DEL", "k"), ":1\r\n", "DEL")
	want(p.do("MULTI"), ok, "MULTI")
	want(p.do("DEL", "k"), queued, "DEL")
	want(p.do("EXEC"), "_\r\n", "aborted EXEC in RESP3")
}

// TestTransactionErrorsAsRedis: after WATCH, a transaction lockproxy cannot run as a lock's
// compare-and-delete or compare-and-extend is refused command by command,
// and EXEC then aborts, as Redis aborts a transaction with a command
// refused while queuing. The errors lockproxy shares with Redis
// are compared with a real redis-server on a connection taken through the
// same steps.
func TestTransactionErrorsAsRedis(t *testing.T) {
	c := startCluster(t, 1)
	p := dialRaw(t, c.addr)
	r := dialRaw(t, c.masters[0].Addr)
	same := func(cmd ...string) string {
		t.Helper()
		got, want := p.do(cmd...), r.do(cmd...)
		if got != want {
			t.Fatalf("%q: lockproxy answers %q, Redis %q", cmd, got, want)
		}
		return got
	}
	refused := func(cmd ...string) {
		t.Helper()
		got := p.do(cmd...)
		r.do(cmd...) // queued on Redis
		if !strings.HasPrefix(got, "-ERR lockproxy runs a transaction only as") {
			t.Fatalf("%q inside MULTI = %q, want the refusal that says what runs", cmd, got)
		}
	}
	same("EXEC")
	same("DISCARD")
	same("WATCH", "k")
	same("MULTI")
	same("MULTI")
	same("WATCH", "k")
	same("DISCARD")
	same("WATCH", "k")
	same("MULTI")
	same("EXEC") // *0
	same("UNWATCH")
	// MULTI without WATCH is accepted, as Redis does (plain_test.go).
	same("MULTI")
	same("PING")
	same("DISCARD")

	// A command lockproxy does not run in a transaction: refused, and
	// EXEC aborts. Redis queues it, so EXEC differs there: compare with
	// Redis after a command it refuses too.
	p.do("WATCH", "k")
	r.do("WATCH", "k")
	same("MULTI")
	refused("GET", "k")
	if got := p.do("EXEC"); got != "-EXECABORT Transaction discarded because of previous errors.\r\n" {
		t.Fatalf("EXEC after a refused command = %q", got)
	}
	r.do("DISCARD")
	same("WATCH", "k")
	same("MULTI")
	p.do("NOSUCHCOMMAND") // lockproxy's text says what it serves
	r.do("NOSUCHCOMMAND")
	same("EXEC") // EXECABORT on both
	// An arity error inside MULTI aborts it too (review, helper-54).
	same("WATCH", "k")
	same("MULTI")
	same("MULTI", "x")
	same("EXEC")

	// DEL of a key not watched, two commands, and a key not read.
	p.do("WATCH", "other")
	p.do("MULTI")
	refused("DEL", "k")
	p.do("DISCARD")
	p.do("WATCH", "k")
	p.do("GET", "k")
	p.do("MULTI")
	if got := p.do("DEL", "k"); got != "+QUEUED\r\n" {
		t.Fatalf("DEL of a watched key = %q", got)
	}
	if got := p.do("DEL", "k"); !strings.Contains(got, "a second command was queued") {
		t.Fatalf("a second command = %q", got)
	}
	p.do("DISCARD")
	p.do("WATCH", "k")
	p.do("MULTI")
	p.do("DEL", "k")
	if got := p.do("EXEC"); !strings.Contains(got, "not read with GET after WATCH") {
		t.Fatalf("EXEC without a GET after WATCH = %q", got)
	}
	// RESET ends a transaction.
	p.do("WATCH", "k")
	p.do("MULTI")
	if got := p.do("RESET"); got != "+RESET\r\n" {
		t.Fatalf("RESET = %q", got)
	}
	if got := p.do("EXEC"); got != "-ERR EXEC without MULTI\r\n" {
		t.Fatalf("EXEC after RESET = %q", got)
	}
}
