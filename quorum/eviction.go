package quorum

import (
	"context"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// policyState is what the monitor knows of a master's maxmemory-policy.
type policyState struct {
	policy    string    // as last read; "" before the first read
	refused   bool      // CONFIG GET was refused: the policy cannot be checked
	evictedAt time.Time // the last check that found an evicting policy
	// taintPending: the quarantine that must follow an evicting policy is
	// not written in the marker yet (the write can fail: OOM is when
	// volatile-* evicts); the master stays barred until it is.
	taintPending bool
	// durable: the last read found appendonly yes, appendfsync always and
	// no-appendfsync-on-rewrite no, so a restart of the master reloads
	// every write it acknowledged (keyspaceScript); false when unknown.
	durable bool
}

// checkPolicy reads the master's maxmemory-policy. A policy other than
// noeviction bars the master's votes at once and taints it: a quarantine
// follows once the policy is fixed (taint true: the marker script starts or
// extends it). A master that refuses CONFIG GET (managed Redis) is said so
// once and counts: lockproxy cannot check it. err is a failure to ask.
// The same read says whether the master persists every write (durable).
func (w *watch) checkPolicy(client rueidis.Client) (taint bool, err error) {
	ctx, cancel := context.WithTimeout(w.m.ctx, checkTimeout)
	res, err := client.Do(ctx, client.B().ConfigGet().Parameter("maxmemory-policy", "appendonly", "appendfsync", "no-appendfsync-on-rewrite").Build()).AsStrMap()
	cancel()
	if re, isReply := rueidis.IsRedisErr(err); err != nil && isReply && refusesConfig(re.Error()) {
		w.policyRefused(err)
		return false, nil
	}
	if err != nil {
		return false, err // LOADING, BUSY, a network error…: the check failed
	}
	policy, ok := res["maxmemory-policy"]
	if !ok {
		w.policyRefused(errNoPolicy)
		return false, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	taint = w.policy.taintPending
	was := w.policy.policy
	w.policy.policy, w.policy.refused = policy, false
	w.policy.durable = res["appendonly"] == "yes" && res["appendfsync"] == "always" && res["no-appendfsync-on-rewrite"] == "no"
	w.m.e.policies[w.i].Store(&policy)
	log := w.m.e.cfg.Logger
	if policy != "noeviction" {
		w.policy.evictedAt = time.Now()
		w.policy.taintPending = w.m.markers
		w.m.e.bar(w.i, barEvicting)
		if policy != was {
			log.Error("master may evict lock keys (maxmemory-policy is not noeviction): its votes do not count; set maxmemory-policy noeviction on it (it then stays quarantined until the longest lock it may have lost has expired)",
				"master", w.addr, "maxmemory_policy", policy)
		}
		return true, nil
	}
	if was != "" && was != policy {
		// It may have evicted until the policy changed, after the last
		// check that saw it evicting: the quarantine counts from now (a
		// new taint), not from that check (found by review: another
		// proxy's lock, granted in between and evicted, was granted
		// again that much early).
		w.policy.evictedAt = time.Now()
		if w.m.markers {
			w.policy.taintPending, taint = true, true
		}
	}
	if !w.policy.taintPending {
		w.m.e.unbar(w.i, barEvicting)
	}
	if was != "" && was != policy {
		log.Warn("master's maxmemory-policy is noeviction again; its votes count once the longest lock it may have evicted has expired",
			"master", w.addr)
	}
	return taint, nil
}

// refusesConfig reports error replies that mean the master will not answer
// CONFIG GET at all (renamed or disabled, ACL), as opposed to one that
// cannot answer now (LOADING, BUSY, OOM…).
func refusesConfig(msg string) bool {
	for _, p := range []string{"ERR unknown command", "ERR unknown subcommand", "NOPERM", "ERR This Redis command is not allowed"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// policyRefused records a master that would not say its policy, logging it
// once.
func (w *watch) policyRefused(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.policy.durable = false // unknown: a restart is quarantined
	if !w.policy.taintPending {
		w.m.e.unbar(w.i, barEvicting)
	}
	if w.policy.refused {
		return
	}
	w.policy.refused = true
	w.m.e.cfg.Logger.Warn("cannot read the master's maxmemory-policy (CONFIG GET refused, as managed Redis services do); lockproxy cannot check that it never evicts lock keys: make sure it runs with maxmemory-policy noeviction, or mutual exclusion can break; nor whether it persists every write, so each restart of it that kept its marker is quarantined",
		"master", w.addr, "err", err)
}

var errNoPolicy = &policyError{"CONFIG GET maxmemory-policy answered without the parameter"}

type policyError struct{ msg string }

func (e *policyError) Error() string { return e.msg }
