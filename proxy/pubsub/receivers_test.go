package pubsub

import (
	"testing"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// PUBLISH's reply through a proxy: its own receivers exactly, plus what
// the masters count beyond this hub (other proxies as one each, direct
// subscribers as themselves).
func TestReceivers(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	a, b := startHub(t, testConfig(t, masters)), startHub(t, testConfig(t, masters))
	subscribe(t, a, &recorder{}, Channel, "ch", 3)
	subscribe(t, a, &recorder{}, Channel, "ch", 3)
	subscribe(t, a, &recorder{}, Pattern, "c*", 3)
	for range 3 {
		subscribe(t, b, &recorder{}, Channel, "ch", 3)
	}
	subscribe(t, b, &recorder{}, Channel, "onlyB", 3)
	subscribe(t, b, &recorder{}, Channel, "onlyB", 3)
	subscribe(t, a, &recorder{}, Shard, "sh", 3)
	subscribe(t, b, &recorder{}, Shard, "sh", 3)
	subscribe(t, b, &recorder{}, Shard, "sh", 3)
	direct := dialRaw(t, masters[0].Addr)
	direct.send(t, "SUBSCRIBE", "ch")
	direct.next(t)

	pub := NewConnPublisher(addrs(masters), nil, "", "", 0)
	defer pub.Close()
	replies := pub.PublishReplies("PUBLISH", "ch", []byte("x"))
	// Master 0 counts a's channel and pattern, b, and the direct client.
	if replies[0] != 4 || replies[1] != 3 || replies[2] != 3 {
		t.Fatalf("masters answered %v", replies)
	}
	cases := []struct {
		name    string
		h       *Hub
		kind    Kind
		channel string
		replies []int64
		want    int64
	}{
		// 2 + 1 local; remote max(4-2, 3-2, 3-2): b as one, the direct one.
		{"a", a, Channel, "ch", replies, 5},
		// 3 local; remote max(4-1, 3-1, 3-1): a's channel and pattern, direct.
		{"b", b, Channel, "ch", replies, 6},
		// master 0 did not answer: the direct subscriber is not known.
		{"a, master 0 silent", a, Channel, "ch", []int64{-1, 3, 3}, 4},
		{"nobody", a, Channel, "none", []int64{0, 0, 0}, 0},
		{"remote only", a, Channel, "onlyB", []int64{1, 1, 1}, 1},
		{"shard", a, Shard, "sh", []int64{2, 2, 2}, 2},
		{"shard from b", b, Shard, "sh", []int64{2, 2, 2}, 3},
		{"no master answered", b, Channel, "ch", []int64{-1, -1, -1}, 3},
	}
	for _, c := range cases {
		if got := c.h.Receivers(c.kind, c.channel, c.replies, Owned{}); got != c.want {
			t.Errorf("%s: Receivers = %d, want %d", c.name, got, c.want)
		}
	}
	if got := pub.PublishReplies("SPUBLISH", "sh", []byte("x")); got[0] != 2 {
		t.Fatalf("SPUBLISH answered %v: both hubs should count once", got)
	}
}
