/*-------------------------------------------------------------------------
 *
 * storage.h
 *	  The storage interface: what the SQL-callable functions (api.c) and
 *	  lease.c call to read and change queue state.
 *
 * Every call runs between sbq_storage_begin() and sbq_storage_end() (a
 * "storage section", storage_core.c). The calls live by operation:
 *	queues.c		queue lookup and management, purge
 *	rights.c		rights on queues, and the check of the caller's
 *	send.c			send, duplicate detection, scheduled activation, cancel,
 *					resubmit
 *	receive.c		receive with locks in the rows, receive-and-delete, peek,
 *					receive of deferred messages
 *	lease_receive.c	peek-lock receive with locks in shared memory (also under
 *					a session lock)
 *	lease_sweep.c	what leases leave to store, and the sweep of expired ones
 *	settle.c		complete, abandon, defer, dead-letter, renew
 *	session.c		sessions: accept, receive, renew, state, release, expiry
 *					(locks in the rows), and the choice of where locks live
 *	session_mem.c	the same with session locks in shared memory (preloaded)
 *	session_guard.c	the check a settlement of a session's message makes
 *	session_ready.c	what sends and purges do to sessions, the list of sessions
 *	maintain.c		one maintenance pass over a database
 * Their shared machinery (statements, the section, counters) is in
 * storage_core.h, for those files only.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/storage.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SBQ_STORAGE_H
#define SBQ_STORAGE_H

#include "sbqueue.h"

/* storage_core.c: the storage section */
extern void sbq_storage_refuse_nested(void);
extern void sbq_storage_begin(void);
extern void sbq_storage_end(void);
extern bool sbq_storage_subxact_aborted(SubTransactionId subid);
extern void sbq_storage_pin_settings(void);
extern void sbq_storage_subxact_begin(void);
extern MemoryContext sbq_storage_caller_context(void);
extern Oid	sbq_storage_epoch(void);
extern Oid	sbq_storage_caller(void);

/* queues.c */
extern bool sbq_storage_find_queue(const SbqAddress *addr, SbqQueue *queue);
extern void sbq_storage_get_queue(const SbqAddress *addr, SbqQueue *queue, int16 rights);
extern void sbq_queue_not_found(const SbqAddress *addr) pg_attribute_noreturn();
extern void sbq_refuse_unmanaged_forwarders(const SbqAddress *addr);
extern void sbq_storage_get_queue_held(const SbqAddress *addr, SbqQueue *queue, int16 rights);
extern void sbq_storage_get_queue_to_send(const SbqAddress *addr, SbqQueue *queue);
extern void sbq_storage_recheck_queue(const SbqAddress *addr, SbqQueue *queue, int16 rights);
extern HeapTuple sbq_storage_queue_tuple(int32 queue_id, TupleDesc tupdesc,
										 MemoryContext mcxt);
extern int32 sbq_storage_create_queue(const char *name, const char *key,
									  const SbqQueue *props);
extern void sbq_storage_update_queue(const SbqQueue *props);
extern void sbq_storage_delete_queue(int32 queue_id);
extern int64 sbq_storage_purge(const SbqQueue *queue, int16 subqueue);

/* rights.c */
extern void sbq_storage_set_rights(const SbqQueue *queue, Oid role, int16 rights, bool grant);

/* send_direct.c */
extern bool sbq_send_direct(const Datum *values, const bool *nulls,
							const Datum *bodies, int nbodies, int64 *seqs);

/* send.c */
extern int	sbq_storage_send(const SbqQueue *queue, const SbqSendProps *props,
							 Datum *bodies, int nbodies, const char *default_content_type,
							 int64 *seqs);
extern bool sbq_storage_cancel_scheduled(const SbqQueue *queue, int64 seq);
extern int	sbq_storage_resubmit(const SbqQueue *queue, Datum *seqs, int nseqs,
								 int64 *missing);

/* receive.c */
extern SbqReceiveResult sbq_storage_receive(const SbqQueue *queue, int16 subqueue,
											int max_messages, SbqReceiveMode mode,
											Tuplestorestate *tupstore, TupleDesc tupdesc);
extern int	sbq_storage_peek(const SbqQueue *queue, int16 subqueue, int max_messages,
							 int64 from_seq, Tuplestorestate *tupstore, TupleDesc tupdesc);
extern bool sbq_storage_receive_deferred(const SbqQueue *queue, int16 subqueue,
										 Datum *seqs, int nseqs, Tuplestorestate *tupstore,
										 TupleDesc tupdesc, int64 *missing);

/* settle.c */
/* What became of a message whose lock a settlement ended (sbq_settle reports it). */
typedef enum SbqSettled
{
	SBQ_SETTLED_LOST,			/* the lock was not valid: nothing changed */
	SBQ_SETTLED_COMPLETED,
	SBQ_SETTLED_ABANDONED,
	SBQ_SETTLED_DEFERRED,
	SBQ_SETTLED_DEAD_LETTERED,	/* also an abandon or defer on the last delivery */
	SBQ_SETTLED_EXPIRED,		/* its time to live had passed: dropped */
	SBQ_SETTLED_RENEWED
} SbqSettled;
extern bool sbq_storage_complete(const SbqQueue *queue, int16 subqueue,
								 const pg_uuid_t *token);
extern int	sbq_storage_complete_many(const SbqQueue *queue, int16 subqueue,
									  Datum *tokens, int ntokens, bool *settled);
extern int	sbq_storage_complete_each(const SbqQueue *queue, int16 subqueue,
									  Datum *tokens, int ntokens, bool *settled);
extern bool sbq_storage_release(const SbqQueue *queue, int16 subqueue,
								const pg_uuid_t *token, int16 state, Jsonb *props_to_modify,
								int64 delay_usecs, SbqSettled *done);
extern bool sbq_storage_deadletter(const SbqQueue *queue, const pg_uuid_t *token,
								   text *reason, text *description, Jsonb *props_to_modify);
extern bool sbq_storage_renew(const SbqQueue *queue, int16 subqueue,
							  const pg_uuid_t *token, TimestampTz *locked_until);

/* session.c */
typedef struct SbqSessionLock
{
	int64		key;			/* the session's row */
	char	   *session_id;		/* NULL for a lock in shared memory, until needed */
	pg_uuid_t	token;
	TimestampTz locked_until;
	bool		in_memory;		/* kept in shared memory (session_mem.c), not in the row */
} SbqSessionLock;

typedef enum SbqAcceptResult
{
	SBQ_ACCEPT_OK,
	SBQ_ACCEPT_HELD,			/* another holder has it (SB005) */
	SBQ_ACCEPT_NONE				/* no session with available messages */
} SbqAcceptResult;

extern bool sbq_storage_sessions_available(void);
extern SbqAcceptResult sbq_storage_accept_session(const SbqQueue *queue, text *session_id,
												  SbqSessionLock *out);
extern bool sbq_storage_session_held(const SbqQueue *queue, const pg_uuid_t *token,
									 SbqSessionLock *out);
extern bool sbq_storage_session_guard(const SbqQueue *queue, const pg_uuid_t *token);
extern int	sbq_storage_session_guard_many(const SbqQueue *queue, Datum *tokens, int ntokens);
extern SbqReceiveResult sbq_storage_receive_session(const SbqQueue *queue,
													const SbqSessionLock *lock,
													int max_messages,
													Tuplestorestate *tupstore,
													TupleDesc tupdesc);
extern bool sbq_storage_receive_deferred_session(const SbqQueue *queue,
												 SbqSessionLock *lock,
												 Datum *seqs, int nseqs,
												 Tuplestorestate *tupstore,
												 TupleDesc tupdesc, int64 *missing);
extern bool sbq_storage_renew_session(const SbqQueue *queue, const pg_uuid_t *token,
									  TimestampTz *locked_until);
extern bool sbq_storage_session_state(const SbqQueue *queue, const pg_uuid_t *token,
									  bool set, bytea **state);
extern bool sbq_storage_release_session(const SbqQueue *queue, const pg_uuid_t *token);
extern void sbq_storage_list_sessions(const SbqQueue *queue, Tuplestorestate *tupstore,
									  TupleDesc tupdesc);

/* maintain.c */
/* What a pass did, as sbq_maintain() reports it. */
typedef struct SbqMaintainResult
{
	int64		queues;
	int64		activated;
	int64		released;
	int64		dead_lettered;
	int64		expired_dead;
	int64		expired_dropped;
	int64		forgotten;
	int64		dead_letters_removed;
	int64		dead_letters_forwarded;
	int64		dead_letters_kept;	/* could not be forwarded: deferred */
	int64		sessions_expired;
	bool		more;
	bool		skipped;
} SbqMaintainResult;
extern void sbq_storage_maintain(SbqMaintainResult *acc);
extern Jsonb *sbq_maintain_result_json(const SbqMaintainResult *r);

#endif							/* SBQ_STORAGE_H */
