# Copyright (c) 2026, the sbqueue authors
#
# The maintenance worker starts as soon as a restore runs CREATE EXTENSION, and
# a pass ran while the restore loaded the tables (found by a review):
# - pg_dump restores sbq.message_seq's value after the tables' data, so a pass
#   numbered the scheduled messages it activated from the fresh sequence: 1,
#   2, ..., numbers restored rows had. One that collided with a dead letter's
#   made every later pass, and every receive of its queue, fail for good;
# - with pg_restore -j the small table of ties between a topic's scheduled
#   messages and their copies was loaded while sbq.messages still was, and a
#   pass forgot every tie whose copy it did not find: the topic's scheduled
#   messages could no longer be cancelled.
# A pass now does nothing ("skipped") while a COPY into one of sbqueue's tables
# runs in the database, or while sbq.message_seq is behind the tables' numbers.
# The first checks set up those states directly (and ties loaded while
# sbq.messages has no row: kept); the last restores a dump with pg_restore -j 2
# while the worker runs (where a pass between two COPYs forgot every tie).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

my $node = SbqNode::preloaded('maintain_restore');
$node->safe_psql('postgres', q{
	CREATE EXTENSION sbqueue;
	SELECT sbq_create_queue('sch');
	SELECT sbq_send('sch', 'first');
	SELECT sbq_send('sch', 'later', scheduled_enqueue_time => now() + interval '1 second');
});

# the sequence behind the rows, as before a restore sets it
$node->safe_psql('postgres', q{SELECT setval('sbq.message_seq', 1, false)});
sleep 2;
is($node->safe_psql('postgres', q{
	SELECT sbq_maintain()->>'skipped';
	SELECT string_agg(sequence_number || ' ' || state, ', ' ORDER BY sequence_number) FROM sbq_peek('sch', 10)}),
	"true\n1 active, 2 scheduled",
	'a pass while sbq.message_seq is behind the tables does nothing (it activated the due message as number 1)');
$node->safe_psql('postgres', q{SELECT setval('sbq.message_seq', 100)});
is($node->safe_psql('postgres', q{
	SELECT sbq_maintain()->>'skipped';
	SELECT string_agg(sequence_number || ' ' || state, ', ' ORDER BY sequence_number) FROM sbq_peek('sch', 10)}),
	"false\n1 active, 101 active", '... and once the sequence is set, the due message joins the back of the queue');
# an operator's setval(..., false) ahead of the rows is no restore (found by a review)
$node->safe_psql('postgres', q{SELECT setval('sbq.message_seq', 102, false)});
is($node->safe_psql('postgres', q{SELECT sbq_maintain()->>'skipped'}), 'false',
	'a sequence never called whose next value is above every row does not stop the passes');
$node->safe_psql('postgres', q{SELECT setval('sbq.message_seq', 101, false)});
is($node->safe_psql('postgres', q{SELECT sbq_maintain()->>'skipped'}), 'true',
	'... one whose next value a row has does');
$node->safe_psql('postgres', q{SELECT setval('sbq.message_seq', 200)});

# a COPY into one of the tables, as a restore's
my $copy = $node->background_psql('postgres', on_error_stop => 0);
$copy->{stdin} .= "BEGIN;\nCOPY sbq.duplicate_ids FROM stdin;\n";
$copy->{run}->pump_nb;
ok(SbqNode::poll_until($node, 'postgres',
		q{SELECT count(*) FROM pg_stat_progress_copy WHERE relid = 'sbq.duplicate_ids'::regclass}, '1'),
	'a COPY into sbq.duplicate_ids is running');
is($node->safe_psql('postgres', q{SELECT sbq_maintain()->>'skipped'}), 'true',
	'a pass while a COPY into one of the tables runs does nothing');
$copy->{stdin} .= "\\.\nROLLBACK;\n";
$copy->{run}->pump_nb;
ok(SbqNode::poll_until($node, 'postgres',
		q{SELECT count(*) FROM pg_stat_progress_copy WHERE relid = 'sbq.duplicate_ids'::regclass}, '0'),
	'... which ends');
is($node->safe_psql('postgres', q{SELECT sbq_maintain()->>'skipped'}), 'false', '... and then a pass runs');
$copy->quit;

# Ties of a topic's scheduled messages loaded before sbq.messages (a parallel
# restore loads the small table first): a pass that ran then forgot them all,
# as ties of copies that went. With no message at all, none is forgotten.
$node->safe_psql('postgres', q{
	SELECT sbq_create_topic('early');
	SELECT sbq_create_subscription('early', 'a');
	SELECT sbq_create_subscription('early', 'b');
	SELECT sbq_send('early', 'later', scheduled_enqueue_time => now() + interval '1 hour');
	DELETE FROM sbq.messages;
});
is($node->safe_psql('postgres', q{
	SELECT sbq_maintain()->>'skipped';
	SELECT count(*) FROM sbq.topic_scheduled}),
	"false\n2", 'a pass while sbq.messages has no row keeps the ties of scheduled topic messages');
$node->safe_psql('postgres', q{SELECT sbq_send('sch', 'again')});
is($node->safe_psql('postgres', q{
	SELECT sbq_maintain()->>'skipped';
	SELECT count(*) FROM sbq.topic_scheduled}),
	"false\n0", '... and forgets them once a message exists and their copies do not');

# A subscription that forwards to another topic: the tie's copy is that
# topic's number, never a row of sbq.messages, and a pass forgot it, so a
# cancel on the first topic left the copy scheduled down the second (found by
# a review). Such a tie stays while the second topic's own ties do.
$node->safe_psql('postgres', q{
	SELECT sbq_create_topic('fa');
	SELECT sbq_create_topic('fb');
	SELECT sbq_create_subscription('fb', 'x');
	SELECT sbq_create_subscription('fa', 'keep');
	SELECT sbq_create_subscription('fa', 'onward', forward_to => 'fb');
});
my $tsched = $node->safe_psql('postgres',
	q{SELECT sbq_send('fa', 'sched', scheduled_enqueue_time => now() + interval '1 hour')});
is($node->safe_psql('postgres', q{
	SELECT sbq_maintain()->>'skipped';
	SELECT count(*) FROM sbq.topic_scheduled}),
	"false\n3", 'a pass keeps the tie of a copy forwarded to another topic');
is($node->safe_psql('postgres', qq{
	SELECT sbq_cancel_scheduled('fa', $tsched);
	SELECT sum(scheduled_count) FROM sbq_queue_stats WHERE queue IN ('fa/subscriptions/keep', 'fb/subscriptions/x')}),
	"\n0", '... so a cancel on the first topic still takes the copy out of the second');

# A dump restored with pg_restore -j 2 while the worker runs: a topic whose
# scheduled messages have copies in two subscriptions, messages scheduled to be
# due by the time of the restore, and a queue deep enough that its rows take a
# while to load.
$node->safe_psql('postgres', q{
	CREATE DATABASE src;
	ALTER SYSTEM SET sbqueue.enable_maintenance_worker = on;
	ALTER SYSTEM SET sbqueue.maintenance_interval = '100ms';
	SELECT pg_reload_conf();
});
$node->safe_psql('src', q{
	CREATE EXTENSION sbqueue;
	SELECT sbq_create_topic('t');
	SELECT sbq_create_subscription('t', 's1');
	SELECT sbq_create_subscription('t', 's2');
	SELECT sbq_send('t', 'in an hour ' || i, scheduled_enqueue_time => now() + interval '1 hour')
	  FROM generate_series(1, 5) i;
	SELECT sbq_create_queue('deep');
	SELECT count(*) FROM generate_series(1, 60) g,
		LATERAL (SELECT sbq_send_batch('deep', array_fill(repeat('x', 200), ARRAY[2000])) WHERE g > 0) b;
	SELECT sbq_create_queue('due');
	SELECT sbq_send('due', 'due ' || i, scheduled_enqueue_time => now() + interval '2 seconds')
	  FROM generate_series(1, 5) i;
});
my $top = $node->safe_psql('src', q{SELECT last_value FROM sbq.message_seq});
my $ties = $node->safe_psql('src', q{SELECT count(*) FROM sbq.topic_scheduled});
is($ties, '10', 'the source ties 5 scheduled topic messages to 10 copies');
my $dump = PostgreSQL::Test::Utils::tempdir() . '/src.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $node->connstr('src') ], 'pg_dump -Fc');
sleep 3;    # the 'due' messages are due when they are restored
$node->safe_psql('postgres', 'CREATE DATABASE dst');
$node->command_ok([ 'pg_restore', '-j', '2', '-d', $node->connstr('dst'), $dump ],
	'pg_restore -j 2 while the maintenance worker runs');
ok(SbqNode::poll_until($node, 'dst',
		q{SELECT count(*) FROM sbq_peek('due', 10) WHERE state = 'active'}, '5'),
	'the due messages are activated after the restore');
is($node->safe_psql('dst', qq{SELECT count(*) FROM sbq_peek('due', 10) WHERE sequence_number <= $top}), '0',
	'... under numbers above every number the source gave');
is($node->safe_psql('dst', q{SELECT count(*) FROM sbq.topic_scheduled}), $ties,
	'the ties of the scheduled topic messages are all there');
is($node->safe_psql('dst', q{
	SELECT sbq_cancel_scheduled('t', (SELECT min(topic_sequence_number) FROM sbq.topic_scheduled));
	SELECT sum(scheduled_count) FROM sbq_queue_stats WHERE queue LIKE 't/%'}),
	"\n8", '... so cancelling one takes its copy out of each subscription');

done_testing();
