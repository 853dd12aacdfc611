package quorum

import (
	"fmt"

	"github.com/lockproxy/lockproxy/batching"
)

// The oldest Redis release lockproxy's masters may run (for a fork, the
// redis_version it reports: Valkey 7.2 and 8 say 7.2.4). Older ones lack
// what lockproxy's scripts rely on, and fail quietly rather than loudly:
// every checked or guarded script reads the lock's expiry with PEXPIRETIME
// (7.0), which on Redis 6.2 errors inside redis.pcall, so the guard that
// puts back another holder's lock whose expiry a release cut short sees no
// expiry and lets it pass (TestGuardZsetMembers run on 6.2.16: a holder's
// 20 s lock left with 2 s), and a granted extend's shorter TTL is never
// written; clients' scripts fail half-way at PEXPIRE's NX/XX/GT/LT
// options, after their first write. So such a master is refused when its
// connection is set up, before any command or script reaches it, and
// counts as down (docs/compat.md#master-versions).
const (
	MinMasterMajor = 7
	MinMasterMinor = 0
)

// OldMasterError is why a master older than MinMasterMajor.MinMasterMinor
// does not vote.
type OldMasterError struct {
	Addr    string
	Version batching.ServerVersion
}

func (e *OldMasterError) Error() string {
	return fmt.Sprintf("master %s runs %s, older than Redis %d.%d, the oldest lockproxy supports: its votes do not count; upgrade it to Redis %d.%d or later (or Valkey 7.2 or later), lockproxy reconnects to it by itself",
		e.Addr, e.Version, MinMasterMajor, MinMasterMinor, MinMasterMajor, MinMasterMinor)
}

// checkVersion is the pipelines' CheckVersion: master i's connection is
// refused when it is older than lockproxy supports, logged once per
// version seen (the pipeline redials every second).
func (e *Engine) checkVersion(i int, v batching.ServerVersion) error {
	if v.AtLeast(MinMasterMajor, MinMasterMinor) {
		e.refusedVersion[i].Store(nil)
		return nil
	}
	err := &OldMasterError{Addr: e.cfg.Masters[i], Version: v}
	s := v.String()
	if last := e.refusedVersion[i].Swap(&s); last == nil || *last != s {
		e.cfg.Logger.Error("master refused: "+err.Error(), "master", e.cfg.Masters[i], "server", v.Server, "version", v.Version, "redis_version", v.Redis)
	}
	return err
}

// versioned is a pipe that knows its master's version (*batching.Pipeline;
// tests' fakes do not).
type versioned interface {
	Version() batching.ServerVersion
}
