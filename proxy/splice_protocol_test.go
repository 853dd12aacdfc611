package proxy_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/proxy/pubsub"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestSplicedMessagesBeforeReset: a RESP3 subscriber that reads nothing
// while large messages (spliced, partly written to its small window) are
// queued for it, then pipelines UNSUBSCRIBE, RESET and PING, reads every
// message whole and in order as a RESP3 push, then the UNSUBSCRIBE's
// confirmation, RESET's reply and PING's in RESP2; once it is closed no
// shared payload stays counted. Both transports.
func TestSplicedMessagesBeforeReset(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		name := "loop"
		if useTLS {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) { splicedBeforeReset(t, useTLS) })
	}
}

func splicedBeforeReset(t *testing.T, useTLS bool) {
	const messages, size = 6, 100000
	masters := redisproc.ForTest(t, 1)
	c := startFront(t, masters, useTLS, withHub(t, "", func(_ *proxy.Config, hc *pubsub.Config) {
		// Under load the hub's connection was once closed for reading
		// nothing for the 3 s default, and the messages published
		// meanwhile were lost: not what is checked here.
		hc.ReadTimeout = time.Minute
	}), func(pc *proxy.Config, qc *quorum.Config) {
		qc.NodeTimeout = 5 * time.Second
		pc.WriteTimeout = time.Minute
	})
	c.waitUp(1)
	c.waitVoting(1)
	c.waitHub()

	sub := c.dialSmallWindow()
	defer sub.Close()
	r := bufio.NewReader(sub)
	sub.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := sub.Write([]byte(encode("HELLO", "3") + encode("SUBSCRIBE", "c"))); err != nil {
		t.Fatal(err)
	}
	confirmed := pushFrame(true, "subscribe", "c", ":1")
	var hello []byte
	for !bytes.HasSuffix(hello, []byte(confirmed)) {
		b, err := r.ReadByte()
		if err != nil {
			t.Fatalf("HELLO 3, SUBSCRIBE c: %q… %v", hello, err)
		}
		hello = append(hello, b)
	}

	var want []byte
	pub := c.dial()
	defer pub.Close()
	pr := bufio.NewReader(pub)
	pub.SetDeadline(time.Now().Add(20 * time.Second))
	for i := 0; i < messages; i++ {
		p := fmt.Sprintf("%04d", i) + strings.Repeat(string(rune('a'+i)), size-4)
		if _, err := pub.Write([]byte(encode("PUBLISH", "c", p))); err != nil {
			t.Fatal(err)
		}
		if line, err := pr.ReadString('\n'); err != nil || line != ":1\r\n" {
			t.Fatalf("PUBLISH %d: %q %v", i, line, err)
		}
		want = append(want, pushFrame(true, "message", "c", p)...)
	}
	// The messages are framed for the subscriber, mostly unwritten: its
	// window takes a fraction of one.
	time.Sleep(200 * time.Millisecond)
	if _, err := sub.Write([]byte(encode("UNSUBSCRIBE", "c") + encode("RESET") + encode("PING"))); err != nil {
		t.Fatal(err)
	}
	want = append(want, pushFrame(true, "unsubscribe", "c", ":0")...)
	want = append(want, "+RESET\r\n+PONG\r\n"...)
	got := make([]byte, len(want))
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatalf("read %d of %d bytes: %v", len(got), len(want), err)
	}
	if i := firstDifference(got, want); i >= 0 {
		t.Fatalf("first difference at byte %d of %d: got %q, want %q", i, len(want), got[max(0, i-20):min(len(got), i+40)], want[max(0, i-20):min(len(want), i+40)])
	}
	sub.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.srv.SharedPushBytes() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the subscriber closed, yet %d bytes of shared payloads are counted", c.srv.SharedPushBytes())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// firstDifference is the index of the first byte where a and b differ,
// or -1 when they are equal.
func firstDifference(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
