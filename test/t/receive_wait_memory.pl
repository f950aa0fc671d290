# Copyright (c) 2026, the sbqueue authors
#
# A receive that waits (max_wait) looks again after every commit on its queue
# and every sbqueue.receive_poll_interval. Each look ran its statements in the
# one storage section of the call, whose results stayed until the call
# returned: about 20 kB a look, so a receive waiting an hour at the default
# interval grew its server process by up to 1.4 GB, and any role with listen
# on a queue could make one grow without bound (found by a review). Here the
# waits look every millisecond, a thousand times a second, and the process
# must not grow while they wait: on the code before it grew by about 10 MB a
# second. The same for a receive's passes behind expired messages (below).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

my $node = SbqNode::preloaded('receive_wait_memory');
$node->safe_psql('postgres', q{
	CREATE EXTENSION sbqueue;
	SELECT sbq_create_queue('idle');
	SELECT sbq_create_queue('idle_sessions', requires_session => true);
	SELECT sbq_send('idle_sessions', 'x', session_id => 's1');
});

# the resident memory of a server process, in kB
sub rss_kb
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/status") or return -1;
	while (my $line = <$fh>)
	{
		return $1 if $line =~ /^VmRSS:\s+(\d+)/;
	}
	return -1;
}

my @waits = (
	[ 'a peek-lock receive', q{SELECT count(*) FROM sbq_receive('idle', 1, '6 seconds')} ],
	[ 'a receive-and-delete', q{SELECT count(*) FROM sbq_receive('idle', 1, '6 seconds', 'receive_and_delete')} ],
	[ 'a receive of the dead-letter sub-queue',
	  q{SELECT count(*) FROM sbq_receive('idle/$deadletterqueue', 1, '6 seconds')} ],
	[ 'a receive of a session',
	  q{SELECT count(*) FROM sbq_receive_session('idle_sessions', :'token', 1, '6 seconds')} ]);

SKIP:
{
	skip 'no /proc to read a process\'s memory from', scalar(@waits) unless -r "/proc/self/status";
	for my $w (@waits)
	{
		my ($what, $sql) = @$w;
		my $bg = $node->background_psql('postgres', on_error_stop => 0);
		my $pid = $bg->query_safe('SELECT pg_backend_pid()');
		$bg->query_safe('SET sbqueue.receive_poll_interval = 1');
		# the session's one message under the session's own lock: a look finds nothing
		if ($what =~ /session/)
		{
			my $token = $bg->query_safe(
				q{SELECT session_token FROM sbq_accept_session('idle_sessions', 's1')});
			$bg->query_safe("\\set token $token");
			$bg->query_safe(q{SELECT count(*) FROM sbq_receive_session('idle_sessions', :'token', 1)});
		}
		$bg->{stdin} .= "$sql;\n";
		$bg->{run}->pump_nb;
		SbqNode::poll_until($node, 'postgres',
			"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid AND state = 'active'", '1');
		sleep 1;
		my $first = rss_kb($pid);
		sleep 3;
		my $later = rss_kb($pid);
		cmp_ok($later - $first, '<', 4096,
			"$what that waits does not grow its process ("
			  . ($later - $first) . " kB in 3 s of looks every millisecond)");
		eval { $bg->quit; };
	}
}

# A receive behind many messages it only takes off the queue (their time to live
# passed; maintenance is not running) makes a pass for each when it asks for one
# message: each pass's results stayed until the call returned, about 8 kB a pass
# (peak 186 MB behind 10,000 on the code before). The process's peak while the
# receive runs, sampled every 10 ms.
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET sbqueue.enable_maintenance_worker = off;
	SELECT pg_reload_conf();
});
for my $w ([ 'a peek-lock receive', 'on', 10000, 'peek_lock', 49152 ],
	[ 'a receive-and-delete', 'on', 4000, 'receive_and_delete', 24576 ],
	[ 'a peek-lock receive with the locks in rows', 'off', 4000, 'peek_lock', 24576 ])
{
	my ($what, $memory_locks, $n, $mode, $limit_kb) = @$w;
	my $q = "backlog_${mode}_$memory_locks";
	$node->safe_psql('postgres', qq{
		SELECT sbq_create_queue('$q');
		SELECT count(*) FROM generate_series(1, $n / 2000) g,
			LATERAL (SELECT sbq_send_batch('$q', array_fill('x'::text, ARRAY[2000]),
			                               time_to_live => '1 second') WHERE g > 0) b;
		SELECT sbq_send('$q', 'live');
	});
	sleep 2;
	SKIP:
	{
		skip 'no /proc to read a process\'s memory from', 1 unless -r "/proc/self/status";
		my $bg = $node->background_psql('postgres', on_error_stop => 0);
		my $pid = $bg->query_safe('SELECT pg_backend_pid()');
		$bg->query_safe("SET sbqueue.memory_locks = $memory_locks");
		my $before = rss_kb($pid);
		$bg->{stdin} .= "SELECT count(*) FROM sbq_receive('$q', 1, receive_mode => '$mode');\n";
		$bg->{run}->pump_nb;
		my $peak = $before;
		my $idle = 0;
		for (my $i = 0; $i < 12000 && $idle < 3; $i++)
		{
			my $rss = rss_kb($pid);
			$peak = $rss if $rss > $peak;
			select(undef, undef, undef, 0.01);
			$idle = $node->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid AND state = 'idle'") eq '1'
			  ? $idle + 1 : 0
			  if $i % 10 == 9;
		}
		cmp_ok($peak - $before, '<', $limit_kb,
			"$what behind $n expired messages keeps no pass's results (peak +"
			  . ($peak - $before) . " kB)");
		eval { $bg->quit; };
	}
}
is($node->safe_psql('postgres', q{SELECT sum(expired) FROM sbq_queue_stats WHERE queue LIKE 'backlog%'}),
	'18000', '... and each took every expired message off its queue');

done_testing();
