# Copyright (c) 2026, the sbqueue authors
#
# sbq_get_queue, sbq_get_topic and sbq_get_subscription lock no name: a
# delete may commit while one of them runs. Each looks the entity up, then
# reads the row it returns with a snapshot of its own; a delete that commits
# between the two must make the call fail as if the entity had never been
# there (SB001 for a queue, SB008 for a topic or a subscription), not with an
# internal error (XX000), and leave the session usable.
#
# And calls that store rows of an entity must hold off a delete or change of it
# that would leave those rows wrong (a send that forwards, a change of where its
# queue forwards to): a right granted on a subscription as its
# topic is deleted (a right of a queue that is gone, which no revoke reaches
# and which keeps the role from being dropped), a session accepted or its state
# set as its queue is deleted (a session of no queue, a state lost while the
# call succeeded), dead letters resubmitted as their queue starts forwarding
# (messages that no one may receive and that never move). Each such call is
# held just before it stores, while the delete or change is tried with a lock
# timeout: it must wait for the call (and time out), and the end state must be
# sound.
#
# Made certain with a debugger, which holds the call between its look-up and
# its read or store while another session deletes or changes the entity.
# Skipped where no debugger can attach.
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
	skip 'no debugger (gdb) to hold the backend', 20 unless $gdb;

	my $why = deleted_meanwhile('sbq_storage_queue_tuple',
		q{SELECT lock_duration FROM sbq_get_queue('gone_q');},
		q{SELECT sbq_delete_queue('gone_q')},
		'SB001', 'queue "gone_q" does not exist',
		q{SELECT count(*) FROM sbq_queues WHERE queue = 'gone_q'}, '0');
	skip $why, 20 if $why;

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

	# a purge held once it has found the queue and the caller's right, as the
	# queue (with a message) is deleted: it fails as a purge after the delete
	# (before: it returned 0, which no order of the two gives)
	$node->safe_psql('postgres', q{SELECT sbq_create_queue('gone_pq'); SELECT sbq_send('gone_pq', 'x');});
	deleted_meanwhile('sbq_rights_require',
		q{SELECT sbq_purge_queue('gone_pq');},
		q{SELECT sbq_delete_queue('gone_pq')},
		'SB001', 'queue "gone_pq" does not exist',
		q{SELECT count(*) FROM sbq_queues WHERE queue = 'gone_pq'}, '0');
}

# $change, tried with a lock timeout of 2 s while a call is held: a NOTICE says
# whether it had to wait (and gave up); the call, let go, then does what it does
sub waits
{
	my ($change) = @_;
	return qq{SET lock_timeout = '2s';
		DO \$\$ BEGIN PERFORM $change; RAISE NOTICE 'not held off';
		EXCEPTION WHEN lock_not_available THEN RAISE NOTICE 'held off'; END \$\$;};
}

$node->safe_psql('postgres', q{
	CREATE ROLE gone_r;
	SELECT sbq_create_topic('gone_gt');
	SELECT sbq_create_subscription('gone_gt', 'sub');
	SELECT sbq_create_queue('gone_rq');
	SELECT sbq_create_topic('gone_ft');
	SELECT sbq_create_queue('gone_sq', requires_session => true);
	SELECT sbq_create_topic('gone_st2');
	SELECT sbq_create_subscription('gone_st2', 'ses', requires_session => true);
	SELECT sbq_create_subscription('gone_st2', 'dl');
	SELECT sbq_send('gone_rq', 'dead');
	SELECT sbq_deadletter('gone_rq', lock_token) FROM sbq_receive('gone_rq');
	SELECT sbq_send('gone_st2', 'dead');
	SELECT sbq_deadletter('gone_st2/subscriptions/dl', lock_token) FROM sbq_receive('gone_st2/subscriptions/dl');});

# no row of sbqueue's tables names a queue that is gone
my $orphans = q{SELECT (SELECT count(*) FROM sbq.rights WHERE queue_id NOT IN (SELECT queue_id FROM sbq.queues)
	AND queue_id NOT IN (SELECT topic_id FROM sbq.topics)) || ' ' ||
	(SELECT count(*) FROM sbq.sessions WHERE queue_id NOT IN (SELECT queue_id FROM sbq.queues))};

# $call held at $break while $change is tried: the change must wait for it;
# then $after (in the held session) must print $after_out (with what $call
# printed before it), and, once $then has run (if given), $check print
# $check_out. Returns the reason to skip, if any.
sub holds_off
{
	my ($break, $call, $change, $after, $after_out, $what, $then, $check, $check_out) = @_;
	my ($s, $why, $notices) = SbqNode::held_call($node, $break, $call, waits($change));
	return $why unless $s;
	like($notices, qr/NOTICE:  held off/, "... and $change waits for it");
	my $out = $s->query($after);
	is($out . $s->{stderr}, $after_out, "... and $what");
	$s->quit;
	# (where the change went through under the call, $then may fail)
	$node->psql('postgres', $then) if $then;
	is($node->safe_psql('postgres', $check), $check_out, "... and what is left is sound ($check_out)");
	return undef;
}

SKIP:
{
	skip 'no debugger (gdb) to hold the backend', 29 unless $gdb;

	my $why = holds_off('sbq_storage_set_rights',
		q{SELECT sbq_grant('gone_gt/subscriptions/sub', 'gone_r', '{listen}');},
		q{sbq_delete_topic('gone_gt')},
		q{SELECT 'granted'}, "\ngranted", 'the grant on the subscription goes on',
		q{SELECT sbq_delete_topic('gone_gt')}, $orphans, '0 0');
	skip $why, 29 if $why;
	my ($rc, $out, $err) = $node->psql('postgres', 'DROP ROLE gone_r');
	is($rc . $err, '0', '... and the role can be dropped');

	holds_off('sbq_storage_resubmit',
		q{SELECT sbq_resubmit('gone_rq');}, q{sbq_update_queue('gone_rq', forward_to => 'gone_ft')},
		q{SELECT message_id IS NOT NULL FROM sbq_receive('gone_rq', receive_mode => 'receive_and_delete')},
		"1\nt", 'the dead letter resubmitted is received from its queue',
		undef, q{SELECT forward_to IS NULL FROM sbq_get_queue('gone_rq')}, 't');

	holds_off('sbq_storage_resubmit',
		q{SELECT sbq_resubmit('gone_st2/subscriptions/dl');},
		q{sbq_update_subscription('gone_st2', 'dl', forward_to => 'gone_ft')},
		q{SELECT message_id IS NOT NULL FROM sbq_receive('gone_st2/subscriptions/dl', receive_mode => 'receive_and_delete')},
		"1\nt", 'the dead letter resubmitted to a subscription is received from it',
		undef, q{SELECT forward_to IS NULL FROM sbq_get_subscription('gone_st2', 'dl')}, 't');

	holds_off('sbq_storage_accept_session',
		q{SELECT session_id FROM sbq_accept_session('gone_sq', 'S1');}, q{sbq_delete_queue('gone_sq')},
		q{SELECT 'accepted'}, "S1\naccepted", 'the session is accepted',
		q{SELECT sbq_delete_queue('gone_sq')}, $orphans, '0 0');

	holds_off('sbq_storage_accept_session',
		q{SELECT session_id FROM sbq_accept_session('gone_st2/subscriptions/ses', 'S1');},
		q{sbq_delete_topic('gone_st2')},
		q{SELECT 'accepted'}, "S1\naccepted", 'the session of a subscription is accepted',
		q{SELECT sbq_delete_topic('gone_st2')}, $orphans, '0 0');

	# a send that forwards, held after it read where its queue forwards to, as the queue
	# is updated to forward elsewhere and the old destination is deleted: the update
	# waits for the send, so the message goes by the queue as it is when it commits
	# (before: the update went through, and the send dead-lettered the message as for
	# a destination gone, while its queue forwarded to one that exists)
	$node->safe_psql('postgres', q{
		SELECT sbq_create_queue('gone_fx');
		SELECT sbq_create_queue('gone_fy');
		SELECT sbq_create_queue('gone_fsrc', forward_to => 'gone_fx');});
	my ($s, $w, $notices) = SbqNode::held_call($node, 'sbq_forward_send',
		q{SELECT sbq_send('gone_fsrc', 'hello') > 0;},
		waits(q{sbq_update_queue('gone_fsrc', forward_to => 'gone_fy')})
		  . q{SELECT sbq_delete_queue('gone_fx');});
	like($notices, qr/NOTICE:  held off/, '... and an update of where its queue forwards to waits for it');
	is($s->query(q{SELECT 'sent'}), "t\nsent", '... and the send goes on');
	$s->quit;
	# its destination deleted meanwhile: dead-lettered, by a queue that still forwards there
	is($node->safe_psql('postgres', q{SELECT (SELECT forward_to FROM sbq_get_queue('gone_fsrc')) || ' '
			|| (SELECT count(*) FROM sbq_peek('gone_fsrc/$deadletterqueue', 10)) || ' '
			|| (SELECT count(*) FROM sbq_peek('gone_fy', 10))}), 'gone_fx 1 0',
		'... and the message is dead-lettered as its queue forwards to a destination that is gone');

	# the state of a session accepted before, in a transaction of its own
	$node->safe_psql('postgres', q{SELECT sbq_create_queue('gone_sq', requires_session => true)});
	holds_off('sbq_storage_session_state',
		qq{SELECT session_token AS tok FROM sbq_accept_session('gone_sq', 'S2') \\gset\n}
		  . q{SELECT sbq_set_session_state('gone_sq', :'tok', 'kept'), sbq_release_session('gone_sq', :'tok');},
		q{sbq_delete_queue('gone_sq')},
		q{SELECT 'set'}, "|\nset", 'the state is set',
		undef, q{SELECT convert_from(sbq_get_session_state('gone_sq', session_token), 'UTF8')
			FROM sbq_accept_session('gone_sq', 'S2')}, 'kept');
	$node->safe_psql('postgres', q{SELECT sbq_delete_queue('gone_sq')});
}

# an accept that waits for the next session holds the queue's name only while it
# tries, not while it waits: a delete goes through at once (and holds up no send)
$node->safe_psql('postgres', q{SELECT sbq_create_queue('gone_wq', requires_session => true)});
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe(q{\set VERBOSITY verbose});
	$s->{stdin} .= qq{SELECT count(*) FROM sbq_accept_session('gone_wq', NULL, '10 s');\n\\echo 'accept ended'\n};
	$s->{run}->pump_nb;
	SbqNode::poll_until($node, 'postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%sbq_accept_session(''gone_wq''%' AND wait_event_type = 'Extension'},
		'1');
	my ($rc, $out, $err) = $node->psql('postgres', q{SET lock_timeout = '1s'; SELECT sbq_delete_queue('gone_wq')});
	is($rc . $err, '0', 'a delete of a queue goes through while an accept waits for its next session');
	$s->{run}->pump until $s->{stdout} =~ /accept ended/ || $s->{timeout}->is_expired;
	like($s->{stderr} . $s->{stdout}, qr/SB001|^0$/m, '... and the accept then finds the queue gone');
	$s->quit;
}

# a purge that waits for the rows another transaction purged, which then deletes
# the queue: it fails as a purge after the delete (SB001), and no one deadlocks
# (a purge that held the queue's name while it waited made the delete wait for it)
$node->safe_psql('postgres', q{SELECT sbq_create_queue('gone_pq2');
	SELECT count(sbq_send('gone_pq2', 'x' || i)) FROM generate_series(1, 5) i;});
{
	my $a = $node->background_psql('postgres', on_error_stop => 0);
	$a->query_safe(q{BEGIN; SELECT sbq_purge_queue('gone_pq2');});
	my $b = $node->background_psql('postgres', on_error_stop => 0);
	$b->query_safe(q{\set VERBOSITY verbose});
	$b->{stdin} .= qq{SELECT sbq_purge_queue('gone_pq2');\n\\echo 'purge ended'\n};
	$b->{run}->pump_nb;
	SbqNode::poll_until($node, 'postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%sbq_purge_queue(''gone_pq2'')%' AND wait_event_type = 'Lock'},
		'1');
	my ($out, $ret) = $a->query(q{SET deadlock_timeout = '100ms'; SELECT sbq_delete_queue('gone_pq2'); COMMIT;});
	is($a->{stderr}, '', 'a transaction that purged a queue deletes it while another purge waits for its rows');
	$b->{run}->pump until $b->{stdout} =~ /purge ended/ || $b->{timeout}->is_expired;
	like($b->{stderr}, qr/ERROR:  SB001: queue "gone_pq2" does not exist/,
		'... and the waiting purge then fails as one after the delete');
	unlike($b->{stderr}, qr/40P01|deadlock/, '... not with a deadlock');
	$a->quit;
	$b->quit;
}

# a receive that waits in a session, as its queue is deleted and made again
# without sessions: it fails as a new call would (SB010), not as for a lock
# lost on a queue that has sessions (SB004)
$node->safe_psql('postgres', q{SELECT sbq_create_queue('gone_rs', requires_session => true)});
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe(q{\set VERBOSITY verbose});
	$s->query_safe(q{SELECT session_token AS tok FROM sbq_accept_session('gone_rs', 'S') \gset});
	$s->{stdin} .= qq{SELECT count(*) FROM sbq_receive_session('gone_rs', :'tok', 1, '10 s');\n\\echo 'receive ended'\n};
	$s->{run}->pump_nb;
	SbqNode::poll_until($node, 'postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%sbq_receive_session(''gone_rs''%' AND wait_event_type = 'Extension'},
		'1');
	# in one transaction: between two, the receive may look while there is no
	# queue at all, and fail as a new call would then (SB001)
	$node->safe_psql('postgres',
		q{BEGIN; SELECT sbq_delete_queue('gone_rs'); SELECT sbq_create_queue('gone_rs'); COMMIT;});
	$s->{run}->pump until $s->{stdout} =~ /receive ended/ || $s->{timeout}->is_expired;
	like($s->{stderr}, qr/ERROR:  SB010: queue "gone_rs" does not require sessions/,
		'a receive waiting in a session fails with SB010 once its queue is made again without sessions');
	$s->quit;
}

$node->stop;
done_testing();
