# Perl's Redis (Debian's libredis-perl 2.000) or Redis::Fast
# (libredis-fast-perl 0.34) through lockproxy: the handshakes their
# constructor options send, then the lock flow Perl code writes with them,
# Redis::DistLock's and Redis::Setlock's commands included.
#
# Run by compat/langs_test.go, against one plain redis-server and through
# lockproxy:
#
#     perl redis.pl PORT PREFIX MODULE      (MODULE: Redis or Redis::Fast)
#
# Each "STEP name result" line is compared with the plain run's; at each
# "CHECK ..." line the test reads the masters and answers "ok" (runDriven).
# An assertion that fails exits 1 with the reason on stderr.
use strict;
use warnings;

my ($port, $prefix, $module) = @ARGV;
eval "require $module; 1" or die "cannot load $module: $@";
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

# step runs the code and prints its result, or the first word of the error
# it died with (the error code: both servers' texts differ in detail).
sub step {
    my ($name, $code) = @_;
    my @r = eval { $code->() };
    if ($@) {
        my ($word) = $@ =~ /\]\s*(\S+)/;
        ($word) = $@ =~ /^(\S+)/ unless defined $word;
        print "STEP $name error $word\n";
        return;
    }
    print "STEP $name ", join(" ", map { show($_) } @r), "\n";
    return wantarray ? @r : $r[0];
}

my $srv = "127.0.0.1:$port";
sub connect_with { $module->new(server => $srv, cnx_timeout => 5, read_timeout => 5, @_) }

print "$module ", $module->VERSION, "\n";
my $key = $prefix . "lock";

# Handshakes: a client name (CLIENT SETNAME on connect, a string or a code
# ref), reconnect options, an on_connect callback that selects database 0;
# then the commands libraries send to probe the server (Redis::DistLock and
# Redis::Setlock check redis_version >= 2.6.12).
step("connect name", sub { connect_with(name => "pl-client")->ping });
step("connect name sub", sub { connect_with(name => sub { "pl-sub" })->client_getname });
step("connect reconnect every", sub { connect_with(reconnect => 2, every => 100_000)->ping });
step("connect on_connect select 0", sub { connect_with(on_connect => sub { $_[0]->select(0) })->ping });
my $r = connect_with();
step("select 0", sub { $r->select(0) });
step("info redis_version >= 2.6.12", sub {
    my ($maj, $min, $rev) = split /\./, $r->info->{redis_version};
    ($maj <=> 2 || $min <=> 6 || $rev <=> 12) >= 0 ? "yes" : "no";
});
step("info server", sub { exists $r->info("server")->{redis_version} ? "yes" : "no" });
step("client_setname", sub { $r->client_setname("pl-named") });
step("client_getname", sub { $r->client_getname });
step("echo", sub { $r->echo("hi") });
step("auth without requirepass", sub { $r->auth("secret") });

# The lock flow.
my ($tok, $other) = ("pl-token-a", "pl-token-b");
my $c2 = connect_with();
expect((step("set nx px", sub { $r->set($key, $tok, "NX", "PX", 5000) }) // "") eq "OK", "SET NX PX refused a free lock");
check("held", $key, $tok);
expect(!defined step("contender set nx px", sub { $c2->set($key, $other, "NX", "PX", 5000) }), "a contender got a held lock");
step("get", sub { $r->get($key) });
step("exists", sub { $r->exists($key) });
step("pttl in 1000..5000", sub { my $t = $r->pttl($key); $t >= 1000 && $t <= 5000 ? "yes" : "no" });
my $extend = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
my $release = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
expect((step("eval extend", sub { $r->eval($extend, 1, $key, $tok, 8000) }) // 0) == 1, "extend failed");
check("pttl", $key, 6000, 8000);
step("stranger's extend", sub { $c2->eval($extend, 1, $key, $other, 9000) });
step("stranger's release", sub { $c2->eval($release, 1, $key, $other) });
check("held", $key, $tok);
check("pttl", $key, 4000, 8000);
# Redis::DistLock and Redis::Setlock load their release with SCRIPT LOAD
# and run it with EVALSHA (Setlock: EVAL again on NOSCRIPT).
my $sha = step("script_load", sub { $r->script_load($release) });
step("script_exists", sub { $r->script_exists($sha) });
step("evalsha of an unknown sha1", sub { $r->evalsha("0" x 40, 1, $key, $tok) });
step("pipelined get, pttl, exists", sub {
    my @got;
    $r->get($key, sub { push @got, $_[0] });
    $r->pttl($key, sub { push @got, $_[0] >= 1000 && $_[0] <= 8000 ? "yes" : "no" });
    $r->exists($key, sub { push @got, $_[0] });
    $r->wait_all_responses;
    @got;
});
# redlock-rb's value-and-PTTL read, sent from Perl.
step("value and pttl read", sub {
    my ($v, $t) = @{ [ $r->eval('return { redis.call("get", KEYS[1]), redis.call("pttl", KEYS[1]) }', 1, $key) ] };
    ($v, $t >= 1000 && $t <= 8000 ? "yes" : "no");
});
# The holder's WATCH, GET, MULTI, DEL, EXEC.
step("watch, get, multi del, exec", sub {
    $r->watch($key);
    my $v = $r->get($key);
    $r->multi;
    $r->del($key);
    $r->exec;
});
check("gone", $key);
# Re-acquire with EX (Redis::Setlock's SET key token EX s NX); release by
# EVALSHA of the loaded script.
expect((step("set ex nx", sub { $c2->set($key, $other, "EX", 5, "NX") }) // "") eq "OK", "re-acquire failed");
check("held", $key, $other);
step("evalsha release", sub { $c2->evalsha($sha, 1, $key, $other) });
check("gone", $key);
step("quit", sub { $r->quit });
