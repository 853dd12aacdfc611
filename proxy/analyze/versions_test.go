package analyze

import (
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// redissonVersions is what the analyzer must infer for every distinct lock
// script of Redisson's releases 2.2.4 to 4.7.0 (testdata/redisson, taken
// from each release tag's sources: MANIFEST.json gives the releases and
// files of each). RLock, its spin, fenced and non-re-entrant variants are
// understood; the fair lock and the read-write lock are refused, with the
// reasons below (docs/compat.md, Redisson releases).
var redissonVersions = map[string]corpusWant{
	"tryLockInner-2.2.4":  {sem: `reentrant-acquire hash keys=KEYS[1] token=ARGV[2] ttl=ARGV[1] ms yes=nil no=:0 (PTTL at 0) undo=hash-decr(ARGV[2]) no-is-noop`},
	"tryLockInner-3.12.3": {sem: `reentrant-acquire hash keys=KEYS[1] token=ARGV[2] ttl=ARGV[1] ms yes=nil no=:0 (PTTL at 0) undo=hash-decr(ARGV[2]) no-is-noop`},
	"tryLockInner-3.19":   {sem: `reentrant-acquire hash keys=KEYS[1] token=ARGV[2] ttl=ARGV[1] ms yes=nil no=:0 (PTTL at 0) undo=hash-decr(ARGV[2]) no-is-noop`},
	// Before 3.10.6 an unlock with no lock there publishes and answers 1,
	// as a release of the caller's last count does: that master votes yes
	// (absentAnswersYes).
	"unlockInner-2.2.4": {sem: `reentrant-release hash keys=KEYS[1] token=ARGV[3] yes=integer >= 0 no=nil absent-is-yes deleted=:1`,
		other: []string{"KEYS[1] expires after ARGV[2] ms"}, publish: []string{"publish KEYS[2] ARGV[1]"}, publishOnNo: true},
	"unlockInner-3.10.6": {sem: `reentrant-release hash keys=KEYS[1] token=ARGV[3] yes=integer >= 0 no=nil deleted=:1`,
		other: []string{"KEYS[1] expires after ARGV[2] ms"}, publish: []string{"publish KEYS[2] ARGV[1]"}},
	"unlockInner-3.22": {sem: `reentrant-release hash keys=KEYS[1] token=ARGV[3] yes=integer >= 0 no=nil deleted=:1`,
		other: []string{"KEYS[1] expires after ARGV[2] ms"}, publish: []string{"ARGV[4] KEYS[2] ARGV[1]"}},
	"unlockInner-3.24": {sem: `reentrant-release hash keys=KEYS[1] token=ARGV[3] yes=integer >= 0 no=nil deleted=:1`,
		other: []string{"KEYS[3] expires after ARGV[5] ms", "KEYS[1] expires after ARGV[2] ms"}, publish: []string{"ARGV[4] KEYS[2] ARGV[1]"}},
	"renewExpiration-2.6": {sem: `extend hash keys=KEYS[1] token=ARGV[2] ttl=ARGV[1] ms yes=integer 1 no=:0`},
	"renewChunk-3.44":     {sem: `extend hash keys=KEYS[1] token=ARGV[2] ttl=ARGV[1] ms yes=array whose first element is integer 1 no=[:0] batch(shared=1 per-key=1 max=128)`},
	"forceUnlock-2.2.1": {sem: `release force any keys=KEYS[1] tokenless yes=integer 1 no=:0`,
		publish: []string{"publish KEYS[2] ARGV[1]"}},
	"forceUnlock-3.22": {sem: `release force any keys=KEYS[1] tokenless yes=integer 1 no=:0`,
		publish: []string{"ARGV[2] KEYS[2] ARGV[1]"}},
	"spinlock-unlockInner-3.15": {sem: `reentrant-release hash keys=KEYS[1] token=ARGV[2] yes=integer >= 0 no=nil deleted=:1`,
		other: []string{"KEYS[1] expires after ARGV[1] ms"}},
	"spinlock-unlockInner-3.24": {sem: `reentrant-release hash keys=KEYS[1] token=ARGV[2] yes=integer >= 0 no=nil deleted=:1`,
		other: []string{"KEYS[2] expires after ARGV[3] ms", "KEYS[1] expires after ARGV[1] ms"}},
	"fenced-tryLockInner-3.19":       {sem: `reentrant-acquire hash keys=KEYS[1] token=ARGV[2] ttl=ARGV[1] ms yes=nil no=:0 (PTTL at 0) undo=hash-decr(ARGV[2]) no-is-noop`},
	"fenced-tryLockAndGetToken-3.19": {sem: `reentrant-acquire hash keys=KEYS[1] token=ARGV[2] ttl=ARGV[1] ms yes=array whose first element is integer -1 no=[:0 :-1] (PTTL at 1) undo=hash-decr(ARGV[2]) no-is-noop`},
	// A holder's second lock() answers an error (NON_REENTRANT_REACQUIRE).
	"nonreentrant-tryLockInner-4.4": {sem: `acquire hash keys=KEYS[1] token=ARGV[2] ttl=ARGV[1] ms yes=nil no=:0 (PTTL at 0) undo=hash-decr(ARGV[2]) no-is-noop`},
	// The write lock's acquire is a re-entrant hash lock with a constant
	// "mode" field; its unlock hands the lock to readers ("mode" = read).
	"writelock-tryLockInner-2.10.5": {sem: `reentrant-acquire hash keys=KEYS[1] token=ARGV[2] ttl=ARGV[1] ms+remaining yes=nil no=:0 (PTTL at 0) undo=hash-decr(ARGV[2]) no-is-noop`},
	"writelock-unlockInner-3.44":    {refused: "the behaviour fits no lock class"},
	// Readers keep one timeout key each, named in the script.
	"readlock-tryLockInner-3.11.1": {refused: "does not come verbatim from KEYS or ARGV"},
	"readlock-unlockInner-3.44":    {refused: "the behaviour fits no lock class"},
	// A queue of waiters (a list and a sorted set scored with the
	// client's clock).
	"fairlock-tryLockInner-3.32": {refused: "LINDEX is not a command the analyzer models"},
	"fairlock-unlockInner-3.32":  {refused: "LINDEX is not a command the analyzer models"},
}

// springVersions: every distinct lock script of Spring Integration's
// RedisLockRegistry, releases 5.0.0 to 7.1.1 (testdata/spring). From 5.5.7
// to 6.1.2 the unlock deletes whoever holds the lock: the registry has
// checked the holder in Java first.
var springVersions = map[string]corpusWant{
	"obtain-5.0":    {sem: `acquire-or-extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=integer 1 no=nil undo=del-if-value(ARGV[1]) no-is-noop`},
	"obtain-5.5.13": {sem: `acquire-or-extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=integer 1 no=nil undo=del-if-value(ARGV[1]) no-is-noop`},
	"obtain-6.1":    {sem: `acquire-or-extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=integer 1 no=nil undo=del-if-value(ARGV[1]) no-is-noop`},
	"renew-6.4":     {sem: `extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=integer 1 no=nil`},
	"unlink-unlock-5.5.7": {sem: `release force any keys=KEYS[1] tokenless yes=integer 1 no=nil`,
		publish: []string{"publish ARGV[1] KEYS[1]"}},
	"delete-unlock-5.5.7": {sem: `release force any keys=KEYS[1] tokenless yes=integer 1 no=nil`,
		publish: []string{"publish ARGV[1] KEYS[1]"}},
	"pubsub-unlink-unlock-6.0.7": {sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=nil`,
		publish: []string{"publish ARGV[2] KEYS[1]"}},
	"pubsub-delete-unlock-6.0.7": {sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=nil`,
		publish: []string{"publish ARGV[2] KEYS[1]"}},
	"pubsub-unlink-unlock-6.4.8": {sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=nil`,
		publish: []string{"publish KEYS[2] KEYS[1]"}},
	"pubsub-delete-unlock-6.4.8": {sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=nil`,
		publish: []string{"publish KEYS[2] KEYS[1]"}},
	"spin-unlink-unlock-6.0.7": {sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=nil`},
	"spin-delete-unlock-6.0.7": {sem: `release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=nil`},
}

// TestVersionScripts analyzes every script in testdata/redisson
// and testdata/spring.
func TestVersionScripts(t *testing.T) {
	for dir, want := range map[string]map[string]corpusWant{"redisson": redissonVersions, "spring": springVersions} {
		t.Run(dir, func(t *testing.T) { checkVersionScripts(t, filepath.Join("testdata", dir), want) })
	}
}

// checkVersionScripts analyzes every script of dir against its
// MANIFEST.json and the expectations.
func checkVersionScripts(t *testing.T, dir string, expect map[string]corpusWant) {
	var manifest map[string]struct {
		SHA1     string `json:"sha1"`
		Versions string `json:"versions"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "MANIFEST.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.lua"))
	if len(files) != len(manifest) || len(files) != len(expect) {
		t.Fatalf("%d scripts, %d in MANIFEST.json, %d expectations", len(files), len(manifest), len(expect))
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
			if m := manifest[name]; hex.EncodeToString(sum[:]) != m.SHA1 {
				t.Fatalf("the copy differs from MANIFEST.json (sha1 %x, want %s)", sum, m.SHA1)
			}
			want, ok := expect[name]
			if !ok {
				t.Fatal("no expectation")
			}
			checkSemantics(t, body, want)
		})
	}
}
