# Copyright (c) 2026, the sbqueue authors
#
# sbq_get_queue, sbq_get_topic and sbq_get_subscription lock no name: a
# delete may commit while one of them runs. Each looks the entity up, then
# reads the row it returns with a snapshot of its own; a delete that commits
# between the two must make the call fail as if the entity had never been
# there (SB001 for a queue, SB008 for a topic or a subscription), not with an
# internal error (XX000), and leave the session usable.
#
# Made certain with a debugger, which holds the call between its look-up and
# its read while another session deletes the entity. Skipped where no debugger
# can attach.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

my $node = SbqNode::preloaded('queue_management_deleted');
$node->safe_psql('postgres', q{
	CREATE EXTENSION sbqueue;
	SELECT sbq_create_queue('gone_q');
	SELECT sbq_create_topic('gone_t');
	SELECT sbq_create_topic('gone_st');
	SELECT sbq_create_subscription('gone_st', 'sub1');
	SELECT sbq_create_subscription('gone_st', 'sub2');});

my $gdb = `command -v gdb 2>/dev/null`;
chomp $gdb;

# $call held at $break while $delete commits: it must fail with $state and
# $message, and the session's next call ($after) must work
sub deleted_meanwhile
{
	my ($break, $call, $delete, $state, $message, $after, $after_out) = @_;
	my ($s, $why) = SbqNode::held_call($node, $break, "\\set VERBOSITY verbose\n$call", $delete);
	return $why unless $s;
	my ($out) = $s->query($after);
	like($s->{stderr}, qr/ERROR:  $state: \Q$message\E/,
		"... and it fails with $state, \"$message\", as the entity is gone");
	unlike($s->{stderr}, qr/XX000/, '... and with no internal error');
	is($out, $after_out, "... and the session goes on: $after");
	$s->quit;
	return undef;
}

SKIP:
{
	skip 'no debugger (gdb) to hold the backend', 16 unless $gdb;

	my $why = deleted_meanwhile('sbq_storage_queue_tuple',
		q{SELECT lock_duration FROM sbq_get_queue('gone_q');},
		q{SELECT sbq_delete_queue('gone_q')},
		'SB001', 'queue "gone_q" does not exist',
		q{SELECT count(*) FROM sbq_queues WHERE queue = 'gone_q'}, '0');
	skip $why, 16 if $why;

	deleted_meanwhile('sbq_storage_topic_tuple',
		q{SELECT max_message_size FROM sbq_get_topic('gone_t');},
		q{SELECT sbq_delete_topic('gone_t')},
		'SB008', 'topic "gone_t" does not exist',
		q{SELECT topic FROM sbq_create_topic('gone_t')}, 'gone_t');

	deleted_meanwhile('sbq_storage_subscription_tuple',
		q{SELECT lock_duration FROM sbq_get_subscription('gone_st', 'sub1');},
		q{SELECT sbq_delete_subscription('gone_st', 'sub1')},
		'SB008', 'subscription "sub1" of topic "gone_st" does not exist',
		q{SELECT subscription FROM sbq_get_subscription('gone_st', 'sub2')}, 'sub2');

	# between the look-up of the subscription and that of its queue
	deleted_meanwhile('sbq_storage_find_queue',
		q{SELECT lock_duration FROM sbq_get_subscription('gone_st', 'sub2');},
		q{SELECT sbq_delete_subscription('gone_st', 'sub2')},
		'SB008', 'subscription "sub2" of topic "gone_st" does not exist',
		q{SELECT count(*) FROM sbq_subscriptions WHERE topic = 'gone_st'}, '0');
}

$node->stop;
done_testing();
