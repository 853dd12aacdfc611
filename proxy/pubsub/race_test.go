//go:build race

package pubsub

// raceSlowdown scales the time bounds of tests: the race detector makes
// the code they time 5 to 10 times slower.
const raceSlowdown = 10

// matchAdvantage is how many times faster than Match a test requires the
// compiled pattern matchers to be. The race detector slows their
// bit-parallel loop far more than Match's byte compares: about 6 to 8
// times faster here under -race, 70 to 160 without; a matcher no faster
// than Match still fails.
const matchAdvantage = 2
