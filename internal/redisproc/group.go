package redisproc

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
)

// StartN starts n servers on free ports, each in its own subdirectory of dir
// (dir/redis-1 … dir/redis-n), and returns them in that order. If one fails,
// those already started are stopped and the first error is returned.
func StartN(dir string, n int) ([]*Server, error) {
	if n < 1 {
		return nil, fmt.Errorf("redisproc: StartN needs n >= 1, got %d", n)
	}
	// Start them concurrently: start-up is mostly waiting for the process
	// to exec and bind, and a test with 5 or 9 masters should not pay it
	// serially.
	servers := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			servers[i], errs[i] = Start(Options{Dir: filepath.Join(dir, fmt.Sprintf("redis-%d", i+1))})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			stopAll(servers)
			return nil, err
		}
	}
	return servers, nil
}

// stopAll stops every non-nil server, concurrently: redis-server takes up
// to 100ms (one server cron tick) to act on SIGTERM.
func stopAll(servers []*Server) {
	var wg sync.WaitGroup
	for _, s := range servers {
		if s != nil {
			wg.Go(func() { _ = s.Stop() })
		}
	}
	wg.Wait()
}

// ForTest starts n servers in t.TempDir() and stops them when the test and
// its subtests end. A missing redis-server fails the test: it is never a
// reason to skip.
func ForTest(t testing.TB, n int) []*Server {
	t.Helper()
	servers, err := StartN(t.TempDir(), n)
	if err != nil {
		t.Fatal(err)
	}
	// Registered after t.TempDir's own cleanup, so it runs before the
	// directory is removed.
	t.Cleanup(func() { stopAll(servers) })
	return servers
}
