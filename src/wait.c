/*-------------------------------------------------------------------------
 *
 * wait.c
 *	  Wake-ups for blocking receives.
 *
 * Without shared memory (sbqueue not preloaded) a waiting receive simply
 * sleeps on its latch for the time it is given and looks again: correct,
 * only slower to notice a new message.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/wait.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "wait.h"

void
sbq_wait_wake_at_commit(int32 queue_id)
{
}

void
sbq_wait_prepare(int32 queue_id)
{
}

void
sbq_wait_sleep(long timeout_ms)
{
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 Max(timeout_ms, 1), SBQ_WAIT_EVENT_RECEIVE);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

void
sbq_wait_cancel(void)
{
}
