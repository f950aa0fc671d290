# Copyright (c) 2026, the sbqueue authors
#
# F8: failover to a synchronous streaming replica under load. The primary
# runs with synchronous_standby_names = '*' and synchronous_commit = on.
# Before promotion, on the hot standby, sbq_peek works while the writing
# calls (sbq_send, sbq_receive in both modes, sbq_complete, sbq_abandon on a
# real token) fail with SQLSTATE 25006, and no maintenance worker runs
# there. Then the primary is stopped with mode immediate and the standby
# promoted; the clients, whose connection string lists both servers with
# target_session_attrs=read-write, move to it and go on. The final drain and
# the checker prove that no acknowledged send and no acknowledged complete was
# lost (a completed message never comes back): I1-I6 hold, the failover being
# allowed what a crash is (lost locks, at most one lost count per message).
# pg_amcheck is clean on the promoted server.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../harness";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SbqFault;

my $primary = SbqFault::new_node('f8primary', streaming => 1, conf => "synchronous_commit = on\n");
SbqFault::create_queue($primary, 'f8', lock => 5, mdc => 3);
$primary->backup('bk');
my $standby = PostgreSQL::Test::Cluster->new('f8standby');
$standby->init_from_backup($primary, 'bk', has_streaming => 1);
$standby->start;
$primary->safe_psql('postgres', "ALTER SYSTEM SET synchronous_standby_names = '*'");
$primary->reload;
ok($primary->poll_query_until('postgres',
		"SELECT string_agg(sync_state, ',') FROM pg_stat_replication", 'sync'),
	'the standby is a synchronous standby');
is($primary->safe_psql('postgres', 'SHOW synchronous_commit'), 'on', 'synchronous_commit = on');

my $ci = SbqFault::conninfo($primary, $standby);
my $hist = SbqFault::history('f8');
my @common = ('--conninfo', $ci, '--queue', 'f8', '--history', $hist);
my $load = SbqFault::start_load($ci, 'f8', $hist, duration => 300);
usleep(2_000_000);

# --- the standby before promotion: peek works, writes fail with 25006
# (the load's consumers compete for the messages: wait for one, a few times)
my ($rc, $out, $held);
for my $try (1 .. 5)
{
	($rc, $out) = SbqFault::run('once', 20, @common, '--max', 1, '--settle', 'none', '--wait', '3 seconds');
	$held = SbqFault::last_json($out)->{msgs}[0];
	last if defined $held;
}
ok(defined $held, 'a message received (and held) on the primary');
$primary->wait_for_catchup($standby, 'replay');
my $db = $SbqFault::DB;
my ($st, $stdout);
($rc, $stdout, $st) = SbqFault::psql_state($standby, $db,
	"SELECT count(*) FROM sbq_peek('f8', 10, $held->{seq}) WHERE sequence_number = $held->{seq}");
# (its lock is kept in the primary's memory: the standby shows the message, not the lock)
is("$rc $stdout", '0 1', 'on the standby, sbq_peek works and shows the held message');
my %calls = (
	'sbq_send'                     => "SELECT sbq_send('f8', 'x')",
	'sbq_send_batch'               => "SELECT sbq_send_batch('f8', ARRAY['x', 'y'])",
	'sbq_receive (peek_lock)'      => "SELECT * FROM sbq_receive('f8', 5)",
	'sbq_receive (receive_and_delete)' => "SELECT * FROM sbq_receive('f8', 5, receive_mode => 'receive_and_delete')",
	'sbq_complete'                 => "SELECT sbq_complete('f8', '$held->{token}'::uuid)",
	'sbq_complete (uuid[])'        => "SELECT sbq_complete('f8', ARRAY['$held->{token}']::uuid[])",
	'sbq_abandon'                  => "SELECT sbq_abandon('f8', '$held->{token}'::uuid)",
);
for my $c (sort keys %calls)
{
	my ($r, $o, $state, $err) = SbqFault::psql_state($standby, $db, $calls{$c});
	is($state, '25006', "on the standby, $c fails with 25006") or diag($err);
}
is($standby->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'sbqueue%'}),
	'0', 'no launcher or worker on the standby');
($rc, $out) = SbqFault::run('settle', 20, @common, '--token', $held->{token});
is(SbqFault::last_json($out)->[0]{outcome}, 'ok',
	'the token the standby refused is still valid on the primary: completed there');

# --- failover under load
usleep(2_000_000);
my $t0 = time;
$primary->stop('immediate');
$standby->promote;
my $t1 = time;
SbqFault::record_crash($hist, $t0, $t1, 'failover: primary stopped immediately, standby promoted');
ok(SbqFault::worker_running($standby), 'after promotion the maintenance worker runs on the new primary');
usleep(4_000_000);
SbqFault::stop_load($load);
my @after = grep { /"ev":"done"/ && /"outcome":"ok"/ && /"t_invoke":([\d.]+)/ && $1 > $t1 }
  split /\n/, slurp_file($hist);
cmp_ok(scalar @after, '>', 10, 'the clients moved to the promoted standby and worked there');
my @sends_after = grep { /"op":"send"/ } @after;
my @completes_after = grep { /"op":"complete"/ } @after;
cmp_ok(scalar @sends_after, '>', 0, 'sends succeeded on the new primary');
cmp_ok(scalar @completes_after, '>', 0, 'completes succeeded on the new primary');

my $sum = SbqFault::drain_and_check(SbqFault::conninfo($standby), 'f8', $hist, 'F8');
cmp_ok($sum->{completed} // 0, '>', 50, 'messages were completed across the failover');
SbqFault::amcheck($standby, 'F8');
SbqFault::log_clean($standby, 'F8');

$standby->stop;
done_testing();
