package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// TestBroadcastSubscribersKeptPastTheBudget: when the pub/sub messages
// nobody read go over client_query_buffer_total, the subscribers closed
// are those whose messages closing them frees. Subscribers sharing a
// broadcast each appear to hold its whole size, but closing one frees
// nothing while the others still hold it: ranked by what they held, the 4
// subscribers sharing 8 MB of a broadcast (each under the pubsub soft
// limit) were closed first, for nothing, before the subscribers of their
// own channels that had pushed the total over the budget.
func TestBroadcastSubscribersKeptPastTheBudget(t *testing.T) {
	masters := redisproc.ForTest(t, 1)
	c := startHubFront(t, masters, "", withKeptBudget)
	pub := c.client()
	ctx := context.Background()
	payload := func(i int) string { return strings.Repeat(string(rune('a'+i)), 1000000) }
	subscribe := func(channel string) *respConn {
		// A 32 KiB window set before the connection is made: the kernels
		// keep little, and the subscriber can read it all later (a
		// window shrunk once connected stalls the stream for good).
		conn := c.dialSmallWindow()
		t.Cleanup(func() { conn.Close() })
		sub := &respConn{t: t, conn: conn, r: bufio.NewReader(conn)}
		sub.send("SUBSCRIBE", channel)
		sub.mustFrame(5 * time.Second)
		return sub
	}
	closes := func() string { return infoField(infoOf(t, c, "pubsub"), "pubsub_output_limit_closes") }

	var fan []*respConn
	for i := 0; i < 4; i++ {
		fan = append(fan, subscribe("fan"))
	}
	for i := 0; i < 8; i++ {
		if err := pub.Publish(ctx, "fan", payload(i)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	for i := 0; i < 8; i++ {
		subscribe(fmt.Sprintf("own%d", i))
	}
	for k := 0; k < 4; k++ {
		for i := 0; i < 8; i++ {
			if err := pub.Publish(ctx, fmt.Sprintf("own%d", i), payload(k)).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(300 * time.Millisecond)
	n := closes()
	t.Logf("4 subscribers sharing 8 MB of a broadcast, 8 holding 4 MB each of their own: pubsub_output_limit_closes %s", n)
	if n == "0" {
		t.Fatalf("no subscriber closed with 40 MB unread over a %d MiB budget", keptTotal>>20)
	}
	for s, sub := range fan {
		for i := 0; i < 8; i++ {
			want := pushFrame(false, "message", "fan", payload(i))
			got, err := sub.frame(10 * time.Second)
			if err != nil || got != want {
				t.Fatalf("broadcast subscriber %d, message %d: %v (%d bytes read): closed though closing it freed nothing", s, i, err, len(got))
			}
		}
	}
}
