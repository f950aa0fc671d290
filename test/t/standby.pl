# Copyright (c) 2026, the sbqueue authors
#
# On a hot standby the launcher does not run and no worker touches anything;
# a blocking receive there fails as a write would (25006). Once the standby
# is promoted, the launcher starts and maintains its databases.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf(
	'postgresql.conf', qq(
shared_preload_libraries = 'sbqueue'
log_statement = none
));
$primary->start;
$primary->safe_psql('postgres', 'CREATE DATABASE app');
$primary->safe_psql('app', 'CREATE EXTENSION sbqueue');
ok($primary->poll_query_until('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'sbqueue maintenance' AND datname = 'app'", '1'),
	'the primary runs a worker in app');

$primary->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
$standby->start;

# a message left locked on the primary, on its last delivery, with the
# primary's maintenance turned off: only a worker on the standby could touch it.
# The lock is stored in the message row (sbqueue.memory_locks off), so the
# standby has it; a lock kept in the primary's memory (queue l) is lost with
# the primary, as in a crash.
$primary->safe_psql('postgres', 'ALTER SYSTEM SET sbqueue.enable_maintenance_worker = off');
$primary->reload;
ok($primary->poll_query_until('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'sbqueue maintenance'", '0'),
	'the primary\'s worker is off');
$primary->safe_psql('app', q{
	SELECT sbq_create_queue('q', lock_duration => '5 s', max_delivery_count => 1);
	SELECT sbq_send('q', 'm');
	SET sbqueue.memory_locks = off;
	SELECT count(*) FROM sbq_receive('q');
	RESET sbqueue.memory_locks;
	SELECT sbq_create_queue('l', lock_duration => '5 min', max_delivery_count => 1);
	SELECT sbq_send('l', 'leased');
	SELECT count(*) FROM sbq_receive('l');
});
$primary->wait_for_catchup($standby);

usleep(2_000_000);
is($standby->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'sbqueue%'"),
	'0', 'no launcher and no worker on the standby');
is($standby->safe_psql('app', "SELECT count(*) FROM sbq_peek('q')"), '1', 'the standby sees the locked message');
my ($rc, $out, $err) = $standby->psql('app', "SELECT * FROM sbq_receive('q', 1, '1 s')");
isnt($rc, 0, 'a waiting receive on the standby fails');
like($err, qr/read-only transaction|recovery/, 'as a write would');

# promote: the launcher starts, and the worker dead-letters the message
$standby->promote;
ok($standby->poll_query_until('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'sbqueue maintenance' AND datname = 'app'", '1'),
	'after promotion the launcher starts a worker in app');
ok($standby->poll_query_until('app',
		"SELECT count(*) FROM sbq_peek('q/\$deadletterqueue') WHERE dead_letter_reason = 'MaxDeliveryCountExceeded'", '1'),
	'and it maintains the promoted database');
is($standby->safe_psql('app', "SELECT convert_from(body, 'UTF8') || ' ' || delivery_count FROM sbq_receive('l')"),
	'leased 1', 'a lock held in the old primary\'s memory is lost: the message is delivered again');

$standby->stop;
$primary->stop;
done_testing();
