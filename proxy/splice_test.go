package proxy_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/proxy/pubsub"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestBroadcastToReadersFitsTheBudget: a broadcast of large messages to
// subscribers that read them fits client_query_buffer_total however many
// they are, each payload counted once while it goes out. Each subscriber's
// output held a copy of the message it was writing, charged to it: 200
// subscribers of 1 MB messages held 200 MB, and at the default 128 MiB the
// budget closed the publisher at its second PUBLISH and 69 connections
// with it. Here 24 subscribers read messages of 1 MB (24 MB at once over a
// 16 MiB budget, at most 3 MB of them unread at a time), among them one
// that reads slowly and one that subscribes to another channel midway;
// all get every message, in order, and nobody is closed but one more
// subscriber that reads nothing: it holds all 20 MB, more than the budget,
// and is closed for it (the pubsub limits set above). Once every
// connection is closed, nothing stays counted.
func TestBroadcastToReadersFitsTheBudget(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		name := "loop"
		if useTLS {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) { broadcastToReaders(t, useTLS) })
	}
}

func broadcastToReaders(t *testing.T, useTLS bool) {
	const readers, messages, size = 24, 20, 1000000
	masters := redisproc.ForTest(t, 1)
	c := startFront(t, masters, useTLS, withHub(t, "", func(_ *proxy.Config, hc *pubsub.Config) {
		// Under -race on a loaded machine the hub's connection to the
		// master was once closed (hub stats Connects 2, ConnectErrors 1)
		// and the two messages published meanwhile reached no reader:
		// the hub's reads and writes have 3 s by default (ReadTimeout).
		// Pub/sub delivers at most once; not what is checked here.
		hc.ReadTimeout = time.Minute
	}), withKeptBudget, func(pc *proxy.Config, qc *quorum.Config) {
		// With the harness's 250ms, under -race on a loaded machine,
		// one 1 MB PUBLISH in a run or two never reached any
		// subscriber (the hub delivered it to none; the PUBLISH still
		// answered the local count): not what is checked here.
		qc.NodeTimeout = 5 * time.Second
		// The budget alone closes the one not reading: not the pubsub
		// limits, nor the write timeout on a slow machine.
		pc.PubSubHardLimit, pc.PubSubSoftLimit = 64<<20, 64<<20
		pc.WriteTimeout = time.Minute
	})
	c.waitUp(1)
	c.waitVoting(1)
	c.waitHub()
	payload := func(i int) string {
		return fmt.Sprintf("%04d", i) + strings.Repeat(string(rune('a'+i%26)), size-4)
	}
	frames := make([][]byte, messages)
	for i := range frames {
		frames[i] = []byte(pushFrame(false, "message", "fan", payload(i)))
	}
	confirm := func(ch string, n int) []byte {
		return []byte(pushFrame(false, "subscribe", ch, fmt.Sprintf(":%d", n)))
	}
	subscribe := func(conn net.Conn, r *bufio.Reader) {
		t.Helper()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Write([]byte(encode("SUBSCRIBE", "fan"))); err != nil {
			t.Fatal(err)
		}
		want := confirm("fan", 1)
		got := make([]byte, len(want))
		if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("SUBSCRIBE fan: %q %v", got, err)
		}
	}

	var conns []net.Conn
	defer func() {
		for _, conn := range conns {
			conn.Close()
		}
	}()
	idle := c.dialSmallWindow() // subscribes and reads nothing more
	conns = append(conns, idle)
	subscribe(idle, bufio.NewReader(idle))

	got := make([]atomic.Int32, readers) // messages each reader has read whole
	errs := make(chan error, readers)
	var wg sync.WaitGroup
	for s := 0; s < readers; s++ {
		var conn net.Conn
		if s == 0 {
			conn = c.dialSmallWindow()
		} else {
			conn = c.dial()
		}
		conns = append(conns, conn)
		r := bufio.NewReaderSize(conn, 64<<10)
		subscribe(conn, r)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := readBroadcast(conn, r, s, frames, confirm("other", 2), &got[s])
			if err != nil {
				got[s].Store(messages) // reported below; the publisher goes on
			}
			errs <- err
		}()
	}

	// The publisher sends a message once every reader has read all but
	// the last two (or failed): all readers hold the same few messages at
	// a time.
	pub := c.dial()
	conns = append(conns, pub)
	pr := bufio.NewReader(pub)
	start := time.Now()
	for i := 0; i < messages; i++ {
		deadline := time.Now().Add(20 * time.Second)
		for s := range got {
			for int(got[s].Load()) < i-2 {
				if time.Now().After(deadline) {
					t.Fatalf("reader %d read %d messages in 20s; message %d waits", s, got[s].Load(), i)
				}
				time.Sleep(time.Millisecond)
			}
		}
		pub.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := pub.Write([]byte(encode("PUBLISH", "fan", payload(i)))); err != nil {
			t.Fatalf("PUBLISH %d: %v", i, err)
		}
		line, err := pr.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, ":") {
			t.Fatalf("PUBLISH %d: the publisher got %q, %v: closed though the messages fit the budget once each", i, line, err)
		}

	}
	wg.Wait()
	close(errs)
	failed := false
	for err := range errs {
		if err != nil {
			t.Error(err)
			failed = true
		}
	}
	if failed {
		t.Logf("hub: %+v", c.hub.Stats())
	}
	t.Logf("%d messages of %d bytes to %d readers in %v", messages, size, readers, time.Since(start))

	evicted, closes := infoField(infoOf(t, c, "stats"), "evicted_clients"), infoField(infoOf(t, c, "pubsub"), "pubsub_output_limit_closes")
	t.Logf("evicted_clients %s, pubsub_output_limit_closes %s", evicted, closes)
	if evicted != "0" {
		t.Errorf("evicted_clients %s: connections closed for client_query_buffer_total while the messages fit it once each", evicted)
	}
	if closes != "1" {
		t.Errorf("pubsub_output_limit_closes %s, want 1: the subscriber that reads nothing, holding %d MB over the %d MiB budget", closes, messages*size/1000000, keptTotal>>20)
	}
	idle.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, idle); isTimeout(err) {
		t.Errorf("the subscriber reading nothing holds more than client_query_buffer_total and is still open")
	}

	for _, conn := range conns {
		conn.Close()
	}
	conns = nil
	c.info.Close()
	c.info = nil
	deadline := time.Now().Add(10 * time.Second)
	for {
		shared, held := c.srv.SharedPushBytes(), outputBytesFresh(t, c)
		if shared == 0 && held == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("every subscriber closed, yet %d bytes of shared payloads and client_output_bytes %s are still counted", shared, held)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readBroadcast reads the messages of frames, in order, each whole; reader
// 0 reads in small steps, reader 1 subscribes to another channel midway
// (its confirmation, other, comes between two messages).
func readBroadcast(conn net.Conn, r *bufio.Reader, s int, frames [][]byte, other []byte, got *atomic.Int32) error {
	confirmed, asked := s != 1, false
	for i := 0; i < len(frames); {
		conn.SetDeadline(time.Now().Add(20 * time.Second))
		if s == 1 && i == len(frames)/2 && !asked {
			asked = true
			if _, err := conn.Write([]byte(encode("SUBSCRIBE", "other"))); err != nil {
				return fmt.Errorf("reader %d: SUBSCRIBE other: %v", s, err)
			}
		}
		want := frames[i]
		if !confirmed {
			if head, _ := r.Peek(len("*3\r\n$9\r\nsubscribe")); bytes.Equal(head, other[:len(head)]) {
				want = other
			}
		}
		buf := make([]byte, len(want))
		if s == 0 {
			for n := 0; n < len(buf); {
				k, err := r.Read(buf[n:min(len(buf), n+4096)])
				if err != nil {
					return fmt.Errorf("reader %d, message %d: %v after %d bytes", s, i, err, n)
				}
				n += k
			}
		} else if _, err := io.ReadFull(r, buf); err != nil {
			return fmt.Errorf("reader %d, message %d: %v", s, i, err)
		}
		if !bytes.Equal(buf, want) {
			return fmt.Errorf("reader %d, message %d: got %q… (%d bytes), want %q…", s, i, buf[:min(len(buf), 40)], len(buf), want[:40])
		}
		if len(want) == len(other) && bytes.Equal(want, other) {
			confirmed = true
			continue
		}
		i++
		got.Store(int32(i))
	}
	if !confirmed {
		return fmt.Errorf("reader %d: no confirmation of SUBSCRIBE other", s)
	}
	return nil
}

// outputBytesFresh is INFO's client_output_bytes asked on a new
// connection that sends nothing else: its own buffers are not charged yet.
func outputBytesFresh(t *testing.T, c *cluster) string {
	t.Helper()
	conn := c.dial()
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("INFO clients\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("INFO clients: %v", err)
		}
		if v, ok := strings.CutPrefix(line, "client_output_bytes:"); ok {
			return strings.TrimSpace(v)
		}
	}
}
