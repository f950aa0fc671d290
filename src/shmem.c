/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  Sequences sbqueue's shared memory: asks for every module's space and
 *	  locks, and has every module make or attach to its structures. It owns
 *	  none of them.
 *
 * Shared memory exists only when sbqueue is in shared_preload_libraries
 * (sbq_shmem_available() says whether it does; every user has a fallback for
 * when it does not). _PG_init installs the two hooks here; they call, in this
 * order, each owner of a structure, which documents the structure and its
 * locking:
 *
 *	- wait.c: the wake-up condition variables of blocking receives;
 *	- registry.c: the database registry of the launcher, the maintenance
 *	  workers and the utility hook (one LWLock);
 *	- lease.c: the lease table, message locks kept in shared memory (its
 *	  partition LWLocks);
 *	- qstate.c: per-queue state, counters not yet stored and the next
 *	  scheduled time and the head of each queue (one LWLock), and the
 *	  per-backend send slots;
 *	- and here, the time this shared memory was made (sbq_shmem_boot): a
 *	  session lock (session.c) is valid only in the shared memory it was
 *	  taken in, so a crash-restart ends every one.
 *
 * Each owner exports *_shmem_size() (the space to ask for), *_shmem_request()
 * when it needs LWLocks (it asks for its named tranche), and
 * *_shmem_startup(), which makes its structures or attaches to them. Locks:
 * the startup hook holds AddinShmemInitLock around all the startups, as
 * ShmemInitStruct and ShmemInitHash require; nothing else.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/shmem.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/timestamp.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "lease.h"
#include "qstate.h"
#include "registry.h"
#include "shmem.h"
#include "wait.h"

/* whether this process has sbqueue's shared memory */
static bool sbq_shmem_attached = false;

/* when this shared memory was made (written once, by the postmaster) */
static TimestampTz *sbq_shmem_made = NULL;

static shmem_request_hook_type sbq_prev_shmem_request_hook = NULL;
static shmem_startup_hook_type sbq_prev_shmem_startup_hook = NULL;

/*
 * sbq_shmem_request
 *		shmem_request_hook: reserve the space and the LWLocks of every owner
 *		(PG15+, the only place allowed to). max_worker_processes is final by
 *		now.
 */
static void
sbq_shmem_request(void)
{
	if (sbq_prev_shmem_request_hook)
		sbq_prev_shmem_request_hook();
	RequestAddinShmemSpace(sbq_wait_shmem_size());
	RequestAddinShmemSpace(sbq_registry_shmem_size());
	sbq_registry_shmem_request();
	RequestAddinShmemSpace(sbq_lease_shmem_size());
	sbq_lease_shmem_request();
	RequestAddinShmemSpace(sbq_qstate_shmem_size());
	sbq_qstate_shmem_request();
	RequestAddinShmemSpace(MAXALIGN(sizeof(TimestampTz)));
}

/*
 * sbq_shmem_startup
 *		shmem_startup_hook: have every owner attach to its structures, and
 *		initialize them if this is the first process to see them (the
 *		postmaster, at start and after every crash-restart, when shared memory
 *		is made anew).
 */
static void
sbq_shmem_startup(void)
{
	if (sbq_prev_shmem_startup_hook)
		sbq_prev_shmem_startup_hook();

	sbq_shmem_attached = false;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	sbq_wait_shmem_startup();
	sbq_registry_shmem_startup();
	sbq_lease_shmem_startup();
	sbq_qstate_shmem_startup();
	{
		bool		found;

		sbq_shmem_made = ShmemInitStruct("sbqueue boot", sizeof(TimestampTz), &found);
		if (!found)
			*sbq_shmem_made = GetCurrentTimestamp();
	}
	LWLockRelease(AddinShmemInitLock);
	sbq_shmem_attached = true;
}

/*
 * sbq_shmem_install_hooks
 *		Chain the shared memory hooks. Only _PG_init calls this, and only while
 *		shared_preload_libraries is being processed.
 */
void
sbq_shmem_install_hooks(void)
{
	sbq_prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = sbq_shmem_request;
	sbq_prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = sbq_shmem_startup;
}

/*
 * sbq_shmem_available
 *		Whether this process has sbqueue's shared memory, i.e. whether sbqueue
 *		was preloaded. Without it, waits poll and there is no worker.
 */
bool
sbq_shmem_available(void)
{
	return sbq_shmem_attached;
}

/*
 * sbq_shmem_boot
 *		What a session lock is stamped with: when this shared memory was made
 *		(at start and at every crash-restart); without the preload, when the
 *		server started (a crash that it survives then keeps session locks
 *		until they expire).
 */
TimestampTz
sbq_shmem_boot(void)
{
	return sbq_shmem_attached ? *sbq_shmem_made : PgStartTime;
}
