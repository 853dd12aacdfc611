package quorum

import "time"

// SetRecycleHook makes f see every Request going back to the pool (nil:
// none). Tests only; not safe while requests are in flight.
func SetRecycleHook(f func(*Request)) { onRecycle = f }

// SetCounterRepair turns the counters' repair on or off: off, a master
// that lost its data votes on counters once its quarantine ends, with
// nothing restored (the negative control of the test that shows why the
// repair exists).
func SetCounterRepair(e *Engine, on bool) { e.noRepair.Store(!on) }

// SetCheckedHook makes f see each marker check once its answer is applied
// and what it lifts is lifted, with the check's lock held (nil: none).
// Engines of other tests call it too: f filters by engine.
func SetCheckedHook(f func(e *Engine, master int)) {
	if f == nil {
		onChecked.Store(nil)
		return
	}
	onChecked.Store(&f)
}

// SetMarkerHook makes f see each marker check just before its script runs,
// with its mode ("peek", "bootstrap", "check"); nil: none. Engines of other
// tests call it too: f filters by engine (MaxTTLOf).
func SetMarkerHook(f func(e *Engine, master int, mode string)) {
	if f == nil {
		onMarker.Store(nil)
		return
	}
	onMarker.Store(&f)
}

// MaxTTLOf is e's configured max_ttl.
func MaxTTLOf(e *Engine) time.Duration { return e.cfg.MaxTTL }

// RaiseScriptBody is the re-entrant counts' raise (reentrant.go).
func RaiseScriptBody() string { return raiseScript.Body }
