/*-------------------------------------------------------------------------
 *
 * lease.h
 *	  Message locks kept in shared memory ("leases", lease.c): taking one
 *	  writes no WAL, so a peek-lock receive commits without waiting for a WAL
 *	  flush.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/lease.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SBQ_LEASE_H
#define SBQ_LEASE_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "storage/lock.h"
#include "utils/uuid.h"

/* sbqueue.memory_locks: whether peek-lock receives take leases */
extern bool sbq_memory_locks;

/* sbqueue.max_locks: how many leases shared memory holds */
extern int	sbq_max_locks;

/* sbqueue.max_locks_per_database: one database's share (-1: a quarter) */
extern int	sbq_max_locks_per_database;

/* What sbq_lease_claim found. */
typedef enum SbqClaimResult
{
	SBQ_CLAIM_OK,				/* the message is ours for this transaction */
	SBQ_CLAIM_BUSY,				/* a valid lease, or another transaction, holds it */
	SBQ_CLAIM_FULL				/* no room left for another lease */
} SbqClaimResult;

/* An expired lease that sbq_lease_take_expired handed to the caller. */
typedef struct SbqExpiredLease
{
	int64		seq;
	int32		queue_id;
	int16		subqueue;
	int32		delivery_count;
} SbqExpiredLease;

/* shared memory (shmem.c calls these) */
extern Size sbq_lease_shmem_size(void);
extern void sbq_lease_shmem_request(void);
extern void sbq_lease_shmem_startup(void);

extern bool sbq_lease_available(void);
extern bool sbq_lease_enabled(void);

/* per backend, at load: callbacks, and the drop hook with the preload */
extern void sbq_lease_init(bool preload);

/* at commit: end every lock of this database's incarnation epoch (its tables change layout) */
extern void sbq_lease_forget_incarnation(Oid epoch);

/* a storage section works on the leases of one incarnation (epoch) */
extern void sbq_lease_enter(Oid epoch);
extern void sbq_lease_leave(void);

/* at commit: apply this transaction's changes (wait.c calls it before waking) */
extern void sbq_lease_at_commit(void);

/* receive */
extern bool sbq_lease_room_to_clear(int reserve);
extern SbqClaimResult sbq_lease_claim(int64 seq, int32 queue_id, int16 subqueue,
									  TimestampTz now, int32 *prev_count);
extern void sbq_lease_grant(int64 seq, const pg_uuid_t *token, TimestampTz until,
							int32 delivery_count, int64 session_key);
extern void sbq_lease_make_marker(int64 seq);
extern void sbq_lease_unclaim(int64 seq);

/* settle and renew */
extern bool sbq_lease_holds(int64 seq, const pg_uuid_t *token, int32 queue_id,
							int16 subqueue, TimestampTz now);
extern bool sbq_lease_settle(int64 seq, const pg_uuid_t *token, int32 queue_id,
							 int16 subqueue, TimestampTz now, bool row_goes,
							 int32 *delivery_count);
extern bool sbq_lease_renew(int64 seq, const pg_uuid_t *token, int32 queue_id,
							int16 subqueue, TimestampTz now, TimestampTz until);

/* whether another running transaction is changing a row (its xmax) */
extern bool sbq_row_busy(TransactionId xmax);
extern bool sbq_row_busy_infomask(TransactionId xmax, uint16 infomask);

/* the first row of a leasing receive's scan */
extern void sbq_lease_scan_start(void);
extern int64 sbq_lease_scan_first(void);
extern void sbq_lease_scan(int64 *last, int64 *open, TimestampTz *until);
extern bool sbq_lease_freed_here(void);

/* sessions: a session lock is an entry too, keyed by its session's -key */
typedef struct SbqSessionLease
{
	pg_uuid_t	token;
	TimestampTz locked_until;
	int64		lo;				/* the sequence numbers locked under it, */
	int64		hi;				/* or 0 and 0 */
} SbqSessionLease;

typedef enum SbqGroupResult
{
	SBQ_GROUP_DONE,				/* ended, or renewed */
	SBQ_GROUP_NONE,				/* no valid lease of the session there */
	SBQ_GROUP_WAIT				/* another transaction settles or takes it */
} SbqGroupResult;

extern bool sbq_lease_session(int64 key, const pg_uuid_t *token, int32 queue_id,
							  TimestampTz now, SbqSessionLease *out);
extern void sbq_lease_session_widen(int64 key, int64 lo, int64 hi);
extern int64 sbq_lease_session_of(int64 seq, const pg_uuid_t *token, int32 queue_id,
								  TimestampTz now);
extern bool sbq_lease_in_session(int64 seq, int64 key, TimestampTz now);
extern SbqGroupResult sbq_lease_group(int64 seq, int64 key, TimestampTz now,
									  TimestampTz until);
extern int	sbq_lease_take_sessions(int32 queue_id, TimestampTz now, SbqExpiredLease *out,
									int max);
extern int	sbq_lease_owner(int64 seq, VirtualTransactionId *vxid);

/* peek */
extern bool sbq_lease_count_pending_all(bool (*read_counts) (void *arg), void *arg);
extern bool sbq_lease_lookup(int64 seq, int32 queue_id, int16 subqueue, TimestampTz *until,
							 int32 *delivery_count);

/* durable paths and maintenance */
extern bool sbq_lease_absent(int64 seq);
extern int	sbq_lease_take_expired(int32 queue_id, TimestampTz now,
								   SbqExpiredLease *out, int max);
extern int	sbq_lease_take_queue(int32 queue_id, int subqueue);
extern int	sbq_lease_due_all(Oid *dbids, TimestampTz *until, int max);

extern void sbq_lease_internal(const char *name);

#endif							/* SBQ_LEASE_H */
