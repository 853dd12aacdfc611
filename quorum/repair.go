package quorum

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/redis/rueidis"
)

// The counters' repair. A master that lost its data lost its counters,
// which do not expire: once its quarantine ends it would answer low values
// for ever, and a quorum made of it and masters that missed a write (down
// or paused then) could answer less than a value handed out before. So the
// marker script records every quarantine's start as a pending repair
// (RepairKey), and until the repair is done the master does not vote on
// counters (counter.go). Every proxy that sees the record pending repairs:
// for each key in the registry (RegistryKey, kept by counterWriteScript on
// every master) of a quorum of masters that vote on counters, it reads the
// counter from such a quorum (the maximum, as INCR reads) and writes it to
// the master with the same set-if-greater script; then it marks the record
// done, if it still names the same loss. A repair usually ends long before
// the quarantine does. One that cannot (too few masters vote on counters)
// is tried again at every check; counters meanwhile answer NOQUORUM rather
// than a value that may have gone back.

// repairState is one master's repair, under its watch's mu.
type repairState struct {
	running bool
	lastErr string // logged once
	// latest is the record the last check read. A repair that ends clears
	// the flag only if it still names the loss the repair started from: a
	// check during the repair may have read a newer loss, whose repair
	// starts at the next check.
	latest string
	// run is restore; tests replace it.
	run func(w *watch, record string) (int, error)
}

// Bounds of a repair.
const (
	repairParallel = 8               // counters restored at once
	repairWrite    = 2 * time.Second // the longest wait for one write on the master
)

// repairDoneScript marks the repair record KEYS[1] done when it still holds
// ARGV[1], the pending record the repair started from.
var repairDoneScript = rueidis.NewLuaScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], 'd:' .. string.sub(ARGV[1], 3))
  return 1
end
return 0`)

// repairState applies the repair record of the marker script's answer:
// the master votes on counters only once no repair is pending, and a
// pending one is started. w.mu is held.
func (w *watch) repairState(record string) {
	pending := strings.HasPrefix(record, "p:") && !w.m.e.noRepair.Load()
	w.repair.latest = record
	w.m.e.repairs[w.i].Store(pending)
	if !pending || w.repair.running || w.m.ctx.Err() != nil {
		return
	}
	w.repair.running = true
	run := w.repair.run
	if run == nil {
		run = (*watch).restore
	}
	w.m.wg.Add(1)
	go func() {
		defer w.m.wg.Done()
		n, err := run(w, record)
		w.mu.Lock()
		defer w.mu.Unlock()
		w.repair.running = false
		switch {
		case err == nil && w.repair.latest != record && strings.HasPrefix(w.repair.latest, "p:"):
			// The master lost its data again while this repair ran (a
			// check read the newer loss): its counters are gone again.
			w.m.e.cfg.Logger.Warn("master lost its data again while its counters were being restored; restoring again at its next check (it does not vote on counters meanwhile)", "master", w.addr)
		case err == nil:
			w.repair.lastErr = ""
			w.m.e.repairs[w.i].Store(false)
			level := slog.LevelInfo
			if p := w.policy.policy; p != "" && p != "noeviction" {
				// A policy that still evicts records a new loss at every
				// check, repaired each time: no news (its error said why).
				level = slog.LevelDebug
			}
			w.m.e.cfg.Logger.Log(w.m.ctx, level, "master's counters restored since it lost its data: it votes on counters again", "master", w.addr, "counters", n)
		case w.m.ctx.Err() == nil && err.Error() != w.repair.lastErr:
			w.repair.lastErr = err.Error()
			w.m.e.cfg.Logger.Warn("cannot restore the master's counters yet; retrying at its next check (it does not vote on counters meanwhile)", "master", w.addr, "err", err)
		}
	}()
}

// restore restores every registered counter on w's master, then marks the
// repair record done. It returns how many counters it wrote.
func (w *watch) restore(record string) (int, error) {
	keys, err := w.m.registry()
	if err != nil {
		return 0, err
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex // protects firstErr and n
		firstErr error
		n        int
	)
	sem := make(chan struct{}, repairParallel)
	for _, k := range keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			wrote, err := w.restoreOne([]byte(k))
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("counter %q: %w", k, err)
			}
			if wrote {
				n++
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return n, firstErr
	}
	w.mu.Lock()
	client := w.client
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(w.m.ctx, checkTimeout)
	defer cancel()
	done, err := repairDoneScript.Exec(ctx, client, []string{RepairKey}, []string{record}).AsInt64()
	switch {
	case err != nil:
		return n, fmt.Errorf("marking the repair done: %w", err)
	case done != 1:
		return n, errors.New("the master lost its data again during the repair")
	}
	return n, nil
}

// registry is the union of the counter registries of the masters that vote
// on counters, which must be a quorum: every counter a quorum acknowledged
// is registered on one of them.
func (m *monitor) registry() ([]string, error) {
	seen := map[string]bool{}
	read := 0
	var lastErr error
	for j, w := range m.watches {
		if m.e.noCounterVote(j) != nil {
			continue
		}
		w.mu.Lock()
		client := w.client
		w.mu.Unlock()
		if client == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(m.ctx, checkTimeout)
		keys, err := client.Do(ctx, client.B().Smembers().Key(RegistryKey).Build()).AsStrSlice()
		cancel()
		if err != nil {
			lastErr = err
			continue
		}
		read++
		for _, k := range keys {
			seen[k] = true
		}
	}
	if read < m.e.q {
		return nil, fmt.Errorf("read the counter registry of %d masters voting on counters, %d needed (last error: %v)", read, m.e.q, lastErr)
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	return out, nil
}

// restoreOne reads key's counter from a quorum and writes it to w's
// master. It reports whether there was a counter to write.
func (w *watch) restoreOne(key []byte) (bool, error) {
	e := w.m.e
	r := e.readCounter(key)
	wt := NewWaiter()
	e.Submit(wt, r)
	e.Wait(wt)
	rep, err := r.Result()
	r.Release()
	switch {
	case err != nil:
		return false, err
	case rep.Type == resp.Nil:
		return false, nil // no counter voter holds it: nothing to restore
	case rep.Type != resp.Integer:
		return false, nil // no longer a counter (deleted, then reused as a lock)
	}
	res := make(chan result, 1)
	if err := e.pipes[w.i].Submit(batching.Op{Cmd: counterWriteCommand(key, rep.Int), C: resultChan(res)}); err != nil {
		return false, err
	}
	select {
	case got := <-res:
		switch {
		case got.err != nil:
			return false, got.err
		case got.rep.Type == resp.Error && unavailable(got.rep):
			return false, fmt.Errorf("master answered %s", got.rep.Str)
		case got.rep.Type == resp.Error:
			return false, nil // not a counter on that master (a lock taken since): left alone
		case !got.rep.IsInt(1):
			return false, fmt.Errorf("unexpected reply %v", got.rep)
		}
		return true, nil
	case <-time.After(repairWrite):
		return false, errors.New("no reply from the master")
	case <-w.m.ctx.Done():
		return false, w.m.ctx.Err()
	}
}

type result struct {
	rep resp.Reply
	err error
}

// resultChan is a batching.Completer that hands the reply to a channel.
type resultChan chan result

func (c resultChan) Complete(_ int, rep resp.Reply, err error) { c <- result{rep, err} }
