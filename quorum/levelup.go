package quorum

import (
	"strconv"

	"github.com/lockproxy/lockproxy/batching"
)

// A granted re-entry can leave a master with a lower count than the
// holder's depth: one that missed the first acquisition takes the re-entry
// as a first one, with a count of 1 where the quorum goes to 2; one that
// the re-entry never reached (it expired unwritten behind a slow command,
// or the master was stalled and not sent it) stays at 1. The grant is safe
// (reentrant.go: a quorum holds the depth), but the holder's next
// release, which only counts down on the quorum, deletes the lock on that
// master and runs the script's other writes there: its PUBLISH of the
// release message above all. That lone copy is delivered to every waiter
// after the hub's HoldBack while a quorum still holds the lock (a wake-up
// for nothing), and the hub then takes the quorum's copies of the real
// release, the same payload, for the copies the other masters owed of it
// (pubsub's dedup): the real release was never delivered, and a Redisson
// waiter slept until its lease ran out (CI saw a release message after the
// unlock at depth 2 of an RFencedLock). The hub now delivers such a
// message again once copies published after it complete its quorum
// (pubsub's fence.go), so the real release is heard; what the raise
// still saves is the early wake-up, and the waiter's refused retry, on
// every re-entry a master missed.
//
// So once a re-entrant acquisition is granted for good, every master that
// may hold the token below the level the grant counted on (a quorum holds
// at least it, reentrant.go) is sent raiseScript to that level at once:
// those whose yes showed a lower count, and those whose reply has not
// come (or will not: the command expired or was not sent), for which the
// raise is queued behind the re-entry on their ordered pipeline. Either
// way it is queued before the client hears of the grant, so ahead of the
// holder's next release on every master. The raise changes only a count
// the token holds, and only up: where the re-entry ran it finds the count
// at the level already, and a master holding another client's lock is
// left alone. Raising only keeps a master's copy longer, until its TTL:
// the safe side, as contRaise. The cost is one small command per re-entry
// to each master still answering when the quorum decided (N - Q on a
// healthy set, a no-op there): waiting for their replies instead would
// let the holder's next release overtake a raise the reply showed was
// needed, on exactly the slow master that needs it.

// levelUp raises the counts of r, a re-entrant acquisition just granted
// for good, on every master that may hold fewer than the level. r.mu is
// held.
func (r *Request) levelUp() {
	st := r.reent
	if st == nil || st.extend || st.key == nil || r.token == nil {
		return
	}
	st.target = r.reentrantLevel()
	if st.target <= 1 {
		return // a first acquisition: the token holds 1 wherever it runs
	}
	var cmd []byte
	for i := 0; i < r.e.n; i++ {
		if st.leveled&(1<<i) != 0 {
			continue
		}
		switch r.state[i] {
		case replied, ignored:
			if c := st.count[i]; !r.yesAt(i) || c >= st.target {
				continue // at the level, or the token is not there
			}
		case pending, timedOut, notApplied, lost:
		default:
			continue
		}
		if cmd == nil {
			cmd = AppendEvalSHA(nil, raiseScript.SHA1, [][]byte{st.key}, [][]byte{r.token, strconv.AppendInt(nil, st.target, 10)})
		}
		st.leveled |= 1 << i
		if err := r.e.pipes[i].Submit(batching.Op{Cmd: cmd}); err != nil {
			r.e.cfg.Logger.Debug("re-entry's count not raised; that master's copy may go at the holder's next release", "master", r.e.cfg.Masters[i], "err", err)
		}
	}
}
