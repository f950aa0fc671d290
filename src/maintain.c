/*-------------------------------------------------------------------------
 *
 * maintain.c
 *	  One maintenance pass over a database (sbq_maintain(), which the
 *	  maintenance worker runs every sbqueue.maintenance_interval).
 *
 * A pass stores the counts gathered in shared memory, ends expired leases
 * (lease_receive.c), and then for each queue: checks its head hint
 * (qstate.c), activates scheduled messages that came due (send.c),
 * dead-letters messages whose expired lock was their last allowed delivery
 * and releases the other expired locks stored in rows, expires messages
 * whose time to live has passed, forgets duplicate-detection history
 * older than the window, removes dead letters kept longer than the
 * queue's dead_letter_ttl (oldest first), and forwards the dead letters of
 * one with forward_dead_lettered_messages_to (forward.c). Each step is bounded by SBQ_MAINTAIN_BATCH rows a
 * queue; "more" in the result says a step hit its bound. Last, it frees the
 * shared entries of queues and topics that were deleted (qstate.c).
 *
 * Every step takes its rows with SKIP LOCKED, so a pass never waits for
 * receivers, settlers or another pass: passes running at the same time share
 * the work. (A pass-wide lock would let one caller holding a transaction open
 * stop maintenance for the whole database.) Nor does it wait for the name
 * lock of an entity (forward.c, storage_core.c). On a standby, and while a
 * restore loads the tables, nothing happens and "skipped" is true.
 *
 * Owns: nothing shared. Locks: row locks of its statements, and names taken
 * only when free.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/maintain.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "common/int.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "distributed.h"
#include "session_mem.h"
#include "storage_core.h"
#include "topics.h"
#include "wait.h"

/* How far into a queue's head maintenance looks for expired locks. */
#define SBQ_MAINTAIN_HEAD		5000

/*
 * Whether a restore is loading this database's sbqueue tables: a COPY into
 * one of them runs here, or sbq.message_seq is behind the numbers the tables
 * hold: its next value is one they have (pg_dump restores a sequence's
 * value after the tables' data; until then it was never called, and only
 * then are the tables read). The
 * worker starts as soon as a restore runs CREATE EXTENSION; a pass in between
 * numbered the scheduled messages it activated from the fresh sequence, under
 * numbers restored rows had (one that collided with a dead letter's stopped
 * every pass and every receive of its queue for good), and forgot the ties
 * of scheduled topic messages whose copies were not loaded yet. With the
 * tables distributed a node's sequence trails the shards moved in until a
 * call raises it (dist_storage.c): there only a COPY counts.
 *	$1 this database, $2 whether to compare the sequence
 */
#if PG_VERSION_NUM >= 140000
#define SBQ_COPY_RUNNING \
	"EXISTS (SELECT FROM pg_catalog.pg_stat_progress_copy p" \
	"          JOIN pg_catalog.pg_class c ON c.oid = p.relid" \
	"         WHERE p.datid = $1 AND p.command = 'COPY FROM'" \
	"           AND c.relnamespace = 'sbq'::pg_catalog.regnamespace)"
#else
#define SBQ_COPY_RUNNING "false"
#endif
#define SBQ_SEQ_BEHIND(tables) \
	"($2 AND (SELECT CASE WHEN s.is_called THEN false" \
	"                     ELSE GREATEST(" tables ") >= s.last_value END" \
	"           FROM sbq.message_seq s))"
static SbqStatement stmt_restoring_topics = {"a restore loading, with topics", 2,
	{OIDOID, BOOLOID},
	"SELECT coalesce(" SBQ_COPY_RUNNING " OR " SBQ_SEQ_BEHIND(
		"(SELECT pg_catalog.max(sequence_number) FROM sbq.messages),"
		" (SELECT pg_catalog.max(sequence_number) FROM sbq.dead_letters),"
		" (SELECT pg_catalog.max(topic_sequence_number) FROM sbq.topic_scheduled)") ", false)"
};
static SbqStatement stmt_restoring = {"a restore loading", 2, {OIDOID, BOOLOID},
	"SELECT coalesce(" SBQ_COPY_RUNNING " OR " SBQ_SEQ_BEHIND(
		"(SELECT pg_catalog.max(sequence_number) FROM sbq.messages),"
		" (SELECT pg_catalog.max(sequence_number) FROM sbq.dead_letters)") ", false)",
	.old_sql = "SELECT coalesce(" SBQ_COPY_RUNNING " OR " SBQ_SEQ_BEHIND(
		"(SELECT pg_catalog.max(sequence_number) FROM sbq.messages)") ", false)"
};

/* maintenance's check of a head hint: an active message below it ($2) */
static SbqStatement stmt_below_head = {"below the head hint", 2, {INT4OID, INT8OID},
	"SELECT m.sequence_number FROM sbq.messages m"
	" WHERE m.queue_id = $1 AND m.subqueue = 0 AND m.state = 0"
	"   AND m.sequence_number < $2"
	" ORDER BY m.queue_id, m.subqueue, m.state, m.sequence_number"
	" LIMIT 1"
};

/*
 * The queues a pass has work in: those with messages, those with a duplicate
 * window and history, those with a dead_letter_ttl and dead letters, those
 * that forward their dead letters and have some. One
 * index probe each, in one statement, so that a pass over many idle queues
 * costs a statement, not several for each queue. The probe for messages
 * reads the receive index from, for the queues $1, their floors $2
 * (sbq_qstate_maintain_floor: no active message that a path announcing its
 * sends stored is below it, qstate.c) on, through
 * every state after that. It was an EXISTS planned as a scan of the table
 * from its first page: under a transaction held open elsewhere, it read every
 * completed message that transaction still kept, in every pass (a fifth of
 * the CPU of a cycle of single messages 100,000 deep).
 */
#define QUEUE_WORK(dead_letters, forward) \
	"SELECT w.queue_id, w.m, w.d, w.l, w.f FROM (" \
	" SELECT q.queue_id," \
	"  (SELECT 1 FROM sbq.messages m WHERE m.queue_id = q.queue_id" \
	"     AND (m.subqueue, m.state, m.sequence_number) >= (0, 0, coalesce(h.floor, 0))" \
	"   ORDER BY m.queue_id, m.subqueue, m.state, m.sequence_number LIMIT 1)" \
	"   IS NOT NULL AS m," \
	"  q.duplicate_detection_window IS NOT NULL" \
	"   AND EXISTS (SELECT 1 FROM sbq.duplicate_ids d WHERE d.queue_id = q.queue_id) AS d," \
	"  " dead_letters " AS l, " forward " AS f" \
	" FROM sbq.queues q" \
	" LEFT JOIN unnest($1::int4[], $2::int8[]) h(queue_id, floor)" \
	"   ON h.queue_id = q.queue_id) w" \
	" WHERE w.m OR w.d OR w.l OR w.f ORDER BY w.queue_id"
#define HAS_DEAD_LETTERS " EXISTS (SELECT 1 FROM sbq.dead_letters l WHERE l.queue_id = q.queue_id)"

static SbqStatement stmt_queue_work = {"queues with work", 2, {INT4ARRAYOID, INT8ARRAYOID},
	QUEUE_WORK("q.dead_letter_ttl IS NOT NULL AND" HAS_DEAD_LETTERS,
			   "q.forward_dead_lettered_messages_to IS NOT NULL AND" HAS_DEAD_LETTERS),
	/* SQL before 0.4 has no dead_letter_ttl, and forwards no dead letters */
	.old_sql = QUEUE_WORK("false", "false")
};

/*
 * Expired locks among the first $4 active messages from the queue's floor $8
 * (sbq_qstate_maintain_floor) and the first $4 deferred ones (receives take
 * from the head, so that is where locks are): dead-letter those on their last
 * allowed delivery, release the others. Each row of the head is fetched once,
 * with its lock; only those whose lock has expired are fetched again, by key,
 * to be locked. Besides the two counts, the statement says how many active
 * and deferred rows the head held, and how many of them store a lock (not a
 * session's, 'infinity', which sessions end): when the head held every row
 * and none stores a lock, maintenance need not look again until a lock is
 * written into a row (sbq_qstate_row_lock). The head is read in the
 * receive index's order (plan_key.c).
 * $1 queue, $2 now, $3 max_delivery_count, $4 head, $5 limit,
 * $6 queue name, $7 max delivery description, $8 floor
 */
#define MAINTAIN_LOCKS_HEAD \
	"WITH head AS MATERIALIZED (" \
	"  (SELECT sequence_number, state, locked_until FROM sbq.messages" \
	"    WHERE queue_id = $1 AND subqueue = 0 AND state = 0 AND sequence_number >= $8" \
	"    ORDER BY queue_id, subqueue, state, sequence_number LIMIT $4)" \
	"  UNION ALL" \
	"  (SELECT sequence_number, state, locked_until FROM sbq.messages" \
	"    WHERE queue_id = $1 AND subqueue = 0 AND state = 1" \
	"    ORDER BY queue_id, subqueue, state, sequence_number LIMIT $4))," \
	" c AS MATERIALIZED (" \
	"  SELECT m.sequence_number, m.delivery_count >= $3 AS over" \
	"    FROM head h JOIN sbq.messages m ON m.sequence_number = h.sequence_number" \
	"   WHERE h.locked_until <= $2 AND m.locked_until <= $2 AND " LEASE_SLOT \
	"   LIMIT $5 FOR UPDATE OF m SKIP LOCKED),"
#define MAINTAIN_LOCKS_RELEASE \
	" r AS (" \
	"  UPDATE sbq.messages m SET lock_token = NULL, locked_until = NULL" \
	"    FROM c WHERE m.sequence_number = c.sequence_number AND NOT c.over" \
	"     AND " LEASE_SLOT \
	"  RETURNING 1)" \
	" SELECT (SELECT count(*) FROM d)::int4, (SELECT count(*) FROM r)::int4," \
	"        h.active, h.deferred, h.stored" \
	"   FROM (SELECT count(*) FILTER (WHERE state = 0)::int4 AS active," \
	"                count(*) FILTER (WHERE state = 1)::int4 AS deferred," \
	"                count(*) FILTER (WHERE locked_until < 'infinity')::int4 AS stored" \
	"           FROM head) h"

static SbqStatement stmt_maintain_locks = {"expire locks", 8, {INT4OID, TIMESTAMPTZOID,
		INT4OID, INT4OID, INT4OID, TEXTOID, TEXTOID, INT8OID},
	MAINTAIN_LOCKS_HEAD
	" d AS ("
	"  DELETE FROM sbq.messages m USING c"
	"   WHERE m.sequence_number = c.sequence_number AND c.over AND " LEASE_SLOT
	"  RETURNING m.*),"
	" i AS (" DEAD_LETTER_INSERT("d", "d.delivery_count",
								 SBQ_SQL_LITERAL(SBQ_DLQ_REASON_MAX_DELIVERY), "$7", "$6") "),"
	MAINTAIN_LOCKS_RELEASE,
	.old_sql =
	MAINTAIN_LOCKS_HEAD
	" d AS ("
	"  UPDATE sbq.messages m"
	"     SET subqueue = 1, state = 0, lock_token = NULL, locked_until = NULL,"
	"         dead_letter_reason = " SBQ_SQL_LITERAL(SBQ_DLQ_REASON_MAX_DELIVERY) ","
	"         dead_letter_error_description = $7, dead_letter_source = $6"
	"    FROM c WHERE m.sequence_number = c.sequence_number AND c.over"
	"     AND " LEASE_SLOT
	"  RETURNING 1),"
	MAINTAIN_LOCKS_RELEASE
};

/*
 * Messages whose time to live has passed and that no valid lock holds:
 * dead-lettered or dropped, as the queue says.
 * $1 queue, $2 now, $3 limit, $4 dead-letter on expiration, $5 name
 */
#define MAINTAIN_TTL_HEAD \
	"WITH c AS MATERIALIZED (" \
	"  SELECT m.sequence_number FROM sbq.messages m" \
	"   WHERE m.queue_id = $1 AND m.subqueue = 0 AND m.expires_at IS NOT NULL" \
	"     AND m.expires_at <= $2 AND m.state <> 2" \
	"     AND (m.locked_until IS NULL OR m.locked_until <= $2) AND " LEASE_SLOT \
	"   ORDER BY m.expires_at LIMIT $3 FOR UPDATE OF m SKIP LOCKED),"
#define MAINTAIN_TTL_DROP \
	" x AS (" \
	"  DELETE FROM sbq.messages m USING c" \
	"   WHERE m.sequence_number = c.sequence_number AND NOT $4" \
	"     AND " LEASE_SLOT \
	"  RETURNING 1)" \
	" SELECT (SELECT count(*) FROM d)::int4, (SELECT count(*) FROM x)::int4"

static SbqStatement stmt_maintain_ttl = {"expire messages", 5, {INT4OID, TIMESTAMPTZOID,
		INT4OID, BOOLOID, TEXTOID},
	MAINTAIN_TTL_HEAD
	" d AS ("
	"  DELETE FROM sbq.messages m USING c"
	"   WHERE m.sequence_number = c.sequence_number AND $4 AND " LEASE_SLOT
	"  RETURNING m.*),"
	" i AS (" DEAD_LETTER_INSERT("d", "d.delivery_count",
								 SBQ_SQL_LITERAL(SBQ_DLQ_REASON_EXPIRED),
								 SBQ_SQL_LITERAL(SBQ_DLQ_DESCRIPTION_EXPIRED), "$5") "),"
	MAINTAIN_TTL_DROP,
	.old_sql =
	MAINTAIN_TTL_HEAD
	" d AS ("
	"  UPDATE sbq.messages m"
	"     SET subqueue = 1, state = 0, lock_token = NULL, locked_until = NULL,"
	"         dead_letter_reason = " SBQ_SQL_LITERAL(SBQ_DLQ_REASON_EXPIRED) ","
	"         dead_letter_error_description = "
	SBQ_SQL_LITERAL(SBQ_DLQ_DESCRIPTION_EXPIRED) ","
	"         dead_letter_source = $5"
	"    FROM c WHERE m.sequence_number = c.sequence_number AND $4"
	"     AND " LEASE_SLOT
	"  RETURNING 1),"
	MAINTAIN_TTL_DROP
};

static SbqStatement stmt_forget_duplicates = {"forget duplicates", 3, {INT4OID,
		TIMESTAMPTZOID, INT4OID},
	"WITH c AS ("
	"  SELECT d.message_id FROM sbq.duplicate_ids d"
	"   WHERE d.queue_id = $1 AND d.sent_at <= $2"
	"   ORDER BY d.sent_at LIMIT $3 FOR UPDATE SKIP LOCKED)"
	" DELETE FROM sbq.duplicate_ids d USING c"
	"  WHERE d.queue_id = $1 AND d.message_id = c.message_id"
};

/*
 * Dead letters kept longer than their queue's dead_letter_ttl, oldest first,
 * but not one a valid lock holds.
 * $1 queue, $2 the cutoff (dead-lettered at or before it), $3 now, $4 limit
 */
static SbqStatement stmt_remove_dead_letters = {"remove old dead letters", 4, {INT4OID,
		TIMESTAMPTZOID, TIMESTAMPTZOID, INT4OID},
	"WITH c AS MATERIALIZED ("
	"  SELECT m.sequence_number FROM sbq.dead_letters m"
	"   WHERE m.queue_id = $1 AND m.dead_lettered_at <= $2"
	"     AND (m.locked_until IS NULL OR m.locked_until <= $3) AND " LEASE_SLOT
	"   ORDER BY m.queue_id, m.dead_lettered_at LIMIT $4 FOR UPDATE OF m SKIP LOCKED)"
	" DELETE FROM sbq.dead_letters m USING c"
	"  WHERE m.sequence_number = c.sequence_number"
	"    AND m.sequence_number = ANY(ARRAY(SELECT sequence_number FROM c))"
	"    AND " LEASE_SLOT
};


/* What a pass has to do in a queue (stmt_queue_work). */
typedef struct SbqQueueWork
{
	int32		queue_id;
	bool		messages;		/* it has messages */
	bool		duplicates;		/* duplicate-detection history to look at */
	bool		dead_letters;	/* dead letters to look at for retention */
	bool		forward;		/* dead letters to forward */
} SbqQueueWork;

/*
 * Lower a queue's head hint to an active message below it, if any (qstate.c),
 * when the queue has messages.
 */
static void
sbq_check_head_hint(const SbqQueue *queue, TimestampTz now, int64 prepares,
					bool messages)
{
	Datum		values[2];
	bool		isnull;
	int64		hint;

	if (!sbq_qstate_refresh(sbq_storage_epoch(), queue->queue_id, now, prepares, &hint) ||
		!messages)
		return;
	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = Int64GetDatum(hint);
	if (sbq_exec(&stmt_below_head, values, NULL) > 0)
		sbq_qstate_lower(sbq_storage_epoch(), queue->queue_id,
						 DatumGetInt64(sbq_col(0, 1, &isnull)));
}

/* Run a step whose one result row holds two counts. */
static void
sbq_exec_counts(SbqStatement *st, Datum *values, int *first, int *second)
{
	bool		isnull;

	(void) sbq_exec(st, values, NULL);
	*first = DatumGetInt32(sbq_col(0, 1, &isnull));
	*second = DatumGetInt32(sbq_col(0, 2, &isnull));
}

/*
 * End the expired locks stored in a queue's rows; returns how many it
 * released. Not at all while a look found none and nothing stored one since
 * (qstate.c), but once a minute.
 */
static int
sbq_expire_row_locks(const SbqQueue *queue, TimestampTz now, int64 floor,
					 SbqMaintainResult *res, SbqCounts *counts)
{
	Datum		values[8];
	char		description[128];
	bool		isnull;
	TransactionId xmin;
	uint64		gen;
	int			d;
	int			r;

	if (!sbq_qstate_row_locks_look(sbq_storage_epoch(), queue->queue_id, now, &gen))
		return 0;
	/* the statement's snapshot is this one, or a later one */
	xmin = GetTransactionSnapshot()->xmin;
	sbq_max_delivery_description(queue, description, sizeof(description));
	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = TimestampTzGetDatum(now);
	values[2] = Int32GetDatum(queue->max_delivery_count);
	values[3] = Int32GetDatum(SBQ_MAINTAIN_HEAD);
	values[4] = Int32GetDatum(SBQ_MAINTAIN_BATCH);
	values[5] = CStringGetTextDatum(queue->name);
	values[6] = CStringGetTextDatum(description);
	values[7] = Int64GetDatum(floor);
	sbq_exec_counts(&stmt_maintain_locks, values, &d, &r);

	/*
	 * None when the head was the whole main queue but its scheduled
	 * messages (which no lock is stored in) and what is below the floor
	 * (where no message that may become receivable is), and none of it
	 * stores a lock.
	 */
	sbq_qstate_no_row_locks(sbq_storage_epoch(), queue->queue_id,
							DatumGetInt32(sbq_col(0, 3, &isnull)) < SBQ_MAINTAIN_HEAD &&
							DatumGetInt32(sbq_col(0, 4, &isnull)) < SBQ_MAINTAIN_HEAD &&
							DatumGetInt32(sbq_col(0, 5, &isnull)) == 0, xmin, gen, floor);
	res->dead_lettered += d;
	res->released += r;
	counts->dead_lettered += d;
	res->more |= d + r >= SBQ_MAINTAIN_BATCH;
	return r;
}

/* Dead-letter or drop a queue's messages whose time to live has passed. */
static void
sbq_expire_messages(const SbqQueue *queue, TimestampTz now, SbqMaintainResult *res,
					SbqCounts *counts)
{
	Datum		values[5];
	int			d;
	int			n;

	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = TimestampTzGetDatum(now);
	values[2] = Int32GetDatum(SBQ_MAINTAIN_BATCH);
	values[3] = BoolGetDatum(queue->dlq_on_expiration);
	values[4] = CStringGetTextDatum(queue->name);
	sbq_exec_counts(&stmt_maintain_ttl, values, &d, &n);
	res->expired_dead += d;
	res->expired_dropped += n;
	counts->dead_lettered += d;
	counts->expired += d + n;
	res->more |= d + n >= SBQ_MAINTAIN_BATCH;
}

/* Forget a queue's duplicate-detection history older than its window. */
static void
sbq_forget_duplicates(const SbqQueue *queue, TimestampTz now, SbqMaintainResult *res)
{
	Datum		values[3];
	int			n;

	if (!queue->has_dup_window)
		return;
	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = TimestampTzGetDatum(now - sbq_interval_usecs(&queue->dup_window));
	values[2] = Int32GetDatum(SBQ_MAINTAIN_BATCH);
	n = (int) sbq_exec(&stmt_forget_duplicates, values, NULL);
	res->forgotten += n;
	res->more |= n >= SBQ_MAINTAIN_BATCH;
}

/* the topics with a duplicate detection window (0.10 on) */
static SbqStatement stmt_topics_with_window = {"topics with a window", 0, {InvalidOid},
	"SELECT topic_id, duplicate_detection_window FROM sbq.topics"
	" WHERE duplicate_detection_window IS NOT NULL ORDER BY topic_id"
};

/*
 * The ties of scheduled topic messages to copies no longer scheduled: the
 * copy became due (and got a new number), or went. Each copy is looked up by
 * its number (by_key: a plan made while no message was scheduled read the
 * whole scheduled index for each tie).
 */
#define FORGET_TOPIC_SCHEDULED(extra) \
	"WITH c AS (" \
	"  SELECT t.topic_sequence_number, t.sequence_number FROM sbq.topic_scheduled t" \
	"   WHERE NOT EXISTS (SELECT FROM sbq.messages m" \
	"                      WHERE m.sequence_number = t.sequence_number AND m.state = 2)" \
	extra \
	"   LIMIT $1 FOR UPDATE SKIP LOCKED)" \
	" DELETE FROM sbq.topic_scheduled t USING c" \
	"  WHERE t.topic_sequence_number = c.topic_sequence_number" \
	"    AND t.sequence_number = c.sequence_number"
static SbqStatement stmt_forget_topic_scheduled_dist = {"forget topic schedules, distributed",
	1, {INT4OID}, FORGET_TOPIC_SCHEDULED(""), .by_key = true
};

/*
 * On one server, none while sbq.messages has no row a snapshot sees: a
 * parallel restore can load the ties before the messages (or commit the
 * messages' COPY after its progress row went), and a pass in between forgot
 * every tie. Ties of copies that went stay until a message exists again. The
 * look at sbq.messages is made only when there is a tie (it names t). Nor a
 * tie whose copy went to another topic (a subscription forwarding there): its
 * number is that topic's, tied in turn to that topic's copies, and it stays
 * while they do.
 */
static SbqStatement stmt_forget_topic_scheduled = {"forget topic schedules", 1, {INT4OID},
	FORGET_TOPIC_SCHEDULED("     AND NOT EXISTS (SELECT FROM sbq.topic_scheduled o"
						   "                      WHERE o.topic_sequence_number = t.sequence_number)"
						   "     AND (t.topic_id IS NULL OR EXISTS (SELECT FROM sbq.messages))"),
	.by_key = true
};

/*
 * sbq_maintain_topics
 *		What topics leave behind: duplicate-detection history older than a
 *		topic's window, and ties of scheduled messages to copies that are no
 *		longer scheduled.
 */
static void
sbq_maintain_topics(TimestampTz now, SbqMaintainResult *res)
{
	uint64		n;
	uint64		i;
	SbqQueue   *topics;
	Datum		limit = Int32GetDatum(SBQ_MAINTAIN_BATCH);

	if (!sbq_topics_installed())
		return;
	n = sbq_exec(&stmt_topics_with_window, NULL, NULL);
	topics = palloc0(sizeof(SbqQueue) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		bool		isnull;

		topics[i].queue_id = DatumGetInt32(sbq_col(i, 1, &isnull));
		topics[i].has_dup_window = true;
		topics[i].dup_window = *DatumGetIntervalP(sbq_col(i, 2, &isnull));
	}
	for (i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		sbq_forget_duplicates(&topics[i], now, res);
	}
	res->more |= sbq_exec(sbq_dist_active() ? &stmt_forget_topic_scheduled_dist :
						  &stmt_forget_topic_scheduled, &limit, NULL) >= SBQ_MAINTAIN_BATCH;
}

/* Remove a queue's dead letters kept longer than its dead_letter_ttl. */
static void
sbq_remove_old_dead_letters(const SbqQueue *queue, TimestampTz now, SbqMaintainResult *res)
{
	Datum		values[4];
	int64		cutoff;
	int			n;

	/* SQL before 0.4 has no dead_letter_ttl, and no table to remove from */
	if (!queue->has_dead_letter_ttl || !sbq_dead_letter_table() ||
		pg_sub_s64_overflow(now, sbq_interval_usecs(&queue->dead_letter_ttl), &cutoff))
		return;
	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = TimestampTzGetDatum(cutoff);
	values[2] = TimestampTzGetDatum(now);
	values[3] = Int32GetDatum(SBQ_MAINTAIN_BATCH);
	n = (int) sbq_exec(&stmt_remove_dead_letters, values, NULL);
	res->dead_letters_removed += n;
	res->more |= n >= SBQ_MAINTAIN_BATCH;
}

/* The steps of a pass for one queue, those it has work for. */
static void
sbq_maintain_queue(const SbqQueue *queue, const SbqQueueWork *work, TimestampTz now,
				   int64 floor, int64 prepares, SbqMaintainResult *res)
{
	SbqCounts	counts = {0};
	int			n;
	int			released = 0;

	sbq_check_head_hint(queue, now, prepares, work->messages);
	if (work->messages)
	{
		n = sbq_activate_due(queue, now, SBQ_MAINTAIN_BATCH, true);
		res->activated += n;
		res->more |= n >= SBQ_MAINTAIN_BATCH;
		released = sbq_expire_row_locks(queue, now, floor, res, &counts);
		if (queue->requires_session)
		{
			n = sbq_session_expire_all(queue, now, SBQ_MAINTAIN_BATCH, &res->dead_lettered);
			res->sessions_expired += n;
			res->more |= n >= SBQ_MAINTAIN_BATCH;
		}
		sbq_expire_messages(queue, now, res, &counts);
	}
	if (work->duplicates)
		sbq_forget_duplicates(queue, now, res);
	if (work->dead_letters)
		sbq_remove_old_dead_letters(queue, now, res);
	/* last: what this pass dead-lettered goes too */
	if (work->forward || counts.dead_lettered + counts.expired > 0)
		res->more |= sbq_forward_dead_letters(queue, now, &res->dead_letters_forwarded,
											  &res->dead_letters_kept);

	if (counts.dead_lettered + counts.expired > 0)
		sbq_add_counts(queue->queue_id, &counts);
	if (released + counts.dead_lettered > 0)
		sbq_wait_wake_at_commit(queue->queue_id);
}

/*
 * sbq_queue_work
 *		What a pass has to do in each queue that has anything (stmt_queue_work),
 *		in queue id order, into *work (in the caller's memory context); the
 *		look for messages starts at floors[i] for queues[i].
 */
static int
sbq_queue_work(SbqQueueWork **work, const SbqQueue *queues, const int64 *floors,
			   int nqueues)
{
	int32	   *ids = palloc(sizeof(int32) * Max(nqueues, 1));
	int64	   *from = palloc(sizeof(int64) * Max(nqueues, 1));
	int			nfloors = 0;
	Datum		values[2];
	uint64		n;
	uint64		i;
	bool		isnull;

	for (i = 0; i < (uint64) nqueues; i++)
		if (floors[i] > 0)
		{
			ids[nfloors] = queues[i].queue_id;
			from[nfloors++] = floors[i];
		}
	values[0] = sbq_int4_array(ids, nfloors);
	values[1] = sbq_int8_array(from, nfloors);
	n = sbq_exec(&stmt_queue_work, values, NULL);

	*work = MemoryContextAlloc(sbq_storage_caller_context(), sizeof(SbqQueueWork) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		(*work)[i].queue_id = DatumGetInt32(sbq_col(i, 1, &isnull));
		(*work)[i].messages = DatumGetBool(sbq_col(i, 2, &isnull));
		(*work)[i].duplicates = DatumGetBool(sbq_col(i, 3, &isnull));
		(*work)[i].dead_letters = DatumGetBool(sbq_col(i, 4, &isnull));
		(*work)[i].forward = DatumGetBool(sbq_col(i, 5, &isnull));
	}
	return (int) n;
}

/* A queue id against a queue of a list by id, for bsearch. */
static int
sbq_queue_id_cmp(const void *key, const void *elem)
{
	int32		id = *(const int32 *) key;
	int32		other = ((const SbqQueue *) elem)->queue_id;

	return (id > other) - (id < other);
}

/*
 * sbq_forget_gone
 *		Free the shared entries of queues and topics no fresh snapshot shows
 *		(deleted, or made by a transaction still open), in two passes at
 *		least (qstate.c, sbq_qstate_sweep_gone). queues[] (by id) are the
 *		queues the pass began with: there, not looked at again. Not on a
 *		Citus node, whose statements see the node's shard groups, not every
 *		entity.
 */
static void
sbq_forget_gone(const SbqQueue *queues, int nqueues)
{
	Oid			epoch = sbq_storage_epoch();
	int32	   *ids = palloc(sizeof(int32) * sbq_qstate_max);
	int32	   *maybe;
	char	  **keys;
	int			n;
	int			nmaybe = 0;
	int			ngone = 0;
	int			i;
	TimestampTz oldest;

	if (sbq_dist_active())
		return;
	/*
	 * Who may still look an entry up: read before the snapshot that finds
	 * entities gone, so that a creator that commits meanwhile is either
	 * counted here or seen by the snapshot (qstate.c).
	 */
	oldest = sbq_no_prepared() ? sbq_qstate_oldest_start() : 0;
	n = sbq_qstate_queues(epoch, ids, sbq_qstate_max, false);
	maybe = palloc(sizeof(int32) * Max(n, 1));
	for (i = 0; i < n; i++)
		if (ids[i] != 0 &&
			bsearch(&ids[i], queues, nqueues, sizeof(SbqQueue), sbq_queue_id_cmp) == NULL)
			maybe[nmaybe++] = ids[i];
	/* gone: no name key under a fresh snapshot (neither a queue nor a topic) */
	keys = palloc(sizeof(char *) * Max(nmaybe, 1));
	if (nmaybe > 0)
		sbq_entity_name_keys(maybe, nmaybe, keys);
	for (i = 0; i < nmaybe; i++)
		if (keys[i] == NULL)
			maybe[ngone++] = maybe[i];
	(void) sbq_qstate_sweep_gone(epoch, maybe, ngone, oldest);
}

/* Whether a restore is loading this database's tables (stmt_restoring). */
static bool
sbq_restoring(void)
{
	Datum		values[2];
	bool		isnull;

	values[0] = ObjectIdGetDatum(MyDatabaseId);
	values[1] = BoolGetDatum(!sbq_dist_active());
	/* a topic's scheduled messages have numbers of the sequence too */
	if (sbq_exec(sbq_topics_installed() ? &stmt_restoring_topics : &stmt_restoring,
				 values, NULL) != 1)
		return false;
	return DatumGetBool(sbq_col(0, 1, &isnull)) && !isnull;
}

/* One maintenance pass over this database, its results added to *acc. */
static void
sbq_maintain_pass(SbqMaintainResult *acc)
{
	TimestampTz now = GetCurrentTimestamp();
	SbqMaintainResult res = {0};

	/*
	 * Nothing on a standby; nor when the extension was dropped after the
	 * caller found this function (a worker, as a DROP EXTENSION commits):
	 * the section's lock on sbq.queues took in the drop, and there are no
	 * tables left to run on.
	 */
	if (RecoveryInProgress() || !OidIsValid(sbq_storage_epoch()) || sbq_restoring())
		res.skipped = true;
	else
	{
		SbqQueue   *queues;
		int			nqueues;
		int			q;
		SbqQueueWork *work;
		int64	   *floors;
		int			nwork;
		int			w = 0;
		int64		prepares;

		/*
		 * What a prepared transaction left in shared memory holds until none
		 * is left; the count first, the question after (qstate.c).
		 */
		prepares = sbq_qstate_prepares(sbq_storage_epoch());
		if (!sbq_no_prepared())
			prepares = -1;

		nqueues = sbq_all_queues(&queues);
		res.queues = nqueues;
		floors = palloc(sizeof(int64) * Max(nqueues, 1));
		for (q = 0; q < nqueues; q++)
			floors[q] = sbq_qstate_maintain_floor(sbq_storage_epoch(), queues[q].queue_id, now);

		/* counts gathered in shared memory go to sbq.queue_counters */
		sbq_store_all_counts();

		/* expired leases: delivery counts stored, or dead letters */
		res.more |= sbq_lease_sweep(queues, nqueues, 0, now, &res.released,
									&res.dead_lettered) >= SBQ_MAINTAIN_BATCH;
		/* and expired session locks in shared memory, of every queue */
		if (sbq_sessions_installed())
		{
			int			n = sbq_mem_expire(now, SBQ_MAINTAIN_BATCH);

			res.sessions_expired += n;
			res.more |= n >= SBQ_MAINTAIN_BATCH;
		}

		/*
		 * The queues with work, by id as the queues are; a queue made after
		 * the look has none yet, and one the look saw but the list does not
		 * is gone.
		 */
		nwork = sbq_queue_work(&work, queues, floors, nqueues);
		for (q = 0; q < nqueues; q++)
		{
			static const SbqQueueWork idle = {0};

			CHECK_FOR_INTERRUPTS();
			while (w < nwork && work[w].queue_id < queues[q].queue_id)
				w++;
			sbq_maintain_queue(&queues[q],
							   w < nwork && work[w].queue_id == queues[q].queue_id ?
							   &work[w] : &idle,
							   now, floors[q], prepares, &res);
		}
		sbq_maintain_topics(now, &res);
		sbq_forget_gone(queues, nqueues);
	}
	acc->queues += res.queues;
	acc->activated += res.activated;
	acc->released += res.released;
	acc->dead_lettered += res.dead_lettered;
	acc->expired_dead += res.expired_dead;
	acc->expired_dropped += res.expired_dropped;
	acc->forgotten += res.forgotten;
	acc->dead_letters_removed += res.dead_letters_removed;
	acc->dead_letters_forwarded += res.dead_letters_forwarded;
	acc->dead_letters_kept += res.dead_letters_kept;
	acc->sessions_expired += res.sessions_expired;
	acc->more |= res.more;
	acc->skipped |= res.skipped;
}

/*
 * sbq_storage_maintain
 *		One maintenance pass over this database (see this file's header),
 *		its results added to *acc. The counts its steps add are gathered in
 *		shared memory, not stored as the steps go: the pass stores them
 *		first, each under its entity's name lock (storage_core.c).
 */
void
sbq_storage_maintain(SbqMaintainResult *acc)
{
	sbq_counts_pass(true);
	PG_TRY();
	{
		sbq_maintain_pass(acc);
	}
	PG_FINALLY();
	{
		sbq_counts_pass(false);
	}
	PG_END_TRY();
}

/* What passes did, as a JSON object (sbq_maintain()'s result). */
Jsonb *
sbq_maintain_result_json(const SbqMaintainResult *r)
{
	SbqMaintainResult res = *r;
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf,
					 "{\"queues\": " INT64_FORMAT ", \"scheduled_activated\": " INT64_FORMAT
					 ", \"locks_released\": " INT64_FORMAT ", \"dead_lettered\": " INT64_FORMAT
					 ", \"expired_dead_lettered\": " INT64_FORMAT
					 ", \"expired_dropped\": " INT64_FORMAT
					 ", \"duplicates_forgotten\": " INT64_FORMAT
					 ", \"dead_letters_removed\": " INT64_FORMAT
					 ", \"dead_letters_forwarded\": " INT64_FORMAT
					 ", \"dead_letters_not_forwarded\": " INT64_FORMAT
					 ", \"sessions_expired\": " INT64_FORMAT
					 ", \"more\": %s, \"skipped\": %s}",
					 res.queues, res.activated, res.released, res.dead_lettered,
					 res.expired_dead, res.expired_dropped, res.forgotten,
					 res.dead_letters_removed, res.dead_letters_forwarded,
					 res.dead_letters_kept, res.sessions_expired,
					 res.more ? "true" : "false", res.skipped ? "true" : "false");
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
}
