package compat

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// Lock libraries of other languages, run as their scripts: each script
// exactly as the library sends it (the source named), in each state of its
// lock (absent, the caller's, another's) on one redis-server and through
// lockproxy on the 5 masters holding the same state. The client must get
// the bytes Redis gives and every master must end as the single server
// does. None of these is catalogued: lockproxy understands each by what it
// does (docs/compat.md, "Lock libraries of other languages").

// libScript is one library script and how it is called: keys names its
// KEYS, "$K" standing for the lock key (set to each state) and anything
// else passed as is (sherlock passes its token and TTL in KEYS); argv as in
// scriptCase. remaining: the reply is the lock's remaining PTTL, which
// lockproxy answers as the quorum's less the drift (at most 250 ms lower);
// secondsTTL: its TTL in seconds, which may be one lower.
type libScript struct {
	name, body            string
	keys, argv            []string
	remaining, secondsTTL bool
}

var libScripts = []libScript{
	// brainix/pottery e2f40424c9 pottery/redlock.py (Redlock's scripts;
	// the acquire is SET NX PX).
	{name: "pottery acquired", keys: []string{"$K"}, argv: []string{"$TOK"}, remaining: true, body: `
                if redis.call('get', KEYS[1]) == ARGV[1] then
                    local pttl = redis.call('pttl', KEYS[1])
                    return (pttl > 0) and pttl or 0
                else
                    return 0
                end
            `},
	{name: "pottery extend", keys: []string{"$K"}, argv: []string{"$TOK", "$TTL"}, body: `
                if redis.call('get', KEYS[1]) == ARGV[1] then
                    return redis.call('pexpire', KEYS[1], ARGV[2])
                else
                    return 0
                end
            `},
	{name: "pottery release", keys: []string{"$K"}, argv: []string{"$TOK"}, body: `
                if redis.call('get', KEYS[1]) == ARGV[1] then
                    return redis.call('del', KEYS[1])
                else
                    return 0
                end
            `},
	// joanvila/aioredlock 685d1b5b08 aioredlock/redis.py.
	{name: "aioredlock set", keys: []string{"$K"}, argv: []string{"$TOK", "$TTL"}, body: `
    local identifier = redis.call('get', KEYS[1])
    if not identifier or identifier == ARGV[1] then
        return redis.call("set", KEYS[1], ARGV[1], 'PX', ARGV[2])
    else
        return redis.error_reply('ERROR')
    end`},
	{name: "aioredlock unset", keys: []string{"$K"}, argv: []string{"$TOK"}, body: `
    local identifier = redis.call('get', KEYS[1])
    if not identifier then
        return redis.status_reply('OK')
    elseif identifier == ARGV[1] then
        return redis.call("del", KEYS[1])
    else
        return redis.error_reply('ERROR')
    end`},
	{name: "aioredlock get ttl", keys: []string{"$K"}, argv: []string{"$TOK"}, secondsTTL: true, body: `
    local identifier = redis.call('get', KEYS[1])
    if not identifier then
        return redis.error_reply('ERROR')
    elseif identifier == ARGV[1] then
        return redis.call("TTL", KEYS[1])
    else
        return redis.error_reply('ERROR')
    end`},
	// vaidik/sherlock 77742ba91a sherlock/lock.py: token and TTL (s) in KEYS.
	{name: "sherlock acquire", keys: []string{"$K", "tok", "3"}, body: `
    local result = redis.call('SETNX', KEYS[1], KEYS[2])
    if result == 1 then
        redis.call('EXPIRE', KEYS[1], KEYS[3])
    end
    return result`},
	{name: "sherlock release", keys: []string{"$K", "tok"}, body: `
    local result = 0
    if redis.call('GET', KEYS[1]) == KEYS[2] then
        redis.call('DEL', KEYS[1])
        result = 1
    end
    return result`},
	// samcook/RedLock.net dcfe373b3e RedLockNet.SERedis/Lua (read
	// without the files' byte order mark): the extend takes a lock that
	// has gone.
	{name: "RedLock.net extend", keys: []string{"$K"}, argv: []string{"$TOK", "$TTL"}, body: "local currentVal = redis.call('get', KEYS[1])\nif (currentVal == false) then\n\treturn redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) and 1 or 0\nelseif (currentVal == ARGV[1]) then\n\treturn redis.call('pexpire', KEYS[1], ARGV[2])\nelse\n\treturn -1\nend"},
	{name: "RedLock.net unlock", keys: []string{"$K"}, argv: []string{"$TOK"}, body: "if redis.call('get', KEYS[1]) == ARGV[1] then\n\treturn redis.call('del', KEYS[1])\nelse\n\treturn 0\nend"},
	// madelson/DistributedLock 3da3eaf436 RedisMutexPrimitive.cs, as its
	// RedisScript renders it (key holes KEYS[n], value holes ARGV[n]).
	{name: "DistributedLock mutex extend", keys: []string{"$K"}, argv: []string{"$TOK", "$TTL"}, body: `
            if redis.call('get', KEYS[1]) == ARGV[1] then
                return redis.call('pexpire', KEYS[1], ARGV[2])
            end
            return 0`},
	{name: "DistributedLock mutex release", keys: []string{"$K"}, argv: []string{"$TOK"}, body: `
            if redis.call('get', KEYS[1]) == ARGV[1] then
                return redis.call('del', KEYS[1])
            end
            return 0`},
	// lukas-krecan/ShedLock 2495b1406d InternalRedisLockProvider.java
	// (safeUpdate; otherwise SET XX PX and DEL).
	{name: "ShedLock del", keys: []string{"$K"}, argv: []string{"$TOK"}, body: "        if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n            return redis.call(\"del\",KEYS[1])\n        else\n            return 0\n        end\n"},
	{name: "ShedLock upd", keys: []string{"$K"}, argv: []string{"$TOK", "$TTL"}, body: "        if redis.call('get', KEYS[1]) == ARGV[1] then\n           return redis.call('pexpire', KEYS[1], ARGV[2])\n        else\n           return 0\n        end\n"},
	// yiisoft/yii2-redis 0def731727 src/Mutex.php.
	{name: "yii2-redis Mutex release", keys: []string{"$K"}, argv: []string{"$TOK"}, body: "if redis.call(\"GET\",KEYS[1])==ARGV[1] then\n    return redis.call(\"DEL\",KEYS[1])\nelse\n    return 0\nend"},
	// php-lock/lock 3e64b5e1b8 src/Mutex/RedisMutex.php (a nowdoc: its
	// indentation is removed).
	{name: "php-lock RedisMutex release", keys: []string{"$K"}, argv: []string{"$TOK"}, body: "if redis.call(\"get\", KEYS[1]) == ARGV[1] then\n    return redis.call(\"del\", KEYS[1])\nelse\n    return 0\nend"},
	// lyokato/redlock 456b3fb30f lib/redlock/command.ex (Elixir): the
	// extend only lengthens (PEXPIRE GT).
	{name: "Elixir redlock extend", keys: []string{"$K"}, argv: []string{"$TOK", "$TTL"}, body: "  if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n    return redis.call(\"pexpire\",KEYS[1],ARGV[2],\"GT\")\n  else\n    return redis.error_reply('NOT LOCKED')\n  end\n"},
	{name: "Elixir redlock extend, longer", keys: []string{"$K"}, argv: []string{"$TOK", "8000"}, body: "  if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n    return redis.call(\"pexpire\",KEYS[1],ARGV[2],\"GT\")\n  else\n    return redis.error_reply('NOT LOCKED')\n  end\n"},
	{name: "Elixir redlock unlock", keys: []string{"$K"}, argv: []string{"$TOK"}, body: "  if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n    return redis.call(\"del\",KEYS[1])\n  else\n    return 0\n  end\n"},
	// baomidou/lock4j 381551f5fe RedisTemplateLockExecutor.java (Java,
	// Spring's RedisTemplate): the acquire is a script, the unlock
	// answers the strings "true" and "false".
	{name: "lock4j lock", keys: []string{"$K"}, argv: []string{"$TOK", "$TTL"}, body: "return redis.call('set',KEYS[1],ARGV[1],'NX','PX',ARGV[2])"},
	{name: "lock4j unlock", keys: []string{"$K"}, argv: []string{"$TOK"}, body: "if redis.call('get',KEYS[1]) == ARGV[1] then return tostring(redis.call('del', KEYS[1])==1) else return 'false' end"},
	{name: "lock4j renewal", keys: []string{"$K"}, argv: []string{"$TOK", "$TTL"}, body: "if redis.call('get', KEYS[1]) ==ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else  return 0  end"},
	// badboy/redlock-rs 3b62edc59f src/redlock.rs (Rust).
	{name: "redlock-rs unlock", keys: []string{"$K"}, argv: []string{"$TOK"}, body: "if redis.call('get',KEYS[1]) == ARGV[1] then\n                                return redis.call('del',KEYS[1])\n                              else\n                                return 0\n                              end"},
	// hexcowboy/rslock e5d7583120 src/lock.rs (Rust).
	{name: "rslock unlock", keys: []string{"$K"}, argv: []string{"$TOK"}, body: "\nif redis.call(\"GET\", KEYS[1]) == ARGV[1] then\n  return redis.call(\"DEL\", KEYS[1])\nelse\n  return 0\nend\n"},
	{name: "rslock extend", keys: []string{"$K"}, argv: []string{"$TOK", "$TTL"}, body: "\nif redis.call(\"get\", KEYS[1]) ~= ARGV[1] then\n  return 0\nelse\n  if redis.call(\"set\", KEYS[1], ARGV[1], \"PX\", ARGV[2]) ~= nil then\n    return 1\n  else\n    return 0\n  end\nend\n"},
}

// TestOtherLibraryScriptsMatchRedis runs every libScripts entry in each
// state of its lock, in RESP2 and RESP3.
func TestOtherLibraryScriptsMatchRedis(t *testing.T) {
	t.Parallel()
	e := setup(t)
	single := redisproc.ForTest(t, 1)[0]
	prefix := prefixOf(t)
	n := 0
	for _, proto := range []string{"2", "3"} {
		direct, through := dialRaw(t, single.Addr), dialRaw(t, e.addr)
		if proto == "3" {
			direct.do("HELLO", "3")
			through.do("HELLO", "3")
		}
		for _, s := range libScripts {
			for _, state := range []string{"", "tok", "other"} {
				n++
				what := fmt.Sprintf("RESP%s %s, lock %q", proto, s.name, state)
				key := fmt.Sprintf("%scase%d:k", prefix, n)
				setState(t, e, single, []string{key}, []string{state})
				keys := make([]string, len(s.keys))
				for i, k := range s.keys {
					keys[i] = strings.ReplaceAll(k, "$K", key)
				}
				argv := make([]string, len(s.argv))
				for i, a := range s.argv {
					argv[i] = strings.NewReplacer("$TOK", "tok", "$TTL", "3000").Replace(a)
				}
				cmd := append(append([]string{"EVAL", s.body, strconv.Itoa(len(keys))}, keys...), argv...)
				want, got := direct.do(cmd...), through.do(cmd...)
				if err := sameLibReply(s, want, got); err != nil {
					t.Errorf("%s: %v", what, err)
				}
				if err := sameState(t, e, single, key, false); err != nil {
					t.Errorf("%s: after it, %v", what, err)
				}
			}
		}
	}
	for i := range e.masters {
		for _, ks := range e.keys(t, prefix) {
			if len(ks) > 0 {
				e.do(t, i, append([]string{"DEL"}, ks...)...)
			}
		}
	}
	must(t, e.checkKeys(t, prefix))
}

// sameLibReply: the very bytes, but a remaining PTTL may be up to 250 ms
// lower through lockproxy (the drift), a TTL in seconds one lower (read a
// moment later, or rounded from a master's lower PTTL).
func sameLibReply(s libScript, want, got string) error {
	if got == want {
		return nil
	}
	if (s.remaining || s.secondsTTL) && strings.HasPrefix(want, ":") && strings.HasPrefix(got, ":") {
		w, err1 := strconv.Atoi(strings.TrimSpace(want[1:]))
		g, err2 := strconv.Atoi(strings.TrimSpace(got[1:]))
		slack := 1
		if s.remaining {
			slack = 250
		}
		if err1 == nil && err2 == nil && g <= w && g >= w-slack && (g > 0 || w <= 0) {
			return nil
		}
	}
	return fmt.Errorf("lockproxy answered %q, Redis %q", got, want)
}
