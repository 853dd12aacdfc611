# AnyEvent::Redis (Debian's libanyevent-redis-perl 0.24) through lockproxy:
# the lock flow event-driven Perl code writes with it. Every command returns
# a condition variable; commands issued before the first recv go out
# together (AnyEvent::Handle's write queue), so the flow below pipelines.
#
# Run by compat/langs_test.go, against one plain redis-server and through
# lockproxy:
#
#     perl anyevent_redis.pl PORT PREFIX
#
# Each "STEP name result" line is compared with the plain run's; at each
# "CHECK ..." line the test reads the masters and answers "ok" (runDriven).
# An assertion that fails exits 1 with the reason on stderr.
use strict;
use warnings;
use AnyEvent;
use AnyEvent::Redis;

my ($port, $prefix) = @ARGV;
$| = 1;

sub fail { print STDERR "FAIL: $_[0]\n"; exit 1 }
sub expect { fail($_[1]) unless $_[0] }

sub check {
    print "CHECK @_\n";
    my $answer = <STDIN>;
    $answer = "" unless defined $answer;
    chomp $answer;
    fail("checkpoint @_: test answered '$answer'") unless $answer eq "ok";
}

sub show {
    my $v = shift;
    return "undef" unless defined $v;
    return "[" . join(",", map { show($_) } @$v) . "]" if ref $v eq "ARRAY";
    return "'$v'";
}

# step waits for the condvars the code returns and prints their results,
# or the first word of the error one croaked with (the error code: both
# servers' texts differ in detail).
sub step {
    my ($name, $code) = @_;
    my @r = eval { map { $_->recv } $code->() };
    if ($@) {
        my ($word) = $@ =~ /^(\S+)/;
        print "STEP $name error $word\n";
        return;
    }
    print "STEP $name ", join(" ", map { show($_) } @r), "\n";
    return wantarray ? @r : $r[0];
}

my $errors = 0;
sub connect_to {
    AnyEvent::Redis->new(host => "127.0.0.1", port => $port,
        on_error => sub { $errors++; warn "connection error: @_\n" });
}

print "AnyEvent::Redis ", AnyEvent::Redis->VERSION, "\n";
my $key = $prefix . "lock";
my $r = connect_to();
my $c2 = connect_to();

# The handshake event-driven services send on connect, as one pipeline.
step("ping, select 0, client setname, echo", sub {
    ($r->ping, $r->select(0), $r->client("SETNAME", "ae-named"), $r->echo("hi"))
});
step("client getname", sub { $r->client("GETNAME") });
# INFO answers a hash of its fields (AnyEvent::Redis parses it).
step("info has redis_version", sub {
    my $cv = AE::cv;
    $r->info(sub { $cv->send(exists $_[0]{redis_version} ? "yes" : "no") });
    $cv;
});
step("auth without requirepass", sub { $r->auth("secret") });

# The lock flow.
my ($tok, $other) = ("ae-token-a", "ae-token-b");
my $extend = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
my $release = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
expect(step("set nx px", sub { $r->set($key, $tok, "NX", "PX", 5000) }) eq "OK", "SET NX PX refused a free lock");
check("held", $key, $tok);
expect(!defined step("contender set nx px", sub { $c2->set($key, $other, "NX", "PX", 5000) }), "a contender got a held lock");
step("get, exists", sub { ($r->get($key), $r->exists($key)) });
step("pttl in 1000..5000", sub { my $t = $r->pttl($key)->recv; my $cv = AE::cv; $cv->send($t >= 1000 && $t <= 5000 ? "yes" : "no"); $cv });
expect(step("eval extend", sub { $r->eval($extend, 1, $key, $tok, 8000) }) == 1, "extend failed");
check("pttl", $key, 6000, 8000);
step("stranger's extend, release (pipelined)", sub {
    ($c2->eval($extend, 1, $key, $other, 9000), $c2->eval($release, 1, $key, $other))
});
check("held", $key, $tok);
my $sha = step("script load", sub { $r->script("LOAD", $release) });
step("script exists", sub { $r->script("EXISTS", $sha, "0" x 40) });
step("evalsha of an unknown sha1", sub { $r->evalsha("0" x 40, 1, $key, $tok) });
step("stranger's evalsha release", sub { $c2->evalsha($sha, 1, $key, $other) });
check("held", $key, $tok);

# Callbacks instead of recv: acquire-or-not and release in one round trip,
# all_cv waiting for every pending reply.
my @got;
my $all = AE::cv;
$c2->all_cv($all);
$c2->set($key, $other, "NX", "PX", 5000, sub { push @got, show($_[0]) });
$c2->evalsha($sha, 1, $key, $other, sub { push @got, show($_[0]) });
$c2->get($key, sub { push @got, show($_[0]) });
$all->recv;
print "STEP callbacks: contender's set, evalsha, get @got\n";

# A check-and-set release in a transaction: WATCH, GET, MULTI, DEL, EXEC.
step("watch, get", sub { ($r->watch($key), $r->get($key)) });
# AnyEvent::Redis hands each queued command's condvar its result from
# EXEC's array.
step("multi, del, exec", sub { my @cvs = ($r->multi, $r->del($key)); ($cvs[0], $cvs[1], $r->exec) });
check("gone", $key);
expect(step("set ex nx", sub { $c2->set($key, $other, "EX", 5, "NX") }) eq "OK", "re-acquire failed");
check("held", $key, $other);
step("evalsha release", sub { $c2->evalsha($sha, 1, $key, $other) });
check("gone", $key);
step("quit", sub { $r->quit });
fail("$errors connection errors") if $errors;
