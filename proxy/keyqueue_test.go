package proxy_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// masterCalls is the number of commands master i has run (INFO
// commandstats, every command).
func masterCalls(t *testing.T, c *cluster, i int) int {
	t.Helper()
	s, err := c.masters[i].Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(s, "\n") {
		_, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		k, _ := strconv.Atoi(v)
		n += k
	}
	return n
}

// TestClosedClientsQueuedReadsNotSent: a client pipelines reads on a key
// that is busy and resets its connection. Its reads still waiting behind
// the key reach no master: after the review's attackers hung up, their
// queued reads ran one round trip at a time and a SET NX on the key waited
// 63 s (helper-59). Remove the Abandon in clientConn.closeWith to see them
// sent.
func TestClosedClientsQueuedReadsNotSent(t *testing.T) {
	const reads = 300
	c := startCluster(t, 3, func(_ *proxy.Config, qc *quorum.Config) { qc.NodeTimeout = 300 * time.Millisecond })
	ctx := context.Background()
	before := masterCalls(t, c, 0)
	for _, m := range c.masters {
		if err := m.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := net.Dial("tcp", c.addr)
	if err != nil {
		t.Fatal(err)
	}
	var in strings.Builder
	in.WriteString("*2\r\n$3\r\nGET\r\n$4\r\nbusy\r\n") // in flight while the masters are paused
	for range reads {
		in.WriteString("*2\r\n$4\r\nPTTL\r\n$4\r\nbusy\r\n")
	}
	if _, err := conn.Write([]byte(in.String())); err != nil {
		t.Fatal(err)
	}
	// Nothing to poll while the masters are paused: give the proxy time to
	// read the pipeline, then reset the connection.
	time.Sleep(100 * time.Millisecond)
	conn.(*net.TCPConn).SetLinger(0)
	conn.Close()
	for _, m := range c.masters {
		if err := m.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	cl := c.client()
	start := time.Now()
	if err := cl.Get(ctx, "busy").Err(); err != nil && err.Error() != "redis: nil" {
		t.Fatalf("GET after the reset: %v", err)
	}
	took := time.Since(start)
	sent := masterCalls(t, c, 0) - before
	t.Logf("another client's GET took %v; master 0 ran %d commands meanwhile", took.Round(time.Millisecond), sent)
	if sent >= reads/2 {
		t.Fatalf("master 0 ran %d commands: the closed connection's %d queued reads were sent", sent, reads)
	}
}
