package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// Integers as Redis reads them (string2ll): decimal digits, an optional
// '-', no '+', no leading zero, no space. Go's strconv.ParseInt also takes
// "+5000" and "05000", and lockproxy once read a script's TTL that way and
// forwarded the script unchanged: a SETNX-then-PEXPIRE acquire then took
// the key on every master and failed at its PEXPIRE, leaving a lock with
// no expiry on all of them (found by review, helper-95).

// setnxThenPexpire is the acquire of legacy lock code ported to a script:
// the TTL reaches the masters as the client wrote it.
const setnxThenPexpire = `if redis.call('setnx', KEYS[1], ARGV[1]) == 1 then redis.call('pexpire', KEYS[1], ARGV[2]) return 1 end return 0`

// oddForms are forms of n (digits) and of zero that strconv.ParseInt
// takes and Redis refuses.
func oddForms(n string) []string { return []string{"+" + n, "0" + n, "-0", "+0"} }

// TestScriptTTLOnlyAsRedisReadsIt: a script's TTL that Redis would not
// read as an integer is refused before the script reaches a master, and
// nothing is left there; one Redis answers the same script with an error
// and keeps the key without an expiry, which lockproxy must never do.
func TestScriptTTLOnlyAsRedisReadsIt(t *testing.T) {
	c := startCluster(t, 5)
	c.waitVoting(5)
	one := redisproc.ForTest(t, 1)[0]
	ctx := context.Background()
	x := c.client()
	for _, ttl := range oddForms("5000") {
		key := "odd-ttl-" + ttl
		if _, err := one.Do("EVAL", setnxThenPexpire, "1", key, "tok", ttl); err == nil || !strings.Contains(err.Error(), "not an integer") {
			t.Fatalf("one Redis, TTL %q: %v; want its not-an-integer error (the test's premise)", ttl, err)
		}
		rep, err := x.Eval(ctx, setnxThenPexpire, []string{key}, "tok", ttl).Result()
		if err == nil || !strings.Contains(err.Error(), "ARGV[2]") || !strings.Contains(err.Error(), "integer") {
			t.Errorf("lockproxy, TTL %q: %v, %v; want an error naming ARGV[2] as the integer TTL", ttl, rep, err)
		}
		for i, m := range c.masters {
			if v, err := m.Do("PTTL", key); err != nil || v != "-2" {
				t.Errorf("TTL %q: master %d holds %s (PTTL %s, %v); want nothing written", ttl, i, key, v, err)
			}
		}
	}
}

// TestIntegerArgumentsAsRedisReadsThem: SET's expiry, PEXPIRE's and
// EXPIRE's TTL and EVAL's key count are refused by lockproxy exactly
// where one Redis refuses them.
func TestIntegerArgumentsAsRedisReadsThem(t *testing.T) {
	c := startCluster(t, 5)
	c.waitVoting(5)
	one := redisproc.ForTest(t, 1)[0]
	ctx := context.Background()
	x := c.client()
	var cmds [][]string
	for _, n := range oddForms("5000") {
		cmds = append(cmds, []string{"SET", "odd-set", "tok", "NX", "PX", n}, []string{"PEXPIRE", "odd-held", n})
	}
	for _, n := range oddForms("5") {
		cmds = append(cmds, []string{"SET", "odd-set", "tok", "NX", "EX", n}, []string{"EXPIRE", "odd-held", n})
	}
	for _, n := range oddForms("1") {
		cmds = append(cmds, []string{"EVAL", "return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])", n, "odd-eval", "tok", "5000"})
	}
	for _, cmd := range cmds {
		{
			for _, at := range []func(args ...string) error{
				func(args ...string) error { _, err := one.Do(args...); return err },
				func(args ...string) error {
					a := make([]any, len(args))
					for i := range args {
						a[i] = args[i]
					}
					return x.Do(ctx, a...).Err()
				},
			} {
				err := at(cmd...)
				if err == nil || !strings.Contains(err.Error(), "not an integer") {
					t.Errorf("%q: %v; want ERR value is not an integer or out of range, as Redis answers", cmd, err)
				}
			}
			for i, m := range c.masters {
				for _, k := range []string{"odd-set", "odd-eval"} {
					if v, _ := m.Do("PTTL", k); v != "-2" {
						t.Errorf("%q: master %d holds %s (PTTL %s)", cmd, i, k, v)
					}
				}
			}
		}
	}
}

// TestCommandArgumentFoldedAsRedisDoes: a script that runs a command named
// by an argument (Redisson's unlock publishes with redis.call(ARGV[4], …))
// is forwarded only when that argument is PUBLISH or SPUBLISH in ASCII
// case, as Redis looks commands up. strings.EqualFold also folds 'ſ' to
// 's', so "publiſh" passed lockproxy's check; the masters deleted the lock
// and then failed at the unknown command, and the holder heard an error
// for a release that had happened (found by review, helper-95).
func TestCommandArgumentFoldedAsRedisDoes(t *testing.T) {
	c := startCluster(t, 3)
	c.waitVoting(3)
	ctx := context.Background()
	x := c.client()
	rel := `if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) redis.call(ARGV[2], KEYS[2], 'released') return 1 end return 0`
	for _, cmd := range []string{"publi\u017fh", "\u017fpubli\u017fh"} {
		if err := x.SetNX(ctx, "fold", "tok", 10*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := x.Eval(ctx, rel, []string{"fold", "ch"}, "tok", cmd).Result()
		if err == nil || !strings.Contains(err.Error(), "ARGV[2]") {
			t.Errorf("%q as the command: %v; want lockproxy's refusal naming ARGV[2]", cmd, err)
		}
		if got := c.onMasters("fold"); count(got, "tok") != 3 {
			t.Errorf("%q as the command: masters hold %q; want the lock untouched", cmd, got)
		}
	}
	for _, cmd := range []string{"publish", "PUBLISH", "sPublish"} {
		if err := x.SetNX(ctx, "fold", "tok", 10*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		if r, err := x.Eval(ctx, rel, []string{"fold", "ch"}, "tok", cmd).Result(); err != nil || r != int64(1) {
			t.Errorf("%q as the command: %v, %v; want 1 (released)", cmd, r, err)
		}
	}
}

// TestUnicodeCaseCommandNotForwarded: a script calling "pexpİre" (U+0130,
// which strings.ToLower maps to 'i') was understood as a SETNX-then-PEXPIRE
// acquire; Redis knows no such command, so on every master the script took
// the key and failed, leaving a lock without an expiry, as one Redis does.
// lockproxy refuses it and nothing reaches a master (found by review,
// helper-95).
func TestUnicodeCaseCommandNotForwarded(t *testing.T) {
	c := startCluster(t, 5)
	c.waitVoting(5)
	one := redisproc.ForTest(t, 1)[0]
	ctx := context.Background()
	x := c.client()
	body := "if redis.call('setnx', KEYS[1], ARGV[1]) == 1 then redis.call('pexp\u0130re', KEYS[1], ARGV[2]) return 1 end return 0"
	if _, err := one.Do("EVAL", body, "1", "uni", "tok", "5000"); err == nil || !strings.Contains(err.Error(), "Unknown Redis command") {
		t.Fatalf("one Redis: %v; want its unknown-command error (the test's premise)", err)
	}
	if p, _ := one.Do("PTTL", "uni"); p != "-1" {
		t.Fatalf("one Redis: PTTL %s; want -1, the key taken without an expiry (the test's premise)", p)
	}
	rep, err := x.Eval(ctx, body, []string{"uni"}, "tok", "5000").Result()
	if err == nil || !strings.HasPrefix(err.Error(), "ERR unknown script") {
		t.Errorf("lockproxy: %v, %v; want the script refused", rep, err)
	}
	for i, m := range c.masters {
		if p, err := m.Do("PTTL", "uni"); err != nil || p != "-2" {
			t.Errorf("master %d: PTTL uni %s (%v); want nothing written", i, p, err)
		}
	}
}
