package analyze

import (
	"strings"
	"testing"
)

// batchScripts are scripts over several locks at once, each key on its
// own (accepted as batches, with their layout), and scripts that look so
// but are not: each refused one is a negative control of the equivalence
// check (batch.go), which must tell it from a batch.
var batchScripts = []struct {
	name string
	body string
	want string // Semantics.String(), or "refused: <part of the reason>"
}{
	{name: "token per key, shared TTL (Redisson 4 renewChunk)", body: `local result = {} for i = 1, #KEYS, 1 do if (redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1) then redis.call('pexpire', KEYS[i], ARGV[1]); table.insert(result, 1); else table.insert(result, 0); end; end; return result;`,
		want: `extend hash keys=KEYS[1] token=ARGV[2] ttl=ARGV[1] ms yes=array whose first element is integer 1 no=[:0] batch(shared=1 per-key=1 max=128)`},
	{name: "token and TTL per key, grouped", body: `
local r = {}
for i = 1, #KEYS do
  if redis.call('get', KEYS[i]) == ARGV[2*i-1] then
    redis.call('pexpire', KEYS[i], ARGV[2*i])
    r[#r+1] = 1
  else
    r[#r+1] = 0
  end
end
return r`, want: `extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=array whose first element is integer 1 no=[:0] batch(shared=0 per-key=2 max=128)`},
	// A release or acquire split into parts would still run the other
	// parts after one failed, where one Redis stops (review).
	{name: "token per key, releases", body: `
local r = {}
local n = #KEYS
for i = 1, n do
  if redis.call('get', KEYS[i]) == ARGV[i] then
    r[i] = redis.call('del', KEYS[i])
  else
    r[i] = 0
  end
end
return r`, want: "refused: lockproxy splits renewals and reads only"},
	{name: "token and TTL per key, in columns", body: `
local r = {}
local n = #KEYS
for i = 1, n do
  if redis.call('get', KEYS[i]) == ARGV[i] then
    redis.call('pexpire', KEYS[i], ARGV[n + i])
    r[i] = 1
  else
    r[i] = 0
  end
end
return r`, want: `extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=array whose first element is integer 1 no=[:0] batch(shared=0 per-key=2 columns max=128)`},
	{name: "one token for every key", body: `
local r = {}
for i = 1, #KEYS do
  if redis.call('get', KEYS[i]) == ARGV[1] then
    redis.call('pexpire', KEYS[i], ARGV[2])
    table.insert(r, 1)
  else
    table.insert(r, 0)
  end
end
return r`, want: `extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=array whose first element is integer 1 no=[:0] batch(shared=2 per-key=0 max=128)`},

	// Negative controls.
	{name: "stops at the first key not held", body: `
local result = {}
for i = 1, #KEYS do
  if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 0 then return result end
  redis.call('pexpire', KEYS[i], ARGV[1])
  table.insert(result, 1)
end
return result`, want: "refused: one lock per key"},
	{name: "answers how many it renewed", body: `
local n = 0
for i = 1, #KEYS do
  if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1])
    n = n + 1
  end
end
return n`, want: "refused: "},
	{name: "numbers its answers across keys", body: `
local result, n = {}, 0
for i = 1, #KEYS do
  if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1])
    n = n + 1
    table.insert(result, n)
  else
    table.insert(result, 0)
  end
end
return result`, want: "refused: one lock per key"},
	{name: "checks the first key on every key's turn", body: `
local result = {}
for i = 1, #KEYS do
  if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 and redis.call('exists', KEYS[1]) == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1])
    table.insert(result, 1)
  else
    table.insert(result, 0)
  end
end
return result`, want: "refused: one lock per key"},
	{name: "all or nothing", body: `
local result = {}
for i = 1, #KEYS do
  if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 0 then
    for j = 1, #KEYS do table.insert(result, 0) end
    return result
  end
end
for i = 1, #KEYS do
  redis.call('pexpire', KEYS[i], ARGV[1])
  table.insert(result, 1)
end
return result`, want: "refused: one lock per key"},
	{name: "deletes every lock past 100 keys", body: `
local result = {}
for i = 1, #KEYS do
  if #KEYS > 100 then redis.call('del', KEYS[i]) end
  if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1])
    table.insert(result, 1)
  else
    table.insert(result, 0)
  end
end
return result`, want: "refused: one lock per key"},
	// Found by review (helper-49): a script that pairs keys with other
	// tokens only for tokens shaped like Redisson's (uuid:threadId); one
	// that honours the previous key's token from the third key on; an
	// acquire batch; a threshold that is no constant of the script.
	{name: "swaps tokens shaped like uuid:threadId", body: `
local r = {}
local n = #KEYS
for i = 1, n do
  local tok = ARGV[i+1]
  if string.find(tok, ':', 1, true) then tok = ARGV[n + 2 - i] end
  if redis.call('hexists', KEYS[i], tok) == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1]); r[#r+1] = 1
  else r[#r+1] = 0 end
end
return r`, want: "refused: one lock per key"},
	{name: "honours the previous key's token from the third key", body: `
local r = {}
for i = 1, #KEYS do
  local ok = 0
  for _, f in ipairs(redis.call('hkeys', KEYS[i])) do
    if f == ARGV[i+1] or (i > 2 and f == ARGV[i]) then ok = 1 end
  end
  if ok == 1 then redis.call('pexpire', KEYS[i], ARGV[1]) end
  r[#r+1] = ok
end
return r`, want: "refused: "},
	{name: "acquires one lock per key", body: `
local r = {}
for i = 1, #KEYS do
  if (redis.call('exists', KEYS[i]) == 0) or (redis.call('hexists', KEYS[i], ARGV[i+1]) == 1) then
    redis.call('hincrby', KEYS[i], ARGV[i+1], 1); redis.call('pexpire', KEYS[i], ARGV[1]); r[#r+1] = 1
  else r[#r+1] = 0 end
end
return r`, want: "refused: lockproxy splits renewals and reads only"},
	{name: "deletes every lock from 100 to 127 keys", body: `
local r = {}
for i = 1, #KEYS do
  if #KEYS >= 10*10 and #KEYS < 2^7 then redis.call('del', KEYS[i]) end
  if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1]); table.insert(r, 1)
  else table.insert(r, 0) end
end
return r`, want: "refused: one lock per key"},
	{name: "renews the next key with this key's token", body: `
local result = {}
for i = 1, #KEYS do
  local k = KEYS[i]
  if i > 1 and ARGV[i + 1] ~= ARGV[i] then k = KEYS[i - 1] end
  if redis.call('hexists', k, ARGV[i + 1]) == 1 then
    redis.call('pexpire', k, ARGV[1])
    table.insert(result, 1)
  else
    table.insert(result, 0)
  end
end
return result`, want: "refused: one lock per key"},
}

func TestBatchScripts(t *testing.T) {
	for _, tc := range batchScripts {
		t.Run(tc.name, func(t *testing.T) {
			sem, err := Analyze([]byte(tc.body), Options{})
			if want, ok := strings.CutPrefix(tc.want, "refused: "); ok {
				if err == nil {
					t.Fatalf("accepted as %s; want refused (%s)", sem, want)
				}
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("refused with %v; want the reason to say %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if got := sem.String(); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestBatchSplit(t *testing.T) {
	argv := [][]byte{[]byte("ttl"), []byte("t1"), []byte("x1"), []byte("t2"), []byte("x2")}
	b := &Batch{Shared: 1, Width: 2}
	if got := string(b.Split(argv, 2, 1, nil)[1]) + "," + string(b.Split(argv, 2, 1, nil)[2]); got != "t2,x2" {
		t.Fatalf("grouped: key 2 gets %s", got)
	}
	b.Columns = true
	if got := string(b.Split(argv, 2, 1, nil)[1]) + "," + string(b.Split(argv, 2, 1, nil)[2]); got != "x1,x2" {
		t.Fatalf("columns: key 2 gets %s", got)
	}
	if b.NeedArgs(2) != 5 {
		t.Fatalf("NeedArgs(2) = %d", b.NeedArgs(2))
	}
}
