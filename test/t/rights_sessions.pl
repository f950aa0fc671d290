# Copyright (c) 2026, the sbqueue authors
#
# Queue rights across sessions: a revoke counts at the other session's next
# call, also inside a REPEATABLE READ transaction and in a receive that is
# waiting; a queue deleted and made again under such a transaction takes no
# message into the old one; DROP OWNED by the role itself works while it holds
# rights (which stay, and keep DROP ROLE refused); and a role without the right
# does not queue for a queue's name lock, where it would hold up senders.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

my $node = SbqNode::preloaded('rights_sessions');
$node->safe_psql('postgres', q{
	CREATE EXTENSION sbqueue;
	CREATE ROLE app LOGIN;
	CREATE ROLE nobody LOGIN;
	CREATE ROLE victim LOGIN;
	SELECT sbq_create_queue('q1');
	SELECT sbq_grant('q1', 'app', ARRAY['send', 'listen']);
});

sub as_app
{
	my ($role) = @_;
	return $node->background_psql('postgres', on_error_stop => 0,
		extra_params => [ '-U', $role ]);
}

### a revoke counts inside the other session's REPEATABLE READ transaction
{
	my $b = as_app('app');
	$b->query_safe('SELECT count(*) FROM sbq_peek(\'q1\')');
	$b->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1;');
	$node->safe_psql('postgres', q{SELECT sbq_revoke('q1', 'app', ARRAY['send', 'listen'])});
	$b->{stderr} = '';
	$b->query(q{SELECT count(*) FROM sbq_peek('q1')});
	like($b->{stderr}, qr/permission denied for queue "q1"/,
		'a peek inside a REPEATABLE READ transaction older than the revoke is refused');
	$b->query('ROLLBACK');
	$b->{stderr} = '';
	$b->query(q{SELECT sbq_send('q1', 'after the revoke')});
	like($b->{stderr}, qr/permission denied for queue "q1"/,
		'... and so is a send in the next transaction of that session');
	$b->quit;
	is($node->safe_psql('postgres', q{SELECT count(*) FROM sbq_peek('q1', 10)}), '0',
		'nothing was sent after the revoke');
}

### a queue deleted and made again while a REPEATABLE READ transaction looked
{
	$node->safe_psql('postgres', q{
		SELECT sbq_create_queue('q2');
		SELECT sbq_grant('q2', 'app', ARRAY['send', 'listen']);
	});
	my $b = as_app('app');
	$b->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1;');
	$node->safe_psql('postgres', q{
		SELECT sbq_delete_queue('q2');
		SELECT sbq_create_queue('q2');
		SELECT sbq_grant('q2', 'app', ARRAY['send', 'listen']);
	});
	$b->query(q{SELECT count(*) FROM sbq_peek('q2')});
	$b->query('COMMIT');
	$b->{stderr} = '';
	$b->query(q{SELECT sbq_send('q2', 'into the new q2')});
	is($b->{stderr}, '', 'a send after that transaction works');
	$b->quit;
	is($node->safe_psql('postgres', q{SELECT count(*) FROM sbq_peek('q2', 10)}), '1',
		'... and the message is in the queue q2 that exists now');
	is( $node->safe_psql('postgres', q{
			SELECT count(*) FROM sbq.messages m
			 WHERE NOT EXISTS (SELECT 1 FROM sbq.queues q WHERE q.queue_id = m.queue_id)}),
		'0', '... not in the one deleted before');
}

### a receive that waits stops when its right is revoked
{
	$node->safe_psql('postgres', q{
		SELECT sbq_create_queue('lw');
		SELECT sbq_grant('lw', 'app', ARRAY['listen']);
	});
	my $w = as_app('app');
	$w->query_until(qr/waiting/, qq{\\echo waiting\nSELECT count(*) FROM sbq_receive('lw', 1, '30 seconds', 'receive_and_delete');\n});
	ok( $node->poll_query_until('postgres', q{
			SELECT count(*) = 1 FROM pg_stat_activity
			 WHERE usename = 'app' AND state = 'active' AND query LIKE '%sbq_receive%'}),
		'the receive is waiting');
	my $t0 = time;
	$node->safe_psql('postgres', q{
		SELECT sbq_revoke('lw', 'app', ARRAY['listen']);
		SELECT sbq_send('lw', 'sent after the revoke');
	});
	$w->{stderr} = '';
	$w->query('SELECT 1');
	like($w->{stderr}, qr/permission denied for queue "lw"/,
		'the waiting receive fails with 42501 once the right is revoked');
	cmp_ok(time - $t0, '<', 10, '... at once, not after its 30 s');
	$w->quit;
	is($node->safe_psql('postgres', q{SELECT count(*) FROM sbq_peek('lw', 10)}), '1',
		'... and the message sent after the revoke is still there');
}

### DROP OWNED by a role that holds rights
{
	$node->safe_psql('postgres', q{
		SELECT sbq_grant('q1', 'victim', ARRAY['send']);
		CREATE TABLE victim_t (x int);
		ALTER TABLE victim_t OWNER TO victim;
	});
	my ($ret, $out, $err) = $node->psql('postgres', 'DROP OWNED BY victim',
		extra_params => [ '-U', 'victim' ]);
	is($ret, 0, 'DROP OWNED BY the role itself works while it holds queue rights')
	  or diag($err);
	is($node->safe_psql('postgres', q{SELECT to_regclass('victim_t') IS NULL}), 't',
		'... and drops what it owns');
	is($node->safe_psql('postgres', q{SELECT rights FROM sbq_rights WHERE role = 'victim'}),
		'{send}', '... and leaves its queue rights alone');
	($ret, $out, $err) = $node->psql('postgres', 'DROP ROLE victim');
	like($err, qr/privileges for view sbq.queue_rights/,
		'DROP ROLE of a role with rights is refused, naming the view sbq.queue_rights');
	$node->safe_psql('postgres', q{
		SELECT sbq_revoke('q1', 'victim', ARRAY['send']);
		DROP ROLE victim;
	});
}

### a role without the right does not wait for the name lock of a queue in use
{
	$node->safe_psql('postgres', q{
		SELECT sbq_create_queue('dq');
		SELECT sbq_grant('dq', 'app', ARRAY['send']);
	});
	my $s1 = as_app('app');
	$s1->query_safe(q{BEGIN; SELECT sbq_send('dq', 'held');});
	my $t0 = time;
	my ($ret, $out, $err) = $node->psql('postgres',
		q{SET statement_timeout = '5s'; SELECT sbq_delete_queue('dq')},
		extra_params => [ '-U', 'nobody' ]);
	like($err, qr/permission denied for queue "dq"/,
		'a delete by a role without manage is refused while a send holds the queue');
	cmp_ok(time - $t0, '<', 4, '... at once: it did not wait for the sender');
	$s1->query_safe('COMMIT');
	$s1->quit;
}

### a grant under REPEATABLE READ on a queue deleted and made again since
{
	$node->safe_psql('postgres', q{SELECT sbq_create_queue('rrq')});
	my $a = $node->background_psql('postgres', on_error_stop => 0);
	$a->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1;');
	$node->safe_psql('postgres', q{
		SELECT sbq_delete_queue('rrq');
		SELECT sbq_create_queue('rrq');
	});
	$a->{stderr} = '';
	$a->query(q{SELECT sbq_grant('rrq', 'app', ARRAY['send'])});
	like($a->{stderr}, qr/could not serialize access/,
		'a grant in a REPEATABLE READ transaction older than the queue\'s deletion is a serialization failure');
	$a->query('ROLLBACK');
	$a->quit;
	is( $node->safe_psql('postgres', q{
			SELECT count(*) FROM sbq.rights r
			 WHERE NOT EXISTS (SELECT 1 FROM sbq.queues q WHERE q.queue_id = r.queue_id)}),
		'0', '... and no right is left on the deleted queue');
}

### a manager's open revoke does not hold up the role's own calls
{
	$node->safe_psql('postgres', q{
		CREATE ROLE eve LOGIN;
		GRANT EXECUTE ON FUNCTION sbq_create_queue TO app;
		SELECT sbq_create_queue('eveq');
		SELECT sbq_grant('eveq', 'eve', ARRAY['manage']);
		SELECT sbq_grant('eveq', 'app', ARRAY['send']);
	});
	my $e = as_app('eve');
	$e->query_safe(q{BEGIN; SELECT sbq_revoke('eveq', 'app', ARRAY['send']);});
	my $t0 = time;
	my ($ret, $out, $err) = $node->psql('postgres',
		q{SET statement_timeout = '5s'; SELECT sbq_create_queue('app_own'); SELECT sbq_create_queue('app_own2');},
		extra_params => [ '-U', 'app' ]);
	is($err, '', 'a role creates queues while another role\'s revoke of one of its rights is open');
	cmp_ok(time - $t0, '<', 4, '... without waiting for it');
	$e->query_safe('COMMIT');
	$e->quit;
}

### under REPEATABLE READ, a delete and a revoke act on what is there now
{
	$node->safe_psql('postgres', q{
		CREATE ROLE dave;
		SELECT sbq_create_queue('qdel');
		SELECT sbq_create_queue('qrev');
	});
	my $a = $node->background_psql('postgres', on_error_stop => 0);
	$a->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM sbq_rights;');
	$node->safe_psql('postgres', q{
		SELECT sbq_grant('qdel', 'dave', ARRAY['send']);
		SELECT sbq_send('qdel', 'm');
		SELECT sbq_grant('qrev', 'dave', ARRAY['send']);
	});
	$a->query_safe(q{SELECT sbq_delete_queue('qdel'); SELECT sbq_revoke('qrev', 'dave', ARRAY['send']);});
	$a->query_safe('COMMIT');
	$a->quit;
	is( $node->safe_psql('postgres', q{
			SELECT (SELECT count(*) FROM sbq.messages m
			         WHERE NOT EXISTS (SELECT 1 FROM sbq.queues q WHERE q.queue_id = m.queue_id))
			     + (SELECT count(*) FROM sbq.rights r
			         WHERE NOT EXISTS (SELECT 1 FROM sbq.queues q WHERE q.queue_id = r.queue_id))}),
		'0', 'a delete under REPEATABLE READ leaves no message or right of the queue committed since its snapshot');
	is($node->safe_psql('postgres', q{SELECT count(*) FROM sbq_rights WHERE role = 'dave'}), '0',
		'a revoke under REPEATABLE READ removes a right granted since its snapshot');
	my ($ret, $out, $err) = $node->psql('postgres', 'DROP ROLE dave');
	is($ret, 0, '... and the role, holding nothing, can be dropped') or diag($err);
}

### a superuser other than the bootstrap one that holds rights stays undroppable
{
	$node->safe_psql('postgres', q{
		CREATE ROLE dba SUPERUSER LOGIN;
		CREATE DATABASE r2 OWNER dba;
	});
	$node->safe_psql('r2', q{
		CREATE EXTENSION sbqueue;
		SELECT sbq_create_queue('qd');
	}, extra_params => [ '-U', 'dba' ]);
	my $su = $node->safe_psql('postgres', 'SELECT current_user');
	$node->safe_psql('r2', qq{REASSIGN OWNED BY dba TO "$su"; DROP OWNED BY dba;});
	my ($ret, $out, $err) = $node->psql('r2', 'DROP ROLE dba');
	like($err, qr/privileges for view sbq.queue_rights/,
		'the role that installed and created a queue cannot be dropped after REASSIGN OWNED while it holds manage')
	  or diag("ret $ret: $err");
}

### the marker's ownership cannot move to a role with rights and away again
{
	$node->safe_psql('postgres', q{
		CREATE ROLE inst SUPERUSER LOGIN;
		CREATE ROLE bob LOGIN;
		CREATE DATABASE r3;
	});
	$node->safe_psql('r3', q{
		CREATE EXTENSION sbqueue;
		SELECT sbq_create_queue('qa');
		SELECT sbq_grant('qa', 'bob', ARRAY['send']);
	}, extra_params => [ '-U', 'inst' ]);
	my $su = $node->safe_psql('postgres', 'SELECT current_user');
	$node->safe_psql('r3', qq{REASSIGN OWNED BY inst TO bob; REASSIGN OWNED BY bob TO "$su";});
	my ($ret, $out, $err) = $node->psql('r3', 'DROP ROLE bob');
	like($err, qr/privileges for view sbq.queue_rights/,
		'a role with rights cannot be dropped after ownership went to it and away (REASSIGN OWNED twice)');
}

$node->stop;
done_testing();
