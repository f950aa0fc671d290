# Copyright (c) 2026, the sbqueue authors
#
# F4: kill -9 of random backends of the load clients, several times under
# load (4 kills; 10 with SBQ_FULL=1). Each kill makes the postmaster reset
# every backend (restart_after_crash); the clients see their calls end with
# an unknown outcome and reconnect. Afterwards a final drain and the checker:
# every acknowledged send survived (I1), a completed message never came back
# (I4), and I2, I3, I5, I6 hold, a crash being allowed to lose locks and at
# most one delivery count per message (API.md). pg_amcheck is clean and no
# process crashed but the ones killed.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../harness";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SbqFault;

my $kills = $ENV{SBQ_FULL} ? 10 : 4;
my $node = SbqFault::new_node('f4');
SbqFault::create_queue($node, 'f4', lock => 5, mdc => 3);
my $ci = SbqFault::conninfo($node);
my $hist = SbqFault::history('f4');

my $load = SbqFault::start_load($ci, 'f4', $hist, duration => 300);
usleep(2_500_000);
my (%killed, $restarts);
$restarts = SbqFault::restarts($node);
for my $i (1 .. $kills)
{
	my ($pid, $t0, $sent) = ('', 0, 0);
	my $deadline = time + 10;
	# the clients may still be reconnecting, and a backend chosen may end
	# before the signal (then there is no crash to wait for): choose again
	while (!$sent && time < $deadline)
	{
		$pid = $node->safe_psql($SbqFault::DB, q{
			SELECT pid FROM pg_stat_activity
			 WHERE application_name LIKE 'sbq-load-%' AND backend_type = 'client backend'
			 ORDER BY random() LIMIT 1});
		$t0 = time;
		$sent = kill('KILL', $pid) if $pid ne '';
		usleep(100_000) unless $sent;
	}
	ok($sent, "kill $i: a backend of the load clients killed ($pid)");
	$killed{$pid} = 1;
	$restarts++;
	ok(SbqFault::wait_restart($node, $restarts, 60), "kill $i: the server restarted after the crash");
	SbqFault::record_crash($hist, $t0, time, "kill -9 of backend $pid");
	usleep(int((1.5 + rand(2)) * 1e6));
}
my $t_last = time;
usleep(2_000_000);
SbqFault::stop_load($load);

my @after = grep { /"ev":"done"/ && /"outcome":"ok"/ && /"t_invoke":([\d.]+)/ && $1 > $t_last }
  split /\n/, slurp_file($hist);
cmp_ok(scalar @after, '>', 10, 'the clients reconnected and worked after the last crash');

my $sum = SbqFault::drain_and_check($ci, 'f4', $hist, 'F4');
cmp_ok($sum->{sent_ok} // 0, '>', 100, 'the load sent messages');
cmp_ok($sum->{completed} // 0, '>', 100, 'and completed them');
note("unknown outcomes: sends $sum->{sent_unknown}, receives $sum->{receives_unknown}, settles $sum->{settles_unknown}; recovered $sum->{recovered}");
SbqFault::amcheck($node, 'F4');
SbqFault::log_clean($node, 'F4', \%killed);

$node->stop;
done_testing();
