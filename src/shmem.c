/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  sbqueue's shared memory, and every access to it.
 *
 * One fixed-size struct, asked for in shmem_request_hook and set up in
 * shmem_startup_hook, so it exists only when sbqueue is in
 * shared_preload_libraries (sbq_shmem_available() says whether it does; every
 * caller has a fallback for when it does not). It holds:
 *
 *	- SBQ_WAIT_SLOTS condition variables. A blocking receive sleeps on the
 *	  one its (database, queue id) hashes to; a commit that made messages
 *	  available there broadcasts it (wait.c). Two queues may share a slot:
 *	  that costs a spurious wake-up, never a missed one.
 *	- The launcher's latch and a "recheck generation" that CREATE/ALTER
 *	  EXTENSION sbqueue and CREATE DATABASE bump at commit, so the launcher
 *	  looks again at the databases it believed had no sbqueue, and a worker
 *	  backing off (its extension had no sbq_maintain()) tries again.
 *	- A registry with one slot per database the launcher, a worker or the DDL
 *	  hook is interested in (worker.c): the pid of the database's worker, the
 *	  "sbqueue is not installed here" answer its worker left when it exited,
 *	  and a hold that keeps workers out while DROP/RENAME/ALTER DATABASE or
 *	  CREATE DATABASE ... TEMPLATE needs the database to itself. There are
 *	  max_worker_processes + SBQ_SPARE_DB_SLOTS slots: every running worker
 *	  needs a worker process slot anyway.
 *	- Beside the struct, the lease table of lease.c (message locks kept in
 *	  shared memory) and the per-queue table of qstate.c (counters not yet
 *	  stored, the next scheduled time), each with its own locks.
 *
 * Locking: the condition variables have their own spinlocks (see
 * condition_variable.c). Everything else is protected by the one spinlock
 * "mutex". It is held only for a scan of the registry and a few stores, never
 * across a call that can fail, sleep or signal; that is what lets the commit
 * callbacks (which must not fail) use it. Latches are set after releasing it.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/shmem.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "lease.h"
#include "qstate.h"
#include "shmem.h"

/* registry slots beyond max_worker_processes: holds of databases with no worker */
#define SBQ_SPARE_DB_SLOTS		16

typedef struct SbqShared
{
	slock_t		mutex;			/* protects all but wait_cvs */
	Latch	   *launcher_latch; /* NULL when no launcher runs */
	uint64		recheck_gen;	/* bumped when sbqueue may have appeared somewhere */
	int			ndbslots;
	ConditionVariable wait_cvs[SBQ_WAIT_SLOTS];
	SbqDbSlotState dbslots[FLEXIBLE_ARRAY_MEMBER];
} SbqShared;

static SbqShared *sbq_shared = NULL;

static shmem_request_hook_type sbq_prev_shmem_request_hook = NULL;
static shmem_startup_hook_type sbq_prev_shmem_startup_hook = NULL;

static int
sbq_shmem_ndbslots(void)
{
	return max_worker_processes + SBQ_SPARE_DB_SLOTS;
}

static Size
sbq_shmem_size(void)
{
	return add_size(offsetof(SbqShared, dbslots),
					mul_size(sbq_shmem_ndbslots(), sizeof(SbqDbSlotState)));
}

/*
 * sbq_shmem_request
 *		shmem_request_hook: reserve the space (PG15+, the only place allowed
 *		to). max_worker_processes is final by now.
 */
static void
sbq_shmem_request(void)
{
	if (sbq_prev_shmem_request_hook)
		sbq_prev_shmem_request_hook();
	RequestAddinShmemSpace(sbq_shmem_size());
	RequestAddinShmemSpace(sbq_lease_shmem_size());
	sbq_lease_shmem_request();
	RequestAddinShmemSpace(sbq_qstate_shmem_size());
	sbq_qstate_shmem_request();
}

/*
 * sbq_shmem_startup
 *		shmem_startup_hook: attach to the struct, and initialize it if this is
 *		the first process to see it (the postmaster, at start and after every
 *		crash-restart, when shared memory is made anew).
 */
static void
sbq_shmem_startup(void)
{
	bool		found;

	if (sbq_prev_shmem_startup_hook)
		sbq_prev_shmem_startup_hook();

	sbq_shared = NULL;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	sbq_shared = ShmemInitStruct("sbqueue", sbq_shmem_size(), &found);
	if (!found)
	{
		int			i;

		SpinLockInit(&sbq_shared->mutex);
		sbq_shared->launcher_latch = NULL;
		sbq_shared->recheck_gen = 1;
		sbq_shared->ndbslots = sbq_shmem_ndbslots();
		for (i = 0; i < SBQ_WAIT_SLOTS; i++)
			ConditionVariableInit(&sbq_shared->wait_cvs[i]);
		memset(sbq_shared->dbslots, 0,
			   sizeof(SbqDbSlotState) * sbq_shared->ndbslots);
	}
	sbq_lease_shmem_startup();
	sbq_qstate_shmem_startup();
	LWLockRelease(AddinShmemInitLock);
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
	return sbq_shared != NULL;
}

/* ------------------------------------------------------------- wake-ups */

/*
 * sbq_shmem_wait_slot
 *		The wake-up slot of a queue of the current database. Queue ids are
 *		per database, so the database takes part in the hash.
 */
int
sbq_shmem_wait_slot(int32 queue_id)
{
	uint32		h;

	h = hash_combine(murmurhash32((uint32) MyDatabaseId),
					 murmurhash32((uint32) queue_id));
	return (int) (h % SBQ_WAIT_SLOTS);
}

/* The condition variable of a slot; shared memory must be there. */
ConditionVariable *
sbq_shmem_wait_cv(int slot)
{
	Assert(sbq_shared != NULL);
	Assert(slot >= 0 && slot < SBQ_WAIT_SLOTS);
	return &sbq_shared->wait_cvs[slot];
}

/* ------------------------------------------------------------- launcher */

/*
 * sbq_shmem_set_launcher
 *		Publish (or, with NULL, withdraw) the running launcher's latch.
 */
void
sbq_shmem_set_launcher(Latch *latch)
{
	SpinLockAcquire(&sbq_shared->mutex);
	sbq_shared->launcher_latch = latch;
	SpinLockRelease(&sbq_shared->mutex);
}

/*
 * sbq_shmem_wake_launcher
 *		Set the launcher's latch, if a launcher runs. Cannot fail: safe in a
 *		commit callback and in a shmem-exit callback. A latch outlives the
 *		process that owned it (it is part of its PGPROC), so setting the latch
 *		of a launcher that has just exited is harmless.
 */
void
sbq_shmem_wake_launcher(void)
{
	Latch	   *latch;

	if (sbq_shared == NULL)
		return;
	SpinLockAcquire(&sbq_shared->mutex);
	latch = sbq_shared->launcher_latch;
	SpinLockRelease(&sbq_shared->mutex);
	if (latch != NULL)
		SetLatch(latch);
}

/* The current recheck generation (see the file header). */
uint64
sbq_shmem_recheck_generation(void)
{
	uint64		gen;

	SpinLockAcquire(&sbq_shared->mutex);
	gen = sbq_shared->recheck_gen;
	SpinLockRelease(&sbq_shared->mutex);
	return gen;
}

/*
 * sbq_shmem_request_recheck
 *		sbqueue may have been installed or updated somewhere: bump the
 *		generation and wake the launcher and every worker. Cannot fail (called
 *		from a commit callback); latches are set with the mutex released, one
 *		slot at a time.
 */
void
sbq_shmem_request_recheck(void)
{
	int			i;

	if (sbq_shared == NULL)
		return;
	SpinLockAcquire(&sbq_shared->mutex);
	sbq_shared->recheck_gen++;
	SpinLockRelease(&sbq_shared->mutex);
	sbq_shmem_wake_launcher();

	for (i = 0; i < sbq_shared->ndbslots; i++)
	{
		Latch	   *latch;

		SpinLockAcquire(&sbq_shared->mutex);
		latch = sbq_shared->dbslots[i].latch;
		SpinLockRelease(&sbq_shared->mutex);
		if (latch != NULL)
			SetLatch(latch);
	}
}

/* ---------------------------------------------------- database registry */

/* The slot of dbid, or NULL. Call with the mutex held. */
static SbqDbSlotState *
sbq_dbslot_find(Oid dbid)
{
	int			i;

	for (i = 0; i < sbq_shared->ndbslots; i++)
		if (sbq_shared->dbslots[i].dbid == dbid)
			return &sbq_shared->dbslots[i];
	return NULL;
}

/* The slot of dbid, taking a free one if it has none; NULL if all are taken. Mutex held. */
static SbqDbSlotState *
sbq_dbslot_find_or_add(Oid dbid)
{
	SbqDbSlotState *slot = sbq_dbslot_find(dbid);
	int			i;

	if (slot != NULL)
		return slot;
	for (i = 0; i < sbq_shared->ndbslots; i++)
	{
		slot = &sbq_shared->dbslots[i];
		if (slot->dbid == InvalidOid)
		{
			memset(slot, 0, sizeof(*slot));
			slot->dbid = dbid;
			return slot;
		}
	}
	return NULL;
}

/*
 * sbq_dbslot_ensure
 *		Make sure dbid has a slot (the launcher does this before it starts a
 *		worker there). False when the registry is full.
 */
bool
sbq_dbslot_ensure(Oid dbid)
{
	bool		ok;

	SpinLockAcquire(&sbq_shared->mutex);
	ok = sbq_dbslot_find_or_add(dbid) != NULL;
	SpinLockRelease(&sbq_shared->mutex);
	return ok;
}

/* A copy of dbid's slot; false if it has none. */
bool
sbq_dbslot_get(Oid dbid, SbqDbSlotState *state)
{
	SbqDbSlotState *slot;

	SpinLockAcquire(&sbq_shared->mutex);
	slot = sbq_dbslot_find(dbid);
	if (slot != NULL)
		*state = *slot;
	SpinLockRelease(&sbq_shared->mutex);
	return slot != NULL;
}

/*
 * sbq_dbslot_register_worker
 *		A worker, connected to dbid, claims the database. Refused (false) while
 *		a hold is on, when another live worker already claimed it, or when the
 *		registry is full: the worker then exits. Because the DDL hook sets the
 *		hold and reads the pid under the same mutex, either the hook sees this
 *		worker (and terminates it) or this worker sees the hold.
 */
bool
sbq_dbslot_register_worker(Oid dbid, pid_t pid, Latch *latch)
{
	TimestampTz now = GetCurrentTimestamp();
	SbqDbSlotState *slot;
	bool		ok = false;

	SpinLockAcquire(&sbq_shared->mutex);
	slot = sbq_dbslot_find_or_add(dbid);
	if (slot != NULL && slot->hold_until <= now && slot->pid == 0)
	{
		slot->pid = pid;
		slot->latch = latch;
		slot->no_extension = false;
		ok = true;
	}
	SpinLockRelease(&sbq_shared->mutex);
	return ok;
}

/*
 * sbq_dbslot_unregister_worker
 *		The worker pid of dbid is exiting. no_extension: because sbqueue is not
 *		installed there, as seen by a look that began at recheck generation
 *		gen. Wakes the launcher, which may have to start another worker. Cannot
 *		fail (runs in a shmem-exit callback).
 */
void
sbq_dbslot_unregister_worker(Oid dbid, pid_t pid, bool no_extension,
							 uint64 gen)
{
	SbqDbSlotState *slot;

	if (sbq_shared == NULL)
		return;
	SpinLockAcquire(&sbq_shared->mutex);
	slot = sbq_dbslot_find(dbid);
	if (slot != NULL && slot->pid == pid)
	{
		slot->pid = 0;
		slot->latch = NULL;
		if (no_extension)
		{
			slot->no_extension = true;
			slot->no_extension_gen = gen;
		}
	}
	SpinLockRelease(&sbq_shared->mutex);
	sbq_shmem_wake_launcher();
}

/*
 * sbq_dbslot_take_no_extension
 *		The launcher collects a worker's "sbqueue is not installed" answer for
 *		dbid (and the generation it was seen at); false if there is none.
 */
bool
sbq_dbslot_take_no_extension(Oid dbid, uint64 *gen)
{
	SbqDbSlotState *slot;
	bool		found = false;

	SpinLockAcquire(&sbq_shared->mutex);
	slot = sbq_dbslot_find(dbid);
	if (slot != NULL && slot->no_extension)
	{
		slot->no_extension = false;
		*gen = slot->no_extension_gen;
		found = true;
	}
	SpinLockRelease(&sbq_shared->mutex);
	return found;
}

/*
 * sbq_dbslot_warn_once
 *		True the first time it is asked for dbid (until the slot is freed or
 *		the server restarts): the worker logs a missing sbq_maintain() once per
 *		database, not once per worker start.
 */
bool
sbq_dbslot_warn_once(Oid dbid)
{
	SbqDbSlotState *slot;
	bool		first = false;

	SpinLockAcquire(&sbq_shared->mutex);
	slot = sbq_dbslot_find(dbid);
	if (slot != NULL && !slot->warned_no_function)
	{
		slot->warned_no_function = true;
		first = true;
	}
	SpinLockRelease(&sbq_shared->mutex);
	return first;
}

/*
 * sbq_dbslot_hold
 *		Keep workers out of dbid until "until" (or sbq_dbslot_release_hold).
 *		Returns the pid of the worker that runs there now (0 if none), for the
 *		caller to terminate. If the registry is full and dbid has no slot, it
 *		has no worker either: nothing to hold off but a start that would then
 *		wait for the DDL's lock and fail; that is accepted.
 */
pid_t
sbq_dbslot_hold(Oid dbid, TimestampTz until)
{
	SbqDbSlotState *slot;
	pid_t		pid = 0;

	SpinLockAcquire(&sbq_shared->mutex);
	slot = sbq_dbslot_find_or_add(dbid);
	if (slot != NULL)
	{
		if (slot->hold_until < until)
			slot->hold_until = until;
		pid = slot->pid;
	}
	SpinLockRelease(&sbq_shared->mutex);
	return pid;
}

/*
 * sbq_dbslot_release_hold
 *		The DDL that held dbid has ended (committed or not): let workers in
 *		again and wake the launcher. Cannot fail (a commit callback).
 */
void
sbq_dbslot_release_hold(Oid dbid)
{
	SbqDbSlotState *slot;

	if (sbq_shared == NULL)
		return;
	SpinLockAcquire(&sbq_shared->mutex);
	slot = sbq_dbslot_find(dbid);
	if (slot != NULL)
		slot->hold_until = 0;
	SpinLockRelease(&sbq_shared->mutex);
	sbq_shmem_wake_launcher();
}

/* The databases that have a slot, up to max of them; returns how many. */
int
sbq_dbslot_list(Oid *dbids, int max)
{
	int			i;
	int			n = 0;

	SpinLockAcquire(&sbq_shared->mutex);
	for (i = 0; i < sbq_shared->ndbslots && n < max; i++)
		if (sbq_shared->dbslots[i].dbid != InvalidOid)
			dbids[n++] = sbq_shared->dbslots[i].dbid;
	SpinLockRelease(&sbq_shared->mutex);
	return n;
}

/* The size of the registry. */
int
sbq_dbslot_count(void)
{
	return sbq_shared->ndbslots;
}

/*
 * sbq_dbslot_free_if_idle
 *		Give dbid's slot back, unless a worker runs there or a hold is on.
 *		The launcher calls it for databases that are gone or not eligible.
 */
void
sbq_dbslot_free_if_idle(Oid dbid)
{
	TimestampTz now = GetCurrentTimestamp();
	SbqDbSlotState *slot;

	SpinLockAcquire(&sbq_shared->mutex);
	slot = sbq_dbslot_find(dbid);
	if (slot != NULL && slot->pid == 0 && slot->hold_until <= now)
		memset(slot, 0, sizeof(*slot));
	SpinLockRelease(&sbq_shared->mutex);
}
