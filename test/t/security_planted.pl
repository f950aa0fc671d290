# Copyright (c) 2026, the sbqueue authors
#
# Planted objects. The owner of a database, not a superuser, creates functions
# and operators wherever a caller's search_path may look: in public (which it
# owns), in a schema named after the superuser ("$user" comes first on the
# default path), and in a schema of its own that callers put first, even before
# pg_catalog; and it sets that path on its database, where the worker connects.
# Every planted object writes a row into public.pwned when it runs. Nothing of
# the owner's may run:
#  - when a superuser follows the README (installs into a schema of its own and
#    runs examples/demo.sql, whose calls name that schema) -- while the same
#    planted function does run for an unqualified call, as a superuser;
#  - inside any of sbqueue's calls, made by an application role whose path puts
#    the planted schema first;
#  - inside the worker's maintenance passes;
# and CREATE EXTENSION over objects planted in advance fails, creating nothing.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

my $root = "$FindBin::RealBin/../..";
my $node = SbqNode::preloaded('security_planted',
	"sbqueue.enable_maintenance_worker = on\nsbqueue.maintenance_interval = '200ms'\n");
my $su = $node->safe_psql('postgres', 'SELECT current_user');

sub as
{
	my ($role, $db, $sql) = @_;
	return $node->safe_psql($db, $sql, extra_params => [ '-U', $role ]);
}

sub pwned
{
	my ($db) = @_;
	return $node->safe_psql($db,
		q{SET search_path = pg_catalog;
		  SELECT coalesce(string_agg(who || ':' || what, ',' ORDER BY what, who), '')
		    FROM public.pwned});
}

$node->safe_psql('postgres', q{
	CREATE ROLE dbo LOGIN;
	CREATE ROLE app LOGIN;
	CREATE DATABASE shop OWNER dbo;
});

# the README's installation, by the superuser
$node->safe_psql('shop', q{
	CREATE SCHEMA sbqueue;
	CREATE EXTENSION sbqueue SCHEMA sbqueue;
	GRANT USAGE ON SCHEMA sbqueue TO PUBLIC;
});

# What the database owner plants: a function with each name and argument list
# an untyped call could resolve to, in public and in a schema named after the
# superuser; and in schema trojan, operators and functions with the exact
# signatures sbqueue's statements use.
my $plant = q{
	CREATE TABLE public.pwned (who name, what text);
	GRANT INSERT, SELECT ON public.pwned TO PUBLIC;
	CREATE FUNCTION public.pwn(what text) RETURNS void LANGUAGE sql
	    AS $$ INSERT INTO public.pwned VALUES (current_user, what) $$;
	CREATE SCHEMA trojan;
	GRANT USAGE ON SCHEMA trojan TO PUBLIC;
	DO $do$
	DECLARE
	    s text;
	    f text;
	    t text;
	    op text;
	BEGIN
	    -- functions an untyped call could resolve to
	    FOREACH s IN ARRAY ARRAY['public', current_setting('sbq.su')] LOOP
	        FOREACH f IN ARRAY ARRAY[
	            'sbq_complete(text, text) RETURNS void',
	            'sbq_abandon(text, text) RETURNS void',
	            'sbq_abandon(text, text, text) RETURNS void',
	            'sbq_defer(text, text) RETURNS void',
	            'sbq_deadletter(text, text) RETURNS void',
	            'sbq_deadletter(text, text, text, text) RETURNS void',
	            'sbq_renew(text, text) RETURNS timestamptz',
	            'sbq_send(text, text) RETURNS bigint',
	            'sbq_receive_deferred(text, text) RETURNS void',
	            'sbq_resubmit(text, text) RETURNS integer',
	            'sbq_cancel_scheduled(text, text) RETURNS void',
	            'sbq_grant(text, text, text) RETURNS void'] LOOP
	            EXECUTE format('CREATE FUNCTION %I.%s LANGUAGE plpgsql AS %L', s, f,
	                format('BEGIN PERFORM public.pwn(%L); RETURN %s; END', s || '.' || f,
	                       CASE WHEN f LIKE '%void' THEN '' ELSE 'NULL' END));
	        END LOOP;
	    END LOOP;
	    -- operators with the signatures of the built-in ones
	    FOREACH t IN ARRAY ARRAY['smallint', 'integer', 'bigint', 'text', 'uuid',
	                             'timestamptz', 'interval', 'boolean', 'oid'] LOOP
	        FOREACH op IN ARRAY ARRAY['=', '<>', '<', '<=', '>', '>='] LOOP
	            f := 'op_' || md5(t || op);
	            EXECUTE format('CREATE FUNCTION trojan.%I(a %s, b %s) RETURNS boolean '
	                           'LANGUAGE plpgsql AS %L', f, t, t,
	                format('BEGIN PERFORM public.pwn(%L); RETURN a OPERATOR(pg_catalog.%s) b; END',
	                       t || ' ' || op, op));
	            EXECUTE format('CREATE OPERATOR trojan.%s (LEFTARG = %s, RIGHTARG = %s, '
	                           'FUNCTION = trojan.%I)', op, t, t, f);
	        END LOOP;
	    END LOOP;
	END
	$do$;
	CREATE FUNCTION trojan.now() RETURNS timestamptz LANGUAGE plpgsql
	    AS $$ BEGIN PERFORM public.pwn('now'); RETURN pg_catalog.now(); END $$;
	CREATE FUNCTION trojan.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql
	    AS $$ BEGIN PERFORM public.pwn('clock_timestamp'); RETURN pg_catalog.clock_timestamp(); END $$;
	CREATE FUNCTION trojan.statement_timestamp() RETURNS timestamptz LANGUAGE plpgsql
	    AS $$ BEGIN PERFORM public.pwn('statement_timestamp'); RETURN pg_catalog.statement_timestamp(); END $$;
	CREATE FUNCTION trojan.nextval(regclass) RETURNS bigint LANGUAGE plpgsql
	    AS $$ BEGIN PERFORM public.pwn('nextval'); RETURN pg_catalog.nextval($1); END $$;
	CREATE FUNCTION trojan.lower(text) RETURNS text LANGUAGE plpgsql
	    AS $$ BEGIN PERFORM public.pwn('lower'); RETURN pg_catalog.lower($1); END $$;
	CREATE FUNCTION trojan.coalesce_hint(jsonb, jsonb) RETURNS jsonb LANGUAGE plpgsql
	    AS $$ BEGIN PERFORM public.pwn('jsonb ||'); RETURN $1 OPERATOR(pg_catalog.||) $2; END $$;
	CREATE OPERATOR trojan.|| (LEFTARG = jsonb, RIGHTARG = jsonb, FUNCTION = trojan.coalesce_hint);
};
$node->safe_psql('shop', "CREATE SCHEMA \"$su\"", extra_params => [ '-U', 'dbo' ]);
as('dbo', 'shop', "SET sbq.su = '$su';" . $plant);
is(pwned('shop'), '', 'the planted objects are in place, and nothing ran yet');

# --- the superuser follows the README: the demo, whose calls name the schema
my ($ret, $out, $err) = $node->psql('shop', undef,
	extra_params => [ '-X', '-v', 'ON_ERROR_STOP=1', '-f', "$root/examples/demo.sql" ]);
is($ret, 0, 'the demo runs to its end as a superuser in the owner\'s database') or diag($err);
is(pwned('shop'), '', 'none of the owner\'s functions or operators ran during the demo');

# the same kind of call without the schema runs the owner's function, as the superuser
$node->psql('shop', q{SELECT sbq_abandon('demo/orders', '00000000-0000-0000-0000-000000000000')});
like(pwned('shop'), qr/^\Q$su\E:\Q$su\E\.sbq_abandon\(text, text\)/,
	'an unqualified call of the README\'s kind runs the planted function, as the superuser');
$node->safe_psql('shop', 'DELETE FROM public.pwned');

# --- an application role calls every entry point with the planted schema first
$node->safe_psql('shop', q{
	SELECT sbqueue.sbq_create_queue('tq', lock_duration => '5 s', max_delivery_count => 5,
	                                duplicate_detection_window => '1 minute',
	                                default_message_ttl => '1 hour');
	SELECT sbqueue.sbq_grant('tq', 'app', ARRAY['manage']);
});
my $path = 'SET search_path = trojan, pg_catalog, sbqueue;';
as('app', 'shop', $path . q{
	CREATE TEMP TABLE queues (x int);
	CREATE TEMP TABLE messages (x int);
	CREATE TEMP TABLE rights (x int);
	SELECT sbqueue.sbq_send('tq', 'a'::text, message_id => 'm1',
	                        application_properties => '{"k": 1}'::jsonb);
	SELECT sbqueue.sbq_send('tq', 'a'::text, message_id => 'm1');
	SELECT sbqueue.sbq_send('tq', '\x01'::bytea);
	SELECT sbqueue.sbq_send('tq', '{"b": 2}'::jsonb);
	SELECT sbqueue.sbq_send_batch('tq', ARRAY['c', 'd', 'e', 'f', 'g']::text[]);
	SELECT sbqueue.sbq_cancel_scheduled('tq',
	    sbqueue.sbq_send('tq', 's'::text,
	                     scheduled_enqueue_time => pg_catalog.now() OPERATOR(pg_catalog.+) '1 hour'));
	SELECT pg_catalog.count(*) FROM sbqueue.sbq_peek('tq', 100);
	CREATE TEMP TABLE got AS SELECT * FROM sbqueue.sbq_receive('tq', 7);
	SELECT sbqueue.sbq_complete('tq', (SELECT lock_token FROM got ORDER BY sequence_number LIMIT 1));
	SELECT sbqueue.sbq_complete('tq', (SELECT lock_token::text FROM got ORDER BY sequence_number OFFSET 1 LIMIT 1));
	SELECT sbqueue.sbq_complete('tq', ARRAY(SELECT lock_token FROM got ORDER BY sequence_number OFFSET 2 LIMIT 1));
	SELECT sbqueue.sbq_renew('tq', (SELECT lock_token FROM got ORDER BY sequence_number OFFSET 3 LIMIT 1));
	SELECT sbqueue.sbq_abandon('tq', (SELECT lock_token FROM got ORDER BY sequence_number OFFSET 3 LIMIT 1),
	                           '{"again": true}'::jsonb);
	SELECT sbqueue.sbq_defer('tq', (SELECT lock_token FROM got ORDER BY sequence_number OFFSET 4 LIMIT 1));
	SELECT sbqueue.sbq_deadletter('tq', (SELECT lock_token FROM got ORDER BY sequence_number OFFSET 5 LIMIT 1),
	                              'why', 'because');
	CREATE TEMP TABLE d AS SELECT * FROM sbqueue.sbq_receive_deferred('tq',
	    ARRAY(SELECT sequence_number FROM got ORDER BY sequence_number OFFSET 4 LIMIT 1));
	SELECT sbqueue.sbq_send_batch('tq', ARRAY[sbqueue.sbq_new_message('n1'::text, message_id => 'n1'),
	                                          sbqueue.sbq_new_message('{"n": 2}'::jsonb),
	                                          sbqueue.sbq_new_message('\x02'::bytea)]);
	CREATE TEMP TABLE got2 AS SELECT * FROM sbqueue.sbq_receive('tq', 3);
	SELECT * FROM sbqueue.sbq_settle('tq', ARRAY(SELECT lock_token FROM got2 ORDER BY sequence_number LIMIT 2)
	                                       OPERATOR(pg_catalog.||) '00000000-0000-0000-0000-000000000000'::uuid,
	                                 'complete');
	SELECT * FROM sbqueue.sbq_settle('tq', ARRAY(SELECT lock_token FROM got2 ORDER BY sequence_number OFFSET 2),
	                                 'renew');
	SELECT sbqueue.sbq_abandon('tq', ARRAY(SELECT lock_token FROM got2 ORDER BY sequence_number OFFSET 2),
	                           delay => '1 hour'::interval);
	SELECT pg_catalog.count(*) FROM sbqueue.sbq_peek('tq/$deadletterqueue');
	SELECT sbqueue.sbq_resubmit('tq');
	SELECT pg_catalog.count(*) FROM sbqueue.sbq_receive('tq', 10, receive_mode => 'receive_and_delete');
	SELECT sbqueue.sbq_get_queue('tq');
	SELECT sbqueue.sbq_update_queue('tq', max_delivery_count => 6);
	SELECT sbqueue.sbq_grant('tq', 'dbo', ARRAY['send']);
	SELECT sbqueue.sbq_revoke('tq', 'dbo', ARRAY['send']);
	SELECT pg_catalog.count(*) FROM sbqueue.sbq_queue_stats;
	SELECT pg_catalog.count(*) FROM sbqueue.sbq_queues;
	SELECT pg_catalog.count(*) FROM sbqueue.sbq_rights;
	SELECT sbqueue.sbq_purge_queue('tq');
	SELECT sbqueue.sbq_purge_queue('tq/$deadletterqueue');
	SELECT sbqueue.sbq_delete_queue('tq');
});
is(pwned('shop'), '',
	'none of the planted operators or functions ran inside any call of an application role '
	  . 'whose search_path puts them first');

# --- the worker, in a database whose owner set that path for it
$node->safe_psql('shop', q{
	SELECT sbqueue.sbq_create_queue('wq', dead_lettering_on_message_expiration => true);
	SELECT sbqueue.sbq_send('wq', 'stays'::text);
});
my $shop_worker = q{SELECT pg_catalog.string_agg(pid::text, ',') FROM pg_catalog.pg_stat_activity
	WHERE backend_type = 'sbqueue maintenance' AND datname = 'shop'};
ok($node->poll_query_until('postgres', "SELECT ($shop_worker) IS NOT NULL"), 'a worker runs in shop');
$node->safe_psql('shop', 'ALTER DATABASE shop SET search_path = trojan, pg_catalog',
	extra_params => [ '-U', 'dbo' ]);
# the worker picks the setting up when it connects again: the worker there now
# goes before the message expires, so that the one that dead-letters it is a
# worker that connected with the setting
my $t_sent = time;
my $old = $node->safe_psql('shop', q{
	SELECT sbqueue.sbq_send('wq', 'expires'::text, time_to_live => '10 seconds');
	SELECT pg_catalog.string_agg(pid::text, ',') FILTER (WHERE pg_catalog.pg_terminate_backend(pid))
	  FROM pg_catalog.pg_stat_activity
	 WHERE backend_type OPERATOR(pg_catalog.=) 'sbqueue maintenance'
	   AND datname OPERATOR(pg_catalog.=) 'shop'});
# (none when the one seen above left on its own meanwhile)
$old = (split /\n/, $old)[1] || '0';
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid IN ($old)"),
	'the worker that connected before the setting has gone');
cmp_ok(time - $t_sent, '<', 10, '... before the message expires (the test is not too slow)');
ok( $node->poll_query_until('shop', q{
		SELECT pg_catalog.count(*) OPERATOR(pg_catalog.=) 1
		  FROM sbqueue.sbq_peek('wq/$deadletterqueue', 10)}),
	'the worker dead-lettered the expired message');
is(pwned('shop'), '', 'none of the planted operators or functions ran in the worker\'s passes');

# --- objects planted before CREATE EXTENSION
$node->safe_psql('postgres', 'CREATE DATABASE shop2 OWNER dbo');
as('dbo', 'shop2', 'CREATE SCHEMA sbq');
($ret, $out, $err) = $node->psql('shop2', 'CREATE EXTENSION sbqueue');
like($err, qr/schema "sbq" already exists/,
	'CREATE EXTENSION over a schema sbq the owner made fails');
is($node->safe_psql('shop2', q{SELECT count(*) FROM pg_proc WHERE proname LIKE 'sbq\_%'}), '0',
	'... and creates nothing');
as('dbo', 'shop2', 'DROP SCHEMA sbq;
	CREATE FUNCTION public.sbq_complete(text, text) RETURNS void LANGUAGE sql AS $$ SELECT $$');
($ret, $out, $err) = $node->psql('shop2', 'CREATE EXTENSION sbqueue');
like($err, qr/function "sbq_complete" already exists with same argument types/,
	'CREATE EXTENSION over a function of its name and arguments the owner made fails');
is( $node->safe_psql('shop2',
		q{SELECT count(*) FROM pg_namespace WHERE nspname = 'sbq'}), '0',
	'... and creates nothing');

### installed under hostile or hardened default privileges of the installing role
{
	$node->safe_psql('postgres', q{
		CREATE ROLE alice LOGIN;
		CREATE DATABASE dp;
	});
	$node->safe_psql('dp', q{
		ALTER DEFAULT PRIVILEGES GRANT ALL ON TABLES TO PUBLIC;
		ALTER DEFAULT PRIVILEGES GRANT ALL ON FUNCTIONS TO alice;
		ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
		CREATE EXTENSION sbqueue;
		SELECT sbq_create_queue('qa');
		SELECT sbq_grant('qa', 'alice', ARRAY['send', 'listen']);
	});
	my ($ret, $out, $err) = $node->psql('dp',
		q{UPDATE sbq_queues SET max_message_size = 10 WHERE queue = 'qa'},
		extra_params => [ '-U', 'alice' ]);
	like($err, qr/permission denied for view sbq_queues/,
		'a view cannot be written through, whatever the default privileges gave');
	($ret, $out, $err) = $node->psql('dp', q{SELECT sbq_create_queue('mine')},
		extra_params => [ '-U', 'alice' ]);
	like($err, qr/permission denied for function sbq_create_queue/,
		'... nor sbq_create_queue run by a role the defaults gave functions to');
	($ret, $out, $err) = $node->psql('dp', q{SELECT sbq_maintain()},
		extra_params => [ '-U', 'alice' ]);
	like($err, qr/permission denied for function sbq_maintain/, '... nor sbq_maintain');
	($ret, $out, $err) = $node->psql('dp',
		q{SELECT sbq_send('qa', 'x') > 0; SELECT count(*) FROM sbq_queue_stats;},
		extra_params => [ '-U', 'alice' ]);
	is($err, '', 'with EXECUTE taken from PUBLIC by default, a role with rights still sends and reads the stats');
	$node->safe_psql('postgres', 'DROP DATABASE dp');
}

$node->stop;
done_testing();
