package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// scrapeOn sends one keep-alive GET /metrics on c and returns its status
// code (0 if the connection broke first).
func scrapeOn(t *testing.T, c net.Conn, rd *bufio.Reader) int {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: lockproxy\r\n\r\n"); err != nil {
		return 0
	}
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		return 0
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable && !strings.Contains(string(body), "at most 32 metrics connections") {
		t.Errorf("503 without the reason: %q", body)
	}
	return resp.StatusCode
}

// closedByPeer reports whether the server closed c within d.
func closedByPeer(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	return err == io.EOF
}

// TestMetricsConnectionsBounded: the metrics listener keeps at most
// metricsMaxConns connections open, answers the next one 503 with the
// reason, and closes keep-alive connections left idle. Before, every
// connection that made one request was kept until its peer closed it:
// 1,072 of them took every descriptor of a lockproxy limited to 1,100
// (ulimit -n), and then no client could connect and a master whose
// connection dropped was not dialled again until they were closed.
func TestMetricsConnectionsBounded(t *testing.T) {
	m := redisproc.ForTest(t, 1)
	defer func(idle time.Duration) { metricsIdleTimeout = idle }(metricsIdleTimeout)
	metricsIdleTimeout = time.Second
	path := writeConfig(t, "listen = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\n[quorum]\nmasters = [\""+m[0].Addr+"\"]\nbootstrap = true\nprobe_interval = \"0s\"\n")
	p := startRun(t, "-config", path)
	_, _, metricsAddr := p.addrs()

	const attempts = 100
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	ok, refused := 0, 0
	for i := 0; i < attempts; i++ {
		c, err := net.DialTimeout("tcp", metricsAddr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		switch code := scrapeOn(t, c, bufio.NewReader(c)); code {
		case http.StatusOK:
			ok++
		case http.StatusServiceUnavailable:
			refused++
		default:
			t.Fatalf("connection %d: status %d", i, code)
		}
	}
	t.Logf("%d connections, each one request kept alive: %d served, %d refused", attempts, ok, refused)
	if ok != metricsMaxConns || refused != attempts-metricsMaxConns {
		t.Fatalf("want %d served and %d refused, got %d and %d", metricsMaxConns, attempts-metricsMaxConns, ok, refused)
	}
	if !strings.Contains(p.out.String(), "metrics connection refused") {
		t.Errorf("no warning for the refused connections:\n%s", p.out.String())
	}

	// The kept-alive ones are closed once idle, and their places freed.
	for i, c := range held[:metricsMaxConns] {
		if !closedByPeer(c, 5*time.Second) {
			t.Fatalf("kept-alive metrics connection %d still open 5s past the idle timeout of 1s", i)
		}
	}
	c, err := net.DialTimeout("tcp", metricsAddr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	held = append(held, c)
	if code := scrapeOn(t, c, bufio.NewReader(c)); code != http.StatusOK {
		t.Fatalf("a scrape after the idle ones closed: status %d", code)
	}
}
