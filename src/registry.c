/*-------------------------------------------------------------------------
 *
 * registry.c
 *	  The database registry: the shared memory through which the launcher,
 *	  the maintenance workers, the utility hook and the status function know
 *	  of each other.
 *
 * It exists only when sbqueue is preloaded; shmem.c asks for it and has it
 * made at startup. It holds:
 *
 *	- The launcher's latch; a "recheck generation" that CREATE and ALTER
 *	  EXTENSION sbqueue bump at commit (utility_hook.c), so that a worker
 *	  backing off (its extension had no sbq_maintain()) tries again; a
 *	  "catalog generation" that CREATE DATABASE and the end of every DDL hold
 *	  bump (a database created, dropped or renamed), so that the launcher
 *	  reads pg_database again before it starts another worker; and how many
 *	  databases are due but wait for a worker slot (the launcher sets it, a
 *	  worker that sees it leaves after its tick).
 *	- A slot per database that has sbqueue, may have it (nobody looked yet),
 *	  or is held by DDL: whether it has sbqueue (told by the commit that
 *	  creates or drops the extension there, or found by a worker's look),
 *	  the pid and latch of the worker running there and what the launcher
 *	  asks of it (leave, run now), its last tick (start, end, result), how
 *	  many ticks it had, when the next is due, when the launcher saw a lock
 *	  or a scheduled message come due there, and a hold that keeps workers
 *	  out while DROP/RENAME/ALTER DATABASE or CREATE DATABASE ... TEMPLATE
 *	  needs the database to itself. A database without sbqueue has no slot
 *	  (the launcher remembers that in its own memory) unless a hold made
 *	  one. There are SBQ_REGISTRY_MAX_DBS slots and a few spare ones for
 *	  holds.
 *
 * Locking: one LWLock (tranche "sbqueue registry") protects the whole
 * struct, the slot hash table included; it is taken exclusively to change it
 * and shared to read it, for a look-up or a scan of the slots and a few loads
 * and stores, never across a call that can fail, sleep or signal. It is the
 * only lock taken here and nothing else is held with it, so taking it cannot
 * fail: the commit and abort callbacks and the shmem-exit callbacks (which
 * must not fail) use it. The table has a fixed size and entries are entered
 * with HASH_ENTER_NULL, so a full table is an answer, not an error. Latches
 * are set after releasing the lock. An LWLock needs a PGPROC: every caller
 * is a backend or a background worker (the launcher connects to no database
 * but has one); the postmaster only makes the struct, and no signal handler
 * comes here.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/registry.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "registry.h"
#include "sbqueue.h"

PG_FUNCTION_INFO_V1(sbq_maintenance_status_sql);

#define SBQ_REGISTRY_TRANCHE	"sbqueue registry"

/* slots beyond SBQ_REGISTRY_MAX_DBS: holds on databases without sbqueue */
#define SBQ_SPARE_DB_SLOTS		64
#define SBQ_REGISTRY_SLOTS		(SBQ_REGISTRY_MAX_DBS + SBQ_SPARE_DB_SLOTS)

typedef struct SbqRegistry
{
	Latch	   *launcher_latch; /* NULL when no launcher runs */
	uint64		recheck_gen;	/* bumped when sbqueue was updated somewhere */
	uint64		catalog_gen;	/* bumped when DDL on a database ended */
	int			waiting;		/* databases due that wait for a worker slot */
	uint64		lost;			/* "installed" news dropped for want of a slot */
} SbqRegistry;

/* the struct, its slots, and the lock that protects both (NULL without the preload) */
static SbqRegistry *sbq_registry = NULL;
static HTAB *sbq_dbslots = NULL;
static LWLock *sbq_registry_lock = NULL;

/* ---------------------------------------------------------- shared memory */

/* The space to ask for. */
Size
sbq_registry_shmem_size(void)
{
	return add_size(MAXALIGN(sizeof(SbqRegistry)),
					hash_estimate_size(SBQ_REGISTRY_SLOTS, sizeof(SbqDbSlotState)));
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
	HASHCTL		info;

	sbq_registry = ShmemInitStruct("sbqueue registry", sizeof(SbqRegistry), &found);
	if (!found)
	{
		sbq_registry->launcher_latch = NULL;
		sbq_registry->recheck_gen = 1;
		sbq_registry->catalog_gen = 1;
		sbq_registry->waiting = 0;
		sbq_registry->lost = 0;
	}
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(Oid);
	info.entrysize = sizeof(SbqDbSlotState);
	sbq_dbslots = ShmemInitHash("sbqueue registry databases", SBQ_REGISTRY_SLOTS,
								SBQ_REGISTRY_SLOTS, &info,
								HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	sbq_registry_lock = &(GetNamedLWLockTranche(SBQ_REGISTRY_TRANCHE))->lock;
}

/* Whether there is a registry (sbqueue is preloaded). */
bool
sbq_registry_available(void)
{
	return sbq_registry != NULL;
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
 * sbq_registry_catalog_generation
 *		A number that moves whenever pg_database may have changed in a way the
 *		launcher must see before it starts another worker (CREATE DATABASE,
 *		and every end of a DDL hold: DROP or RENAME of a database), or
 *		sbqueue was created or updated (the recheck generation).
 */
uint64
sbq_registry_catalog_generation(void)
{
	uint64		gen;

	LWLockAcquire(sbq_registry_lock, LW_SHARED);
	gen = sbq_registry->recheck_gen + sbq_registry->catalog_gen;
	LWLockRelease(sbq_registry_lock);
	return gen;
}

/*
 * sbq_registry_request_recheck
 *		sbqueue was updated somewhere: bump the generation and wake the
 *		launcher and every worker. Cannot fail (called from a commit
 *		callback): the latches are gathered under the lock and set after it.
 */
void
sbq_registry_request_recheck(void)
{
	Latch	   *latches[SBQ_REGISTRY_SLOTS];
	int			n = 0;
	int			i;
	HASH_SEQ_STATUS hs;
	SbqDbSlotState *slot;

	if (sbq_registry == NULL)
		return;
	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	sbq_registry->recheck_gen++;
	hash_seq_init(&hs, sbq_dbslots);
	while ((slot = hash_seq_search(&hs)) != NULL)
		if (slot->latch != NULL && n < SBQ_REGISTRY_SLOTS)
			latches[n++] = slot->latch;
	LWLockRelease(sbq_registry_lock);
	sbq_registry_wake_launcher();
	for (i = 0; i < n; i++)
		SetLatch(latches[i]);
}

/* How many "installed" news a full registry has dropped since startup. */
uint64
sbq_registry_lost(void)
{
	uint64		lost;

	LWLockAcquire(sbq_registry_lock, LW_SHARED);
	lost = sbq_registry->lost;
	LWLockRelease(sbq_registry_lock);
	return lost;
}

/*
 * sbq_registry_request_rescan
 *		A database was created: the launcher should read pg_database again.
 *		Cannot fail (a commit callback).
 */
void
sbq_registry_request_rescan(void)
{
	if (sbq_registry == NULL)
		return;
	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	sbq_registry->catalog_gen++;
	LWLockRelease(sbq_registry_lock);
	sbq_registry_wake_launcher();
}

/* The launcher: how many due databases wait for a worker slot. */
void
sbq_registry_set_waiting(int waiting)
{
	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	sbq_registry->waiting = waiting;
	LWLockRelease(sbq_registry_lock);
}

/* A worker: whether databases wait for its slot. */
int
sbq_registry_waiting(void)
{
	int			waiting;

	LWLockAcquire(sbq_registry_lock, LW_SHARED);
	waiting = sbq_registry->waiting;
	LWLockRelease(sbq_registry_lock);
	return waiting;
}

/* ------------------------------------------------------- database slots */

/* The slot of dbid, or NULL. Call with the lock held. */
static SbqDbSlotState *
sbq_dbslot_find(Oid dbid)
{
	return (SbqDbSlotState *) hash_search(sbq_dbslots, &dbid, HASH_FIND, NULL);
}

/*
 * The slot of dbid, taking a free one if it has none; NULL if none is free
 * (only holds may take the spare ones). Lock held exclusively.
 */
static SbqDbSlotState *
sbq_dbslot_find_or_add(Oid dbid, bool for_hold)
{
	SbqDbSlotState *slot;
	bool		found;

	slot = sbq_dbslot_find(dbid);
	if (slot != NULL)
		return slot;
	if (!for_hold && hash_get_num_entries(sbq_dbslots) >= SBQ_REGISTRY_MAX_DBS)
		return NULL;
	slot = (SbqDbSlotState *) hash_search(sbq_dbslots, &dbid, HASH_ENTER_NULL, &found);
	if (slot != NULL && !found)
	{
		memset(((char *) slot) + sizeof(Oid), 0, sizeof(SbqDbSlotState) - sizeof(Oid));
		slot->state = SBQ_DB_UNKNOWN;
	}
	return slot;
}

/* Remove a slot. Lock held exclusively. */
static void
sbq_dbslot_remove(SbqDbSlotState *slot)
{
	Oid			dbid = slot->dbid;

	(void) hash_search(sbq_dbslots, &dbid, HASH_REMOVE, NULL);
}

/* sbq_dbslot_publish, with the registry's lock held exclusively */
static void
sbq_dbslot_publish_locked(Oid dbid, bool installed)
{
	SbqDbSlotState *slot;

	slot = installed ? sbq_dbslot_find_or_add(dbid, false) : sbq_dbslot_find(dbid);
	if (slot != NULL)
	{
		/* newly installed: due at once (another extension's news changes nothing) */
		if (installed && slot->state != SBQ_DB_INSTALLED)
		{
			slot->next_due = 0;
			slot->warned_no_function = false;
		}
		slot->state = installed ? SBQ_DB_INSTALLED : SBQ_DB_ABSENT;
		slot->state_gen++;
		slot->recheck = false;
	}
	else if (installed)
		sbq_registry->lost++;
}

/*
 * sbq_dbslot_publish
 *		A committed transaction created sbqueue in dbid (installed) or dropped
 *		it: say so, so that the launcher schedules passes there (or stops),
 *		and wake the launcher. An installed database is due at once. Cannot
 *		fail (a commit callback); a full registry drops the news and counts
 *		that (the launcher logs it; sbqueue state in shared memory makes it
 *		look at the database again once a slot is free).
 */
void
sbq_dbslot_publish(Oid dbid, bool installed)
{
	if (sbq_registry == NULL)
		return;
	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	sbq_dbslot_publish_locked(dbid, installed);
	LWLockRelease(sbq_registry_lock);
	sbq_registry_wake_launcher();
}

/*
 * sbq_dbslot_seen
 *		What the registry holds of dbid now, for a later
 *		sbq_dbslot_publish_if_changed: whether it has a slot (*known) and
 *		the generation of the slot's state.
 */
uint64
sbq_dbslot_seen(Oid dbid, bool *known)
{
	SbqDbSlotState slot;

	*known = sbq_registry != NULL && sbq_dbslot_get(dbid, &slot);
	return *known ? slot.state_gen : 0;
}

/*
 * sbq_dbslot_publish_if_changed
 *		A COMMIT PREPARED in dbid has committed and, read from the catalog
 *		after sbq_dbslot_seen gave (known, gen), sbqueue is installed there
 *		now, or not: tell the registry as a commit would, but only if that
 *		is news (a distributed database commits many prepared transactions,
 *		and each telling wakes the launcher; "not installed" is news only to
 *		a database the registry holds as installed), and only if no commit
 *		has told the registry anything since (known, gen) were read: its
 *		news is newer than this catalog read, and must not be undone.
 */
void
sbq_dbslot_publish_if_changed(Oid dbid, bool installed, bool known, uint64 gen)
{
	SbqDbSlotState *slot;
	bool		was_installed;

	if (sbq_registry == NULL)
		return;
	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	slot = sbq_dbslot_find(dbid);
	was_installed = slot != NULL && slot->state == SBQ_DB_INSTALLED;
	if ((slot != NULL) != known || (slot != NULL && slot->state_gen != gen) ||
		installed == was_installed)
	{
		LWLockRelease(sbq_registry_lock);
		return;
	}
	sbq_dbslot_publish_locked(dbid, installed);
	LWLockRelease(sbq_registry_lock);
	sbq_registry_wake_launcher();
}

/*
 * sbq_dbslot_publish_prepared
 *		A transaction that created or dropped an extension in dbid was
 *		prepared: no callback of ours runs at its COMMIT PREPARED (the
 *		statement's utility hook tells what it finds then). Unless the
 *		database is known to have sbqueue (its passes then find out), have the
 *		launcher look there again every recheck period while prepared
 *		transactions are pending. Cannot fail (a transaction callback).
 */
void
sbq_dbslot_publish_prepared(Oid dbid)
{
	SbqDbSlotState *slot;

	if (sbq_registry == NULL)
		return;
	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	slot = sbq_dbslot_find_or_add(dbid, false);
	if (slot != NULL && slot->state != SBQ_DB_INSTALLED)
	{
		slot->state = SBQ_DB_ABSENT;
		slot->state_gen++;
		slot->recheck = true;
	}
	LWLockRelease(sbq_registry_lock);
	sbq_registry_wake_launcher();
}

/*
 * sbq_dbslot_ensure
 *		Make sure dbid has a slot (the launcher does this for a database it
 *		has not heard of: its state is then unknown), and copy it to *state.
 *		False when the registry is full.
 */
bool
sbq_dbslot_ensure(Oid dbid, SbqDbSlotState *state)
{
	SbqDbSlotState *slot;

	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	slot = sbq_dbslot_find_or_add(dbid, false);
	if (slot != NULL)
		*state = *slot;
	LWLockRelease(sbq_registry_lock);
	return slot != NULL;
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
 * sbq_dbslot_take_absent
 *		The launcher takes the answer "sbqueue is not installed" of dbid: if
 *		its slot says so, and neither a worker nor a hold needs the slot, the
 *		slot goes and *recheck says whether the launcher should look again
 *		later (a prepared transaction may still create the extension). In one
 *		step, so that a commit telling "installed" in between is not lost.
 */
bool
sbq_dbslot_take_absent(Oid dbid, bool *recheck)
{
	TimestampTz now = GetCurrentTimestamp();
	SbqDbSlotState *slot;
	bool		taken = false;

	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	slot = sbq_dbslot_find(dbid);
	if (slot != NULL && slot->state == SBQ_DB_ABSENT && slot->pid == 0 &&
		slot->hold_until <= now)
	{
		*recheck = slot->recheck;
		sbq_dbslot_remove(slot);
		taken = true;
	}
	LWLockRelease(sbq_registry_lock);
	return taken;
}

/*
 * sbq_dbslot_ask
 *		The launcher asks the worker of dbid to leave after its tick (or now,
 *		if it sleeps), or to run a tick now. Sets its latch.
 */
void
sbq_dbslot_ask(Oid dbid, bool leave, bool run_now)
{
	SbqDbSlotState *slot;
	Latch	   *latch = NULL;

	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	slot = sbq_dbslot_find(dbid);
	if (slot != NULL && slot->pid != 0)
	{
		slot->leave |= leave;
		slot->run_now |= run_now;
		latch = slot->latch;
	}
	LWLockRelease(sbq_registry_lock);
	if (latch != NULL)
		SetLatch(latch);
}

/* The launcher: a lock or scheduled message of dbid came due at "when" (0: none). */
void
sbq_dbslot_set_work_due(Oid dbid, TimestampTz when)
{
	SbqDbSlotState *slot;

	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	slot = sbq_dbslot_find(dbid);
	if (slot != NULL)
		slot->work_due = when;
	LWLockRelease(sbq_registry_lock);
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
		sbq_dbslot_remove(slot);
	LWLockRelease(sbq_registry_lock);
}

/* The databases that have a slot, up to max of them; returns how many. */
int
sbq_dbslot_list(Oid *dbids, int max)
{
	HASH_SEQ_STATUS hs;
	SbqDbSlotState *slot;
	int			n = 0;

	LWLockAcquire(sbq_registry_lock, LW_SHARED);
	hash_seq_init(&hs, sbq_dbslots);
	while ((slot = hash_seq_search(&hs)) != NULL)
	{
		if (n < max)
			dbids[n++] = slot->dbid;
	}
	LWLockRelease(sbq_registry_lock);
	return n;
}

/*
 * sbq_dbslot_register_worker
 *		A worker, connected to dbid, claims the database. Refused (false) while
 *		a hold is on, when another live worker already claimed it, or when the
 *		registry is full: the worker then exits. Because the DDL hook sets the
 *		hold and reads the pid under the same lock, either the hook sees this
 *		worker (and terminates it) or this worker sees the hold. *idle_ticks
 *		and *failures say how long the database has been idle or failing
 *		(its last worker's back-off carries over).
 */
bool
sbq_dbslot_register_worker(Oid dbid, pid_t pid, Latch *latch, int32 *idle_ticks,
						   int32 *failures)
{
	TimestampTz now = GetCurrentTimestamp();
	SbqDbSlotState *slot;
	bool		ok = false;

	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	slot = sbq_dbslot_find_or_add(dbid, false);
	if (slot != NULL && slot->hold_until <= now && slot->pid == 0)
	{
		slot->pid = pid;
		slot->latch = latch;
		slot->in_pass = false;
		slot->leave = false;
		slot->run_now = false;
		*idle_ticks = slot->idle_ticks;
		*failures = slot->failures;
		ok = true;
	}
	LWLockRelease(sbq_registry_lock);
	return ok;
}

/*
 * sbq_dbslot_unregister_worker
 *		The worker pid of dbid is exiting. Wakes the launcher, which may start
 *		a worker elsewhere. Cannot fail (runs in a shmem-exit callback).
 */
void
sbq_dbslot_unregister_worker(Oid dbid, pid_t pid)
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
		slot->in_pass = false;
		slot->leave = false;
		slot->run_now = false;
	}
	LWLockRelease(sbq_registry_lock);
	sbq_registry_wake_launcher();
}

/*
 * sbq_dbslot_set_absent
 *		A worker's look found no sbqueue in dbid. Recorded only if no commit
 *		told the state since the look began (seen_gen, from
 *		sbq_dbslot_pass_begin): a CREATE EXTENSION that committed after that
 *		wins. recheck: a prepared transaction in the database may still
 *		create it.
 */
void
sbq_dbslot_set_absent(Oid dbid, uint64 seen_gen, bool recheck)
{
	SbqDbSlotState *slot;

	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	slot = sbq_dbslot_find(dbid);
	if (slot != NULL && slot->state_gen == seen_gen)
	{
		slot->state = SBQ_DB_ABSENT;
		slot->recheck = recheck;
	}
	LWLockRelease(sbq_registry_lock);
}

/*
 * A worker begins a tick in dbid. Returns the generation of the slot's state
 * before the tick looks for sbqueue, for sbq_dbslot_set_absent and
 * sbq_dbslot_pass_end.
 */
uint64
sbq_dbslot_pass_begin(Oid dbid, TimestampTz now)
{
	SbqDbSlotState *slot;
	uint64		gen = 0;

	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	slot = sbq_dbslot_find(dbid);
	if (slot != NULL)
	{
		gen = slot->state_gen;
		slot->in_pass = true;
		slot->run_now = false;
		slot->last_start = now;
		slot->last_end = 0;
	}
	LWLockRelease(sbq_registry_lock);
	return gen;
}

/*
 * A worker ended a tick in dbid: how, and when the next one is due. A tick
 * that did not fail found sbqueue there: the state says so, unless a commit
 * told otherwise since the tick began (gen).
 */
void
sbq_dbslot_pass_end(Oid dbid, uint64 gen, TimestampTz now, SbqPassResult result,
					int32 failures, int32 idle_ticks, TimestampTz next_due)
{
	SbqDbSlotState *slot;

	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	slot = sbq_dbslot_find(dbid);
	if (slot != NULL)
	{
		if (result != SBQ_RESULT_ERROR && slot->state_gen == gen)
			slot->state = SBQ_DB_INSTALLED;
		slot->in_pass = false;
		slot->last_end = now;
		slot->last_result = result;
		slot->passes++;
		slot->failures = failures;
		slot->idle_ticks = idle_ticks;
		slot->next_due = next_due;
	}
	LWLockRelease(sbq_registry_lock);
	/* the launcher skips a worker in its tick: it may now plan an early one */
	sbq_registry_wake_launcher();
}

/* A worker: what the launcher asks of it (run_now is taken). */
void
sbq_dbslot_poll(Oid dbid, bool *leave, bool *run_now)
{
	SbqDbSlotState *slot;

	*leave = false;
	*run_now = false;
	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	slot = sbq_dbslot_find(dbid);
	if (slot != NULL)
	{
		*leave = slot->leave;
		*run_now = slot->run_now;
		slot->run_now = false;
	}
	LWLockRelease(sbq_registry_lock);
}

/*
 * sbq_dbslot_warn_once
 *		True the first time it is asked for dbid (until the slot is freed, the
 *		extension is created again or the server restarts): the worker logs a
 *		missing sbq_maintain() once per database, not once per worker start.
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
 *		caller to terminate. If even the spare slots are taken and dbid has
 *		none, it has no worker either: nothing to hold off but a start that
 *		would then wait for the DDL's lock and fail; that is accepted.
 */
pid_t
sbq_dbslot_hold(Oid dbid, TimestampTz until)
{
	SbqDbSlotState *slot;
	pid_t		pid = 0;

	LWLockAcquire(sbq_registry_lock, LW_EXCLUSIVE);
	slot = sbq_dbslot_find_or_add(dbid, true);
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
	sbq_registry->catalog_gen++;
	LWLockRelease(sbq_registry_lock);
	sbq_registry_wake_launcher();
}

/* Copies of every slot, up to max of them; returns how many. */
int
sbq_dbslot_snapshot(SbqDbSlotState *out, int max)
{
	HASH_SEQ_STATUS hs;
	SbqDbSlotState *slot;
	int			n = 0;

	LWLockAcquire(sbq_registry_lock, LW_SHARED);
	hash_seq_init(&hs, sbq_dbslots);
	while ((slot = hash_seq_search(&hs)) != NULL)
	{
		if (n < max)
			out[n++] = *slot;
	}
	LWLockRelease(sbq_registry_lock);
	return n;
}

/* ------------------------------------------------------- the status function */

static Datum
sbq_timestamp_or_null(TimestampTz t, bool *isnull)
{
	*isnull = (t == 0);
	return TimestampTzGetDatum(t);
}

/*
 * sbq_maintenance_status_sql
 *		sbq_maintenance_status(): a row per database that has sbqueue (or may
 *		have: nobody looked yet) in the registry: its worker, its last tick
 *		and when the next is due. No rows without the preload. A role sees
 *		the databases it may connect to, all of them with the privileges of
 *		pg_read_all_stats (as for other sessions' queries in
 *		pg_stat_activity): when another tenant's locks expire is its own.
 */
Datum
sbq_maintenance_status_sql(PG_FUNCTION_ARGS)
{
	Tuplestorestate *tupstore;
	TupleDesc	tupdesc;
	SbqDbSlotState *slots;
	int			n;
	int			i;
	bool		all;

	tupstore = sbq_init_srf(fcinfo, &tupdesc);
	all = has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
	if (sbq_registry == NULL)
		return (Datum) 0;

	slots = palloc(sizeof(SbqDbSlotState) * SBQ_REGISTRY_SLOTS);
	n = sbq_dbslot_snapshot(slots, SBQ_REGISTRY_SLOTS);
	for (i = 0; i < n; i++)
	{
		SbqDbSlotState *s = &slots[i];
		Datum		values[10];
		bool		nulls[10];
		char	   *name;
		static const char *const results[] = {NULL, "ok", "error", "no sbq_maintain()"};

		CHECK_FOR_INTERRUPTS();
		if (s->state == SBQ_DB_ABSENT)
			continue;
		if (!all && sbq_database_aclcheck(s->dbid, GetUserId(), ACL_CONNECT) != ACLCHECK_OK)
			continue;
		name = get_database_name(s->dbid);
		if (name == NULL)
			continue;			/* dropped: the launcher forgets it */
		if (s->state == SBQ_DB_UNKNOWN && s->last_start == 0 && s->pid == 0 &&
			s->hold_until > 0)
			continue;			/* only a hold made this slot */

		memset(nulls, 0, sizeof(nulls));
		values[0] = DirectFunctionCall1(namein, CStringGetDatum(name));
		values[1] = ObjectIdGetDatum(s->dbid);
		values[2] = CStringGetTextDatum(s->state == SBQ_DB_INSTALLED ? "installed" : "unknown");
		values[3] = Int32GetDatum((int32) s->pid);
		nulls[3] = (s->pid == 0);
		values[4] = sbq_timestamp_or_null(s->last_start, &nulls[4]);
		if (s->last_start != 0 && s->last_end >= s->last_start)
			values[5] = DirectFunctionCall2(timestamp_mi,
											TimestampTzGetDatum(s->last_end),
											TimestampTzGetDatum(s->last_start));
		else
			nulls[5] = true;
		nulls[6] = (s->last_result == SBQ_RESULT_NONE);
		if (!nulls[6])
			values[6] = CStringGetTextDatum(results[s->last_result]);
		values[7] = Int64GetDatum(s->passes);
		values[8] = sbq_timestamp_or_null(s->state == SBQ_DB_INSTALLED ? s->next_due : 0,
										  &nulls[8]);
		values[9] = sbq_timestamp_or_null(s->work_due, &nulls[9]);
		tuplestore_putvalues(tupstore, tupdesc, values, nulls);
	}
	return (Datum) 0;
}
