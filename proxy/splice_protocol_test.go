package proxy_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"runtime"
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

// TestOverflowedTLSSubscriberWriterStops: a TLS subscriber that reads
// nothing, closed at the pubsub hard limit, is closed at once: its writer
// stops writing the batch it holds (the frames' copy and the large
// payloads it was handed uncopied, no longer counted anywhere once the
// connection is closed) rather than writing on for as long as the client
// keeps taking a piece per write timeout (here a minute), as a plain
// TCP subscriber's socket is closed at once, and as the input budget's
// evictions already stop it. Redis too writes nothing more to a client
// over its output buffer limit.
func TestOverflowedTLSSubscriberWriterStops(t *testing.T) {
	const size = 512 << 10
	masters := redisproc.ForTest(t, 1)
	c := startFront(t, masters, true, withHub(t, "", func(_ *proxy.Config, hc *pubsub.Config) { hc.ReadTimeout = time.Minute }),
		func(pc *proxy.Config, qc *quorum.Config) {
			qc.NodeTimeout = 5 * time.Second
			pc.WriteTimeout = time.Minute
			pc.PubSubHardLimit, pc.PubSubSoftLimit = 2<<20, 2<<20
		})
	c.waitUp(1)
	c.waitVoting(1)
	c.waitHub()
	sub := c.dialSmallWindow()
	defer sub.Close()
	sub.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := sub.Write([]byte(encode("SUBSCRIBE", "c"))); err != nil {
		t.Fatal(err)
	}
	want := pushFrame(false, "subscribe", "c", ":1")
	got := make([]byte, len(want))
	if _, err := io.ReadFull(sub, got); err != nil || string(got) != want {
		t.Fatalf("SUBSCRIBE c: %q %v", got, err)
	}
	pub := c.dial()
	defer pub.Close()
	pr := bufio.NewReader(pub)
	pub.SetDeadline(time.Now().Add(20 * time.Second))
	for i := 0; infoField(infoOf(t, c, "pubsub"), "pubsub_output_limit_closes") != "1"; i++ {
		if i == 12 {
			t.Fatalf("12 messages of %d KiB to a subscriber reading none, over a hard limit of 2 MiB, yet it is not closed", size>>10)
		}
		if _, err := pub.Write([]byte(encode("PUBLISH", "c", strings.Repeat("p", size)))); err != nil {
			t.Fatal(err)
		}
		if line, err := pr.ReadString('\n'); err != nil || !strings.HasPrefix(line, ":") {
			t.Fatalf("PUBLISH %d: %q %v", i, line, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	deadline := time.Now().Add(5 * time.Second)
	for writing := writersWriting(); writing > 0; writing = writersWriting() {
		if time.Now().After(deadline) {
			t.Fatalf("the subscriber closed over its hard limit 5 s ago, yet %d TLS writer(s) still write a batch to it", writing)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writersWriting counts the goroutines of this process writing a batch to
// a TLS client (proxy's streamTransport.writeAll).
func writersWriting() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), ".(*streamTransport).writeAll(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestSteadySlowSubscriberKeptOnBothTransports: a subscriber that reads
// its large messages slowly but steadily, never pausing for the write
// timeout, is not cut off by it, over TLS as over plain TCP, although one
// message takes longer than the write timeout to go out. Over TLS the
// front counted the timeout from the first write its writer could not
// take (the writer busy with the message before), not from the writer's
// progress: the subscriber was closed for not reading while it read.
func TestSteadySlowSubscriberKeptOnBothTransports(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		name := "loop"
		if useTLS {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) { steadySlowSubscriber(t, useTLS) })
	}
}

func steadySlowSubscriber(t *testing.T, useTLS bool) {
	const messages, size = 4, 1000000
	const writeTimeout = time.Second
	masters := redisproc.ForTest(t, 1)
	c := startFront(t, masters, useTLS, withHub(t, "", func(_ *proxy.Config, hc *pubsub.Config) { hc.ReadTimeout = time.Minute }),
		func(pc *proxy.Config, qc *quorum.Config) {
			qc.NodeTimeout = 5 * time.Second
			pc.WriteTimeout = writeTimeout
			pc.PubSubHardLimit, pc.PubSubSoftLimit = 64<<20, 64<<20
		})
	c.waitUp(1)
	c.waitVoting(1)
	c.waitHub()
	sub := c.dialSmallWindow()
	defer sub.Close()
	sub.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := sub.Write([]byte(encode("SUBSCRIBE", "c"))); err != nil {
		t.Fatal(err)
	}
	confirmed := pushFrame(false, "subscribe", "c", ":1")
	if got := make([]byte, len(confirmed)); true {
		if _, err := io.ReadFull(sub, got); err != nil || string(got) != confirmed {
			t.Fatalf("SUBSCRIBE c: %q %v", got, err)
		}
	}
	var want []byte
	payloads := make([]string, messages)
	for i := range payloads {
		payloads[i] = fmt.Sprintf("%04d", i) + strings.Repeat("s", size-4)
		want = append(want, pushFrame(false, "message", "c", payloads[i])...)
	}

	// The subscriber reads from now on at about 500 KB/s: a message takes
	// 2 s, twice the write timeout, yet it never pauses for more than
	// 32 ms.
	read := make(chan error, 1)
	go func() {
		got := make([]byte, 0, len(want))
		buf := make([]byte, 16<<10)
		start := time.Now()
		for len(got) < len(want) {
			n, err := sub.Read(buf[:min(len(buf), len(want)-len(got))])
			got = append(got, buf[:n]...)
			if err != nil {
				read <- fmt.Errorf("read %d of %d bytes in %v, reading all the while: %v", len(got), len(want), time.Since(start).Round(time.Millisecond), err)
				return
			}
			time.Sleep(32 * time.Millisecond)
		}
		if i := firstDifference(got, want); i >= 0 {
			read <- fmt.Errorf("first difference at byte %d of %d", i, len(want))
			return
		}
		read <- nil
	}()
	pub := c.dial()
	defer pub.Close()
	pr := bufio.NewReader(pub)
	pub.SetDeadline(time.Now().Add(30 * time.Second))
	for i, p := range payloads {
		if _, err := pub.Write([]byte(encode("PUBLISH", "c", p))); err != nil {
			t.Fatal(err)
		}
		if line, err := pr.ReadString('\n'); err != nil || line != ":1\r\n" {
			t.Fatalf("PUBLISH %d: %q %v (the subscriber was closed)", i, line, err)
		}
	}
	if err := <-read; err != nil {
		t.Fatal(err)
	}
}
