/*-------------------------------------------------------------------------
 *
 * send.c
 *	  Messages into a queue: send (one or a batch), duplicate detection,
 *	  activation of scheduled messages that came due, cancel of a scheduled
 *	  message, and resubmit of dead letters.
 *
 * Every path that gives a message of the main queue a sequence number
 * announces itself to the queue's head hint first (qstate.c,
 * sbq_qstate_send_begin), and wakes blocked receivers at commit (wait.c).
 * A scheduled message is stored with state "scheduled" and joins the queue
 * with a new sequence number when it comes due: a receive activates what is
 * due before it looks (when shared memory says something is), and so does
 * every maintenance pass.
 *
 * Duplicate detection claims the message id in sbq.duplicate_ids with an
 * upsert: a concurrent send of the same id waits for the first to end, and
 * an id sent within the window stores nothing and returns the first
 * message's sequence number.
 *
 * Owns: nothing shared. Locks: row locks of its statements only.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/send.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "distributed.h"
#include "storage_core.h"
#include "topics.h"
#include "wait.h"

#define INSERT_MESSAGE_COLS_OF(more) \
	"INSERT INTO sbq.messages (sequence_number, queue_id, subqueue, state, " \
	"delivery_count, enqueued_time, scheduled_enqueue_time, expires_at, time_to_live, " \
	"message_id, session_id, correlation_id, subject, content_type, reply_to, " \
	"reply_to_session_id, to_address, application_properties, body" more ") "
#define INSERT_MESSAGE_COLS INSERT_MESSAGE_COLS_OF("")

/*
 * The arguments of the sends: $1 queue, $2 state, $3 now, $4 scheduled
 * time, $5 expires_at, $6 time to live, $7 .. $14 the text properties
 * (message_id, session_id, correlation_id, subject, content_type, reply_to,
 * reply_to_session_id, to), $15 application properties, $16 .. $18 the
 * dead-letter reason, description and source a forwarded dead letter keeps
 * (else NULL), $19 the hops it was forwarded (NULL for none), $20 the body
 * (or bodies)
 */
#define SEND_ARGS INT4OID, INT2OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, \
	INTERVALOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, \
	TEXTOID, TEXTOID, JSONBOID, TEXTOID, TEXTOID, TEXTOID, INT2OID
#define SEND_ARG_BODY	19		/* the index of $20 */
#define SEND_ARG_SEQ	20		/* of $21 */
#define SEND_NARGS		21

#define INSERT_SENT_COLS INSERT_MESSAGE_COLS_OF(", dead_letter_reason, " \
	"dead_letter_error_description, dead_letter_source" HOPS(", transfer_hops"))
#define INSERT_SENT_VALUES(seq, body) \
	seq ", $1, 0, $2, 0, $3, $4, $5, $6, " \
	"coalesce($7, gen_random_uuid()::text), $8, $9, $10, $11, $12, $13, $14, $15, " \
	body ", $16, $17, $18" HOPS(", $19")

/* $21: the sequence number duplicate detection drew, or NULL */
static SbqStatement stmt_send_one = {"send one", SEND_NARGS, {SEND_ARGS, BYTEAOID, INT8OID},
	INSERT_SENT_COLS "VALUES ("
	INSERT_SENT_VALUES("coalesce($21, " NEXT_SEQUENCE ")", "$20") ")"
	" RETURNING sequence_number"
};

static SbqStatement stmt_send_many = {"send many", SEND_NARGS - 1, {SEND_ARGS, BYTEAARRAYOID},
	INSERT_SENT_COLS "SELECT " INSERT_SENT_VALUES(NEXT_SEQUENCE, "u.body")
	" FROM unnest($20::bytea[]) WITH ORDINALITY AS u(body, ord)"
	" ORDER BY u.ord RETURNING sequence_number"
};

static SbqStatement stmt_next_sequence = {"next sequence number", 0, {InvalidOid},
	"SELECT " NEXT_SEQUENCE
};

/*
 * Claim a message id for a new message: a row comes back when the id is new
 * or its last use is older than the window ($5, the cutoff). A concurrent
 * send of the same id waits here for the first to end.
 */
static SbqStatement stmt_dedup_claim = {"claim message id", 5, {INT4OID, TEXTOID, INT8OID,
		TIMESTAMPTZOID, TIMESTAMPTZOID},
	"INSERT INTO sbq.duplicate_ids AS d (queue_id, message_id, sequence_number, sent_at)"
	" VALUES ($1, $2, $3, $4)"
	" ON CONFLICT (queue_id, message_id" EK(", entity_key") ") DO UPDATE"
	" SET sequence_number = excluded.sequence_number, sent_at = excluded.sent_at"
	" WHERE d.sent_at <= $5"
	" RETURNING d.sequence_number"
};

static SbqStatement stmt_dedup_first = {"first message of an id", 2, {INT4OID, TEXTOID},
	"SELECT sequence_number FROM sbq.duplicate_ids"
	" WHERE queue_id = $1 AND message_id = $2"
};

static SbqStatement stmt_cancel_scheduled = {"cancel scheduled", 2, {INT8OID, INT4OID},
	"DELETE FROM sbq.messages"
	" WHERE sequence_number = $1 AND queue_id = $2 AND subqueue = 0 AND state = 2"
};

/*
 * Scheduled messages that are due join the back of the queue: a new sequence
 * number each, in the order of their scheduled times.
 * $1 queue, $2 now, $3 limit
 */
static SbqStatement stmt_activate = {"activate scheduled", 3, {INT4OID, TIMESTAMPTZOID,
		INT4OID},
	"WITH c AS MATERIALIZED ("
	"  SELECT m.sequence_number, m.scheduled_enqueue_time FROM sbq.messages m"
	"   WHERE m.queue_id = $1 AND m.state = 2 AND m.scheduled_enqueue_time <= $2"
	"   ORDER BY m.scheduled_enqueue_time, m.sequence_number LIMIT $3"
	"   FOR UPDATE OF m SKIP LOCKED),"
	" n AS MATERIALIZED ("
	"  SELECT o.sequence_number AS old_seq, " NEXT_SEQUENCE " AS new_seq"
	"    FROM (SELECT c.sequence_number FROM c"
	"           ORDER BY c.scheduled_enqueue_time, c.sequence_number) o)"
	" UPDATE sbq.messages m SET sequence_number = n.new_seq, state = 0, enqueued_time = $2"
	"   FROM n WHERE m.sequence_number = n.old_seq"
	"    AND m.sequence_number = ANY(ARRAY(SELECT old_seq FROM n))"
	" RETURNING n.new_seq, m.session_id"
};

static SbqStatement stmt_next_due = {"next scheduled time", 1, {INT4OID},
	"SELECT min(m.scheduled_enqueue_time) FROM sbq.messages m"
	" WHERE m.queue_id = $1 AND m.state = 2"
};

/*
 * Dead letters back to the queue as new messages, in their old order.
 * $1 queue, $2 now, $3 the sequence numbers or NULL for all
 */
#define RESUBMIT_PICK(table) \
	"WITH c AS MATERIALIZED (" \
	"  SELECT m.sequence_number FROM " table " m" \
	"   WHERE m.queue_id = $1 AND m.subqueue = 1" \
	"     AND ($3::int8[] IS NULL OR m.sequence_number = ANY($3))" \
	"     AND ($4 IS NOT TRUE OR m.session_id IS NOT NULL)" \
	"     AND (m.locked_until IS NULL OR m.locked_until <= $2) AND " LEASE_SLOT \
	"   ORDER BY m.sequence_number FOR UPDATE OF m SKIP LOCKED)," \
	" n AS MATERIALIZED (" \
	"  SELECT o.sequence_number AS old_seq, " NEXT_SEQUENCE " AS new_seq" \
	"    FROM (SELECT c.sequence_number FROM c ORDER BY c.sequence_number) o)"
/*
 * The new expiry of a resubmitted message: its time to live from $2, as the
 * exact length it was checked as (sbq_exact_interval: a day 24 hours, a month
 * 30 days), also when it was stored before 0.5 with months or days.
 */
#define EXACT_INTERVAL(x) \
	"(interval '1 hour' * (24 * (30 * (12 * date_part('year', " x ") + date_part('month', " x "))" \
	" + date_part('day', " x "))) + (" x " - date_trunc('day', " x ")))"
#define RESUBMIT_EXPIRES(m) \
	"CASE WHEN " m ".time_to_live < interval '" SBQ_NEVER_EXPIRES "' THEN $2 + " \
	EXACT_INTERVAL(m ".time_to_live") " END"

/* $4: only those in a session (every dead letter of a queue that requires sessions) */
static SbqStatement stmt_resubmit = {"resubmit", 4, {INT4OID, TIMESTAMPTZOID, INT8ARRAYOID, BOOLOID},
	RESUBMIT_PICK("sbq.dead_letters") ","
	" d AS ("
	"  DELETE FROM sbq.dead_letters m USING n"
	"   WHERE m.sequence_number = n.old_seq AND " LEASE_SLOT
	"  RETURNING m.*, n.new_seq),"
	" i AS (" INSERT_MESSAGE_COLS
	"  SELECT d.new_seq, d.queue_id, 0, 0, 0, $2, d.scheduled_enqueue_time, "
	RESUBMIT_EXPIRES("d") ", d.time_to_live, d.message_id, d.session_id,"
	"         d.correlation_id, d.subject, d.content_type, d.reply_to,"
	"         d.reply_to_session_id, d.to_address, d.application_properties, d.body"
	"    FROM d)"
	" SELECT d.sequence_number, d.new_seq, d.session_id FROM d",
	.old_sql =
	RESUBMIT_PICK("sbq.messages")
	" UPDATE sbq.messages m"
	"    SET sequence_number = n.new_seq, subqueue = 0, state = 0, delivery_count = 0,"
	"        lock_token = NULL, locked_until = NULL, enqueued_time = $2,"
	"        expires_at = " RESUBMIT_EXPIRES("m") ","
	"        dead_letter_reason = NULL,"
	"        dead_letter_error_description = NULL, dead_letter_source = NULL"
	"   FROM n WHERE m.sequence_number = n.old_seq AND " LEASE_SLOT
	" RETURNING n.old_seq, n.new_seq"
};

/* how many messages this backend has stored (sbq_storage_stored) */
static uint64 sbq_stored = 0;

/*
 * sbq_storage_stored
 *		How many messages this backend has stored so far: a caller compares
 *		two readings to learn whether a send stored anything (a duplicate,
 *		or a topic that no subscription took it from, stores nothing).
 */
uint64
sbq_storage_stored(void)
{
	return sbq_stored;
}

static int
sbq_cmp_int64(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return (x > y) - (x < y);
}

/*
 * sbq_check_duplicate_ids
 *		Duplicate detection keeps its history in sbq.duplicate_ids, which the
 *		SQL of 0.1 lacks: 0.1 refused a duplicate_detection_window, and so does
 *		the library with its SQL (api_queues.c). A queue given one anyway (by a
 *		library before that refusal) takes no message id until the update,
 *		rather than store duplicates.
 */
static void
sbq_check_duplicate_ids(const SbqQueue *queue)
{
	if (!sbq_duplicate_ids_installed())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("duplicate detection needs version 0.2 or later of extension sbqueue"),
				 errdetail("\"%s\" has a duplicate_detection_window, and version 0.1 keeps no history of message ids.",
						   queue->name),
				 errhint("Run ALTER EXTENSION sbqueue UPDATE.")));
}

/*
 * sbq_send_with_dedup
 *		Store messages one by one under duplicate detection: each draws a
 *		sequence number and claims its message id; an id sent within the
 *		window stores nothing and gives back the first message's number.
 *		values/nulls are stmt_send_one's arguments but for $16 and $17.
 */
static int64
sbq_send_with_dedup(const SbqQueue *queue, Datum *values, bool *nulls,
					Datum *bodies, int nbodies, TimestampTz now, int64 *seqs)
{
	Datum		claim[5];
	Datum		first[2];
	int64		stored = 0;
	int			i;

	claim[0] = Int32GetDatum(queue->queue_id);
	claim[1] = values[6];		/* message_id */
	claim[3] = TimestampTzGetDatum(now);
	claim[4] = TimestampTzGetDatum(now - sbq_interval_usecs(&queue->dup_window));
	first[0] = claim[0];
	first[1] = claim[1];

	for (i = 0; i < nbodies; i++)
	{
		bool		isnull;
		int64		seq;

		(void) sbq_exec(&stmt_next_sequence, NULL, NULL);
		seq = DatumGetInt64(sbq_col(0, 1, &isnull));
		claim[2] = Int64GetDatum(seq);
		if (sbq_exec(&stmt_dedup_claim, claim, NULL) == 1)
		{
			values[SEND_ARG_BODY] = bodies[i];
			values[SEND_ARG_SEQ] = Int64GetDatum(seq);
			nulls[SEND_ARG_SEQ] = false;
			(void) sbq_exec(&stmt_send_one, values, nulls);
			seqs[i] = seq;
			stored++;
		}
		else
		{
			if (sbq_exec(&stmt_dedup_first, first, NULL) != 1)
				elog(ERROR, "duplicate detection lost the first message of an id");
			seqs[i] = DatumGetInt64(sbq_col(0, 1, &isnull));
		}
	}
	return stored;
}

/*
 * sbq_storage_claim_message_id
 *		Duplicate detection for one message sent to a queue or topic with a
 *		window: claim its message id for the sequence number *seq. False when
 *		a message with that id was sent within the window: *seq then gets that
 *		message's number.
 */
bool
sbq_storage_claim_message_id(const SbqQueue *queue, text *message_id, TimestampTz now,
							 int64 *seq)
{
	Datum		claim[5];
	bool		isnull;

	sbq_check_duplicate_ids(queue);
	claim[0] = Int32GetDatum(queue->queue_id);
	claim[1] = PointerGetDatum(message_id);
	claim[2] = Int64GetDatum(*seq);
	claim[3] = TimestampTzGetDatum(now);
	claim[4] = TimestampTzGetDatum(now - sbq_interval_usecs(&queue->dup_window));
	if (sbq_exec(&stmt_dedup_claim, claim, NULL) == 1)
		return true;
	if (sbq_exec(&stmt_dedup_first, claim, NULL) != 1)
		elog(ERROR, "duplicate detection lost the first message of an id");
	*seq = DatumGetInt64(sbq_col(0, 1, &isnull));
	return false;
}

/*
 * sbq_send_args
 *		The arguments $1 .. $15 of the sends, and $17 NULL, for messages with
 *		props; scheduled says they are stored as scheduled.
 */
static void
sbq_send_args(const SbqQueue *queue, const SbqSendProps *props, TimestampTz now,
			  bool scheduled, const char *default_content_type, Datum *values, bool *nulls)
{
	TimestampTz start = scheduled ? props->scheduled : now;
	const Interval *ttl = NULL;
	text	   *texts[8];
	int			i;

	/* a message's time to live is capped to the queue's default */
	if (props->has_ttl)
	{
		ttl = &props->ttl;
		if (queue->has_default_ttl &&
			sbq_interval_usecs(&queue->default_ttl) < sbq_interval_usecs(ttl))
			ttl = &queue->default_ttl;
	}
	else if (queue->has_default_ttl)
		ttl = &queue->default_ttl;

	memset(nulls, 0, sizeof(bool) * SEND_NARGS);
	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = Int16GetDatum(scheduled ? SBQ_STATE_SCHEDULED : SBQ_STATE_ACTIVE);
	values[2] = TimestampTzGetDatum(now);
	values[3] = TimestampTzGetDatum(props->scheduled);
	nulls[3] = !props->has_scheduled;
	values[4] = (Datum) 0;
	nulls[4] = true;
	if (ttl != NULL)
	{
		TimestampTz expires_at = 0;

		/* a scheduled message lives from the time it is due */
		nulls[4] = !sbq_expiry(start, ttl, &expires_at);
		values[4] = TimestampTzGetDatum(expires_at);
	}
	values[5] = ttl != NULL ? IntervalPGetDatum(ttl) : (Datum) 0;
	nulls[5] = ttl == NULL;

	texts[0] = props->message_id;
	texts[1] = props->session_id;
	texts[2] = props->correlation_id;
	texts[3] = props->subject;
	texts[4] = props->content_type;
	texts[5] = props->reply_to;
	texts[6] = props->reply_to_session_id;
	texts[7] = props->to_address;
	if (texts[4] == NULL && default_content_type != NULL)
		texts[4] = cstring_to_text(default_content_type);
	for (i = 0; i < 8; i++)
	{
		values[6 + i] = PointerGetDatum(texts[i]);
		nulls[6 + i] = texts[i] == NULL;
	}
	values[14] = PointerGetDatum(props->application_properties);
	nulls[14] = props->application_properties == NULL;
	texts[0] = props->dead_letter_reason;
	texts[1] = props->dead_letter_description;
	texts[2] = props->dead_letter_source;
	for (i = 0; i < 3; i++)
	{
		values[15 + i] = PointerGetDatum(texts[i]);
		nulls[15 + i] = texts[i] == NULL;
	}
	/* a message forwarded here keeps count (forward.c) */
	values[18] = Int16GetDatum(sbq_forward_hops_now());
	nulls[18] = sbq_forward_hops_now() == 0;
	nulls[SEND_ARG_SEQ] = true;
}

/*
 * sbq_send_plain
 *		Store the messages without duplicate detection, in one statement;
 *		their sequence numbers go into seqs in the order of the bodies.
 */
static int64
sbq_send_plain(Datum *values, bool *nulls, Datum *bodies, int nbodies, int64 *seqs)
{
	uint64		n;
	uint64		i;

	if (sbq_send_direct(values, nulls, bodies, nbodies, seqs))
		return nbodies;
	if (nbodies == 1)
	{
		values[SEND_ARG_BODY] = bodies[0];
		n = sbq_exec(&stmt_send_one, values, nulls);
	}
	else
	{
		values[SEND_ARG_BODY] = PointerGetDatum(construct_array(bodies, nbodies, BYTEAOID,
													 -1, false, TYPALIGN_INT));
		n = sbq_exec(&stmt_send_many, values, nulls);
	}
	if (n != (uint64) nbodies)
		elog(ERROR, "stored " UINT64_FORMAT " of %d messages", n, nbodies);

	for (i = 0; i < n; i++)
	{
		bool		isnull;

		seqs[i] = DatumGetInt64(sbq_col(i, 1, &isnull));
	}
	/* sequence numbers follow the order of the bodies */
	qsort(seqs, n, sizeof(int64), sbq_cmp_int64);
	return (int64) n;
}

static int	sbq_send_to(const SbqQueue *queue, const SbqSendProps *props,
						Datum *bodies, int nbodies, const char *default_content_type,
						int64 *seqs);

/*
 * sbq_storage_send
 *		Store nbodies messages (bytea datums, checked for size by the caller)
 *		with the same properties; their sequence numbers go into seqs in the
 *		order of the bodies (a duplicate gets its first message's number).
 *		Returns the number of bodies.
 */
int
sbq_storage_send(const SbqQueue *queue, const SbqSendProps *props,
				 Datum *bodies, int nbodies, const char *default_content_type,
				 int64 *seqs)
{
	int64		saved;
	int			n;

	if (!sbq_dist_active())
		return sbq_send_to(queue, props, bodies, nbodies, default_content_type, seqs);
	/* distributed: the rows it writes are the entity's sent to (a subscription's, a forward's) */
	saved = sbq_dist_push_key(queue->name);
	PG_TRY();
	{
		n = sbq_send_to(queue, props, bodies, nbodies, default_content_type, seqs);
	}
	PG_FINALLY();
	{
		/* also when a caller catches the error (a forward retried alone) */
		sbq_dist_pop_key(saved);
	}
	PG_END_TRY();
	return n;
}

/* sbq_storage_send's work */
static int
sbq_send_to(const SbqQueue *queue, const SbqSendProps *props,
			Datum *bodies, int nbodies, const char *default_content_type,
			int64 *seqs)
{
	Datum		values[SEND_NARGS];
	bool		nulls[SEND_NARGS];
	TimestampTz now = GetCurrentTimestamp();
	bool		scheduled = props->has_scheduled && props->scheduled > now;
	SbqCounts	counts = {0};
	int64		max_seq = 0;
	/* a message without an id gets a fresh UUID: never a duplicate */
	bool		dedup = queue->has_dup_window && props->message_id != NULL;
	int			i;

	if (nbodies == 0)
		return 0;
	if (queue->is_topic)
		return sbq_topic_send(queue, props, bodies, nbodies, default_content_type, seqs);
	if (queue->forward_to != NULL)
		return sbq_forward_send(queue, props, bodies, nbodies, default_content_type, seqs);
	if (dedup)
		sbq_check_duplicate_ids(queue);
	sbq_send_args(queue, props, now, scheduled, default_content_type, values, nulls);

	/* active messages join the queue: announce it (qstate.c) */
	if (!scheduled)
		sbq_qstate_send_begin(sbq_storage_epoch(), queue->queue_id);

	if (dedup)
		counts.sent = sbq_send_with_dedup(queue, values, nulls, bodies, nbodies,
										  now, seqs);
	else
		counts.sent = sbq_send_plain(values, nulls, bodies, nbodies, seqs);
	if (counts.sent == 0)
		return nbodies;
	sbq_stored += counts.sent;

	for (i = 0; i < nbodies; i++)
		max_seq = Max(max_seq, seqs[i]);
	sbq_sequence_mark(queue->name, max_seq);
	/* the session of a session queue knows it has messages (session.c) */
	if (!scheduled && queue->requires_session)
	{
		int64		min_seq = max_seq;

		for (i = 0; i < nbodies; i++)
			min_seq = Min(min_seq, seqs[i]);
		sbq_session_note_sent(queue, PointerGetDatum(props->session_id), min_seq);
	}
	if (!scheduled)
		sbq_qstate_send_done(sbq_storage_epoch(), max_seq);
	sbq_add_counts(queue->queue_id, &counts);
	if (!scheduled)
		sbq_wait_wake_at_commit(queue->queue_id);
	else
		sbq_qstate_scheduled(sbq_storage_epoch(), queue->queue_id, props->scheduled);
	return nbodies;
}

/* A message that joined a session, for sbq_note_sessions. */
typedef struct SbqJoined
{
	text	   *session_id;
	int64		seq;
} SbqJoined;

/* two session ids, by their bytes */
static int
sbq_cmp_session_id(const text *x, const text *y)
{
	int			lx = VARSIZE_ANY_EXHDR(x);
	int			ly = VARSIZE_ANY_EXHDR(y);
	int			c = memcmp(VARDATA_ANY(x), VARDATA_ANY(y), Min(lx, ly));

	if (c != 0)
		return c;
	return (lx > ly) - (lx < ly);
}

/* by session id, then sequence number */
static int
sbq_cmp_joined(const void *a, const void *b)
{
	const SbqJoined *x = a;
	const SbqJoined *y = b;
	int			c = sbq_cmp_session_id(x->session_id, y->session_id);

	if (c != 0)
		return c;
	return (x->seq > y->seq) - (x->seq < y->seq);
}

/*
 * sbq_note_sessions
 *		The n rows of the current SPI result are messages that joined a
 *		session queue (sequence number in column seq_col, session id in
 *		sid_col): each session learns of its lowest one (session.c), in the
 *		order of their ids, so two such calls lock session rows in one order.
 */
static void
sbq_note_sessions(const SbqQueue *queue, uint64 n, int seq_col, int sid_col)
{
	SPITupleTable *tt = SPI_tuptable;
	SbqJoined  *joined = palloc(sizeof(SbqJoined) * n);
	uint64		njoined = 0;
	uint64		i;

	for (i = 0; i < n; i++)
	{
		bool		isnull;
		Datum		sid = SPI_getbinval(tt->vals[i], tt->tupdesc, sid_col, &isnull);

		/* a message resubmitted or scheduled before 0.7 may have none */
		if (isnull)
			continue;
		joined[njoined].session_id = DatumGetTextPP(sid);
		joined[njoined++].seq = DatumGetInt64(SPI_getbinval(tt->vals[i], tt->tupdesc,
															seq_col, &isnull));
	}
	qsort(joined, njoined, sizeof(SbqJoined), sbq_cmp_joined);
	for (i = 0; i < njoined; i++)
	{
		CHECK_FOR_INTERRUPTS();
		/* the lowest of a session comes first */
		if (i > 0 && sbq_cmp_session_id(joined[i].session_id, joined[i - 1].session_id) == 0)
			continue;
		sbq_session_note_sent(queue, PointerGetDatum(joined[i].session_id), joined[i].seq);
	}
	pfree(joined);
}

static bool sbq_next_due(const SbqQueue *queue, Datum *values, uint64 gen,
						 TimestampTz now);

/*
 * sbq_activate_due
 *		Let up to limit due scheduled messages of a queue join it; returns how
 *		many did. Receive calls this first, so scheduled messages become
 *		receivable on time without the background worker.
 */
int
sbq_activate_due(const SbqQueue *queue, TimestampTz now, int limit, bool always)
{
	Datum		values[3];
	uint64		n;
	uint64		gen;
	Oid			epoch = sbq_storage_epoch();

	/* nothing is due yet, as far as shared memory knows (qstate.c) */
	if (!sbq_qstate_due(epoch, queue->queue_id, now, &gen) && !always)
		return 0;

	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = TimestampTzGetDatum(now);
	values[2] = Int32GetDatum(limit);

	/*
	 * A receive looks before it activates: without shared memory (or after a
	 * restart, before the hint is known) it would otherwise run the
	 * activation, three statements' worth of work, on every call, nearly
	 * always to find nothing due. The look is an index-only scan of the
	 * small index of scheduled messages, and the same look the hint is
	 * learnt from.
	 */
	if (!always && !sbq_next_due(queue, values, gen, now))
		return 0;
	/* they join the queue with new numbers: announce it (qstate.c) */
	sbq_qstate_send_begin(epoch, queue->queue_id);
	n = sbq_exec(&stmt_activate, values, NULL);
	if (n > 0)
	{
		int64		max_seq = sbq_max_col(1);

		sbq_qstate_send_done(epoch, max_seq);
		if (queue->requires_session)
			sbq_note_sessions(queue, n, 1, 2);
		sbq_sequence_mark(queue->name, max_seq);
		sbq_wait_wake_at_commit(queue->queue_id);
	}

	(void) sbq_next_due(queue, values, gen, now);
	return (int) n;
}

/*
 * sbq_next_due
 *		Is one of the queue's scheduled messages due at now (as this
 *		statement's snapshot sees them)? And tell the hint in shared memory
 *		when the next one is due. values are sbq_activate_due's.
 */
static bool
sbq_next_due(const SbqQueue *queue, Datum *values, uint64 gen, TimestampTz now)
{
	bool		isnull;
	TimestampTz next;

	(void) sbq_exec(&stmt_next_due, values, NULL);
	next = DatumGetTimestampTz(sbq_col(0, 1, &isnull));

	/*
	 * A transaction snapshot may miss a scheduled send that committed before
	 * gen was read: then the hint learns nothing.
	 */
	if (!IsolationUsesXactSnapshot() && !RecoveryInProgress())
		sbq_qstate_set_due(sbq_storage_epoch(), queue->queue_id, gen, !isnull,
						   isnull ? 0 : next);
	return !isnull && next <= now;
}

/*
 * sbq_storage_cancel_scheduled
 *		Delete a scheduled message; false when seq is not one of this queue.
 */
bool
sbq_storage_cancel_scheduled(const SbqQueue *queue, int64 seq)
{
	Datum		values[2];

	if (queue->is_topic)
		return sbq_topic_cancel_scheduled(queue, seq);
	values[0] = Int64GetDatum(seq);
	values[1] = Int32GetDatum(queue->queue_id);
	return sbq_exec(&stmt_cancel_scheduled, values, NULL) == 1;
}

/* The n resubmitted rows (old number, new, session id) each have a session id. */
static void
sbq_resubmit_check_sessions(const SbqQueue *queue, uint64 n)
{
	uint64		i;

	for (i = 0; i < n; i++)
	{
		bool		isnull;

		(void) sbq_col(i, 3, &isnull);
		if (isnull)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("dead letter %lld of \"%s\" is in no session",
							(long long) DatumGetInt64(sbq_col(i, 1, &isnull)), queue->name),
					 errdetail("\"%s\" requires sessions: a message in no session would never be received.",
							   queue->name),
					 errhint("Purge it, or peek it and send it again with a session id.")));
	}
}

/*
 * sbq_storage_resubmit
 *		Move dead letters back to the queue as new messages: those with the
 *		given (distinct) sequence numbers, or all when seqs is NULL; none under
 *		a valid lock. Returns how many moved; with seqs, the caller checks that
 *		all did (an error then undoes the move), and *missing names one that
 *		did not.
 */
int
sbq_storage_resubmit(const SbqQueue *queue, Datum *seqs, int nseqs, int64 *missing)
{
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};
	uint64		n;
	int64		max_seq = 0;
	SbqCounts	counts = {0};

	/*
	 * Dead letters under an expired lease can be resubmitted once it ended;
	 * with sbqueue.memory_locks off inside a transaction block, maintenance
	 * ends it (the transaction stays free of lease changes, so it can be
	 * prepared).
	 */
	sbq_lease_sweep_queue(queue, GetCurrentTimestamp());
	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
	if (seqs != NULL)
		values[2] = PointerGetDatum(construct_array(seqs, nseqs, INT8OID, sizeof(int64),
													FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	else
		nulls[2] = true;

	/*
	 * A queue that requires sessions keeps, as dead letters, copies that
	 * came in no session ("Session id is null."): back in the queue, no call
	 * could receive them. All dead letters: those stay. Named: 22023.
	 */
	values[3] = BoolGetDatum(queue->requires_session && seqs == NULL);
	sbq_qstate_send_begin(sbq_storage_epoch(), queue->queue_id);
	n = sbq_exec(&stmt_resubmit, values, nulls);
	if (n > 0)
	{
		max_seq = sbq_max_col(2);
		sbq_qstate_send_done(sbq_storage_epoch(), max_seq);
	}
	if (n > 0 && queue->requires_session)
		sbq_resubmit_check_sessions(queue, n);
	if (n > 0 && queue->requires_session)
	{
		/* the moves are what the code below checks: keep them */
		SPITupleTable *moved = SPI_tuptable;

		sbq_note_sessions(queue, n, 2, 3);
		SPI_tuptable = moved;
		SPI_processed = n;
	}
	if (seqs != NULL && n != (uint64) nseqs)
		*missing = sbq_first_missing(seqs, nseqs, n, 1);
	if (n > 0)
	{
		counts.sent = n;
		sbq_add_counts(queue->queue_id, &counts);
		sbq_sequence_mark(queue->name, max_seq);
		sbq_wait_wake_at_commit(queue->queue_id);
	}
	return (int) n;
}

