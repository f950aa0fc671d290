/*-------------------------------------------------------------------------
 *
 * qstate.h
 *	  Per-queue state in shared memory (qstate.c): counters not yet stored in
 *	  sbq.queue_counters, when the queue's next scheduled message is due, and
 *	  where its head is (where a leasing receive starts its scan).
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/qstate.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SBQ_QSTATE_H
#define SBQ_QSTATE_H

#include "postgres.h"

#include "datatype/timestamp.h"

/* sbqueue.max_queues: the entries of the table, for every database of the server */
extern int	sbq_qstate_max;

/* sbqueue.max_queues_per_database: one database's share (-1: half the table) */
extern int	sbq_qstate_max_per_database;
extern int	sbq_qstate_db_limit(void);

/* The counters of a queue, in the column order of sbq.queue_counters. */
#define SBQ_NUM_COUNTERS 7
typedef struct SbqCounts
{
	int64		sent;
	int64		received;
	int64		completed;
	int64		abandoned;
	int64		deferred;
	int64		dead_lettered;
	int64		expired;
} SbqCounts;

/* shared memory (shmem.c calls these) */
extern Size sbq_qstate_shmem_size(void);
extern void sbq_qstate_shmem_request(void);
extern void sbq_qstate_shmem_startup(void);

/*
 * A queue is known here by (database, epoch, queue id), the epoch being the
 * OID of sbq.queues: a queue id of an extension dropped and created again is
 * another queue.
 */

/*
 * Set while the installed SQL is 0.1's (storage_core.c), which has no
 * sbq_maintain(): nothing would ever store the counts kept here, nor free
 * the entries of its queues, so none are made for it and its calls work as
 * past a full table.
 */
extern bool sbq_qstate_no_new_entries;

/* counters */
extern bool sbq_qstate_count(Oid epoch, int32 queue_id, const SbqCounts *c);
extern bool sbq_counts_seen(void);
extern bool sbq_qstate_take(Oid epoch, int32 queue_id, SbqCounts *c, bool only_if_old);
extern int	sbq_qstate_queues(Oid epoch, int32 *queue_ids, int max, bool live_only);
extern int	sbq_qstate_sweep_gone(Oid epoch, int32 *gone, int ngone, TimestampTz oldest);
extern TimestampTz sbq_qstate_oldest_start(void);
extern bool sbq_qstate_busy(Oid epoch, int32 queue_id, bool *pending);
extern void sbq_qstate_forget(Oid epoch, int32 queue_id);
extern void sbq_qstate_forget_all(Oid dbid, Oid epoch);

/* scheduled messages */
extern bool sbq_qstate_due(Oid epoch, int32 queue_id, TimestampTz now, uint64 *gen);
extern void sbq_qstate_set_due(Oid epoch, int32 queue_id, uint64 gen, bool any,
							   TimestampTz next);
extern void sbq_qstate_scheduled(Oid epoch, int32 queue_id, TimestampTz when);
extern int	sbq_qstate_work_all(Oid *dbids, TimestampTz *due, bool *active, int max,
								bool *blind);

/* the head of a queue */
extern void sbq_qstate_send_begin(Oid epoch, int32 queue_id);
extern void sbq_qstate_send_done(Oid epoch, int64 max_seq);

/* where a leasing receive of the main queue may start, read before its scan */
typedef struct SbqHead
{
	int64		hint;			/* the head hint */
	int64		bound;			/* no number still to appear is below this */
	uint64		gen;			/* the head hint's generation when read */
	int64		free;			/* the free hint (0: none) */
	TimestampTz free_until;		/* and until when it holds */
	uint64		free_gen;		/* its generation when read */
} SbqHead;

extern bool sbq_qstate_head(Oid epoch, int32 queue_id, SbqHead *head);
extern void sbq_qstate_advance(Oid epoch, int32 queue_id, int64 candidate, uint64 gen);
extern void sbq_qstate_free_advance(Oid epoch, int32 queue_id, const SbqHead *head,
									int64 candidate, TimestampTz until, TimestampTz now);
extern void sbq_qstate_free_lower(Oid epoch, int32 queue_id, int64 seq);
extern int64 sbq_qstate_prepares(Oid epoch);
extern bool sbq_qstate_refresh(Oid epoch, int32 queue_id, TimestampTz now, int64 prepares,
							   int64 *hint);
extern int64 sbq_qstate_maintain_floor(Oid epoch, int32 queue_id, TimestampTz now);
extern void sbq_qstate_lower(Oid epoch, int32 queue_id, int64 seq);

/* where accept-next's walk of a session queue's line may start */
typedef struct SbqLine
{
	int64		floor;			/* no entry below it is there for a snapshot to come */
	uint64		gen;			/* its generation when read */
	bool		have_bound;		/* the bound was read */
	int64		bound;			/* no number still to appear is below this */
} SbqLine;

extern bool sbq_qstate_line(Oid epoch, int32 queue_id, SbqLine *line);
extern void sbq_qstate_line_raise(Oid epoch, int32 queue_id, const SbqLine *line,
								  int64 candidate);
extern void sbq_qstate_line_lower(Oid epoch, int32 queue_id, int64 mark);
extern int64 sbq_qstate_accept_resume(Oid epoch, int32 queue_id);
extern void sbq_qstate_set_accept_resume(Oid epoch, int32 queue_id, int64 mark);
extern void sbq_qstate_accept_back(Oid epoch, int32 queue_id, int64 mark);

/* locks stored in a queue's rows, which maintenance looks for */
extern void sbq_qstate_row_lock(Oid epoch, int32 queue_id);
extern bool sbq_qstate_row_locks_look(Oid epoch, int32 queue_id, TimestampTz now,
									  uint64 *gen);
extern void sbq_qstate_no_row_locks(Oid epoch, int32 queue_id, bool none,
									TransactionId xmin, uint64 gen, int64 floor);

#endif							/* SBQ_QSTATE_H */
