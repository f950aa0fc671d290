/*-------------------------------------------------------------------------
 *
 * session.c
 *	  Sessions of the queues that require them: accepting a session (named,
 *	  or the next one with available messages), its messages in sequence
 *	  order, renewing, releasing and expiring its lock, its state, and the
 *	  bookkeeping a send does for the session it sends to.
 *
 * With sbqueue preloaded (and the SQL of 0.8 on), session locks live in
 * shared memory instead (session_mem.c): each call here hands over to it,
 * and serves a lock stored in a row only when it meets one from before a
 * restart or an update. What follows is the protocol of locks in the rows.
 *
 * A session is a row of sbq.sessions (see its comment in sql/sbqueue.sql).
 * Its lock is held while session_token is set, locked_until has not passed
 * and locked_boot is sbq_shmem_boot(), when this server's shared memory was
 * made (so a crash-restart ends every session lock). The message locks of a
 * session are stored in the message rows with locked_until 'infinity': they
 * never run out by themselves, they live under the session lock. Whatever
 * ends a session lock (release, or the expiry that the next accept,
 * maintenance or accept-next applies) clears them first, so a message lock
 * exists only under the lock that took it; and every settlement checks the
 * session lock too (sbq_storage_session_guard).
 *
 * Row locks of the session row order the parties:
 *	- a send holds it FOR KEY SHARE until commit;
 *	- a call that takes message locks under a session lock (receive,
 *	  receive of deferred messages) or changes it (renew, setting the
 *	  state) holds it FOR NO KEY UPDATE; one that only reads it (a
 *	  settlement's check, reading the state) FOR KEY SHARE; each judges the
 *	  lock with a clock read after it has the row;
 *	- taking or releasing a session lock holds it FOR NO KEY UPDATE, which
 *	  waits for the receives above (so no message lock is taken under a
 *	  lock that has ended) but not for senders or settlements (a settlement
 *	  and the end of its lock meet at the message's row lock: the one that
 *	  comes second finds the token changed);
 *	- what empties a session's ready mark (finding it empty, ending an
 *	  expired lock in accept-next or maintenance) needs it FOR UPDATE, which
 *	  also waits for senders, then looks with a fresh snapshot: a send in
 *	  flight is seen, never lost. When a sender holds it, accept-next passes
 *	  over, maintenance comes back later, and a release marks the session
 *	  ready at the back of the line (accept-next cleans that up if it turns
 *	  out empty).
 * ready_seq is the accept-next index: set by a send to an idle session that
 * has none, by a release or expiry that leaves available messages; cleared
 * when the session is taken, or when accept-next finds it empty.
 *
 * What sends, activations, resubmits and purges do to the ready marks, and
 * the list of a queue's sessions, are in session_ready.c.
 *
 * Owns: nothing shared. Locks: row locks of sbq.sessions and sbq.messages.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/session.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "access/xlog.h"
#include "qstate.h"
#include "session_mem.h"
#include "shmem.h"
#include "storage_core.h"
#include "wait.h"


/* the columns a session row is judged by */
#define SESSION_COLS \
	"s.session_key, s.session_id, s.session_token IS NOT NULL, s.locked_until," \
	" s.locked_boot, s.lock_min, s.lock_max"

/*
 * a session lock: $1 key, $2 queue, $3 token, $4 boot. Found by its key, the
 * primary key: "(s.session_token = $3) IS TRUE" keeps sessions_held_idx (by
 * queue) out of the plan, which statistics taken while few sessions were
 * held would choose, and then read every held session of the queue.
 */
#define SESSION_OF_TOKEN \
	"SELECT " SESSION_COLS " FROM sbq.sessions s" \
	" WHERE s.session_key = $1 AND s.queue_id = $2 AND (s.session_token = $3) IS TRUE" \
	"   AND s.locked_boot = $4"
#define SESSION_OF_TOKEN_ARGS {INT8OID, INT4OID, UUIDOID, TIMESTAMPTZOID}

static SbqStatement stmt_token_share = {"session of a token", 4, SESSION_OF_TOKEN_ARGS,
	SESSION_OF_TOKEN " FOR KEY SHARE"
};

static SbqStatement stmt_token_update = {"session of a token, to change", 4,
	SESSION_OF_TOKEN_ARGS,
	SESSION_OF_TOKEN " FOR NO KEY UPDATE"
};

/* $1 queue, $2 session id */
static SbqStatement stmt_for_accept = {"session to accept", 2, {INT4OID, TEXTOID},
	"SELECT " SESSION_COLS " FROM sbq.sessions s"
	" WHERE s.queue_id = $1 AND s.session_id = $2 FOR NO KEY UPDATE"
};

/*
 * $1 queue, $2 sessions passed over: the session first in line for
 * accept-next. FOR NO KEY UPDATE does not wait for (or skip) a sender's FOR
 * KEY SHARE: a session being sent to can be taken (its release will see the
 * send); only what empties its ready mark needs it alone (stmt_alone).
 */
static SbqStatement stmt_next_ready = {"next ready session", 2, {INT4OID, INT8ARRAYOID},
	"SELECT " SESSION_COLS " FROM sbq.sessions s"
	" WHERE s.queue_id = $1 AND s.ready_seq IS NOT NULL"
	"   AND NOT (s.session_key = ANY($2))"
	" ORDER BY s.queue_id, s.ready_seq LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED"
};

/* $1 key: the session row alone (no sender in flight), or no row */
static SbqStatement stmt_alone = {"session row alone", 1, {INT8OID},
	"SELECT 1 FROM sbq.sessions s WHERE s.session_key = $1 FOR UPDATE SKIP LOCKED"
};

/*
 * $1 queue, $2 now, $3 limit, $4 boot: held sessions whose lock has run out,
 * or was taken in other shared memory (before a crash or a restart), by
 * sessions_held_idx: three ranges of it, none over a lock that holds. The
 * ranges are read with the statement's snapshot: the condition is asked
 * again of the row as it is when locked (a session taken since is held).
 */
#define HELD_RANGE(cond) \
	"(SELECT h.session_key FROM sbq.sessions h" \
	"  WHERE h.queue_id = $1 AND h.session_token IS NOT NULL AND " cond " LIMIT $3)"
static SbqStatement stmt_expired = {"expired sessions", 4, {INT4OID, TIMESTAMPTZOID, INT4OID,
		TIMESTAMPTZOID},
	"SELECT " SESSION_COLS " FROM sbq.sessions s"
	" WHERE s.session_key = ANY(ARRAY("
	HELD_RANGE("h.locked_boot = $4 AND h.locked_until <= $2")
	" UNION ALL " HELD_RANGE("h.locked_boot < $4")
	" UNION ALL " HELD_RANGE("h.locked_boot > $4") "))"
	"   AND s.session_token IS NOT NULL"
	"   AND (s.locked_boot IS DISTINCT FROM $4 OR s.locked_until <= $2)"
	" LIMIT $3 FOR UPDATE SKIP LOCKED"
};

/* $1 queue, $2 session id, $3 now */
static SbqStatement stmt_available = {"session has available messages", 3,
	{INT4OID, TEXTOID, TIMESTAMPTZOID},
	"SELECT EXISTS (SELECT 1 FROM sbq.messages m"
	"  WHERE m.queue_id = $1 AND m.session_id = $2 AND m.state = 0"
	"    AND m.lock_token IS NULL AND (m.expires_at IS NULL OR m.expires_at > $3))"
};

/* $1 queue, $2 session id, $3 now */
static SbqStatement stmt_insert = {"new session", 3, {INT4OID, TEXTOID, TIMESTAMPTZOID},
	"INSERT INTO sbq.sessions (queue_id, session_id, last_updated) VALUES ($1, $2, $3)"
	" ON CONFLICT (queue_id, session_id" EK(", entity_key") ") DO NOTHING"
};

/* $1 key, $2 token, $3 locked_until, $4 boot */
static SbqStatement stmt_take = {"take a session", 4, {INT8OID, UUIDOID, TIMESTAMPTZOID,
		TIMESTAMPTZOID},
	"UPDATE sbq.sessions s SET session_token = $2, locked_until = $3, locked_boot = $4,"
	" ready_seq = NULL, lock_min = NULL, lock_max = NULL"
	" WHERE s.session_key = $1"
};

static SbqStatement stmt_not_ready = {"session not ready", 1, {INT8OID},
	"UPDATE sbq.sessions s SET ready_seq = NULL WHERE s.session_key = $1"
};

/*
 * The message locks of a session lock that ended, among the sequence
 * numbers it locked ($3 .. $4): on an expiry ($5 false) those on their last
 * allowed delivery ($6) are dead-lettered and the others released, each
 * having counted as a delivery; on a release ($5 true) they are released and
 * the delivery is not counted.
 * $1 queue, $2 session id, $3 lock_min, $4 lock_max, $5 released,
 * $6 max_delivery_count, $7 max delivery description, $8 queue name
 */
#define SESSION_LOCKED \
	"m.queue_id = $1 AND m.session_id = $2 AND m.state IN (0, 1)" \
	" AND m.sequence_number BETWEEN $3 AND $4 AND m.lock_token IS NOT NULL"

/*
 * The locked messages are found through the session index (l: ordered by
 * its key, plan_key.c), then changed by key: the range of numbers may span
 * many other queues' messages, which a walk of the primary key would read.
 */
static SbqStatement stmt_clear_locks = {"clear the message locks of a session", 8,
	{INT4OID, TEXTOID, INT8OID, INT8OID, BOOLOID, INT4OID, TEXTOID, TEXTOID},
	"WITH l AS MATERIALIZED ("
	"  SELECT m.sequence_number FROM sbq.messages m WHERE " SESSION_LOCKED
	"   ORDER BY m.queue_id, m.session_id, m.state, m.sequence_number),"
	" d AS ("
	"  DELETE FROM sbq.messages m WHERE " SESSION_LOCKED
	"     AND m.sequence_number = ANY(ARRAY(SELECT sequence_number FROM l))"
	"     AND NOT $5 AND m.delivery_count >= $6"
	"  RETURNING m.*),"
	" i AS (" DEAD_LETTER_INSERT("d", "d.delivery_count",
								 SBQ_SQL_LITERAL(SBQ_DLQ_REASON_MAX_DELIVERY), "$7", "$8") "),"
	" u AS ("
	"  UPDATE sbq.messages m SET lock_token = NULL, locked_until = NULL,"
	"         delivery_count = CASE WHEN $5 THEN m.delivery_count - 1 ELSE m.delivery_count END"
	"   WHERE " SESSION_LOCKED " AND ($5 OR m.delivery_count < $6)"
	"     AND m.sequence_number = ANY(ARRAY(SELECT sequence_number FROM l))"
	"  RETURNING 1)"
	" SELECT (SELECT count(*) FROM d)::int4, (SELECT count(*) FROM u)::int4"
};

/* $1 key, $2 queue, $3 session id: the lock gone, ready if messages wait */
static SbqStatement stmt_unhold = {"end a session lock", 3, {INT8OID, INT4OID, TEXTOID},
	"UPDATE sbq.sessions s SET session_token = NULL, locked_until = NULL,"
	" locked_boot = NULL, lock_min = NULL, lock_max = NULL,"
	" ready_seq = (SELECT m.sequence_number FROM sbq.messages m"
	"               WHERE m.queue_id = $2 AND m.session_id = $3 AND m.state = 0"
	"                 AND m.lock_token IS NULL"
	"               ORDER BY m.queue_id, m.session_id, m.state, m.sequence_number LIMIT 1)"
	" WHERE s.session_key = $1 RETURNING s.ready_seq"
};

/*
 * $1 key, $2 queue, $3 session id: the lock gone while a sender holds the
 * row (so a send in flight may be unseen): ready at the back of the line
 * when no message is seen.
 */
static SbqStatement stmt_unhold_maybe = {"end a session lock, a send in flight", 3,
	{INT8OID, INT4OID, TEXTOID},
	"UPDATE sbq.sessions s SET session_token = NULL, locked_until = NULL,"
	" locked_boot = NULL, lock_min = NULL, lock_max = NULL,"
	" ready_seq = coalesce((SELECT m.sequence_number FROM sbq.messages m"
	"               WHERE m.queue_id = $2 AND m.session_id = $3 AND m.state = 0"
	"                 AND m.lock_token IS NULL"
	"               ORDER BY m.queue_id, m.session_id, m.state, m.sequence_number LIMIT 1),"
	"             " NEXT_SEQUENCE ")"
	" WHERE s.session_key = $1 RETURNING s.ready_seq"
};

/* $1 key, $2 queue, $3 session id: a session with nothing left goes */
static SbqStatement stmt_forget = {"forget an empty session", 3, {INT8OID, INT4OID, TEXTOID},
	"DELETE FROM sbq.sessions s"
	" WHERE s.session_key = $1 AND s.state IS NULL AND s.session_token IS NULL"
	"   AND NOT EXISTS (SELECT 1 FROM sbq.messages m"
	"                    WHERE m.queue_id = $2 AND m.session_id = $3)"
};

/*
 * The head of a session after $8: up to $4 messages in sequence order that
 * are active and unlocked, waiting for rows another transaction changes
 * (only the holder changes them, and order comes first). The first $9 of
 * them whose time to live has not passed are locked and handed out; the first
 * $10 of those whose time to live has passed are dead-lettered or dropped
 * instead (the rest are passed over).
 * "last" is the last sequence number it read: the next pass reads on after
 * it, not over the index entries of the rows this one removed.
 * $1 queue, $2 session id, $3 now, $4 limit, $5 dead-letter on expiration,
 * $6 queue name, $7 the session's locked_until, $8 after, $9 how many to lock,
 * $10 how many to take off
 */
#define TAKEN_OFF \
	"ARRAY(SELECT sequence_number FROM c WHERE expired ORDER BY sequence_number LIMIT $10)"
#define SESSION_RECEIVE(extra) \
	"WITH c AS MATERIALIZED (" \
	"  SELECT m.sequence_number," \
	"         (m.expires_at IS NOT NULL AND m.expires_at <= $3) AS expired" \
	"    FROM sbq.messages m" \
	"   WHERE m.queue_id = $1 AND m.session_id = $2 AND m.state = 0" \
	"     AND m.lock_token IS NULL AND m.sequence_number > $8" extra \
	"   ORDER BY m.queue_id, m.session_id, m.state, m.sequence_number" \
	"   LIMIT $4 FOR UPDATE OF m)," \
	" l AS (" \
	"  UPDATE sbq.messages m" \
	"     SET lock_token = sbq.new_lock_token(m.sequence_number)," \
	"         locked_until = 'infinity', delivery_count = m.delivery_count + 1" \
	"   WHERE m.sequence_number = ANY(ARRAY(SELECT sequence_number FROM c WHERE NOT expired" \
	"                                        ORDER BY sequence_number LIMIT $9))" \
	"  RETURNING " MSG_COLS("m.lock_token", "$7::timestamptz", "m.delivery_count") ")," \
	" d AS (" \
	"  DELETE FROM sbq.messages m" \
	"   WHERE $5 AND m.sequence_number = ANY(" TAKEN_OFF ")" \
	"  RETURNING m.*)," \
	" di AS (" DEAD_LETTER_INSERT("d", "d.delivery_count", \
								  SBQ_SQL_LITERAL(SBQ_DLQ_REASON_EXPIRED), \
								  SBQ_SQL_LITERAL(SBQ_DLQ_DESCRIPTION_EXPIRED), "$6") ")," \
	" x AS (" \
	"  DELETE FROM sbq.messages m" \
	"   WHERE NOT $5 AND m.sequence_number = ANY(" TAKEN_OFF ")" \
	"  RETURNING 1)" \
	" SELECT l.*, s.n_dead, s.n_dropped, s.last" \
	"  FROM (SELECT (SELECT count(*) FROM d)::int4 AS n_dead," \
	"               (SELECT count(*) FROM x)::int4 AS n_dropped," \
	"               (SELECT max(sequence_number) FROM c) AS last) s" \
	"  LEFT JOIN l ON true" \
	" ORDER BY l.sequence_number"

static SbqStatement stmt_receive = {"receive in a session", 10, {INT4OID, TEXTOID,
		TIMESTAMPTZOID, INT4OID, BOOLOID, TEXTOID, TIMESTAMPTZOID, INT8OID, INT4OID, INT4OID},
	SESSION_RECEIVE("")
};

/* The same past the messages whose time to live has passed. */
static SbqStatement stmt_receive_live = {"receive in a session, live", 10, {INT4OID, TEXTOID,
		TIMESTAMPTZOID, INT4OID, BOOLOID, TEXTOID, TIMESTAMPTZOID, INT8OID, INT4OID, INT4OID},
	SESSION_RECEIVE(" AND (m.expires_at IS NULL OR m.expires_at > $3)")
};

/*
 * Deferred messages of a session by sequence number, for its holder; one
 * whose time to live has passed is not found, as without sessions.
 * $1 queue, $2 session id, $3 sequence numbers, $4 the session's locked_until,
 * $5 now
 */
static SbqStatement stmt_receive_deferred = {"receive deferred in a session", 5,
	{INT4OID, TEXTOID, INT8ARRAYOID, TIMESTAMPTZOID, TIMESTAMPTZOID},
	"WITH c AS MATERIALIZED ("
	"  SELECT m.sequence_number FROM sbq.messages m"
	"   WHERE m.sequence_number = ANY($3) AND m.queue_id = $1 AND m.session_id = $2"
	"     AND m.state = 1 AND m.lock_token IS NULL"
	"     AND (m.expires_at IS NULL OR m.expires_at > $5)"
	"   FOR UPDATE OF m)"
	" UPDATE sbq.messages m"
	"    SET lock_token = sbq.new_lock_token(m.sequence_number),"
	"        locked_until = 'infinity', delivery_count = m.delivery_count + 1"
	"  WHERE m.sequence_number = ANY(ARRAY(SELECT sequence_number FROM c))"
	" RETURNING " MSG_COLS("m.lock_token", "$4::timestamptz", "m.delivery_count"),
	.by_key = true
};

/* $1 key, $2 lowest, $3 highest sequence number locked now */
static SbqStatement stmt_lock_range = {"session lock range", 3, {INT8OID, INT8OID, INT8OID},
	"UPDATE sbq.sessions s SET lock_min = LEAST(coalesce(s.lock_min, $2), $2),"
	" lock_max = GREATEST(coalesce(s.lock_max, $3), $3)"
	" WHERE s.session_key = $1"
};

/* $1 key, $2 locked_until */
static SbqStatement stmt_renew = {"renew a session", 2, {INT8OID, TIMESTAMPTZOID},
	"UPDATE sbq.sessions s SET locked_until = $2 WHERE s.session_key = $1"
};

static SbqStatement stmt_get_state = {"session state", 1, {INT8OID},
	"SELECT s.state FROM sbq.sessions s WHERE s.session_key = $1"
};

/* $1 key, $2 state, $3 now */
static SbqStatement stmt_set_state = {"set session state", 3, {INT8OID, BYTEAOID,
		TIMESTAMPTZOID},
	"UPDATE sbq.sessions s SET state = $2, last_updated = $3 WHERE s.session_key = $1"
};

/* A session row as SESSION_COLS gives it. */
typedef struct SbqSessionRow
{
	int64		key;
	text	   *session_id;
	bool		has_token;
	TimestampTz locked_until;
	TimestampTz boot;
	bool		has_range;
	int64		lock_min;
	int64		lock_max;
} SbqSessionRow;

static void
sbq_session_row(uint64 row, SbqSessionRow *s)
{
	bool		isnull;
	bool		nmin;
	bool		nmax;

	s->key = DatumGetInt64(sbq_col(row, 1, &isnull));
	s->session_id = cstring_to_text(sbq_spi_strdup(sbq_col(row, 2, &isnull), false));
	s->has_token = DatumGetBool(sbq_col(row, 3, &isnull));
	s->locked_until = DatumGetTimestampTz(sbq_col(row, 4, &isnull));
	if (isnull)
		s->locked_until = DT_NOBEGIN;
	s->boot = DatumGetTimestampTz(sbq_col(row, 5, &isnull));
	if (isnull)
		s->boot = 0;
	s->lock_min = DatumGetInt64(sbq_col(row, 6, &nmin));
	s->lock_max = DatumGetInt64(sbq_col(row, 7, &nmax));
	s->has_range = !nmin && !nmax;
}

/* Whether a session row's lock is held now (a clock read after its row lock). */
static bool
sbq_session_row_held(const SbqSessionRow *s)
{
	return s->has_token && s->boot == sbq_shmem_boot() &&
		s->locked_until > GetCurrentTimestamp();
}

/*
 * sbq_session_clear_locks
 *		Clear the message locks of a session lock that ended (the row held
 *		FOR NO KEY UPDATE or more): counting the delivery when it expired,
 *		not when released. Returns how many messages were dead-lettered.
 */
static int
sbq_session_clear_locks(const SbqQueue *queue, const SbqSessionRow *s, bool released)
{
	Datum		values[8];
	bool		isnull;
	int			dead;
	char		desc[128];

	if (!s->has_range)
		return 0;
	sbq_max_delivery_description(queue, desc, sizeof(desc));
	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = PointerGetDatum(s->session_id);
	values[2] = Int64GetDatum(s->lock_min);
	values[3] = Int64GetDatum(s->lock_max);
	values[4] = BoolGetDatum(released);
	values[5] = Int32GetDatum(queue->max_delivery_count);
	values[6] = CStringGetTextDatum(desc);
	values[7] = CStringGetTextDatum(queue->name);
	(void) sbq_exec_latest(&stmt_clear_locks, values, NULL);
	dead = DatumGetInt32(sbq_col(0, 1, &isnull));
	if (dead > 0)
	{
		SbqCounts	counts = {0};

		counts.dead_lettered = dead;
		sbq_add_counts(queue->queue_id, &counts);
	}
	return dead;
}

/*
 * sbq_session_end_lock
 *		End the lock of a session row: clear its message locks, then mark it
 *		ready if messages wait, or forget it if nothing is left. alone says
 *		the row is held FOR UPDATE (no send in flight); without it, a session
 *		that looks empty is marked ready at the back of the line instead.
 *		Returns how many messages were dead-lettered.
 */
static int
sbq_session_end_lock(const SbqQueue *queue, const SbqSessionRow *s, bool released,
					 bool alone)
{
	Datum		values[3];
	Datum		mark;
	bool		isnull;
	int			dead = sbq_session_clear_locks(queue, s, released);

	values[0] = Int64GetDatum(s->key);
	values[1] = Int32GetDatum(queue->queue_id);
	values[2] = PointerGetDatum(s->session_id);
	(void) sbq_exec_latest(alone ? &stmt_unhold : &stmt_unhold_maybe, values, NULL);
	mark = sbq_col(0, 1, &isnull);
	if (isnull)
		(void) sbq_exec_latest(&stmt_forget, values, NULL);
	else
	{
		/* not a number this transaction took: the line's floor goes below it */
		sbq_qstate_line_lower(sbq_storage_epoch(), queue->queue_id, DatumGetInt64(mark));
		sbq_wait_wake_at_commit(queue->queue_id);
	}
	return dead;
}

/* Take a session row (locked FOR UPDATE, not held) for the caller. */
static void
sbq_session_take(const SbqQueue *queue, const SbqSessionRow *s, SbqSessionLock *out)
{
	Datum		values[4];

	out->key = s->key;
	out->session_id = text_to_cstring(s->session_id);
	sbq_make_lock_token(s->key, &out->token);
	out->locked_until = sbq_add_interval(GetCurrentTimestamp(), &queue->lock_duration);
	values[0] = Int64GetDatum(s->key);
	values[1] = UUIDPGetDatum(&out->token);
	values[2] = TimestampTzGetDatum(out->locked_until);
	values[3] = TimestampTzGetDatum(sbq_shmem_boot());
	(void) sbq_exec_latest(&stmt_take, values, NULL);
}

/*
 * sbq_session_accept_named
 *		Accept the session session_id, held by nobody, creating its row when
 *		it has none (a requester accepts its reply session before replies
 *		arrive). False when another holder has it.
 */
static bool
sbq_session_accept_named(const SbqQueue *queue, text *session_id, SbqSessionLock *out)
{
	Datum		values[3];
	SbqSessionRow s;
	int			tries;

	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = PointerGetDatum(session_id);
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
	for (tries = 0;; tries++)
	{
		if (sbq_exec_latest(&stmt_for_accept, values, NULL) == 1)
			break;
		/* no row: make one; a concurrent maker wins, and we look again */
		if (sbq_exec_latest(&stmt_insert, values, NULL) == 1 &&
			sbq_exec_latest(&stmt_for_accept, values, NULL) == 1)
			break;
		if (tries > 10)
			elog(ERROR, "session row of \"%s\" keeps changing", text_to_cstring(session_id));
	}
	sbq_session_row(0, &s);
	if (sbq_session_row_held(&s))
		return false;
	/* a lock that ran out (or a crash ended): its deliveries count */
	if (s.has_token)
		(void) sbq_session_clear_locks(queue, &s, false);
	sbq_session_take(queue, &s, out);
	return true;
}

/*
 * sbq_session_expire_all
 *		End up to limit session locks stored in the rows of a queue that ran
 *		out (each message lock under them counts as a delivery). Returns how
 *		many. (Those in shared memory: sbq_mem_expire, for all queues.)
 */
int
sbq_session_expire_all(const SbqQueue *queue, TimestampTz now, int limit,
					   int64 *dead_lettered)
{
	Datum		values[4];
	uint64		n;
	uint64		i;
	SbqSessionRow *rows;
	int			ended = 0;

	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = TimestampTzGetDatum(now);
	values[2] = Int32GetDatum(limit);
	values[3] = TimestampTzGetDatum(sbq_shmem_boot());
	n = sbq_exec_latest(&stmt_expired, values, NULL);
	if (n == 0)
		return 0;
	rows = palloc(sizeof(SbqSessionRow) * n);
	for (i = 0; i < n; i++)
		sbq_session_row(i, &rows[i]);
	for (i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		/* taken again since the look (the row as locked says so): not ours */
		if (sbq_session_row_held(&rows[i]))
			continue;
		*dead_lettered += sbq_session_end_lock(queue, &rows[i], false, true);
		ended++;
	}
	pfree(rows);
	return ended;
}

/* $1 key */
static SbqStatement stmt_row_by_key = {"session row by key", 1, {INT8OID},
	"SELECT " SESSION_COLS " FROM sbq.sessions s WHERE s.session_key = $1 FOR NO KEY UPDATE"
};

/*
 * sbq_session_row_end_stale
 *		For session_mem.c, meeting a lock stored in the row of session key:
 *		true when it holds (taken before an update, in this server's shared
 *		memory's time); else it is ended, its messages' locks counted as
 *		deliveries, as an expiry does.
 */
bool
sbq_session_row_end_stale(const SbqQueue *queue, int64 key)
{
	Datum		k = Int64GetDatum(key);
	SbqSessionRow s;

	if (sbq_exec_latest(&stmt_row_by_key, &k, NULL) != 1)
		return false;
	sbq_session_row(0, &s);
	if (sbq_session_row_held(&s))
		return true;
	if (s.has_token)
		(void) sbq_session_end_lock(queue, &s, false,
									sbq_exec_latest(&stmt_alone, &k, NULL) == 1);
	return false;
}

/*
 * How many candidates one accept-next passes over (their rows busy with a
 * sender) before it gives up this round.
 */
#define SBQ_ACCEPT_NEXT_LOOKS	1000

/*
 * sbq_session_accept_next
 *		Accept the unheld session whose oldest available message is oldest.
 *		Sessions whose lock ran out are ended first (a few, the rest are
 *		maintenance's); then the ready index is walked: a candidate held
 *		again or found empty leaves it, which makes way and counts against
 *		no limit (sessions whose messages all expired, by the thousand, are
 *		walked through); only those passed over do.
 */
static bool
sbq_session_accept_next(const SbqQueue *queue, SbqSessionLock *out)
{
	Datum		values[3];
	int64		dead = 0;
	int64	   *passed = palloc(sizeof(int64) * SBQ_ACCEPT_NEXT_LOOKS);
	int			npassed = 0;
	int			looks;

	/* scheduled messages that came due join their sessions (send.c) */
	(void) sbq_activate_due(queue, GetCurrentTimestamp(), SBQ_MAINTAIN_BATCH, false);
	(void) sbq_session_expire_all(queue, GetCurrentTimestamp(), 16, &dead);
	/* (and a bound on the whole walk, should a look ever make no way) */
	for (looks = 0; npassed < SBQ_ACCEPT_NEXT_LOOKS && looks < 100 * SBQ_ACCEPT_NEXT_LOOKS; looks++)
	{
		SbqSessionRow s;
		Datum		key;
		bool		isnull;

		CHECK_FOR_INTERRUPTS();
		values[0] = Int32GetDatum(queue->queue_id);
		values[1] = sbq_int8_array(passed, npassed);
		if (sbq_exec_latest(&stmt_next_ready, values, NULL) != 1)
			return false;
		sbq_session_row(0, &s);
		key = Int64GetDatum(s.key);
		if (!sbq_session_row_held(&s) && !s.has_token)
		{
			values[1] = PointerGetDatum(s.session_id);
			values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
			(void) sbq_exec_latest(&stmt_available, values, NULL);
			if (DatumGetBool(sbq_col(0, 1, &isnull)))
			{
				sbq_session_take(queue, &s, out);
				return true;
			}
		}

		/*
		 * Held again, its lock expired, or nothing available: its ready mark
		 * changes, which needs the row alone (a send in flight is waited for
		 * by whatever empties the mark); when a sender holds it, pass over.
		 */
		if (sbq_exec_latest(&stmt_alone, &key, NULL) != 1)
		{
			passed[npassed++] = s.key;
			continue;
		}
		if (sbq_session_row_held(&s))
			/* its holder sees the new messages; its release marks it again */
			(void) sbq_exec_latest(&stmt_not_ready, &key, NULL);
		else if (s.has_token)
			(void) sbq_session_end_lock(queue, &s, false, true);
		else
		{
			Datum		fv[3];

			/* emptied: a fresh look under the row alone, then not ready */
			(void) sbq_exec_latest(&stmt_available, values, NULL);
			if (DatumGetBool(sbq_col(0, 1, &isnull)))
			{
				sbq_session_take(queue, &s, out);
				return true;
			}
			(void) sbq_exec_latest(&stmt_not_ready, &key, NULL);
			fv[0] = key;
			fv[1] = Int32GetDatum(queue->queue_id);
			fv[2] = PointerGetDatum(s.session_id);
			(void) sbq_exec_latest(&stmt_forget, fv, NULL);
		}
	}
	return false;
}

/* Whether the installed SQL has sessions. */
bool
sbq_storage_sessions_available(void)
{
	return sbq_sessions_installed();
}

/*
 * sbq_storage_accept_session
 *		Accept a session: session_id, or the next one with available
 *		messages when NULL.
 */
SbqAcceptResult
sbq_storage_accept_session(const SbqQueue *queue, text *session_id, SbqSessionLock *out)
{
	out->in_memory = sbq_session_locks_in_memory();
	if (out->in_memory)
		return sbq_mem_accept(queue, session_id, out);
	if (session_id != NULL)
		return sbq_session_accept_named(queue, session_id, out) ?
			SBQ_ACCEPT_OK : SBQ_ACCEPT_HELD;
	return sbq_session_accept_next(queue, out) ? SBQ_ACCEPT_OK : SBQ_ACCEPT_NONE;
}

/*
 * sbq_session_lookup
 *		The session lock token holds on queue, with its row locked in the
 *		statement's mode (and the row into *row when not NULL); false when it
 *		is not a valid lock now.
 */
static bool
sbq_session_lookup(SbqStatement *st, const SbqQueue *queue, const pg_uuid_t *token,
				   SbqSessionLock *out, SbqSessionRow *row)
{
	Datum		values[4];
	SbqSessionRow s;

	values[0] = Int64GetDatum(sbq_token_sequence(token));
	values[1] = Int32GetDatum(queue->queue_id);
	values[2] = UUIDPGetDatum(token);
	values[3] = TimestampTzGetDatum(sbq_shmem_boot());
	if (sbq_exec_latest(st, values, NULL) != 1)
		return false;
	sbq_session_row(0, &s);
	out->in_memory = false;
	out->key = s.key;
	out->token = *token;
	out->session_id = text_to_cstring(s.session_id);
	out->locked_until = s.locked_until;
	if (row != NULL)
		*row = s;
	return sbq_session_row_held(&s);
}

/*
 * sbq_storage_session_held: the session lock of token, held FOR NO KEY
 * UPDATE, for a receive under it
 */
bool
sbq_storage_session_held(const SbqQueue *queue, const pg_uuid_t *token, SbqSessionLock *out)
{
	SbqSessionLease sl;

	if (sbq_session_locks_in_memory() && sbq_mem_lookup(queue, token, true, out, &sl))
	{
		out->in_memory = true;
		return true;
	}
	return sbq_session_lookup(&stmt_token_update, queue, token, out, NULL);
}

/* Widen the range of sequence numbers the session lock has locked. */
static void
sbq_session_note_locked(const SbqSessionLock *lock)
{
	Datum		values[3];
	int64		lo = PG_INT64_MAX;
	int64		hi = PG_INT64_MIN;
	uint64		row;

	for (row = 0; row < SPI_processed; row++)
	{
		bool		isnull;
		Datum		seq = sbq_col(row, 1, &isnull);

		if (isnull)
			continue;
		lo = Min(lo, DatumGetInt64(seq));
		hi = Max(hi, DatumGetInt64(seq));
	}
	if (lo > hi)
		return;
	values[0] = Int64GetDatum(lock->key);
	values[1] = Int64GetDatum(lo);
	values[2] = Int64GetDatum(hi);
	(void) sbq_exec(&stmt_lock_range, values, NULL);
}

/*
 * sbq_storage_receive_session
 *		Lock up to max_messages of the session's messages in sequence order
 *		under lock (held FOR NO KEY UPDATE by the caller) into tupstore.
 */
SbqReceiveResult
sbq_storage_receive_session(const SbqQueue *queue, const SbqSessionLock *lock,
							int max_messages, Tuplestorestate *tupstore, TupleDesc tupdesc)
{
	SbqReceiveResult r = {0};
	Datum		values[10];
	SbqCounts	counts = {0};
	TimestampTz start = GetCurrentTimestamp();
	TimestampTz now = start;
	int			window = 0;

	if (lock->in_memory)
	{
		(void) sbq_mem_receive(queue, lock, NULL, 0, max_messages, tupstore, tupdesc, &r,
							   NULL);
		return r;
	}
	(void) sbq_activate_due(queue, now, SBQ_MAINTAIN_BATCH, false);
	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = CStringGetTextDatum(lock->session_id);
	values[4] = BoolGetDatum(queue->dlq_on_expiration);
	values[5] = CStringGetTextDatum(queue->name);
	values[6] = TimestampTzGetDatum(lock->locked_until);
	values[7] = Int64GetDatum(PG_INT64_MIN);

	/*
	 * Passes, each reading on after the last: messages whose time to live has
	 * passed are taken off on the way (up to SBQ_MAX_CLEARED in a
	 * transaction, then read past: none is ever handed out, so order holds),
	 * in a window that doubles while the head holds nothing else. It stops
	 * once half of what was left of the session lock at its start has
	 * passed: every lock it hands out ends with it.
	 */
	while (r.delivered < max_messages && !sbq_lock_half_gone(start, lock->locked_until, now))
	{
		bool		past = sbq_cleared_in_xact() >= SBQ_MAX_CLEARED;
		int			want = max_messages - r.delivered;
		int			dead;
		int			dropped;
		int			got;
		bool		isnull;
		Datum		last;
		uint64		n;

		CHECK_FOR_INTERRUPTS();
		window = window == 0 ? want : Min(window * 2, want + SBQ_SESSION_WINDOW);
		if (!past)
			window = Min(window, Max(want, (int) (SBQ_MAX_CLEARED - sbq_cleared_in_xact())));
		values[2] = TimestampTzGetDatum(now);
		values[3] = Int32GetDatum(window);
		values[8] = Int32GetDatum(want);
		values[9] = Int32GetDatum((int32) Max(SBQ_MAX_CLEARED - sbq_cleared_in_xact(), 0));
		n = sbq_exec(past ? &stmt_receive_live : &stmt_receive, values, NULL);
		if (n == 0)
			break;
		dead = DatumGetInt32(sbq_col(0, SBQ_MESSAGE_NATTS + 1, &isnull));
		dropped = DatumGetInt32(sbq_col(0, SBQ_MESSAGE_NATTS + 2, &isnull));
		last = sbq_col(0, SBQ_MESSAGE_NATTS + 3, &isnull);
		if (!isnull)
			values[7] = Int64GetDatum(DatumGetInt64(last));	/* a copy: the rows go */
		got = sbq_put_message_rows(tupstore, tupdesc, NULL, 0, 0);
		if (got > 0)
			sbq_session_note_locked(lock);
		SPI_freetuptable(SPI_tuptable);
		r.delivered += got;
		r.expired_dead_lettered += dead;
		r.expired_dropped += dropped;
		sbq_cleared_add(dead + dropped);
		/* the head had no more, or nothing in the way */
		if (isnull || dead + dropped == 0)
			break;
		now = GetCurrentTimestamp();
	}
	counts.received = r.delivered;
	counts.dead_lettered = r.expired_dead_lettered;
	counts.expired = r.expired_dead_lettered + r.expired_dropped;
	if (counts.received + counts.expired > 0)
		sbq_add_counts(queue->queue_id, &counts);
	return r;
}

/*
 * sbq_storage_receive_deferred_session
 *		Lock the session's deferred messages seqs (distinct) under lock, all
 *		or none: false, with *missing naming one that is not a deferred
 *		message of the session free to lock.
 */
bool
sbq_storage_receive_deferred_session(const SbqQueue *queue, SbqSessionLock *lock,
									 Datum *seqs, int nseqs, Tuplestorestate *tupstore,
									 TupleDesc tupdesc, int64 *missing)
{
	Datum		values[5];
	SbqCounts	counts = {0};
	uint64		n;

	if (lock->in_memory)
	{
		int64	   *s = palloc(sizeof(int64) * nseqs);
		SbqReceiveResult r;
		int			i;

		for (i = 0; i < nseqs; i++)
			s[i] = DatumGetInt64(seqs[i]);
		if (sbq_mem_receive(queue, lock, s, nseqs, nseqs, tupstore, tupdesc, &r, missing))
			return true;
		lock->session_id = sbq_mem_session_id(lock->key);
		return false;
	}
	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = CStringGetTextDatum(lock->session_id);
	values[2] = PointerGetDatum(construct_array(seqs, nseqs, INT8OID, sizeof(int64),
												FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[3] = TimestampTzGetDatum(lock->locked_until);
	values[4] = TimestampTzGetDatum(GetCurrentTimestamp());
	n = sbq_exec(&stmt_receive_deferred, values, NULL);
	if (n != (uint64) nseqs)
	{
		*missing = sbq_first_missing(seqs, nseqs, n, 1);
		return false;
	}
	(void) sbq_put_message_rows(tupstore, tupdesc, NULL, 0, 0);
	sbq_session_note_locked(lock);
	counts.received = n;
	sbq_add_counts(queue->queue_id, &counts);
	return true;
}

/* sbq_storage_renew_session: a new locked_until; false when the lock is lost */
bool
sbq_storage_renew_session(const SbqQueue *queue, const pg_uuid_t *token,
						  TimestampTz *locked_until)
{
	SbqSessionLock lock;
	Datum		values[2];

	if (sbq_session_locks_in_memory() && sbq_mem_renew(queue, token, locked_until))
		return true;
	if (!sbq_session_lookup(&stmt_token_update, queue, token, &lock, NULL))
		return false;
	*locked_until = sbq_add_interval(GetCurrentTimestamp(), &queue->lock_duration);
	values[0] = Int64GetDatum(lock.key);
	values[1] = TimestampTzGetDatum(*locked_until);
	(void) sbq_exec(&stmt_renew, values, NULL);
	return true;
}

/*
 * sbq_storage_session_state
 *		Read (state NULL) or set (*state, NULL clears) the session's state;
 *		false when the lock is lost. A read returns the state in the
 *		caller's memory context (NULL: none).
 */
bool
sbq_storage_session_state(const SbqQueue *queue, const pg_uuid_t *token, bool set,
						  bytea **state)
{
	SbqSessionLock lock;
	Datum		values[3];
	bool		nulls[3] = {false, false, false};
	bool		isnull;
	Datum		d;

	if (!(sbq_session_locks_in_memory() && sbq_mem_state_lookup(queue, token, set, &lock)) &&
		!sbq_session_lookup(set ? &stmt_token_update : &stmt_token_share, queue, token,
							&lock, NULL))
		return false;
	values[0] = Int64GetDatum(lock.key);
	if (set)
	{
		values[1] = PointerGetDatum(*state);
		nulls[1] = *state == NULL;
		values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
		(void) sbq_exec(&stmt_set_state, values, nulls);
		return true;
	}
	(void) sbq_exec(&stmt_get_state, values, NULL);
	d = sbq_col(0, 1, &isnull);
	if (isnull)
		*state = NULL;
	else
	{
		MemoryContext old = MemoryContextSwitchTo(sbq_storage_caller_context());

		*state = DatumGetByteaPCopy(d);
		MemoryContextSwitchTo(old);
	}
	return true;
}

/*
 * sbq_storage_release_session
 *		End the session lock of token: its message locks are released and
 *		their deliveries not counted. False when the lock is lost. Waits for
 *		the holder's calls in flight, not for senders.
 */
bool
sbq_storage_release_session(const SbqQueue *queue, const pg_uuid_t *token)
{
	SbqSessionLock lock;
	SbqSessionRow s;
	Datum		key;

	if (sbq_session_locks_in_memory() && sbq_mem_release(queue, token))
		return true;
	if (!sbq_session_lookup(&stmt_token_update, queue, token, &lock, &s))
		return false;
	key = Int64GetDatum(s.key);
	(void) sbq_session_end_lock(queue, &s, true,
								sbq_exec_latest(&stmt_alone, &key, NULL) == 1);
	return true;
}
