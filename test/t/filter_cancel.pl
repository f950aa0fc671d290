# Copyright (c) 2026, the sbqueue authors
#
# A SQL filter's LIKE takes time that grows with the string's length times the
# pattern's: a property of megabytes against a pattern of a thousand characters
# runs for many seconds. sbq_test_filter is open to every role and takes a
# message of any size, and a send to a topic evaluates its subscriptions' rules
# against the message's properties. Both must stop at statement_timeout, at
# pg_cancel_backend and at pg_terminate_backend, not when the match ends (on
# the code before, a 2 MB property took 26 s whatever was asked).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

my $node = SbqNode::preloaded('filter_cancel');
$node->safe_psql('postgres', q{
	CREATE EXTENSION sbqueue;
	CREATE ROLE nobody LOGIN;
	CREATE ROLE sender LOGIN;
	SELECT sbq_create_topic('slow');
	SELECT sbq_create_subscription('slow', 'like');
	SELECT sbq_remove_rule('slow', 'like', '$Default');
	SELECT sbq_add_rule('slow', 'like', 'long',
		sql_filter => '(s + s + s + s + s) LIKE ''%' || repeat('a', 950) || 'b''');
	SELECT sbq_grant('slow', 'sender', ARRAY['send']);
});

# a match of about 2 * 10^9 steps: many seconds on any machine
my $test_filter = q{SELECT sbq_test_filter('s LIKE ''%' || repeat('a', 1000) || 'b''',
		sbq_new_message('x', application_properties => jsonb_build_object('s', repeat('a', 2000000))))};

# statement_timeout, as a role with no right on anything
my $t0 = time;
my ($ret, $stdout, $stderr) = $node->psql('postgres',
	"SET statement_timeout = '300ms'; $test_filter", extra_params => [ '-U', 'nobody' ]);
my $took = time - $t0;
like($stderr, qr/canceling statement due to statement timeout/, 'sbq_test_filter stops at statement_timeout');
cmp_ok($took, '<', 5, sprintf('... within 5 s (%.1f s)', $took));

# pg_cancel_backend and pg_terminate_backend, from another session
for my $how ('cancel', 'terminate')
{
	my $bg = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $bg->query_safe('SELECT pg_backend_pid()');
	$bg->{stdin} .= "$test_filter;\n";
	$bg->{run}->pump_nb;
	SbqNode::poll_until($node, 'postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid AND state = 'active' AND query LIKE '%sbq_test_filter%'",
		'1');
	sleep 1;
	$t0 = time;
	$node->safe_psql('postgres', "SELECT pg_${how}_backend($pid)");
	my $gone = SbqNode::poll_until($node, 'postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid AND state = 'active'", '0');
	$took = time - $t0;
	cmp_ok($took, '<', 5, sprintf('pg_%s_backend stops sbq_test_filter within 5 s (%.1f s)', $how, $took));
	eval { $bg->quit; };
}

# a send to a topic whose rule is slow, by a role with only send on it: the
# properties stay within the 64 KiB a message may have, and the rule's
# concatenations within its evaluation's 1 MiB of strings (about 4 s of work)
$t0 = time;
($ret, $stdout, $stderr) = $node->psql('postgres',
	q{SET statement_timeout = '300ms';
	  SELECT sbq_send('slow', 'x', application_properties => jsonb_build_object('s', repeat('a', 64000)))},
	extra_params => [ '-U', 'sender' ]);
$took = time - $t0;
like($stderr, qr/canceling statement due to statement timeout/, 'a send to the topic stops at statement_timeout');
cmp_ok($took, '<', 2.5, sprintf('... within 2.5 s (%.1f s)', $took));
is($node->safe_psql('postgres', q{SELECT sent FROM sbq_topic_stats WHERE topic = 'slow'}), '0',
	'... and nothing was sent');

# the server is well: a filter that matches still matches
is($node->safe_psql('postgres', q{SELECT sbq_test_filter('s LIKE ''a%b''',
		sbq_new_message('x', application_properties => '{"s": "aaab"}'))}), 't', 'LIKE still matches');
$node->stop;
done_testing();
