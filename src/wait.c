/*-------------------------------------------------------------------------
 *
 * wait.c
 *	  Wake-ups for blocking receives, and the condition variables they sleep
 *	  on.
 *
 * With sbqueue preloaded, every queue maps to one of SBQ_WAIT_SLOTS condition
 * variables in shared memory, which this file owns (shmem.c only asks for
 * them and has them made at startup). A receive with max_wait follows the
 * condition variable protocol of condition_variable.c: it gets on the slot's
 * wait list (sbq_wait_prepare) before it looks at the queue, so a commit that
 * lands between its look and its sleep still wakes it; then it sleeps
 * (sbq_wait_sleep) for at most the time it is given; sbq_wait_cancel takes it
 * off the list. An error during the wait needs no cleanup here: transaction
 * abort calls ConditionVariableCancelSleep itself.
 *
 * A transaction that makes messages available (send, abandon, dead-letter)
 * calls sbq_wait_wake_at_commit, which only remembers the slot in a
 * backend-local bitmap. A transaction callback, registered once per process,
 * broadcasts the remembered slots at XACT_EVENT_COMMIT, which comes after the
 * commit record is flushed and the transaction is visible to other sessions:
 * a woken receiver finds the message, and nobody is woken for a transaction
 * that may still roll back. At abort and at PREPARE the bitmap is forgotten (a
 * prepared transaction's messages are found by the next poll). Before it
 * broadcasts, the callback has lease.c apply the transaction's lock changes
 * (sbq_lease_at_commit), so that a woken receiver never finds a lock the
 * waking transaction ended. None of it can fail, which it must not: an
 * error at that point would be "too late to abort" and turn into a PANIC.
 *
 * Wake-ups are hints, never the only way to see a message: two queues may
 * share a slot (a spurious wake-up), and messages also become available with
 * no commit at all (a lock expiring, a scheduled time passing) or through a
 * path that does not call sbq_wait_wake_at_commit (2PC, a plain INSERT). The
 * caller therefore never sleeps longer than sbqueue.receive_poll_interval
 * before it looks again.
 *
 * Without shared memory (sbqueue not preloaded) a waiting receive simply
 * sleeps on its latch for the time it is given and looks again: correct,
 * only slower to notice a new message. Either way a cancel, a terminate or
 * statement_timeout sets the latch and ends the sleep at once with the error.
 *
 * Owns: the wake-up condition variables ("sbqueue wake-up slots") in shared
 * memory; per backend, the bitmap of slots to wake and the condition variable
 * it is prepared to sleep on. Locks: only the condition variables' own
 * spinlocks (condition_variable.c); at commit, through sbq_lease_at_commit,
 * lease.c's partition LWLocks, one at a time, before any broadcast.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/wait.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/pg_bitutils.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "lease.h"
#include "sbqueue.h"
#include "storage.h"
#include "wait.h"

/* The number of wake-up slots; a queue maps to one by hashing (database, queue id). */
#define SBQ_WAIT_SLOTS			1024

#define SBQ_PENDING_WORDS	(SBQ_WAIT_SLOTS / 64)

/* The wake-up slots in shared memory; NULL when sbqueue is not preloaded. */
static ConditionVariable *sbq_wait_cvs = NULL;

/* The slots this transaction asked to wake at commit. */
static uint64 sbq_pending[SBQ_PENDING_WORDS];
static bool sbq_pending_any = false;
static bool sbq_xact_callback_registered = false;

/* The condition variable this backend is prepared to sleep on, or NULL. */
static ConditionVariable *sbq_prepared_cv = NULL;

/* ---------------------------------------------------------- shared memory */

Size
sbq_wait_shmem_size(void)
{
	return mul_size(SBQ_WAIT_SLOTS, sizeof(ConditionVariable));
}

/*
 * sbq_wait_shmem_startup
 *		Attach to (or create) the wake-up slots; the caller holds
 *		AddinShmemInitLock.
 */
void
sbq_wait_shmem_startup(void)
{
	bool		found;
	int			i;

	sbq_wait_cvs = ShmemInitStruct("sbqueue wake-up slots", sbq_wait_shmem_size(), &found);
	if (!found)
		for (i = 0; i < SBQ_WAIT_SLOTS; i++)
			ConditionVariableInit(&sbq_wait_cvs[i]);
}

/*
 * sbq_wait_slot
 *		The wake-up slot of a queue of the current database. Queue ids are
 *		per database, so the database takes part in the hash.
 */
static int
sbq_wait_slot(int32 queue_id)
{
	uint32		h;

	h = hash_combine(murmurhash32((uint32) MyDatabaseId),
					 murmurhash32((uint32) queue_id));
	return (int) (h % SBQ_WAIT_SLOTS);
}

/* The condition variable of a slot; shared memory must be there. */
static ConditionVariable *
sbq_wait_cv(int slot)
{
	Assert(sbq_wait_cvs != NULL);
	Assert(slot >= 0 && slot < SBQ_WAIT_SLOTS);
	return &sbq_wait_cvs[slot];
}

/* ------------------------------------------------------------------ waking */

/* Forget the remembered slots. */
static void
sbq_wait_forget(void)
{
	if (sbq_pending_any)
	{
		memset(sbq_pending, 0, sizeof(sbq_pending));
		sbq_pending_any = false;
	}
}

/*
 * sbq_wait_xact_callback
 *		Broadcast the remembered slots once the transaction has committed;
 *		forget them when it aborts or is prepared. Must not raise an error
 *		(see the file header): ConditionVariableBroadcast takes a spinlock and
 *		sets latches, nothing else.
 */
static void
sbq_wait_xact_callback(XactEvent event, void *arg)
{
	int			w;

	switch (event)
	{
		case XACT_EVENT_COMMIT:
			if (!sbq_pending_any)
				return;

			/*
			 * What the waiters will look at first: the locks this transaction
			 * ended must be gone before they look (the lease callback may run
			 * after this one; it then has nothing left to do).
			 */
			sbq_lease_at_commit();
			for (w = 0; w < SBQ_PENDING_WORDS; w++)
			{
				uint64		bits = sbq_pending[w];

				while (bits != 0)
				{
					int			b = pg_rightmost_one_pos64(bits);

					ConditionVariableBroadcast(sbq_wait_cv(w * 64 + b));
					bits &= bits - 1;
				}
			}
			sbq_wait_forget();
			break;
		case XACT_EVENT_ABORT:
			/* an error ended a wait: abort already left the wait list */
			sbq_prepared_cv = NULL;
			sbq_wait_forget();
			break;
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_PARALLEL_ABORT:
			sbq_wait_forget();
			break;
		default:
			break;
	}
}

/* Register the transaction callback, once per process. */
static void
sbq_wait_register_callback(void)
{
	if (!sbq_xact_callback_registered)
	{
		RegisterXactCallback(sbq_wait_xact_callback, NULL);
		sbq_xact_callback_registered = true;
	}
}

/*
 * sbq_wait_wake_at_commit
 *		Ask for the queue's waiters to be woken when the current transaction
 *		commits (never before; nothing on abort). Without shared memory there
 *		is nobody to wake: waiters poll.
 */
void
sbq_wait_wake_at_commit(int32 queue_id)
{
	int			slot;

	if (sbq_wait_cvs == NULL)
		return;
	sbq_wait_register_callback();
	slot = sbq_wait_slot(queue_id);
	sbq_pending[slot / 64] |= UINT64CONST(1) << (slot % 64);
	sbq_pending_any = true;
}

/* ----------------------------------------------------------------- waiting */

/*
 * sbq_wait_prepare
 *		Get on the queue's wait list before looking at the queue, so that a
 *		commit between the look and the sleep is not missed. Calling it again
 *		before each look is fine (it re-adds this backend to the list).
 */
void
sbq_wait_prepare(int32 queue_id)
{
	if (sbq_wait_cvs == NULL)
		return;
	sbq_wait_register_callback();
	sbq_prepared_cv = sbq_wait_cv(sbq_wait_slot(queue_id));
	ConditionVariablePrepareToSleep(sbq_prepared_cv);
}

/*
 * sbq_wait_sleep
 *		Sleep until a commit broadcasts the prepared slot, timeout_ms pass, or
 *		an interrupt comes (cancel, terminate, statement_timeout), which is
 *		raised here. May return early for no reason: the caller looks again
 *		and sleeps again. If the look itself slept on another condition
 *		variable (a buffer I/O wait does), this backend fell off the slot's
 *		list; ConditionVariableTimedSleep then puts it back and returns at
 *		once, so the caller looks again rather than sleep unprotected.
 */
void
sbq_wait_sleep(long timeout_ms)
{
	timeout_ms = Max(timeout_ms, 1);
	if (sbq_prepared_cv != NULL)
	{
		(void) ConditionVariableTimedSleep(sbq_prepared_cv, timeout_ms,
										   SBQ_WAIT_EVENT_RECEIVE);
		CHECK_FOR_INTERRUPTS();
		return;
	}
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 timeout_ms, SBQ_WAIT_EVENT_RECEIVE);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/*
 * sbq_wait_cancel
 *		The wait is over: get off the wait list.
 */
void
sbq_wait_cancel(void)
{
	if (sbq_prepared_cv != NULL)
	{
		ConditionVariableCancelSleep();
		sbq_prepared_cv = NULL;
	}
}

/*
 * sbq_wait_more
 *		After a look that found nothing: sleep until a commit on the queue,
 *		the poll interval or the deadline, and say whether to look again.
 */
bool
sbq_wait_more(int64 wait_us, TimestampTz deadline)
{
	TimestampTz now;

	if (wait_us == 0 || IsolationUsesXactSnapshot())
		return false;
	now = GetCurrentTimestamp();
	if (now >= deadline)
		return false;
	sbq_wait_sleep(Min((deadline - now + 999) / 1000, (int64) sbq_receive_poll_interval));
	return true;
}

/*
 * sbq_poll_again
 *		sbq_wait_more for a call inside a storage section: the section is
 *		closed while it sleeps, so what the look that found nothing left in
 *		its memory (its statements' results) goes, and a call that waits an
 *		hour holds no more than one look's worth (it grew by about 20 kB a
 *		look).
 */
bool
sbq_poll_again(int64 wait_us, TimestampTz deadline)
{
	bool		more;

	if (wait_us == 0 || IsolationUsesXactSnapshot())
		return false;
	sbq_storage_end();
	more = sbq_wait_more(wait_us, deadline);
	sbq_storage_begin();
	return more;
}
