# Copyright (c) 2026, the sbqueue authors
#
# F2: a zombie consumer. Process A receives 3 messages (lock 5 s) and is
# SIGSTOPped past its locks (a GC pause, a frozen VM). Consumer B receives
# two of them (delivery_count 2), completes the first and still holds the
# second. A is continued (SIGCONT) and completes all three of its tokens:
# every one fails with SB002: the one B completed, the one B holds (B's lock
# survives and B completes it), and the one nobody touched, whose lock simply
# ran out (it is still in the queue, delivered next with delivery_count 2).
# Exactly one completion per message, in the history and in sbq_queue_stats;
# the checker (I1-I6) and pg_amcheck are clean.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../harness";
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SbqFault;

my $node = SbqFault::new_node('f2');
# 10 s: B's process, started while the zombie's locks hold, may take seconds
# to start on a loaded machine
SbqFault::create_queue($node, 'f2', lock => 10, mdc => 10);
my $ci = SbqFault::conninfo($node);
my $hist = SbqFault::history('f2');
my @common = ('--conninfo', $ci, '--queue', 'f2', '--history', $hist);
my $trigger = "$PostgreSQL::Test::Utils::tmp_check/f2.go";
unlink $trigger;

my ($rc, $out) = SbqFault::run('send', 30, @common, '--count', 3);
is($rc, 0, 'three messages sent') or diag($out);
my @seqs = map { $_->{seq} } @{ SbqFault::last_json($out) };

# A receives, and is frozen at once
my $zombie = SbqFault::spawn('zombie', @common, '--max', 3, '--trigger', $trigger, '--timeout', 60);
my $line = SbqFault::wait_history($hist, qr/"client":"zombie".*"ev":"done"/, 30);
kill 'STOP', $zombie->{pid};
ok(defined $line, 'the zombie\'s receive returned');
my $ra = decode_json($line);
my @a = @{ $ra->{msgs} // [] };
is($ra->{outcome}, 'ok', 'its receive committed');
is_deeply([ map { $_->{seq} } @a ], \@seqs, 'it holds all three messages');
my $stat = '';
for (1 .. 100)     # the signal is delivered asynchronously
{
	$stat = slurp_file("/proc/$zombie->{pid}/stat");
	last if $stat =~ /^\d+ \(.*\) T /;
	usleep(20_000);
}
like($stat, qr/^\d+ \(.*\) T /, 'the zombie is stopped (SIGSTOP)');
my $lu = (sort { $b <=> $a } map { $_->{lu} } @a)[0];

# while A is frozen and its locks are valid, B gets nothing
cmp_ok(time, '<', $lu - 1.5, 'the zombie was frozen well within its locks (the test is not too slow)');
($rc, $out) = SbqFault::run('once', 20, @common, '--max', 3, '--settle', 'none');
is(scalar @{ SbqFault::last_json($out)->{msgs} }, 0, 'while the zombie\'s locks are valid, B receives nothing');

# past A's locks: B receives two, completes the first, holds the second
usleep(int(($lu + 0.3 - time) * 1e6)) if $lu + 0.3 > time;
($rc, $out) = SbqFault::run('once', 20, @common, '--max', 2, '--settle', 'none');
my @b = @{ SbqFault::last_json($out)->{msgs} // [] };
is_deeply([ map { $_->{seq} } @b ], [ @seqs[0, 1] ], 'after the zombie\'s locks ran out, B receives the first two');
is_deeply([ map { $_->{dc} } @b ], [ 2, 2 ], 'with delivery_count 2');
($rc, $out) = SbqFault::run('settle', 20, @common, '--token', $b[0]{token});
is(SbqFault::last_json($out)->[0]{outcome}, 'ok', 'B completes the first');

# A wakes up and completes its three stale tokens
open(my $fh, '>', $trigger) or die;
close $fh;
kill 'CONT', $zombie->{pid};
$rc = SbqFault::finish($zombie, 30);
is($rc, 0, 'the zombie ran to its end');
my @zs = grep { /"client":"zombie"/ && /"op":"complete"/ && /"ev":"done"/ } split /\n/, slurp_file($hist);
my @zr = map { decode_json($_) } @zs;
is(scalar @zr, 3, 'the zombie tried to complete its three tokens');
is_deeply([ map { ($_->{outcome} // '') . ' ' . ($_->{sqlstate} // '') } @zr ], [ ('fail SB002') x 3 ],
	'every one fails with SB002: completed by B, held by B, and expired');

($rc, $out) = SbqFault::run('settle', 20, @common, '--token', $b[1]{token});
is(SbqFault::last_json($out)->[0]{outcome}, 'ok', 'B\'s lock on the second survived the zombie: B completes it');
($rc, $out) = SbqFault::run('once', 20, @common, '--max', 5, '--settle', 'complete');
my $last = SbqFault::last_json($out);
is_deeply([ map { "$_->{seq}:$_->{dc}" } @{ $last->{msgs} } ], [ "$seqs[2]:2" ],
	'the third, whose expired lock the zombie tried to complete, is still there: delivery_count 2');
is_deeply($last->{settled}, ['ok'], 'and completed now');

is($node->safe_psql($SbqFault::DB, "SELECT count(*) FROM sbq_peek('f2', 100)"), '0', 'the queue is empty');
is($node->safe_psql($SbqFault::DB, "SELECT completed FROM sbq_queue_stats WHERE queue = 'f2'"),
	'3', 'sbq_queue_stats counts exactly 3 completions');
my @ok = grep { /"op":"complete"/ && /"ev":"done"/ && /"outcome":"ok"/ } split /\n/, slurp_file($hist);
is(scalar @ok, 3, 'the history has exactly 3 successful completes, one per message');

my $sum = SbqFault::drain_and_check($ci, 'f2', $hist, 'F2');
is($sum->{completed}, 3, 'the checker saw each message completed once');
SbqFault::amcheck($node, 'F2');

$node->stop;
done_testing();
