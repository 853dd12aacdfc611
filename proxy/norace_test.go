//go:build !race

package proxy_test

// raceSlowdown scales down the load of timing tests (race_test.go).
const raceSlowdown = 1
