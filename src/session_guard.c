/*-------------------------------------------------------------------------
 *
 * session_guard.c
 *	  The check a settlement of a session queue's message makes: its lock
 *	  lives under a session lock, which must hold now (session.c's row-lock
 *	  protocol, or session_mem.c's locks in shared memory).
 *
 * Owns: nothing shared. Locks: row locks of sbq.sessions (FOR KEY SHARE).
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/session_guard.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "session_mem.h"
#include "shmem.h"
#include "storage_core.h"

/*
 * The session locks that message locks live under, for many at once: $1 their
 * sequence numbers, $3 their tokens (in the same order), $2 queue, $4 boot.
 */
static SbqStatement stmt_messages_session = {"session of message locks", 4,
	{INT8ARRAYOID, INT4OID, UUIDARRAYOID, TIMESTAMPTZOID},
	"SELECT t.seq, s.locked_until"
	"  FROM unnest($1::int8[], $3::uuid[]) t(seq, tok)"
	"  JOIN sbq.messages m ON m.sequence_number = t.seq AND m.queue_id = $2"
	"       AND m.lock_token = t.tok"
	"  JOIN sbq.sessions s ON s.queue_id = m.queue_id AND s.session_id = m.session_id"
	" WHERE s.session_token IS NOT NULL AND s.locked_boot = $4"
	" FOR KEY SHARE OF s"
};

static int	sbq_session_guard_rows(const SbqQueue *queue, Datum *tokens, int ntokens);

/*
 * sbq_storage_session_guard
 *		Whether the message lock token (of a session queue) lives under a
 *		session lock that is held now (the session row locked FOR KEY SHARE).
 *		False too when the token is no message lock at all.
 */
bool
sbq_storage_session_guard(const SbqQueue *queue, const pg_uuid_t *token)
{
	Datum		tokens[1] = {UUIDPGetDatum(token)};

	return sbq_storage_session_guard_many(queue, tokens, 1) < 0;
}

/*
 * sbq_storage_session_guard_many
 *		sbq_storage_session_guard for the (distinct) message lock tokens of a
 *		complete of many: the index of one whose session lock is not held
 *		now, or -1 when all are.
 */
int
sbq_storage_session_guard_many(const SbqQueue *queue, Datum *tokens, int ntokens)
{
	bool	   *rowed;
	Datum	   *rest;
	int		   *map;
	int			nrest = 0;
	int			i;

	if (!sbq_session_locks_in_memory())
		return sbq_session_guard_rows(queue, tokens, ntokens);
	rowed = palloc(sizeof(bool) * Max(ntokens, 1));
	i = sbq_mem_guard_many(queue, tokens, ntokens, rowed);
	if (i >= 0)
		return i;
	/* the tokens with no lease in shared memory: locks stored in rows, or none */
	rest = palloc(sizeof(Datum) * Max(ntokens, 1));
	map = palloc(sizeof(int) * Max(ntokens, 1));
	for (i = 0; i < ntokens; i++)
		if (rowed[i])
		{
			map[nrest] = i;
			rest[nrest++] = tokens[i];
		}
	if (nrest == 0)
		return -1;
	i = sbq_session_guard_rows(queue, rest, nrest);
	return i < 0 ? -1 : map[i];
}

/* sbq_storage_session_guard_many for locks stored in the message rows */
static int
sbq_session_guard_rows(const SbqQueue *queue, Datum *tokens, int ntokens)
{
	Datum		values[4];
	Datum	   *seqs = palloc(sizeof(Datum) * Max(ntokens, 1));
	TimestampTz now;
	uint64		n;
	uint64		row;
	int			i;

	for (i = 0; i < ntokens; i++)
		seqs[i] = Int64GetDatum(sbq_token_sequence(DatumGetUUIDP(tokens[i])));
	values[0] = PointerGetDatum(construct_array(seqs, ntokens, INT8OID, sizeof(int64),
												FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[1] = Int32GetDatum(queue->queue_id);
	values[2] = PointerGetDatum(construct_array(tokens, ntokens, UUIDOID, UUID_LEN, false,
												TYPALIGN_CHAR));
	values[3] = TimestampTzGetDatum(sbq_shmem_boot());
	n = sbq_exec_latest(&stmt_messages_session, values, NULL);
	now = GetCurrentTimestamp();
	for (row = 0; row < n; row++)
	{
		bool		isnull;
		Datum		until = sbq_col(row, 2, &isnull);

		if (isnull || DatumGetTimestampTz(until) <= now)
		{
			int64		seq = DatumGetInt64(sbq_col(row, 1, &isnull));

			for (i = 0; i < ntokens; i++)
				if (DatumGetInt64(seqs[i]) == seq)
					return i;
		}
	}
	if (n == (uint64) ntokens)
		return -1;
	/* a token without a message lock under a held session lock: the first */
	{
		int64		missing = sbq_first_missing(seqs, ntokens, n, 1);

		for (i = 0; i < ntokens; i++)
			if (DatumGetInt64(seqs[i]) == missing)
				return i;
	}
	return 0;
}
