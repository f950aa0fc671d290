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

done_testing();
