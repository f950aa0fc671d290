/*-------------------------------------------------------------------------
 *
 * settle.c
 *	  Settlements of a lock: complete (one or many), abandon, defer,
 *	  dead-letter, and renew.
 *
 * A lock is either a lease (lease.c: in shared memory, the message row
 * untouched) or stored in the message row (lock_token, locked_until). Every
 * settlement first asks lease.c whether the token holds a lease; if not, it
 * looks for the lock in the row. Either way it locks the message row (the
 * DELETE or UPDATE of the settlement, or SELECT ... FOR UPDATE) before it
 * judges the lock with a clock read after that, because the statement may
 * have waited for the row while the lock ran out and a receive took the
 * message over; and the row lock orders two settlers of the same token.
 *
 * Abandon and defer count as a failed delivery: on the last allowed one the
 * message is dead-lettered instead, and one whose time to live has passed
 * meanwhile expires then (dead-lettered or dropped as the queue says).
 *
 * Owns: nothing shared. Locks: the message's row lock; lease.c's partition
 * locks through its calls.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/settle.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "lease.h"
#include "storage_core.h"
#include "wait.h"

/* The valid-lock condition: $1 sequence, $2 queue, $3 subqueue, $4 token, $5 now */
#define VALID_LOCK \
	"m.sequence_number = $1 AND m.queue_id = $2 AND m.subqueue = $3" \
	" AND m.lock_token = $4 AND m.locked_until > $5"
#define VALID_LOCK_ARGS INT8OID, INT4OID, INT2OID, UUIDOID, TIMESTAMPTZOID

/* application_properties with the object param merged in at the top level */
#define MERGE_PROPS(param) \
	"CASE WHEN " param "::jsonb IS NULL THEN m.application_properties" \
	" ELSE coalesce(m.application_properties, '{}'::jsonb) || " param "::jsonb END"

/* the message of a lease: $1 sequence, $2 queue, $3 subqueue */
#define LEASED_ROW \
	"m.sequence_number = $1 AND m.queue_id = $2 AND m.subqueue = $3"
#define LEASED_ROW_ARGS INT8OID, INT4OID, INT2OID

/*
 * The settlements of locks stored in the rows return the lock's expiry: the
 * caller judges it again with a clock read after the statement, when the row
 * lock is held (the statement may have waited for it).
 */
static SbqStatement stmt_complete = {"complete", 5, {VALID_LOCK_ARGS},
	"DELETE FROM " SUBQUEUE_TABLE " m WHERE " VALID_LOCK
	" RETURNING m.locked_until"
};

static SbqStatement stmt_complete_many = {"complete many", 5, {INT8ARRAYOID, INT4OID,
		INT2OID, UUIDARRAYOID, TIMESTAMPTZOID},
	"DELETE FROM " SUBQUEUE_TABLE " m"
	" WHERE m.sequence_number = ANY($1) AND m.queue_id = $2 AND m.subqueue = $3"
	"   AND m.lock_token = ANY($4) AND m.locked_until > $5"
	" RETURNING m.lock_token, m.locked_until",
	.by_key = true
};

static SbqStatement stmt_lock_for_settle = {"lock for settle", 5, {VALID_LOCK_ARGS},
	"SELECT m.delivery_count, m.state, m.expires_at, m.locked_until FROM " SUBQUEUE_TABLE " m"
	" WHERE " VALID_LOCK " FOR UPDATE"
};

static SbqStatement stmt_renew = {"renew", 6, {VALID_LOCK_ARGS, TIMESTAMPTZOID},
	"UPDATE " SUBQUEUE_TABLE " m SET locked_until = $6 WHERE " VALID_LOCK
	" RETURNING m.locked_until"
};

static SbqStatement stmt_lease_complete = {"complete a lease", 3, {LEASED_ROW_ARGS},
	"DELETE FROM " SUBQUEUE_TABLE " m"
	" WHERE " LEASED_ROW
};

static SbqStatement stmt_lease_complete_many = {"complete many leases", 3, {INT8ARRAYOID,
		INT4OID, INT2OID},
	"DELETE FROM " SUBQUEUE_TABLE " m"
	" WHERE m.sequence_number = ANY($1) AND m.queue_id = $2 AND m.subqueue = $3"
	" RETURNING m.sequence_number",
	.by_key = true
};

static SbqStatement stmt_row_for_settle = {"lock a leased row", 3, {LEASED_ROW_ARGS},
	"SELECT m.delivery_count, m.state, m.expires_at FROM " SUBQUEUE_TABLE " m"
	" WHERE " LEASED_ROW
	" FOR UPDATE"
};

static SbqStatement stmt_row_exists = {"leased row exists", 3, {LEASED_ROW_ARGS},
	"SELECT 1 FROM " SUBQUEUE_TABLE " m"
	" WHERE " LEASED_ROW
};

/*
 * $3: the new state (deferred), or NULL to keep it; $4 the delivery count;
 * $5 when it may be received again (an abandon with a delay), or NULL: at once
 */
static SbqStatement stmt_unlock = {"unlock", 5, {INT8OID, JSONBOID, INT2OID, INT4OID,
		TIMESTAMPTZOID},
	"UPDATE " SUBQUEUE_TABLE " m SET lock_token = NULL, locked_until = $5,"
	" state = coalesce($3, m.state), delivery_count = GREATEST(m.delivery_count, $4),"
	" application_properties = " MERGE_PROPS("$2")
	" WHERE m.sequence_number = $1"
};

/* $2 reason, $3 description, $4 source, $5 properties to merge, $6 delivery count */
static SbqStatement stmt_deadletter = {"dead-letter", 6, {INT8OID, TEXTOID, TEXTOID,
		TEXTOID, JSONBOID, INT4OID},
	"WITH m AS (DELETE FROM sbq.messages m WHERE m.sequence_number = $1 RETURNING m.*)"
	" " DEAD_LETTER_INSERT_PROPS("m", "GREATEST(m.delivery_count, $6)", "$2", "$3",
								 "$4", MERGE_PROPS("$5"))
	, .old_sql =
	"UPDATE sbq.messages m SET subqueue = 1, state = 0, lock_token = NULL,"
	" locked_until = NULL, dead_letter_reason = $2,"
	" dead_letter_error_description = $3, dead_letter_source = $4,"
	" application_properties = " MERGE_PROPS("$5") ","
	" delivery_count = GREATEST(m.delivery_count, $6)"
	" WHERE m.sequence_number = $1"
};

/*
 * The sizes of the message seq before and after props_to_modify ($2) is
 * merged in: its body, its system properties but message_id and
 * content_type, its message_id and content_type, and its application
 * properties as they are and merged.
 */
static SbqStatement stmt_grown_size = {"size after properties_to_modify", 2, {INT8OID, JSONBOID},
	"SELECT octet_length(m.body),"
	" coalesce(octet_length(m.session_id), 0)"
	" + coalesce(octet_length(m.correlation_id), 0) + coalesce(octet_length(m.subject), 0)"
	" + coalesce(octet_length(m.reply_to), 0)"
	" + coalesce(octet_length(m.reply_to_session_id), 0)"
	" + coalesce(octet_length(m.to_address), 0),"
	" m.message_id, m.content_type, m.application_properties,"
	" " MERGE_PROPS("$2")
	" FROM " SUBQUEUE_TABLE " m WHERE m.sequence_number = $1"
};

static SbqStatement stmt_delete_one = {"delete one", 1, {INT8OID},
	"DELETE FROM sbq.messages WHERE sequence_number = $1"
};

/*
 * sbq_row_lock_valid
 *		Whether a lock stored in a row, whose expiry a settling statement
 *		returned, is still valid by a clock read now: after that statement,
 *		so after it held the row lock, which it may have waited for while
 *		the lock ran out (and a leasing receive took the message over).
 */
static bool
sbq_row_lock_valid(Datum locked_until)
{
	return DatumGetTimestampTz(locked_until) > GetCurrentTimestamp();
}

static void
sbq_lock_args(Datum *values, const SbqQueue *queue, int16 subqueue,
			  const pg_uuid_t *token, TimestampTz now)
{
	values[0] = Int64GetDatum(sbq_token_sequence(token));
	values[1] = Int32GetDatum(queue->queue_id);
	values[2] = Int16GetDatum(subqueue);
	values[3] = UUIDPGetDatum(token);
	values[4] = TimestampTzGetDatum(now);
}

/*
 * sbq_storage_complete
 *		Remove the message locked by token; false when the lock is not valid.
 */
bool
sbq_storage_complete(const SbqQueue *queue, int16 subqueue, const pg_uuid_t *token)
{
	Datum		values[5];
	SbqCounts	counts = {0};
	TimestampTz now = GetCurrentTimestamp();
	int64		seq = sbq_token_sequence(token);

	if (sbq_lease_holds(seq, token, queue->queue_id, subqueue, now))
	{
		int32		delivery_count;

		/* the row lock orders us after another settler of the same token */
		values[0] = Int64GetDatum(seq);
		values[1] = Int32GetDatum(queue->queue_id);
		values[2] = Int16GetDatum(subqueue);
		if (sbq_exec_in(&stmt_lease_complete, subqueue, values, NULL) != 1 ||
			!sbq_lease_settle(seq, token, queue->queue_id, subqueue, GetCurrentTimestamp(),
							  true, &delivery_count))
			return false;		/* the caller's error undoes the delete */
		counts.received = 1;
	}
	else
	{
		bool		isnull;

		sbq_lock_args(values, queue, subqueue, token, now);
		if (sbq_exec_in(&stmt_complete, subqueue, values, NULL) != 1)
			return false;
		/* judged again now that the row is ours (the delete may have waited) */
		if (!sbq_row_lock_valid(sbq_col(0, 1, &isnull)))
			return false;		/* the caller's error undoes the delete */
	}
	counts.completed = 1;
	sbq_add_counts(queue->queue_id, &counts);
	return true;
}

/* The tokens of one sbq_storage_complete_many call, split by kind of lock. */
typedef struct SbqTokenSplit
{
	Datum	   *tokens;
	int			ntokens;
	bool	   *leased;			/* leased[i]: token i holds a lease */
	Datum	   *lease_seqs;		/* the messages of the leases ... */
	int		   *lease_index;	/* ... and their tokens' places */
	int			nlease;
	Datum	   *row_seqs;		/* the messages of the locks in rows ... */
	Datum	   *row_tokens;		/* ... and their tokens */
	int			nrow;
} SbqTokenSplit;

static void
sbq_split_tokens(const SbqQueue *queue, int16 subqueue, Datum *tokens, int ntokens,
				 TimestampTz now, SbqTokenSplit *t)
{
	int			i;

	t->tokens = tokens;
	t->ntokens = ntokens;
	t->leased = palloc(sizeof(bool) * ntokens);
	t->lease_seqs = palloc(sizeof(Datum) * ntokens);
	t->lease_index = palloc(sizeof(int) * ntokens);
	t->row_seqs = palloc(sizeof(Datum) * ntokens);
	t->row_tokens = palloc(sizeof(Datum) * ntokens);
	t->nlease = 0;
	t->nrow = 0;
	for (i = 0; i < ntokens; i++)
	{
		pg_uuid_t  *token = DatumGetUUIDP(tokens[i]);
		int64		seq = sbq_token_sequence(token);

		CHECK_FOR_INTERRUPTS();

		t->leased[i] = sbq_lease_holds(seq, token, queue->queue_id, subqueue, now);
		if (t->leased[i])
		{
			t->lease_index[t->nlease] = i;
			t->lease_seqs[t->nlease++] = Int64GetDatum(seq);
		}
		else
		{
			t->row_seqs[t->nrow] = Int64GetDatum(seq);
			t->row_tokens[t->nrow++] = tokens[i];
		}
	}
}

/* $1 the sequence numbers, $2 the queue, $3 the sub-queue, of a batch complete */
static void
sbq_batch_args(Datum *values, Datum *seqs, int n, const SbqQueue *queue, int16 subqueue)
{
	values[0] = PointerGetDatum(construct_array(seqs, n, INT8OID, sizeof(int64),
												FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[1] = Int32GetDatum(queue->queue_id);
	values[2] = Int16GetDatum(subqueue);
}

/* Complete the leased messages of t (some); marks settled[]; returns how many. */
static int
sbq_complete_leases(const SbqQueue *queue, int16 subqueue, const SbqTokenSplit *t,
					bool *settled)
{
	Datum		values[3];
	uint64		rows;
	uint64		row;
	int			n = 0;

	sbq_batch_args(values, t->lease_seqs, t->nlease, queue, subqueue);
	rows = sbq_exec_in(&stmt_lease_complete_many, subqueue, values, NULL);
	for (row = 0; row < rows; row++)
	{
		bool		isnull;
		int64		seq = DatumGetInt64(sbq_col(row, 1, &isnull));
		int			k;

		CHECK_FOR_INTERRUPTS();

		for (k = 0; k < t->nlease; k++)
		{
			int			i = t->lease_index[k];
			int32		delivery_count;

			if (DatumGetInt64(t->lease_seqs[k]) == seq &&
				sbq_lease_settle(seq, DatumGetUUIDP(t->tokens[i]), queue->queue_id,
								 subqueue, GetCurrentTimestamp(), true, &delivery_count))
			{
				settled[i] = true;
				n++;
			}
		}
	}
	return n;
}

/* Complete the messages of t locked in rows (some); marks settled[]; returns how many. */
static int
sbq_complete_row_locks(const SbqQueue *queue, int16 subqueue, const SbqTokenSplit *t,
					   TimestampTz now, bool *settled)
{
	Datum		values[5];
	uint64		rows;
	uint64		row;
	int			n = 0;

	sbq_batch_args(values, t->row_seqs, t->nrow, queue, subqueue);
	values[3] = PointerGetDatum(construct_array(t->row_tokens, t->nrow, UUIDOID,
												UUID_LEN, false, TYPALIGN_CHAR));
	values[4] = TimestampTzGetDatum(now);
	rows = sbq_exec_in(&stmt_complete_many, subqueue, values, NULL);
	for (row = 0; row < rows; row++)
	{
		bool		isnull;
		pg_uuid_t  *done = DatumGetUUIDP(sbq_col(row, 1, &isnull));
		int			i;

		CHECK_FOR_INTERRUPTS();

		/* judged again now that the row is ours: else not settled */
		if (!sbq_row_lock_valid(sbq_col(row, 2, &isnull)))
			continue;
		for (i = 0; i < t->ntokens; i++)
			if (!t->leased[i] &&
				memcmp(done->data, DatumGetUUIDP(t->tokens[i])->data, UUID_LEN) == 0)
			{
				settled[i] = true;
				n++;
			}
	}
	return n;
}

/*
 * sbq_storage_complete_many
 *		Remove the messages locked by tokens (distinct, checked by the caller).
 *		settled[i] tells whether token i was valid; returns how many were.
 *		The caller raises an error unless all were, which undoes the rest.
 */
int
sbq_storage_complete_many(const SbqQueue *queue, int16 subqueue,
						  Datum *tokens, int ntokens, bool *settled)
{
	SbqTokenSplit t;
	SbqCounts	counts = {0};
	TimestampTz now = GetCurrentTimestamp();
	int			nleases;
	int			n;
	int			i;

	for (i = 0; i < ntokens; i++)
		settled[i] = false;
	sbq_split_tokens(queue, subqueue, tokens, ntokens, now, &t);
	nleases = t.nlease > 0 ? sbq_complete_leases(queue, subqueue, &t, settled) : 0;
	n = nleases;
	if (t.nrow > 0)
		n += sbq_complete_row_locks(queue, subqueue, &t, now, settled);
	if (n == ntokens)
	{
		counts.received = nleases;
		counts.completed = n;
		sbq_add_counts(queue->queue_id, &counts);
	}
	return n;
}

/*
 * For sbq_storage_complete_each: the rows of leased messages, and the rows
 * whose stored lock is one of the tokens, locked in sequence order (two
 * callers lock what they share in the same order); then the delete of the
 * messages judged settled. $1 sequence numbers, $2 queue, $3 sub-queue, $4
 * tokens, $5 now.
 */
static SbqStatement stmt_lock_leased_rows = {"lock leased rows", 3, {INT8ARRAYOID, INT4OID,
		INT2OID},
	"SELECT m.sequence_number FROM " SUBQUEUE_TABLE " m"
	" WHERE m.sequence_number = ANY($1) AND m.queue_id = $2 AND m.subqueue = $3"
	" ORDER BY m.sequence_number FOR UPDATE",
	.by_key = true
};

static SbqStatement stmt_lock_locked_rows = {"lock rows of locks", 5, {INT8ARRAYOID, INT4OID,
		INT2OID, UUIDARRAYOID, TIMESTAMPTZOID},
	"SELECT m.sequence_number, m.lock_token, m.locked_until FROM " SUBQUEUE_TABLE " m"
	" WHERE m.sequence_number = ANY($1) AND m.queue_id = $2 AND m.subqueue = $3"
	"   AND m.lock_token = ANY($4) AND m.locked_until > $5"
	" ORDER BY m.sequence_number FOR UPDATE",
	.by_key = true
};

static SbqStatement stmt_delete_settled = {"delete settled", 3, {INT8ARRAYOID, INT4OID, INT2OID},
	"DELETE FROM " SUBQUEUE_TABLE " m"
	" WHERE m.sequence_number = ANY($1) AND m.queue_id = $2 AND m.subqueue = $3",
	.by_key = true
};

/*
 * sbq_storage_complete_each
 *		Remove the messages locked by those of tokens (distinct, checked by
 *		the caller) that are valid, and only those: each message's row is
 *		locked and its lock judged (a lease settled, a stored lock checked by
 *		a clock read after the row lock) before any row is deleted, so a
 *		token that is not valid leaves nothing to undo. settled[i] tells
 *		whether token i was valid; returns how many were.
 */
int
sbq_storage_complete_each(const SbqQueue *queue, int16 subqueue, Datum *tokens, int ntokens,
						  bool *settled)
{
	SbqTokenSplit t;
	SbqCounts	counts = {0};
	TimestampTz now = GetCurrentTimestamp();
	Datum		values[5];
	Datum	   *doomed = palloc(sizeof(Datum) * Max(ntokens, 1));
	int			ndoomed = 0;
	uint64		rows;
	uint64		row;
	int			i;
	int			k;

	for (i = 0; i < ntokens; i++)
		settled[i] = false;
	sbq_split_tokens(queue, subqueue, tokens, ntokens, now, &t);
	if (t.nlease > 0)
	{
		bool	   *there = palloc0(sizeof(bool) * t.nlease);

		sbq_batch_args(values, t.lease_seqs, t.nlease, queue, subqueue);
		rows = sbq_exec_in(&stmt_lock_leased_rows, subqueue, values, NULL);
		for (row = 0; row < rows; row++)
		{
			bool		isnull;
			int64		seq = DatumGetInt64(sbq_col(row, 1, &isnull));

			for (k = 0; k < t.nlease; k++)
				if (DatumGetInt64(t.lease_seqs[k]) == seq)
					there[k] = true;
		}
		/* the rows are ours: a lease still valid now is settled here */
		for (k = 0; k < t.nlease; k++)
		{
			int			idx = t.lease_index[k];
			int32		delivery_count;

			CHECK_FOR_INTERRUPTS();
			if (there[k] &&
				sbq_lease_settle(DatumGetInt64(t.lease_seqs[k]), DatumGetUUIDP(tokens[idx]),
								 queue->queue_id, subqueue, GetCurrentTimestamp(), true,
								 &delivery_count))
			{
				settled[idx] = true;
				doomed[ndoomed++] = t.lease_seqs[k];
				counts.received++;
			}
		}
	}
	if (t.nrow > 0)
	{
		sbq_batch_args(values, t.row_seqs, t.nrow, queue, subqueue);
		values[3] = PointerGetDatum(construct_array(t.row_tokens, t.nrow, UUIDOID,
													UUID_LEN, false, TYPALIGN_CHAR));
		values[4] = TimestampTzGetDatum(now);
		rows = sbq_exec_in(&stmt_lock_locked_rows, subqueue, values, NULL);
		for (row = 0; row < rows; row++)
		{
			bool		isnull;
			Datum		seq = sbq_col(row, 1, &isnull);
			pg_uuid_t  *locked = DatumGetUUIDP(sbq_col(row, 2, &isnull));

			CHECK_FOR_INTERRUPTS();
			/* judged again now that the row is ours (the lock may have waited) */
			if (!sbq_row_lock_valid(sbq_col(row, 3, &isnull)))
				continue;
			for (i = 0; i < ntokens; i++)
				if (!t.leased[i] && !settled[i] &&
					memcmp(locked->data, DatumGetUUIDP(tokens[i])->data, UUID_LEN) == 0)
				{
					settled[i] = true;
					doomed[ndoomed++] = seq;
				}
		}
	}
	if (ndoomed > 0)
	{
		sbq_batch_args(values, doomed, ndoomed, queue, subqueue);
		(void) sbq_exec_in(&stmt_delete_settled, subqueue, values, NULL);
		counts.completed = ndoomed;
		sbq_add_counts(queue->queue_id, &counts);
	}
	return ndoomed;
}

/*
 * sbq_settle_lock
 *		Lock the message of token for a settlement that keeps it (abandon,
 *		defer, dead-letter): its row locked, its lease (if the lock is one)
 *		being settled. Fills in its delivery count, its state, and whether its
 *		time to live has passed; *leased says the lock was a lease (the
 *		delivery ends now, for the "received" counter). False when the lock
 *		is not valid.
 */
static bool
sbq_settle_lock(const SbqQueue *queue, int16 subqueue, const pg_uuid_t *token,
				TimestampTz now, int32 *delivery_count, int16 *state, bool *expired,
				bool *leased)
{
	Datum		values[5];
	int64		seq = sbq_token_sequence(token);
	bool		isnull;
	Datum		expires_at;

	*leased = sbq_lease_holds(seq, token, queue->queue_id, subqueue, now);
	if (*leased)
	{
		values[0] = Int64GetDatum(seq);
		values[1] = Int32GetDatum(queue->queue_id);
		values[2] = Int16GetDatum(subqueue);
		if (sbq_exec_in(&stmt_row_for_settle, subqueue, values, NULL) != 1)
			return false;
	}
	else
	{
		sbq_lock_args(values, queue, subqueue, token, now);
		if (sbq_exec_in(&stmt_lock_for_settle, subqueue, values, NULL) != 1 ||
			!sbq_row_lock_valid(sbq_col(0, 4, &isnull)))
			return false;
	}
	*delivery_count = DatumGetInt32(sbq_col(0, 1, &isnull));
	*state = DatumGetInt16(sbq_col(0, 2, &isnull));
	expires_at = sbq_col(0, 3, &isnull);
	*expired = !isnull && DatumGetTimestampTz(expires_at) <= now;
	/* judged by a clock read now that the row is ours (the lock may have waited) */
	if (*leased &&
		!sbq_lease_settle(seq, token, queue->queue_id, subqueue, GetCurrentTimestamp(),
						  false, delivery_count))
		return false;
	return true;
}

/*
 * sbq_check_grown_size
 *		SB007 when merging props_to_modify into the (locked) message seq would
 *		make it grow too large for the queue: its properties more than
 *		SBQ_MAX_PROPERTIES_SIZE, or it all more than max_message_size, counted
 *		as a send counts them (a message id of the form sbqueue makes up and
 *		the content type sbqueue gives a text or JSON body left out). A merge
 *		that does not make the message larger is let through, so a message
 *		over a limit lowered since can still be settled. The error undoes the
 *		settlement with the caller's statement: the lock stays as it was.
 */
static void
sbq_check_grown_size(const SbqQueue *queue, int16 subqueue, int64 seq, Jsonb *props_to_modify)
{
	Datum		values[2];
	bool		isnull;
	Datum		d;
	int64		body;
	int64		fixed;
	int64		before = 0;
	int64		after;
	int64		limit;
	Jsonb	   *original;
	Jsonb	   *merged;
	char		what[64];

	if (props_to_modify == NULL)
		return;
	values[0] = Int64GetDatum(seq);
	values[1] = PointerGetDatum(props_to_modify);
	if (sbq_exec_in(&stmt_grown_size, subqueue, values, NULL) != 1)
		elog(ERROR, "message " INT64_FORMAT " vanished", seq);
	body = DatumGetInt32(sbq_col(0, 1, &isnull));
	fixed = DatumGetInt32(sbq_col(0, 2, &isnull));
	d = sbq_col(0, 3, &isnull);
	if (!isnull)
	{
		text	   *id = DatumGetTextPP(d);

		if (!sbq_made_up_message_id(VARDATA_ANY(id), VARSIZE_ANY_EXHDR(id)))
			fixed += VARSIZE_ANY_EXHDR(id);
	}
	d = sbq_col(0, 4, &isnull);
	if (!isnull)
	{
		char	   *ct = TextDatumGetCString(d);

		if (strcmp(ct, SBQ_CONTENT_TYPE_TEXT) != 0 && strcmp(ct, SBQ_CONTENT_TYPE_JSON) != 0)
			fixed += strlen(ct);
	}
	/* the application properties as printed, counted no further than needed */
	limit = Max(SBQ_MAX_PROPERTIES_SIZE, (int64) queue->max_message_size);
	d = sbq_col(0, 5, &isnull);
	original = isnull ? NULL : DatumGetJsonbP(d);
	d = sbq_col(0, 6, &isnull);
	merged = isnull ? NULL : DatumGetJsonbP(d);
	/*
	 * Nothing changes (an empty object, or the values it has), byte for byte:
	 * jsonb equality takes 0 and 0.000 for one value, which print apart.
	 */
	if (merged == NULL ||
		(original != NULL && VARSIZE(original) == VARSIZE(merged) &&
		 memcmp(original, merged, VARSIZE(original)) == 0))
		return;
	if (original != NULL)
		before = sbq_jsonb_text_size(original, limit);
	after = sbq_jsonb_text_size(merged, limit);
	/* no larger: passes (past the limit, both are cut at it: not known) */
	if (after <= before && after <= limit)
		return;
	snprintf(what, sizeof(what), "message " INT64_FORMAT " with properties_to_modify", seq);
	sbq_check_message_size(queue, body, fixed + after, what);
}

/*
 * sbq_move_to_dlq
 *		Move the (locked) message seq to the dead-letter sub-queue with a
 *		reason and description (either may be NULL), merging props_to_modify
 *		into its application properties and keeping the higher of its stored
 *		and given delivery count.
 */
static void
sbq_move_to_dlq(const SbqQueue *queue, int64 seq, text *reason, text *description,
				Jsonb *props_to_modify, int32 delivery_count)
{
	Datum		values[6];
	bool		nulls[6] = {false, false, false, false, false, false};

	sbq_check_grown_size(queue, SBQ_SUBQUEUE_MAIN, seq, props_to_modify);
	values[0] = Int64GetDatum(seq);
	values[1] = PointerGetDatum(reason);
	nulls[1] = reason == NULL;
	values[2] = PointerGetDatum(description);
	nulls[2] = description == NULL;
	values[3] = CStringGetTextDatum(queue->name);
	values[4] = PointerGetDatum(props_to_modify);
	nulls[4] = props_to_modify == NULL;
	values[5] = Int32GetDatum(delivery_count);
	(void) sbq_exec(&stmt_deadletter, values, nulls);
}

/* the longest delay a retry back-off gives, as the longest an abandon takes */
#define SBQ_MAX_BACKOFF_USECS	(365 * USECS_PER_DAY)

/*
 * sbq_retry_delay
 *		How long a message of the main queue abandoned on its delivery_count-th
 *		delivery, with no delay of its own, waits by the queue's retry
 *		back-off: retry_delay, doubled for each delivery before this one with
 *		retry_backoff, at most max_retry_delay (and a year). 0: none.
 */
static int64
sbq_retry_delay(const SbqQueue *queue, int32 delivery_count)
{
	int64		delay;
	int64		cap = SBQ_MAX_BACKOFF_USECS;
	int			i;

	if (!queue->has_retry_delay)
		return 0;
	delay = sbq_interval_usecs(&queue->retry_delay);
	if (queue->has_max_retry_delay)
		cap = Min(cap, sbq_interval_usecs(&queue->max_retry_delay));
	if (queue->retry_backoff)
		for (i = 1; i < delivery_count && delay > 0 && delay < cap; i++)
			delay *= 2;			/* below a year: cannot overflow */
	return Min(delay, cap);
}

/*
 * sbq_storage_release
 *		Abandon (state -1: keep the state) or defer (state SBQ_STATE_DEFERRED)
 *		the message locked by token: release the lock, merging
 *		props_to_modify into its application properties. Both count as a
 *		failed delivery: on the last allowed one the message is dead-lettered
 *		instead (MaxDeliveryCountExceeded), and one whose time to live has
 *		passed meanwhile expires now (dead-lettered or dropped as the queue
 *		says). In the dead-letter sub-queue there is no delivery limit and no
 *		expiry. A delay above zero keeps a released message from receives
 *		until it has passed: it is stored as a lock without a token, which no
 *		settlement can name and every receive waits out; a delay below zero
 *		(none given) is the queue's retry back-off, for an abandon in the
 *		main queue. *done (may be NULL) gets what became of the message.
 *		False when the lock is not valid.
 */
bool
sbq_storage_release(const SbqQueue *queue, int16 subqueue, const pg_uuid_t *token,
					int16 state, Jsonb *props_to_modify, int64 delay_usecs,
					SbqSettled *done)
{
	Datum		values[5];
	bool		nulls[5] = {false, false, false, false, true};
	TimestampTz now = GetCurrentTimestamp();
	int64		seq = sbq_token_sequence(token);
	bool		main = subqueue == SBQ_SUBQUEUE_MAIN;
	int32		delivery_count;
	int16		was;
	bool		expired;
	bool		leased;
	SbqCounts	counts = {0};
	SbqSettled	result;

	if (!sbq_settle_lock(queue, subqueue, token, now, &delivery_count, &was, &expired,
						 &leased))
		return false;
	counts.received = leased ? 1 : 0;

	if (state == SBQ_STATE_DEFERRED)
		counts.deferred = 1;
	else
		counts.abandoned = 1;
	result = state == SBQ_STATE_DEFERRED ? SBQ_SETTLED_DEFERRED : SBQ_SETTLED_ABANDONED;
	values[0] = Int64GetDatum(seq);
	if (main && delivery_count >= queue->max_delivery_count)
	{
		char		description[128];

		sbq_max_delivery_description(queue, description, sizeof(description));
		sbq_move_to_dlq(queue, seq, cstring_to_text(SBQ_DLQ_REASON_MAX_DELIVERY),
						cstring_to_text(description), props_to_modify, delivery_count);
		counts.dead_lettered = 1;
		result = SBQ_SETTLED_DEAD_LETTERED;
	}
	else if (main && expired && queue->dlq_on_expiration)
	{
		sbq_move_to_dlq(queue, seq, cstring_to_text(SBQ_DLQ_REASON_EXPIRED),
						cstring_to_text(SBQ_DLQ_DESCRIPTION_EXPIRED), props_to_modify,
						delivery_count);
		counts.dead_lettered = 1;
		counts.expired = 1;
		result = SBQ_SETTLED_DEAD_LETTERED;
	}
	else if (main && expired)
	{
		(void) sbq_exec(&stmt_delete_one, values, NULL);
		counts.expired = 1;
		result = SBQ_SETTLED_EXPIRED;
	}
	else
	{
		sbq_check_grown_size(queue, subqueue, seq, props_to_modify);
		values[1] = PointerGetDatum(props_to_modify);
		nulls[1] = props_to_modify == NULL;
		values[2] = Int16GetDatum(state);
		nulls[2] = state < 0;
		values[3] = Int32GetDatum(delivery_count);
		/*
		 * The back-off is for messages that receives compete for: an active
		 * one abandoned, not one deferred (abandoned, it stays deferred, and
		 * only its sequence number reaches it)
		 */
		if (delay_usecs < 0)
			delay_usecs = main && state != SBQ_STATE_DEFERRED && was == SBQ_STATE_ACTIVE ?
				sbq_retry_delay(queue, delivery_count) : 0;
		if (delay_usecs > 0)
		{
			Interval	delay = {.time = delay_usecs};

			/* from a clock read now: the statements above may have waited */
			values[4] = TimestampTzGetDatum(sbq_add_interval(GetCurrentTimestamp(), &delay));
			nulls[4] = false;
		}
		(void) sbq_exec_in(&stmt_unlock, subqueue, values, nulls);
		if (main && !nulls[4])
			sbq_qstate_row_lock(sbq_storage_epoch(), queue->queue_id);
	}
	sbq_add_counts(queue->queue_id, &counts);
	/* an abandoned message, or a new dead letter, can be received now */
	if (counts.dead_lettered > 0 ||
		(counts.expired == 0 && state != SBQ_STATE_DEFERRED && delay_usecs <= 0))
		sbq_wait_wake_at_commit(queue->queue_id);
	if (done != NULL)
		*done = result;
	return true;
}

/*
 * sbq_storage_deadletter
 *		Move the message locked by token to the dead-letter sub-queue with a
 *		reason and description; false when the lock is not valid.
 */
bool
sbq_storage_deadletter(const SbqQueue *queue, const pg_uuid_t *token,
					   text *reason, text *description, Jsonb *props_to_modify)
{
	SbqCounts	counts = {0};
	int32		delivery_count;
	int16		state;
	bool		expired;
	bool		leased;

	if (!sbq_settle_lock(queue, SBQ_SUBQUEUE_MAIN, token, GetCurrentTimestamp(),
						 &delivery_count, &state, &expired, &leased))
		return false;
	counts.received = leased ? 1 : 0;
	sbq_move_to_dlq(queue, sbq_token_sequence(token), reason, description,
					props_to_modify, delivery_count);
	counts.dead_lettered = 1;
	sbq_add_counts(queue->queue_id, &counts);
	sbq_wait_wake_at_commit(queue->queue_id);
	return true;
}

/*
 * sbq_storage_renew
 *		Extend the lock of token by the queue's lock duration from now; false
 *		when the lock is not valid.
 */
bool
sbq_storage_renew(const SbqQueue *queue, int16 subqueue, const pg_uuid_t *token,
				  TimestampTz *locked_until)
{
	Datum		values[6];
	TimestampTz now = GetCurrentTimestamp();
	bool		isnull;

	int64		seq = sbq_token_sequence(token);

	if (sbq_lease_holds(seq, token, queue->queue_id, subqueue, now))
	{
		TimestampTz until = sbq_add_interval(now, &queue->lock_duration);

		sbq_require_lock_privilege(subqueue);
		/* a lease outlives a purge of its message: the message must be there */
		values[0] = Int64GetDatum(seq);
		values[1] = Int32GetDatum(queue->queue_id);
		values[2] = Int16GetDatum(subqueue);
		if (sbq_exec_in(&stmt_row_exists, subqueue, values, NULL) != 1)
			return false;
		if (!sbq_lease_renew(seq, token, queue->queue_id, subqueue, now, until))
		{
			/*
			 * Another transaction is settling it: wait for that one (its row
			 * lock) and look again; the lease is back if it rolled back.
			 */
			if (!sbq_lease_holds(seq, token, queue->queue_id, subqueue, now) ||
				sbq_exec_in(&stmt_row_for_settle, subqueue, values, NULL) != 1)
				return false;
			now = GetCurrentTimestamp();
			until = sbq_add_interval(now, &queue->lock_duration);
			if (!sbq_lease_renew(seq, token, queue->queue_id, subqueue, now, until))
				return false;
		}
		*locked_until = until;
		return true;
	}
	/* lock the row, then judge the lock with a clock read after that */
	sbq_lock_args(values, queue, subqueue, token, now);
	if (sbq_exec_in(&stmt_lock_for_settle, subqueue, values, NULL) != 1 ||
		!sbq_row_lock_valid(sbq_col(0, 4, &isnull)))
		return false;
	now = GetCurrentTimestamp();
	sbq_lock_args(values, queue, subqueue, token, now);
	values[5] = TimestampTzGetDatum(sbq_add_interval(now, &queue->lock_duration));
	if (sbq_exec_in(&stmt_renew, subqueue, values, NULL) != 1)
		return false;
	if (subqueue == SBQ_SUBQUEUE_MAIN)
		sbq_qstate_row_lock(sbq_storage_epoch(), queue->queue_id);
	*locked_until = DatumGetTimestampTz(sbq_col(0, 1, &isnull));
	return true;
}

