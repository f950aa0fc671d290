# Copyright (c) 2026, the sbqueue authors
#
# F5: a crash loop. Under load, the server is stopped with mode immediate
# (no shutdown checkpoint: crash recovery on the next start) and started
# again, 3 times (10 with SBQ_FULL=1). After every restart the maintenance
# worker runs again and the clients, which reconnect after every error, go
# on working. Then a final drain, the checker (I1-I6, a crash being allowed to
# lose locks and at most one delivery count per message) and pg_amcheck.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../harness";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SbqFault;

my $cycles = $ENV{SBQ_FULL} ? 10 : 3;
my $node = SbqFault::new_node('f5');
SbqFault::create_queue($node, 'f5', lock => 5, mdc => 3);
my $ci = SbqFault::conninfo($node);
my $hist = SbqFault::history('f5');
ok(SbqFault::worker_running($node), 'the maintenance worker runs');

my $load = SbqFault::start_load($ci, 'f5', $hist, duration => 300);
for my $i (1 .. $cycles)
{
	usleep(int((2 + rand(2)) * 1e6));
	my $t0 = time;
	$node->stop('immediate');
	$node->start;
	SbqFault::record_crash($hist, $t0, time, "immediate stop $i");
	ok(SbqFault::worker_running($node), "cycle $i: the maintenance worker runs again after the restart");
}
my $t_last = time;
usleep(2_500_000);
SbqFault::stop_load($load);

my @after = grep { /"ev":"done"/ && /"outcome":"ok"/ && /"t_invoke":([\d.]+)/ && $1 > $t_last }
  split /\n/, slurp_file($hist);
cmp_ok(scalar @after, '>', 10, 'the clients reconnected and worked after the last restart');

my $sum = SbqFault::drain_and_check($ci, 'f5', $hist, 'F5');
cmp_ok($sum->{sent_ok} // 0, '>', 100, 'the load sent messages');
cmp_ok($sum->{completed} // 0, '>', 100, 'and completed them');
cmp_ok($sum->{dead_letters} // 0, '>', 0, 'and dead-lettered some at the limit');
is($sum->{crashes}, $cycles, "the checker allowed for exactly $cycles crashes");
SbqFault::amcheck($node, 'F5');
SbqFault::log_clean($node, 'F5');

$node->stop;
done_testing();
