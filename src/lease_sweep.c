/*-------------------------------------------------------------------------
 *
 * lease_sweep.c
 *	  The statements that write what leases leave to store (delivery counts,
 *	  dead letters, dropped messages), for a leasing receive and for the
 *	  sweep that ends expired leases, which is here too.
 *
 * The sweep ends expired leases: it stores each one's delivery count in its
 * message, or dead-letters the message when that was its last allowed
 * delivery. Maintenance sweeps the whole database; a row-lock receive and a
 * resubmit sweep their queue first, since their statements skip messages
 * that have a lease entry.
 *
 * Owns: nothing shared (the lease table is lease.c's). Locks: row locks of
 * its statements; lease.c's partition locks through its calls.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/lease_sweep.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "lease.h"
#include "storage_core.h"
#include "wait.h"

/*
 * The (sequence number, count, row version) triples $1, $2, $3 of the lease
 * statements. A leasing receive passes the row versions its scan read: a
 * row that changed since (a settlement of an expired row lock that waited
 * for the row, say) is not written. The sweep passes none: it holds the
 * leases it ends, so nothing else can change those rows.
 */
#define LEASE_TRIPLES \
	"WITH c AS MATERIALIZED (" \
	"  SELECT u.seq, u.cnt, u.tid" \
	"    FROM unnest($1::int8[], $2::int4[], $3::tid[]) AS u(seq, cnt, tid)) "
#define LEASE_ROW_AS_SEEN "(c.tid IS NULL OR m.ctid = c.tid)"

/* store the delivery counts of expired leases (or row locks) and free the rows */
SbqStatement sbq_stmt_lease_store = {"lease store", 4, {INT8ARRAYOID, INT4ARRAYOID,
		TIDARRAYOID, INT4OID},
	LEASE_TRIPLES
	"UPDATE " SUBQUEUE_TABLE " m"
	"   SET delivery_count = GREATEST(m.delivery_count, c.cnt),"
	"       lock_token = NULL, locked_until = NULL"
	"  FROM c WHERE m.sequence_number = c.seq AND m.sequence_number = ANY($1)"
	"   AND m.queue_id = $4 AND " LEASE_ROW_AS_SEEN
	" RETURNING m.sequence_number",
	.by_key = true
};

/* $4 queue, $5 reason, $6 description, $7 source (the queue's name) */
static SbqStatement stmt_lease_deadletter = {"lease dead-letter", 7, {INT8ARRAYOID,
		INT4ARRAYOID, TIDARRAYOID, INT4OID, TEXTOID, TEXTOID, TEXTOID},
	LEASE_TRIPLES
	", d AS ("
	"  DELETE FROM sbq.messages m USING c"
	"   WHERE m.sequence_number = c.seq AND m.sequence_number = ANY($1)"
	"     AND m.queue_id = $4 AND m.subqueue = 0 AND " LEASE_ROW_AS_SEEN
	"  RETURNING m.*, c.cnt), "
	" i AS (" DEAD_LETTER_INSERT("d", "GREATEST(d.delivery_count, d.cnt)", "$5", "$6", "$7")
	") SELECT d.sequence_number FROM d",
	.old_sql =
	LEASE_TRIPLES
	"UPDATE sbq.messages m"
	"   SET subqueue = 1, state = 0, lock_token = NULL, locked_until = NULL,"
	"       delivery_count = GREATEST(m.delivery_count, c.cnt),"
	"       dead_letter_reason = $5, dead_letter_error_description = $6,"
	"       dead_letter_source = $7"
	"  FROM c WHERE m.sequence_number = c.seq AND m.sequence_number = ANY($1)"
	"   AND m.queue_id = $4 AND m.subqueue = 0 AND " LEASE_ROW_AS_SEEN
	" RETURNING m.sequence_number",
	.by_key = true
};

SbqStatement sbq_stmt_lease_drop = {"lease drop", 4, {INT8ARRAYOID, INT4ARRAYOID,
		TIDARRAYOID, INT4OID},
	LEASE_TRIPLES
	"DELETE FROM sbq.messages m USING c"
	" WHERE m.sequence_number = c.seq AND m.sequence_number = ANY($1)"
	"   AND m.queue_id = $4 AND m.subqueue = 0 AND " LEASE_ROW_AS_SEEN
	" RETURNING m.sequence_number",
	.by_key = true
};

static SbqStatement stmt_queues_exist = {"queues exist", 1, {INT4ARRAYOID},
	"SELECT queue_id FROM sbq.queues WHERE queue_id = ANY($1)"
};

/*
 * At most this many rows go to one lease statement. Its plan joins the
 * message rows it finds to the arrays' rows by a nested loop (a generic plan
 * cannot know the arrays' length), which reads every array row once for each
 * message row: a receive behind 8,000 expired messages of a session, taken
 * off in passes of up to 4,096, spent 6 s in it (0.1 s in chunks of 100).
 */
#define SBQ_LEASE_ROWS_CHUNK 100

/* sbq_lease_rows for at most SBQ_LEASE_ROWS_CHUNK rows */
static int
sbq_lease_rows_chunk(SbqStatement *st, int16 subqueue, const int64 *seqs, const int32 *counts,
					 const ItemPointerData *tids, int n, Datum *extra, int nextra, bool *done)
{
	Datum		values[10];
	bool		nulls[10] = {false};
	uint64		rows;
	uint64		r;
	int			i;

	values[0] = sbq_int8_array(seqs, n);
	values[1] = sbq_int4_array(counts, n);
	if (tids != NULL)
	{
		Datum	   *d = palloc(sizeof(Datum) * n);

		for (i = 0; i < n; i++)
			d[i] = PointerGetDatum(&tids[i]);
		values[2] = PointerGetDatum(construct_array(d, n, TIDOID, sizeof(ItemPointerData),
													false, TYPALIGN_SHORT));
	}
	else
	{
		values[2] = (Datum) 0;
		nulls[2] = true;
	}
	for (i = 0; i < nextra; i++)
		values[3 + i] = extra[i];
	rows = sbq_exec_in(st, subqueue, values, nulls);
	if (done != NULL)
	{
		for (i = 0; i < n; i++)
			done[i] = false;
		for (r = 0; r < rows; r++)
		{
			bool		isnull;
			int64		seq = DatumGetInt64(sbq_col(r, 1, &isnull));

			for (i = 0; i < n; i++)
				if (seqs[i] == seq)
					done[i] = true;
		}
	}
	/* nobody reads the rows again: a receive may call this thousands of times */
	SPI_freetuptable(SPI_tuptable);
	return (int) rows;
}

/*
 * sbq_lease_rows
 *		Run a lease statement on the table of a sub-queue over the triples
 *		(seqs[i], counts[i], tids[i]) (tids NULL: any row version) with
 *		further arguments extra[] (after $1, $2 and $3); returns how many
 *		rows it changed, and marks done[i] for those it returned (when done
 *		!= NULL).
 */
int
sbq_lease_rows(SbqStatement *st, int16 subqueue, const int64 *seqs, const int32 *counts,
			   const ItemPointerData *tids, int n, Datum *extra, int nextra, bool *done)
{
	int			written = 0;
	int			i;

	for (i = 0; i < n; i += SBQ_LEASE_ROWS_CHUNK)
	{
		int			k = Min(n - i, SBQ_LEASE_ROWS_CHUNK);

		CHECK_FOR_INTERRUPTS();
		written += sbq_lease_rows_chunk(st, subqueue, seqs + i, counts + i,
										tids != NULL ? tids + i : NULL, k, extra, nextra,
										done != NULL ? done + i : NULL);
	}
	return written;
}

/* Move messages to the dead-letter sub-queue with their delivery counts. */
int
sbq_lease_deadletter_rows(const SbqQueue *queue, const int64 *seqs, const int32 *counts,
						  const ItemPointerData *tids, int n, const char *reason,
						  const char *description, bool *done)
{
	Datum		extra[4];

	if (n == 0)
		return 0;
	extra[0] = Int32GetDatum(queue->queue_id);
	extra[1] = CStringGetTextDatum(reason);
	extra[2] = CStringGetTextDatum(description);
	extra[3] = CStringGetTextDatum(queue->name);
	return sbq_lease_rows(&stmt_lease_deadletter, SBQ_SUBQUEUE_MAIN, seqs, counts, tids, n, extra, 4, done);
}

/* What the sweep does with an expired lease of its queue (sbq_sweep_kind). */
typedef enum SbqSweepKind
{
	SBQ_SWEEP_DEADLETTER,		/* its last allowed delivery: dead-letter */
	SBQ_SWEEP_STORE,			/* store its delivery count in sbq.messages */
	SBQ_SWEEP_STORE_DLQ,		/* store its delivery count in the dead letter */
	SBQ_SWEEP_KINDS
} SbqSweepKind;

static SbqSweepKind
sbq_sweep_kind(const SbqQueue *queue, const SbqExpiredLease *item)
{
	if (item->subqueue == SBQ_SUBQUEUE_DLQ)
		return SBQ_SWEEP_STORE_DLQ;
	if (item->delivery_count >= queue->max_delivery_count)
		return SBQ_SWEEP_DEADLETTER;
	return SBQ_SWEEP_STORE;
}

/*
 * sbq_sweep_queue_leases
 *		End the expired leases among items[] that belong to queue: dead-letter
 *		the messages whose lease was their last allowed delivery, store the
 *		delivery counts of the others. seqs and counts have room for n.
 */
static void
sbq_sweep_queue_leases(const SbqQueue *queue, const SbqExpiredLease *items, int n,
					   int64 *seqs, int32 *counts, int64 *released, int64 *dead_lettered)
{
	SbqCounts	c = {0};
	char		description[128];
	int			start[SBQ_SWEEP_KINDS + 1];
	int			kind;
	int			i;
	Datum		extra[1];

	/* seqs and counts hold the leases of each kind in turn */
	start[0] = 0;
	for (kind = 0; kind < SBQ_SWEEP_KINDS; kind++)
	{
		start[kind + 1] = start[kind];
		for (i = 0; i < n; i++)
			if (items[i].queue_id == queue->queue_id &&
				(int) sbq_sweep_kind(queue, &items[i]) == kind)
			{
				seqs[start[kind + 1]] = items[i].seq;
				counts[start[kind + 1]++] = items[i].delivery_count;
			}
	}
	if (start[SBQ_SWEEP_KINDS] == 0)
		return;

#define SWEEP_SLICE(k) seqs + start[k], counts + start[k], NULL, start[(k) + 1] - start[k]
	sbq_max_delivery_description(queue, description, sizeof(description));
	c.dead_lettered = sbq_lease_deadletter_rows(queue, SWEEP_SLICE(SBQ_SWEEP_DEADLETTER),
												SBQ_DLQ_REASON_MAX_DELIVERY, description,
												NULL);
	extra[0] = Int32GetDatum(queue->queue_id);
	*released += sbq_lease_rows(&sbq_stmt_lease_store, SBQ_SUBQUEUE_MAIN,
								SWEEP_SLICE(SBQ_SWEEP_STORE), extra, 1, NULL);
	*released += sbq_lease_rows(&sbq_stmt_lease_store, SBQ_SUBQUEUE_DLQ,
								SWEEP_SLICE(SBQ_SWEEP_STORE_DLQ), extra, 1, NULL);
#undef SWEEP_SLICE
	*dead_lettered += c.dead_lettered;
	c.received = start[SBQ_SWEEP_KINDS];	/* those deliveries are over now */
	sbq_add_counts(queue->queue_id, &c);
	sbq_wait_wake_at_commit(queue->queue_id);
}

/*
 * sbq_sweep_unknown_queues
 *		Leases among items[] of queues not among queues[]: of a deleted queue,
 *		or of one made after the caller's list was read (or that its
 *		transaction snapshot cannot see). Asked with a snapshot taken now: a
 *		queue that exists gets its leases back, for a later pass that knows
 *		it; the leases of a queue that is gone just go.
 */
static void
sbq_sweep_unknown_queues(const SbqQueue *queues, int nqueues,
						 const SbqExpiredLease *items, int n)
{
	int32	   *ids = palloc(sizeof(int32) * n);
	int			nids = 0;
	int			i;
	int			q;
	uint64		rows;
	uint64		r;
	Datum		values[1];

	for (i = 0; i < n; i++)
	{
		bool		known = false;

		for (q = 0; q < nqueues && !known; q++)
			known = items[i].queue_id == queues[q].queue_id;
		if (!known)
			ids[nids++] = items[i].queue_id;
	}
	if (nids == 0)
		return;

	values[0] = sbq_int4_array(ids, nids);
	rows = sbq_exec_fresh(&stmt_queues_exist, values);
	for (r = 0; r < rows; r++)
	{
		bool		isnull;
		int32		id = DatumGetInt32(sbq_col(r, 1, &isnull));

		for (i = 0; i < n; i++)
			if (items[i].queue_id == id)
				sbq_lease_unclaim(items[i].seq);
	}
}

/*
 * sbq_lease_sweep
 *		End up to SBQ_MAINTAIN_BATCH expired leases of this database (of the
 *		queue only_queue when not 0): store each one's delivery count in its
 *		message, or dead-letter the message when that was its last allowed
 *		delivery. queues[] are the queues to know: a lease of a queue not
 *		among them just goes if its queue is gone, and is given back if the
 *		queue exists (made since the caller read its list). Adds what it did
 *		to *released and *dead_lettered; returns how many leases it took.
 */
int
sbq_lease_sweep(const SbqQueue *queues, int nqueues, int32 only_queue, TimestampTz now,
				int64 *released, int64 *dead_lettered)
{
	SbqExpiredLease *items;
	int64	   *seqs;
	int32	   *counts;
	int			n;
	int			q;

	if (!sbq_lease_available() || RecoveryInProgress())
		return 0;
	items = palloc(sizeof(SbqExpiredLease) * SBQ_MAINTAIN_BATCH);
	n = sbq_lease_take_expired(only_queue, now, items, SBQ_MAINTAIN_BATCH);
	if (n == 0)
		return 0;
	seqs = palloc(sizeof(int64) * n);
	counts = palloc(sizeof(int32) * n);

	for (q = 0; q < nqueues; q++)
		sbq_sweep_queue_leases(&queues[q], items, n, seqs, counts, released, dead_lettered);
	sbq_sweep_unknown_queues(queues, nqueues, items, n);
	return n;
}

/*
 * sbq_lease_sweep_queue
 *		Before a statement that skips messages under a lease (a row-lock
 *		receive, a resubmit): end the expired leases of the queue, so their
 *		messages are there for it. With sbqueue.memory_locks off only outside
 *		a transaction block (sbq_may_end_leases): inside one, that session's
 *		transaction stays free of lease changes (PREPARE TRANSACTION refuses
 *		those), and maintenance, or a call outside a block, ends them.
 */
void
sbq_lease_sweep_queue(const SbqQueue *queue, TimestampTz now)
{
	int64		released = 0;
	int64		dead = 0;

	if (sbq_may_end_leases())
		(void) sbq_lease_sweep(queue, 1, queue->queue_id, now, &released, &dead);
}

