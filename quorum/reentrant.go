package quorum

import (
	"cmp"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/batching"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// Re-entrant hash locks (Redisson's RLock and its kind): the lock is a hash
// whose field, the holder's token, counts how many times the holder has
// taken it; a release takes 1 off and deletes the lock at 0. The count is
// each master's own, and it is what decides when the lock goes: a re-entry
// that finds the key gone on one master (it was away at the first
// acquisition) takes it there with a count of 1 where the others go to 2,
// and the holder's first of two releases then deletes the lock on that
// master and on any other where it counted low. Counted as plain yes votes,
// such re-entries left a majority whose counts were too low, one release
// removed the lock from it, and another client was granted it while the
// holder was still inside its outer critical section (found by review).
//
// So a re-entrant acquisition keeps this invariant: a quorum of masters
// holds a count of at least the holder's depth (acquisitions not yet
// released). Each master runs the client's script wrapped so that it also
// answers the token's count after it (WrapReentrant). With R the masters
// that answered, any quorum H of holders with counts >= depth shares at
// least k = |R| + Q - N masters with R, so the k-th largest count before
// the script among R, D, is at least the depth. The re-entry is granted
// only if Q masters that said yes held at least D before it: they hold at
// least D+1 now, at least the new depth. A first acquisition (every count
// 0) is unaffected; a re-entry that cannot show it is refused and undone
// (1 taken off where it counted), and succeeds once enough masters answer:
// with all answering, D is the Q-th largest count and the Q masters that
// hold at least it all say yes. Counts a master holds above the depth (a
// release it missed) only keep the lock until its TTL: the safe side.
// Releases keep the invariant by themselves: every holder takes 1 off.

// reentState is a re-entrant acquisition's counts: count[i] is the token's
// count on master i after the script, -1 when unknown.
type reentState struct {
	count  [MaxMasters]int64
	extend bool  // a renewal: the script leaves the count as it was
	target int64 // the level a raise (contRaise) or a level-up writes
	// A granted acquisition's level-up (levelup.go): key the hash (it
	// aliases the request's command; nil when not one key), leveled the
	// masters already raised (by contRaise).
	key     []byte
	leveled uint16
}

// WrapReentrant returns the script the masters run for a re-entrant
// acquisition's body: the client's body, run as a function so that its
// reply is kept as it is, then the token's count in the lock's hash,
// answered as {reply, count} (the reply's nil as false, so that the array
// keeps both). key and token say where the lock's key and the token are.
func WrapReentrant(body string, key, token Arg) (string, error) {
	if !key.Keys || key.Index < 1 || token.Index < 1 {
		return "", fmt.Errorf("a re-entrant lock whose key is not in KEYS or that has no token argument")
	}
	return wrap(body, fmt.Sprintf(`local lockproxy_count = redis.pcall('HGET', %s, %s)
if lockproxy_count == nil or type(lockproxy_count) == 'table' then lockproxy_count = false end
if lockproxy_reply == nil then lockproxy_reply = false end
return {lockproxy_reply, lockproxy_count}`, key.lua(), token.lua()))
}

// WrapZeroPTTL returns the script the masters run for an acquire whose yes
// reply is 0 and whose no reply is the holder's PTTL: a holder in its last
// millisecond (PTTL 0) is answered 1, so that no master's refusal reads as
// a yes (a vote for a lock the master did not write). After a real yes the
// key's PTTL is the lock's TTL, more than the drift allowance.
func WrapZeroPTTL(body string, key Arg) (string, error) {
	if key.Index < 1 {
		return "", fmt.Errorf("an acquire whose yes is 0 and whose lock is not one key")
	}
	return wrap(body, fmt.Sprintf(`if lockproxy_reply == 0 and redis.call('PTTL', %s) <= 0 then return 1 end
return lockproxy_reply`, key.lua()))
}

// WrapNoShorten returns the script the masters run for an extend's body
// (an extend, or an acquire-or-extend): the client's body between a read
// of each lock key's PTTL and a check that puts back any PTTL the body
// lowered. An extend must never shorten a lock on a master: one that
// fails (NOQUORUM, no validity left), or that a master applies late, is
// no release, and its holder keeps its earlier validity; with the shorter
// TTL written on the masters anyway, another client was granted the lock
// meanwhile (review, helper-55). A granted shorter extend gives its
// holder the shorter validity, which the key then outlives: safe. keys
// are the lock's keys; each, with eachKey, every KEYS.
func WrapNoShorten(body string, keys []Arg, each bool) (string, error) {
	list := "KEYS"
	if !each {
		if len(keys) == 0 {
			return "", fmt.Errorf("an extend with no lock key")
		}
		var b strings.Builder
		b.WriteString("{")
		for i, k := range keys {
			if k.Index < 1 {
				return "", fmt.Errorf("an extend whose lock key is not an argument")
			}
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(k.lua())
		}
		b.WriteString("}")
		list = b.String()
	}
	return wrap2(body, "local lockproxy_keys = "+list+`
local lockproxy_before = {}
for i = 1, #lockproxy_keys do lockproxy_before[i] = redis.call('PTTL', lockproxy_keys[i]) end
`, `for i = 1, #lockproxy_keys do
  local b = lockproxy_before[i]
  if b > 0 then
    local n = redis.call('PTTL', lockproxy_keys[i])
    if n >= 0 and n < b then redis.call('PEXPIRE', lockproxy_keys[i], b) end
  end
end
return lockproxy_reply`)
}

// WrapAbsentYes returns the script the masters run for a release whose
// reply where there is no lock is rep, its reply where it deleted the
// lock (ScriptOp.AbsentYes): where every lock key is absent it answers rep
// and runs nothing of the body. Redisson's unlock before 3.10.6 also
// publishes its release message there; a master that lacks a lock a
// quorum holds (at most N-Q of them) then published one at the holder's
// unlock at depth 2, which subscribers heard while the lock was still
// held, and whose copy from that master took the place of the real
// release message's, lost when the master was away at the last unlock
// (found by review). Where every master lacks the lock no message is
// sent: a waiter then retries when its wait for the lock's TTL ends, as
// after an expiry. keys are the lock's keys; each, with eachKey, every
// KEYS.
func WrapAbsentYes(body string, keys []Arg, each bool, rep resp.Reply) (string, error) {
	var ret string
	switch k := rkOf(&rep); k {
	case rkOK:
		ret = "redis.status_reply('OK')"
	case rkNil:
		ret = "false"
	case rkZero, rkOne:
		ret = strconv.Itoa(int(rep.Int))
	default:
		return "", fmt.Errorf("a release whose reply where there is no lock is %s, not :1, :0, +OK or nil", rep)
	}
	cond := "#KEYS > 0 and redis.call('EXISTS', unpack(KEYS)) == 0"
	if !each {
		if len(keys) == 0 {
			return "", fmt.Errorf("a release with no lock key")
		}
		var b strings.Builder
		for i, k := range keys {
			if k.Index < 1 {
				return "", fmt.Errorf("a release whose lock key is not an argument")
			}
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(k.lua())
		}
		cond = "redis.call('EXISTS', " + b.String() + ") == 0"
	}
	return wrap2(body, "if "+cond+" then return "+ret+" end\n", "return lockproxy_reply")
}

// wrap runs body as a function whose reply is lockproxy_reply, then tail.
// A shebang line stays first.
func wrap(body, tail string) (string, error) { return wrap2(body, "", tail) }

// ScriptSHA1 is the sha1 of a script body, as EVALSHA names it.
func ScriptSHA1(body string) string {
	sum := sha1.Sum([]byte(body))
	return hex.EncodeToString(sum[:])
}

// lua is a's Lua expression: KEYS[i] or ARGV[i].
func (a Arg) lua() string {
	if a.Keys {
		return fmt.Sprintf("KEYS[%d]", a.Index)
	}
	return fmt.Sprintf("ARGV[%d]", a.Index)
}

// unwrapReentrant takes the count out of master's {reply, count} answer
// and leaves the script's own reply in rep. An answer of another shape
// (an error of the script or of the master) is left as it is, its count
// unknown. r.mu is held.
func (r *Request) unwrapReentrant(master int, rep *resp.Reply) {
	r.reent.count[master] = -1
	if rep.Type != resp.Array || len(rep.Elems) != 2 {
		return
	}
	switch c := rep.Elems[1]; c.Type {
	case resp.Nil:
		r.reent.count[master] = 0
	case resp.Bulk:
		if v, err := strconv.ParseInt(string(c.Str), 10, 64); err == nil && v >= 0 {
			r.reent.count[master] = v
		}
	case resp.Integer:
		if c.Int >= 0 {
			r.reent.count[master] = c.Int
		}
	}
	*rep = rep.Elems[0]
}

// raiseScript raises the count of token ARGV[1] in hash KEYS[1] to ARGV[2]
// where the token holds a lower one, and answers 1 when the token now holds
// at least ARGV[2], else 0. A higher count is left as it is.
var raiseScript = newScript(`if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
local c = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if not c then return 0 end
if c < tonumber(ARGV[2]) then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return 1`)

// raiseCounts is what a re-entrant request whose yes votes reached a
// quorum, but too few of them at D, does once every master answered:
// counts alone cannot tell a master that missed a release (above the
// depth) from one that holds the depth, so instead of refusing (which,
// with a master down, refused the holder until it was back), it raises
// the count to the level the invariant needs on every master where the
// token holds it (contRaise), and is granted when a quorum holds that
// level. Raising only keeps a lock longer, until its TTL: the safe side.
// It reports whether it decided (false: it cannot raise, and the vote is
// lost). r.mu is held.
func (r *Request) raiseCounts() bool {
	if r.fence() != nil || r.token == nil || r.Key == "" || r.reentrantD() < 0 {
		return false
	}
	r.success()
	if r.won { // else no validity was left: success answered and undid it
		r.reent.target = r.reentrantLevel()
		r.chain(contRaise)
	}
	return true
}

// raised takes the raise's outcome: granted if a quorum holds the level
// and validity is left, else the lock's no reply and, for an acquisition,
// its undo (1 off each count it added; the raised ones stay above their
// count before, the safe side). r.mu is held.
func (r *Request) raised(err error, won bool) {
	if won {
		if r.TTL == 0 {
			return
		}
		if left := Validity(r.TTL, time.Duration(batching.Now()-r.t0), r.e.cfg.DriftFactor); left > 0 {
			r.validity = left
			r.sendShorten() // granted only now (review, helper-56)
			r.levelUp()     // the masters that answered after the raise went out
			return
		}
	}
	r.reply, r.won = r.lostReply(), false
	if err != nil && !won {
		r.reply, r.err = resp.Reply{}, err
	}
	r.undo()
}

// RaiseScriptSHA1 names the raise in a master's MONITOR output (and lets
// tests find it on the wire).
func RaiseScriptSHA1() string { return raiseScript.SHA1 }

// errNotRenewed is a master left out of a raise: its first-round reply was
// no yes, so the lock's TTL there is not the one the grant counts on.
var errNotRenewed = errors.New("did not take this re-entry or renewal, so its count cannot complete it (it is raised only where the lock's TTL was just set)")

// raiseCommand is the raise of r's token's count in r's key to target.
func (r *Request) raiseCommand(target int64) []byte {
	return AppendEvalSHA(nil, raiseScript.SHA1, [][]byte{[]byte(r.Key)}, [][]byte{r.token, strconv.AppendInt(nil, target, 10)})
}

// reentrantLevel is the count a quorum must hold after r: D + 1 for an
// acquisition, D (at least 1) for a renewal. r.mu is held.
func (r *Request) reentrantLevel() int64 {
	d := r.reentrantD()
	if r.reent.extend {
		return max(d, 1)
	}
	return d + 1
}

// reentrantD is D: the (R+Q-N)-th largest count before the script among
// the R masters that answered; -1 when it cannot be known. A master whose
// count is unknown (it answered an error, NOREPLICAS say) may hold the
// depth, so it ranks above every known count: counted as -1, one such
// master of the quorum at the depth pulled D below it and a re-entry was
// granted with one master at the new depth (found by review). r.mu is
// held.
func (r *Request) reentrantD() int64 {
	var before [MaxMasters]int64
	m := 0 // masters that answered with a known count
	for i := 0; i < r.e.n; i++ {
		if r.state[i] != replied {
			continue
		}
		c := r.reent.count[i]
		if c < 0 || (r.yesAt(i) && c == 0) {
			continue // unknown: above every known count
		}
		if r.yesAt(i) && !r.reent.extend {
			c-- // the script's own increment
		}
		before[m] = c
		m++
	}
	// The (R+Q-N)-th largest of all R is, with the unknown ones first,
	// the (m+Q-N)-th largest known count.
	k := m + r.e.q - r.e.n
	if k < 1 || k > m {
		return -1
	}
	s := before[:m]
	slices.SortFunc(s, func(a, b int64) int { return cmp.Compare(b, a) }) // largest first
	return max(s[k-1], 0)
}

// reentrantYes counts the yes votes of a re-entrant acquisition that keep
// the invariant above: masters that said yes and held at least D before.
// r.mu is held.
func (r *Request) reentrantYes() int32 {
	d := r.reentrantD()
	if d < 0 {
		return 0
	}
	yes := int32(0)
	for i := 0; i < r.e.n; i++ {
		if r.state[i] != replied || !r.yesAt(i) {
			continue
		}
		c, need := r.reent.count[i], d
		if r.reent.extend {
			need = max(d, 1) // a renewal counts only where the holder holds it
		} else {
			c-- // the count before the script's increment
		}
		if r.reent.count[i] > 0 && c >= need {
			yes++
		}
	}
	return yes
}
