package quorum

import (
	"sort"
	"strconv"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// Reads of one field of a hash lock: HGET and HEXISTS, which Redisson's
// RLock sends as they are (getHoldCount, isHeldByCurrentThread: the latter
// guards many an unlock in a finally block). Each master answers a [value,
// pttl] pair, as for GET, and the value a quorum holds is the answer.

var (
	// hashGetScript reads field ARGV[1] of hash KEYS[1]: {value, pttl},
	// {nil, -2} when the key is missing, Redis's WRONGTYPE error for a key
	// that is not a hash.
	hashGetScript = newScript(`local t = redis.call("TYPE", KEYS[1]).ok
if t == "none" then return {false, -2} end
if t ~= "hash" then return redis.error_reply("WRONGTYPE Operation against a key holding the wrong kind of value") end
return {redis.call("HGET", KEYS[1], ARGV[1]), redis.call("PTTL", KEYS[1])}`)
	// hashExistsScript is hashGetScript's HEXISTS: the value is "1" where
	// the field exists, whatever it holds, so that a quorum holding the
	// field with different counts is a quorum all the same.
	hashExistsScript = newScript(`local t = redis.call("TYPE", KEYS[1]).ok
if t == "none" then return {false, -2} end
if t ~= "hash" then return redis.error_reply("WRONGTYPE Operation against a key holding the wrong kind of value") end
if redis.call("HEXISTS", KEYS[1], ARGV[1]) == 1 then return {"1", redis.call("PTTL", KEYS[1])} end
return {false, redis.call("PTTL", KEYS[1])}`)
)

// HashRead kinds.
const (
	hashGet    uint8 = iota + 1 // HGET: the value a quorum holds; of counts, the Q-th largest
	hashExists                  // HEXISTS: "1" when a quorum holds the field, else nil
)

// HGet reads field of hash key: the value at least Q masters hold, else,
// where at least Q hold an integer (a re-entrant lock's count, which
// differs between masters that missed a re-entry or a release), the Q-th
// largest (a quorum holds at least that), else nil.
func (e *Engine) HGet(key, field []byte, t0 int64) *Request {
	return &Request{kind: Read, agg: AggValue, nkeys: 1, Key: string(key), hashRead: hashGet,
		cmd: AppendEvalSHA(nil, hashGetScript.SHA1, [][]byte{key}, [][]byte{field}), t0: t0}
}

// HExists reads whether field of hash key exists: the reply is "1" when at
// least Q masters hold it, else nil.
func (e *Engine) HExists(key, field []byte, t0 int64) *Request {
	return &Request{kind: Read, agg: AggValue, nkeys: 1, Key: string(key), hashRead: hashExists,
		cmd: AppendEvalSHA(nil, hashExistsScript.SHA1, [][]byte{key}, [][]byte{field}), t0: t0}
}

// hashCount decides an HGET no value of which a quorum holds, once every
// master answered or the deadline passed: the Q-th largest integer, where
// at least Q masters hold one. r.mu is held.
func (r *Request) hashCount(q int32) bool {
	var counts []int64
	for i := 0; i < r.e.n; i++ {
		if v, ok := r.valueOf(i); ok {
			if n, err := strconv.ParseInt(string(v.Str), 10, 64); err == nil {
				counts = append(counts, n)
			}
		}
	}
	if len(counts) < int(q) {
		return false
	}
	sort.Slice(counts, func(i, j int) bool { return counts[i] > counts[j] })
	r.reply = resp.Reply{Type: resp.Bulk, Str: strconv.AppendInt(nil, counts[q-1], 10)}
	return true
}
