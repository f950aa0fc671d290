# Copyright (c) 2026, the sbqueue authors
#
# F7: correctness never depends on the maintenance worker (I10). Twice under
# load, then a final drain and the checker: first with sbqueue preloaded and
# sbqueue.enable_maintenance_worker = off, then with the library not
# preloaded at all. No worker runs either time, yet messages left to expire
# on their last allowed delivery are dead-lettered at the limit by receive
# (MaxDeliveryCountExceeded, delivery_count = max_delivery_count: I6), and
# messages whose lock expired are received again with the next count (I5);
# I1-I6 hold and pg_amcheck is clean.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../harness";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SbqFault;

my $node = SbqFault::new_node('f7', conf => "sbqueue.enable_maintenance_worker = off\n");
my $ci = SbqFault::conninfo($node);
my $workers = q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'sbqueue maintenance'};

sub run_without_worker
{
	my ($name, $queue) = @_;
	SbqFault::create_queue($node, $queue, lock => 5, mdc => 2);
	my $hist = SbqFault::history($queue);
	my $load = SbqFault::start_load($ci, $queue, $hist, duration => 10, mdc => 2, poison => 0.08);
	usleep(5_000_000);
	is($node->safe_psql('postgres', $workers), '0', "$name: no maintenance worker runs under load");
	SbqFault::stop_load($load, wait => 10);
	my $sum = SbqFault::drain_and_check($ci, $queue, $hist, $name);
	cmp_ok($sum->{dead_lettered_after_expiry} // 0, '>', 0,
		"$name: messages left to expire on their last delivery were dead-lettered by receive ($sum->{dead_lettered_after_expiry})");
	cmp_ok($sum->{redelivered_after_expiry} // 0, '>', 0,
		"$name: messages whose lock expired were received again ($sum->{redelivered_after_expiry})");
	is($node->safe_psql($SbqFault::DB,
			"SELECT count(*) FROM sbq_peek('$queue/\$deadletterqueue', 5000) WHERE dead_letter_reason = 'MaxDeliveryCountExceeded' AND delivery_count = 2"),
		$sum->{dead_letters}, "$name: every dead letter is MaxDeliveryCountExceeded at delivery_count 2");
	is($node->safe_psql('postgres', $workers), '0', "$name: and still no worker ran");
}

ok($node->poll_query_until('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'sbqueue launcher'", '1'),
	'preloaded: the launcher runs');
usleep(1_500_000);
is($node->safe_psql('postgres', $workers), '0', 'sbqueue.enable_maintenance_worker = off: no worker');
run_without_worker('worker off', 'f7off');

# not preloaded at all
$node->append_conf('postgresql.conf', "shared_preload_libraries = ''\n");
$node->restart;
is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'), '', 'restarted without preloading sbqueue');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'sbqueue%'}),
	'0', 'no launcher, no worker');
run_without_worker('not preloaded', 'f7bare');

SbqFault::amcheck($node, 'F7');
SbqFault::log_clean($node, 'F7');
$node->stop;
done_testing();
