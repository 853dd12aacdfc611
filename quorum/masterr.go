package quorum

import "github.com/lockproxy/lockproxy/batching"

// ErrQueueFull is a master whose queue of unwritten commands is full (it
// stopped draining it): its vote counts as a no. The proxy words it for
// clients; it is batching's error, named here so that the proxy needs
// only quorum.
var ErrQueueFull = batching.ErrQueueFull
