package quorum

// SetRecycleHook makes f see every Request going back to the pool (nil:
// none). Tests only; not safe while requests are in flight.
func SetRecycleHook(f func(*Request)) { onRecycle = f }

// SetCounterRepair turns the counters' repair on or off: off, a master
// that lost its data votes on counters once its quarantine ends, with
// nothing restored (the negative control of the test that shows why the
// repair exists).
func SetCounterRepair(e *Engine, on bool) { e.noRepair.Store(!on) }
