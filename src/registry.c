/*-------------------------------------------------------------------------
 *
 * registry.c
 *	  The database registry: the shared memory through which the launcher,
 *	  the maintenance workers and the utility hook know of each other.
 *
 * One fixed-size struct in shared memory (it exists only when sbqueue is
 * preloaded; shmem.c asks for it and has it made at startup). It holds:
 *
 *	- The launcher's latch and a "recheck generation" that CREATE/ALTER
 *	  EXTENSION sbqueue and CREATE DATABASE bump at commit (utility_hook.c),
 *	  so the launcher looks again at the databases it believed had no
 *	  sbqueue, and a worker backing off (its extension had no sbq_maintain())
 *	  tries again.
 *	- One slot per database the launcher, a worker or the utility hook is
 *	  interested in: the pid and latch of the database's worker, the
 *	  "sbqueue is not installed here" answer its worker left when it exited,
 *	  whether the missing-sbq_maintain() WARNING was logged, and a hold that
 *	  keeps workers out while DROP/RENAME/ALTER DATABASE or CREATE DATABASE
 *	  ... TEMPLATE needs the database to itself. There are
 *	  max_worker_processes + SBQ_SPARE_DB_SLOTS slots: every running worker
 *	  needs a worker process slot anyway.
 *
 * Locking: one LWLock (tranche "sbqueue registry") protects the whole
 * struct; it is taken exclusively to change it and shared to read it, for a
 * scan of the slots and a few loads and stores, never across a call that can
 * fail, sleep or signal. It is the only lock taken here and nothing else is
 * held with it, so taking it cannot fail: the commit and abort callbacks and
 * the shmem-exit callbacks (which must not fail) use it. Latches are set
 * after releasing it. An LWLock needs a PGPROC: every caller is a backend or
 * a background worker (the launcher connects to no database but has one);
 * the postmaster only makes the struct, and no signal handler comes here.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/registry.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#include "registry.h"

#define SBQ_REGISTRY_TRANCHE	"sbqueue registry"

/* registry slots beyond max_worker_processes: holds of databases with no worker */
#define SBQ_SPARE_DB_SLOTS		16

typedef struct SbqRegistry
{
	Latch	   *launcher_latch; /* NULL when no launcher runs */
	uint64		recheck_gen;	/* bumped when sbqueue may have appeared somewhere */
	int			ndbslots;
	SbqDbSlotState dbslots[FLEXIBLE_ARRAY_MEMBER];
} SbqRegistry;

/* the struct, and the lock that protects it (NULL without the preload) */
static SbqRegistry *sbq_registry = NULL;
static LWLock *sbq_registry_lock = NULL;

static int
sbq_registry_ndbslots(void)
{
	return max_worker_processes + SBQ_SPARE_DB_SLOTS;
}

/* ---------------------------------------------------------- shared memory */

/* The space to ask for; max_worker_processes is final by now. */
Size
sbq_registry_shmem_size(void)
{
	return add_size(offsetof(SbqRegistry, dbslots),
					mul_size(sbq_registry_ndbslots(), sizeof(SbqDbSlotState)));
}

/* Ask for the lock (in shmem_request_hook). */
void
sbq_registry_shmem_request(void)
{
	RequestNamedLWLockTranche(SBQ_REGISTRY_TRANCHE, 1);
}

/*
 * sbq_registry_shmem_startup
 *		Attach to (or create) the registry; the caller holds
 *		AddinShmemInitLock.
 */
void
sbq_registry_shmem_startup(void)
{
	bool		found;

	sbq_registry = ShmemInitStruct("sbqueue registry", sbq_registry_shmem_size(), &found);
	if (!found)
	{
		sbq_registry->launcher_latch = NULL;
		sbq_registry->recheck_gen = 1;
		sbq_registry->ndbslots = sbq_registry_ndbslots();
		memset(sbq_registry->dbslots, 0,
			   sizeof(SbqDbSlotState) * sbq_registry->ndbslots);
	}
	sbq_registry_lock = &(GetNamedLWLockTranche(SBQ_REGISTRY_TRANCHE))->lock;
}

/* ------------------------------------------------------------- launcher */

/*
 * sbq_registry_set_launcher
 *		Publish (or, with NULL, withdraw) the running launcher's latch.
 */
void
sbq_registry_set_launcher(Latch *latch)
{
	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	sbq_registry->launcher_latch = latch;
	LWLockRelease(sbq_registry_lock);
}

/*
 * sbq_registry_wake_launcher
 *		Set the launcher's latch, if a launcher runs. Cannot fail: safe in a
 *		commit callback and in a shmem-exit callback. A latch outlives the
 *		process that owned it (it is part of its PGPROC), so setting the latch
 *		of a launcher that has just exited is harmless.
 */
void
sbq_registry_wake_launcher(void)
{
	Latch	   *latch;

	if (sbq_registry == NULL)
		return;
	LWLockAcquire(sbq_registry_lock, LW_SHARED);
	latch = sbq_registry->launcher_latch;
	LWLockRelease(sbq_registry_lock);
	if (latch != NULL)
		SetLatch(latch);
}

/* The current recheck generation (see the file header). */
uint64
sbq_registry_recheck_generation(void)
{
	uint64		gen;

	LWLockAcquire(sbq_registry_lock, LW_SHARED);
	gen = sbq_registry->recheck_gen;
	LWLockRelease(sbq_registry_lock);
	return gen;
}

/*
 * sbq_registry_request_recheck
 *		sbqueue may have been installed or updated somewhere: bump the
 *		generation and wake the launcher and every worker. Cannot fail (called
 *		from a commit callback); latches are set with the lock released, one
 *		slot at a time.
 */
void
sbq_registry_request_recheck(void)
{
	int			i;

	if (sbq_registry == NULL)
		return;
	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	sbq_registry->recheck_gen++;
	LWLockRelease(sbq_registry_lock);
	sbq_registry_wake_launcher();

	for (i = 0; i < sbq_registry->ndbslots; i++)
	{
		Latch	   *latch;

		LWLockAcquire(sbq_registry_lock, LW_SHARED);
		latch = sbq_registry->dbslots[i].latch;
		LWLockRelease(sbq_registry_lock);
		if (latch != NULL)
			SetLatch(latch);
	}
}

/* ------------------------------------------------------- database slots */

/* The slot of dbid, or NULL. Call with the lock held. */
static SbqDbSlotState *
sbq_dbslot_find(Oid dbid)
{
	int			i;

	for (i = 0; i < sbq_registry->ndbslots; i++)
		if (sbq_registry->dbslots[i].dbid == dbid)
			return &sbq_registry->dbslots[i];
	return NULL;
}

/* The slot of dbid, taking a free one if it has none; NULL if all are taken. Lock held
 * exclusively. */
static SbqDbSlotState *
sbq_dbslot_find_or_add(Oid dbid)
{
	SbqDbSlotState *slot = sbq_dbslot_find(dbid);
	int			i;

	if (slot != NULL)
		return slot;
	for (i = 0; i < sbq_registry->ndbslots; i++)
	{
		slot = &sbq_registry->dbslots[i];
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

	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	ok = sbq_dbslot_find_or_add(dbid) != NULL;
	LWLockRelease(sbq_registry_lock);
	return ok;
}

/* A copy of dbid's slot; false if it has none. */
bool
sbq_dbslot_get(Oid dbid, SbqDbSlotState *state)
{
	SbqDbSlotState *slot;

	LWLockAcquire(sbq_registry_lock, LW_SHARED);
	slot = sbq_dbslot_find(dbid);
	if (slot != NULL)
		*state = *slot;
	LWLockRelease(sbq_registry_lock);
	return slot != NULL;
}

/*
 * sbq_dbslot_register_worker
 *		A worker, connected to dbid, claims the database. Refused (false) while
 *		a hold is on, when another live worker already claimed it, or when the
 *		registry is full: the worker then exits. Because the DDL hook sets the
 *		hold and reads the pid under the same lock, either the hook sees this
 *		worker (and terminates it) or this worker sees the hold.
 */
bool
sbq_dbslot_register_worker(Oid dbid, pid_t pid, Latch *latch)
{
	TimestampTz now = GetCurrentTimestamp();
	SbqDbSlotState *slot;
	bool		ok = false;

	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	slot = sbq_dbslot_find_or_add(dbid);
	if (slot != NULL && slot->hold_until <= now && slot->pid == 0)
	{
		slot->pid = pid;
		slot->latch = latch;
		slot->no_extension = false;
		ok = true;
	}
	LWLockRelease(sbq_registry_lock);
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

	if (sbq_registry == NULL)
		return;
	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
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
	LWLockRelease(sbq_registry_lock);
	sbq_registry_wake_launcher();
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
	bool		found;

	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	slot = sbq_dbslot_find(dbid);
	found = slot != NULL && slot->no_extension;
	if (found)
	{
		*gen = slot->no_extension_gen;
		slot->no_extension = false;
	}
	LWLockRelease(sbq_registry_lock);
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

	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	slot = sbq_dbslot_find(dbid);
	if (slot != NULL && !slot->warned_no_function)
	{
		slot->warned_no_function = true;
		first = true;
	}
	LWLockRelease(sbq_registry_lock);
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

	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	slot = sbq_dbslot_find_or_add(dbid);
	if (slot != NULL)
	{
		if (slot->hold_until < until)
			slot->hold_until = until;
		pid = slot->pid;
	}
	LWLockRelease(sbq_registry_lock);
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

	if (sbq_registry == NULL)
		return;
	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	slot = sbq_dbslot_find(dbid);
	if (slot != NULL)
		slot->hold_until = 0;
	LWLockRelease(sbq_registry_lock);
	sbq_registry_wake_launcher();
}

/* The databases that have a slot, up to max of them; returns how many. */
int
sbq_dbslot_list(Oid *dbids, int max)
{
	int			i;
	int			n = 0;

	LWLockAcquire(sbq_registry_lock, LW_SHARED);
	for (i = 0; i < sbq_registry->ndbslots && n < max; i++)
		if (sbq_registry->dbslots[i].dbid != InvalidOid)
			dbids[n++] = sbq_registry->dbslots[i].dbid;
	LWLockRelease(sbq_registry_lock);
	return n;
}

/* The size of the registry. */
int
sbq_dbslot_count(void)
{
	return sbq_registry->ndbslots;
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

	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	slot = sbq_dbslot_find(dbid);
	if (slot != NULL && slot->pid == 0 && slot->hold_until <= now)
		memset(slot, 0, sizeof(*slot));
	LWLockRelease(sbq_registry_lock);
}
