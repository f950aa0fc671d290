# Copyright (c) 2026, the sbqueue authors
#
# A backend keeps the queues it has looked up (src/queues.c), and drops them
# when sbq.queues is invalidated. A change that commits while a backend reads
# a queue, after the read's snapshot, announces itself while the read is
# still going on (looking up the queue's rights opens relations, which takes
# the invalidation in). The row read before the change must then not be kept:
# kept, it hid the change from every later call of that backend (here a new
# lock duration; as well a revoke, or a queue deleted and made again). The
# same for a topic, in a cache of its own, first looked up other than by a
# send (here a lower maximum size, which the next send must be held to).
#
# Made certain with a debugger, which holds the backend's first look-up where
# it loads the queue's rights, while the queue is changed. Skipped where no
# debugger can attach.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

my $node = SbqNode::preloaded('queue_management_cache');
$node->safe_psql('postgres', 'CREATE EXTENSION sbqueue');
$node->safe_psql('postgres', q{SELECT sbq_create_queue('cached', lock_duration => '30 seconds')});

my $gdb = `command -v gdb 2>/dev/null`;
chomp $gdb;

# the first look-up of a new session, held where it loads the rights of what it names
sub held_lookup
{
	return SbqNode::held_call($node, 'sbq_rights_load', @_);
}

SKIP:
{
	skip 'no debugger (gdb) to hold the backend', 6 unless $gdb;

	# a queue: the send that was held used the row it had read; the next call sees the change
	my ($s, $why) = held_lookup(q{SELECT sbq_send('cached', 'first') > 0;},
		q{SELECT sbq_update_queue('cached', lock_duration => '5 minutes')});
	skip $why, 6 unless $s;
	my $out = $s->query_safe(q{
		SELECT 'lock ' || ((locked_until - now()) > interval '1 minute') FROM sbq_receive('cached', 1)});
	like($out, qr/^t$/m, '... and its send went on');
	like($out, qr/^lock true$/m,
		'... and the next call of that backend locks for the lock duration the queue was changed to meanwhile');
	$s->quit;

	# a topic, first looked up other than by a send (its own cache, which a send then
	# reads): a maximum size lowered meanwhile holds for the next send
	$node->safe_psql('postgres', q{
		SELECT sbq_create_topic('ctopic');
		SELECT sbq_create_subscription('ctopic', 'sub');});
	($s, $why) = held_lookup(q{SELECT max_message_size FROM sbq_get_topic('ctopic');},
		q{SELECT sbq_update_topic('ctopic', max_message_size => 1024)});
	skip $why, 3 unless $s;
	$out = $s->query(q{SELECT sbq_send('ctopic', repeat('x', 2000))});
	like($out, qr/^[0-9]+$/m, '... and the look-up of the topic went on');
	like($s->{stderr}, qr/message of 2000 bytes is too large for queue "ctopic"/,
		'... and the next send of that backend is held to the maximum size the topic was changed to meanwhile');
	$s->quit;
}

$node->stop;
done_testing();
