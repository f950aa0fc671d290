# Copyright (c) 2026, the sbqueue authors
#
# The hints a receive trusts (src/qstate.c) never keep a message from it.
#
# When a queue's next scheduled message is due: a receive that trusts a hint
# saying "none" or "later" while a message is due skips the look, and leaves
# that message scheduled until the server restarts (with the worker off, as
# here; with it on, until its next pass). Each case ends a transaction that
# changed the scheduled messages another way than the look that taught the
# hint saw, then asks a new receive:
#	1. a receive that activated a due message, rolled back;
#	2. the same, rolled back to a savepoint and the transaction committed;
#	3. a cancel of a scheduled message, a receive in its transaction, rolled
#	   back (the message is due by then);
#	4. a scheduled send prepared, a receive while it is prepared, then
#	   COMMIT PREPARED;
#	5. a receive-and-delete that activated a due message, prepared, then
#	   ROLLBACK PREPARED;
#	6. while a scheduled send is prepared every receive looks; once none is
#	   left, a pass of sbq_maintain() lets the hint be trusted again: a
#	   receive with nothing due makes no scan of the scheduled messages.
#
# The head of the queue, where a leasing receive starts its scan: a receive
# in a transaction that took messages out (here by receive-and-delete) does
# not see them and moves the head past them. Prepared and then rolled back,
# they are back below it (test/specs/receive_head_hint_rollback.spec has the
# rollbacks):
#	7. a receive-and-delete, then a receive that finds the next message
#	   locked, prepared, then ROLLBACK PREPARED.
# And a transaction moves the head past what it sent and settled itself:
#	8. after 300 sends, receives and completes in one transaction, its next
#	   receive reads a few entries of the queue's index, not 300.
#
# The free hint, where a leasing receive starts past the messages others hold
# under leases (test/specs/receive_free_hint.spec has the locks that end
# early):
#	10. a message whose lease expired is received again before later ones;
#	11. a receive past 300 messages held reads a few entries of the index;
#	12. so is one whose lease a renew shortened (the lock duration was cut).
# (The hint lapses 100 ms after the scan from the head that made it, and a
# lease lasts 5 s at least: 10 and 12 check the outcome, and would pass
# without the expiry bound and the renew's lowering, which that lapse makes
# redundant.)
# After a restart, shared memory knows nothing of a transaction prepared
# before it:
#	9. it sent a message and scheduled another; later sends and receives
#	   move past its number, and it is committed: both still arrive.
# Each case uses its own queue.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../harness";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use SbqNode;

my $node = SbqNode::preloaded('receive_hints', "max_prepared_transactions = 4\n");
$node->safe_psql('postgres', 'CREATE EXTENSION sbqueue');

# a new queue whose hints are known: after a receive and a maintenance pass
# with no prepared transaction (until then, a transaction prepared before the
# queue's entry was made may be pending, so every receive looks and the head
# does not move)
sub ready
{
	my ($q) = @_;
	$node->safe_psql('postgres', qq{
		SELECT sbq_create_queue('$q');
		SELECT count(*) FROM sbq_receive('$q');
		SELECT sbq_maintain();});
}

# a queue with one message scheduled $secs from now; returns its number
sub schedule
{
	my ($q, $secs) = @_;
	ready($q);
	return $node->safe_psql('postgres',
		qq{SELECT sbq_send('$q', 'later', scheduled_enqueue_time => now() + interval '$secs s')});
}

# the bodies a new receive (its own transaction) gets, '-' for none
sub receive
{
	my ($q) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT coalesce(string_agg(convert_from(body, 'UTF8'), ','), '-')
		  FROM sbq_receive('$q', 10)});
}

# a receive's scans of the scheduled messages (the table's and its index's)
sub receive_scans
{
	my ($q) = @_;
	my @out = split /\n/, $node->safe_psql('postgres', qq{
		BEGIN;
		SELECT count(*) FROM sbq_receive('$q', 10);
		SELECT pg_stat_get_xact_numscans('sbq.messages'::regclass)
		       + pg_stat_get_xact_numscans('sbq.messages_scheduled_idx'::regclass);
		COMMIT;});
	return $out[1];
}

### 1. an activation rolled back
schedule('roll', 1);
usleep(1_500_000);
is($node->safe_psql('postgres', q{
	BEGIN;
	SELECT count(*) FROM sbq_receive('roll', 10);
	ROLLBACK;}), '1', 'roll: a receive in a transaction activates the due message and gets it');
is(receive('roll'), 'later', 'roll: after its rollback, a new receive gets the message');

### 2. an activation rolled back to a savepoint
schedule('savepoint', 1);
usleep(1_500_000);
is($node->safe_psql('postgres', q{
	BEGIN;
	SAVEPOINT s;
	SELECT count(*) FROM sbq_receive('savepoint', 10);
	ROLLBACK TO s;
	COMMIT;}), '1', 'savepoint: a receive after a savepoint gets the due message');
is(receive('savepoint'), 'later', 'savepoint: rolled back to it, a new receive gets the message');

### 3. a cancel rolled back, with a receive in its transaction
my $seq = schedule('cancel', 1);
is($node->safe_psql('postgres', qq{
	BEGIN;
	SELECT sbq_cancel_scheduled('cancel', $seq);
	SELECT pg_sleep(1.5);
	SELECT count(*) FROM sbq_receive('cancel', 10);
	ROLLBACK;}), "\n\n0", 'cancel: a receive after the cancel, in its transaction, gets nothing');
is(receive('cancel'), 'later', 'cancel: after the rollback, a new receive gets the message');

### 4. a scheduled send prepared, then committed
ready('prepsend');
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT sbq_send('prepsend', 'later', scheduled_enqueue_time => now() + interval '1 s');
	PREPARE TRANSACTION 'prepsend';});
usleep(1_500_000);
is(receive('prepsend'), '-', 'prepsend: a receive while the send is prepared, due, gets nothing');
$node->safe_psql('postgres', q{COMMIT PREPARED 'prepsend'});
is(receive('prepsend'), 'later', 'prepsend: committed, a new receive gets it');

### 5. an activation prepared, then rolled back
schedule('prepact', 1);
usleep(1_500_000);
is($node->safe_psql('postgres', q{
	BEGIN;
	SELECT count(*) FROM sbq_receive('prepact', 10, receive_mode => 'receive_and_delete');
	PREPARE TRANSACTION 'prepact';}), '1', 'prepact: a receive-and-delete activates and takes the message');
is(receive('prepact'), '-', 'prepact: while that is prepared, a new receive gets nothing');
$node->safe_psql('postgres', q{ROLLBACK PREPARED 'prepact'});
is(receive('prepact'), 'later', 'prepact: rolled back, a new receive gets the message');

### 6. the hint is trusted again once no prepared transaction is left
ready('trusted');
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT sbq_send('trusted', 'much later', scheduled_enqueue_time => now() + interval '1 hour');
	PREPARE TRANSACTION 'trusted';});
cmp_ok(receive_scans('trusted'), '>=', 1, 'trusted: while a scheduled send is prepared, a receive looks');
cmp_ok(receive_scans('trusted'), '>=', 1, '... every time');
$node->safe_psql('postgres', q{COMMIT PREPARED 'trusted'});
$node->safe_psql('postgres', q{SELECT sbq_maintain()});
is(receive_scans('trusted'), '0',
	'trusted: after a pass with none prepared, a receive does not look: the hint holds "in an hour"');
is(receive_scans('trusted'), '0', '... nor does the next');
is($node->safe_psql('postgres', q{SELECT count(*) FROM sbq_peek('trusted', 10) WHERE state = 'scheduled'}),
	'1', 'trusted: the message is still scheduled');

### 7. the head moved past messages a prepared transaction took, rolled back
ready('head');
# m2 under a lock, m1 available
is($node->safe_psql('postgres', q{
	SELECT sbq_send('head', m) > 0 FROM unnest(ARRAY['m1', 'm2']) m;
	SELECT count(sbq_abandon('head', lock_token)) FROM sbq_receive('head', 2) WHERE convert_from(body, 'UTF8') = 'm1';}),
	"t\nt\n1", 'head: m2 is under a lock');
is($node->safe_psql('postgres', q{
	BEGIN;
	SELECT convert_from(body, 'UTF8') FROM sbq_receive('head', 1, receive_mode => 'receive_and_delete');
	SELECT count(*) FROM sbq_receive('head', 10);
	PREPARE TRANSACTION 'head';}), "m1\n0", 'head: a prepared transaction received and deleted m1, then found none');
is(receive('head'), '-', 'head: while it is prepared, a new receive gets nothing');
$node->safe_psql('postgres', q{ROLLBACK PREPARED 'head'});
is(receive('head'), 'm1', 'head: rolled back, a new receive gets m1');

# in one transaction: what it runs first ($first), then a receive of one;
# returns that receive's body and how many entries of the queue's index it read.
# $before runs first, on the same connection, in transactions of its own.
sub receive_reads
{
	my ($q, $first, $before) = @_;
	$before //= '';
	my @out = split /\n/, $node->safe_psql('postgres', qq{
		$before
		BEGIN;
		$first
		SELECT pg_stat_get_xact_tuples_returned('sbq.messages_receive_idx'::regclass);
		SELECT convert_from(body, 'UTF8') FROM sbq_receive('$q');
		SELECT pg_stat_get_xact_tuples_returned('sbq.messages_receive_idx'::regclass);
		COMMIT;});
	return ($out[-2], $out[-1] - $out[-3]);
}

### 8. a loop of sends, receives and completes in one transaction
ready('loop');
my ($last, $reads) = receive_reads('loop', q{
	DO $$DECLARE m record; BEGIN
		FOR i IN 1..300 LOOP
			PERFORM sbq_send('loop', 'x');
			FOR m IN SELECT lock_token FROM sbq_receive('loop') LOOP
				PERFORM sbq_complete('loop', m.lock_token);
			END LOOP;
		END LOOP;
	END $$;
	SELECT sbq_send('loop', 'last') > 0;});
is($last, 'last', 'loop: the receive after the loop gets the last message');
cmp_ok($reads, '<', 20, "loop: and reads a few entries of the queue's index ($reads), not the 300 it settled");

# a queue ready as above with the lock duration given, and messages m1..m$n
sub timed_queue
{
	my ($q, $lock, $n) = @_;
	$node->safe_psql('postgres', qq{
		SELECT sbq_create_queue('$q', lock_duration => interval '$lock');
		SELECT count(*) FROM sbq_receive('$q');
		SELECT sbq_maintain();
		SELECT sbq_send('$q', 'm' || i) FROM generate_series(1, $n) i;});
}

### 10. the free hint holds only until the first lease it passed expires
timed_queue('expiry', '5 s', 4);
my $one = q{SELECT convert_from(body, 'UTF8') FROM sbq_receive('expiry')};
is($node->safe_psql('postgres', $one), 'm1', 'expiry: a receive takes m1 under a 5 s lease');
# the lease ends within 5 s of now
my $t0 = Time::HiRes::time();
is($node->safe_psql('postgres', $one), 'm2', 'expiry: the next takes m2, from past m1');
my $left = $t0 + 5.5 - Time::HiRes::time();
usleep($left * 1_000_000) if $left > 0;
is($node->safe_psql('postgres', $one), 'm1',
	"expiry: once m1's lease has expired, a receive gets m1 again, before m3");

### 11. a receive past many leases held reads a few entries, not all of them
# (on one connection: the hint holds 100 ms after the scan from the head)
ready('held');
$node->safe_psql('postgres', q{SELECT count(sbq_send('held', 'x' || i)) FROM generate_series(1, 301) i});
my ($held, $held_reads) = receive_reads('held', '', q{SELECT count(*) FROM sbq_receive('held', 300);});
is($held, 'x301', 'held: with 300 messages under leases, a receive gets the 301st');
cmp_ok($held_reads, '<', 20,
	"held: and reads a few entries of the queue's index ($held_reads), not the 300 held");

### 12. a renew after the lock duration was cut: the lease ends sooner
timed_queue('cut', '5 min', 3);
my $cut1 = $node->safe_psql('postgres', q{SELECT lock_token FROM sbq_receive('cut')});
is($node->safe_psql('postgres', q{SELECT convert_from(body, 'UTF8') FROM sbq_receive('cut')}), 'm2',
	'cut: m1 and m2 are held for 5 min');
$node->safe_psql('postgres', qq{
	SELECT sbq_update_queue('cut', lock_duration => interval '5 s');
	SELECT sbq_renew('cut', '$cut1');});
my $t_cut = Time::HiRes::time();
$left = $t_cut + 5.5 - Time::HiRes::time();
usleep($left * 1_000_000) if $left > 0;
is($node->safe_psql('postgres', q{SELECT convert_from(body, 'UTF8') FROM sbq_receive('cut')}), 'm1',
	'cut: renewed under a 5 s lock duration, m1 is received again 5 s later, before m3');

### 9. a transaction prepared before a restart
$node->safe_psql('postgres', q{
	SELECT sbq_create_queue('restart');
	SELECT sbq_send('restart', 'first');
	BEGIN;
	SELECT sbq_send('restart', 'prepared');
	SELECT sbq_send('restart', 'prepared, scheduled', scheduled_enqueue_time => now() + interval '2 s');
	PREPARE TRANSACTION 'restart';});
$node->restart;
is($node->safe_psql('postgres', q{
	SELECT sbq_send('restart', 'after') > 0;
	SELECT string_agg(convert_from(r.body, 'UTF8'), ',' ORDER BY r.sequence_number)
	  FROM sbq_receive('restart', 10) r, LATERAL sbq_complete('restart', r.lock_token) c;}),
	"t\nfirst,after", 'restart: the messages sent around it are received past its number');
is(receive('restart'), '-', 'restart: and again, nothing');
$node->safe_psql('postgres', q{COMMIT PREPARED 'restart'});
usleep(2_500_000);
is(receive('restart'), 'prepared,prepared, scheduled', 'restart: committed, its message and its due scheduled one arrive');

$node->stop;
done_testing();
