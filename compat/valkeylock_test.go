package compat

import (
	"strconv"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
	"github.com/valkey-io/valkey-go/valkeylock"
)

// newValkeyLocker is valkey-go's valkeylock, rueidislock's fork, with the
// options newRueidisLocker sets and for the same reasons: no client-side
// caching (lockproxy sends no invalidations), one standalone server, and
// 200ms for each key's acquisition. Its scripts are rueidislock's, byte
// for byte; its client and handshake are valkey-go's.
func newValkeyLocker(t *testing.T, addr, prefix string, validity time.Duration, setpx bool) ctxLocker {
	t.Helper()
	l, err := valkeylock.NewLocker(valkeylock.LockerOption{
		ClientOption: valkey.ClientOption{
			InitAddress:       []string{addr},
			DisableCache:      true,
			ForceSingleClient: true,
		},
		KeyPrefix:     prefix,
		KeyValidity:   validity,
		TryNextAfter:  200 * time.Millisecond,
		FallbackSETPX: setpx,
	})
	if err != nil {
		t.Fatalf("valkeylock.NewLocker: %v", err)
	}
	t.Cleanup(l.Close)
	return l
}

// TestValkeyLock: valkeylock (valkey-go v1.0.x), PXAT and PX flavours,
// against one plain redis-server (the driver is right there) and through
// lockproxy, with the masters read after each step: TryWithContext, a
// second locker refused, the automatic extension moving the PTTL back up,
// release by cancel with a waiter in WithContext getting it, and
// ForceWithContext ending the overtaken holder's context.
func TestValkeyLock(t *testing.T) {
	t.Parallel()
	for _, where := range []struct {
		name string
		env  func(t *testing.T) *env
	}{{"plain", ownRedis}, {"lockproxy", setup}} {
		t.Run(where.name, func(t *testing.T) {
			t.Parallel()
			e := where.env(t)
			for _, setpx := range []bool{false, true} {
				t.Run("FallbackSETPX="+strconv.FormatBool(setpx), func(t *testing.T) {
					testRueidisLock(t, e, newValkeyLocker, setpx, valkeylock.ErrNotLocked)
				})
			}
		})
	}
}
