package proxy_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

func cmdRESP(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// readReplies reads n simple RESP replies (no nested arrays) from r.
func readReplies(t *testing.T, r *bufio.Reader, n int) []string {
	t.Helper()
	var out []string
	for len(out) < n {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d replies: %v", len(out), err)
		}
		if line[0] == '$' && line != "$-1\r\n" {
			body, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			line += body
		}
		out = append(out, strings.TrimRight(line, "\r\n"))
	}
	return out
}

// TestOneClientsPipelineOfReadsAnswered: one client pipelines 3000 PTTL
// of one key (masters up, no other client). Redis answers every one; the
// bounded key queue refused 756 of them as a flood (review, helper-64):
// a connection's own waiting requests do not count against its later ones.
func TestOneClientsPipelineOfReadsAnswered(t *testing.T) {
	c := startCluster(t, 3)
	conn, err := net.Dial("tcp", c.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const n = 3000
	var in strings.Builder
	for range n {
		in.WriteString(cmdRESP("PTTL", "k"))
	}
	if _, err := conn.Write([]byte(in.String())); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	reps := readReplies(t, bufio.NewReader(conn), n)
	errs := 0
	first := ""
	for _, r := range reps {
		if strings.HasPrefix(r, "-") {
			errs++
			if first == "" {
				first = r
			}
		}
	}
	t.Logf("%d of %d PTTL answered with an error; first: %s", errs, n, first)
	if errs > 0 {
		t.Fatalf("a single client's pipeline of %d reads got %d errors", n, errs)
	}
}
