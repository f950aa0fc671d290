# Copyright (c) 2026, the sbqueue authors
#
# The documented pg_cron recipe, for servers that cannot preload sbqueue:
# sbqueue is NOT in shared_preload_libraries (so there is no worker), pg_cron
# runs SELECT sbq_maintain() every minute, and that dead-letters an
# over-delivered message that no receive call touches.
#
# Debian's postgresql-15-cron has minute granularity (seconds schedules came
# with pg_cron 1.5), so this test waits for the next minute boundary: up to
# about 70 s.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $pkglibdir = `pg_config --pkglibdir`;
chomp $pkglibdir;
my $sharedir = `pg_config --sharedir`;
chomp $sharedir;
if (!-f "$pkglibdir/pg_cron.so" || !-f "$sharedir/extension/pg_cron.control")
{
	plan skip_all => 'pg_cron is not installed (apt-get install postgresql-15-cron)';
}

my $node = PostgreSQL::Test::Cluster->new('cron');
$node->init;
$node->append_conf(
	'postgresql.conf', qq(
shared_preload_libraries = 'pg_cron'
cron.database_name = 'postgres'
cron.use_background_workers = on
max_worker_processes = 16
log_statement = none
));
$node->start;

is($node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'sbqueue%'"),
	'0', 'sbqueue is not preloaded: no worker');

$node->safe_psql('postgres', 'CREATE EXTENSION sbqueue; CREATE EXTENSION pg_cron;');
$node->safe_psql('postgres', q{
	SELECT sbq_create_queue('q', lock_duration => '5 s', max_delivery_count => 1);
	SELECT sbq_send('q', 'poison');
	SELECT count(*) FROM sbq_receive('q');
});

usleep(5_500_000);    # the lock (5 s) runs out first: the job's first run must find it over-delivered

# the recipe of docs/worker.md, verbatim
my $jobid = $node->safe_psql('postgres',
	q{SELECT cron.schedule('sbqueue-maintain', '* * * * *', $$SELECT sbq_maintain()$$)});
like($jobid, qr/^\d+$/, 'the maintenance job is scheduled');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM sbq_peek('q/\$deadletterqueue') WHERE NOT EXISTS (SELECT FROM cron.job_run_details)"),
	'0', 'until the job runs, nothing dead-letters the message');

# the next minute boundary, plus slack
my $done = 0;
for (1 .. 900)
{
	$done = $node->safe_psql('postgres',
		"SELECT count(*) FROM cron.job_run_details WHERE jobid = $jobid AND status IN ('succeeded', 'failed')");
	last if $done > 0;
	usleep(100_000);
}
is($node->safe_psql('postgres', "SELECT status FROM cron.job_run_details WHERE jobid = $jobid ORDER BY runid LIMIT 1"),
	'succeeded', 'pg_cron ran SELECT sbq_maintain() successfully');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM sbq_peek('q/\$deadletterqueue') WHERE dead_letter_reason = 'MaxDeliveryCountExceeded'"),
	'1', 'the job dead-lettered the over-delivered message');
is($node->safe_psql('postgres', "SELECT count(*) FROM sbq_peek('q')"), '0', 'and it left the queue');

$node->stop;
done_testing();
