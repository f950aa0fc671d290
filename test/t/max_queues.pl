# Copyright (c) 2026, the sbqueue authors
#
# sbqueue.max_queues sizes the shared table of queues (4,096 entries for every
# database of the server until now, fixed); sbqueue.max_queues_per_database is
# one database's share of it (half by default), so that one database, with
# thousands of queues or a churn of them that a held transaction keeps from
# being freed, cannot take every entry of the server. A queue without an
# entry works, slower: it stores its counters at each call, which is what
# this test looks at (the maintenance worker is off, so counts kept in the
# table stay there until a pass).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

my $node = SbqNode::preloaded('max_queues', qq(
sbqueue.max_queues = 256
));
for my $db ('a', 'b')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION sbqueue');
}

my $share = qr/has used its share of sbqueue's shared table of queues \(128 entries\)/;
my $full = qr/shared table of queues is full/;
sub log_since
{
	my ($offset) = @_;
	return substr(slurp_file($node->logfile), $offset);
}

# $n queues named $prefix_1 .. _$n made in $db, one message sent to each
sub fill
{
	my ($db, $prefix, $n) = @_;
	$node->safe_psql($db, qq{
		DO \$\$BEGIN
		FOR i IN 1 .. $n LOOP
			PERFORM sbq_create_queue('${prefix}_' || i);
			PERFORM sbq_send('${prefix}_' || i, 'x'::text);
		END LOOP;
		END\$\$;});
}

# how many of the queues named $prefix_* stored their counts at the call
# (those without an entry), and what the stats say they sent
sub stored
{
	my ($db, $prefix) = @_;
	return $node->safe_psql($db, qq{
		SELECT (SELECT count(DISTINCT c.queue_id)
		          FROM sbq.queue_counters c JOIN sbq.queues q USING (queue_id)
		         WHERE q.name LIKE '${prefix}\\_%' AND c.sent > 0)
		       || ' ' ||
		       (SELECT sum(sent) FROM sbq_queue_stats WHERE queue LIKE '${prefix}\\_%')});
}

# what sbq_queue_table() says in $db: capacity, in_use (the server's),
# database_share, database_in_use, database_deleted
sub table_fill
{
	my ($db) = @_;
	return $node->safe_psql($db, q{SELECT concat_ws(' ', capacity, in_use, database_share,
		database_in_use, database_deleted) FROM sbq_queue_table()});
}

# 1. A database past its share (128 of 256: its own entry and 127 queues):
# the rest of its queues store their counts at each call, and the stats
# count every send either way
my $offset = -s $node->logfile;
fill('a', 'qa', 200);
is(stored('a', 'qa'), '73 200',
	'past its share of 128, 73 of 200 queues have no entry; the stats count all 200 sends');
like(log_since($offset), $share, 'the server log says the database used its share');
unlike(log_since($offset), $full, 'the table itself is not full');
is(table_fill('a'), '256 128 128 128 0', 'sbq_queue_table() shows the share used up');

# 2. Another database still has the rest of the table
$offset = -s $node->logfile;
fill('b', 'qb', 100);
is(stored('b', 'qb'), '0 100', 'another database gets an entry for each of its 100 queues');
unlike(log_since($offset), qr/$share|$full/, 'nothing of it in the log');
is(table_fill('b'), '256 229 128 101 0', 'sbq_queue_table() shows the database\'s entries and the server\'s');

# 3. Entries that maintenance frees leave the database's share: 150 queues
# deleted, two passes, and 100 new queues of the database all get one
$node->safe_psql('a', q{
	SELECT count(sbq_delete_queue('qa_' || i)) FROM generate_series(1, 150) i;});
$node->safe_psql('a', 'SELECT sbq_maintain();');
is(table_fill('a'), '256 229 128 128 127',
	'after a pass sbq_queue_table() shows the entries of the deleted queues, not freed yet');
$node->safe_psql('a', 'SELECT sbq_maintain();');
is(table_fill('a'), '256 102 128 1 0', 'after the next they are freed');
fill('a', 'ra', 100);
is(stored('a', 'ra'), '0 100', 'the entries freed by maintenance count out of the share');

# 4. So do those of an extension dropped: made again, the database's share
# is whole
$node->safe_psql('b', 'DROP EXTENSION sbqueue; CREATE EXTENSION sbqueue;');
fill('b', 'rb', 120);
is(stored('b', 'rb'), '0 120', 'the entries of a dropped extension count out of the share');

# 5. The share is a reload away; the table's size is the hard bound (a
# restart to change). a holds 1 + 100 entries (qa_151 to qa_200 never had
# one), b 1 + 120; 10 more fit, and then 24 of the next 100
$offset = -s $node->logfile;
$node->append_conf('postgresql.conf', "sbqueue.max_queues_per_database = 256\n");
$node->reload;
fill('a', 'sa', 10);
is(stored('a', 'sa'), '0 10', 'a share raised by a reload gives new queues an entry');
fill('a', 'ta', 100);
is(stored('a', 'ta'), '76 100', 'until the table itself is full');
like(log_since($offset), $full, 'which the server log says');
is(table_fill('a'), '256 256 256 135 0', 'and sbq_queue_table() shows the table full');

# 6. A restart with a larger table, and the share half of it again
$node->append_conf('postgresql.conf',
	"sbqueue.max_queues = 1024\nsbqueue.max_queues_per_database = -1\n");
$node->restart;
is($node->safe_psql('a', 'SHOW sbqueue.max_queues'), '1024', 'the table is sized at start');
$node->safe_psql('a', q{
	SELECT count(sbq_delete_queue(queue)) FROM sbq_queues WHERE queue LIKE 'ta\_%';});
fill('a', 'ta', 300);
is(stored('a', 'ta'), '0 300', 'every queue of the larger table has an entry');

# 7. A scheduled send made while its queue had no entry, still open when the
# queue gets one (the share raised by a reload), and a receive's look in
# between that cannot see it: once it commits and is due, a receive
# activates it, with no maintenance (the look's "none" stayed for good)
$node->safe_psql('postgres', 'CREATE DATABASE g');
$node->safe_psql('g', 'CREATE EXTENSION sbqueue');
$node->append_conf('postgresql.conf', "sbqueue.max_queues_per_database = 1\n");
$node->reload;
$node->safe_psql('g', q{SELECT sbq_create_queue('q'); SELECT sbq_send('q', 'warm'::text);});
my $sender = $node->background_psql('g', on_error_stop => 1);
$sender->query_safe(q{BEGIN;
	SELECT sbq_send('q', 'due'::text,
	                scheduled_enqueue_time => clock_timestamp() + interval '3 s');});
$node->append_conf('postgresql.conf', "sbqueue.max_queues_per_database = -1\n");
$node->reload;
is( $node->safe_psql('g', q{
		SELECT string_agg(convert_from(body, 'UTF8'), ',')
		  FROM sbq_receive('q', 10, receive_mode => 'receive_and_delete')}),
	'warm', 'a receive gives the queue an entry while the scheduled send is open');
$sender->query_safe('COMMIT;');
$sender->quit;
usleep(3_500_000);
is( $node->safe_psql('g', q{
		SELECT string_agg(convert_from(body, 'UTF8'), ',')
		  FROM sbq_receive('q', 10, receive_mode => 'receive_and_delete')}),
	'due', 'once due, the scheduled message is activated by a receive');

# 8. The launcher sees every database, beside more than 4,096 entries (it
# read at most 4,096 entries); and one database that holds its whole share
# but was refused nothing does not keep the others busy
$node->append_conf('postgresql.conf', qq(
sbqueue.max_queues = 8192
sbqueue.max_queues_per_database = 8192
sbqueue.enable_maintenance_worker = on
sbqueue.max_workers = 8
sbqueue.maintenance_interval = 200ms
));
$node->restart;
fill('a', 'big', 4500);
for my $i (1 .. 6)
{
	$node->safe_psql('postgres', "CREATE DATABASE w$i");
	$node->safe_psql("w$i", q{
		CREATE EXTENSION sbqueue;
		SELECT sbq_create_queue('s');
		SELECT sbq_send('s', 'later'::text, scheduled_enqueue_time => now() + interval '20 min');
		SELECT count(*) FROM sbq_receive('s');});
}
ok( $node->poll_query_until('w1', q{
		SELECT count(*) = 6 FROM sbq_maintenance_status()
		 WHERE database LIKE 'w_' AND work_due > now() + interval '15 min'}, 't'),
	'each database shows when its scheduled message is due');
$node->safe_psql('a', 'DROP EXTENSION sbqueue');

$offset = -s $node->logfile;
$node->append_conf('postgresql.conf', "sbqueue.max_queues_per_database = 2\n");
$node->reload;
$node->safe_psql('w1', q{SELECT sbq_create_queue('t'); SELECT sbq_send('t', 'x'::text);});
sleep(3);
my $passes = q{SELECT passes FROM sbq_maintenance_status() WHERE database = 'w2'};
my $before = $node->safe_psql('w1', $passes);
sleep(5);
my $after = $node->safe_psql('w1', $passes);
cmp_ok($after - $before, '<=', 2,
	'an idle database is not kept busy by another that holds its whole share');
my @said = log_since($offset) =~ /has used its share/g;
cmp_ok(scalar(@said), '<=', 1,
	'the server log says it once, not at each maintenance pass (a new process each)');

$node->stop;
done_testing();
