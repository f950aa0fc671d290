# Copyright (c) 2026, the sbqueue authors
#
# A session receive behind a backlog of the session's messages whose time to
# live has passed, with maintenance not running (left open by the change that
# bounded the receive of a queue without sessions):
# - with the session locks in shared memory (the library preloaded), each
#   pass of the receive took one expired message off and read up to 10,000
#   index entries for it: behind 8,000 a receive of one took 6 s, behind
#   10,000 more than a session lock of 30 s; and it took every one off, each
#   holding an entry of the shared lock table until the commit (53200 once
#   this database's share was full);
# - with the locks stored in rows (the library not preloaded), a receive of
#   one took one expired message off and returned nothing, though a message
#   waited behind the backlog: the session looked empty to its holder.
# Both now read on after each pass, take at most 10,000 off in a transaction
# (past that they read past the rest, which no receive hands out), and stop
# once half of what was left of the session lock at their start has passed.
# A review of that change found more, checked here too: messages whose expired
# lock was their last allowed delivery were taken off one a pass, and nothing
# returned; an expired (or over-delivered) deferred message was handed out;
# in rows a transaction took off more than 10,000; with the locks in memory
# an expired message another transaction was taking off stopped the receive,
# and taking them off could fill the database's share of the lock table
# (53200) where a message could have been handed out.
#
# Every backlog is made first, then one wait lets them expire (and the session
# locks of the over-delivered messages run out), then the receives run.
# The index entries a receive reads are counted in its own transaction: a
# count, not a time, so a loaded machine does not change it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

my $memory = SbqNode::preloaded('session_backlog_memory');
my $rows = PostgreSQL::Test::Cluster->new('session_backlog_rows');
$rows->init;
$rows->start;

# $n messages of session $s into $q that expire $ttl from now
sub send_expiring
{
	my ($node, $q, $s, $n, $ttl) = @_;
	$node->safe_psql('postgres', qq{
		SELECT count(*) FROM generate_series(1, $n) g,
			LATERAL (SELECT sbq_send_batch('$q', array_fill('expiring'::text, ARRAY[least(500, $n - g + 1)]),
			                               session_id => '$s', time_to_live => '$ttl')
			          WHERE g % 500 = 1) b;
	});
}

# In one transaction: accept session $s of $q, receive $max of it, complete
# what it returned and release the session; the bodies
# it returns (with whether each lock was still valid when the call returned),
# and the index entries of sbqueue's tables the receive read.
sub receive_in_session
{
	my ($node, $q, $s, $max) = @_;
	my $out = $node->safe_psql('postgres', qq{
		BEGIN;
		SELECT session_token FROM sbq_accept_session('$q', '$s') \\gset
		SELECT sum(pg_stat_get_xact_tuples_returned(i.indexrelid)) AS before
		  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
		 WHERE c.relnamespace = 'sbq'::regnamespace \\gset
		CREATE TEMP TABLE got AS
			SELECT *, clock_timestamp() AS returned
			  FROM sbq_receive_session('$q', :'session_token', $max);
		SELECT coalesce(string_agg(convert_from(body, 'UTF8') || ':' || (locked_until > returned),
		                           ',' ORDER BY sequence_number), '(none)')
		  FROM got;
		SELECT sum(pg_stat_get_xact_tuples_returned(i.indexrelid)) - :before
		  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
		 WHERE c.relnamespace = 'sbq'::regnamespace;
		SELECT count(sbq_complete('$q', lock_token)) FROM got;
		SELECT sbq_release_session('$q', :'session_token');
		COMMIT;
	});
	return split /\n/, $out;
}

# On each server: the queues and their backlogs, made before the one wait.
sub setup
{
	my ($node, $memory_only) = @_;
	$node->safe_psql('postgres', q{
		CREATE EXTENSION sbqueue;
		SELECT sbq_create_queue('near', requires_session => true);
		SELECT sbq_create_queue('far', requires_session => true);
		SELECT sbq_create_queue('two', requires_session => true);
		SELECT sbq_create_queue('deferred', requires_session => true);
		SELECT sbq_create_queue('over', requires_session => true, max_delivery_count => 1,
		                        lock_duration => '5 seconds');
		SELECT sbq_create_queue('overd', requires_session => true, max_delivery_count => 2,
		                        lock_duration => '5 seconds');
		SELECT sbq_create_queue('half', lock_duration => '5 seconds', requires_session => true,
		                        dead_lettering_on_message_expiration => true);
	});
	send_expiring($node, 'near', 's1', 4000, '1 second');
	$node->safe_psql('postgres', q{SELECT sbq_send('near', 'live', session_id => 's1')});
	send_expiring($node, 'far', 's1', 10500, '1 second');
	$node->safe_psql('postgres', q{
		SELECT sbq_send('far', 'live 1', session_id => 's1');
		SELECT sbq_send('far', 'live 2', session_id => 's1');
	});
	send_expiring($node, 'two', 's1', 9999, '1 second');
	$node->safe_psql('postgres', q{SELECT sbq_send('two', 'live 1', session_id => 's1')});
	send_expiring($node, 'two', 's1', 6000, '1 second');
	$node->safe_psql('postgres', q{SELECT sbq_send('two', 'live 2', session_id => 's1')});
	# deferred: one that expires, one whose lock runs out at its last delivery
	$node->safe_psql('postgres', q{
		SELECT sbq_send('deferred', 'short', session_id => 's1', time_to_live => '2 seconds');
		SELECT session_token FROM sbq_accept_session('deferred', 's1') \gset
		SELECT sbq_defer('deferred', lock_token) FROM sbq_receive_session('deferred', :'session_token', 1);
		SELECT sbq_release_session('deferred', :'session_token');
		SELECT sbq_send('overd', 'deferred', session_id => 's2');
		SELECT session_token FROM sbq_accept_session('overd', 's2') \gset
		SELECT sbq_defer('overd', lock_token) FROM sbq_receive_session('overd', :'session_token', 1);
		SELECT count(*) FROM sbq_receive_deferred('overd',
			ARRAY(SELECT sequence_number FROM sbq_peek('overd', 1, 0)), :'session_token');
		CREATE TABLE asked AS
			SELECT 'deferred' AS q, sequence_number FROM sbq_peek('deferred', 1, 0)
			UNION ALL SELECT 'overd', sequence_number FROM sbq_peek('overd', 1, 0);
	});
	# 2,000 delivered once (the limit) under a session lock left to run out
	$node->safe_psql('postgres', q{
		SELECT count(*) FROM sbq_send_batch('over', array_fill('once'::text, ARRAY[2000]),
		                                    session_id => 's1');
		SELECT sbq_send('over', 'live', session_id => 's1');
		SELECT session_token FROM sbq_accept_session('over', 's1') \gset
		SELECT count(*) FROM sbq_receive_session('over', :'session_token', 2000);
	});
	$node->safe_psql('postgres', q{SELECT sbq_send('half', 'first', session_id => 's1')});
	send_expiring($node, 'half', 's1', 6000, '1 second');
	$node->safe_psql('postgres', q{SELECT sbq_send('half', 'last', session_id => 's1')});
	return unless $memory_only;
	$node->safe_psql('postgres', q{SELECT sbq_create_queue('busy', requires_session => true)});
	send_expiring($node, 'busy', 's1', 2000, '1 second');
	$node->safe_psql('postgres', q{SELECT sbq_send('busy', 'live', session_id => 's1')});
	$node->safe_psql('postgres', q{SELECT sbq_create_queue('share', requires_session => true)});
	for my $s ('s1', 's2')
	{
		send_expiring($node, 'share', $s, 10000, '1 second');
		$node->safe_psql('postgres', qq{
			SELECT count(*) FROM sbq_send_batch('share', array_fill('live $s'::text, ARRAY[5000]),
			                                    session_id => '$s')});
	}
}

setup($memory, 1);
setup($rows, 0);

# A server whose whole lock table (4,096) other databases nearly fill: 3,500
# locks held in another database, 1,000 expired messages ahead in a session.
my $crowded = SbqNode::preloaded('session_backlog_crowded',
	"sbqueue.max_locks = 4096\nsbqueue.max_locks_per_database = 4096\n");
$crowded->safe_psql('postgres', q{
	CREATE DATABASE other;
	CREATE EXTENSION sbqueue;
	SELECT sbq_create_queue('crowded', requires_session => true);
});
send_expiring($crowded, 'crowded', 's1', 1000, '1 second');
$crowded->safe_psql('postgres', q{
	SELECT sbq_send('crowded', 'live', session_id => 's1')});
$crowded->safe_psql('other', q{
	CREATE EXTENSION sbqueue;
	SELECT sbq_create_queue('held', lock_duration => '5 minutes');
	SELECT count(*) FROM sbq_send_batch('held', array_fill('x'::text, ARRAY[3500]));
	SELECT count(*) FROM sbq_receive('held', 3500);
});
sleep 6;

for my $w ([ 'locks in shared memory', $memory ], [ 'locks in rows', $rows ])
{
	my ($what, $node) = @$w;

	# every expired message ahead of the live one is taken off, each index entry read about once
	my ($bodies, $read, $completed) = receive_in_session($node, 'near', 's1', 1);
	is($bodies, 'live:true',
		"$what: a session receive behind 4,000 expired messages returns the message behind them");
	cmp_ok($read, '<', 5 * 4000, "... and reads each index entry about once ($read read)");
	is($completed, 1, '... and it completes');
	is($node->safe_psql('postgres', q{SELECT expired FROM sbq_queue_stats WHERE queue = 'near'}),
		4000, '... and took every expired message off the queue');

	# past 10,000 in a transaction it reads past the rest and leaves them
	($bodies, $read, $completed) = receive_in_session($node, 'far', 's1', 5);
	is($bodies, 'live 1:true,live 2:true',
		"$what: a session receive behind 10,500 expired messages returns the messages behind them");
	cmp_ok($read, '<', 5 * 10500, "... and reads each index entry about once ($read read)");
	is($node->safe_psql('postgres', q{SELECT expired FROM sbq_queue_stats WHERE queue = 'far'}),
		'10000', '... and took 10,000 expired messages off the queue, leaving the rest');
	is($node->safe_psql('postgres', q{
		SELECT count(*) FROM sbq_peek('far', 1000, 0) WHERE expires_at IS NOT NULL}),
		'500', '... which are still there');
	$node->safe_psql('postgres', q{SELECT sbq_send('far', 'live 3', session_id => 's1')});
	($bodies) = receive_in_session($node, 'far', 's1', 5);
	is($bodies, 'live 3:true', '... and the next transaction takes them off and receives what follows');
	is($node->safe_psql('postgres', q{SELECT expired FROM sbq_queue_stats WHERE queue = 'far'}),
		'10500', '... all of them taken off by then');

	# the 10,000 hold across the receives of a transaction, whatever they ask for
	# (in rows a receive of 5,000 took up to 4,999 more off)
	# (with the locks in memory the second leaves them all: what it took off
	# and the 5,000 it wants to hand out would be over three quarters of the
	# share of the lock table)
	my ($got, $expired) = split /\n\n/, $node->safe_psql('postgres', q{
		BEGIN;
		SELECT session_token FROM sbq_accept_session('two', 's1') \gset
		SELECT convert_from(body, 'UTF8') FROM sbq_receive_session('two', :'session_token', 1);
		SELECT convert_from(body, 'UTF8') FROM sbq_receive_session('two', :'session_token', 5000);
		COMMIT;
		\echo
		SELECT expired FROM sbq_queue_stats WHERE queue = 'two'});
	is($got, "live 1\nlive 2", "$what: two session receives of a transaction return the messages behind expired ones");
	cmp_ok($expired, '<=', 10000, "... taking 10,000 off in all at most, whatever they ask for ($expired)");

	# messages whose expired lock was their last allowed delivery are taken off
	# on the way (dead-lettered), not one a pass
	($bodies, $read, $completed) = receive_in_session($node, 'over', 's1', 1);
	is($bodies, 'live:true',
		"$what: a session receive behind 2,000 messages past their last delivery returns the message behind them");
	cmp_ok($read, '<', 5 * 2000, "... and reads each index entry about once ($read read)");
	is($node->safe_psql('postgres', q{
		SELECT count(*) FROM sbq_peek('over/$deadletterqueue', 5000, 0)
		 WHERE session_id = 's1' AND dead_letter_reason = 'MaxDeliveryCountExceeded'}),
		'2000', '... and dead-lettered them');

	# a deferred message whose time to live has passed, or whose lock ran out at
	# its last delivery (dead-lettered by then), is not found (SB003), as without
	# sessions
	for my $d ([ 'deferred', 's1', 'whose time to live has passed' ],
		[ 'overd', 's2', 'whose lock ran out at its last delivery' ])
	{
		my ($q, $s, $why) = @$d;
		my ($rc, $out, $err) = $node->psql('postgres', qq{
			\\set VERBOSITY verbose
			BEGIN;
			SELECT session_token FROM sbq_accept_session('$q', '$s') \\gset
			SELECT convert_from(body, 'UTF8') FROM sbq_receive_deferred('$q',
				ARRAY(SELECT sequence_number FROM asked WHERE q = '$q'), :'session_token');
			COMMIT;
		});
		like($err, qr/SB003/, "$what: a session's deferred message $why is not received (SB003)");
		is($out, '', '... and nothing is returned');
	}
}

# Locks in memory: an expired message another transaction is taking off (here:
# holding its row) is passed over, not taken as the session's next message in
# the way (the receive returned nothing while maintenance cleared the backlog).
my $holder = $memory->background_psql('postgres');
$holder->query_safe(q{
	BEGIN;
	SELECT count(*) FROM (SELECT 1 FROM sbq.messages m JOIN sbq.queues q USING (queue_id)
	                       WHERE q.name = 'busy' AND m.expires_at IS NOT NULL FOR UPDATE OF m) h});
my ($bodies) = receive_in_session($memory, 'busy', 's1', 1);
is($bodies, 'live:true',
	'a session receive passes over expired messages another transaction is taking off');
$holder->query_safe('ROLLBACK');

# Locks in memory: each expired message taken off holds an entry of the shared
# lock table until the commit. Two receives behind 10,000 each filled this
# database's share of 16,384, and the second failed (53200): taking them off
# stops at three quarters of the share, and the rest is for the messages
# handed out.
$holder->query_safe(q{
	BEGIN;
	SELECT session_token FROM sbq_accept_session('share', 's1') \gset
	SELECT count(*) FROM sbq_receive_session('share', :'session_token', 1);
});
is($memory->safe_psql('postgres', q{
	BEGIN;
	SELECT session_token FROM sbq_accept_session('share', 's2') \gset
	SELECT count(*) FROM sbq_receive_session('share', :'session_token', 5000);
	ROLLBACK;
}), '5000',
	'a session receive of 5,000 behind 10,000 expired messages beside another transaction that took 10,000 off returns them all');
$holder->query_safe('COMMIT');
$holder->quit;

# The whole table counts too, and a receive that finds no room for a message
# to hand out gives back the expired ones of its pass before it gives up.
($bodies) = receive_in_session($crowded, 'crowded', 's1', 1);
is($bodies, 'live:true',
	'a session receive behind expired messages in a lock table other databases nearly fill returns its message');
$crowded->stop;

# A receive stops taking messages off on its way once half of what was left
# of the session lock at its start has passed: every lock it hands out ends
# with the session lock. Each dead letter is slowed down here (a trigger), so
# that 6,000 take longer than the session lock of 5 seconds.
for my $w ([ 'locks in shared memory', $memory ], [ 'locks in rows', $rows ])
{
	my ($what, $node) = @$w;
	$node->safe_psql('postgres', q{
		CREATE FUNCTION slow_dead_letter() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_sleep(0.001); RETURN NEW; END $$;
		CREATE TRIGGER slow BEFORE INSERT ON sbq.dead_letters FOR EACH ROW EXECUTE FUNCTION slow_dead_letter();
	});
	my ($bodies, $read, $completed) = receive_in_session($node, 'half', 's1', 2);
	is($bodies, 'first:true',
		"$what: a session receive of two behind a slow backlog returns the first with its lock valid");
	is($completed, 1, '... and it completes');
	cmp_ok($node->safe_psql('postgres', q{SELECT dead_lettered FROM sbq_queue_stats WHERE queue = 'half'}),
		'<', 6000, '... having left some of the backlog');
	$node->safe_psql('postgres', 'DROP TRIGGER slow ON sbq.dead_letters');
}

$memory->stop;
$rows->stop;
done_testing();
