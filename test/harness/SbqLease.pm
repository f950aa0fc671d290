# Copyright (c) 2026, the sbqueue authors
#
# SbqLease: what the TAP tests of locks in shared memory (leases) share.
package SbqLease;

use strict;
use warnings;

# Run $sql in database $db of $node with verbose errors; returns (rc, stdout,
# stderr, SQLSTATE of the first error or '').
sub run_sql
{
	my ($node, $db, $sql) = @_;
	my ($rc, $out, $err) = $node->psql($db, "\\set VERBOSITY verbose\n$sql");
	my ($state) = $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return ($rc, $out, $err, $state // '');
}

# Receive up to $n messages of queue $q in one call (after $setup, if any
# SQL is given). Returns a hash: rc, sqlstate and err of the call; received,
# and of those how many are leases (nothing stored in the row) and how many
# row locks.
sub receive_many
{
	my ($node, $db, $q, $n, $setup) = @_;
	$setup //= '';
	my ($rc, $out, $err, $state) = run_sql($node, $db, qq{
		$setup
		CREATE TEMP TABLE r AS SELECT sequence_number FROM sbq_receive('$q', $n);
		SELECT count(*) || ' '
			   || count(*) FILTER (WHERE m.locked_until IS NULL AND m.lock_token IS NULL) || ' '
			   || count(*) FILTER (WHERE m.locked_until IS NOT NULL)
		  FROM r JOIN sbq.messages m USING (sequence_number);
	});
	my %r = (rc => $rc, sqlstate => $state, err => $err,
		received => 0, leased => 0, rowlocked => 0);
	@r{qw(received leased rowlocked)} = split / /, $out if $rc == 0;
	return \%r;
}

1;
