# Copyright (c) 2026, the sbqueue authors
#
# A receive behind a backlog of messages whose time to live has passed, with
# maintenance not running (found by a review):
# - the receive that locks in rows, and receive-and-delete, took one expired
#   message per pass, and each pass walked from the head over the index
#   entries of every row the passes before it had removed (no scan can skip
#   those before the transaction commits): behind 4,000 messages a receive
#   read 8 million index entries (now about 8,000), and its time grew with
#   the square of the backlog;
# - the peek-lock receive with locks in memory stopped after taking 10,000
#   such messages off the queue and returned nothing, though a message that
#   could be received waited behind them.
# The index entries a receive reads are counted in its own transaction
# (pg_stat_get_xact_tuples_returned): a count, not a time, so a loaded machine
# does not change it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

my $node = SbqNode::preloaded('receive_expired_backlog');
$node->safe_psql('postgres', 'CREATE EXTENSION sbqueue');

# $n messages into $q that expire $ttl from now
sub send_expiring
{
	my ($q, $n, $ttl) = @_;
	$node->safe_psql('postgres', qq{
		SELECT count(*) FROM generate_series(1, $n / 500) g,
			LATERAL (SELECT sbq_send_batch('$q', array_fill('expiring'::text, ARRAY[500]),
			                               time_to_live => '$ttl') WHERE g > 0) b;
	});
}

# In one transaction: the bodies a receive of one message returns, and the
# index entries of sbqueue's tables it read.
sub receive_one
{
	my ($q, $settings) = @_;
	my $out = $node->safe_psql('postgres', qq{
		$settings
		BEGIN;
		SELECT coalesce(string_agg(convert_from(body, 'UTF8'), ','), '(none)')
		  FROM sbq_receive('$q', 1, receive_mode => :'mode');
		SELECT sum(pg_stat_get_xact_tuples_returned(i.indexrelid))
		  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
		 WHERE c.relnamespace = 'sbq'::regnamespace;
		COMMIT;
	});
	return split /\n/, $out;
}

for my $w ([ 'a peek-lock receive with the locks in rows', 'off', 'peek_lock' ],
	[ 'a receive-and-delete', 'on', 'receive_and_delete' ],
	[ 'a peek-lock receive', 'on', 'peek_lock' ])
{
	my ($what, $memory_locks, $mode) = @$w;
	my $q = "backlog_${mode}_$memory_locks";
	my $n = 4000;
	$node->safe_psql('postgres', "SELECT sbq_create_queue('$q')");
	send_expiring($q, $n, '1 second');
	$node->safe_psql('postgres', "SELECT sbq_send('$q', 'live')");
	sleep 2;
	my ($bodies, $read) = receive_one($q,
		"SET sbqueue.memory_locks = $memory_locks; \\set mode $mode");
	is($bodies, 'live', "$what behind $n expired messages returns the message behind them");
	cmp_ok($read, '<', 5 * $n, "... and reads each index entry about once ($read read)");
	is($node->safe_psql('postgres', "SELECT expired FROM sbq_queue_stats WHERE queue = '$q'"),
		$n, '... and took every expired message off the queue');
}

# Locks in memory: past 10,000 messages taken off the queue, a receive reads on
# past the rest and leaves them, and a message past them whose expired lock was
# its last allowed delivery keeps that delivery (maintenance dead-letters it).
$node->safe_psql('postgres',
	q{SELECT sbq_create_queue('far', max_delivery_count => 1, lock_duration => '5 seconds')});
send_expiring('far', 10500, '4 seconds');
$node->safe_psql('postgres', q{
	SELECT sbq_send('far', 'over');
	SELECT sbq_send('far', 'live');
});
# the backlog held in rows by another transaction: a receive passes over it to 'over'
my $holder = $node->background_psql('postgres');
$holder->query_safe(q{BEGIN; SELECT count(*) FROM (SELECT 1 FROM sbq.messages WHERE expires_at IS NOT NULL FOR UPDATE) h});
is($node->safe_psql('postgres', q{SELECT convert_from(body, 'UTF8') FROM sbq_receive('far', 1)}), 'over',
	'a receive passes over rows another transaction holds');
$holder->query_safe('ROLLBACK');
$holder->quit;
# the backlog expired, and the lock on 'over' too
sleep 6;
my ($bodies, $read) = receive_one('far', '\set mode peek_lock');
is($bodies, 'live',
	'a peek-lock receive behind 10,500 expired messages and one over its delivery limit returns the message behind them');
cmp_ok($read, '<', 5 * 10500, "... and reads each index entry about once ($read read)");
is($node->safe_psql('postgres', q{SELECT expired, dead_lettered FROM sbq_queue_stats WHERE queue = 'far'}),
	'10000|0', '... and took 10,000 expired messages off the queue, leaving the rest');
is($node->safe_psql('postgres', q{SELECT count(*) FROM sbq_peek('far', 1000, 0) WHERE expires_at IS NOT NULL}),
	'500', '... which are still there');
# the receive gave back what it passed over as it was: no receive hands it out
is($node->safe_psql('postgres', q{
	SELECT coalesce(string_agg(convert_from(body, 'UTF8'), ','), '(none)') FROM sbq_receive('far', 10)}),
	'(none)', 'nothing it passed over is handed out afterwards');
$node->safe_psql('postgres', 'SELECT sbq_maintain()');
is($node->safe_psql('postgres', q{
	SELECT string_agg(convert_from(body, 'UTF8') || ':' || dead_letter_reason || ':' || delivery_count, ',')
	  FROM sbq_peek('far/$deadletterqueue', 10, 0)}),
	'over:MaxDeliveryCountExceeded:1', 'the message over its limit is dead-lettered with its delivery');
is($node->safe_psql('postgres', q{SELECT expired, active_count + locked_count FROM sbq_queue_stats WHERE queue = 'far'}),
	'10500|1', '... and takes the expired messages left behind off the queue');

# The 10,000 hold for a transaction, not for a call: the looks of a receive that
# waits each took 10,000 more in the call's one transaction (all 25,000 here),
# and so did the receive in rows a receive goes on with when this database's
# share of the table of locks is full (5,000 here: all 12,000).
$node->safe_psql('postgres', q{SELECT sbq_create_queue('waits')});
send_expiring('waits', 25000, '1 second');
sleep 2;
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM sbq_receive('waits', 1, max_wait => '1 second');
	SELECT expired FROM sbq_queue_stats WHERE queue = 'waits'}),
	"0\n10000", 'a receive that waits takes 10,000 expired messages off in all its looks');
$node->append_conf('postgresql.conf', 'sbqueue.max_locks_per_database = 5000');
$node->reload;
$node->safe_psql('postgres', q{SELECT sbq_create_queue('share')});
send_expiring('share', 12000, '1 second');
$node->safe_psql('postgres', q{SELECT sbq_send('share', 'live')});
sleep 2;
is($node->safe_psql('postgres', q{
	SELECT string_agg(convert_from(body, 'UTF8'), ',') FROM sbq_receive('share', 1);
	SELECT expired FROM sbq_queue_stats WHERE queue = 'share'}),
	"live\n10000", 'so does a receive that goes on in rows when the share of the table is full');
$node->append_conf('postgresql.conf', 'sbqueue.max_locks_per_database = -1');
$node->reload;

# A receive of more than one stops taking messages off on its way once half the
# lock of the first it handed out has passed: it handed that one out with its
# lock run out (found by a review, behind 3 million expired messages). Each dead
# letter is slowed down here (a trigger), so that 6,000 take longer than the lock.
$node->safe_psql('postgres', q{
	CREATE FUNCTION slow_dead_letter() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN PERFORM pg_sleep(0.001); RETURN NEW; END $$;
	CREATE TRIGGER slow BEFORE INSERT ON sbq.dead_letters FOR EACH ROW EXECUTE FUNCTION slow_dead_letter();
});
for my $memory_locks ('on', 'off')
{
	my $q = "half_$memory_locks";
	$node->safe_psql('postgres', qq{
		SELECT sbq_create_queue('$q', lock_duration => '5 seconds',
		                        dead_lettering_on_message_expiration => true);
		SELECT sbq_send('$q', 'first');
	});
	send_expiring($q, 6000, '1 second');
	$node->safe_psql('postgres', "SELECT sbq_send('$q', 'last')");
	sleep 2;
	my $got = $node->safe_psql('postgres', qq{
		SET sbqueue.memory_locks = $memory_locks;
		CREATE TEMP TABLE got AS
			SELECT *, clock_timestamp() AS returned FROM sbq_receive('$q', 2);
		SELECT string_agg(convert_from(body, 'UTF8') || ':' || (locked_until > returned), ',')
		  FROM got;
		SELECT count(sbq_complete('$q', lock_token)) FROM got;
	});
	is($got, "first:true\n1",
		"a receive of two behind a slow backlog (locks in memory $memory_locks) returns the first with its lock valid, and it completes");
}
$node->safe_psql('postgres', 'DROP TRIGGER slow ON sbq.dead_letters');

done_testing();
