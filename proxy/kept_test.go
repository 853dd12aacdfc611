package proxy_test

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// What connections hold besides their input buffers (replies they do not
// read, transactions left open) counts in client_query_buffer_total (see
// kept.go). Each has a bound per connection, none across connections
// before: 50 connections pipelining GET of a 1 MiB value without reading
// took the lockproxy binary to 1.1 GB, and 9,900 connections each holding
// a MULTI of 63 ECHOs of 1 KB to 785 MB, with INFO showing 40 MB of client
// input against its 128 MiB budget.

const keptTotal = 16 << 20

func withKeptBudget(pc *proxy.Config, qc *quorum.Config) {
	withLimits(1<<20, 16, 2<<20+4096)(pc, qc)
	pc.MaxInputTotal = keptTotal
}

// heldByClients is what INFO says all connections hold: input, and the
// rest charged with it.
func heldByClients(t *testing.T, c *cluster) (input, output int64) {
	admin := c.client()
	defer admin.Close()
	return infoInt(t, admin, "clients", "client_input_bytes"), infoInt(t, admin, "clients", "client_output_bytes")
}

// TestUnreadRepliesCountInTheBudget: connections that pipeline GETs of a
// 1 MiB value and never read hold what the budget allows, then the one
// holding the most is closed; another client is served throughout.
func TestUnreadRepliesCountInTheBudget(t *testing.T) {
	transports(t, func(t *testing.T, start func(testing.TB, int, ...clusterOpt) *cluster) {
		c := start(t, 1, withKeptBudget)
		other := c.client()
		ctx := context.Background()
		if ok, err := other.SetNX(ctx, "bigval", strings.Repeat("v", 1000000), time.Minute).Result(); err != nil || !ok {
			t.Fatalf("SET bigval NX: %v %v", ok, err)
		}
		base := heapInUse()
		const conns = 8 // each asks for 200 MB of replies; holds 16 values and 1 MiB of them
		for i := 0; i < conns; i++ {
			conn := c.dialSmallWindow()
			t.Cleanup(func() { conn.Close() })
			if _, err := conn.Write([]byte(strings.Repeat("GET bigval\r\n", 200))); err != nil {
				t.Fatal(err)
			}
			// Its first replies, or its close: one holding 16 values
			// of 1 MiB holds the whole budget, and over TLS it may be
			// closed before its writer sent a byte.
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := conn.Read(make([]byte, 1)); isTimeout(err) {
				t.Fatal("no reply and no close in 10s")
			}
		}
		if ok, err := other.SetNX(ctx, "innocent", "t", 10*time.Second).Result(); err != nil || !ok {
			t.Fatalf("another client's SET NX: %v %v", ok, err)
		}
		held := int64(heapAfter()) - int64(base)
		in, out := heldByClients(t, c)
		admin := c.client()
		defer admin.Close()
		evicted := infoInt(t, admin, "stats", "evicted_clients")
		t.Logf("%d connections not reading GETs of a 1 MiB value: heap %+.1f MiB, INFO client_input_bytes %d, client_output_bytes %d, evicted_clients %d",
			conns, float64(held)/(1<<20), in, out, evicted)
		if evicted == 0 {
			t.Errorf("no connection closed for client_query_buffer_total (%d bytes)", keptTotal)
		}
		if in+out > keptTotal {
			t.Errorf("clients hold %d bytes by INFO, over client_query_buffer_total %d", in+out, keptTotal)
		}
		// The budget, and the values of the GETs decided meanwhile that
		// the collector has not reclaimed; unbounded, 8 × 17 MiB.
		if held > 2*keptTotal {
			t.Errorf("the proxy holds %.1f MiB for connections that do not read; want at most twice client_query_buffer_total (%d MiB)", float64(held)/(1<<20), 2*keptTotal>>20)
		}
	})
}

// TestOpenTransactionsCountInTheBudget: connections that queue a MULTI of
// 63 ECHOs of 1,000 bytes (under the 64 KiB a transaction may queue) and
// never EXEC hold what the budget allows; past it the one holding the most
// is closed, and a transaction opened afterwards runs.
func TestOpenTransactionsCountInTheBudget(t *testing.T) {
	transports(t, func(t *testing.T, start func(testing.TB, int, ...clusterOpt) *cluster) {
		c := start(t, 1, withKeptBudget)
		conns := 400 // 25 MB of queues
		if c.clientTLS != nil {
			conns = 300 // plus each TLS reader's copy of its longest command
		}
		arg := strings.Repeat("x", 1000)
		var b strings.Builder
		b.WriteString(encode("MULTI"))
		for j := 0; j < 63; j++ {
			b.WriteString(encode("ECHO", arg))
		}
		queue := b.String()
		want := "+OK\r\n" + strings.Repeat("+QUEUED\r\n", 63)
		closed := 0
		for i := 0; i < conns; i++ {
			conn := c.dial()
			t.Cleanup(func() { conn.Close() })
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := conn.Write([]byte(queue)); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(want))
			if _, err := io.ReadFull(conn, got); err != nil || string(got) != want {
				// A connection chosen for eviction may be closed before
				// its last QUEUED.
				closed++
			}
		}
		in, out := heldByClients(t, c)
		admin := c.client()
		defer admin.Close()
		evicted := infoInt(t, admin, "stats", "evicted_clients")
		t.Logf("%d connections each holding a MULTI of 63 KB: INFO client_input_bytes %d, client_output_bytes %d, evicted_clients %d (%d cut short while queuing)",
			conns, in, out, evicted, closed)
		if evicted == 0 {
			t.Errorf("no connection closed for client_query_buffer_total (%d bytes): open transactions are held outside it", keptTotal)
		}
		if in+out > keptTotal {
			t.Errorf("clients hold %d bytes by INFO, over client_query_buffer_total %d", in+out, keptTotal)
		}
		conn := c.dial()
		defer conn.Close()
		out2, _ := exchangeOn(t, conn, encode("MULTI")+encode("SET", "txlock", "t", "NX", "PX", "10000")+encode("EXEC"), 2*time.Second)
		if out2 != "+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n" {
			t.Fatalf("a transaction after the others: %q", out2)
		}
	})
}

// TestIdleAfterALongPipelineHoldsLittle: a connection that once sent a
// long pipeline and then sits idle keeps little of it. It kept every slot
// of its longest pipeline (about 90 bytes a command, up to a turn's worth):
// 72 KiB per connection after 13,000 PINGs, outside the budget, for the
// connection's life (10,000 connections: 700 MB).
func TestIdleAfterALongPipelineHoldsLittle(t *testing.T) {
	c := startCluster(t, 1)
	const conns, pings = 300, 13000
	base := heapInUse()
	for i := 0; i < conns; i++ {
		conn := c.dial()
		t.Cleanup(func() { conn.Close() })
		conn.SetDeadline(time.Now().Add(20 * time.Second))
		go conn.Write([]byte(strings.Repeat("PING\r\n", pings)))
		if _, err := io.ReadFull(conn, make([]byte, len("+PONG\r\n")*pings)); err != nil {
			t.Fatal(err)
		}
	}
	each := (int64(heapAfter()) - int64(base)) / conns
	t.Logf("%d idle connections after %d pipelined PINGs each: %.1f KiB held each", conns, pings, float64(each)/1024)
	// Its input buffer (4 KiB), replies' buffers (under 64 KiB each, charged
	// to the budget; 16 KiB for these) and the connection's own state.
	if each > 40<<10 {
		t.Fatalf("an idle connection holds %.1f KiB after a long pipeline; want at most 40", float64(each)/1024)
	}
}

// TestUnreadMessagesCountedOnce: pub/sub messages that subscribers have
// not read count in client_query_buffer_total once each, however many
// subscribers share them. Subscribers of distinct channels that never
// read held every message (up to the pubsub hard limit each, 32 MiB),
// none closed; now the ones holding the most are closed past the budget,
// while subscribers sharing a broadcast under it keep it.
func TestUnreadMessagesCountedOnce(t *testing.T) {
	masters := redisproc.ForTest(t, 1)
	c := startHubFront(t, masters, "", withKeptBudget)
	pub := c.client()
	ctx := context.Background()
	payload := func(i int) string { return strings.Repeat(string(rune('a'+i)), 1000000) }
	subscribe := func(channel string) *respConn {
		sub := c.respConn()
		tcpOf(sub.conn).SetReadBuffer(4096) // the kernel keeps little for it
		sub.send("SUBSCRIBE", channel)
		sub.mustFrame(5 * time.Second)
		return sub
	}
	closes := func() string { return infoField(infoOf(t, c, "pubsub"), "pubsub_output_limit_closes") }

	// A broadcast: 4 subscribers share 8 messages of 1 MB (8 MB once,
	// 32 MB counted per subscriber), under the 16 MiB budget.
	for i := 0; i < 4; i++ {
		subscribe("fan")
	}
	for i := 0; i < 8; i++ {
		if err := pub.Publish(ctx, "fan", payload(i)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // the deliveries are taken on the loop
	if n := closes(); n != "0" {
		t.Fatalf("subscribers sharing 8 MB of a broadcast were closed (%s): the messages were counted per subscriber", n)
	}
	// INFO shows them once: what the kernel took for a subscriber may have
	// freed the first ones, but never more than 8 MB.
	shared, err := strconv.ParseInt(infoField(infoOf(t, c, "clients"), "client_shared_payload_bytes"), 10, 64)
	if err != nil || shared <= 0 || shared > 8*1000000 {
		t.Fatalf("INFO clients client_shared_payload_bytes = %d (%v) with 8 MB shared by 4 subscribers that do not read; want 1..8000000", shared, err)
	}

	// 8 subscribers of their own channels, 4 messages of 1 MB each: 32 MB.
	for i := 0; i < 8; i++ {
		subscribe(fmt.Sprintf("own%d", i))
	}
	base := heapInUse()
	for k := 0; k < 4; k++ {
		for i := 0; i < 8; i++ {
			if err := pub.Publish(ctx, fmt.Sprintf("own%d", i), payload(k)).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(300 * time.Millisecond)
	held := int64(heapAfter()) - int64(base)
	t.Logf("8 subscribers not reading 4 MB each on their own channels: heap %+.1f MiB, pubsub_output_limit_closes %s", float64(held)/(1<<20), closes())
	if closes() == "0" {
		t.Errorf("no subscriber closed with 32 MB of distinct messages unread over a %d MiB budget", keptTotal>>20)
	}
	if held > keptTotal {
		t.Errorf("the proxy holds %.1f MiB of messages nobody read; want at most the budget, %d MiB", float64(held)/(1<<20), keptTotal>>20)
	}
	if err := pub.Publish(ctx, "fan", "still here").Err(); err != nil {
		t.Fatal(err)
	}
}
