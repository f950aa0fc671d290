/*-------------------------------------------------------------------------
 *
 * session_mem.c
 *	  Session locks kept in shared memory: with sbqueue preloaded, accepting
 *	  a session, receiving its messages and releasing it write no WAL.
 *
 * A session lock is an entry of the lease table (lease.c, "sessions"),
 * keyed by its session's row; the message locks under it are leases that
 * carry its key and its expiry. So a crash loses them together, and never a
 * message or a session's state, which stay in sbq.messages and
 * sbq.sessions. Expiry needs nobody: when the session lock runs out, so do
 * its messages' leases, and the sweep (or the next receive) counts each as
 * a delivery, as for any message lock. Renewing and releasing renew or end
 * the leases under the lock in the same transaction; releasing does not
 * count their deliveries (R9.9).
 *
 * What the row of the session keeps in this mode: its key and id, its state,
 * and its ready mark (ready_seq), which stays set while the session is held:
 * accept-next passes over held sessions (a look in shared memory each) and
 * moves them to the back of the line when it passes over more than a few, or
 * finds them in front of many sessions drained since, so that it never walks
 * many; a release moves the mark back to the session's first available
 * message (one at or behind it stays), or takes it off when the session is
 * empty (with the row alone, as session.c's protocol says). A walk that runs
 * out of looks (every session it met held) leaves where it stopped in
 * shared memory (qstate.c), and the next walk goes on from there and round
 * to the front, so that a free session behind more held ones than one walk
 * looks at is still found; a look that takes an empty session off the line
 * counts against no limit, as it makes way.
 *
 * The calls of a session's holder (receive, renew, release, setting the
 * state) take a transaction-long heavyweight lock on the session (an
 * advisory lock tag of sbqueue's own class, which writes no WAL), in place
 * of session.c's row lock: a release waits for a receive in flight, and no
 * lease is taken under a lock that has ended. Accepting takes it for the
 * moment of the claim only, so accept-next passes over a session whose
 * holder is busy, and a named accept waits for a release in flight.
 *
 * Where a call only asks whether a session has messages, walks the line or
 * finds a released session drained, it reads the indexes directly instead of
 * running a statement, when they can tell (session_probe.c).
 *
 * Locks stored in the rows (0.7, or a server without the preload) may be
 * left from before a restart or an update: session.c's paths end them when
 * they are met (sbq_session_row_end_stale), and keep serving a row lock
 * that is still valid.
 *
 * Length: over 1,000 lines on purpose. The claim of a session in shared
 * memory, the marks of its line and the heavyweight lock of its holder
 * work together in every call (accept, receive, renew, release, state); one
 * file keeps their order of steps in one place.
 *
 * Owns: nothing shared (the entries are lease.c's). Locks: the heavyweight
 * session lock above; row locks of sbq.sessions and sbq.messages through
 * its statements.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/session_mem.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "lease.h"
#include "qstate.h"
#include "session_mem.h"
#include "storage_core.h"
#include "wait.h"

/* the class (field4) of sbqueue's session lock tags; advisory locks use 1 and 2 */
#define SBQ_SESSION_LOCK_CLASS	0x5351

/* How many held sessions accept-next passes over before it moves them back. */
#define SBQ_PASS_HELD_MAX		8

/* ... and how many entries gone for good behind them, which the floor cannot pass */
#define SBQ_PASS_GONE_MAX		64

/* How many candidates one accept-next looks at before it gives up this round. */
#define SBQ_MEM_ACCEPT_LOOKS	1000

/* $1 queue, $2 session id: the session's row, as it is now */
static SbqStatement stmt_row = {"session row", 2, {INT4OID, TEXTOID},
	"SELECT s.session_key, s.session_token IS NOT NULL FROM sbq.sessions s"
	" WHERE s.queue_id = $1 AND s.session_id = $2"
};

/* $1 queue, $2 session id, $3 now */
static SbqStatement stmt_insert = {"new session row", 3, {INT4OID, TEXTOID, TIMESTAMPTZOID},
	"INSERT INTO sbq.sessions (queue_id, session_id, last_updated) VALUES ($1, $2, $3)"
	" ON CONFLICT (queue_id, session_id" EK(", entity_key") ") DO NOTHING"
};

/* $1 key, $2 now: whether the row is there, and whether a message waits */
static SbqStatement stmt_look = {"look at a session", 2, {INT8OID, TIMESTAMPTZOID},
	"SELECT s.session_token IS NOT NULL,"
	"       EXISTS (SELECT 1 FROM sbq.messages m"
	"                WHERE m.queue_id = s.queue_id AND m.session_id = s.session_id"
	"                  AND m.state = 0 AND m.lock_token IS NULL"
	"                  AND (m.expires_at IS NULL OR m.expires_at > $2))"
	"  FROM sbq.sessions s WHERE s.session_key = $1"
};

/* $1 queue, $2 after this ready_seq: the next in line, locking nothing */
static SbqStatement stmt_line = {"sessions in line", 2, {INT4OID, INT8OID},
	"SELECT s.session_key, s.ready_seq, s.session_token IS NOT NULL, s.session_id"
	"  FROM sbq.sessions s"
	" WHERE s.queue_id = $1 AND s.ready_seq IS NOT NULL AND s.ready_seq > $2"
	" ORDER BY s.queue_id, s.ready_seq LIMIT 16"	/* SBQ_LINE_BATCH */
};

/* $1 keys: held sessions accept-next passed over go to the back of the line */
static SbqStatement stmt_move_back = {"held sessions to the back", 1, {INT8ARRAYOID},
	"UPDATE sbq.sessions s SET ready_seq = " NEXT_SEQUENCE
	"  FROM (SELECT h.session_key FROM sbq.sessions h"
	"         WHERE h.session_key = ANY($1) AND h.ready_seq IS NOT NULL"
	"         ORDER BY h.session_key FOR NO KEY UPDATE SKIP LOCKED) l"
	" WHERE s.session_key = l.session_key RETURNING s.ready_seq"
};

/* $1 key: the row alone (no sender in flight), or no row */
static SbqStatement stmt_alone = {"session row alone (memory)", 1, {INT8OID},
	"SELECT 1 FROM sbq.sessions s WHERE s.session_key = $1 FOR UPDATE SKIP LOCKED"
};

/* the first available message of the session s */
#define FIRST_AVAILABLE \
	"(SELECT m.sequence_number FROM sbq.messages m" \
	"  WHERE m.queue_id = s.queue_id AND m.session_id = s.session_id" \
	"    AND m.state = 0 AND m.lock_token IS NULL" \
	"  ORDER BY m.queue_id, m.session_id, m.state, m.sequence_number LIMIT 1)"

/* $1 key: the mark, and the first available message */
static SbqStatement stmt_mark = {"session mark", 1, {INT8OID},
	"SELECT s.ready_seq, " FIRST_AVAILABLE
	"  FROM sbq.sessions s WHERE s.session_key = $1"
};

/* $1 key, $2 the mark (NULL: none) */
static SbqStatement stmt_set_mark = {"set a session mark", 2, {INT8OID, INT8OID},
	"UPDATE sbq.sessions s SET ready_seq = $2 WHERE s.session_key = $1"
};

/* Take the session of key out of its line: its ready mark goes. */
static void
sbq_mem_unmark(int64 key)
{
	Datum		values[2];
	bool		nulls[2] = {false, true};

	values[0] = Int64GetDatum(key);
	values[1] = (Datum) 0;
	(void) sbq_exec_latest(&stmt_set_mark, values, nulls);
}

/*
 * Put the session of key in its line at first (its first available message)
 * from mark (NULL: out of line), as a look read them; not in front of where
 * it is (held sessions moved to the back stay there). The write lowers the
 * line's floor after it (qstate.c): the mark it replaces may have moved
 * since the look (to the back, by an accept-next).
 */
static void
sbq_mem_mark(int32 queue_id, int64 key, NullableDatum mark, int64 first)
{
	Datum		values[2];

	if (!mark.isnull && DatumGetInt64(mark.value) >= first)
	{
		/* where it is: accept-next's hand may have gone past it */
		sbq_qstate_accept_back(sbq_storage_epoch(), queue_id, DatumGetInt64(mark.value));
		return;
	}
	values[0] = Int64GetDatum(key);
	values[1] = Int64GetDatum(first);
	(void) sbq_exec_latest(&stmt_set_mark, values, NULL);
	sbq_qstate_line_lower(sbq_storage_epoch(), queue_id, first);
}

/* $1 key: a session with nothing left goes */
static SbqStatement stmt_forget = {"forget an empty session (memory)", 1, {INT8OID},
	"DELETE FROM sbq.sessions s"
	" WHERE s.session_key = $1 AND s.state IS NULL AND s.session_token IS NULL"
	"   AND NOT EXISTS (SELECT 1 FROM sbq.messages m"
	"                    WHERE m.queue_id = s.queue_id AND m.session_id = s.session_id)"
};

/* $1 queue, $2 session key, $3 lo, $4 hi: what may be locked under a session lock, by index */
static SbqStatement stmt_locked = {"messages under a session lock", 4, {INT4OID, INT8OID,
		INT8OID, INT8OID},
	"SELECT m.sequence_number FROM sbq.messages m"
	" WHERE m.queue_id = $1 AND m.state IN (0, 1)"
	"   AND m.session_id = (SELECT s.session_id FROM sbq.sessions s WHERE s.session_key = $2)"
	"   AND m.sequence_number BETWEEN $3 AND $4 AND m.lock_token IS NULL"
	" ORDER BY m.queue_id, m.session_id, m.state, m.sequence_number"
};

/*
 * What a release reads in one statement: the session's mark, its first
 * available message, and what may be locked under its session lock (as
 * stmt_locked). $1 queue, $2 session key, $3 lo, $4 hi.
 */
static SbqStatement stmt_release_look = {"session at its release", 4, {INT4OID, INT8OID,
		INT8OID, INT8OID},
	"SELECT s.ready_seq, " FIRST_AVAILABLE ","
	"       ARRAY(SELECT m.sequence_number FROM sbq.messages m"
	"              WHERE m.queue_id = s.queue_id AND m.state IN (0, 1)"
	"                AND m.session_id = s.session_id"
	"                AND m.sequence_number BETWEEN $3 AND $4 AND m.lock_token IS NULL"
	"              ORDER BY m.queue_id, m.session_id, m.state, m.sequence_number)"
	"  FROM sbq.sessions s WHERE s.session_key = $2 AND s.queue_id = $1"
};

/* $1 seq: wait for whoever settles the message */
static SbqStatement stmt_wait_row = {"wait for a message's settler", 1, {INT8OID},
	"SELECT 1 FROM sbq.messages m WHERE m.sequence_number = $1 FOR UPDATE"
};

/* $1 key: the session's id */
static SbqStatement stmt_session_id = {"session id", 1, {INT8OID},
	"SELECT s.session_id FROM sbq.sessions s WHERE s.session_key = $1"
};

/*
 * Free the result of the statement just run: accept-next may loop for as
 * long as a max_wait lasts, in one storage section, and would otherwise keep
 * every look's result until the call returns.
 */
static void
sbq_mem_done(void)
{
	if (SPI_tuptable != NULL)
		SPI_freetuptable(SPI_tuptable);
	SPI_tuptable = NULL;
}

/*
 * sbq_mem_look
 *		A look at the session of key (stmt_look's): -1 when it has no row;
 *		else, with messages, whether a message is available in it (0 or 1),
 *		and without, 0. Through the indexes when they can tell
 *		(session_probe.c; within line, accept-next's walk, when it has one),
 *		else by the statement.
 */
static int
sbq_mem_look(const SbqQueue *queue, int64 key, bool messages, const SbqSessionLine *line)
{
	SbqSessionProbe p = {0};
	Datum		lv[2];
	bool		isnull;
	int			r;

	p.queue_id = queue->queue_id;
	p.key = key;
	p.latest = true;
	p.nstates = messages ? 1 : 0;
	p.states[0] = 0;
	p.available = true;
	p.now = GetCurrentTimestamp();
	switch (sbq_session_probe(&p, line))
	{
		case SBQ_PROBE_NO_ROW:
			return -1;
		case SBQ_PROBE_NONE:
			return 0;
		case SBQ_PROBE_SOME:
			return 1;
		case SBQ_PROBE_UNSURE:
			break;
	}
	lv[0] = Int64GetDatum(key);
	lv[1] = TimestampTzGetDatum(p.now);
	if (sbq_exec_latest(&stmt_look, lv, NULL) != 1)
		r = -1;
	else
		r = messages && DatumGetBool(sbq_col(0, 2, &isnull)) ? 1 : 0;
	sbq_mem_done();
	return r;
}

/*
 * sbq_session_mutex
 *		Take the heavyweight lock of the session key until the transaction
 *		ends (wait), or try to (!wait: false when another has it). *taken
 *		says this call took it (it was not held already), for an early
 *		sbq_session_unmutex.
 */
static bool
sbq_session_mutex(int64 key, bool wait, bool *taken)
{
	LOCKTAG		tag;
	LockAcquireResult r;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) ((uint64) key >> 32), (uint32) key,
						 SBQ_SESSION_LOCK_CLASS);
	r = LockAcquire(&tag, ExclusiveLock, false, !wait);
	if (taken != NULL)
		*taken = r == LOCKACQUIRE_OK;
	return r != LOCKACQUIRE_NOT_AVAIL;
}

static void
sbq_session_unmutex(int64 key, bool taken)
{
	LOCKTAG		tag;

	if (!taken)
		return;
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) ((uint64) key >> 32), (uint32) key,
						 SBQ_SESSION_LOCK_CLASS);
	LockRelease(&tag, ExclusiveLock, false);
}

/* Give the claimed session lock of key to the caller. */
static void
sbq_mem_grant(const SbqQueue *queue, int64 key, SbqSessionLock *out)
{
	out->key = key;
	sbq_make_lock_token(key, &out->token);
	out->locked_until = sbq_add_interval(GetCurrentTimestamp(), &queue->lock_duration);
	/* a delivery count of 1: a claim that takes it over after it expired can tell */
	sbq_lease_grant(-key, &out->token, out->locked_until, 1, 0);
}

/*
 * After a session lock that had expired was taken over: the leases of its
 * messages expired with it, and their deliveries count now (dead-lettering
 * those that had their last), as when a lock stored in the row is ended.
 */
static void
sbq_mem_took_over(const SbqQueue *queue)
{
	int64		released = 0;
	int64		dead = 0;

	(void) sbq_lease_sweep(queue, 1, queue->queue_id, GetCurrentTimestamp(), &released,
						   &dead);
}

/*
 * Claim the session lock of key: false when another holds or takes it.
 * *expired says it takes over a lock that expired.
 */
static bool
sbq_mem_claim(const SbqQueue *queue, int64 key, bool *expired)
{
	int32		prev;

	switch (sbq_lease_claim(-key, queue->queue_id, SBQ_SUBQUEUE_SESSION,
							GetCurrentTimestamp(), &prev))
	{
		case SBQ_CLAIM_OK:
			*expired = prev > 0;
			return true;
		case SBQ_CLAIM_BUSY:
			return false;
		case SBQ_CLAIM_FULL:
			break;
	}
	ereport(ERROR,
			(errcode(ERRCODE_OUT_OF_MEMORY),
			 errmsg("out of shared memory for sbqueue locks"),
			 errdetail("Session locks live in shared memory, and this database's share of it is full."),
			 errhint("Settle or release what is locked, or raise \"sbqueue.max_locks\" or \"sbqueue.max_locks_per_database\".")));
	return false;
}

/*
 * sbq_mem_accept_named
 *		Accept session_id (making its row when it has none): false when
 *		another holder has it.
 */
static bool
sbq_mem_accept_named(const SbqQueue *queue, text *session_id, SbqSessionLock *out)
{
	Datum		values[3];
	int			tries;

	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = PointerGetDatum(session_id);
	for (tries = 0;; tries++)
	{
		bool		isnull;
		int64		key;
		bool		taken;
		bool		expired;

		if (tries > 10)
			elog(ERROR, "session row of \"%s\" keeps changing", text_to_cstring(session_id));
		CHECK_FOR_INTERRUPTS();
		if (sbq_exec_latest(&stmt_row, values, NULL) != 1)
		{
			values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
			(void) sbq_exec_latest(&stmt_insert, values, NULL);
			continue;
		}
		key = DatumGetInt64(sbq_col(0, 1, &isnull));
		if (DatumGetBool(sbq_col(0, 2, &isnull)) && sbq_session_row_end_stale(queue, key))
			return false;		/* held in its row, from before an update */
		(void) sbq_session_mutex(key, true, &taken);
		if (!sbq_mem_claim(queue, key, &expired))
		{
			VirtualTransactionId vxid;
			int			owned;

			sbq_session_unmutex(key, taken);
			owned = sbq_lease_owner(-key, &vxid);
			if (owned == 0)
				return false;
			/* another transaction is taking or ending it: its end decides */
			if (owned == 1)
				(void) VirtualXactLock(vxid, true);
			else
				pg_usleep(100L);
			tries = 0;
			continue;
		}
		/* claimed: is the row still there (a release may have forgotten it)? */
		if (sbq_mem_look(queue, key, false, NULL) < 0)
		{
			sbq_lease_unclaim(-key);
			sbq_session_unmutex(key, taken);
			continue;
		}
		sbq_mem_grant(queue, key, out);
		out->session_id = text_to_cstring(session_id);
		sbq_session_unmutex(key, taken);
		if (expired)
			sbq_mem_took_over(queue);
		return true;
	}
}

/*
 * sbq_mem_try_next
 *		Accept-next's look at one session in line: claimed, with available
 *		messages: taken (true). Else its claim is given back; an empty one
 *		leaves the line (with its row alone: *forgot), and *held says another
 *		holds it.
 *		line: the walk that found it, whose relations its looks read (or NULL).
 */
static bool
sbq_mem_try_next(const SbqQueue *queue, int64 key, const SbqSessionLine *line,
				 SbqSessionLock *out, bool *held, bool *forgot)
{
	Datum		lv[2];
	bool		taken;
	bool		expired;
	int			look;

	*held = false;
	*forgot = false;
	if (!sbq_session_mutex(key, false, &taken))
		return false;			/* its holder is busy with it */
	if (!sbq_mem_claim(queue, key, &expired))
	{
		sbq_session_unmutex(key, taken);
		*held = true;
		return false;
	}
	if (expired)
		sbq_mem_took_over(queue);
	lv[0] = Int64GetDatum(key);
	look = sbq_mem_look(queue, key, true, line);
	if (look >= 0)
	{
		if (look == 1)
		{
			sbq_mem_grant(queue, key, out);
			sbq_session_unmutex(key, taken);
			sbq_session_probe_skip(key);
			return true;
		}
		/* nothing available: off the line, if no send is in flight */
		if (sbq_exec_latest(&stmt_alone, lv, NULL) == 1)
		{
			sbq_mem_done();
			if (sbq_mem_look(queue, key, true, line) == 1)
			{
				sbq_mem_grant(queue, key, out);
				sbq_session_unmutex(key, taken);
				return true;
			}
			sbq_mem_unmark(key);
			(void) sbq_exec_latest(&stmt_forget, lv, NULL);
			*forgot = true;
		}
	}
	sbq_mem_done();
	sbq_lease_unclaim(-key);
	sbq_session_unmutex(key, taken);
	return false;
}

/* How many sessions in line the statement reads at a time. */
#define SBQ_LINE_BATCH			16

/*
 * sbq_mem_line
 *		The next sessions in line after *after (moved to the last one's mark):
 *		their keys, marks, whether their rows store a lock, ids (palloc'd).
 *		One at a time from line, a walk through the index, when there is one;
 *		else up to SBQ_LINE_BATCH by the statement. Returns how many.
 */
static uint64
sbq_mem_line(const SbqQueue *queue, SbqSessionLine *line, int64 *after, int64 *keys,
			 int64 *marks, bool *row_held, char **ids)
{
	Datum		values[2];
	uint64		n;
	uint64		i;

	if (line != NULL)
	{
		if (!sbq_session_line_next(line, &keys[0], after, &row_held[0], &ids[0]))
			return 0;
		marks[0] = *after;
		return 1;
	}
	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = Int64GetDatum(*after);
	n = sbq_exec_latest(&stmt_line, values, NULL);
	for (i = 0; i < n; i++)
	{
		bool		isnull;

		keys[i] = DatumGetInt64(sbq_col(i, 1, &isnull));
		marks[i] = *after = DatumGetInt64(sbq_col(i, 2, &isnull));
		row_held[i] = DatumGetBool(sbq_col(i, 3, &isnull));
		ids[i] = sbq_spi_strdup(sbq_col(i, 4, &isnull), false);
	}
	sbq_mem_done();
	return n;
}

/* End a walk of the line (if any): whether it passed many entries gone for good. */
static bool
sbq_mem_line_end(SbqSessionLine *line)
{
	bool		gone_many;

	if (line == NULL)
		return false;
	gone_many = sbq_session_line_gone(line) > SBQ_PASS_GONE_MAX;
	sbq_session_line_end(line);
	return gone_many;
}

/* Held sessions keys[n] go to the back of queue's line. */
static void
sbq_mem_move_back(const SbqQueue *queue, int64 *keys, int n)
{
	Datum		values[1];
	uint64		moved;
	uint64		i;
	int64		low = PG_INT64_MAX;

	values[0] = sbq_int8_array(keys, n);
	moved = sbq_exec_latest(&stmt_move_back, values, NULL);
	for (i = 0; i < moved; i++)
	{
		bool		isnull;
		Datum		d = sbq_col(i, 1, &isnull);

		if (!isnull && DatumGetInt64(d) < low)
			low = DatumGetInt64(d);
	}
	sbq_mem_done();
	/* numbers taken with no announcement: the line's floor goes below them */
	if (moved > 0)
		sbq_qstate_line_lower(sbq_storage_epoch(), queue->queue_id, low);
}

/*
 * sbq_mem_accept_next
 *		Accept the first session in line that nobody holds and that has
 *		available messages. Held sessions it passes over stay in line; when
 *		it passes over more than a few, they go to the back of it. A look
 *		that takes an empty session off the line counts against no limit:
 *		it makes way (sessions whose messages all expired, by the thousand).
 */
static bool
sbq_mem_accept_next(const SbqQueue *queue, SbqSessionLock *out)
{
	int64		start;
	int64		after;
	int64		looked;			/* the mark of the last session looked at */
	int64	   *held = palloc(sizeof(int64) * SBQ_MEM_ACCEPT_LOOKS);
	int			nheld = 0;
	int			looks = 0;
	bool		found = false;
	bool		gone_many = false;
	bool		at_end = false;
	bool		resumed;
	int64		keys[SBQ_LINE_BATCH];
	int64		marks[SBQ_LINE_BATCH];
	bool		row_held[SBQ_LINE_BATCH];
	char	   *ids[SBQ_LINE_BATCH];
	SbqSessionLine *line;

	/*
	 * From where the last call ran out of looks (qstate.c), if one did: else
	 * a line whose first SBQ_MEM_ACCEPT_LOOKS sessions are held would hide
	 * every session behind them from every call, as held sessions go to the
	 * back of the line only when a free one is found. A walk that starts
	 * there goes round to the front when it reaches the end.
	 */
	start = sbq_qstate_accept_resume(sbq_storage_epoch(), queue->queue_id);
	resumed = start != PG_INT64_MIN;
	after = looked = start;
	(void) sbq_activate_due(queue, GetCurrentTimestamp(), SBQ_MAINTAIN_BATCH, false);
	line = sbq_session_line_begin(queue->queue_id, start);
	while (!found && looks < SBQ_MEM_ACCEPT_LOOKS)
	{
		uint64		n = sbq_mem_line(queue, line, &after, keys, marks, row_held, ids);
		uint64		i;

		if (n == 0)
		{
			at_end = start == PG_INT64_MIN;
			if (at_end)
				break;
			/* started where the last call stopped: round to the front */
			gone_many |= sbq_mem_line_end(line);
			start = after = PG_INT64_MIN;
			line = sbq_session_line_begin(queue->queue_id, start);
			continue;
		}
		for (i = 0; i < n && !found && looks < SBQ_MEM_ACCEPT_LOOKS; i++)
		{
			bool		is_held;
			bool		forgot = false;

			CHECK_FOR_INTERRUPTS();
			looks++;
			looked = marks[i];
			if (row_held[i] && sbq_session_row_end_stale(queue, keys[i]))
				continue;
			found = sbq_mem_try_next(queue, keys[i], line, out, &is_held, &forgot);
			if (found)
				out->session_id = ids[i];
			if (is_held)
				held[nheld++] = keys[i];
			if (forgot)
				looks--;
		}
		for (i = 0; i < n; i++)
			if (!(found && out->session_id == ids[i]))
				pfree(ids[i]);
	}
	/*
	 * Out of looks before the end: the next call goes on from here. Found by
	 * a walk that went on from there: the next goes on from where this one
	 * found, a hand that goes round the line (the sessions in front of the
	 * mark come up again when it reaches the end, when one is released in
	 * front of it, which brings it back there, and every minute, when
	 * maintenance puts it back to the front: qstate.c). The whole line
	 * walked from the front: from the front.
	 */
	if ((!found && !at_end) || (found && resumed))
		sbq_qstate_set_accept_resume(sbq_storage_epoch(), queue->queue_id, looked);
	else if (at_end)
		sbq_qstate_set_accept_resume(sbq_storage_epoch(), queue->queue_id, PG_INT64_MIN);
	gone_many |= sbq_mem_line_end(line);
	/*
	 * Held sessions in the way of a free one go to the back of the line (a
	 * write, only then: when every session is held, moving them would not
	 * shorten the next walk, which the look limit bounds); so do those in
	 * front of many entries gone for good, which the line's floor could then
	 * pass.
	 */
	if (found && (nheld > SBQ_PASS_HELD_MAX || (nheld > 0 && gone_many)))
		sbq_mem_move_back(queue, held, nheld);
	pfree(held);
	return found;
}

/* sbq_mem_accept: accept session_id, or the next one when NULL */
SbqAcceptResult
sbq_mem_accept(const SbqQueue *queue, text *session_id, SbqSessionLock *out)
{
	if (session_id != NULL)
		return sbq_mem_accept_named(queue, session_id, out) ? SBQ_ACCEPT_OK : SBQ_ACCEPT_HELD;
	return sbq_mem_accept_next(queue, out) ? SBQ_ACCEPT_OK : SBQ_ACCEPT_NONE;
}

/*
 * sbq_mem_lookup
 *		Whether token is a session lock in shared memory that holds now,
 *		taking its session's heavyweight lock first when mutex (a holder's
 *		call). *out gets the lock, *sl its entry.
 */
bool
sbq_mem_lookup(const SbqQueue *queue, const pg_uuid_t *token, bool mutex,
			   SbqSessionLock *out, SbqSessionLease *sl)
{
	int64		key = sbq_token_sequence(token);

	if (key <= 0 ||
		!sbq_lease_session(key, token, queue->queue_id, GetCurrentTimestamp(), sl))
		return false;
	if (mutex)
	{
		(void) sbq_session_mutex(key, true, NULL);
		/* judged again with a clock read after the lock */
		if (!sbq_lease_session(key, token, queue->queue_id, GetCurrentTimestamp(), sl))
			return false;
	}
	out->key = key;
	out->token = *token;
	out->session_id = NULL;
	out->locked_until = sl->locked_until;
	return true;
}

/* The session id of the session key (NULL when it has no row). */
char *
sbq_mem_session_id(int64 key)
{
	Datum		values[1];
	bool		isnull;

	values[0] = Int64GetDatum(key);
	if (sbq_exec_latest(&stmt_session_id, values, NULL) != 1)
		return NULL;
	return sbq_spi_strdup(sbq_col(0, 1, &isnull), false);
}

/*
 * sbq_mem_group
 *		End (until 0) or renew the leases of seqs under the session lock of
 *		key. Ending waits for those another transaction is settling (at its
 *		end they are gone, or back to be ended); renewing passes over them
 *		(it must not wait for a settlement of the holder's own open
 *		transaction, which may want the session next: one that rolls back
 *		gives its message's lease back with the session's new expiry, see
 *		lease.c's sbq_lease_restore). Returns how many. *changed says that
 *		some message was settled meanwhile, or may have been (a lease was
 *		not there to end, or was waited for): a look at the session taken
 *		before may be out of date.
 */
static int
sbq_mem_group(int64 key, const int64 *seqs, int n, TimestampTz until, bool *changed)
{
	bool		wait = until == 0;
	int			done = 0;
	int			i;

	*changed = false;
	for (i = 0; i < n; i++)
	{
		SbqGroupResult r;
		int			tries = 0;

		CHECK_FOR_INTERRUPTS();
		while ((r = sbq_lease_group(seqs[i], key, GetCurrentTimestamp(), until)) ==
			   SBQ_GROUP_WAIT && wait)
		{
			Datum		seq = Int64GetDatum(seqs[i]);

			/* a settlement holds the row until it ends; a claim, briefly */
			if (sbq_exec_latest(&stmt_wait_row, &seq, NULL) == 0)
				break;
			if (++tries > 1000)
				pg_usleep(1000L);
			CHECK_FOR_INTERRUPTS();
		}
		if (r == SBQ_GROUP_DONE)
			done++;
		else
			*changed = true;
	}
	return done;
}

/*
 * sbq_mem_each_lease
 *		sbq_mem_group for every message that may be leased under the session
 *		lock of lock (sl its entry).
 */
static int
sbq_mem_each_lease(const SbqQueue *queue, const SbqSessionLock *lock,
				   const SbqSessionLease *sl, TimestampTz until)
{
	Datum		values[4];
	uint64		n;
	uint64		i;
	int64	   *seqs;
	bool		changed;

	if (sl->hi == 0)
		return 0;
	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = Int64GetDatum(lock->key);
	values[2] = Int64GetDatum(sl->lo);
	values[3] = Int64GetDatum(sl->hi);
	n = sbq_exec_latest(&stmt_locked, values, NULL);
	seqs = palloc(sizeof(int64) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		bool		isnull;

		seqs[i] = DatumGetInt64(sbq_col(i, 1, &isnull));
	}
	return sbq_mem_group(lock->key, seqs, (int) n, until, &changed);
}

/*
 * sbq_mem_receive
 *		The session's next max_messages, or its deferred messages seqs (all
 *		or none: false, with *missing), under lock (the caller holds its
 *		session's heavyweight lock).
 */
bool
sbq_mem_receive(const SbqQueue *queue, const SbqSessionLock *lock, const int64 *seqs,
				int nseqs, int max_messages, Tuplestorestate *tupstore, TupleDesc tupdesc,
				SbqReceiveResult *result, int64 *missing)
{
	SbqLeaseSession ls = {0};

	if (seqs == NULL)
		(void) sbq_activate_due(queue, GetCurrentTimestamp(), SBQ_MAINTAIN_BATCH, false);
	ls.key = lock->key;
	ls.locked_until = lock->locked_until;
	ls.seqs = seqs;
	ls.nseqs = nseqs;
	ls.missing = 0;
	*result = sbq_receive_leased_session(queue, &ls, seqs != NULL ? nseqs : max_messages,
										 tupstore, tupdesc);
	if (ls.hi > 0)
		sbq_lease_session_widen(lock->key, ls.lo, ls.hi);
	if (seqs != NULL && result->delivered != nseqs)
	{
		/* none of them read at all: the first is not there */
		*missing = ls.missing != 0 ? ls.missing : seqs[0];
		return false;
	}
	return true;
}

/* sbq_mem_renew: a new locked_until for the session lock of token; false when lost */
bool
sbq_mem_renew(const SbqQueue *queue, const pg_uuid_t *token, TimestampTz *locked_until)
{
	SbqSessionLock lock;
	SbqSessionLease sl;
	TimestampTz now;

	if (!sbq_mem_lookup(queue, token, true, &lock, &sl))
		return false;
	now = GetCurrentTimestamp();
	*locked_until = sbq_add_interval(now, &queue->lock_duration);
	if (!sbq_lease_renew(-lock.key, token, queue->queue_id, SBQ_SUBQUEUE_SESSION, now,
						 *locked_until))
		return false;
	(void) sbq_mem_each_lease(queue, &lock, &sl, *locked_until);
	return true;
}

/*
 * sbq_mem_remark_as
 *		After a release: the session's ready mark is its first available
 *		message again; an empty session leaves the line (and goes, with no
 *		state) when no send is in flight. mark and first are what a look at
 *		the session read (NULL: none).
 */
static void
sbq_mem_remark_as(int32 queue_id, int64 key, NullableDatum mark, NullableDatum first)
{
	Datum		values[1];
	bool		none;

	values[0] = Int64GetDatum(key);
	if (!first.isnull)
	{
		sbq_wait_wake_at_commit(queue_id);
		sbq_mem_mark(queue_id, key, mark, DatumGetInt64(first.value));
		return;
	}
	/*
	 * Empty: with the row alone (no send in flight, and none can start), a
	 * look with a snapshot taken after that; nothing left and no state, it
	 * goes. (One statement could not do both: its snapshot would be older
	 * than its row lock.)
	 */
	if (sbq_exec_latest(&stmt_alone, values, NULL) != 1)
		return;					/* a send in flight: accept-next looks later */
	if (sbq_exec_latest(&stmt_forget, values, NULL) == 1)
		return;
	(void) sbq_exec_latest(&stmt_mark, values, NULL);
	mark.value = sbq_col(0, 1, &mark.isnull);
	first.value = sbq_col(0, 2, &none);
	if (!none)
	{
		sbq_mem_mark(queue_id, key, mark, DatumGetInt64(first.value));
		sbq_wait_wake_at_commit(queue_id);
	}
	else if (!mark.isnull)
		sbq_mem_unmark(key);
}

/* sbq_mem_remark: sbq_mem_remark_as with a look at the session now */
static void
sbq_mem_remark(int32 queue_id, int64 key)
{
	Datum		values[1];
	NullableDatum mark;
	NullableDatum first;

	values[0] = Int64GetDatum(key);
	if (sbq_exec_latest(&stmt_mark, values, NULL) != 1)
		return;
	mark.value = sbq_col(0, 1, &mark.isnull);
	first.value = sbq_col(0, 2, &first.isnull);
	sbq_mem_remark_as(queue_id, key, mark, first);
}

/*
 * sbq_mem_release
 *		End the session lock of token and the leases under it (their
 *		deliveries not counted); false when it is lost. One look reads the
 *		session's mark and what is leased under it; a release that had to wait
 *		for a settlement looks at the mark again.
 */
bool
sbq_mem_release(const SbqQueue *queue, const pg_uuid_t *token)
{
	SbqSessionLock lock;
	SbqSessionLease sl;
	int32		unused;
	SbqCounts	counts = {0};
	Datum		values[4];
	NullableDatum mark;
	NullableDatum first;
	int64	   *seqs = NULL;
	int			nseqs = 0;
	bool		changed;
	SbqSessionProbe probe = {0};

	if (!sbq_mem_lookup(queue, token, true, &lock, &sl))
		return false;
	if (!sbq_lease_settle(-lock.key, token, queue->queue_id, SBQ_SUBQUEUE_SESSION,
						  GetCurrentTimestamp(), false, &unused))
		return false;
	/*
	 * A session with no message active or deferred (drained): its mark is all
	 * the look would read, and the indexes can tell (session_probe.c).
	 */
	probe.queue_id = queue->queue_id;
	probe.key = lock.key;
	probe.latest = true;
	probe.nstates = 2;
	probe.states[0] = 0;
	probe.states[1] = 1;
	switch (sbq_session_probe(&probe, NULL))
	{
		case SBQ_PROBE_NO_ROW:
			return true;		/* no row: nothing to end or mark */
		case SBQ_PROBE_NONE:
			mark.isnull = probe.ready_null;
			mark.value = Int64GetDatum(probe.ready_seq);
			first.isnull = true;
			first.value = (Datum) 0;
			sbq_mem_remark_as(queue->queue_id, lock.key, mark, first);
			return true;
		case SBQ_PROBE_SOME:
		case SBQ_PROBE_UNSURE:
			break;
	}
	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = Int64GetDatum(lock.key);
	values[2] = Int64GetDatum(sl.hi == 0 ? 1 : sl.lo);
	values[3] = Int64GetDatum(sl.hi);
	if (sbq_exec_latest(&stmt_release_look, values, NULL) != 1)
		return true;			/* no row: nothing to end or mark */
	mark.value = sbq_col(0, 1, &mark.isnull);
	first.value = sbq_col(0, 2, &first.isnull);
	{
		bool		isnull;
		ArrayType  *arr = DatumGetArrayTypeP(sbq_col(0, 3, &isnull));
		Datum	   *elems;
		int			i;

		deconstruct_array(arr, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elems, NULL,
						  &nseqs);
		seqs = palloc(sizeof(int64) * Max(nseqs, 1));
		for (i = 0; i < nseqs; i++)
			seqs[i] = DatumGetInt64(elems[i]);
	}
	/* those deliveries are over (a plain receive counts them at their end too) */
	counts.received = sbq_mem_group(lock.key, seqs, nseqs, 0, &changed);
	if (counts.received > 0)
		sbq_add_counts(queue->queue_id, &counts);
	if (changed)
		sbq_mem_remark(queue->queue_id, lock.key);
	else
		sbq_mem_remark_as(queue->queue_id, lock.key, mark, first);
	return true;
}

/*
 * sbq_mem_guard_many
 *		For a settlement of many message lock tokens of a session queue: the
 *		index of one that is a lease whose session lock is not held now, or
 *		-1. Tokens with no lease are marked in *rowed[] for session.c's check
 *		of locks stored in rows.
 */
int
sbq_mem_guard_many(const SbqQueue *queue, Datum *tokens, int ntokens, bool *rowed)
{
	TimestampTz now = GetCurrentTimestamp();
	int64		last = 0;
	int			i;

	for (i = 0; i < ntokens; i++)
	{
		const pg_uuid_t *token = DatumGetUUIDP(tokens[i]);
		int64		key = sbq_lease_session_of(sbq_token_sequence(token), token,
											   queue->queue_id, now);

		rowed[i] = key < 0;
		if (key < 0)
			continue;
		if (key == 0)
			return i;
		if (key != last && !sbq_lease_session(key, NULL, queue->queue_id, now, NULL))
			return i;
		last = key;
	}
	return -1;
}

/* sbq_mem_state_lookup: the session lock of token for its state (set: a holder's call) */
bool
sbq_mem_state_lookup(const SbqQueue *queue, const pg_uuid_t *token, bool set,
					 SbqSessionLock *out)
{
	SbqSessionLease sl;

	return sbq_mem_lookup(queue, token, set, out, &sl);
}

/*
 * sbq_mem_expire
 *		For maintenance: let up to limit expired session locks of this
 *		database go (the leases under them expired with them, and the sweep
 *		ends those). Returns how many.
 */
int
sbq_mem_expire(TimestampTz now, int limit)
{
	SbqExpiredLease *items;
	int			n;
	int			i;

	if (!sbq_session_locks_in_memory())
		return 0;
	items = palloc(sizeof(SbqExpiredLease) * limit);
	n = sbq_lease_take_sessions(0, now, items, limit);
	/* each session left behind: back in line, or gone when nothing is left */
	for (i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		sbq_mem_remark(items[i].queue_id, items[i].seq);
	}
	return n;
}
