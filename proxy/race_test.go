//go:build race

package proxy_test

// raceSlowdown scales down the load of tests that time other clients'
// commands under an attack: the race detector makes the proxy's loop 5 to
// 10 times slower (reading and validating input most).
const raceSlowdown = 4
