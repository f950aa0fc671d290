# Copyright (c) 2026, the sbqueue authors
#
# The fault tests' checker (test/harness/sbq_check.py) checked on fabricated
# histories: a clean one (with a recovered unknown send, a receive of unknown
# outcome and a crash that lost a lock and a count, all allowed) passes, and
# each bad one fails naming its violation: a lost message, a double complete,
# a lease overlap, a skipped and a repeated delivery count, a count that goes
# back by two across one crash, one unknown receive asked to explain two
# skips, a dead letter below the limit, an unexpected body, a settle on an
# expired lock, a redelivery after a complete. Then end to end: the load
# client and the checker against sbqueue with one function shadowed by a
# wrong one (a complete that removes nothing, a receive that skips counts, a
# receive that hands out a locked message, a send that loses messages): the
# checker must fail each run, naming the broken invariant.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../harness";
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use SbqFault;

my $dir = "$PostgreSQL::Test::Utils::tmp_check/fabricated";
system($SbqFault::PYTHON, "$SbqFault::DIR/sbq_check.py", '--fabricate', $dir) == 0
  or BAIL_OUT('sbq_check.py --fabricate failed');
my $expected = decode_json(slurp_file("$dir/expected.json"));

for my $case (sort keys %$expected)
{
	my $out = `$SbqFault::PYTHON $SbqFault::DIR/sbq_check.py $dir/$case.jsonl 2>&1`;
	my $rc = $? >> 8;
	my $want = $expected->{$case};
	if (!defined $want)
	{
		is($rc, 0, "$case: a valid history passes") or diag($out);
		like($out, qr/^\{:valid\? true/m, "$case: the summary says valid");
		like($out, qr/^ :recovered 1$/m, "$case: the unknown send that was delivered is reported as recovered");
	}
	else
	{
		is($rc, 1, "$case: the checker fails") or diag($out);
		like($out, qr/^VIOLATION \Q$want\E \(/m, "$case: it reports \"$want\"") or diag($out);
		like($out, qr/^\{:valid\? false/m, "$case: the summary says invalid");
	}
}

# a history without its final drain cannot be judged valid
my $nodrain = "$dir/nodrain.jsonl";
open(my $in, '<', "$dir/good.jsonl") or die;
open(my $outf, '>', $nodrain) or die;
while (<$in>) { print $outf $_ unless /"ev": "(meta|dlq|remaining|drained)"/; }
close $outf;
close $in;
my $out = `$SbqFault::PYTHON $SbqFault::DIR/sbq_check.py $nodrain 2>&1`;
is($? >> 8, 1, 'a history without the final drain fails') or diag($out);

# --- end to end: the same client and checker against sbqueue with one of its
# functions shadowed (an earlier schema in search_path) by a wrong one, under
# load; the checker must fail each run, naming the broken invariant
my $cols = q{sequence_number, message_id, lock_token, locked_until, delivery_count,
	enqueued_time, scheduled_enqueue_time, expires_at, time_to_live, state, session_id,
	correlation_id, subject, content_type, reply_to, reply_to_session_id, to_address,
	application_properties, body, dead_letter_reason, dead_letter_error_description,
	dead_letter_source};
# every seventh row handed out, from the third on (not by sequence number: the
# sends of all mutants share the sequence, and a run might hand out none)
(my $cols_dc = $cols) =~ s/delivery_count/delivery_count + CASE WHEN nextval('count_skip.rows') % 7 = 3 THEN 1 ELSE 0 END/;
(my $cols_fake = $cols) =~ s/lock_token/gen_random_uuid()/;
$cols_fake =~ s/delivery_count/delivery_count + 1/;
my %mutants = (
	# a complete that reports success and removes nothing
	noop_complete => ['I4 double complete', q{
		CREATE FUNCTION noop_complete.sbq_complete(q text, t uuid) RETURNS void
		LANGUAGE sql AS $$ SELECT $$}],
	# a receive that over-reports delivery_count now and then
	count_skip => ['I5 delivery count', qq{
		CREATE SEQUENCE count_skip.rows;
		CREATE FUNCTION count_skip.sbq_receive(queue text, max_messages integer, max_wait interval)
		RETURNS SETOF sbq_message LANGUAGE sql AS \$\$
		SELECT $cols_dc FROM public.sbq_receive(queue, max_messages, max_wait) \$\$}],
	# a receive that also hands out a message another consumer holds
	steal_lock => ['I3 lease overlap', qq{
		CREATE FUNCTION steal_lock.sbq_receive(queue text, max_messages integer, max_wait interval)
		RETURNS SETOF sbq_message LANGUAGE sql AS \$\$
		SELECT * FROM public.sbq_receive(queue, max_messages, max_wait)
		UNION ALL
		(SELECT $cols_fake FROM public.sbq_peek(queue, 100)
		  WHERE locked_until > clock_timestamp() + interval '1 s' AND max_messages < 50 LIMIT 1) \$\$}],
	# a send that acknowledges without storing: every seventh, from the
	# third on (not at random: a run with few single sends must lose one too)
	lose_send => ['I1 lost', q{
		CREATE SEQUENCE lose_send.calls;
		CREATE FUNCTION lose_send.sbq_send(queue text, body text) RETURNS bigint
		LANGUAGE plpgsql AS $$
		BEGIN
			IF nextval('lose_send.calls') % 7 = 3 THEN RETURN 0; END IF;
			RETURN public.sbq_send(queue, body);
		END $$}],
);
my $node = SbqFault::new_node('mutants');
my %load;
for my $m (sort keys %mutants)
{
	$node->safe_psql($SbqFault::DB, "CREATE SCHEMA $m; $mutants{$m}[1]");
	SbqFault::create_queue($node, $m, lock => 5, mdc => 3);
	my $ci = SbqFault::conninfo($node) . " options=-csearch_path=$m,public";
	my $hist = SbqFault::history("mutant-$m");
	$load{$m} = [ $ci, $hist, SbqFault::start_load($ci, $m, $hist, duration => 4, producers => 1, consumers => 2) ];
}
for my $m (sort keys %mutants)
{
	my ($ci, $hist, $h) = @{ $load{$m} };
	SbqFault::stop_load($h, wait => 4);
	my $d = SbqFault::spawn('drain', '--conninfo', $ci, '--queue', $m, '--history', $hist, '--timeout', 60);
	push @{ $load{$m} }, $d;
}
for my $m (sort keys %mutants)
{
	my ($ci, $hist, $h, $d) = @{ $load{$m} };
	SbqFault::finish($d, 70);
	my $out = `$SbqFault::PYTHON $SbqFault::DIR/sbq_check.py $hist 2>&1`;
	my $rc = $? >> 8;
	is($rc, 1, "mutant $m: the checker fails the run") or diag($out);
	like($out, qr/^VIOLATION \Q$mutants{$m}[0]\E \(/m, "mutant $m: it reports \"$mutants{$m}[0]\"")
	  or diag($out);
}
$node->stop;

done_testing();
