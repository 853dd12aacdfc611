<?php
// Symfony Lock 5.4's RedisStore (Debian php-symfony-lock) through phpredis
// (Debian php-redis) or predis (Debian php-nrk-predis). Run by
// compat/libs_test.go with /usr/bin/php:
//
//   php symfony_lock.php PORT PREFIX phpredis|predis
//
// The lock is a sorted set: the holder's token and "__write__" as members,
// their expiry (ms) as scores, and the key's PEXPIREAT at the latest one.
// At each checkpoint the Go test reads the masters and answers "ok" (see
// runDriven in compat/driver_test.go).

declare(strict_types=1);

require '/usr/share/php/Symfony/Component/Lock/autoload.php';

use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Key;
use Symfony\Component\Lock\LockFactory;
use Symfony\Component\Lock\Store\RedisStore;

function fail(string $msg): void
{
    fwrite(STDERR, "FAIL: $msg\n");
    exit(1);
}

function expect(bool $cond, string $msg): void
{
    if (!$cond) {
        fail($msg);
    }
}

function check(string ...$args): void
{
    fwrite(STDOUT, 'CHECK ' . implode(' ', $args) . "\n");
    fflush(STDOUT);
    $answer = fgets(STDIN);
    if ($answer === false || trim($answer) !== 'ok') {
        fail('checkpoint ' . implode(' ', $args) . ': test answered ' . var_export($answer, true));
    }
}

// holder is what the Go check expects to find in the lock's sorted set.
function holder(Key $key): string
{
    return $key->getState(RedisStore::class) . ',__write__';
}

[, $port, $prefix, $driver] = $argv + [null, null, null, null];
switch ($driver) {
    case 'phpredis':
        $redis = new Redis();
        $redis->connect('127.0.0.1', (int) $port);
        break;
    case 'predis':
        require '/usr/share/php/Predis/autoload.php';
        $redis = new Predis\Client(['host' => '127.0.0.1', 'port' => (int) $port]);
        break;
    default:
        fail("unknown driver '$driver', want phpredis or predis");
}

// Symfony's default TTL is 300 s for both the store's first save and the
// lock: through lockproxy both must be within max_ttl (60 s by default).
$factory = new LockFactory(new RedisStore($redis, 10.0));
$resource = $prefix . 'lock';

// Acquire.
$key = new Key($resource);
$lock = $factory->createLockFromKey($key, 10.0, false);
expect($lock->acquire(), 'acquire of a free lock returned false');
expect($lock->isAcquired(), 'isAcquired is false after acquire');
check('held', $resource, holder($key));
check('pttl', $resource, '9000', '10000');

// Refused while held.
$otherKey = new Key($resource);
$other = $factory->createLockFromKey($otherKey, 10.0, false);
expect(!$other->acquire(), 'acquire of a held lock returned true');
expect(!$other->isAcquired(), 'isAcquired is true for a lock refused');
check('held', $resource, holder($key));

// A stranger's refresh and release do nothing.
check('shorten', $resource, '3000');
try {
    $other->refresh();
    fail("a stranger's refresh succeeded");
} catch (LockConflictedException $e) {
}
$other->release();
check('held', $resource, holder($key));
check('pttl', $resource, '1', '3000');
expect($lock->isAcquired(), "isAcquired is false after a stranger's release");

// Extend: refresh moves the TTL back up.
$lock->refresh(10.0);
expect($lock->getRemainingLifetime() > 9.0, 'remaining lifetime after refresh: ' . $lock->getRemainingLifetime());
check('held', $resource, holder($key));
check('pttl', $resource, '9000', '10000');

// Release; then the lock refused above gets it.
$lock->release();
expect(!$lock->isAcquired(), 'isAcquired is true after release');
check('gone', $resource);
expect($other->acquire(), 'acquire after release returned false');
check('held', $resource, holder($otherKey));
$other->release();
check('gone', $resource);

// Expiry: a lock nobody refreshes expires after its TTL; a blocking
// acquire gets it then, and the expired holder's release leaves it alone.
$shortKey = new Key($resource);
$short = $factory->createLockFromKey($shortKey, 1.0, false);
expect($short->acquire(), 'acquire of a free lock returned false');
check('held', $resource, holder($shortKey));
check('pttl', $resource, '1', '1000');
$waiterKey = new Key($resource);
$waiter = $factory->createLockFromKey($waiterKey, 10.0, false);
$start = microtime(true);
expect($waiter->acquire(true), 'blocking acquire returned false');
$waited = microtime(true) - $start;
expect($waited >= 0.5, "a lock held for 1s was taken after {$waited}s");
// 'granted', not 'held': the expired lock's keys vanish from the masters at
// slightly different moments, so a retry in between is granted by a quorum
// and refused where the old key was still there.
check('granted', $resource, holder($waiterKey));
expect(!$short->isAcquired(), 'the expired lock still says it is acquired');
$short->release();
check('granted', $resource, holder($waiterKey));
$waiter->release();
check('gone', $resource);

check('keys', $prefix);
echo "symfony/lock $driver: all assertions passed\n";
