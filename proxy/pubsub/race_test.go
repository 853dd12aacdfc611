//go:build race

package pubsub

// raceSlowdown scales the time bounds of tests: the race detector makes
// the code they time 5 to 10 times slower.
const raceSlowdown = 10
