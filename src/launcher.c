/*-------------------------------------------------------------------------
 *
 * launcher.c
 *	  The maintenance launcher: the process that starts a maintenance worker
 *	  (maintenance_worker.c) in every database that may have sbqueue.
 *
 * Only with sbqueue in shared_preload_libraries. The launcher is a static
 * background worker ("sbqueue launcher"), registered by _PG_init, started once
 * recovery has finished (so never on a standby) and restarted
 * SBQ_LAUNCHER_RESTART_S seconds after it dies, and at once after a
 * crash-restart. It connects to no database and reads pg_database. For every
 * database that accepts connections and is not a template it starts a dynamic
 * worker ("sbqueue maintenance"), which connects to it and looks for the
 * extension:
 *
 *	- not installed: the worker records that answer in the database registry
 *	  (registry.c) and exits. The launcher does not start one there again until
 *	  CREATE EXTENSION sbqueue (or ALTER EXTENSION sbqueue, or CREATE
 *	  DATABASE) commits somewhere, which bumps the registry's recheck
 *	  generation (utility_hook.c), or SBQ_RECHECK_MS pass (a safety net for
 *	  paths the hook cannot see, such as a prepared CREATE EXTENSION). A
 *	  database without sbqueue therefore costs one short-lived process now and
 *	  then.
 *	- installed: the worker maintains the database until the extension is
 *	  dropped, and then exits as above.
 *
 * A worker that stops for any other reason (terminated, held off, an error
 * it could not handle) is started again by the launcher after a delay that
 * doubles, from 1 s up to 60 s, while its workers keep dying young. If the
 * launcher dies, the workers keep running and the new launcher adopts them
 * through the registry (each worker records its pid there and wakes the
 * launcher when it exits). sbqueue.enable_maintenance_worker = off (on
 * SIGHUP) makes the launcher idle until it is turned on again.
 *
 * Owns: what the launcher knows of each database, in its own memory (a hash
 * table of SbqLauncherDb). It publishes its latch in the registry, where
 * commits that concern it and exiting workers set it. Locks: none of its own;
 * the registry's functions take the registry's lock, and a tick reads
 * pg_database in a short transaction of its own.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/launcher.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "registry.h"
#include "worker.h"

/* seconds before the postmaster starts a dead launcher again */
#define SBQ_LAUNCHER_RESTART_S		5
/* the launcher's longest sleep: it wakes earlier on every event it cares about */
#define SBQ_LAUNCHER_NAP_MS			10000
/* how often a database believed to lack sbqueue is looked at anyway */
#define SBQ_RECHECK_MS				(5 * 60 * 1000)
/* worker restart delays: first, and the cap it doubles up to */
#define SBQ_RESTART_DELAY_MS		1000
#define SBQ_RESTART_DELAY_MAX_MS	60000
/* a worker that lived this long did not "die young" */
#define SBQ_WORKER_HEALTHY_MS		10000

/* What the launcher knows about one database (launcher-local). */
typedef struct SbqLauncherDb
{
	Oid			dbid;			/* hash key */
	NameData	name;
	bool		seen;			/* in this tick's pg_database scan */
	bool		no_extension;	/* its worker found no sbqueue ... */
	uint64		no_extension_gen;	/* ... at this recheck generation ... */
	TimestampTz no_extension_at;	/* ... at about this time */
	BackgroundWorkerHandle *handle; /* the worker this launcher started */
	TimestampTz started_at;
	TimestampTz not_before;		/* no new worker before this */
	int			restart_delay_ms;
} SbqLauncherDb;

static HTAB *sbq_launcher_dbs = NULL;
static MemoryContext sbq_launcher_cxt = NULL;
static MemoryContext sbq_launcher_tick_cxt = NULL;
static bool sbq_launcher_warned_slots = false;

/*
 * sbq_bgworker
 *		The parts the launcher and the maintenance workers share of a
 *		background worker's registration: a connection to shared memory and
 *		a database, started once recovery has finished, entry point function
 *		of this library.
 */
static void
sbq_bgworker(BackgroundWorker *worker, const char *function, const char *type,
			 int restart_time)
{
	memset(worker, 0, sizeof(*worker));
	worker->bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker->bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker->bgw_restart_time = restart_time;
	snprintf(worker->bgw_library_name, BGW_MAXLEN, "sbqueue");
	snprintf(worker->bgw_function_name, BGW_MAXLEN, "%s", function);
	snprintf(worker->bgw_type, BGW_MAXLEN, "%s", type);
}

/*
 * sbq_launcher_register
 *		Register the launcher. Called by _PG_init only while
 *		shared_preload_libraries is processed (and not in binary upgrade
 *		mode).
 */
void
sbq_launcher_register(void)
{
	BackgroundWorker worker;

	sbq_bgworker(&worker, "sbq_launcher_main", "sbqueue launcher", SBQ_LAUNCHER_RESTART_S);
	snprintf(worker.bgw_name, BGW_MAXLEN, "sbqueue launcher");
	worker.bgw_main_arg = (Datum) 0;
	worker.bgw_notify_pid = 0;
	RegisterBackgroundWorker(&worker);
}

/*
 * sbq_launcher_shmem_exit
 *		before_shmem_exit callback: withdraw the launcher's latch, so nobody
 *		signals a launcher that is gone (harmless anyway, but tidy).
 */
static void
sbq_launcher_shmem_exit(int code, Datum arg)
{
	sbq_registry_set_launcher(NULL);
}

/*
 * sbq_launcher_databases
 *		The databases a worker may run in, read from pg_database in a short
 *		transaction: not templates, accepting connections, not left invalid
 *		by an interrupted DROP DATABASE. Returned as a list of SbqLauncherDb
 *		stubs (dbid and name) in the tick context.
 */
static List *
sbq_launcher_databases(void)
{
	List	   *dbs = NIL;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;
	MemoryContext oldcxt;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	(void) GetTransactionSnapshot();

	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);
		SbqLauncherDb *stub;

		if (db->datistemplate || !db->datallowconn || sbq_database_is_invalid(db))
			continue;
		oldcxt = MemoryContextSwitchTo(sbq_launcher_tick_cxt);
		stub = palloc0(sizeof(SbqLauncherDb));
		stub->dbid = db->oid;
		namestrcpy(&stub->name, NameStr(db->datname));
		dbs = lappend(dbs, stub);
		MemoryContextSwitchTo(oldcxt);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);

	CommitTransactionCommand();
	MemoryContextSwitchTo(sbq_launcher_tick_cxt);
	return dbs;
}

/*
 * sbq_launcher_start_worker
 *		Register a dynamic worker for one database. False when no background
 *		worker slot is free; the caller then stops trying for this tick.
 */
static bool
sbq_launcher_start_worker(SbqLauncherDb *db, TimestampTz now)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	MemoryContext oldcxt;

	sbq_bgworker(&worker, "sbq_worker_main", "sbqueue maintenance", BGW_NEVER_RESTART);
	snprintf(worker.bgw_name, BGW_MAXLEN, "sbqueue maintenance worker for database \"%s\"",
			 NameStr(db->name));
	worker.bgw_main_arg = ObjectIdGetDatum(db->dbid);
	worker.bgw_notify_pid = MyProcPid;

	/* the handle lives as long as the launcher's table, not the tick */
	oldcxt = MemoryContextSwitchTo(sbq_launcher_cxt);
	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
	{
		MemoryContextSwitchTo(oldcxt);
		if (!sbq_launcher_warned_slots)
		{
			ereport(WARNING,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("sbqueue launcher could not start a maintenance worker for database \"%s\"",
							NameStr(db->name)),
					 errdetail("All background worker slots are in use; the launcher will keep trying."),
					 errhint("You may need to increase \"max_worker_processes\": sbqueue needs one slot for its launcher and one for every database that has the extension.")));
			sbq_launcher_warned_slots = true;
		}
		return false;
	}
	MemoryContextSwitchTo(oldcxt);
	db->handle = handle;
	db->started_at = now;
	return true;
}

/*
 * sbq_launcher_update_nap
 *		Shorten the coming sleep so that the launcher is awake at "when".
 */
static void
sbq_launcher_update_nap(long *nap_ms, TimestampTz now, TimestampTz when)
{
	long		ms = (long) ((when - now + 999) / 1000);

	*nap_ms = Max(Min(*nap_ms, ms), 10);
}

/*
 * sbq_launcher_consider
 *		Decide about one database: collect what its last worker said, notice a
 *		worker that stopped, and start one when it should run and none does.
 *		Returns false when a start failed for lack of worker slots.
 */
static bool
sbq_launcher_consider(SbqLauncherDb *db, uint64 gen, TimestampTz now,
					  long *nap_ms, bool may_start)
{
	SbqDbSlotState slot;
	uint64		seen_gen;

	if (sbq_dbslot_take_no_extension(db->dbid, &seen_gen))
	{
		db->no_extension = true;
		db->no_extension_gen = seen_gen;
		db->no_extension_at = now;
	}

	if (db->handle != NULL)
	{
		pid_t		pid;
		BgwHandleStatus status = GetBackgroundWorkerPid(db->handle, &pid);

		if (status == BGWH_POSTMASTER_DIED)
			proc_exit(1);
		if (status != BGWH_STOPPED)
			return true;		/* starting or running */
		pfree(db->handle);
		db->handle = NULL;
		if (!db->no_extension)
		{
			/* it stopped without saying why: start it again, later */
			if (TimestampDifferenceExceeds(db->started_at, now, SBQ_WORKER_HEALTHY_MS))
				db->restart_delay_ms = SBQ_RESTART_DELAY_MS;
			else
				db->restart_delay_ms = Min(Max(db->restart_delay_ms * 2, SBQ_RESTART_DELAY_MS),
										   SBQ_RESTART_DELAY_MAX_MS);
			db->not_before = TimestampTzPlusMilliseconds(now, db->restart_delay_ms);
		}
	}

	if (!sbq_enable_maintenance_worker)
		return true;

	if (db->no_extension)
	{
		if (db->no_extension_gen == gen &&
			!TimestampDifferenceExceeds(db->no_extension_at, now, SBQ_RECHECK_MS))
		{
			/* its registry slot is not needed until the next look */
			sbq_dbslot_free_if_idle(db->dbid);
			return true;
		}
		db->no_extension = false;	/* look again */
	}

	if (sbq_dbslot_get(db->dbid, &slot))
	{
		if (slot.pid != 0)
			return true;		/* a worker runs (perhaps adopted) */
		if (slot.hold_until > now)
		{
			sbq_launcher_update_nap(nap_ms, now, slot.hold_until);
			return true;
		}
	}
	if (db->not_before > now)
	{
		sbq_launcher_update_nap(nap_ms, now, db->not_before);
		return true;
	}
	if (!may_start)
		return true;
	if (!sbq_dbslot_ensure(db->dbid))
	{
		/* the registry has max_worker_processes + spare slots: cannot start anyway */
		*nap_ms = Min(*nap_ms, 1000);
		return false;
	}
	if (!sbq_launcher_start_worker(db, now))
	{
		*nap_ms = Min(*nap_ms, 1000);
		return false;
	}
	return true;
}

/*
 * sbq_launcher_tick
 *		One round of the launcher: scan pg_database, forget the databases that
 *		went away (stopping a worker in one that became a template or stopped
 *		accepting connections), and consider every other one. Returns how long
 *		to sleep before the next round if nothing wakes the launcher earlier.
 */
static long
sbq_launcher_tick(void)
{
	long		nap_ms = SBQ_LAUNCHER_NAP_MS;
	uint64		gen;
	List	   *dbs;
	ListCell   *lc;
	HASH_SEQ_STATUS hs;
	SbqLauncherDb *db;
	TimestampTz now;
	bool		may_start = true;
	Oid		   *slot_dbids;
	int			nslots;
	int			i;

	MemoryContextReset(sbq_launcher_tick_cxt);
	MemoryContextSwitchTo(sbq_launcher_tick_cxt);

	/* read before the scan: a CREATE EXTENSION committing later bumps it again */
	gen = sbq_registry_recheck_generation();
	dbs = sbq_launcher_databases();
	now = GetCurrentTimestamp();

	hash_seq_init(&hs, sbq_launcher_dbs);
	while ((db = hash_seq_search(&hs)) != NULL)
		db->seen = false;
	foreach(lc, dbs)
	{
		SbqLauncherDb *stub = lfirst(lc);
		bool		found;

		db = hash_search(sbq_launcher_dbs, &stub->dbid, HASH_ENTER, &found);
		if (!found)
		{
			memset(((char *) db) + sizeof(Oid), 0, sizeof(SbqLauncherDb) - sizeof(Oid));
			db->restart_delay_ms = SBQ_RESTART_DELAY_MS;
		}
		db->name = stub->name;
		db->seen = true;
	}

	/* databases gone, or no longer eligible */
	hash_seq_init(&hs, sbq_launcher_dbs);
	while ((db = hash_seq_search(&hs)) != NULL)
	{
		SbqDbSlotState slot;

		if (db->seen)
			continue;
		if (sbq_dbslot_get(db->dbid, &slot) && slot.pid != 0)
			(void) kill(slot.pid, SIGTERM);
		if (db->handle != NULL)
		{
			pid_t		pid;

			if (GetBackgroundWorkerPid(db->handle, &pid) != BGWH_STOPPED)
			{
				TerminateBackgroundWorker(db->handle);
				nap_ms = Min(nap_ms, 1000);
				continue;		/* forget it once it has stopped */
			}
			pfree(db->handle);
		}
		sbq_dbslot_free_if_idle(db->dbid);
		(void) hash_search(sbq_launcher_dbs, &db->dbid, HASH_REMOVE, NULL);
	}

	/* registry slots of databases the launcher does not track (holds, leftovers) */
	slot_dbids = palloc(sizeof(Oid) * sbq_dbslot_count());
	nslots = sbq_dbslot_list(slot_dbids, sbq_dbslot_count());
	for (i = 0; i < nslots; i++)
		if (hash_search(sbq_launcher_dbs, &slot_dbids[i], HASH_FIND, NULL) == NULL)
			sbq_dbslot_free_if_idle(slot_dbids[i]);

	hash_seq_init(&hs, sbq_launcher_dbs);
	while ((db = hash_seq_search(&hs)) != NULL)
	{
		if (db->seen && !sbq_launcher_consider(db, gen, now, &nap_ms, may_start))
			may_start = false;
	}
	return nap_ms;
}

/*
 * sbq_launcher_main
 *		The launcher's entry point.
 */
void
sbq_launcher_main(Datum main_arg)
{
	HASHCTL		ctl;

	/* register the cleanup before building what it cleans up (withdraw the latch) */
	before_shmem_exit(sbq_launcher_shmem_exit, (Datum) 0);

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	/* shared catalogs only */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	sbq_launcher_cxt = AllocSetContextCreate(TopMemoryContext, "sbqueue launcher",
											 ALLOCSET_DEFAULT_SIZES);
	sbq_launcher_tick_cxt = AllocSetContextCreate(sbq_launcher_cxt, "sbqueue launcher tick",
												  ALLOCSET_DEFAULT_SIZES);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(SbqLauncherDb);
	ctl.hcxt = sbq_launcher_cxt;
	sbq_launcher_dbs = hash_create("sbqueue launcher databases", 64, &ctl,
								   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	/* from here on, events wake this latch; the first tick sees all before */
	sbq_registry_set_launcher(MyLatch);
	ereport(LOG,
			(errmsg("sbqueue launcher started")));

	for (;;)
	{
		long		nap_ms;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		nap_ms = sbq_launcher_tick();
		MemoryContextSwitchTo(sbq_launcher_cxt);

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 nap_ms, SBQ_WAIT_EVENT_LAUNCHER);
		ResetLatch(MyLatch);
	}
}
