# Copyright (c) 2026, the sbqueue authors
#
# F1: a consumer process is SIGKILLed right after a committed receive of 10
# messages (lock 10 s). The messages stay invisible to other receivers until
# their locked_until, then are receivable at once (by receive itself, within
# locked_until + 1 s), with delivery_count 2. The dead consumer's tokens,
# replayed on a new connection, fail with SB002: after the lock ran out, and
# after the message was handed to someone else. The history of every call
# passes the checker (I1-I6) after a final drain, and pg_amcheck is clean.
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

my $node = SbqFault::new_node('f1');
# 10 s: the probes below must have time to call while it holds
my $lock = 10;
SbqFault::create_queue($node, 'f1', lock => $lock, mdc => 10);
my $ci = SbqFault::conninfo($node);
my $hist = SbqFault::history('f1');
my @common = ('--conninfo', $ci, '--queue', 'f1', '--history', $hist);

my ($rc, $out) = SbqFault::run('send', 30, @common, '--count', 10);
is($rc, 0, 'ten messages sent') or diag($out);
my $sent = SbqFault::last_json($out);
my @seqs = map { $_->{seq} } @$sent;

# the consumer: one receive of 10, then it sleeps holding the connection
my $c = SbqFault::spawn('hold', @common, '--max', 10);
my $line = SbqFault::wait_history($hist, qr/"client":"hold".*"ev":"done"/, 30);
ok(defined $line, 'the consumer\'s receive returned');
kill 'KILL', $c->{pid};
my $t_kill = time;
waitpid($c->{pid}, 0);
my $recv = decode_json($line);
is($recv->{outcome}, 'ok', 'the receive committed before the kill');
my @msgs = @{ $recv->{msgs} // [] };
is(scalar @msgs, 10, 'it locked all 10 messages');
is_deeply([ map { $_->{seq} } @msgs ], \@seqs, 'lowest sequence numbers first');
is_deeply([ map { $_->{dc} } @msgs ], [ (1) x 10 ], 'first delivery: delivery_count 1');
my $lu = (sort { $a <=> $b } map { $_->{lu} } @msgs)[0];
my $lu_max = (sort { $b <=> $a } map { $_->{lu} } @msgs)[0];
cmp_ok($lu - $t_kill, '>', 2, 'the kill came well before locked_until (the test is not too slow)');
cmp_ok(abs($lu - ($recv->{t_invoke} + $lock)), '<', 1, "locked_until is the receive time + $lock s");

ok($node->poll_query_until($SbqFault::DB,
		"SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'sbq-load-hold%'", '0'),
	'the dead consumer\'s backend has gone');
is($node->safe_psql($SbqFault::DB, "SELECT count(*) FROM sbq_peek('f1', 100) WHERE locked_until IS NOT NULL"),
	'10', 'the 10 messages are still in the queue, locked');

# the next holder's locks last a minute: it is checked after two more client
# processes, each of which takes up to 5 s to start on a loaded machine
$node->safe_psql($SbqFault::DB,
	"SELECT sbq_update_queue('f1', lock_duration => interval '60 seconds')");

# the receive that is to find them once the locks ran out: started now,
# connected, and made at locked_until + 0.3 s by the client itself, so that
# the time checked below is the call's, not a process start's on a loaded
# machine
my $timed = SbqFault::spawn('once', @common, '--max', 10, '--settle', 'none',
	'--at', $lu_max + 0.3);

# invisible until locked_until: receives on other connections get nothing.
# Each probe connects, then calls only if still 0.6 s before the first lock
# ends (a probe process that a loaded machine started late does not call)
my ($probes, $seen) = (0, 0);
while (time < $lu - 0.6)
{
	my ($r, $o) = SbqFault::run('once', 20, @common, '--max', 10, '--settle', 'none',
		'--not-after', $lu - 0.6);
	my $res = SbqFault::last_json($o);
	next if ($res->{outcome} // '') eq 'late';
	$seen += scalar @{ $res->{msgs} // [] };
	$probes++;
	usleep(200_000);
}
cmp_ok($probes, '>=', 2, "receives tried while the locks were valid ($probes)");
is($seen, 0, 'no receive got a message under the dead consumer\'s lock');

# the lock runs out: a replayed token is lock lost
usleep(int(($lu_max + 0.3 - time) * 1e6)) if $lu_max + 0.3 > time;
($rc, $out) = SbqFault::run('settle', 20, @common, '--token', $msgs[0]{token});
my $s = SbqFault::last_json($out);
is($s->[0]{outcome}, 'fail', 'the dead consumer\'s token, replayed after its lock ran out, fails');
is($s->[0]{sqlstate}, 'SB002', 'with SB002 (message lock lost)');

# then receivable at once, delivery_count 2: the receive made at
# locked_until + 0.3 s got them
SbqFault::finish($timed, 30);
my $again = SbqFault::last_json(SbqFault::output($timed));
my @m2 = @{ $again->{msgs} // [] };
is(scalar @m2, 10, 'after locked_until all 10 messages are receivable again');
is_deeply([ map { $_->{seq} } @m2 ], \@seqs, 'the same messages');
is_deeply([ map { $_->{dc} } @m2 ], [ (2) x 10 ], 'the next delivery has delivery_count 2');
cmp_ok($again->{t_call} // 0, '<', $lu_max + 1.3,
	'receivable within locked_until + 1 s (the receive that got them was made then)');

# a replayed token after the message went to another consumer: lock lost, and
# the new holder's lock is untouched
($rc, $out) = SbqFault::run('settle', 20, @common, '--token', join(',', map { $_->{token} } @msgs[1 .. 9]));
$s = SbqFault::last_json($out);
is_deeply([ map { $_->{sqlstate} // 'ok' } @$s ], [ ('SB002') x 9 ],
	'the other 9 old tokens, replayed while a new consumer holds the messages, fail SB002');
($rc, $out) = SbqFault::run('settle', 20, @common, '--token', join(',', map { $_->{token} } @m2));
$s = SbqFault::last_json($out);
is_deeply([ map { $_->{outcome} } @$s ], [ ('ok') x 10 ], 'the new holder completes all 10');
is($node->safe_psql($SbqFault::DB, "SELECT count(*) FROM sbq_peek('f1', 100)"), '0', 'the queue is empty');
is($node->safe_psql($SbqFault::DB, "SELECT received || ' ' || completed FROM sbq_queue_stats WHERE queue = 'f1'"),
	'20 10', 'sbq_queue_stats: 20 deliveries, 10 completions');

my $sum = SbqFault::drain_and_check($ci, 'f1', $hist, 'F1');
is($sum->{completed}, 10, 'the checker saw 10 messages completed once each');
is($sum->{deliveries}, 20, 'and 20 deliveries');
SbqFault::amcheck($node, 'F1');

$node->stop;
done_testing();
