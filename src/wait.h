/*-------------------------------------------------------------------------
 *
 * wait.h
 *	  Wake-ups for blocking receives (wait.c): a receive with max_wait sleeps
 *	  on its queue's slot and a commit that made messages available there
 *	  wakes it.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/wait.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SBQ_WAIT_H
#define SBQ_WAIT_H

#include "postgres.h"

/* shared memory (shmem.c calls these) */
extern Size sbq_wait_shmem_size(void);
extern void sbq_wait_shmem_startup(void);

/*
 * Ask for the queue's waiters to be woken when the current transaction
 * commits (never before; nothing on abort).
 */
extern void sbq_wait_wake_at_commit(int32 queue_id);

/*
 * A waiting receive: sbq_wait_prepare() before each look at the queue, then
 * sbq_wait_sleep() when the look found nothing, and sbq_wait_cancel() when
 * done. A commit between the prepare and the sleep is not missed. The sleep
 * ends on a wake-up, after timeout_ms, or on an interrupt (cancel,
 * statement_timeout), which it raises.
 */
extern void sbq_wait_prepare(int32 queue_id);
extern void sbq_wait_sleep(long timeout_ms);
extern void sbq_wait_cancel(void);

#endif							/* SBQ_WAIT_H */
