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

/* session_probe.c, for lease_receive.c */
extern bool sbq_session_surely_empty(int32 queue_id, int64 key);
extern void sbq_session_probe_skip(int64 key);

/* session.c, for this file */
extern bool sbq_session_row_end_stale(const SbqQueue *queue, int64 key);

#endif							/* SBQ_SESSION_MEM_H */
