// Package compat is lockproxy's client compatibility suite: its tests drive
// real, unmodified lock libraries (redis-py, redsync, bsm/redislock,
// rueidislock, go-redis, node-redlock, ioredis-lock, redis-cli and
// redis-benchmark) through an in-process lockproxy in front of 5 real
// redis-server masters, and check what the masters hold after each step.
//
// The package has no code of its own outside its tests. The Python and
// Node scripts it runs live in python/ and node/; node/package-lock.json
// pins the npm packages, installed by the tests with npm ci. A missing
// interpreter or package fails the suite with the command that installs it.
package compat
