//go:build !race

package pubsub

// raceSlowdown scales the time bounds of tests (race_test.go).
const raceSlowdown = 1
