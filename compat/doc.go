// Package compat is lockproxy's client compatibility suite: its tests drive
// real, unmodified lock libraries (redis-py, redsync, bsm/redislock,
// rueidislock, go-redis, node-redlock, ioredis-lock, redis-cli and
// redis-benchmark) through an in-process lockproxy in front of 5 real
// redis-server masters, and check what the masters hold after each step.
//
// Waiters are woken across proxies: python-redis-lock's blocking acquire
// (BLPOP), Redisson's and Spring Integration's pub/sub locks (their
// commands, sent by a Go client) and node-redis and ioredis subscribers run
// with the holder or publisher on one lockproxy and the waiter on another
// on the same masters; every compat lockproxy has a pub/sub hub.
//
// The libraries whose scripts lockproxy understands by what they do
// (redis-semaphore, go-zero, Symfony Lock, @sesamecare-oss/redlock) run
// against one plain redis-server (TestLibsPlainRedis) and through
// lockproxy (TestLibsThroughLockproxy).
//
// The Redis clients of Ruby, Perl and Lua that Debian ships (redis-rb,
// Perl's Redis and Redis::Fast, lua-redis) run their handshakes and a
// lock's life against one plain redis-server and through lockproxy, whose
// replies must be the plain server's, step by step
// (TestOtherLanguageClients).
//
// The package has no code of its own outside its tests. The Python, Node,
// PHP, Ruby, Perl and Lua scripts it runs live in python/, node/, php/,
// ruby/, perl/ and lua/ (python/vendor
// holds python-redis-lock, which Debian does not package);
// node/package-lock.json pins the npm packages, installed by the tests with
// npm ci. A missing interpreter or package fails the suite with the command
// that installs it.
package compat
