# Copyright (c) 2026, the sbqueue authors
#
# Errors raised inside sbqueue's own statements name the statement and never
# show its SQL (which would show the caller sbqueue's tables and how it uses
# them): also when the error comes while a statement is being prepared, which
# happens on its first use in a backend. Here the preparation of a peek waits
# for a lock another session holds on the message table, until lock_timeout.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

my $node = SbqNode::preloaded('bad_input_errors');
$node->safe_psql('postgres', q{
	CREATE EXTENSION sbqueue;
	SELECT sbq_create_queue('held');
	SELECT sbq_send('held', 'm');
});

my $locker = $node->background_psql('postgres', on_error_stop => 1);
$locker->query_safe('BEGIN; LOCK TABLE sbq.messages IN ACCESS EXCLUSIVE MODE;');

# a new backend: the peek's statement is prepared now, and waits for the lock
my ($ret, $stdout, $stderr) = $node->psql('postgres',
	"SET lock_timeout = '300ms'; SELECT count(*) FROM sbq_peek('held');",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($stderr, qr/55P03/, 'the peek fails on the lock timeout (55P03)');
like($stderr, qr/sbqueue statement "peek"/, 'the error names the sbqueue statement');
unlike($stderr, qr/QUERY:|LINE 1:|sbq\.messages|FROM \(\(SELECT/,
	'the error shows none of the statement\'s SQL');

$locker->query_safe('COMMIT;');
$locker->quit;
is($node->safe_psql('postgres', "SELECT count(*) FROM sbq_peek('held')"), '1',
	'the peek works once the lock is gone');

$node->stop;
done_testing();
