# Copyright (c) 2026, the sbqueue authors
#
# A batch send stores its rows in groups, as COPY does (src/send_direct.c):
# the heap takes each group in one multi-insert, which finds, locks and logs
# each page once for the rows that go into it, rather than once a row. The
# WAL shows it: the rows of a batch of 250 go into sbq.messages in three
# multi-insert records (100, 100 and 50 rows), not 250 inserts; bodies of
# 300,000 bytes close a group at about a megabyte. And the groups survive a
# crash: an immediate stop after a committed batch and a rolled-back one
# keeps the one and not the other, with heap and indexes intact. A duplicate
# in a later group fails the batch as the INSERT did; a table whose
# constraints run code is stored row by row, so that code sees every row
# before it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../harness";
use SbqNode;

my $node = SbqNode::preloaded('send_groups', "autovacuum = off\n");
$node->safe_psql('postgres', q{
	CREATE EXTENSION sbqueue;
	CREATE EXTENSION pg_walinspect;
	SELECT sbq_create_queue('sg');
});

# the WAL records a statement writes into sbq.messages' heap, in order, one line
# each: "INSERT" for one row, "MULTI n" for n rows of a multi-insert (one record
# for each page a group fills)
sub heap_records
{
	my ($sql) = @_;
	my $out = $node->safe_psql('postgres', qq{
		SELECT pg_current_wal_insert_lsn() AS a \\gset
		$sql
		SELECT CASE WHEN r.record_type LIKE 'MULTI_INSERT%'
		            THEN 'MULTI ' || substring(r.description FROM '^(\\d+) tuples')
		            ELSE 'INSERT' END
		  FROM pg_get_wal_records_info(:'a', pg_current_wal_flush_lsn()) r
		 WHERE r.resource_manager IN ('Heap', 'Heap2')
		   AND r.record_type IN ('INSERT', 'INSERT+INIT', 'MULTI_INSERT', 'MULTI_INSERT+INIT')
		   AND r.block_ref LIKE '%/' || pg_relation_filenode('sbq.messages') || ' fork main %'
		 ORDER BY r.start_lsn;
	});
	# (the statement's own output dropped)
	return join("\n", grep { /^(INSERT|MULTI \d+)$/ } split /\n/, $out);
}

# the rows of each multi-insert record, in order
sub multi { my ($r) = @_; return join(',', $r =~ /^MULTI (\d+)$/mg); }

my $records = heap_records(q{
	SELECT count(*) FROM sbq_send_batch('sg', ARRAY(SELECT 'b' || g FROM generate_series(1, 250) g));
});
unlike($records, qr/^INSERT/m, 'a batch of 250: no row of it goes into the heap alone')
  or diag($records);
my $rows = 0;
$rows += $_ for split /,/, multi($records);
is($rows, 250, '... but in multi-inserts, a record for each page, 250 rows in all')
  or diag($records);
cmp_ok(scalar(() = $records =~ /^(?:INSERT|MULTI)/mg), '<', 20, '... a few records in all, not one a row')
  or diag($records);

$records = heap_records(q{
	SELECT count(*) FROM sbq_send_batch('sg',
		ARRAY(SELECT repeat(chr(64 + g), 150000) || md5(g::text) || repeat('.', 149968)
		        FROM generate_series(1, 9) g));
});
is(multi($records), '4,4,1',
	'nine bodies of 300,000 bytes (kept out of line): groups of 4, 4 and 1, about a megabyte each')
  or diag($records);

$records = heap_records(q{SELECT sbq_send('sg', 'one');});
is($records, 'INSERT', 'a single send is one insert, as before')
  or diag($records);

# a duplicate in the second group, found by a DBA's unique index (a plain one, so the
# batch is still stored in groups): the first group is in the heap and indexed by
# then; the batch fails with the unique violation and nothing of it stays
$node->safe_psql('postgres', q{
	SELECT sbq_purge_queue('sg');
	CREATE UNIQUE INDEX sg_body_once ON sbq.messages (body);
	SELECT sbq_send('sg', 'b150');
});
my ($rc, $out, $err) = $node->psql('postgres', q{
	SELECT count(*) FROM sbq_send_batch('sg', ARRAY(SELECT 'b' || g FROM generate_series(1, 250) g));
}, extra_params => [ '-v', 'VERBOSITY=sqlstate' ]);
like($err, qr/23505/, 'a duplicate at row 150 of a batch: the unique violation (23505)');
is($node->safe_psql('postgres', q{SELECT count(*) FROM sbq_peek('sg', 1000)}), '1',
	'... and nothing of the batch stays');
$node->safe_psql('postgres', 'DROP INDEX sbq.sg_body_once; SELECT sbq_purge_queue(\'sg\');');

# a DBA's CHECK that runs code (here: counts the queue's rows when row 50 is stored)
# sees the batch as the INSERT showed it, every earlier row stored: such a table is
# stored row by row
$node->safe_psql('postgres', q{
	CREATE FUNCTION public.sg_look(b bytea, q int) RETURNS boolean LANGUAGE plpgsql AS $f$
	BEGIN
		IF b = 'b50'::bytea THEN
			RAISE NOTICE 'row 50 sees % rows', (SELECT count(*) FROM sbq.messages WHERE queue_id = q);
		END IF;
		RETURN true;
	END $f$;
	ALTER TABLE sbq.messages ADD CONSTRAINT sg_look CHECK (public.sg_look(body, queue_id));
});
($rc, $out, $err) = $node->psql('postgres', q{
	SELECT count(*) FROM sbq_send_batch('sg', ARRAY(SELECT 'b' || g FROM generate_series(1, 100) g));
});
like($err, qr/row 50 sees 49 rows/, 'a CHECK that runs code sees the 49 rows stored before the 50th')
  or diag($err);
$node->safe_psql('postgres', q{
	ALTER TABLE sbq.messages DROP CONSTRAINT sg_look;
	DROP FUNCTION public.sg_look(bytea, int);
});

# a committed batch and a rolled-back one, then an immediate stop: crash recovery
# replays the groups of the one and leaves the other's rows dead
$node->safe_psql('postgres', q{
	SELECT sbq_purge_queue('sg');
	SELECT count(*) FROM sbq_send_batch('sg', ARRAY(SELECT 'kept ' || g FROM generate_series(1, 250) g));
	BEGIN;
	SELECT count(*) FROM sbq_send_batch('sg', ARRAY(SELECT 'undone ' || g FROM generate_series(1, 250) g));
	ROLLBACK;
});
$node->stop('immediate');
$node->start;
is($node->safe_psql('postgres', q{
	SELECT count(*) || ' ' || bool_and(convert_from(body, 'UTF8') = 'kept ' || i)
	  FROM (SELECT body, row_number() OVER (ORDER BY sequence_number) AS i
	          FROM sbq_receive('sg', 1000, receive_mode => 'receive_and_delete')) r
}), '250 true', 'after an immediate stop: the committed batch whole and in order, none of the rolled-back one');
$node->command_ok(
	[ 'pg_amcheck', '--install-missing', '--heapallindexed', '--rootdescend', '-d', 'postgres' ],
	'pg_amcheck --heapallindexed finds no corruption after the recovery');

$node->stop;
done_testing();
