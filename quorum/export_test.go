package quorum

// SetRecycleHook makes f see every Request going back to the pool (nil:
// none). Tests only; not safe while requests are in flight.
func SetRecycleHook(f func(*Request)) { onRecycle = f }
