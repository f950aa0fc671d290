/*-------------------------------------------------------------------------
 *
 * session_ready.c
 *	  What messages joining a session queue (sends, activations of scheduled
 *	  messages, resubmits) and purges do to its sessions' rows and ready
 *	  marks, and the list of a queue's sessions. The locking protocol they
 *	  follow is session.c's (see its header).
 *
 * Owns: nothing shared. Locks: row locks of sbq.sessions.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/session_ready.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "shmem.h"
#include "storage_core.h"

/* $1 queue, $2 session id: a send's hold on its session */
static SbqStatement stmt_note_share = {"session of a send", 2, {INT4OID, TEXTOID},
	"SELECT s.ready_seq IS NOT NULL, s.session_token IS NOT NULL FROM sbq.sessions s"
	" WHERE s.queue_id = $1 AND s.session_id = $2 FOR KEY SHARE"
};

/* $1 queue, $2 session id, $3 now, $4 seq */
static SbqStatement stmt_note_insert = {"new session of a send", 4, {INT4OID, TEXTOID,
		TIMESTAMPTZOID, INT8OID},
	"INSERT INTO sbq.sessions (queue_id, session_id, last_updated, ready_seq)"
	" VALUES ($1, $2, $3, $4) ON CONFLICT (queue_id, session_id" EK(", entity_key") ") DO NOTHING"
};

/* $1 queue, $2 session id, $3 seq */
static SbqStatement stmt_note_ready = {"session ready", 3, {INT4OID, TEXTOID, INT8OID},
	"UPDATE sbq.sessions s SET ready_seq = $3"
	" WHERE s.queue_id = $1 AND s.session_id = $2 AND s.ready_seq IS NULL"
	"   AND s.session_token IS NULL"
};

/*
 * After a purge of a session queue ($1): its ready sessions that no send
 * holds, alone, then those of them left without available messages leave
 * the line ($2 their keys), and those left with nothing go; not those held,
 * in their rows or in shared memory (whose release does the same).
 */
static SbqStatement stmt_purged_ready = {"ready sessions after a purge", 1, {INT4OID},
	"SELECT coalesce(array_agg(k.session_key), '{}') FROM"
	" (SELECT s.session_key FROM sbq.sessions s"
	"   WHERE s.queue_id = $1 AND s.ready_seq IS NOT NULL FOR UPDATE SKIP LOCKED) k"
};

#define NOT_HELD_IN_MEMORY "coalesce(sbq.lease_until(-s.session_key) <= now(), true)"
static SbqStatement stmt_purged_not_ready = {"sessions emptied by a purge", 2, {INT4OID,
		INT8ARRAYOID},
	"UPDATE sbq.sessions s SET ready_seq = NULL"
	" WHERE s.session_key = ANY($2) AND s.session_token IS NULL AND " NOT_HELD_IN_MEMORY
	"   AND NOT EXISTS (SELECT 1 FROM sbq.messages m"
	"                    WHERE m.queue_id = $1 AND m.session_id = s.session_id"
	"                      AND m.state = 0 AND m.lock_token IS NULL)"
};

static SbqStatement stmt_purged_forget = {"sessions a purge left empty", 2, {INT4OID,
		INT8ARRAYOID},
	"DELETE FROM sbq.sessions s"
	" WHERE s.session_key = ANY($2) AND s.state IS NULL AND s.session_token IS NULL"
	"   AND " NOT_HELD_IN_MEMORY
	"   AND NOT EXISTS (SELECT 1 FROM sbq.messages m"
	"                    WHERE m.queue_id = $1 AND m.session_id = s.session_id)"
};

/*
 * whether the lock of session row s is held at time now, by boot, in the row
 * or in shared memory (session_mem.c; sbq.lease_until of -key)
 */
#define SESSION_HELD_AT(now, boot) \
	"((s.session_token IS NOT NULL AND s.locked_until > " now " AND s.locked_boot = " boot ")" \
	" OR coalesce(sbq.lease_until(-s.session_key) > " now ", false))"

/*
 * The sessions of a queue that exist: held, with state or with messages; the
 * messages locked under a lock that is no longer held count as available.
 * $1 queue, $2 now, $3 boot
 */
static SbqStatement stmt_list = {"list sessions", 3, {INT4OID, TIMESTAMPTZOID,
		TIMESTAMPTZOID},
	"SELECT s.session_id, s.state IS NOT NULL,"
	"       (SELECT count(*) FROM sbq.messages m"
	"         WHERE m.queue_id = s.queue_id AND m.session_id = s.session_id"
	"           AND m.state = 0 AND (m.expires_at IS NULL OR m.expires_at > $2)"
	"           AND (m.lock_token IS NULL OR NOT " SESSION_HELD_AT("$2", "$3") ")"
	"           AND NOT coalesce(sbq.lease_until(m.sequence_number) > $2, false)),"
	"       CASE WHEN s.session_token IS NOT NULL AND s.locked_until > $2"
	"                 AND s.locked_boot = $3 THEN s.locked_until"
	"            WHEN sbq.lease_until(-s.session_key) > $2"
	"            THEN sbq.lease_until(-s.session_key) END,"
	"       s.last_updated"
	"  FROM sbq.sessions s"
	" WHERE s.queue_id = $1"
	"   AND (s.state IS NOT NULL OR s.session_token IS NOT NULL"
	"        OR sbq.lease_until(-s.session_key) IS NOT NULL"
	"        OR EXISTS (SELECT 1 FROM sbq.messages m"
	"                    WHERE m.queue_id = s.queue_id AND m.session_id = s.session_id))"
	" ORDER BY s.session_id"
};

/*
 * sbq_session_note_sent
 *		A message seq to session_id of a session queue is being stored (or
 *		activated, or resubmitted): hold the session's row FOR KEY SHARE
 *		until commit, creating it, and mark it ready when nobody holds it
 *		and it had nothing available.
 */
void
sbq_session_note_sent(const SbqQueue *queue, Datum session_id, int64 seq)
{
	Datum		values[4];
	bool		isnull;
	int			tries;

	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = session_id;
	for (tries = 0;; tries++)
	{
		if (sbq_exec_latest(&stmt_note_share, values, NULL) == 1)
			break;
		values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
		values[3] = Int64GetDatum(seq);
		if (sbq_exec_latest(&stmt_note_insert, values, NULL) == 1)
			return;				/* a new row, ready, ours until commit */
		if (tries > 10)
			elog(ERROR, "session row of a send keeps changing");
	}
	if (DatumGetBool(sbq_col(0, 1, &isnull)) || DatumGetBool(sbq_col(0, 2, &isnull)))
		return;
	values[2] = Int64GetDatum(seq);
	(void) sbq_exec_latest(&stmt_note_ready, values, NULL);
}

/* sbq_storage_list_sessions: the sessions of a queue into tupstore */
void
sbq_storage_list_sessions(const SbqQueue *queue, Tuplestorestate *tupstore,
						  TupleDesc tupdesc)
{
	Datum		values[5];
	bool		nulls[5];
	uint64		n;
	uint64		row;
	int			col;

	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[2] = TimestampTzGetDatum(sbq_shmem_boot());
	n = sbq_exec(&stmt_list, values, NULL);
	for (row = 0; row < n; row++)
	{
		for (col = 0; col < 5; col++)
			values[col] = sbq_col(row, col + 1, &nulls[col]);
		tuplestore_putvalues(tupstore, tupdesc, values, nulls);
	}
}

/*
 * sbq_session_purged
 *		After the messages of a session queue were purged: its sessions that
 *		were waiting in line with nothing left leave it (and go, when they
 *		have no state), so that accept-next does not walk them.
 */
void
sbq_session_purged(const SbqQueue *queue)
{
	Datum		values[2];
	bool		isnull;

	values[0] = Int32GetDatum(queue->queue_id);
	(void) sbq_exec_latest(&stmt_purged_ready, values, NULL);
	values[1] = sbq_col(0, 1, &isnull);
	(void) sbq_exec_latest(&stmt_purged_not_ready, values, NULL);
	(void) sbq_exec_latest(&stmt_purged_forget, values, NULL);
}
