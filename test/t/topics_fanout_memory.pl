# Copyright (c) 2026, the sbqueue authors
#
# A batch sent to a topic stores one copy per matching subscription, and one
# per matching rule with an action: a batch of 5,000 to a topic whose 1,500
# rules matched stored 7,500,000 copies, and the backend kept about 10 MB of
# each message's work until the call ended, until the server killed it for its
# memory (and restarted every backend with it). Each message's copies are now
# stored in an SPI level of their own. Here a batch of 1,000 to a topic of 50
# subscriptions with 4 matching rules each (200,000 copies) runs in a backend
# whose peak memory is read from the kernel afterwards; before, it grew by
# about 1.3 GB.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

if (!-r '/proc/self/status')
{
	plan skip_all => 'no /proc/self/status to read the peak memory from';
}

my $node = SbqNode::preloaded('topics_fanout_memory', qq(
shared_buffers = 16MB
autovacuum = off
));
$node->safe_psql('postgres', q{
	CREATE EXTENSION sbqueue;
	SELECT sbq_create_topic('fan');
	SELECT count(sbq_create_subscription('fan', 's' || i)) FROM generate_series(1, 50) i;
	SELECT count(sbq_add_rule('fan', 's' || i, 'r' || j, sql_filter => '1 = 1',
	                          action => 'SET hop = ' || j))
	  FROM generate_series(1, 50) i, generate_series(1, 4) j;
	SELECT count(sbq_remove_rule('fan', 's' || i, '$Default')) FROM generate_series(1, 50) i;
});

# the peak resident memory of the backend that sent, in kB, as the kernel kept it
my $out = $node->safe_psql('postgres', q{
	SELECT count(*) FROM sbq_send_batch('fan', array_fill('fan out'::text, ARRAY[1000]));
	SELECT substring(pg_read_file('/proc/self/status') FROM 'VmHWM:\s*(\d+) kB');
});
my ($sent, $peak) = split /\n/, $out;
is($sent, '1000', 'the batch of 1,000 was sent');
is( $node->safe_psql('postgres', q{SELECT count(*) FROM sbq.messages}),
	'200000', 'each message was stored once per matching rule of each subscription: 200,000 copies');
cmp_ok($peak, '<', 128 * 1024,
	"the sending backend's memory peaked at $peak kB, not in proportion to the copies");

# a topic whose subscription forwards to another topic, in REPEATABLE READ (where
# the backend keeps no topic in its cache): each forwarded copy reads the second
# topic's subscriptions and compiles their 300 rules, and each message kept its
# reading until the call ended (190 MB for this batch of 500)
$node->safe_psql('postgres', q{
	SELECT sbq_create_topic('ta');
	SELECT sbq_create_topic('tb');
	SELECT sbq_create_subscription('ta', 'tob', forward_to => 'tb');
	SELECT sbq_create_subscription('tb', 'sb');
	SELECT sbq_remove_rule('tb', 'sb', '$Default');
	SELECT count(sbq_add_rule('tb', 'sb', 'r' || j, sql_filter => 'n = ' || j))
	  FROM generate_series(1, 300) j;
});
$out = $node->safe_psql('postgres', q{
	BEGIN ISOLATION LEVEL REPEATABLE READ;
	SELECT count(*) FROM sbq_send_batch('ta', array_fill('forwarded'::text, ARRAY[500]));
	COMMIT;
	SELECT substring(pg_read_file('/proc/self/status') FROM 'VmHWM:\s*(\d+) kB');
});
($sent, $peak) = split /\n/, $out;
is($sent, '500', 'the batch of 500 forwarded to a topic of 300 rules was sent');
cmp_ok($peak, '<', 100 * 1024,
	"under REPEATABLE READ the sending backend's memory peaked at $peak kB");

$node->stop;
done_testing();
