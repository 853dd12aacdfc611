# redis-rb (Debian's ruby-redis 4.8) through lockproxy: the handshakes its
# users' connection options send, then the lock flow Ruby code writes with
# it, and redlock-rb's wire flow (its scripts, as its sha1s find them).
#
# Run by compat/langs_test.go, against one plain redis-server and through
# lockproxy:
#
#     ruby redis_rb.rb PORT PREFIX [hiredis]
#
# With "hiredis", every connection uses redis-rb's hiredis driver (Debian's
# ruby-hiredis 0.6: `driver: :hiredis`), whose reader and socket code are C.
#
# Each "STEP name result" line is compared with the plain run's; at each
# "CHECK ..." line the test reads the masters and answers "ok" (runDriven).
# An assertion that fails exits 1 with the reason on stderr.
require "digest"
require "redis"

PORT = Integer(ARGV[0])
PREFIX = ARGV[1]
DRIVER = ARGV[2] == "hiredis" ? :hiredis : :ruby
require "redis/connection/hiredis" if DRIVER == :hiredis

def fail(msg)
  warn "FAIL: #{msg}"
  exit 1
end

def expect(cond, msg)
  fail(msg) unless cond
end

def check(*args)
  puts "CHECK #{args.join(' ')}"
  $stdout.flush
  answer = $stdin.gets.to_s.strip
  fail("checkpoint #{args.join(' ')}: test answered #{answer.inspect}") unless answer == "ok"
end

# step runs the block and prints its result, or the first word of the
# error it raised (the error code: both servers' texts differ in detail).
def step(name)
  r = begin
    yield
  rescue Redis::BaseError => e
    "error #{e.message.split.first}"
  end
  puts "STEP #{name} #{r.inspect}"
  $stdout.flush
  r
end

def connect(**opts)
  Redis.new(host: "127.0.0.1", port: PORT, timeout: 5, driver: DRIVER, **opts)
end

puts "redis-rb #{Redis::VERSION}, driver #{connect._client.driver}"
key = PREFIX + "lock"

# Handshakes: what redis-rb sends on connect for db, id (CLIENT SETNAME)
# and a URL; then the commands libraries send to probe the server.
step("connect db 0, id") { connect(db: 0, id: "rb-client").ping }
step("connect url") { Redis.new(url: "redis://127.0.0.1:#{PORT}/0", driver: DRIVER).ping }
step("connect password, no requirepass") { connect(password: "secret").ping }
r = connect
step("select 0") { r.select(0) }
step("info redis_version >= 2.6.12") { Gem::Version.new(r.info["redis_version"]) >= Gem::Version.new("2.6.12") }
step("info server") { r.info("server").key?("redis_version") }
step("client setname") { r.call(:client, :setname, "rb-named") }
step("client getname") { r.call(:client, :getname) }
step("echo") { r.echo("hi") }
step("connected?") { r.connected? }

# The lock flow.
tok, other = "rb-token-a", "rb-token-b"
c2 = connect
expect(step("set nx px") { r.set(key, tok, nx: true, px: 5000) } == true, "SET NX PX refused a free lock")
check("held", key, tok)
expect(step("contender set nx px") { c2.set(key, other, nx: true, px: 5000) } == false, "a contender got a held lock")
step("get") { r.get(key) }
step("exists?") { r.exists?(key) }
step("pttl in 1000..5000") { (1000..5000).cover?(r.pttl(key)) }
extend = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"
release = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
expect(step("eval extend") { r.eval(extend, keys: [key], argv: [tok, 8000]) } == 1, "extend failed")
check("pttl", key, 6000, 8000)
step("stranger's extend") { c2.eval(extend, keys: [key], argv: [other, 9000]) }
step("stranger's release") { c2.eval(release, keys: [key], argv: [other]) }
check("held", key, tok)
check("pttl", key, 4000, 8000)
sha = step("script load") { r.script(:load, release) }
step("script exists") { r.script(:exists, sha) }
step("evalsha of an unknown sha1") { r.evalsha("0" * 40, keys: [key], argv: [tok]) }
step("pipelined get, pttl, exists") do
  g, t, x = r.pipelined { |p| p.get(key); p.pttl(key); p.exists(key) }
  [g, (1000..8000).cover?(t), x]
end
# redlock-rb's get_remaining_ttl script (its locked? and valid_lock?).
step("value and pttl read") do
  v, t = r.eval('return { redis.call("get", KEYS[1]), redis.call("pttl", KEYS[1]) }', keys: [key])
  [v, (1000..8000).cover?(t)]
end
# A stranger's compare-and-delete transaction: the value is not its own.
step("stranger's watch, get, unwatch") { c2.watch(key) { c2.get(key) == other ? c2.multi { |m| m.del(key) } : c2.unwatch } }
check("held", key, tok)
# The holder's: WATCH, GET, MULTI, DEL, EXEC.
step("watch, get, multi del, exec") { r.watch(key) { r.get(key) == tok ? r.multi { |m| m.del(key) } : r.unwatch } }
check("gone", key)
step("value and pttl read, free") { r.eval('return { redis.call("get", KEYS[1]), redis.call("pttl", KEYS[1]) }', keys: [key]) }
# Re-acquire with EX; release by EVALSHA of the loaded script.
expect(step("set nx ex") { c2.set(key, other, nx: true, ex: 5) } == true, "re-acquire failed")
check("held", key, other)
step("evalsha release") { c2.evalsha(sha, keys: [key], argv: [other]) }
check("gone", key)
# redlock-rb's wire flow (1.x and 2.x): EVALSHA of its scripts' sha1s,
# NOSCRIPT, SCRIPT LOAD of all three (a refused one failed every lock),
# then EVALSHA: lock with ARGV[3] "yes", extend with "no", its
# value-and-PTTL read, unlock.
rl_lock = <<~LUA
  if (redis.call("exists", KEYS[1]) == 0 and ARGV[3] == "yes") or redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2])
  end
LUA
rl_pttl = 'return { redis.call("get", KEYS[1]), redis.call("pttl", KEYS[1]) }'
k2 = PREFIX + "redlock"
rl = [release, rl_lock, rl_pttl].map { |b| Digest::SHA1.hexdigest(b) }
# A client starting against a server that never saw the scripts: lockproxy's
# table keeps what earlier runs loaded (as a long-running Redis does), and
# SCRIPT FLUSH empties this connection's view of it.
step("redlock-rb: script flush") { r.script(:flush) }
step("redlock-rb: evalsha before loading") { r.evalsha(rl[1], keys: [k2], argv: [tok, 5000, "yes"]) }
step("redlock-rb: script load x3") { [release, rl_lock, rl_pttl].map { |b| r.script(:load, b) } == rl }
step("redlock-rb: lock") { r.evalsha(rl[1], keys: [k2], argv: [tok, 5000, "yes"]) }
check("held", k2, tok)
step("redlock-rb: contender's lock") { c2.evalsha(rl[1], keys: [k2], argv: [other, 5000, "yes"]) }
step("redlock-rb: extend") { r.evalsha(rl[1], keys: [k2], argv: [tok, 8000, "no"]) }
check("pttl", k2, 6000, 8000)
step("redlock-rb: stranger's extend") { c2.evalsha(rl[1], keys: [k2], argv: [other, 9000, "no"]) }
step("redlock-rb: read") { v, t = r.evalsha(rl[2], keys: [k2]); [v, (1000..8000).cover?(t)] }
step("redlock-rb: stranger's unlock") { c2.evalsha(rl[0], keys: [k2], argv: [other]) }
check("held", k2, tok)
step("redlock-rb: unlock") { r.evalsha(rl[0], keys: [k2], argv: [tok]) }
check("gone", k2)
step("redlock-rb: read, free") { r.evalsha(rl[2], keys: [k2]) }
step("quit") { r.quit }
step("ping after quit (reconnects)") { r.ping }
