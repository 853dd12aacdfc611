package proxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestOldRedissonAbsentMasterReleaseMessage: A holds the lock at depth 2
// on masters 1 and 2 (master 0 was away for both locks). Its first unlock
// leaves a count; its second, with master 0 cut off, deletes the lock on
// both. On one Redis a subscriber hears nothing after the first and one
// release message after the second. Redisson before 3.10.6 publishes
// where there is no lock, so master 0 publishes on the first unlock.
func TestOldRedissonAbsentMasterReleaseMessage(t *testing.T) {
	t.Parallel()
	for _, unlock := range []string{"unlockInner-2.2.4", "unlockInner-3.10.6"} {
		t.Run(unlock, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ops := oldRedissonOps(t, unlock)
			const tokA = "uuidA:1"
			channel := "redisson_lock__channel:{" + ops.name + "}"
			c, relays := startRelayed(t, 3, withHub(t, ""))
			c.waitHub()
			a := c.client()
			sub := a.Subscribe(ctx, channel)
			t.Cleanup(func() { sub.Close() })
			if _, err := sub.ReceiveTimeout(ctx, 5*time.Second); err != nil {
				t.Fatalf("SUBSCRIBE through lockproxy: %v", err)
			}
			c.partition(relays, 0)
			for range 2 {
				if r, err := ops.tryLock(ctx, a, tokA); err != nil || r != "granted" {
					t.Fatalf("A's lock with master 0 away: %q %v", r, err)
				}
			}
			c.heal(relays, 0)
			c.waitHub()
			if r, err := ops.unlockOld(ctx, a, tokA); err != nil || r != "0" {
				t.Fatalf("A's first of two unlocks: %q %v, want 0", r, err)
			}
			if m, err := sub.ReceiveTimeout(ctx, 300*time.Millisecond); err == nil {
				t.Errorf("lockproxy delivered %v after the unlock at depth 2, while a quorum holds the lock (counts %q)", m, ops.counts(c, tokA))
			}
			c.partition(relays, 0)
			if r, err := ops.unlockOld(ctx, a, tokA); err != nil || r != "1" {
				t.Fatalf("A's last unlock: %q %v, want 1", r, err)
			}
			if m, err := sub.ReceiveTimeout(ctx, time.Second); err != nil {
				t.Errorf("no release message through lockproxy within 1s of the last unlock: %v", err)
			} else if msg, ok := m.(*redis.Message); !ok || msg.Payload != "0" {
				t.Errorf("after the last unlock: %v, want the message 0", m)
			}
		})
	}
}
