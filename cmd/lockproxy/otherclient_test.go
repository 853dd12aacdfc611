package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// otherClient is what the opt-in measurements of an attack look at: a
// client that is not part of it, taking a fresh lock (SET NX PX 10000)
// every 10 ms on its own connection, one command at a time. Its slowest
// reply and its refusals say what the attack costs everyone else.
type otherClient struct {
	n, bad, slow, worst atomic.Int64
	stop                chan struct{}
	wg                  sync.WaitGroup
}

// startOtherClient starts the other client on lockproxy at addr; its
// connection is closed at the test's end. A reply other than +OK is
// logged once and counted.
func startOtherClient(t *testing.T, addr string) *otherClient {
	t.Helper()
	c := dialProxy(t, addr)
	o := &otherClient{stop: make(chan struct{})}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		r := bufio.NewReader(c)
		for i := 0; ; i++ {
			select {
			case <-o.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			start := time.Now()
			c.Write(respCommand("SET", fmt.Sprint("other", i), "t", "NX", "PX", "10000"))
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			line, err := r.ReadString('\n')
			if err != nil {
				t.Errorf("the other client's SET NX: %v", err)
				return
			}
			o.n.Add(1)
			if line != "+OK\r\n" && o.bad.Add(1) == 1 {
				t.Logf("another client's SET NX answered %q", line)
			}
			d := time.Since(start)
			if d > 50*time.Millisecond {
				o.slow.Add(1)
			}
			if int64(d) > o.worst.Load() {
				o.worst.Store(int64(d))
			}
		}
	}()
	return o
}

// Stop stops the client and waits for its last command.
func (o *otherClient) Stop() {
	close(o.stop)
	o.wg.Wait()
}

// String says what the client saw, for the measurement's log line.
func (o *otherClient) String() string {
	return fmt.Sprintf("another client's slowest SET NX %v, %d of %d over 50ms, %d not OK",
		time.Duration(o.worst.Load()).Round(time.Millisecond), o.slow.Load(), o.n.Load(), o.bad.Load())
}

// respCommand encodes a command as a RESP array of bulk strings.
func respCommand(args ...string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.Bytes()
}

// dialProxy connects to lockproxy at addr, closed at the test's end.
func dialProxy(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
