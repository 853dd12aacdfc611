<?php
// Laravel's cache lock (Debian's php-illuminate-cache 8.83: Cache::lock,
// run by its RedisStore's RedisLock and PhpRedisLock, unmodified) through
// lockproxy, on Laravel's Redis connections (php-illuminate-redis) with
// either client: phpredis (php-redis) or Predis (php-nrk-predis).
//
// Run by compat/langs_test.go, against one plain redis-server and through
// lockproxy:
//
//     php laravel_lock.php PORT PREFIX DRIVER     (DRIVER: phpredis or predis)
//
// Each "STEP name result" line is compared with the plain run's; at each
// "CHECK ..." line the test reads the masters and answers "ok" (runDriven).
// An assertion that fails exits 1 with the reason on stderr.
//
// Not run here: Cache::lock($name) without seconds, which Laravel takes
// with SETNX and no expiry, a lock held forever; lockproxy refuses SETNX
// unless default_ttl is set (docs/compat.md).
require '/usr/share/php/Illuminate/Cache/autoload.php';
require '/usr/share/php/Illuminate/Redis/autoload.php';
require '/usr/share/php/Illuminate/Container/autoload.php';

use Illuminate\Cache\RedisStore;
use Illuminate\Cache\Repository;
use Illuminate\Contracts\Cache\LockTimeoutException;
use Illuminate\Redis\RedisManager;

[, $port, $prefix, $driver] = $argv;

function fail($msg)
{
    fwrite(STDERR, "FAIL: $msg\n");
    exit(1);
}

function expect($cond, $msg)
{
    if (!$cond) {
        fail($msg);
    }
}

function check(...$args)
{
    echo 'CHECK ', implode(' ', $args), "\n";
    $answer = trim((string) fgets(STDIN));
    if ($answer !== 'ok') {
        fail('checkpoint ' . implode(' ', $args) . ": test answered '$answer'");
    }
}

function show($v)
{
    if (is_array($v)) {
        return '[' . implode(',', array_map('show', $v)) . ']';
    }
    return var_export($v, true);
}

// step runs f and prints its result, or the class of what it threw and
// the error code (both servers' texts differ in detail).
function step($name, $f)
{
    try {
        $r = $f();
    } catch (Throwable $e) {
        $r = 'threw ' . get_class($e) . ' ' . strtok($e->getMessage(), ' ');
        echo "STEP $name $r\n";
        return null;
    }
    echo "STEP $name ", show($r), "\n";
    return $r;
}

// Laravel's config/database.php 'redis' section, as an application sets
// it: a key prefix (the test's), a database, a client name (CLIENT SETNAME,
// phpredis).
function manager($driver, $port, $prefix, $extra = [])
{
    return new RedisManager(new Illuminate\Container\Container(), $driver, [
        'options' => ['prefix' => $prefix],
        'default' => array_merge(['host' => '127.0.0.1', 'port' => (int) $port, 'database' => 0,
            'timeout' => 5, 'read_timeout' => 5, 'name' => "laravel-$driver"], $extra),
    ]);
}

echo "Laravel cache on ", $driver === 'predis' ? 'Predis ' . Predis\Client::VERSION : 'phpredis ' . phpversion('redis'), "\n";
$redis = manager($driver, $port, $prefix);
// The cache store's own prefix, after the connection's, and a colon.
$cache = new Repository(new RedisStore($redis, 'cache', 'default'));
$other = new Repository(new RedisStore(manager($driver, $port, $prefix), 'cache', 'default'));
$key = $prefix . 'cache:orders';
$conn = $redis->connection();

// The connection's handshake and probes.
step('ping', fn () => (string) $conn->command('ping'));
step('client getname', fn () => $conn->command('client', ['GETNAME']));
step('select 0', fn () => (string) $conn->command('select', [0]));
step('password, no requirepass', fn () => (string) manager($driver, $port, $prefix, ['password' => 'secret'])->connection()->command('ping'));

// The lock's life.
$lock = $cache->lock('orders', 10);
expect(step('lock get', fn () => $lock->get()) === true, 'Cache::lock()->get() refused a free lock');
check('held', $key, $lock->owner());
$contender = $other->lock('orders', 10);
expect(step("contender's get", fn () => $contender->get()) === false, 'a contender got a held lock');
step("contender's block(1)", fn () => $contender->block(1));
step("contender's release", fn () => $contender->release());
check('held', $key, $lock->owner());
// A lock restored from its owner token (another process, a queued job).
$restored = $other->restoreLock('orders', $lock->owner());
step('restored release', fn () => $restored->release());
check('gone', $key);
step('release again', fn () => $lock->release());

// get() with a callback: the lock held while it runs, released after.
step('get with callback', function () use ($cache, $key) {
    return $cache->lock('orders', 10)->get(function () use ($key) {
        check('pttl', $key, 9000, 10000);
        return 'ran';
    });
});
check('gone', $key);

// block() waits for a lock that expires: 1 s, polled every 250 ms.
$short = $cache->lock('orders', 1);
expect(step('lock get, 1 s', fn () => $short->get()) === true, 'a 1 s lock was refused');
$waiter = $other->lock('orders', 10);
$waiter->betweenBlockedAttemptsSleepFor(100);
step("waiter's block(5)", fn () => $waiter->block(5));
check('held', $key, $waiter->owner());
step("expired holder's release", fn () => $short->release());
check('held', $key, $waiter->owner());
step('forceRelease', fn () => $waiter->forceRelease());
check('gone', $key);

// Cache::add, the lock of older Laravel code: a script that SETEXes the key
// when it does not exist (the value serialized). Its TTL must be within
// max_ttl (config.toml: 60 s).
expect(step('cache add 30 s', fn () => $cache->add('orders', 'worker-1', 30)) === true, 'Cache::add refused a free key');
check('pttl', $key, 29000, 30000);
step("contender's cache add", fn () => $other->add('orders', 'worker-2', 30));
step('cache get', fn () => $cache->get('orders'));
step('cache forget', fn () => $cache->forget('orders'));
check('gone', $key);
