# Copyright (c) 2026, the sbqueue authors
#
# The statements that find messages by their sequence numbers (a batch
# settlement, deferred messages received by number) plan through the primary
# key, also when their plan is made while the tables are empty and freshly
# analyzed: such a plan is kept for the connection, and one through the
# receive index reads every entry of the queue for every call once the queue
# has filled. Each plan is shown by auto_explain as the session makes it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

my $node = SbqNode::preloaded('plans_by_key', qq(
autovacuum = off
sbqueue.enable_maintenance_worker = off
));
$node->safe_psql('postgres', q{
	CREATE EXTENSION sbqueue;
	SELECT sbq_create_queue('pk');
	VACUUM ANALYZE sbq.messages, sbq.dead_letters;
});

# every plan a statement of this session makes, as a notice
my $explain = SbqNode::explain_notices();
my $send10 = q{SELECT count(*) FROM sbq_send_batch('pk', array_fill('m'::text, ARRAY[10]));};
my (undef, undef, $plans) = $node->psql('postgres', qq{
	$explain
	-- batch settlements under leases (an abandon and a defer look up each row by its
	-- number alone)
	$send10
	SELECT sbq_complete('pk', (SELECT array_agg(lock_token) FROM sbq_receive('pk', 10)));
	$send10
	SELECT sbq_abandon('pk', (SELECT array_agg(lock_token) FROM sbq_receive('pk', 10)));
	SELECT sbq_defer('pk', (SELECT array_agg(lock_token) FROM sbq_receive('pk', 10)));
	-- the deferred, received by their numbers
	SELECT count(*) FROM sbq_receive_deferred('pk',
		(SELECT array_agg(sequence_number) FROM sbq_peek('pk', 10)));
	-- locks in the rows: the same settlements
	SET sbqueue.memory_locks = off;
	$send10
	SELECT sbq_complete('pk', (SELECT array_agg(lock_token) FROM sbq_receive('pk', 10)));
	$send10
	SELECT sbq_abandon('pk', (SELECT array_agg(lock_token) FROM sbq_receive('pk', 10)));
});

# the plans of sbqueue's statements that take an array of sequence numbers
my @by_key = grep { /Query Text: .*m\.sequence_number = ANY\(\$\d\)/ }
  split /(?=NOTICE:)/, $plans;
cmp_ok(scalar(@by_key), '>=', 4,
	'the session planned the four statements that find messages by number (a complete of leases, of row locks, the deferred found and locked)')
  or diag($plans);
my @other = grep { !/Index Scan using (messages|dead_letters)_pkey/ || /receive_idx|Seq Scan/ }
  @by_key;
is(scalar(@other), 0,
	'each goes through the primary key, not the receive index, on tables analyzed empty')
  or diag(join("\n----\n", @other));

# only the statement's own plan: a DBA's trigger on the table, planned while a batch
# complete runs, keeps its plan for the connection and must see every index (a review
# found it planned without them, and so kept a whole-table scan)
$node->safe_psql('postgres', q{
	CREATE TABLE public.audit (n bigint);
	CREATE FUNCTION public.audit_delete() RETURNS trigger LANGUAGE plpgsql AS $f$
	BEGIN
		INSERT INTO public.audit SELECT count(*) FROM sbq.messages
		 WHERE queue_id = old.queue_id AND subqueue = 0 AND state = 0;
		RETURN old;
	END $f$;
	CREATE TRIGGER audit_delete AFTER DELETE ON sbq.messages
		FOR EACH ROW EXECUTE FUNCTION public.audit_delete();
});
(undef, undef, $plans) = $node->psql('postgres', qq{
	$explain
	$send10
	SELECT sbq_complete('pk', (SELECT array_agg(lock_token) FROM sbq_receive('pk', 10)));
});
my ($trigger) = grep { /Query Text: INSERT INTO public\.audit/ } split /(?=NOTICE:)/, $plans;
ok(defined $trigger && $trigger =~ /messages_receive_idx/,
	'a trigger\'s query planned while a batch complete runs sees the receive index')
  or diag($trigger // $plans);
$node->safe_psql('postgres', q{
	DROP TRIGGER audit_delete ON sbq.messages;
	DROP FUNCTION public.audit_delete();
	DROP TABLE public.audit;
});

# and what that buys: a batch complete beside 100,000 queued messages, in a
# session whose plans were made while the tables were empty and freshly analyzed
$node->safe_psql('postgres', 'CREATE DATABASE deep');
$node->safe_psql('deep', q{
	CREATE EXTENSION sbqueue;
	SELECT sbq_create_queue('pk');
	VACUUM ANALYZE sbq.messages;
});
my $s = $node->background_psql('deep');
# a receive and, in a transaction of its own, the complete of what it got
sub cycle
{
	my ($sql) = @_;
	my $tokens = $s->query_safe(q{SELECT array_agg(lock_token) FROM sbq_receive('pk', 100)});
	return $s->query_safe(sprintf($sql, "'$tokens'::uuid[]"));
}
for (1 .. 10)
{
	$s->query_safe(q{SELECT count(*) FROM sbq_send_batch('pk', array_fill('m'::text, ARRAY[100]))});
	cycle(q{SELECT sbq_complete('pk', %s)});
}
$node->safe_psql('deep', q{
	SELECT count(*) FROM generate_series(1, 20) g,
		LATERAL sbq_send_batch('pk', array_fill(('deep' || g)::text, ARRAY[5000]));
});
# the complete's own statement, as auto_explain shows it run
$s->query_safe(q{LOAD 'auto_explain'});
$s->query_safe(q{SET auto_explain.log_min_duration = 0});
$s->query_safe(q{SET auto_explain.log_nested_statements = on});
$s->query_safe(q{SET auto_explain.log_analyze = on});
my $log_at = -s $node->logfile;
cycle(q{SELECT sbq_complete('pk', %s)});
my ($delete) = grep { /Query Text: DELETE FROM sbq\.messages.*sequence_number = ANY/ }
  split /(?=LOG:)/, substr(slurp_file($node->logfile), $log_at);
my ($removed) = ($delete // '') =~ /Rows Removed by Filter: (\d+)/;
ok(defined $delete && $delete =~ /Index Scan using messages_pkey/ && ($removed // 0) < 100,
	'beside 100,000 queued, that session\'s complete of 100 looks each up by key, passing over '
	  . ($removed // 0) . ' others')
  or diag($delete // 'no plan logged');
$s->quit;

$node->stop;
done_testing();
