package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"strconv"
	"testing"
	"time"
)

// configGet sends CONFIG GET with patterns on a raw connection and
// returns the reply's element count and size in bytes.
func configGet(t *testing.T, addr string, patterns [][]byte) (elems int, size int, took time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var b bytes.Buffer
	b.WriteString("*" + strconv.Itoa(2+len(patterns)) + "\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n")
	for _, p := range patterns {
		b.WriteString("$" + strconv.Itoa(len(p)) + "\r\n")
		b.Write(p)
		b.WriteString("\r\n")
	}
	conn.SetDeadline(time.Now().Add(60 * time.Second))
	start := time.Now()
	if _, err := conn.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil || head[0] != '*' {
		t.Fatalf("reply %q, %v", head, err)
	}
	elems, _ = strconv.Atoi(head[1 : len(head)-2])
	size = len(head)
	for range elems {
		l, err := r.ReadString('\n') // $len
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(l[1 : len(l)-2])
		if _, err := r.Discard(n + 2); err != nil {
			t.Fatal(err)
		}
		size += len(l) + n + 2
	}
	return elems, size, time.Since(start)
}

// TestConfigGetEachSettingOnce: CONFIG GET answers each setting once,
// however many of its patterns match it, as Redis 7 does: 65,530 "*" made
// lockproxy render every setting 65,530 times, 40 MB per command (review,
// helper-59). Patterns are matched as Redis matches them, case
// insensitively.
func TestConfigGetEachSettingOnce(t *testing.T) {
	c := startCluster(t, 1)
	all, _, _ := configGet(t, c.addr, [][]byte{[]byte("*")})
	if all < 10 {
		t.Fatalf("CONFIG GET * answered %d elements", all)
	}
	many := make([][]byte, 65530)
	for i := range many {
		many[i] = []byte("*")
	}
	if n, size, _ := configGet(t, c.addr, many); n != all {
		t.Fatalf("CONFIG GET of 65,530 \"*\": %d elements (%d bytes); want %d, as CONFIG GET *", n, size, all)
	}
	if n, _, _ := configGet(t, c.addr, [][]byte{[]byte("MAX*"), []byte("maxclients"), []byte("max[c]lients"), []byte("*clients")}); n != 4 {
		t.Fatalf("CONFIG GET MAX* maxclients max[c]lients *clients: %d elements; want 4 (maxclients, max-ttl, once each)", n)
	}
	if v, err := c.client().ConfigGet(context.Background(), "Timeout").Result(); err != nil || len(v) != 1 || v["timeout"] == "" {
		t.Fatalf("CONFIG GET Timeout: %v %v", v, err)
	}
}

// TestConfigGetLongPatternsCheap: 7 patterns "*a*a…" of 1 MiB cost
// lockproxy's event loop about half a second each with path.Match (review,
// helper-59; 0.7 s for the 7 here, 1.6 s with -race); Redis's matcher
// against the short setting names takes microseconds (the 5 commands here
// take 0.2 s, 0.6 s with -race, mostly moving their bytes).
func TestConfigGetLongPatternsCheap(t *testing.T) {
	c := startCluster(t, 1)
	pat := bytes.Repeat([]byte("*a"), 1048000/2)
	pats := [][]byte{pat, pat, pat, pat, pat, pat, pat}
	var took time.Duration
	for range 5 {
		_, _, d := configGet(t, c.addr, pats)
		took += d
	}
	t.Logf("5 CONFIG GET of 7 x 1 MiB \"*a*a…\": %v", took)
	if took > 2*time.Second {
		t.Fatalf("5 CONFIG GET of 7 x 1 MiB \"*a*a…\" took %v", took)
	}
}
