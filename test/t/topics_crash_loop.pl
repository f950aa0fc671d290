# Copyright (c) 2026, the sbqueue authors
#
# A send to a topic is atomic across crashes. A producer sends to a topic
# with five subscriptions (two take everything, one takes even numbers by a
# SQL filter, one has a filter that fails and so dead-letters every copy, one
# forwards every copy to a queue)
# while the server is stopped with mode immediate and started again, 3 times
# (10 with SBQ_FULL=1). Afterwards every send whose commit returned is in each
# subscription it matches exactly once (the failing filter's copy in that
# subscription's dead-letter sub-queue, the forwarded copy in the queue), and
# in no other; a send whose commit
# did not return is in all of them or in none; nothing else is anywhere.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../harness";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SbqFault;

my $cycles = $ENV{SBQ_FULL} ? 10 : 3;
my $db = $SbqFault::DB;
my $node = SbqFault::new_node('topic_crash');
$node->safe_psql($db, q{
	SELECT sbq_create_topic('tc');
	SELECT sbq_create_subscription('tc', 'all1');
	SELECT sbq_create_subscription('tc', 'all2');
	SELECT sbq_create_subscription('tc', 'even');
	SELECT sbq_remove_rule('tc', 'even', '$Default');
	SELECT sbq_add_rule('tc', 'even', 'even', sql_filter => 'n % 2 = 0');
	SELECT sbq_create_queue('fq');
	SELECT sbq_create_subscription('tc', 'fwd', forward_to => 'fq');
	SELECT sbq_create_subscription('tc', 'broken');
	SELECT sbq_remove_rule('tc', 'broken', '$Default');
	SELECT sbq_add_rule('tc', 'broken', 'nope', sql_filter => 'sys.Nope = 1');
});

my $out = "$PostgreSQL::Test::Utils::tmp_check/topic_crash_sends.txt";
unlink $out;
my $ci = SbqFault::conninfo($node);
my $pid = fork;
die "fork: $!" unless defined $pid;
if ($pid == 0)
{
	exec($SbqFault::PYTHON, "$SbqFault::DIR/sbq_topics_load.py", $ci, 'tc', $out,
		4 * $cycles + 6) or die "exec: $!";
}
for my $i (1 .. $cycles)
{
	usleep(int((2 + rand(2)) * 1e6));
	$node->stop('immediate');
	$node->start;
	note("cycle $i: stopped immediately and started again");
}
waitpid($pid, 0);
is($? >> 8, 0, 'the producer ran to its end');

# what the producer knows: "ok N" (committed) or "unknown N"
my %state;
for (split /\n/, slurp_file($out))
{
	$state{$2} = $1 if /^(ok|unknown) (\d+)$/;
}
my @ok = grep { $state{$_} eq 'ok' } keys %state;
my @unknown = grep { $state{$_} eq 'unknown' } keys %state;
note(sprintf('%d sends acknowledged, %d in doubt', scalar @ok, scalar @unknown));
cmp_ok(scalar @ok, '>', 100, 'the producer sent through the crashes');
cmp_ok(scalar @unknown, '>=', 1, 'and some sends were in flight at a crash');

$node->safe_psql($db, 'CREATE TABLE sends (n int PRIMARY KEY, ok boolean NOT NULL)');
$node->safe_psql($db, 'INSERT INTO sends VALUES '
	  . join(',', map { "($_, " . ($state{$_} eq 'ok' ? 'true' : 'false') . ')' } sort { $a <=> $b } keys %state));

# every copy in every subscription (main and dead-letter), by message id: read
# from the tables (a peek shows at most 5,000)
$node->safe_psql($db, q{
	CREATE TABLE copies AS
	SELECT regexp_replace(q.name, '^tc/subscriptions/', '') AS subscription,
	       substr(m.message_id, 2)::int AS n, false AS dead
	  FROM sbq.messages m JOIN sbq.queues q ON q.queue_id = m.queue_id
	UNION ALL
	SELECT regexp_replace(q.name, '^tc/subscriptions/', ''), substr(d.message_id, 2)::int, true
	  FROM sbq.dead_letters d JOIN sbq.queues q ON q.queue_id = d.queue_id
});
is($node->safe_psql($db, q{SELECT count(*) FROM copies WHERE subscription = 'fwd'}),
	'0', 'the subscription that forwards keeps nothing');
is($node->safe_psql($db, q{
	SELECT count(*) FROM (SELECT subscription, n FROM copies GROUP BY 1, 2 HAVING count(*) > 1) d}),
	'0', 'no send is twice in a subscription');
is($node->safe_psql($db, q{SELECT count(*) FROM copies c WHERE NOT EXISTS (SELECT FROM sends s WHERE s.n = c.n)}),
	'0', 'nothing that was never sent is anywhere');

# what each send should have made, and what it made
$node->safe_psql($db, q{
	CREATE TABLE made AS
	SELECT s.n, s.ok,
	       coalesce(string_agg(c.subscription || CASE WHEN c.dead THEN '(dead)' ELSE '' END, ','
	                           ORDER BY c.subscription COLLATE "C"), '') AS got,
	       'all1,all2,broken(dead)' || CASE WHEN s.n % 2 = 0 THEN ',even' ELSE '' END || ',fq' AS want
	  FROM sends s LEFT JOIN copies c ON c.n = s.n GROUP BY s.n, s.ok
});
is($node->safe_psql($db, q{SELECT count(*) FROM made WHERE ok AND got <> want}), '0',
	'every acknowledged send is once in each subscription it matches, the failing filter\'s copy dead-lettered, the forwarded one in the queue, and in no other')
  or diag($node->safe_psql($db, q{SELECT n || ': ' || got || ' (want ' || want || ')' FROM made WHERE ok AND got <> want LIMIT 10}));
is($node->safe_psql($db, q{SELECT count(*) FROM made WHERE NOT ok AND got <> want AND got <> ''}), '0',
	'a send in doubt is in all the subscriptions it matches or in none')
  or diag($node->safe_psql($db, q{SELECT n || ': ' || got FROM made WHERE NOT ok AND got <> want AND got <> '' LIMIT 10}));
note($node->safe_psql($db, q{SELECT count(*) FILTER (WHERE got = want) || ' of the sends in doubt committed' FROM made WHERE NOT ok}));

SbqFault::amcheck($node, 'topic_crash');
SbqFault::log_clean($node, 'topic_crash');
$node->stop;
done_testing();
