/*-------------------------------------------------------------------------
 *
 * receive.c
 *	  Receives that lock in the message rows: peek-lock without shared
 *	  memory (or when this database's share of it is full, or with
 *	  sbqueue.memory_locks off), receive-and-delete, the receive of deferred
 *	  messages by sequence number; and peek.
 *
 * sbq_storage_receive is the entry point of every receive: it activates
 * scheduled messages that came due, then takes the leasing path
 * (lease_receive.c) for a peek-lock receive when it can, else the row-lock
 * statements here. Those take the head of the queue with FOR UPDATE SKIP
 * LOCKED; messages met there whose expired lock was their last allowed
 * delivery are dead-lettered and messages whose time to live has passed are
 * dead-lettered or dropped, and never handed out. A first statement hands out
 * what it may and only counts such messages; when it found some, a statement
 * that also dead-letters and drops takes them (and the receive goes on with
 * it; see RECEIVE_LEFT_ALONE for the one case it does not).
 *
 * Owns: nothing shared. Locks: row locks of its statements only.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/receive.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "lease.h"
#include "shmem.h"
#include "storage_core.h"
#include "wait.h"

/*
 * The head of the receive queue: up to $4 messages in sequence order that are
 * active and not under a valid lock, skipping rows another transaction holds.
 * Rows whose expired lock was their last allowed delivery (over) or whose time
 * to live has passed (expired) are taken too, and settled by the statement
 * instead of being handed out. The head starts after $10: a receive's next
 * pass reads on from where the last one stopped, not over the index entries
 * of the rows it settled itself (which no scan can skip before it commits).
 *	$1 queue_id, $2 subqueue, $3 now, $4 limit, $5 max_delivery_count,
 *	$6 new locked_until, $7 dead-letter on expiration, $8 queue name,
 *	$9 max delivery description, $10 after
 */
#define RECEIVE_HEAD_WHERE(extra) \
	"WITH c AS MATERIALIZED (" \
	"  SELECT m.sequence_number," \
	"         (m.subqueue = 0 AND m.locked_until IS NOT NULL" \
	"          AND m.delivery_count >= $5) AS over," \
	"         (m.subqueue = 0 AND m.expires_at IS NOT NULL" \
	"          AND m.expires_at <= $3) AS expired" \
	"    FROM " SUBQUEUE_TABLE " m" \
	"   WHERE m.queue_id = $1 AND m.subqueue = $2 AND m.state = 0" \
	"     AND m.sequence_number > $10" \
	"     AND (m.locked_until IS NULL OR m.locked_until <= $3)" \
	"     AND " LEASE_SLOT extra \
	"   ORDER BY m.queue_id, m.subqueue, m.state, m.sequence_number" \
	"   LIMIT $4" \
	"   FOR UPDATE OF m SKIP LOCKED), "
#define RECEIVE_HEAD RECEIVE_HEAD_WHERE("")
/*
 * The head past the rows RECEIVE_HEAD would take and not hand out: what a
 * transaction reads once it took SBQ_MAX_CLEARED messages off its queues.
 */
#define RECEIVE_NOT_LEFT \
	" AND NOT (m.subqueue = 0 AND ((m.locked_until IS NOT NULL AND m.delivery_count >= $5)" \
	"                             OR (m.expires_at IS NOT NULL AND m.expires_at <= $3)))"
/*
 * Then the rows taken that are not handed out: dead letters move to
 * sbq.dead_letters (d, di), messages expired and not dead-lettered go (x).
 */
#define RECEIVE_DROP_AND_COUNT \
	"x AS (" \
	"  DELETE FROM sbq.messages m USING c" \
	"   WHERE m.sequence_number = c.sequence_number" \
	"     AND m.sequence_number = ANY(ARRAY(SELECT sequence_number FROM c))" \
	"     AND c.expired AND NOT c.over AND NOT $7 AND " LEASE_SLOT \
	"  RETURNING 1) " \
	"SELECT l.*, s.n_over, s.n_expired_dead, s.n_dropped, s.last" \
	"  FROM (SELECT (SELECT count(*) FROM d WHERE d.over)::int4 AS n_over," \
	"               (SELECT count(*) FROM d WHERE NOT d.over)::int4 AS n_expired_dead," \
	"               (SELECT count(*) FROM x)::int4 AS n_dropped," \
	"               (SELECT max(sequence_number) FROM c) AS last) s" \
	"  LEFT JOIN l ON true" \
	" ORDER BY l.sequence_number"
#define RECEIVE_TAIL \
	", d AS (" \
	"  DELETE FROM sbq.messages m USING c" \
	"   WHERE m.sequence_number = c.sequence_number" \
	"     AND m.sequence_number = ANY(ARRAY(SELECT sequence_number FROM c))" \
	"     AND (c.over OR (c.expired AND $7)) AND " LEASE_SLOT \
	"  RETURNING m.*, c.over), " \
	"di AS (" DEAD_LETTER_INSERT("d", "d.delivery_count", \
		"CASE WHEN d.over THEN " SBQ_SQL_LITERAL(SBQ_DLQ_REASON_MAX_DELIVERY) \
		" ELSE " SBQ_SQL_LITERAL(SBQ_DLQ_REASON_EXPIRED) " END", \
		"CASE WHEN d.over THEN $9 ELSE " SBQ_SQL_LITERAL(SBQ_DLQ_DESCRIPTION_EXPIRED) " END", \
		"$8") "), " \
	RECEIVE_DROP_AND_COUNT

/* RECEIVE_TAIL for SQL before 0.4: dead letters stay in sbq.messages */
#define RECEIVE_TAIL_OLD \
	", d AS (" \
	"  UPDATE sbq.messages m" \
	"     SET subqueue = 1, state = 0, lock_token = NULL, locked_until = NULL," \
	"         dead_letter_reason = CASE WHEN c.over THEN " SBQ_SQL_LITERAL(SBQ_DLQ_REASON_MAX_DELIVERY) \
	"                                   ELSE " SBQ_SQL_LITERAL(SBQ_DLQ_REASON_EXPIRED) " END," \
	"         dead_letter_error_description = CASE WHEN c.over THEN $9" \
	"                 ELSE " SBQ_SQL_LITERAL(SBQ_DLQ_DESCRIPTION_EXPIRED) " END," \
	"         dead_letter_source = $8" \
	"    FROM c" \
	"   WHERE m.sequence_number = c.sequence_number" \
	"     AND m.sequence_number = ANY(ARRAY(SELECT sequence_number FROM c))" \
	"     AND (c.over OR (c.expired AND $7)) AND " LEASE_SLOT \
	"  RETURNING c.over), " \
	RECEIVE_DROP_AND_COUNT

#define RECEIVE_ARGS {INT4OID, INT2OID, TIMESTAMPTZOID, INT4OID, INT4OID, \
		TIMESTAMPTZOID, BOOLOID, TEXTOID, TEXTOID, INT8OID}


/* the rows handed out: locked in place, or deleted */
#define RECEIVE_LOCK_ROWS \
	"l AS (" \
	"  UPDATE " SUBQUEUE_TABLE " m" \
	"     SET lock_token = sbq.new_lock_token(m.sequence_number)," \
	"         locked_until = $6, delivery_count = m.delivery_count + 1" \
	"    FROM c" \
	"   WHERE m.sequence_number = c.sequence_number AND NOT c.over AND NOT c.expired" \
	"     AND m.sequence_number = ANY(ARRAY(SELECT sequence_number FROM c))" \
	"     AND " LEASE_SLOT \
	"  RETURNING " MSG_COLS("m.lock_token", "m.locked_until", "m.delivery_count") ")"
#define RECEIVE_DELETE_ROWS \
	"l AS (" \
	"  DELETE FROM " SUBQUEUE_TABLE " m USING c" \
	"   WHERE m.sequence_number = c.sequence_number AND NOT c.over AND NOT c.expired" \
	"     AND m.sequence_number = ANY(ARRAY(SELECT sequence_number FROM c))" \
	"     AND " LEASE_SLOT \
	"  RETURNING " MSG_COLS("NULL::uuid", "NULL::timestamptz", "m.delivery_count + 1") ")"

/*
 * The head taken, the rows handed out, and how many rows taken were left
 * alone (their last allowed delivery expired, or their time to live passed),
 * in the columns RECEIVE_DROP_AND_COUNT gives (n_over counts those rows, the
 * other two are 0; last is not read). Nearly every receive finds no such row, and this
 * statement then does all the work without the dead-letter and expiry
 * steps' tables and indexes (about a sixth of a single receive's time); one
 * that finds some runs the whole statement next, which takes them again
 * (this transaction holds their row locks; their rows are unchanged) unless
 * rows ahead of them, freed by another transaction meanwhile, fill what is
 * left of max_messages: then they stay, never handed out, for the next
 * receive or maintenance pass to move, as rows another transaction held
 * would.
 */
#define RECEIVE_LEFT_ALONE \
	"SELECT l.*, s.n_left AS n_over, 0 AS n_expired_dead, 0 AS n_dropped, NULL::int8 AS last" \
	"  FROM (SELECT (SELECT count(*) FROM c WHERE c.over OR c.expired)::int4 AS n_left) s" \
	"  LEFT JOIN l ON true" \
	" ORDER BY l.sequence_number"

static SbqStatement stmt_receive_lock_plain = {"receive, lock in rows, the head", 10, RECEIVE_ARGS,
	RECEIVE_HEAD RECEIVE_LOCK_ROWS " " RECEIVE_LEFT_ALONE
};

static SbqStatement stmt_receive_delete_plain = {"receive and delete, the head", 10, RECEIVE_ARGS,
	RECEIVE_HEAD RECEIVE_DELETE_ROWS " " RECEIVE_LEFT_ALONE
};

static SbqStatement stmt_receive_lock_past = {"receive, lock in rows, past what is left", 10,
	RECEIVE_ARGS, RECEIVE_HEAD_WHERE(RECEIVE_NOT_LEFT) RECEIVE_LOCK_ROWS " " RECEIVE_LEFT_ALONE
};

static SbqStatement stmt_receive_delete_past = {"receive and delete, past what is left", 10,
	RECEIVE_ARGS, RECEIVE_HEAD_WHERE(RECEIVE_NOT_LEFT) RECEIVE_DELETE_ROWS " " RECEIVE_LEFT_ALONE
};

static SbqStatement stmt_receive_lock = {"receive, lock in rows", 10, RECEIVE_ARGS,
	RECEIVE_HEAD RECEIVE_LOCK_ROWS RECEIVE_TAIL,
	.old_sql = RECEIVE_HEAD RECEIVE_LOCK_ROWS RECEIVE_TAIL_OLD
};

static SbqStatement stmt_receive_delete = {"receive and delete", 10, RECEIVE_ARGS,
	RECEIVE_HEAD RECEIVE_DELETE_ROWS RECEIVE_TAIL,
	.old_sql = RECEIVE_HEAD RECEIVE_DELETE_ROWS RECEIVE_TAIL_OLD
};

/*
 * one ordered index scan per state, merged: peek shows every state. Each
 * orders by the receive index's whole key: so it is planned through that
 * index (plan_key.c), not by walking the primary key from $3 on.
 */
#define PEEK_FROM \
	" FROM ((SELECT * FROM " SUBQUEUE_TABLE " WHERE queue_id = $1 AND subqueue = $2" \
	"         AND state = 0 AND sequence_number >= $3" \
	"         ORDER BY queue_id, subqueue, state, sequence_number LIMIT $5)" \
	"       UNION ALL" \
	"       (SELECT * FROM " SUBQUEUE_TABLE " WHERE queue_id = $1 AND subqueue = $2" \
	"         AND state = 1 AND sequence_number >= $3" \
	"         ORDER BY queue_id, subqueue, state, sequence_number LIMIT $5)" \
	"       UNION ALL" \
	"       (SELECT * FROM " SUBQUEUE_TABLE " WHERE queue_id = $1 AND subqueue = $2" \
	"         AND state = 2 AND sequence_number >= $3" \
	"         ORDER BY queue_id, subqueue, state, sequence_number LIMIT $5)) m" \
	" ORDER BY m.sequence_number LIMIT $5"

/*
 * Peek in a queue with sessions: a message locked in a session (locked_until
 * 'infinity', session.c) shows its session's lock while that is held.
 * $6 this server's start time
 */
static SbqStatement stmt_peek_session = {"peek with sessions", 6, {INT4OID, INT2OID, INT8OID,
		TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID},
	"SELECT " MSG_COLS("NULL::uuid",
					   "CASE WHEN m.locked_until = 'infinity' THEN"
					   " (SELECT s.locked_until FROM sbq.sessions s"
					   "   WHERE s.queue_id = m.queue_id AND s.session_id = m.session_id"
					   "     AND s.session_token IS NOT NULL AND s.locked_until > $4"
					   "     AND s.locked_boot = $6)"
					   " WHEN m.locked_until > $4 THEN m.locked_until END",
					   "m.delivery_count")
	PEEK_FROM
};

static SbqStatement stmt_peek = {"peek", 5, {INT4OID, INT2OID, INT8OID, TIMESTAMPTZOID,
		INT4OID},
	"SELECT " MSG_COLS("NULL::uuid",
					   "CASE WHEN m.locked_until > $4 THEN m.locked_until END",
					   "m.delivery_count")
	PEEK_FROM
};

static SbqStatement stmt_deferred_candidates = {"deferred candidates", 3, {INT8ARRAYOID,
		INT4OID, INT2OID},
	"SELECT m.sequence_number, m.state, m.locked_until, m.delivery_count, m.expires_at"
	"  FROM " SUBQUEUE_TABLE " m"
	" WHERE m.sequence_number = ANY($1) AND m.queue_id = $2 AND m.subqueue = $3"
	" FOR UPDATE SKIP LOCKED",
	.by_key = true
};

static SbqStatement stmt_lock_deferred = {"lock deferred", 2, {INT8ARRAYOID, TIMESTAMPTZOID},
	"WITH l AS ("
	"  UPDATE " SUBQUEUE_TABLE " m"
	"     SET lock_token = sbq.new_lock_token(m.sequence_number),"
	"         locked_until = $2, delivery_count = m.delivery_count + 1"
	"   WHERE m.sequence_number = ANY($1)"
	"  RETURNING " MSG_COLS("m.lock_token", "m.locked_until", "m.delivery_count") ")"
	" SELECT * FROM l ORDER BY l.sequence_number",
	.by_key = true
};

/* what this transaction's receives took off their queues (storage_core.h) */
static int64 sbq_cleared = 0;
static LocalTransactionId sbq_cleared_lxid = InvalidLocalTransactionId;

int64
sbq_cleared_in_xact(void)
{
	return sbq_cleared_lxid == SBQ_MY_LXID() ? sbq_cleared : 0;
}

void
sbq_cleared_add(int64 n)
{
	if (n == 0)
		return;
	if (sbq_cleared_lxid != SBQ_MY_LXID())
	{
		sbq_cleared = 0;
		sbq_cleared_lxid = SBQ_MY_LXID();
	}
	sbq_cleared += n;
}

/* Check that tupdesc is sbq_message's. */
void
sbq_check_message_desc(TupleDesc tupdesc)
{
	if (tupdesc->natts != SBQ_MESSAGE_NATTS)
		elog(ERROR, "sbq_message has %d columns, expected %d",
			 tupdesc->natts, SBQ_MESSAGE_NATTS);
}

/*
 * sbq_message_row
 *		The sbq_message columns (the first SBQ_MESSAGE_NATTS) of row row of an
 *		SPI result; false for a row whose sequence number is NULL (the row a
 *		receive returns when it handed out nothing).
 */
bool
sbq_message_row(SPITupleTable *tt, uint64 row, Datum *values, bool *nulls)
{
	int			col;

	for (col = 0; col < SBQ_MESSAGE_NATTS; col++)
		values[col] = SPI_getbinval(tt->vals[row], tt->tupdesc, col + 1, &nulls[col]);
	return !nulls[0];
}

/*
 * sbq_put_message_rows
 *		Copy the messages of the current SPI result into a tuplestore; with
 *		leases_of (for peek: the messages of that queue's subqueue), a
 *		message's lease (valid at now, or not) shows as its lock. Returns how
 *		many it put.
 */
int
sbq_put_message_rows(Tuplestorestate *tupstore, TupleDesc tupdesc, const SbqQueue *leases_of,
					 int16 subqueue, TimestampTz now)
{
	Datum		values[SBQ_MESSAGE_NATTS];
	bool		nulls[SBQ_MESSAGE_NATTS];
	uint64		row;
	int			put = 0;

	sbq_check_message_desc(tupdesc);
	for (row = 0; row < SPI_processed; row++)
	{
		TimestampTz until;
		int32		count;

		if (!sbq_message_row(SPI_tuptable, row, values, nulls))
			continue;
		/* a lease is the message's lock (it is not in the row) */
		if (leases_of != NULL &&
			sbq_lease_lookup(DatumGetInt64(values[0]), leases_of->queue_id, subqueue,
							 &until, &count))
		{
			values[3] = TimestampTzGetDatum(until);
			nulls[3] = until <= now;
			values[4] = Int32GetDatum(count);
			nulls[4] = false;
		}
		tuplestore_putvalues(tupstore, tupdesc, values, nulls);
		put++;
	}
	return put;
}

/* What one statement of sbq_receive_rows took and did not hand out. */
typedef struct SbqRowsPass
{
	int			over;			/* dead-lettered: its last delivery expired */
	int			expired_dead;	/* dead-lettered: its time to live passed */
	int			dropped;		/* dropped: its time to live passed */
	int			left;			/* all of those (or, for a plain statement, to do) */
	bool		has_last;
	int64		last;			/* the last row it took */
} SbqRowsPass;

/*
 * One statement of sbq_receive_rows: what it hands out goes into tupstore, or
 * as tuples into outs[] from *delivered on (which it moves on).
 */
static void
sbq_receive_rows_pass(SbqStatement *st, int16 subqueue, Datum *values,
					  Tuplestorestate *tupstore, TupleDesc tupdesc, SbqOutRow *outs,
					  int *delivered, SbqRowsPass *pass)
{
	bool		isnull;
	Datum		last;

	if (sbq_exec_in(st, subqueue, values, NULL) == 0)
		elog(ERROR, "receive returned no row");
	pass->over = DatumGetInt32(sbq_col(0, SBQ_MESSAGE_NATTS + 1, &isnull));
	pass->expired_dead = DatumGetInt32(sbq_col(0, SBQ_MESSAGE_NATTS + 2, &isnull));
	pass->dropped = DatumGetInt32(sbq_col(0, SBQ_MESSAGE_NATTS + 3, &isnull));
	pass->left = pass->over + pass->expired_dead + pass->dropped;
	last = sbq_col(0, SBQ_MESSAGE_NATTS + 4, &isnull);
	pass->has_last = !isnull;
	pass->last = isnull ? 0 : DatumGetInt64(last);
	if (outs == NULL)
		*delivered += sbq_put_message_rows(tupstore, tupdesc, NULL, 0, 0);
	else
	{
		uint64		row;
		Datum		out[SBQ_MESSAGE_NATTS];
		bool		nulls[SBQ_MESSAGE_NATTS];

		for (row = 0; row < SPI_processed; row++)
		{
			if (!sbq_message_row(SPI_tuptable, row, out, nulls))
				continue;
			outs[*delivered].seq = DatumGetInt64(out[0]);
			outs[(*delivered)++].tuple = heap_form_tuple(tupdesc, out, nulls);
		}
	}
	/* its rows are copied: gone now, not at the call's end (8 kB a pass) */
	SPI_freetuptable(SPI_tuptable);
}

/*
 * sbq_receive_rows
 *		The receive that locks in the message rows (peek-lock) or removes them
 *		(receive-and-delete): up to max_messages, added to *result, into
 *		tupstore, or formed as tuples of tupdesc into outs[] when outs is
 *		not NULL (the caller sorts and puts them).
 */
void
sbq_receive_rows(const SbqQueue *queue, int16 subqueue, int max_messages,
				 SbqReceiveMode mode, TimestampTz now, SbqReceiveResult *result,
				 Tuplestorestate *tupstore, TupleDesc tupdesc, SbqOutRow *outs)
{
	Datum		values[10];
	char		description[128];
	SbqStatement *st = mode == SBQ_PEEK_LOCK ? &stmt_receive_lock_plain : &stmt_receive_delete_plain;
	bool		plain = true;
	int			delivered = 0;
	TimestampTz first_now = 0;
	TimestampTz first_until = 0;

	sbq_max_delivery_description(queue, description, sizeof(description));
	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = Int16GetDatum(subqueue);
	values[4] = Int32GetDatum(queue->max_delivery_count);
	values[6] = BoolGetDatum(queue->dlq_on_expiration);
	values[7] = CStringGetTextDatum(queue->name);
	values[8] = CStringGetTextDatum(description);
	values[9] = Int64GetDatum(PG_INT64_MIN);

	while (delivered < max_messages)
	{
		SbqRowsPass pass;

		/*
		 * The locks of what it handed out first must not be at their end when
		 * it returns: stop at half of them. Each pass's locks start when it
		 * does.
		 */
		if (sbq_lock_half_gone(first_now, first_until, now))
			break;
		/* this transaction took enough off its queues: read past the rest */
		if (sbq_cleared_in_xact() >= SBQ_MAX_CLEARED)
			st = mode == SBQ_PEEK_LOCK ? &stmt_receive_lock_past : &stmt_receive_delete_past;
		values[2] = TimestampTzGetDatum(now);
		values[3] = Int32GetDatum(max_messages - delivered);
		values[5] = TimestampTzGetDatum(sbq_add_interval(now, &queue->lock_duration));
		sbq_receive_rows_pass(st, subqueue, values, tupstore, tupdesc, outs, &delivered, &pass);
		if (mode == SBQ_PEEK_LOCK && delivered > 0 && first_until == 0)
		{
			first_now = now;
			first_until = DatumGetTimestampTz(values[5]);
		}
		now = GetCurrentTimestamp();
		/* the head held nothing but what we handed out: nothing more to find */
		if (pass.left == 0)
			break;
		if (plain)
		{
			/* it left rows to dead-letter or drop: the whole statement from now on */
			st = mode == SBQ_PEEK_LOCK ? &stmt_receive_lock : &stmt_receive_delete;
			plain = false;
			continue;
		}
		result->dead_lettered += pass.over;
		result->expired_dead_lettered += pass.expired_dead;
		result->expired_dropped += pass.dropped;
		sbq_cleared_add(pass.left);

		/*
		 * Read on after what this pass took. Behind 10,000 expired messages a
		 * receive of one makes 10,000 passes, and each walked from the head
		 * over the index entries of every row the passes before it removed:
		 * 50 million of them (rows another transaction holds are passed over,
		 * as SKIP LOCKED passes them).
		 */
		if (pass.has_last)
			values[9] = Int64GetDatum(pass.last);
	}
	/* the locks it stored, if any: one that found nothing takes no transaction id */
	if (mode == SBQ_PEEK_LOCK && subqueue == SBQ_SUBQUEUE_MAIN && delivered > 0)
		sbq_qstate_row_lock(sbq_storage_epoch(), queue->queue_id);
	result->delivered += delivered;
}

/*
 * sbq_storage_receive
 *		One receive pass: hand out up to max_messages available messages in
 *		sequence order into tupstore, locking them (peek-lock) or removing them
 *		(receive-and-delete). Messages met on the way whose expired lock was
 *		their last allowed delivery are dead-lettered, and messages whose time
 *		to live has passed are dead-lettered or dropped as the queue says: they
 *		are never handed out, and the pass goes on past them.
 */
SbqReceiveResult
sbq_storage_receive(const SbqQueue *queue, int16 subqueue, int max_messages,
					SbqReceiveMode mode, Tuplestorestate *tupstore, TupleDesc tupdesc)
{
	SbqReceiveResult result = {0};
	SbqCounts	counts = {0};
	TimestampTz now = GetCurrentTimestamp();

	if (subqueue == SBQ_SUBQUEUE_MAIN)
		(void) sbq_activate_due(queue, now, SBQ_MAINTAIN_BATCH, false);

	if (mode == SBQ_PEEK_LOCK && sbq_leasing())
	{
		sbq_require_lock_privilege(subqueue);
		return sbq_receive_leased(queue, subqueue, max_messages, now, tupstore, tupdesc);
	}

	/*
	 * The statements below skip messages under a lease, expired ones too:
	 * end the expired leases of this queue first, so their messages are
	 * receivable here. With sbqueue.memory_locks off, not inside a
	 * transaction block: that transaction stays free of lease changes
	 * (PREPARE TRANSACTION refuses those), and maintenance ends them.
	 */
	sbq_lease_sweep_queue(queue, now);

	sbq_receive_rows(queue, subqueue, max_messages, mode, now, &result, tupstore, tupdesc,
					 NULL);

	counts.received = result.delivered;
	counts.completed = mode == SBQ_RECEIVE_AND_DELETE ? result.delivered : 0;
	counts.dead_lettered = result.dead_lettered + result.expired_dead_lettered;
	counts.expired = result.expired_dead_lettered + result.expired_dropped;
	if (counts.received + counts.dead_lettered + counts.expired > 0)
		sbq_add_counts(queue->queue_id, &counts);
	if (counts.dead_lettered > 0)
		sbq_wait_wake_at_commit(queue->queue_id);	/* the dead-letter sub-queue got some */
	return result;
}

/*
 * sbq_storage_peek
 *		Up to max_messages messages from from_seq on, in sequence order and in
 *		any state, without locking or counting them. Locks are judged at the
 *		start of the statement, as sbq_queue_stats judges them: a statement
 *		that peeks and reads the stats sees one instant.
 */
int
sbq_storage_peek(const SbqQueue *queue, int16 subqueue, int max_messages,
				 int64 from_seq, Tuplestorestate *tupstore, TupleDesc tupdesc)
{
	Datum		values[6];
	TimestampTz now = GetCurrentStatementStartTimestamp();

	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = Int16GetDatum(subqueue);
	values[2] = Int64GetDatum(from_seq);
	values[3] = TimestampTzGetDatum(now);
	values[4] = Int32GetDatum(max_messages);
	values[5] = TimestampTzGetDatum(sbq_shmem_boot());
	if (queue->requires_session && subqueue == SBQ_SUBQUEUE_MAIN)
		(void) sbq_exec(&stmt_peek_session, values, NULL);
	else
		(void) sbq_exec_in(&stmt_peek, subqueue, values, NULL);
	return sbq_put_message_rows(tupstore, tupdesc, sbq_lease_available() ? queue : NULL,
								subqueue, now);
}

/*
 * sbq_storage_receive_deferred
 *		Lock and return the deferred messages with the given (distinct)
 *		sequence numbers, all or none: the first number that is not a deferred
 *		message of this queue free to lock is returned in *missing (and false),
 *		with nothing locked. A message is not free when another transaction
 *		holds its row, when a valid lock holds it, when its time to live has
 *		passed, or when its expired lock was its last allowed delivery: those
 *		are not receivable, and maintenance moves the last two on.
 */
bool
sbq_storage_receive_deferred(const SbqQueue *queue, int16 subqueue, Datum *seqs, int nseqs,
							 Tuplestorestate *tupstore, TupleDesc tupdesc, int64 *missing)
{
	Datum		values[3];
	TimestampTz now = GetCurrentTimestamp();
	bool	   *ok = palloc0(sizeof(bool) * nseqs);
	ArrayType  *arr = construct_array(seqs, nseqs, INT8OID, sizeof(int64),
									  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE);
	uint64		n;
	uint64		row;
	int			i;
	SbqCounts	counts = {0};

	values[0] = PointerGetDatum(arr);
	values[1] = Int32GetDatum(queue->queue_id);
	values[2] = Int16GetDatum(subqueue);
	n = sbq_exec_in(&stmt_deferred_candidates, subqueue, values, NULL);
	for (row = 0; row < n; row++)
	{
		bool		isnull;
		int64		seq = DatumGetInt64(sbq_col(row, 1, &isnull));
		int16		state = DatumGetInt16(sbq_col(row, 2, &isnull));
		Datum		locked_until = sbq_col(row, 3, &isnull);
		bool		has_lock = !isnull;
		int32		delivery_count = DatumGetInt32(sbq_col(row, 4, &isnull));
		Datum		expires_at = sbq_col(row, 5, &isnull);
		bool		free = state == SBQ_STATE_DEFERRED;

		CHECK_FOR_INTERRUPTS();

		if (has_lock && DatumGetTimestampTz(locked_until) > now)
			free = false;
		if (subqueue == SBQ_SUBQUEUE_MAIN)
		{
			if (!isnull && DatumGetTimestampTz(expires_at) <= now)
				free = false;
			if (has_lock && delivery_count >= queue->max_delivery_count)
				free = false;
		}
		for (i = 0; i < nseqs; i++)
			if (DatumGetInt64(seqs[i]) == seq)
				ok[i] = free;
	}
	for (i = 0; i < nseqs; i++)
	{
		if (!ok[i])
		{
			*missing = DatumGetInt64(seqs[i]);
			return false;
		}
	}

	values[1] = TimestampTzGetDatum(sbq_add_interval(now, &queue->lock_duration));
	(void) sbq_exec_in(&stmt_lock_deferred, subqueue, values, NULL);
	if (subqueue == SBQ_SUBQUEUE_MAIN)
		sbq_qstate_row_lock(sbq_storage_epoch(), queue->queue_id);
	counts.received = sbq_put_message_rows(tupstore, tupdesc, NULL, 0, 0);
	if (counts.received != nseqs)
		elog(ERROR, "locked %d of %d deferred messages", (int) counts.received, nseqs);
	sbq_add_counts(queue->queue_id, &counts);
	return true;
}

