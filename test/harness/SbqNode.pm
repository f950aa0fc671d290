# Copyright (c) 2026, the sbqueue authors
#
# SbqNode: the server most TAP tests start.
package SbqNode;

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More ();
use Time::HiRes qw(time usleep);

# A started server named $name with sbqueue preloaded and the maintenance
# worker off (the test runs sbq_maintain() itself, when it wants to), and
# the further postgresql.conf lines in $conf.
sub preloaded
{
	my ($name, $conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = 'sbqueue'\n"
		  . "sbqueue.enable_maintenance_worker = off\n"
		  . ($conf // ''));
	$node->start;
	return $node;
}

# poll_query_until for a server that may be in crash-restart: true once
# $query in $dbname returns $expected (default 't'), false after the default
# timeout. The query goes in psql's -c, not its stdin: a psql that exits at
# once (connection refused while the server recovers) would otherwise make
# IPC::Run die of a broken pipe as it writes the query, and end the test.
sub poll_until
{
	my ($node, $dbname, $query, $expected) = @_;
	$expected //= 't';
	my $cmd = [ 'psql', '-XAt', '-d', $node->connstr($dbname), '-c', $query ];
	my ($out, $err) = ('', '');
	for (1 .. 10 * $PostgreSQL::Test::Utils::timeout_default)
	{
		($out, $err) = ('', '');
		eval { IPC::Run::run($cmd, '<', '/dev/null', '>', \$out, '2>', \$err) };
		chomp($out);
		return 1 if $out eq $expected && $err eq '';
		usleep(100_000);
	}
	Test::More::diag("poll_until timed out: $query\nexpected: $expected\nlast: $out\n$err");
	return 0;
}

# After a kill -9 of one of $node's processes: wait until the log past byte
# $offset shows the crash-restart, then until the server takes connections
# again. True on success, false after the default timeout.
sub wait_crash_restart
{
	my ($node, $offset) = @_;
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	while (slurp_file($node->logfile, $offset) !~ /all server processes terminated; reinitializing/)
	{
		return 0 if time > $deadline;
		usleep(100_000);
	}
	return poll_until($node, 'postgres', 'SELECT 1', '1');
}

# SQL that makes every plan the session's statements make (sbqueue's own,
# nested in its calls, too) come back as a notice, through auto_explain.
sub explain_notices
{
	return q{
	LOAD 'auto_explain';
	SET auto_explain.log_min_duration = 0;
	SET auto_explain.log_nested_statements = on;
	SET auto_explain.log_level = notice;
};
}

# A new session of $node whose first statement $first is held by a debugger
# at the function $break, while $change runs in another session; then it goes
# on. One check: that it was held there (by the breakpoint, not a signal).
# Returns the session, or undef and the reason to skip (no debugger can
# attach); and what $change printed on standard error (its notices). The
# caller makes sure gdb is there.
sub held_call
{
	my ($node, $break, $first, $change) = @_;
	my $gdb = 'gdb';
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	open(my $fh, '>', "$dir/cmds") or die;
	print $fh "set pagination off\nhandle SIGUSR1 SIGUSR2 SIGURG SIGALRM SIGPIPE nostop noprint pass\n",
	  "shell touch $dir/attached\nbreak $break\ncontinue\n",
	  "shell touch $dir/held\nshell while [ ! -f $dir/go ]; do sleep 0.05; done\n",
	  "delete\ndetach\nquit\n";
	close $fh;
	my $gout = '';
	my $g = IPC::Run::start([ $gdb, '-p', $pid, '-batch', '-x', "$dir/cmds" ],
		'>', \$gout, '2>&1', IPC::Run::timeout(120));
	for (1 .. 600)
	{
		last if -f "$dir/attached" || !$g->pumpable;
		usleep(50_000);
	}
	if (!-f "$dir/attached" || $gout =~ /ptrace|not permitted/i)
	{
		system('touch', "$dir/go");
		eval { $g->finish };
		$s->quit;
		return (undef, "the debugger cannot attach here: $gout");
	}
	$s->{stdin} .= "$first\n";
	$s->{run}->pump_nb;
	for (1 .. 1200)
	{
		last if -f "$dir/held" || !$g->pumpable;
		usleep(50_000);
	}
	my $held = -f "$dir/held";
	my $notices = '';
	$node->psql('postgres', $change, stderr => \$notices, on_error_die => 1);
	system('touch', "$dir/go");
	# (a debugger whose breakpoint was never hit waits for the session's end)
	$held ? $g->finish : $g->kill_kill;
	Test::More::ok($held && $gout =~ /^Breakpoint 1[,.]/m, "a call is held at $break: $first")
	  or Test::More::diag($gout);
	return ($s, undef, $notices);
}

1;
