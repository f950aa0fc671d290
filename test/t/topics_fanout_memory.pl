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
cmp_ok($peak, '<', 256 * 1024,
	"the sending backend's memory peaked at $peak kB, not in proportion to the copies");

$node->stop;
done_testing();
