package proxy_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestKeptGivenBackAtClose: what connections hold besides their input
// (kept.go) returns to nothing once they are all closed, whichever way
// they held it or ended: a name, library attributes, an open MULTI with a
// lock queued, WATCHed keys with a value read, a protocol error, a
// subscriber, connections evicted for GETs they never read, a long
// pipeline of SET NX. INFO is asked on a fresh connection that sends
// nothing else, so that its own buffers are not yet charged.
func TestKeptGivenBackAtClose(t *testing.T) {
	transports(t, func(t *testing.T, start func(testing.TB, int, ...clusterOpt) *cluster) {
		c := start(t, 1, withKeptBudget)
		setup := c.client()
		ctx := context.Background()
		if err := setup.SetNX(ctx, "bigval", strings.Repeat("v", 1000000), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		setup.Close()
		var conns []interface{ Close() error }
		send := func(in string) {
			conn := c.dial()
			conns = append(conns, conn)
			conn.Write([]byte(in))
		}
		send(encode("CLIENT", "SETNAME", strings.Repeat("n", 4000)))
		send(encode("MULTI") + encode("ECHO", strings.Repeat("e", 30000)) + encode("SET", "k", "v", "NX", "PX", "10000"))
		send(encode("WATCH", "k1", "k2") + encode("GET", "k1"))
		send(encode("WATCH", "bigval") + encode("MULTI"))
		send(encode("HELLO", "3", "SETNAME", "x") + encode("CLIENT", "SETINFO", "LIB-NAME", strings.Repeat("l", 3000)))
		send("*2\r\n$4\r\nECHO\r\n$x\r\n") // a protocol error
		send(encode("SUBSCRIBE", "ch") + encode("PING"))
		for i := 0; i < 6; i++ {
			conn := c.dialSmallWindow()
			conns = append(conns, conn)
			conn.Write([]byte(strings.Repeat("GET bigval\r\n", 200)))
		}
		send(encode("SET", "lk", "tok", "NX", "PX", "10000") + encode("GET", "lk") + strings.Repeat(encode("SET", "lk2", "tok", "NX", "PX", "10000"), 500))
		time.Sleep(2 * time.Second) // served, or evicted

		probe := func() (int64, int64, int64) {
			conn := c.dial()
			defer conn.Close()
			conn.Write([]byte("INFO\r\n"))
			conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			var all string
			buf := make([]byte, 65536)
			for !strings.Contains(all, "evicted_clients:") || !strings.HasSuffix(all, "\r\n\r\n") {
				n, err := conn.Read(buf)
				all += string(buf[:n])
				if err != nil {
					break
				}
			}
			get := func(f string) int64 {
				v := infoField(all, f)
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
			return get("client_input_bytes"), get("client_output_bytes"), get("evicted_clients")
		}
		in, out, ev := probe()
		t.Logf("open: client_input_bytes %d, client_output_bytes %d, evicted_clients %d", in, out, ev)
		if ev == 0 || out == 0 {
			t.Errorf("no connection evicted, or nothing charged besides input: the test did not reach what it checks (budget %d bytes)", keptTotal)
		}
		for _, conn := range conns {
			conn.Close()
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			in, out, ev = probe()
			if out == 0 && in <= 4096 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("all closed: client_input_bytes %d, client_output_bytes %d", in, out)
		// The INFO connection's own input buffer is charged: 4 KiB.
		if out != 0 || in > 4096 {
			t.Fatalf("after every connection closed, INFO shows client_input_bytes %d and client_output_bytes %d still charged; want at most 4096 and 0", in, out)
		}
	})
}
