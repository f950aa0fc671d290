# Copyright (c) 2026, the sbqueue authors
#
# Locks kept in shared memory (leases) do not outlive what they lock:
#	- DROP EXTENSION and CREATE EXTENSION again: sequence numbers start over,
#	  and a lease of the old extension must not hide, count, settle or
#	  dead-letter the new extension's message with the same number;
#	- DROP DATABASE, then a database created with the same OID: the same;
#	- DROP DATABASE gives the dropped database's lease slots back;
#	- sbq_purge_queue and sbq_delete_queue give their messages' lease slots
#	  back when they commit (and keep them when they roll back).
# Each scenario builds its own state (its own database, and a restart where
# the lease table must be empty), so each assertion stands on its own.
#
# The lease table is small (sbqueue.max_locks = 1024, a size every release
# accepts) and one database may use all of it
# (sbqueue.max_locks_per_database = sbqueue.max_locks), so that only leaked
# slots can make a receive run short: two receives of 700 do not fit.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;
use SbqLease;
use Time::HiRes qw(usleep);

my $max_locks = 1024;
# leases taken by one receive in the slot tests: two such receives do not fit
my $fill = 700;

my $node = SbqNode::preloaded('lease_lifecycle', qq(
sbqueue.max_locks = $max_locks
sbqueue.max_locks_per_database = $max_locks
));

is($node->safe_psql('postgres', 'SHOW sbqueue.max_locks'), $max_locks,
	"the lease table holds $max_locks locks");

sub run_sql { return SbqLease::run_sql($node, @_); }

# The first message of queue $q as "body locked_until-is-null delivery_count",
# or '' when the queue shows none.
sub peek_first
{
	my ($db, $q) = @_;
	return $node->safe_psql($db, qq{
		SELECT convert_from(body, 'UTF8') || ' ' || (locked_until IS NULL) || ' ' || delivery_count
		  FROM sbq_peek('$q')});
}

sub receive_first
{
	my ($db, $q) = @_;
	return $node->safe_psql($db, qq{
		SELECT convert_from(body, 'UTF8') || ' ' || delivery_count FROM sbq_receive('$q')});
}

sub receive_many { return SbqLease::receive_many($node, @_); }

sub send_many
{
	my ($db, $q, $n) = @_;
	$node->safe_psql($db,
		"SELECT count(sbq_send('$q', 'm' || g)) FROM generate_series(1, $n) g");
}

my $qprops = "lock_duration => '5 s', max_delivery_count => 1";

# A database $db whose queue 'q' had message 1 received under a lease, after
# which the extension was dropped and created again, and the new queue 'q'
# got a new message 1. Returns the old lease's token.
sub extension_reborn
{
	my ($db) = @_;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, qq{
		CREATE EXTENSION sbqueue;
		SELECT sbq_create_queue('q', $qprops);
		SELECT sbq_send('q', 'old');
	});
	my $token = $node->safe_psql($db, "SELECT lock_token FROM sbq_receive('q')");
	$node->safe_psql($db, qq{
		DROP EXTENSION sbqueue;
		CREATE EXTENSION sbqueue;
		SELECT sbq_create_queue('q', $qprops);
		SELECT sbq_send('q', 'new');
	});
	return $token;
}

# The same with the database dropped and created again with its OID.
sub database_reborn
{
	my ($db) = @_;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	my $oid = $node->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = '$db'");
	$node->safe_psql($db, qq{
		CREATE EXTENSION sbqueue;
		SELECT sbq_create_queue('q', $qprops);
		SELECT sbq_send('q', 'old');
	});
	my $token = $node->safe_psql($db, "SELECT lock_token FROM sbq_receive('q')");
	$node->safe_psql('postgres', "DROP DATABASE $db");
	$node->safe_psql('postgres', "CREATE DATABASE $db OID = $oid");
	is($node->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = '$db'"),
		$oid, "$db: created again with the OID it had");
	$node->safe_psql($db, qq{
		CREATE EXTENSION sbqueue;
		SELECT sbq_create_queue('q', $qprops);
		SELECT sbq_send('q', 'new');
	});
	return $token;
}

# Both ways a new message 1 can meet an old lease of message 1.
my %reborn = ('DROP EXTENSION' => \&extension_reborn, 'DROP DATABASE' => \&database_reborn);
my $i = 0;
for my $how ('DROP EXTENSION', 'DROP DATABASE')
{
	$i++;
	my ($rc, $out, $err, $state);

	# the new message is not locked, and its first delivery is the first
	$reborn{$how}->("reborn${i}_receive");
	is(peek_first("reborn${i}_receive", 'q'), 'new true 0',
		"$how: peek shows the new message unlocked, never delivered");
	is(receive_first("reborn${i}_receive", 'q'), 'new 1',
		"$how: the new message is received at once, as its first delivery");

	# the old token settles nothing
	my $token = $reborn{$how}->("reborn${i}_complete");
	($rc, $out, $err, $state) = run_sql("reborn${i}_complete",
		"SELECT sbq_complete('q', '$token'::uuid)");
	is($state, 'SB002', "$how: the old lease's token is SB002 (message lock lost)");
	is(peek_first("reborn${i}_complete", 'q'), 'new true 0',
		"$how: the new message is still there, untouched");
}

# the old lease's expiry does not count a delivery of the new message, nor
# dead-letter it (max_delivery_count is 1)
extension_reborn('reborn_expiry');
usleep(5_500_000);
my ($rc, $out, $err, $state) = run_sql('reborn_expiry', 'SELECT sbq_maintain()');
is($rc, 0, 'DROP EXTENSION: maintenance after the old lease expired succeeds');
is($node->safe_psql('reborn_expiry', q{SELECT count(*) FROM sbq_peek('q/$deadletterqueue', 10)}),
	'0', 'DROP EXTENSION: a new message never received is not dead-lettered');
is(peek_first('reborn_expiry', 'q'), 'new true 0',
	'DROP EXTENSION: the new message is still in its queue, never delivered');

# DROP DATABASE gives the slots of its leases back
$node->restart;
$node->safe_psql('postgres', 'CREATE DATABASE leak_a');
$node->safe_psql('postgres', 'CREATE DATABASE leak_b');
for my $db ('leak_a', 'leak_b')
{
	$node->safe_psql($db, qq{
		CREATE EXTENSION sbqueue;
		SELECT sbq_create_queue('q', lock_duration => '5 min');
	});
	send_many($db, 'q', $fill);
}
my $r = receive_many('leak_a', 'q', $fill);
is("$r->{received} $r->{leased}", "$fill $fill", "leak_a: $fill messages received under leases");
$node->safe_psql('postgres', 'DROP DATABASE leak_a');
$r = receive_many('leak_b', 'q', $fill);
is($r->{sqlstate}, '', 'after DROP DATABASE leak_a, a receive in leak_b does not fail')
  or diag($r->{err});
is($r->{received}, $fill, "leak_b: all $fill messages received");
is($r->{leased}, $fill, "leak_b: all $fill under leases (the dropped database's slots are free)");

# sbq_purge_queue and sbq_delete_queue give their messages' slots back at
# commit, and not when they roll back
for my $call ('sbq_purge_queue', 'sbq_delete_queue')
{
	my $db = $call eq 'sbq_purge_queue' ? 'purge' : 'drop_queue';
	$node->restart;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, qq{
		CREATE EXTENSION sbqueue;
		SELECT sbq_create_queue('gone', lock_duration => '5 min');
		SELECT sbq_create_queue('next', lock_duration => '5 min');
	});
	send_many($db, 'gone', $fill);
	send_many($db, 'next', $fill);
	my $token = $node->safe_psql($db, "SELECT lock_token FROM sbq_receive('gone')");
	$r = receive_many($db, 'gone', $fill - 1);
	is($r->{leased}, $fill - 1, "$call: $fill messages of 'gone' received under leases");

	$node->safe_psql($db, "BEGIN; SELECT $call('gone'); ROLLBACK;");
	($rc, $out, $err, $state) = run_sql($db, "SELECT sbq_complete('gone', '$token'::uuid)");
	is($state, '', "$call rolled back: the leases it would have freed are still valid")
	  or diag($err);

	$node->safe_psql($db, "SELECT $call('gone')");
	$r = receive_many($db, 'next', $fill);
	is($r->{sqlstate}, '', "after $call, a receive on another queue does not fail")
	  or diag($r->{err});
	is($r->{received}, $fill, "after $call: all $fill messages of 'next' received");
	is($r->{leased}, $fill, "after $call: all $fill under leases (its messages' slots are free)");
}

$node->stop;
done_testing();
