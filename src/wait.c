/*-------------------------------------------------------------------------
 *
 * wait.c
 *	  Wake-ups for blocking receives.
 *
 * With sbqueue preloaded, every queue maps to one of SBQ_WAIT_SLOTS condition
 * variables in shared memory (shmem.c). A receive with max_wait follows the
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
 * prepared transaction's messages are found by the next poll). The callback
 * does only spinlock and latch work: an error at that point would be "too
 * late to abort" and turn into a PANIC.
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
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/wait.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "port/pg_bitutils.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "lease.h"
#include "shmem.h"
#include "wait.h"

#define SBQ_PENDING_WORDS	(SBQ_WAIT_SLOTS / 64)

/* The slots this transaction asked to wake at commit. */
static uint64 sbq_pending[SBQ_PENDING_WORDS];
static bool sbq_pending_any = false;
static bool sbq_xact_callback_registered = false;

/* The condition variable this backend is prepared to sleep on, or NULL. */
static ConditionVariable *sbq_prepared_cv = NULL;

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

					ConditionVariableBroadcast(sbq_shmem_wait_cv(w * 64 + b));
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

	if (!sbq_shmem_available())
		return;
	sbq_wait_register_callback();
	slot = sbq_shmem_wait_slot(queue_id);
	sbq_pending[slot / 64] |= UINT64CONST(1) << (slot % 64);
	sbq_pending_any = true;
}

/*
 * sbq_wait_prepare
 *		Get on the queue's wait list before looking at the queue, so that a
 *		commit between the look and the sleep is not missed. Calling it again
 *		before each look is fine (it re-adds this backend to the list).
 */
void
sbq_wait_prepare(int32 queue_id)
{
	if (!sbq_shmem_available())
		return;
	sbq_wait_register_callback();
	sbq_prepared_cv = sbq_shmem_wait_cv(sbq_shmem_wait_slot(queue_id));
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
