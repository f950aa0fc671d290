# Copyright (c) 2026, the sbqueue authors
#
# SbqFault: what sbqueue's fault tests (test/t/fault_*.pl) share. Servers set up
# for faults (fsync on, restart_after_crash on), the history-recording client
# (sbq_load.py) started and stopped as separate processes, crash events
# written into the history, the final drain, the checker (sbq_check.py) and
# pg_amcheck. See test/harness/README.md.
package SbqFault;

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use JSON::PP;
use POSIX qw(WNOHANG);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

our $DIR = dirname(abs_path(__FILE__));
our $PYTHON = -x '/usr/bin/python3' ? '/usr/bin/python3' : 'python3';
our $DB = 'app';

# A server for fault tests: fsync on, restart after a crash, sbqueue preloaded
# unless preload => 0, extra settings in conf; database app with sbqueue.
sub new_node
{
	my ($name, %o) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(allows_streaming => $o{streaming} ? 1 : 0);
	my $preload = (!defined $o{preload} || $o{preload}) ? "shared_preload_libraries = 'sbqueue'" : '';
	$node->append_conf('postgresql.conf', qq(
$preload
fsync = on
restart_after_crash = on
max_connections = 40
log_statement = none
log_min_messages = warning
log_connections = off
log_disconnections = off
) . ($o{conf} // ''));
	$node->start;
	$node->safe_psql('postgres', "CREATE DATABASE $DB");
	$node->safe_psql($DB, 'CREATE EXTENSION sbqueue');
	return $node;
}

sub create_queue
{
	my ($node, $queue, %o) = @_;
	my $lock = $o{lock} // 5;
	my $mdc = $o{mdc} // 3;
	$node->safe_psql($DB,
		"SELECT sbq_create_queue('$queue', lock_duration => '$lock s', max_delivery_count => $mdc)");
}

# libpq connection string for the client; several nodes: the client tries
# each in turn and takes the one that accepts writes (for failover).
sub conninfo
{
	my @nodes = @_;
	my $hosts = join(',', map { $_->host } @nodes);
	my $ports = join(',', map { $_->port } @nodes);
	my $ci = "host=$hosts port=$ports dbname=$DB";
	$ci .= ' target_session_attrs=read-write' if @nodes > 1;
	return $ci;
}

sub history
{
	my ($name) = @_;
	my $p = "$PostgreSQL::Test::Utils::tmp_check/$name.jsonl";
	unlink $p;
	return $p;
}

# Start sbq_load.py in the background; its stdout and stderr go to a file.
# Returns { pid, out }.
sub spawn
{
	my ($cmd, @args) = @_;
	my $out = "$PostgreSQL::Test::Utils::tmp_check/harness-$cmd-" . int(rand(1e9)) . '.out';
	my $pid = fork;
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		open(STDOUT, '>', $out) or die "$out: $!";
		open(STDERR, '>&', \*STDOUT) or die;
		exec($PYTHON, "$DIR/sbq_load.py", $cmd, @args) or die "exec: $!";
	}
	return { pid => $pid, out => $out, cmd => $cmd };
}

# Wait (at most $timeout s) for a spawned client to exit; kill it after that.
# Returns its exit status, or undef when it had to be killed.
sub finish
{
	my ($h, $timeout) = @_;
	my $deadline = time + ($timeout // 60);
	while (time < $deadline)
	{
		my $r = waitpid($h->{pid}, WNOHANG);
		return $? >> 8 if $r == $h->{pid};
		return undef if $r < 0;
		usleep(50_000);
	}
	diag("harness $h->{cmd} (pid $h->{pid}) did not finish in time: killed");
	kill 'KILL', $h->{pid};
	waitpid($h->{pid}, 0);
	return undef;
}

sub output
{
	my ($h) = @_;
	return -f $h->{out} ? slurp_file($h->{out}) : '';
}

# Run one sbq_load.py command to its end; returns (exit status, stdout).
sub run
{
	my ($cmd, $timeout, @args) = @_;
	my $h = spawn($cmd, @args);
	my $rc = finish($h, $timeout);
	return ($rc, output($h));
}

# Decode the last JSON line a client printed.
sub last_json
{
	my ($text) = @_;
	my @l = grep { /^[\[{]/ } split /\n/, $text;
	return @l ? decode_json($l[-1]) : undef;
}

sub start_load
{
	my ($ci, $queue, $hist, %o) = @_;
	my @a = ('--conninfo', $ci, '--queue', $queue, '--history', $hist,
		'--duration', $o{duration} // 20,
		'--producers', $o{producers} // 2, '--consumers', $o{consumers} // 3,
		'--lock-duration', $o{lock} // 5, '--max-delivery-count', $o{mdc} // 3,
		'--send-delay', $o{send_delay} // 0.03, '--poison', $o{poison} // 0.03);
	push @a, '--seed', $o{seed} if defined $o{seed};
	my $h = spawn('load', @a);
	note("load client pid $h->{pid} on $queue");
	return $h;
}

# Stop the load (SIGTERM: each connection ends after its current call), or
# with wait => 1 let it run to the end of its duration.
sub stop_load
{
	my ($h, %o) = @_;
	kill 'TERM', $h->{pid} unless $o{wait};
	my $rc = finish($h, ($o{wait} // 0) + 40);
	is($rc, 0, 'the load client stopped cleanly') or diag(output($h));
}

# A fault: the server may have crashed (lost locks) anywhere in [t0, t1].
sub record_crash
{
	my ($hist, $t0, $t1, $what) = @_;
	open(my $fh, '>>', $hist) or die "$hist: $!";
	print $fh encode_json({ ev => 'crash', t_start => $t0 + 0.0, t_end => $t1 + 0.0, what => $what }) . "\n";
	close $fh;
}

# The final drain over a new connection, then the checker; returns the
# checker's summary (a hash). One test assertion each.
sub drain_and_check
{
	my ($ci, $queue, $hist, $name) = @_;
	my ($rc, $out) = run('drain', 120, '--conninfo', $ci, '--queue', $queue, '--history', $hist,
		'--timeout', 100);
	is($rc, 0, "$name: the final drain empties the queue") or diag($out);
	return check($hist, $name);
}

sub check
{
	my ($hist, $name) = @_;
	my $json = "$hist.summary.json";
	my $out = `$PYTHON $DIR/sbq_check.py --json $json $hist 2>&1`;
	my $rc = $? >> 8;
	note($out);
	if (!is($rc, 0, "$name: the checker finds I1-I6 hold"))
	{
		diag($out);
		# keep the history: run.sh removes the scratch directory
		my $keep = ($ENV{SBQ_HISTORY_DIR} // '/tmp') . "/sbq-history-$name-" . time() . '.jsonl';
		system('cp', $hist, $keep);
		diag("history kept in $keep");
	}
	my $s = -f $json ? decode_json(slurp_file($json)) : {};
	return $s;
}

# pg_amcheck on the database that holds the queues, heap and all indexes.
sub amcheck
{
	my ($node, $name) = @_;
	$node->command_ok(
		[ 'pg_amcheck', '--install-missing', '--heapallindexed', '--rootdescend', '-d', $DB ],
		"$name: pg_amcheck --heapallindexed finds no corruption");
}

# Number of crash-restarts the postmaster has logged so far.
sub restarts
{
	my ($node) = @_;
	my $log = slurp_file($node->logfile);
	my @m = $log =~ /all server processes terminated; reinitializing/g;
	return scalar @m;
}

# Wait until the postmaster logged crash-restart number $n and accepts queries.
sub wait_restart
{
	my ($node, $n, $timeout) = @_;
	my $deadline = time + ($timeout // 60);
	while (time < $deadline && restarts($node) < $n)
	{
		usleep(100_000);
	}
	return 0 if restarts($node) < $n;
	while (time < $deadline)
	{
		# psql may exit (connection refused in recovery) before it has read
		# the query from its stdin: writing it then dies of a broken pipe
		my $rc = eval { ($node->psql('postgres', 'SELECT 1'))[0] } // 1;
		return 1 if $rc == 0;
		usleep(100_000);
	}
	return 0;
}

sub worker_running
{
	my ($node, $timeout) = @_;
	return $node->poll_query_until('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'sbqueue maintenance' AND datname = '$DB'",
		'1');
}

# Wait until the history file holds a line matching $re; returns the line.
sub wait_history
{
	my ($hist, $re, $timeout) = @_;
	my $deadline = time + ($timeout // 30);
	while (time < $deadline)
	{
		if (-f $hist)
		{
			for my $l (split /\n/, slurp_file($hist))
			{
				return $l if $l =~ $re;
			}
		}
		usleep(20_000);
	}
	return undef;
}

# psql returning (rc, stdout, the SQLSTATE of the error or '').
sub psql_state
{
	my ($node, $db, $sql) = @_;
	my ($stdout, $stderr) = ('', '');
	my $rc = $node->psql($db, "\\set VERBOSITY verbose\n$sql", stdout => \$stdout, stderr => \$stderr);
	my ($state) = $stderr =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return ($rc, $stdout, $state // '', $stderr);
}

# The server log shows no crashed process other than the ones the test killed
# (pids in %$killed, by SIGKILL), and no PANIC.
sub log_clean
{
	my ($node, $name, $killed) = @_;
	$killed //= {};
	my $log = slurp_file($node->logfile);
	my @bad;
	while ($log =~ /^.*\((?:PID|pid) (\d+)\) was terminated by signal (\d+).*$/mg)
	{
		push @bad, $& unless $killed->{$1} && $2 == 9;
	}
	push @bad, $1 while $log =~ /^(.*PANIC:.*)$/mg;
	is_deeply(\@bad, [], "$name: no process crashed but the ones killed, no PANIC in the server log");
}

1;
