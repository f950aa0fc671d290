/*-------------------------------------------------------------------------
 *
 * session_mem.h
 *	  Session locks kept in shared memory (session_mem.c), for session.c.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/session_mem.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SBQ_SESSION_MEM_H
#define SBQ_SESSION_MEM_H

#include "postgres.h"

#include "lease.h"
#include "storage.h"

extern SbqAcceptResult sbq_mem_accept(const SbqQueue *queue, text *session_id,
									  SbqSessionLock *out);
extern bool sbq_mem_lookup(const SbqQueue *queue, const pg_uuid_t *token, bool mutex,
						   SbqSessionLock *out, SbqSessionLease *sl);
extern bool sbq_mem_receive(const SbqQueue *queue, const SbqSessionLock *lock,
							const int64 *seqs, int nseqs, int max_messages,
							Tuplestorestate *tupstore, TupleDesc tupdesc,
							SbqReceiveResult *result, int64 *missing);
extern bool sbq_mem_renew(const SbqQueue *queue, const pg_uuid_t *token,
						  TimestampTz *locked_until);
extern bool sbq_mem_release(const SbqQueue *queue, const pg_uuid_t *token);
extern int	sbq_mem_guard_many(const SbqQueue *queue, Datum *tokens, int ntokens,
							   bool *rowed);
extern bool sbq_mem_state_lookup(const SbqQueue *queue, const pg_uuid_t *token, bool set,
								 SbqSessionLock *out);
extern char *sbq_mem_session_id(int64 key);
extern int	sbq_mem_expire(TimestampTz now, int limit);

/* session_probe.c: a look at a session through the indexes, in place of a statement */
typedef enum SbqProbeResult
{
	SBQ_PROBE_UNSURE,			/* cannot tell: run the statement */
	SBQ_PROBE_NO_ROW,			/* the session has no row */
	SBQ_PROBE_NONE,				/* none of its messages asked for counts */
	SBQ_PROBE_SOME				/* one does */
} SbqProbeResult;

typedef struct SbqSessionProbe
{
	int32		queue_id;
	int64		key;
	bool		latest;			/* as sbq_exec_latest's snapshot, else sbq_exec's */
	int			nstates;		/* the states of the messages to look for */
	int16		states[2];
	bool		available;		/* only those with no lock stored, not expired at now */
	TimestampTz now;
	int64		ready_seq;		/* out: the session's ready mark */
	bool		ready_null;
} SbqSessionProbe;

typedef struct SbqSessionLine SbqSessionLine;

extern SbqProbeResult sbq_session_probe(SbqSessionProbe *p, const SbqSessionLine *line);
extern SbqSessionLine *sbq_session_line_begin(int32 queue_id, int64 start);
extern bool sbq_session_line_next(SbqSessionLine *l, int64 *key, int64 *ready, bool *row_held,
								  char **id);
extern int	sbq_session_line_gone(const SbqSessionLine *l);
extern void sbq_session_line_end(SbqSessionLine *l);
extern bool sbq_session_surely_empty(int32 queue_id, int64 key);
extern void sbq_session_probe_skip(int64 key);

/* session.c, for this file */
extern bool sbq_session_row_end_stale(const SbqQueue *queue, int64 key);

#endif							/* SBQ_SESSION_MEM_H */
