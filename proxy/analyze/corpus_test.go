package analyze

import (
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// corpusWant is what the analyzer must infer for one corpus script:
// Semantics.String(), the other TTLs, the publications, and, for a script
// it refuses, the refusal's text.
type corpusWant struct {
	sem     string
	other   []string // OtherTTLs, as TTL.String()
	publish []string // "cmd channel message", cmd "ARGV[n]" when taken from an argument
	refused string
	min     string // "MinKeys/MinArgs", checked when set
	// publishOnNo: the publications are made by calls that answer no
	// too (an unlock that publishes where there is no lock).
	publishOnNo bool
}

// corpus is the expectations table. For the scripts catalogued today
// (proxy/catalog/catalog_builtins.go) it is the catalog's behaviour, written in the
// analyzer's terms: YesOne/YesTrue is "integer 1", YesOK `status "OK"`,
// YesNumKeys "integer = #KEYS", YesNonNegative "integer >= 0", YesZero
// "integer 0"; TTLArg n is ARGV[n] with its unit; NoReply is no=; TokenArg
// and NoIsNoop are the undo; CombineQthTTL is reply-is-ttl; redis-py
// extend's RunAs (the capped script) is "+remaining", the reason the
// catalog caps it. Two catalog kinds are finer than behaviour can tell:
// bsm/redislock obtain (catalog Acquire) and redsync touchWithSetNX
// (catalog Extend) do the same thing, take a free lock and re-set the TTL
// of the caller's own, and both are acquire-or-extend here; the catalog's
// kind is the undo policy the engine picks for each. rueidislock's fcqms
// and fcqat (catalog Acquire) are force acquires.
var corpus = map[string]corpusWant{
	// bsm/redislock v0.9.4 Obtain: catalog Acquire, YesOK, TTLArg 3 ms, TokenArg 1, NoIsNoop, NoReply nil.
	"bsm-redislock-v0.9.4_obtain": {sem: `acquire-or-extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[3] ms yes=status "OK" no=nil undo=del-if-value(ARGV[1]) no-is-noop`},
	// Read, YesNonNegative, CombineQthTTL, NoReply -3.
	"bsm-redislock_pttl": {sem: `read string keys=KEYS[1] token=ARGV[1] yes=integer >= 0 no=:-3 reply-is-ttl`},
	// Extend, YesOne, TTLArg 2 ms, NoReply 0.
	"bsm-redislock_refresh": {sem: `extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=integer 1 no=:0`},
	// Release, YesOne, NoReply 0.
	"bsm-redislock_release":       {sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=:0`},
	"ioredis-lock_delifequal":     {sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=:0`},
	"ioredis-lock_pexpireifequal": {sem: `extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=integer 1 no=:0`},
	// Acquire, YesOK, TTLArg 2 ms, TokenArg 1, NoIsNoop, NoReply nil.
	"node-redlock-v3_acquire": {sem: `acquire string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=status "OK" no=nil undo=del-if-value(ARGV[1]) no-is-noop`},
	"node-redlock-v3_extend":  {sem: `extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=integer 1 no=:0`},
	"node-redlock-v3_release": {sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=:0`},
	// Acquire, YesNumKeys, TTLArg 2 ms, TokenArg 1, NoIsNoop, NoReply 0: every KEYS is a lock key.
	"node-redlock-v4_acquire": {sem: `acquire string keys=KEYS[1].. token=ARGV[1] ttl=ARGV[2] ms yes=integer = #KEYS no=:0 undo=del-if-value(ARGV[1]) no-is-noop`, min: "1/2"},
	"node-redlock-v4_extend":  {sem: `extend string keys=KEYS[1].. token=ARGV[1] ttl=ARGV[2] ms yes=integer = #KEYS no=:0`},
	"node-redlock-v4_release": {sem: `release string keys=KEYS[1].. token=ARGV[1] yes=integer = #KEYS no=:0`},
	"node-redlock-v5_acquire": {sem: `acquire string keys=KEYS[1].. token=ARGV[1] ttl=ARGV[2] ms yes=integer = #KEYS no=:0 undo=del-if-value(ARGV[1]) no-is-noop`},
	"node-redlock-v5_extend":  {sem: `extend string keys=KEYS[1].. token=ARGV[1] ttl=ARGV[2] ms yes=integer = #KEYS no=:0`},
	"node-redlock-v5_release": {sem: `release string keys=KEYS[1].. token=ARGV[1] yes=integer = #KEYS no=:0`},
	// Extend, YesZero, TTLArg 2 s, NoReply 1.
	"python-redis-lock_extend": {sem: `extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] s yes=integer 0 no=:1`},
	// Release, YesOne, NoReply 0: deletes the lock whoever holds it, and
	// re-creates the signal list KEYS[2] with PEXPIRE ARGV[2].
	"python-redis-lock_reset": {sem: `release force any keys=KEYS[1] tokenless yes=integer 1 no=:0`,
		other: []string{"KEYS[2] expires after ARGV[2] ms"}},
	// Release, YesZero, NoReply 1; signals waiters on KEYS[2].
	"python-redis-lock_unlock": {sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 0 no=:1`,
		other: []string{"KEYS[2] expires after ARGV[2] ms"}},
	// Extend, YesOne, TTLArg 2 ms, RunAs the capped script: ARGV[3] == "0"
	// adds the remaining TTL.
	"redis-py_extend":    {sem: `extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms+remaining yes=integer 1 no=:0`},
	"redis-py_reacquire": {sem: `extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=integer 1 no=:0`},
	"redis-py_release":   {sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=:0`, min: "1/1"},
	// Not catalogued. A re-entrant hash lock: the holder's field ARGV[2]
	// counts re-entries; yes is nil, a taken lock answers its PTTL.
	"redisson-3.17_tryLockInner": {sem: `reentrant-acquire hash keys=KEYS[1] token=ARGV[2] ttl=ARGV[1] ms yes=nil no=:0 (PTTL at 0) undo=hash-decr(ARGV[2]) no-is-noop`},
	"redisson-4.x_tryLockInner":  {sem: `reentrant-acquire hash keys=KEYS[1] token=ARGV[2] ttl=ARGV[1] ms yes=nil no=:0 (PTTL at 0) undo=hash-decr(ARGV[2]) no-is-noop`},
	// 1 when the last re-entry is released (and KEYS[2] is published to),
	// 0 when one of several is, with the lock's TTL re-set from ARGV[2];
	// nil when the caller does not hold it.
	"redisson-3.17_unlockInner": {sem: `reentrant-release hash keys=KEYS[1] token=ARGV[3] yes=integer >= 0 no=nil deleted=:1`,
		other: []string{"KEYS[1] expires after ARGV[2] ms"}, publish: []string{"publish KEYS[2] ARGV[1]"}},
	"redisson-3.23_unlockInner": {sem: `reentrant-release hash keys=KEYS[1] token=ARGV[3] yes=integer >= 0 no=nil deleted=:1`,
		other: []string{"KEYS[1] expires after ARGV[2] ms"}, publish: []string{"ARGV[4] KEYS[2] ARGV[1]"}},
	// KEYS[3] is an idempotency latch: set to the result with PX ARGV[5].
	"redisson-4.x_unlockInner": {sem: `reentrant-release hash keys=KEYS[1] token=ARGV[3] yes=integer >= 0 no=nil deleted=:1`,
		other: []string{"KEYS[3] expires after ARGV[5] ms", "KEYS[1] expires after ARGV[2] ms"}, publish: []string{"ARGV[4] KEYS[2] ARGV[1]"}, min: "3/5"},
	"redisson-3.40_renewExpiration": {sem: `extend hash keys=KEYS[1] token=ARGV[2] ttl=ARGV[1] ms yes=integer 1 no=:0`},
	"redisson-4.x_forceUnlock": {sem: `release force any keys=KEYS[1] tokenless yes=integer 1 no=:0`,
		publish: []string{"ARGV[2] KEYS[2] ARGV[1]"}},
	// PEXPIRE of every KEYS, whoever holds them, with the option ARGV[2]:
	// with the probes' option the command fails, with "" the script
	// extends locks it does not hold. Refused either way.
	"redisson-4.x_expire-multilock": {refused: "every probe where KEYS[1] is held ends in an error (ERR Unsupported option ARGV[2]): no behaviour to classify"},
	// Renews many independent locks at once, each with its own token
	// (ARGV[i+1]) and its own verdict in an array: no single vote, but
	// with one key an extend, and with n keys n of them side by side: a
	// batch, run as one quorum extend per key (batch.go).
	"redisson-4.x_renewChunk": {sem: `extend hash keys=KEYS[1] token=ARGV[2] ttl=ARGV[1] ms yes=array whose first element is integer 1 no=[:0] batch(shared=1 per-key=1 max=128)`, min: "1/2"},
	// Release, YesOne, NoReply 0 (redsync v4.18's -1 for a missing key is a no too).
	"redsync-v4.18_delete": {sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=:0`},
	"redsync-v4.18_touch":  {sem: `extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=integer 1 no=:0`},
	// Catalog Extend, YesOne, TTLArg 2 ms, NoReply 0 (see above).
	"redsync-v4.18_touchWithSetNX": {sem: `acquire-or-extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=integer 1 no=:0 undo=del-if-value(ARGV[1]) no-is-noop`},
	"redsync-v4.8_delete":          {sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=:0`},
	"redsync-v4.8_touch":           {sem: `extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=integer 1 no=:0`},
	// Acquire, YesOK, TTLArg 2 (UnixMillis for the *at variants), TokenArg 1, NoIsNoop, NoReply nil.
	"rueidislock_acqat":  {sem: `acquire string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] unix_ms yes=status "OK" no=nil undo=del-if-value(ARGV[1]) no-is-noop`},
	"rueidislock_acqms":  {sem: `acquire string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=status "OK" no=nil undo=del-if-value(ARGV[1]) no-is-noop`},
	"rueidislock_delkey": {sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=:0`},
	"rueidislock_extend": {sem: `extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] unix_ms yes=integer 1 no=:0`},
	"rueidislock_fcqat":  {sem: `acquire force string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] unix_ms yes=status "OK" no=nil undo=del-if-value(ARGV[1]) no-is-noop`},
	"rueidislock_fcqms":  {sem: `acquire force string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=status "OK" no=nil undo=del-if-value(ARGV[1]) no-is-noop`},
	// Not catalogued. obtain takes a free lock or re-sets the caller's
	// (true, false as nil); unlock deletes the caller's, the pubsub ones
	// publishing KEYS[1] on channel ARGV[2].
	"spring-int-5.5_obtain":               {sem: `acquire-or-extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=integer 1 no=nil undo=del-if-value(ARGV[1]) no-is-noop`},
	"spring-int-6.5_obtain":               {sem: `acquire-or-extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=integer 1 no=nil undo=del-if-value(ARGV[1]) no-is-noop`},
	"spring-int-7_obtain":                 {sem: `acquire-or-extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=integer 1 no=nil undo=del-if-value(ARGV[1]) no-is-noop`},
	"spring-int-6.5_pubsub_delete_unlock": {sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=nil`, publish: []string{"publish ARGV[2] KEYS[1]"}},
	"spring-int-7_pubsub_unlink_unlock":   {sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=nil`, publish: []string{"publish ARGV[2] KEYS[1]"}},
	"spring-int-6.5_spin_delete_unlock":   {sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=nil`},
	"spring-int-7_spin_unlink_unlock":     {sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=nil`},
	"spring-int-7_renew":                  {sem: `extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=integer 1 no=nil`},
}

func TestCorpus(t *testing.T) {
	manifest := map[string]struct {
		Bytes int    `json:"bytes"`
		SHA1  string `json:"sha1"`
	}{}
	raw, err := os.ReadFile("testdata/corpus/MANIFEST.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("testdata/corpus/*.lua")
	if len(files) != len(manifest) || len(files) != len(corpus) {
		t.Fatalf("%d scripts, %d in MANIFEST.json, %d expectations", len(files), len(manifest), len(corpus))
	}
	sort.Strings(files)
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".lua")
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha1.Sum(body)
			if m := manifest[name]; hex.EncodeToString(sum[:]) != m.SHA1 || len(body) != m.Bytes {
				t.Fatalf("the copy differs from MANIFEST.json (sha1 %x, %d bytes)", sum, len(body))
			}
			want, ok := corpus[name]
			if !ok {
				t.Fatal("no expectation")
			}
			checkSemantics(t, body, want)
		})
	}
}

// checkSemantics analyzes body and compares with want.
func checkSemantics(t *testing.T, body []byte, want corpusWant) *Semantics {
	t.Helper()
	sem, err := Analyze(body, Options{})
	if want.refused != "" {
		var r *Refusal
		if !errors.As(err, &r) || !strings.Contains(err.Error(), want.refused) {
			t.Fatalf("got %v, %v; want the refusal %q", sem, err, want.refused)
		}
		return nil
	}
	if err != nil {
		t.Fatalf("refused: %v", err)
	}
	if got := sem.String(); got != want.sem {
		t.Errorf("got  %s\nwant %s", got, want.sem)
	}
	var other, pubs []string
	for _, o := range sem.OtherTTLs {
		other = append(other, o.String())
	}
	for _, p := range sem.Publishes {
		cmd := p.Command
		if cmd == "" {
			cmd = p.CommandArg.String()
		}
		pubs = append(pubs, cmd+" "+p.Channel.String()+" "+p.Message.String())
		if !p.OnYes || p.OnNo != want.publishOnNo {
			t.Errorf("publication %s: on yes %v, on no %v; want on yes, and on no %v", pubs[len(pubs)-1], p.OnYes, p.OnNo, want.publishOnNo)
		}
	}
	if min := fmt.Sprintf("%d/%d", sem.MinKeys, sem.MinArgs); want.min != "" && min != want.min {
		t.Errorf("MinKeys/MinArgs %s, want %s", min, want.min)
	}
	if strings.Join(other, "; ") != strings.Join(want.other, "; ") {
		t.Errorf("other TTLs %q, want %q", other, want.other)
	}
	if strings.Join(pubs, "; ") != strings.Join(want.publish, "; ") {
		t.Errorf("publications %q, want %q", pubs, want.publish)
	}
	// The yes rule never accepts the reply the client gets on a lost vote
	// (but for a release that answers the same either way).
	if sem.Yes.Match(&sem.No.Reply, sem.MinKeys) && !sem.SameReply {
		t.Errorf("the no reply %s is a yes", sem.No)
	}
	return sem
}
