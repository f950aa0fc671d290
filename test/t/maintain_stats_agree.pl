# Copyright (c) 2026, the sbqueue authors
#
# sbq_queue_stats agrees with sbq_peek, at every instant. One statement in a
# REPEATABLE READ transaction reads the stats and peeks each queue and its
# dead-letter sub-queue, over and over, while locks (in shared memory and in
# the rows) run out, messages are dead-lettered by the maintenance worker and
# by receives, times to live run out (dead-lettered, or dropped) and
# scheduled messages come due. Every sample must split the messages as peek
# shows them: active = peek's active rows without a lock, locked = rows under
# a lock, deferred = deferred rows without a lock, scheduled = scheduled
# rows, dead letters = the rows peek shows in the dead-letter sub-queue; so
# the five counts add up to what the two peeks show.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;
use Time::HiRes qw(time usleep);

my $node = SbqNode::preloaded('stats_agree', qq(
sbqueue.enable_maintenance_worker = on
sbqueue.maintenance_interval = '1s'
));
$node->safe_psql('postgres', q{
	CREATE EXTENSION sbqueue;
	-- every lock runs out on its last delivery: dead-lettered by receive or maintenance
	SELECT sbq_create_queue('a_last', lock_duration => '5 s', max_delivery_count => 1);
	-- locks that run out and leave the messages active, or deferred
	SELECT sbq_create_queue('b_mix', lock_duration => '5 s', max_delivery_count => 10);
	-- times to live that run out: dead-lettered, or dropped
	SELECT sbq_create_queue('c_ttl', default_message_ttl => '3 s',
		dead_lettering_on_message_expiration => true);
	SELECT sbq_create_queue('e_drop', default_message_ttl => '4 s');
	SELECT sbq_create_queue('d_sched');
});
my @queues = qw(a_last b_mix c_ttl d_sched e_drop);

my $t0 = time;
$node->safe_psql('postgres', q{
	SELECT count(*) FROM unnest(ARRAY['a_last', 'b_mix', 'c_ttl', 'e_drop']) q,
		LATERAL sbq_send_batch(q, array_fill('m'::text, ARRAY[20])) s;
	SELECT count(*) FROM sbq_send_batch('d_sched', array_fill('s'::text, ARRAY[20]),
		scheduled_enqueue_time => clock_timestamp() + interval '4 s');
	-- locks in shared memory
	SELECT count(*) FROM sbq_receive('a_last', 20);
	SELECT count(*) FROM sbq_receive('b_mix', 6);
	SELECT count(*) FROM sbq_receive('c_ttl', 5);
});
$node->safe_psql('postgres', q{
	-- locks in the rows
	SET sbqueue.memory_locks = off;
	SELECT count(*) FROM sbq_receive('b_mix', 6);
});
$node->safe_psql('postgres', q{
	-- deferred messages, two of them received again by number (locked, deferred)
	DO $$
	DECLARE
		m record;
	BEGIN
		FOR m IN SELECT * FROM sbq_receive('b_mix', 3) LOOP
			PERFORM sbq_defer('b_mix', m.lock_token);
		END LOOP;
	END $$;
	SELECT count(*) FROM sbq_receive_deferred('b_mix',
		(SELECT array_agg(sequence_number) FROM (SELECT sequence_number FROM sbq_peek('b_mix', 100)
		  WHERE state = 'deferred' ORDER BY 1 LIMIT 2) d));
});

# receives that dead-letter: a_last's messages once their locks ran out, and
# c_ttl's once their time to live ran out (not before: they would hand them out)
my $receiver = $node->background_psql('postgres', on_error_stop => 0);
$receiver->query_until(qr/receiving/, q{
	\echo receiving
	DO $$
	DECLARE
		start timestamptz := clock_timestamp();
	BEGIN
		WHILE clock_timestamp() < start + interval '9 s' LOOP
			PERFORM count(*) FROM sbq_receive('a_last', 5);
			IF clock_timestamp() > start + interval '3.5 s' THEN
				PERFORM count(*) FROM sbq_receive('c_ttl', 5);
			END IF;
			COMMIT;
			PERFORM pg_sleep(0.2);
		END LOOP;
	END $$;
});

my $list = join(', ', map { "'$_'" } @queues);
my $sample = qq{
	BEGIN ISOLATION LEVEL REPEATABLE READ;
	SELECT s.queue, s.active_count, s.locked_count, s.deferred_count, s.scheduled_count,
		   s.dead_letter_count, p.a, p.l, p.d, p.s, dl.n
	  FROM sbq_queue_stats s
	 CROSS JOIN LATERAL (
		SELECT count(*) FILTER (WHERE state = 'active' AND locked_until IS NULL) AS a,
			   count(*) FILTER (WHERE locked_until IS NOT NULL) AS l,
			   count(*) FILTER (WHERE state = 'deferred' AND locked_until IS NULL) AS d,
			   count(*) FILTER (WHERE state = 'scheduled') AS s
		  FROM sbq_peek(s.queue, 5000)) p
	 CROSS JOIN LATERAL (
		SELECT count(*) AS n FROM sbq_peek(s.queue || '/\$deadletterqueue', 5000)) dl
	 WHERE s.queue IN ($list)
	 ORDER BY s.queue;
	COMMIT;
};

my $sampler = $node->background_psql('postgres', on_error_stop => 1);
my ($samples, $bad, %seen) = (0, 0);
my $first_bad = '';
# 10 s covers the moves; on a slow machine the sampling goes on (up to 30 s)
# until it has its 100 samples
while (time < $t0 + 10 || ($samples < 100 && time < $t0 + 30))
{
	my $out = $sampler->query_safe($sample);
	$samples++;
	for my $line (split /\n/, $out)
	{
		my ($q, @v) = split /\|/, $line;
		next unless defined $q && @v == 10;
		my @stats = @v[0 .. 4];
		my @peek = @v[5 .. 9];
		if ("@stats" ne "@peek")
		{
			$bad++;
			$first_bad ||= sprintf("%s at %.1f s: stats %s, peek %s", $q, time - $t0,
				"@stats", "@peek");
		}
		# what the run went through, to show it covered the moves
		$seen{"$q dead"} = 1 if $v[4] > 0;
		$seen{"$q locked"} = 1 if $v[1] > 0;
		$seen{"$q deferred"} = 1 if $v[2] > 0;
		$seen{"$q scheduled"} = 1 if $v[3] > 0;
		$seen{"$q active"} = 1 if $v[0] > 0;
	}
	usleep(20_000);
}
$receiver->quit;
$sampler->quit;

cmp_ok($samples, '>=', 100, "$samples samples of the stats and the peeks");
is($bad, 0, 'in every sample the stats split the messages as the peeks show them')
  or diag("first disagreement: $first_bad");
ok($seen{'a_last locked'} && $seen{'a_last dead'} && $seen{'c_ttl active'} && $seen{'c_ttl dead'},
	'samples were taken before and after messages moved to the dead-letter sub-queues');
ok($seen{'b_mix locked'} && $seen{'b_mix deferred'} && $seen{'d_sched scheduled'},
	'samples were taken with locked, deferred and scheduled messages');

# where the run ended: every move made
is($node->safe_psql('postgres', qq{
	SELECT string_agg(format('%s %s/%s/%s/%s/%s', queue, active_count, locked_count,
		deferred_count, scheduled_count, dead_letter_count), ', ' ORDER BY queue)
	  FROM sbq_queue_stats WHERE queue IN ($list)}),
	'a_last 0/0/0/0/20, b_mix 17/0/3/0/0, c_ttl 0/5/0/0/15, d_sched 20/0/0/0/0, e_drop 0/0/0/0/0',
	'at the end: a_last all dead letters, b_mix locks ran out, c_ttl expired but the locked five, d_sched due, e_drop dropped');

$node->stop;
done_testing();
