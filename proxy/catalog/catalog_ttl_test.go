package catalog

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/quorum"
)

// Expiries a script body sets: PEXPIRE/EXPIRE/PEXPIREAT/EXPIREAT key arg,
// and SET … PX/EX/PXAT/EXAT arg. The argument is ARGV[n] or a local.
var (
	expireCall = regexp.MustCompile(`(?i)["'](pexpire|expire|pexpireat|expireat)["']\s*,\s*[^,]+,\s*([A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])?)`)
	setExpiry  = regexp.MustCompile(`(?i)["'](px|ex|pxat|exat)["']\s*,\s*([A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])?)`)
	expiryUnit = map[string]quorum.TTLUnit{
		"pexpire": quorum.Millis, "px": quorum.Millis, "expire": quorum.Seconds, "ex": quorum.Seconds,
		"pexpireat": quorum.UnixMillis, "pxat": quorum.UnixMillis, "expireat": quorum.UnixSecs, "exat": quorum.UnixSecs,
	}
)

// TestBuiltinTTLArgs audits every built-in body: each TTL it sets on a
// master comes from an ARGV the entry declares, as TTLArg or in OtherTTLs,
// with the right unit, so that max_ttl bounds it. A TTL computed in the
// script (redis-py extend's additive mode) must be capped by the script the
// masters run instead (RunAs).
func TestBuiltinTTLArgs(t *testing.T) {
	for _, s := range newTestCatalog(t).Scripts() {
		var found []string
		for _, re := range []*regexp.Regexp{expireCall, setExpiry} {
			for _, m := range re.FindAllStringSubmatch(s.Body, -1) {
				unit, arg := expiryUnit[strings.ToLower(m[1])], m[2]
				found = append(found, m[1]+" "+arg)
				n, ok := strings.CutPrefix(arg, "ARGV[")
				if !ok {
					if s.RunAs == "" {
						t.Errorf("%s: %s sets a TTL computed in the script, and no capped script runs instead (RunAs)", s.Name, m[0])
					}
					continue
				}
				i, _ := strconv.Atoi(strings.TrimSuffix(n, "]"))
				declared := s.TTLArg == i && s.TTLUnit == unit
				for _, o := range s.OtherTTLs {
					declared = declared || o == ArgTTL{Arg: i, Unit: unit}
				}
				if !declared {
					t.Errorf("%s: %s sets a TTL from ARGV[%d] (unit %v) that is neither TTLArg (%d, %v) nor in OtherTTLs %v",
						s.Name, m[0], i, unit, s.TTLArg, s.TTLUnit, s.OtherTTLs)
				}
			}
		}
		if (s.TTLArg > 0 || len(s.OtherTTLs) > 0) && len(found) == 0 {
			t.Errorf("%s declares TTL arguments but sets no expiry the audit can see", s.Name)
		}
		t.Logf("%s: %v", s.Name, found)
	}
}
