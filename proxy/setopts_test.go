package proxy_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// TestSetOptionsAsRedisReadsThem: SET's options as Redis 7.0 reads them
// (t_string.c): NX and XX may be repeated, an expiry option repeated
// takes its last value (the others are never parsed), two kinds of expiry
// are a syntax error. lockproxy refused the repetitions Redis accepts;
// each command here is sent to one Redis and through lockproxy, which
// must agree on success, and on the TTL the lock gets.
func TestSetOptionsAsRedisReadsThem(t *testing.T) {
	c := startCluster(t, 5)
	c.waitVoting(5)
	one := redisproc.ForTest(t, 1)[0]
	ctx := context.Background()
	x := c.client()
	for i, o := range []struct {
		opts []string
		ok   bool
		ttl  time.Duration // the lock's TTL where ok
	}{
		{[]string{"NX", "NX", "PX", "5000"}, true, 5 * time.Second},
		{[]string{"NX", "PX", "10", "PX", "20000"}, true, 20 * time.Second},
		{[]string{"NX", "PX", "20000", "PX", "10000"}, true, 10 * time.Second},
		{[]string{"NX", "PX", "abc", "PX", "20000"}, true, 20 * time.Second},
		{[]string{"nx", "ex", "50", "Ex", "20"}, true, 20 * time.Second},
		{[]string{"NX", "PX", "20000", "EX", "20"}, false, 0},
		{[]string{"NX", "EX", "20", "PXAT", "1"}, false, 0},
		{[]string{"NX", "XX", "PX", "5000"}, false, 0},
		{[]string{"NX", "PX", "5000", "PX"}, false, 0},
		{[]string{"NX", "PX", "20000", "PX", "abc"}, false, 0},
	} {
		key := "setopt:" + strconv.Itoa(i)
		cmd := append([]string{"SET", key, "tok"}, o.opts...)
		_, oneErr := one.Do(cmd...)
		if (oneErr == nil) != o.ok {
			t.Fatalf("one Redis: %q answered %v; the test expects ok=%v", cmd, oneErr, o.ok)
		}
		a := make([]any, len(cmd))
		for i := range cmd {
			a[i] = cmd[i]
		}
		v, err := x.Do(ctx, a...).Result()
		if o.ok != (err == nil && v == "OK") {
			t.Errorf("lockproxy: %q answered %v, %v; one Redis answered %v", cmd, v, err, oneErr)
			continue
		}
		if !o.ok {
			if !strings.HasPrefix(err.Error(), "ERR") || strings.HasPrefix(oneErr.Error(), "ERR syntax error") != strings.HasPrefix(err.Error(), "ERR syntax error") {
				t.Errorf("lockproxy: %q: %v; one Redis: %v", cmd, err, oneErr)
			}
			for m, r := range c.onMasters(key) {
				if r != "(nil)" {
					t.Errorf("%q refused, yet master %d holds %s", cmd, m, r)
				}
			}
			continue
		}
		for m, srv := range c.masters {
			p, err := srv.Do("PTTL", key)
			n, _ := strconv.ParseInt(p, 10, 64)
			if err != nil || n <= 0 || time.Duration(n)*time.Millisecond > o.ttl || time.Duration(n)*time.Millisecond < o.ttl-time.Second {
				t.Errorf("%q: master %d PTTL %s, %v; want about %v", cmd, m, p, err, o.ttl)
			}
		}
	}
}

// TestExpireOptionsRefusedSayingWhy: PEXPIRE and EXPIRE with Redis 7's
// NX, XX, GT or LT are refused, saying that lockproxy extends without
// them, not with an arity error Redis 7 would never give; an option Redis
// does not know gets Redis's own error. Nothing reaches a master.
func TestExpireOptionsRefusedSayingWhy(t *testing.T) {
	c := startCluster(t, 3)
	ctx := context.Background()
	x := c.client()
	if err := x.SetNX(ctx, "exopt", "tok", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]any{
		{"PEXPIRE", "exopt", "1000", "GT"},
		{"PEXPIRE", "exopt", "1000", "lt"},
		{"EXPIRE", "exopt", "1", "NX"},
		{"EXPIRE", "exopt", "1", "XX"},
	} {
		err := x.Do(ctx, cmd...).Err()
		if err == nil || !strings.Contains(err.Error(), "NX, XX, GT and LT") || strings.Contains(err.Error(), "wrong number") {
			t.Errorf("%v: %v; want a refusal naming the options", cmd, err)
		}
	}
	if err := x.Do(ctx, "PEXPIRE", "exopt", "1000", "FOO").Err(); err == nil || err.Error() != "ERR Unsupported option FOO" {
		t.Errorf("PEXPIRE with FOO: %v; want Redis's ERR Unsupported option FOO", err)
	}
	for i, m := range c.masters {
		if p, _ := m.Do("PTTL", "exopt"); p == "-2" || len(p) < 4 {
			t.Errorf("master %d: PTTL %s after refused PEXPIREs; want the lock's 10s left", i, p)
		}
	}
	if err := x.Do(ctx, "EVAL", "return 1", "-1").Err(); err == nil || err.Error() != "ERR Number of keys can't be negative" {
		t.Errorf("EVAL with -1 keys: %v; want Redis's ERR Number of keys can't be negative", err)
	}
}

// TestSetAgreesWithRedisOnRandomOptions: random SETs over NX, XX, the four
// expiries (with integers Redis refuses: "+5000", "05000", "-0", " 5000",
// "5000.0", overflow), GET and KEEPTTL, each sent to one Redis and through
// lockproxy. lockproxy never takes a SET that Redis refuses, refuses with
// a syntax error exactly where Redis does, and takes every lock Redis
// would take (NX, no XX, GET or KEEPTTL) whose last relative expiry is
// within max_ttl and leaves validity.
func TestSetAgreesWithRedisOnRandomOptions(t *testing.T) {
	c := startCluster(t, 5)
	c.waitVoting(5)
	one := redisproc.ForTest(t, 1)[0]
	ctx := context.Background()
	x := c.client()
	r := rand.New(rand.NewPCG(95, 1))
	msVals := []string{"5000", "+5000", "05000", "-0", "0", "-5", "abc", "5000.0", " 5000", "5000 ", "9223372036854775807", "1", "60000", "60001", "", "1e3"}
	sVals := []string{"5", "+5", "05", "-0", "0", "-5", "x", "5.0", "60", "61", "9223372036854775807", "9223372036854776"}
	now := time.Now()
	atMs := []string{strconv.FormatInt(now.Add(10*time.Second).UnixMilli(), 10), "1", "0", strconv.FormatInt(now.Add(time.Hour).UnixMilli(), 10), "+" + strconv.FormatInt(now.Add(10*time.Second).UnixMilli(), 10)}
	atS := []string{strconv.FormatInt(now.Add(10*time.Second).Unix(), 10), "1", strconv.FormatInt(now.Add(time.Hour).Unix(), 10)}
	for i := range 300 {
		cmd := []string{"SET", "rnd:" + strconv.Itoa(i), "tok"}
		for range 1 + r.IntN(4) {
			switch r.IntN(8) {
			case 0, 1:
				cmd = append(cmd, []string{"NX", "nx", "Nx"}[r.IntN(3)])
			case 2:
				cmd = append(cmd, "XX")
			case 3:
				cmd = append(cmd, []string{"PX", "px"}[r.IntN(2)], msVals[r.IntN(len(msVals))])
			case 4:
				cmd = append(cmd, "EX", sVals[r.IntN(len(sVals))])
			case 5:
				cmd = append(cmd, "PXAT", atMs[r.IntN(len(atMs))])
			case 6:
				cmd = append(cmd, "EXAT", atS[r.IntN(len(atS))])
			case 7:
				cmd = append(cmd, []string{"GET", "KEEPTTL", "PX"}[r.IntN(3)])
			}
		}
		_, oneErr := one.Do(cmd...)
		a := make([]any, len(cmd))
		for i := range cmd {
			a[i] = cmd[i]
		}
		v, err := x.Do(ctx, a...).Result()
		if errors.Is(err, redis.Nil) {
			err = nil
		}
		switch {
		case oneErr != nil && err == nil:
			t.Errorf("%q: one Redis refused it (%v), lockproxy answered %v", cmd, oneErr, v)
		case oneErr != nil:
			if strings.HasPrefix(oneErr.Error(), "ERR syntax error") != strings.HasPrefix(err.Error(), "ERR syntax error") && !strings.Contains(err.Error(), "GET") && !strings.Contains(err.Error(), "KEEPTTL") {
				t.Errorf("%q: one Redis: %v; lockproxy: %v", cmd, oneErr, err)
			}
		case err != nil && takesLock(cmd):
			t.Errorf("%q: one Redis took it, lockproxy: %v", cmd, err)
		}
	}
}

// takesLock reports whether SET cmd, which one Redis took, is a lock
// lockproxy must take too: NX, no XX, GET or KEEPTTL, and its last expiry
// relative, within the default max_ttl (60s), and longer than the drift
// allowance.
func takesLock(cmd []string) bool {
	nx, ms := false, int64(0)
	for i := 3; i < len(cmd); i++ {
		switch strings.ToLower(cmd[i]) {
		case "nx":
			nx = true
		case "xx", "get", "keepttl":
			return false
		case "pxat", "exat":
			ms = -1
			i++
		case "px", "ex":
			n, err := strconv.ParseInt(cmd[i+1], 10, 64)
			if err != nil {
				return false
			}
			if ms = n; strings.ToLower(cmd[i]) == "ex" {
				ms = n * 1000
			}
			i++
		}
	}
	return nx && ms >= 3 && ms <= 60000
}
