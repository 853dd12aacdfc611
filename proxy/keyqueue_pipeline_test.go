package proxy_test

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

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
		in.Write(resp.AppendCommandString(nil, "PTTL", "k"))
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

// TestMultiKeyCommandKeepsPipelineOrder: a pipeline [SET k NX, DEL k
// other] while k is busy. The DEL names two keys, takes no place in the
// key table, and went out before the SET NX still waiting for k: k stayed
// held by tokA for 30 s while the client believed it deleted (review,
// helper-64). On Redis the DEL runs second and frees k.
func TestMultiKeyCommandKeepsPipelineOrder(t *testing.T) {
	c := startCluster(t, 3, func(_ *proxy.Config, qc *quorum.Config) { qc.NodeTimeout = 2 * time.Second })
	for _, m := range c.masters {
		if err := m.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	b, err := net.Dial("tcp", c.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.Write(resp.AppendCommandString(nil, "GET", "k")) // k busy while the masters are paused
	time.Sleep(50 * time.Millisecond)
	a, err := net.Dial("tcp", c.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.Write(resp.AppendCommandString(resp.AppendCommandString(nil, "SET", "k", "tokA", "NX", "PX", "30000"), "DEL", "k", "other"))
	time.Sleep(100 * time.Millisecond)
	for _, m := range c.masters {
		if err := m.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	a.SetReadDeadline(time.Now().Add(10 * time.Second))
	reps := readReplies(t, bufio.NewReader(a), 2)
	t.Logf("replies: %q; k on the masters afterwards: %q", reps, c.onMasters("k"))
	if count(c.onMasters("k"), "tokA") >= 2 {
		t.Fatalf("pipeline [SET k NX, DEL k other] left k held by tokA (replies %q): the DEL ran before the SET NX", reps)
	}
}
