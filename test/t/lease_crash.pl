# Copyright (c) 2026, the sbqueue authors
#
# Locks kept in shared memory (leases) across crashes: a crash loses the locks
# (the messages are delivered again at once) and at most one delivery count
# per message, never a message; a lease that expired before the crash had its
# count stored by the next receive. A transaction that received or settled
# under a lease cannot be prepared (2PC), and its lease does not outlive it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;
use Time::HiRes qw(usleep);

my $node = SbqNode::preloaded('leases', qq(
max_prepared_transactions = 2
restart_after_crash = on
));
$node->safe_psql('postgres', 'CREATE EXTENSION sbqueue');
$node->safe_psql('postgres', q{
	SELECT sbq_create_queue('c', lock_duration => '5 s', max_delivery_count => 5);
	SELECT sbq_send('c', 'kept');
	SELECT sbq_send('c', 'second');
});

sub receive_one
{
	return $node->safe_psql('postgres',
		"SELECT convert_from(body, 'UTF8') || ' ' || delivery_count FROM sbq_receive('c')");
}

# 2PC: refused, and the refused transaction's lease is gone with it
my ($rc, $out, $err) = $node->psql('postgres',
	"BEGIN; SELECT count(*) FROM sbq_receive('c'); PREPARE TRANSACTION 'p1';");
like($err, qr/cannot PREPARE a transaction that has received or settled sbqueue messages/,
	'PREPARE TRANSACTION after a receive under a lease is refused');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'), '0', 'nothing was prepared');

# delivery 1 under a lease; it expires; delivery 2 stores count 1 first
is(receive_one(), 'kept 1', 'first delivery (the refused one did not count)');
usleep(5_500_000);
is(receive_one(), 'kept 2', 'after the lease expired, the second delivery reports 2');
is($node->safe_psql('postgres', q{
	SELECT delivery_count FROM sbq.messages WHERE convert_from(body, 'UTF8') = 'kept'}),
	'1', 'the expired delivery was stored in the row before the message was handed out again');

# a crash: the lease of delivery 2 is lost, and at most its count
$node->stop('immediate');
$node->start;
my $kept = $node->safe_psql('postgres',
	"SELECT convert_from(body, 'UTF8') || ' ' || delivery_count || ' ' || lock_token FROM sbq_receive('c')");
like($kept, qr/^kept 2 /, 'after a crash the message is delivered again at once, one count lost at most');
my ($kept_token) = $kept =~ / ([0-9a-f-]{36})$/;
$node->safe_psql('postgres', "SELECT sbq_complete('c', '$kept_token'::uuid)");

# a backend killed with SIGKILL takes the whole server through crash recovery
my $token = $node->safe_psql('postgres', "SELECT lock_token FROM sbq_receive('c')");
like($token, qr/^[0-9a-f-]{36}$/, 'second received under a lease');
my $sleeper = IPC::Run::start(['psql', '-X', '-d', $node->connstr('postgres'), '-c',
		'SELECT pg_sleep(60) AS sleeper'], '>', \my $sout, '2>', \my $serr);
my $pid = '';
for (1 .. 100)
{
	$pid = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(60) AS sleeper%'");
	last if $pid ne '';
	usleep(100_000);
}
like($pid, qr/^\d+$/, 'a backend to kill');
my $off = -s $node->logfile;
kill 'KILL', $pid;
$sleeper->finish;
ok(SbqNode::wait_crash_restart($node, $off)
	  && SbqNode::poll_until($node, 'postgres', "SELECT count(*) FROM sbq_peek('c', 10)", '1'),
	'the server is back after the SIGKILL');
my ($rc2, $out2, $err2) = $node->psql('postgres', "SELECT sbq_complete('c', '$token'::uuid)");
like($err2, qr/message lock lost/, 'the token of a lease lost in the crash is SB002');
is(receive_one(), 'second 1', 'and its message is delivered again (the lost delivery not counted)');
is($node->safe_psql('postgres', "SELECT count(*) FROM sbq_peek('c', 10)"), '1', 'no message was lost');

$node->stop;
done_testing();
