//go:build !race

package analyze

// raceFactor is 1 without the race detector (race.go).
const raceFactor = 1
