# em-redis (Debian's ruby-em-redis 0.3, on EventMachine) through lockproxy:
# the lock flow evented Ruby code writes with it. Every command takes a
# callback; commands issued in one reactor turn go out together, so the
# flow pipelines. em-redis has no SET options: a lock is call_command with
# SET's NX and PX (its own set(key, value, expiry) is SET then EXPIRE, no
# lock).
#
# Run by compat/langs_test.go, against one plain redis-server and through
# lockproxy:
#
#     ruby em_redis.rb PORT PREFIX
#
# Each "STEP name result" line is compared with the plain run's; at each
# "CHECK ..." line the test reads the masters and answers "ok" (runDriven).
# An assertion that fails exits 1 with the reason on stderr.
require "em-redis"

PORT = Integer(ARGV[0])
PREFIX = ARGV[1]

def fail(msg)
  warn "FAIL: #{msg}"
  exit! 1
end

# check blocks the reactor while the test reads the masters: nothing else
# is in flight then.
def check(*args)
  puts "CHECK #{args.join(' ')}"
  $stdout.flush
  answer = $stdin.gets.to_s.strip
  fail("checkpoint #{args.join(' ')}: test answered #{answer.inspect}") unless answer == "ok"
end

def step(name, r)
  puts "STEP #{name} #{r.inspect}"
  $stdout.flush
  r
end

EXTEND = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"
RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"

# A flow of callbacks reads badly; each stage below is a method taking the
# connections and the next stage.
class Flow
  def initialize(r, c2, key)
    @r, @c2, @key = r, c2, key
    @tok, @other = "em-token-a", "em-token-b"
  end

  # replies sends cmds on conn at once and calls blk with every reply, or
  # the error code in place of a reply that is an error: em-redis calls
  # its errback for an error and drops that command's callback.
  def replies(conn, *cmds, &blk)
    got = Array.new(cmds.size)
    left = cmds.size
    @errors = []
    conn.errback { |code| @errors << "error #{code.split.first}" }
    cmds.each_with_index do |c, i|
      conn.call_command(c) do |v|
        got[i] = v
        left -= 1
        blk.call(fill(got)) if left.zero?
      end
    end
    # A command whose reply was an error never calls back: a PING after
    # them all says when every reply is in.
    conn.call_command(["ping"]) { blk.call(fill(got)) unless left.zero? }
  end

  def fill(got)
    errs = @errors.dup
    got.map { |v| v.nil? && !errs.empty? ? nil : v }.tap { |g| g << errs unless errs.empty? }
  end

  def run
    replies(@r, ["ping"], ["select", 0], ["client", "setname", "em-named"], ["client", "getname"], ["echo", "hi"]) do |v|
      step("ping, select 0, client setname, getname, echo", v)
      replies(@r, ["info"]) do |(info)|
        # em-redis parses INFO into a hash of symbols.
        step("info has redis_version", info.key?(:redis_version))
        replies(@r, ["set", @key, @tok, "NX", "PX", 5000]) do |(ok)|
          fail("SET NX PX refused a free lock") unless step("set nx px", ok) == "OK"
          check("held", @key, @tok)
          contend
        end
      end
    end
  end

  def contend
    replies(@c2, *(1..3).map { |i| ["set", @key, "#{@other}-#{i}", "NX", "PX", 5000] }) do |v|
      step("3 contenders pipelined", v)
      replies(@r, ["get", @key], ["exists", @key], ["pttl", @key]) do |(g, x, t)|
        step("get, exists, pttl in 1000..5000", [g, x, (1000..5000).cover?(t)])
        replies(@r, ["eval", EXTEND, 1, @key, @tok, 8000]) do |(e)|
          fail("extend failed") unless step("eval extend", e) == 1
          check("pttl", @key, 6000, 8000)
          strangers
        end
      end
    end
  end

  def strangers
    replies(@c2, ["eval", EXTEND, 1, @key, @other, 9000], ["eval", RELEASE, 1, @key, @other]) do |v|
      step("stranger's extend, release", v)
      check("held", @key, @tok)
      replies(@r, ["script", "load", RELEASE]) do |(sha)|
        step("script load", sha)
        replies(@r, ["script", "exists", sha, "0" * 40], ["evalsha", "0" * 40, 1, @key, @tok]) do |v2|
          step("script exists, evalsha of an unknown sha1", v2)
          release(sha)
        end
      end
    end
  end

  def release(sha)
    replies(@c2, ["evalsha", sha, 1, @key, @other]) do |v|
      step("stranger's evalsha release", v)
      check("held", @key, @tok)
      replies(@r, ["evalsha", sha, 1, @key, @tok], ["get", @key]) do |v2|
        step("evalsha release, get", v2)
        check("gone", @key)
        replies(@c2, ["set", @key, @other, "EX", 5, "NX"], ["watch", @key], ["get", @key]) do |v3|
          step("set ex nx, watch, get", v3)
          check("held", @key, @other)
          replies(@c2, ["multi"], ["del", @key], ["exec"]) do |v4|
            step("multi, del, exec", v4)
            check("gone", @key)
            EM.stop
          end
        end
      end
    end
  end
end

puts "em-redis #{EMRedis::VERSION}"
EM.run do
  EM.add_timer(20) { fail("timed out") }
  r = EM::Protocols::Redis.connect(host: "127.0.0.1", port: PORT)
  c2 = EM::Protocols::Redis.connect(host: "127.0.0.1", port: PORT)
  Flow.new(r, c2, PREFIX + "lock").run
end
