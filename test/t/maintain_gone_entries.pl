# Copyright (c) 2026, the sbqueue authors
#
# The shared table of queues (4,096 entries for every database of the
# server) keeps an entry for each queue and topic that a call used. A delete
# does not remove its entity's entry (a call that looked the entity up before
# may still use it), so every queue made, used and deleted kept one for good:
# after 4,096 of them, in any databases, every database of the server lost
# what the table gives (counts gathered, the head of each queue, when the next
# scheduled message is due) until a restart. Maintenance now frees the entries
# of deleted entities once no transaction that began before the delete is
# left. The table filling shows in the server log, once a backend.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

# the whole table for this database (its share is half by default), so
# that a fault here fills the table itself
my $node = SbqNode::preloaded('maintain_gone_entries', qq(
sbqueue.max_queues_per_database = 4096
wal_level = logical
max_wal_senders = 4
max_replication_slots = 4
max_prepared_transactions = 5
));
$node->safe_psql('postgres', q{
	CREATE EXTENSION sbqueue;
	SELECT sbq_create_queue('keep');
	SELECT sbq_create_topic('tkeep');
	SELECT sbq_create_subscription('tkeep', 's');
});

my $full = qr/shared table of queues is full|has used its share/;
sub log_since
{
	my ($offset) = @_;
	return substr(slurp_file($node->logfile), $offset);
}

# $n queues made, sent to, received from and deleted, in one transaction
sub churn
{
	my ($round, $n) = @_;
	$node->safe_psql('postgres', qq{
		DO \$\$BEGIN
		FOR i IN 1 .. $n LOOP
			PERFORM sbq_create_queue('tmp${round}_' || i);
			PERFORM sbq_send('tmp${round}_' || i, 'x'::text);
			PERFORM count(*) FROM sbq_receive('tmp${round}_' || i);
			PERFORM sbq_delete_queue('tmp${round}_' || i);
		END LOOP;
		END\$\$;
		SELECT sbq_send('keep', 'k'::text);
		SELECT sbq_send('tkeep', 't'::text);});
}

sub passes
{
	$node->safe_psql('postgres', 'SELECT sbq_maintain(); SELECT sbq_maintain();');
}

# rounds $from .. $to of churn($round, $n), each followed by two passes
sub churn_rounds
{
	my ($from, $to, $n) = @_;
	for my $round ($from .. $to)
	{
		churn($round, $n);
		passes();
	}
}

# 1. 6,000 queues made and deleted, 1,000 between two maintenance passes:
# the table never fills
my $offset = -s $node->logfile;
churn_rounds(1, 6, 1000);
unlike(log_since($offset), $full,
	'6,000 queues made and deleted between maintenance passes never fill the table');
is( $node->safe_psql('postgres', q{
		SELECT string_agg(queue || ' ' || sent || ' ' || active_count, ', ' ORDER BY queue)
		  FROM sbq_queue_stats WHERE queue IN ('keep', 'tkeep/subscriptions/s')}),
	'keep 6 6, tkeep/subscriptions/s 6 6',
	'the queues and the subscription that stay kept their counts and messages');

# 2. While a transaction that began before the deletes is open, no entry of
# theirs goes (that transaction may have looked them up): the table fills.
# Once it ends, the next passes free them, and a new backend's queue gets an
# entry again.
my $old = $node->background_psql('postgres', on_error_stop => 1);
$old->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM sbq_queues;');
$offset = -s $node->logfile;
churn_rounds(7, 11, 1000);
like(log_since($offset), $full,
	'with a transaction open from before the deletes, their entries stay (the table fills)');
$old->query_safe('COMMIT;');
$old->quit;
passes();
$offset = -s $node->logfile;
$node->safe_psql('postgres', q{
	SELECT sbq_create_queue('after');
	SELECT sbq_send('after', 'a'::text);
	SELECT count(*) FROM sbq_receive('after');});
unlike(log_since($offset), $full,
	'once it ended, a pass freed them: a new queue gets an entry');

# 3. A queue made by a transaction still open when a pass runs is not yet
# seen by the pass, which marks its entry; what it sent there counts as soon
# as it commits (the views passed over the marked entry until the next pass),
# and past two more passes
my $maker = $node->background_psql('postgres', on_error_stop => 1);
$maker->query_safe(q{BEGIN; SELECT sbq_create_queue('pending'); SELECT sbq_send('pending', 'p'::text);
	SELECT count(*) FROM sbq_peek('pending');});
passes();
$maker->query_safe('COMMIT;');
is( $node->safe_psql('postgres', q{
		SELECT sent || ' ' || active_count FROM sbq_queue_stats WHERE queue = 'pending'}),
	'1 1', 'a queue made while a pass ran shows its counts as soon as it commits');
passes();
$node->safe_psql('postgres', q{SELECT sbq_send('pending', 'q'::text);});
passes();
is( $node->safe_psql('postgres', q{
		SELECT sent || ' ' || active_count FROM sbq_queue_stats WHERE queue = 'pending'}),
	'2 2', 'a queue made while a pass ran keeps its counts and messages');
$maker->quit;

# ... and so does one made by a transaction that is prepared while passes run:
# COMMIT PREPARED shows its counts at once
$maker = $node->background_psql('postgres', on_error_stop => 1);
$maker->query_safe(q{BEGIN; SELECT sbq_create_queue('prepq'); SELECT sbq_send('prepq', 'p'::text);});
passes();
$maker->query_safe(q{PREPARE TRANSACTION 'prepq';});
passes();
$maker->query_safe(q{COMMIT PREPARED 'prepq';});
is( $node->safe_psql('postgres', q{
		SELECT sent || ' ' || active_count FROM sbq_queue_stats WHERE queue = 'prepq'}),
	'1 1', 'a queue made by a prepared transaction shows its counts at COMMIT PREPARED');
$maker->quit;

# 4. A transaction that began with its activity not tracked, and tracked
# since (it shows no start), keeps every entry: its queue's send counts
my $untracked = $node->background_psql('postgres', on_error_stop => 1);
$untracked->query_safe(q{SET track_activities = off; BEGIN; SELECT sbq_create_queue('untracked');
	SELECT sbq_send('untracked', 'u'::text); SET track_activities = on; SELECT 1;});
passes();
passes();
$untracked->query_safe('COMMIT;');
$untracked->quit;
passes();
is( $node->safe_psql('postgres', q{
		SELECT sent || ' ' || active_count FROM sbq_queue_stats WHERE queue = 'untracked'}),
	'1 1', 'a transaction tracked only since it began keeps the entries of its queues');

# 5. More entries than a pass used to look at (1,024): 2,500 queues that stay,
# each with an entry, and 4,000 made and deleted among them
$node->safe_psql('postgres', q{
	DO $$BEGIN
	FOR i IN 1 .. 2500 LOOP
		PERFORM sbq_create_queue('stay_' || i);
		PERFORM sbq_send('stay_' || i, 's'::text);
	END LOOP;
	END$$;});
passes();
$offset = -s $node->logfile;
churn_rounds(12, 19, 500);
unlike(log_since($offset), $full,
	'beside 2,500 queues with entries, 4,000 made and deleted never fill the table');

# 6. The counts of every one of them reach the table in a few passes (a pass
# takes at most 512 names, and the next starts where it stopped)
$node->safe_psql('postgres', 'SELECT sbq_maintain(); SELECT sbq_maintain(); SELECT sbq_maintain();');
is( $node->safe_psql('postgres', q{
		SELECT count(DISTINCT c.queue_id) || ' ' || sum(c.sent)
		  FROM sbq.queue_counters c JOIN sbq.queues q USING (queue_id)
		 WHERE q.name LIKE 'stay\\_%'}),
	'2500 2500', 'the counts of 2,500 queues are stored, not only those a pass reached first');

# 7. A logical walsender streams "running" with no transaction: it does not
# stop the entries from going
$node->safe_psql('postgres',
	q{SELECT pg_create_logical_replication_slot('gone_slot', 'test_decoding')});
my $recv = IPC::Run::start(
	[ 'pg_recvlogical', '-d', $node->connstr('postgres'), '-S', 'gone_slot', '--start',
		'-f', '/dev/null' ]);
ok( $node->poll_query_until('postgres', q{
		SELECT EXISTS (SELECT FROM pg_stat_activity
		                WHERE backend_type = 'walsender' AND state = 'active'
		                  AND datname = 'postgres')}),
	'a logical walsender streams');
$offset = -s $node->logfile;
churn_rounds(20, 22, 600);
unlike(log_since($offset), $full,
	'with a logical walsender streaming, 1,800 deleted beside 2,500 never fill the table');
$recv->kill_kill;
$node->safe_psql('postgres', q{SELECT pg_drop_replication_slot('gone_slot')});

# 8. Counts a COMMIT PREPARED added to a queue whose delete is in progress: a
# pass neither waits for the delete nor stores them for the queue gone since
$node->safe_psql('postgres', q{
	SELECT sbq_create_queue('w1');
	SELECT sbq_send('w1', 'a'::text);
	SELECT sbq_maintain();
	BEGIN; SELECT sbq_send('w1', 'b'::text); PREPARE TRANSACTION 'gone_p';
	COMMIT PREPARED 'gone_p';});
my $deleter = $node->background_psql('postgres', on_error_stop => 1);
$deleter->query_safe(q{BEGIN; SELECT sbq_delete_queue('w1');});
my ($rc, $out, $err) = $node->psql('postgres',
	q{SET statement_timeout = '5s'; SELECT sbq_maintain() IS NOT NULL;});
is($rc, 0, 'a pass does not wait for a delete in progress of a queue with prepared counts')
  or diag($err);
$deleter->query_safe('COMMIT;');
$deleter->quit;
passes();
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM sbq.queue_counters c
		 WHERE NOT EXISTS (SELECT FROM sbq.queues q WHERE q.queue_id = c.queue_id)
		   AND NOT EXISTS (SELECT FROM sbq.topics t WHERE t.topic_id = c.queue_id)}),
	'0', 'no counts are stored for the queue once it is gone');

$node->stop;
done_testing();
