//go:build !race

package pubsub

// raceSlowdown scales the time bounds of tests (race_test.go).
const raceSlowdown = 1

// matchAdvantage is how many times faster than Match a test requires the
// compiled pattern matchers to be (race_test.go).
const matchAdvantage = 10
