//go:build race

package analyze

// raceFactor scales the default CPU and wall-clock bounds in a build with
// the race detector, which runs the analysis several times slower: the
// same script is the same work, and a test suite built with -race on a
// loaded machine refused Redisson's RFencedLock for the time the detector
// added. Production builds do not use the race detector.
const raceFactor = 4
