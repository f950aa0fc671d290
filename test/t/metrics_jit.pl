# Copyright (c) 2026, the sbqueue authors
#
# sbq_metrics_text() reads sbq_metrics without compiling it to machine code.
# With jit on and its threshold at 0, a plain read of the view compiles (the
# test checks that first, so that it cannot pass on a server that never
# compiles: it is skipped where PostgreSQL has no JIT provider), while the
# read that sbq_metrics_text() runs, which pg_stat_statements records as a
# nested statement, compiles no function. The caller's setting is as it was
# afterwards, set for the session, for the transaction only or by a function's
# SET clause. (A call that fails gives the setting back with its transaction
# or savepoint, as PostgreSQL unwinds every setting made inside them.)
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

my $node = SbqNode::preloaded('metrics_jit', qq(
shared_preload_libraries = 'sbqueue, pg_stat_statements'
pg_stat_statements.track = all
jit = on
jit_above_cost = 0
jit_inline_above_cost = -1
jit_optimize_above_cost = -1
));

if ($node->safe_psql('postgres', 'SELECT pg_jit_available()') ne 't')
{
	$node->stop;
	plan skip_all => 'this PostgreSQL has no JIT provider';
}

$node->safe_psql('postgres', q{
	CREATE EXTENSION sbqueue;
	CREATE EXTENSION pg_stat_statements;
	SELECT count(sbq_create_queue('q' || i)) FROM generate_series(1, 3) i;
	SELECT count(*) FROM generate_series(1, 3) i,
		sbq_send_batch('q' || i, array_fill('m'::text, ARRAY[10]));
	SELECT count(*) FROM sbq_receive('q1', 2);
});

# (the reset returns a time on PostgreSQL 17, nothing before: not part of $out)
$node->safe_psql('postgres', 'SELECT pg_stat_statements_reset()');
my $out = $node->safe_psql('postgres', q{
	SELECT count(*) > 0 FROM sbq_metrics;
	SELECT sbq_metrics_text() LIKE '%sbq_messages{database="postgres",queue="q1",state="active"} 8%';
	SHOW jit;
	-- set for the session
	SET jit = on;
	SELECT length(sbq_metrics_text()) > 0;
	SHOW jit;
	-- set for the transaction only, and by a function's own SET clause
	BEGIN;
	SET LOCAL jit = on;
	SELECT length(sbq_metrics_text()) > 0;
	SHOW jit;
	CREATE FUNCTION pg_temp.text_read() RETURNS text LANGUAGE sql SET jit = on
		AS 'SELECT sbq_metrics_text()';
	SELECT length(pg_temp.text_read()) > 0;
	SHOW jit;
	COMMIT;
	SHOW jit;
});
is($out, "t\nt\non\nt\non\nt\non\nt\non\non",
	'sbq_metrics_text() returned the metrics and left jit as the session, the transaction and a function had it');

# the plain read compiled: the server does compile with these settings
my $plain = $node->safe_psql('postgres', q{
	SELECT sum(jit_functions) > 0 FROM pg_stat_statements
	 WHERE toplevel AND query LIKE 'SELECT count(*) > $1 FROM sbq_metrics%'
});
is($plain, 't', 'a plain read of sbq_metrics compiles with jit on and a zero threshold');

# the read inside sbq_metrics_text(), four times, compiled nothing
my $inner = $node->safe_psql('postgres', q{
	SELECT sum(calls) || ' ' || sum(jit_functions) FROM pg_stat_statements
	 WHERE NOT toplevel AND query LIKE '%.sbq_metrics ORDER BY metric%'
});
is($inner, '4 0', 'the read of sbq_metrics_text() ran four times and compiled no function');

$node->stop;
done_testing();
