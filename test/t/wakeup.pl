# Copyright (c) 2026, the sbqueue authors
#
# Blocking receives (sbq_receive with max_wait). With sbqueue preloaded: a
# waiting receive returns within milliseconds of the commit of a send from
# another connection, and not before that commit; a rolled-back send does not
# wake it; an abandon that makes a message available wakes it;
# pg_cancel_backend and statement_timeout end the wait at once. Without the
# preload, waits poll and stay correct.
#
# The receiving sessions set sbqueue.receive_poll_interval = 60s, so that only
# a wake-up (not the fallback poll) can end their wait early. The maintenance
# worker is off: it must not be the one whose commit wakes anybody.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;
use Time::HiRes qw(time usleep);

my $node = SbqNode::preloaded('wakeup', qq(
log_statement = none
));
$node->safe_psql('postgres', q{
	CREATE EXTENSION sbqueue;
	SELECT sbq_create_queue('q');
	SELECT sbq_create_queue('other');
	SELECT sbq_create_queue('short', lock_duration => '5 s');
});

# A background session that will wait in sbq_receive; returns it and its pid.
sub receiver
{
	my ($n, $poll) = @_;
	my $s = $n->background_psql('postgres', on_error_stop => 0);
	$s->query_safe("SET sbqueue.receive_poll_interval = '$poll'");
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	return ($s, $pid);
}

# Start a receive in session $s without waiting for it; the SELECT prints the
# number of messages and the epoch time at which the receive returned. When
# the receive returns at once, its whole output may come in the same read as
# "receiving" (query_until hands back and clears all it read): keep it for
# finish_receive.
my %early;
sub start_receive
{
	my ($s, $queue, $max_wait) = @_;
	$early{$s} = $s->query_until(qr/receiving/, qq{\\echo receiving
SELECT count(*) || ' ' || extract(epoch FROM clock_timestamp())
  FROM sbq_receive('$queue', 1, '$max_wait');
\\echo received
});
}

# Wait until the session is asleep in the receive.
sub wait_until_sleeping
{
	my ($n, $pid) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	ok($n->poll_query_until('postgres',
			"SELECT wait_event_type = 'Extension' AND query LIKE '%sbq_receive%' FROM pg_stat_activity WHERE pid = $pid"),
		'the receive is waiting');
}

# Collect the end of a receive that ends with an error; the error may reach
# stderr after "received" reached stdout: wait for it too.
sub finish_failed_receive
{
	my ($s, $error) = @_;
	finish_receive($s);
	pump_until($s->{run}, $s->{timeout}, \$s->{stderr}, $error);
	return $s->{stderr};
}

# Collect what start_receive printed: (count, epoch).
sub finish_receive
{
	my ($s) = @_;
	my $out = delete $early{$s} // '';
	$out = $s->query_until(qr/received/, '') unless $out =~ /received/;
	$out =~ /(\d+) ([\d.]+)/ or return (undef, undef);
	return ($1, $2);
}

my $epoch_sql = 'SELECT extract(epoch FROM clock_timestamp())';

# --- a commit from another connection wakes the receive at once
my ($r, $rpid) = receiver($node, '60s');
start_receive($r, 'q', '30 s');
wait_until_sleeping($node, $rpid);
my $commit_at = $node->safe_psql('postgres', "BEGIN; SELECT sbq_send('q', 'wake'); $epoch_sql; COMMIT;");
$commit_at = (split /\n/, $commit_at)[-1];
my ($n, $returned_at) = finish_receive($r);
is($n, 1, 'the waiting receive got the committed message');
my $latency = $returned_at - $commit_at;
cmp_ok($latency, '<', 1.0, "it returned right after the commit (${\ sprintf('%.1f', $latency * 1000)} ms; the poll is 60 s)");

# --- not before the commit: a send that commits 1.5 s after its insert
start_receive($r, 'q', '30 s');
wait_until_sleeping($node, $rpid);
my $out = $node->safe_psql('postgres',
	"BEGIN; SELECT sbq_send('q', 'late'); SELECT pg_sleep(1.5); $epoch_sql; COMMIT;");
$commit_at = (split /\n/, $out)[-1];
($n, $returned_at) = finish_receive($r);
is($n, 1, 'the receive got the message of the late commit');
cmp_ok($returned_at, '>', $commit_at, 'it returned after the commit, not before');
cmp_ok($returned_at - $commit_at, '<', 1.0,
	'and right after it: the wake-up was sent at commit, not when the row was inserted');

# --- a send to another queue does not end the wait with a message
start_receive($r, 'q', '2 s');
wait_until_sleeping($node, $rpid);
$node->safe_psql('postgres', "SELECT sbq_send('other', 'elsewhere')");
($n, $returned_at) = finish_receive($r);
is($n, 0, 'a send to another queue does not satisfy the receive');

# --- a rolled-back send wakes nobody. A message whose lock runs out becomes
# available with no commit at all (nothing wakes a receiver for it); a
# receive woken by the rollback would look again and return it at once,
# while a receive left asleep returns it only at its deadline (its poll is
# 60 s, longer than the wait).
my $holder = $node->background_psql('postgres');
$holder->query_safe("SELECT sbq_send('short', 'expiring')");
is($holder->query_safe("SELECT count(*) FROM sbq_receive('short')"), '1', 'a message is locked for 5 s');
my $locked_at = time;
start_receive($r, 'short', '9 s');
wait_until_sleeping($node, $rpid);
usleep(int((6.0 - (time - $locked_at)) * 1e6)) if time - $locked_at < 6.0;    # the lock has run out
my $rollback_at = $node->safe_psql('postgres',
	"BEGIN; SELECT sbq_send('short', 'never'); SELECT extract(epoch FROM clock_timestamp()); ROLLBACK;");
$rollback_at = (split /\n/, $rollback_at)[-1];
($n, $returned_at) = finish_receive($r);
is($n, 1, 'the receive returned the message whose lock ran out');
cmp_ok($returned_at - $rollback_at, '>', 1.5,
	'but only at its deadline: the rolled-back send did not wake it');

# --- an abandon that makes a message available wakes the receive
$holder->query_safe("SELECT sbq_send('q', 'abandon me')");
my $token = $holder->query_safe("SELECT lock_token FROM sbq_receive('q')");
like($token, qr/^[0-9a-f-]{36}$/, 'another session holds the only message');
start_receive($r, 'q', '30 s');
wait_until_sleeping($node, $rpid);
my $abandon_at = $holder->query_safe("SELECT sbq_abandon('q', '$token'); $epoch_sql");
$abandon_at = (split /\n/, $abandon_at)[-1];
($n, $returned_at) = finish_receive($r);
is($n, 1, 'the receive got the abandoned message');
cmp_ok($returned_at - $abandon_at, '<', 1.0, 'right after the abandon committed');
$holder->quit;

# --- pg_cancel_backend ends the wait at once
start_receive($r, 'q', '60 s');
wait_until_sleeping($node, $rpid);
my $t0 = time;
$node->safe_psql('postgres', "SELECT pg_cancel_backend($rpid)");
my $err = finish_failed_receive($r, qr/canceling statement due to user request/);
my $elapsed = time - $t0;
like($err, qr/canceling statement due to user request/, 'pg_cancel_backend cancels the waiting receive');
cmp_ok($elapsed, '<', 2.0, 'at once');
$r->{stderr} = '';

# --- statement_timeout ends the wait at once
$r->query_safe("SET statement_timeout = '500ms'");
$t0 = time;
start_receive($r, 'q', '60 s');
$err = finish_failed_receive($r, qr/canceling statement due to statement timeout/);
$elapsed = time - $t0;
like($err, qr/canceling statement due to statement timeout/, 'statement_timeout ends the waiting receive');
cmp_ok($elapsed, '<', 3.0, 'at once');
$r->{stderr} = '';
$r->query_safe('RESET statement_timeout');

# --- the session is fine afterwards (it left the wait list on the error)
$node->safe_psql('postgres', "SELECT sbq_send('q', 'after cancel')");
start_receive($r, 'q', '5 s');
($n, $returned_at) = finish_receive($r);
is($n, 1, 'the next receive of the cancelled session works');
$r->quit;
$node->stop;

# --- without the preload: no worker, waits poll, and stay correct
my $plain = PostgreSQL::Test::Cluster->new('plain');
$plain->init;
$plain->append_conf('postgresql.conf', "log_statement = none\n");
$plain->start;
$plain->safe_psql('postgres', "CREATE EXTENSION sbqueue; SELECT sbq_create_queue('q');");
is($plain->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'sbqueue%'"),
	'0', 'without the preload there is no launcher and no worker');
($r, $rpid) = receiver($plain, '100ms');
start_receive($r, 'q', '30 s');
wait_until_sleeping($plain, $rpid);
$commit_at = $plain->safe_psql('postgres', "SELECT sbq_send('q', 'polled'); $epoch_sql");
$commit_at = (split /\n/, $commit_at)[-1];
($n, $returned_at) = finish_receive($r);
is($n, 1, 'without the preload, the waiting receive still gets the message');
cmp_ok($returned_at - $commit_at, '<', 1.0, 'within about one poll interval');

start_receive($r, 'q', '60 s');
wait_until_sleeping($plain, $rpid);
$t0 = time;
$plain->safe_psql('postgres', "SELECT pg_cancel_backend($rpid)");
$err = finish_failed_receive($r, qr/canceling statement due to user request/);
like($err, qr/canceling statement due to user request/, 'without the preload, a wait is cancellable');
cmp_ok(time - $t0, '<', 2.0, 'at once');
$r->quit;
$plain->stop;

done_testing();
