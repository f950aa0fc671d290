/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The maintenance launcher, the per-database maintenance workers, and the
 *	  utility hook that keeps them out of the way of DDL on databases.
 *
 * Only with sbqueue in shared_preload_libraries. The launcher is a static
 * background worker ("sbqueue launcher"), started once recovery has finished
 * (so never on a standby) and restarted SBQ_LAUNCHER_RESTART_S seconds after
 * it dies, and at once after a crash-restart. It connects to no database and
 * reads pg_database. For every database that accepts connections and is not a
 * template it starts a dynamic worker ("sbqueue maintenance"), which connects
 * to it and looks for the extension:
 *
 *	- not installed: the worker records that answer in the shared registry
 *	  (shmem.c) and exits. The launcher does not start one there again until
 *	  CREATE EXTENSION sbqueue (or ALTER EXTENSION sbqueue, or CREATE
 *	  DATABASE) commits somewhere, which bumps the registry's recheck
 *	  generation, or SBQ_RECHECK_MS pass (a safety net for paths the hook
 *	  cannot see, such as a prepared CREATE EXTENSION). A database without
 *	  sbqueue therefore costs one short-lived process now and then.
 *	- installed: every sbqueue.maintenance_interval the worker runs
 *	  SELECT <schema>.sbq_maintain() in a transaction of its own, again at
 *	  once while the result says "more" (at most SBQ_MAX_PASSES_PER_TICK
 *	  times), and sleeps between ticks with no transaction open and no
 *	  snapshot held. When the extension is dropped, it exits as above.
 *
 * A worker that stops for any other reason (terminated, held off, an error
 * it could not handle) is started again by the launcher after a delay that
 * doubles, from 1 s up to 60 s, while its workers keep dying young. If the
 * launcher dies, the workers keep running and the new launcher adopts them
 * through the registry (each worker records its pid there and wakes the
 * launcher when it exits).
 *
 * DROP DATABASE (without FORCE) fails when another session is connected to
 * the database for more than 5 s, and so do ALTER DATABASE RENAME, ALTER
 * DATABASE SET TABLESPACE and CREATE DATABASE ... TEMPLATE. The utility hook
 * (installed in every backend by the preload) runs before such a statement:
 * it puts a hold on the database in the registry, which keeps workers out,
 * and sends SIGTERM to the worker running there; the statement's own wait
 * for other sessions then finds the worker gone. The hold ends when the
 * transaction ends (commit or abort: at commit the database is gone or
 * renamed and the launcher sees that; at abort it starts the worker again),
 * or after SBQ_HOLD_MAX_MS at the latest.
 *
 * sbqueue.enable_maintenance_worker = off (on SIGHUP) makes the workers exit
 * and the launcher idle until it is turned on again.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/worker.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/dependency.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_proc.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "commands/vacuum.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/parsenodes.h"
#include "parser/parse_node.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/backend_status.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "shmem.h"
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
/* the longest a DDL hold keeps workers out of a database */
#define SBQ_HOLD_MAX_MS				60000
/* sbq_maintain() calls per tick while it reports more to do */
#define SBQ_MAX_PASSES_PER_TICK		100
/* the longest a worker backs off after failed passes */
#define SBQ_BACKOFF_MAX_MS			60000
/* looks for sbq_maintain() right after an ALTER EXTENSION, and their spacing */
#define SBQ_QUICK_RETRIES			5
#define SBQ_QUICK_RETRY_MS			200

/*
 * The removable-xid horizon of the worker's last vacuum of sbq.messages: no
 * new vacuum until it moves (while a transaction holds it back, a vacuum
 * would remove nothing and only rescan what the last one could not clean).
 */
static TransactionId sbq_worker_vacuum_horizon = InvalidTransactionId;

/* ---------------------------------------------------------------- state */

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

/* the per-database worker */
typedef enum SbqPassStatus
{
	SBQ_PASS_OK,
	SBQ_PASS_NO_EXTENSION,
	SBQ_PASS_NO_FUNCTION,
	SBQ_PASS_ERROR
} SbqPassStatus;

static Oid	sbq_worker_dbid = InvalidOid;
static char *sbq_worker_dbname = "?";
static bool sbq_worker_registered = false;
static bool sbq_worker_no_extension = false;
static uint64 sbq_worker_no_extension_gen = 0;
static MemoryContext sbq_worker_cxt = NULL;

/* the utility hook, in every backend */
#define SBQ_MAX_HELD_DBS	8
static ProcessUtility_hook_type sbq_prev_process_utility = NULL;
static Oid	sbq_held_dbs[SBQ_MAX_HELD_DBS];
static int	sbq_nheld_dbs = 0;
static bool sbq_recheck_at_commit = false;
static bool sbq_utility_callback_registered = false;

static void sbq_process_utility(PlannedStmt *pstmt, const char *queryString,
								bool readOnlyTree, ProcessUtilityContext context,
								ParamListInfo params, QueryEnvironment *queryEnv,
								DestReceiver *dest, QueryCompletion *qc);

/* ------------------------------------------------------------- _PG_init */

/*
 * sbq_worker_init
 *		Register the launcher and install the utility hook. Called by _PG_init
 *		only while shared_preload_libraries is processed (and not in binary
 *		upgrade mode).
 */
void
sbq_worker_init(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = SBQ_LAUNCHER_RESTART_S;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "sbqueue");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "sbq_launcher_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "sbqueue launcher");
	snprintf(worker.bgw_type, BGW_MAXLEN, "sbqueue launcher");
	worker.bgw_main_arg = (Datum) 0;
	worker.bgw_notify_pid = 0;
	RegisterBackgroundWorker(&worker);

	sbq_prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = sbq_process_utility;
}

/* ------------------------------------------------------------- launcher */

/*
 * sbq_launcher_shmem_exit
 *		before_shmem_exit callback: withdraw the launcher's latch, so nobody
 *		signals a launcher that is gone (harmless anyway, but tidy).
 */
static void
sbq_launcher_shmem_exit(int code, Datum arg)
{
	sbq_shmem_set_launcher(NULL);
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

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "sbqueue");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "sbq_worker_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "sbqueue maintenance worker for database \"%s\"",
			 NameStr(db->name));
	snprintf(worker.bgw_type, BGW_MAXLEN, "sbqueue maintenance");
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
	gen = sbq_shmem_recheck_generation();
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
	sbq_shmem_set_launcher(MyLatch);
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

/* --------------------------------------------------------------- worker */

/*
 * sbq_worker_shmem_exit
 *		before_shmem_exit callback of a worker: give the database back in the
 *		registry (with the "no sbqueue here" answer if that is why it exits)
 *		and wake the launcher.
 */
static void
sbq_worker_shmem_exit(int code, Datum arg)
{
	if (sbq_worker_registered)
		sbq_dbslot_unregister_worker(sbq_worker_dbid, MyProcPid,
									 sbq_worker_no_extension,
									 sbq_worker_no_extension_gen);
	else
		sbq_shmem_wake_launcher();
}

/*
 * sbq_find_extension
 *		Whether sbqueue is installed in this database, and if so its owner and
 *		schema. Must be called in a transaction.
 */
static bool
sbq_find_extension(Oid *extoid, Oid *extowner, Oid *extnamespace)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	bool		found = false;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber, F_NAMEEQ,
				CStringGetDatum("sbqueue"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		Form_pg_extension ext = (Form_pg_extension) GETSTRUCT(tup);

		*extoid = ext->oid;
		*extowner = ext->extowner;
		*extnamespace = ext->extnamespace;
		found = true;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * sbq_find_maintain
 *		The OID of <schema>.sbq_maintain(), taking no argument and belonging to
 *		the extension; InvalidOid if there is no such function (an extension
 *		version without it). A function of that name that the extension does
 *		not own is ignored: the worker runs with the owner's rights and never
 *		calls a stranger's code.
 */
static Oid
sbq_find_maintain(Oid extoid, Oid nspoid)
{
	Oid			funcoid;

	funcoid = GetSysCacheOid3(PROCNAMEARGSNSP, Anum_pg_proc_oid,
							  CStringGetDatum("sbq_maintain"),
							  PointerGetDatum(buildoidvector(NULL, 0)),
							  ObjectIdGetDatum(nspoid));
	if (OidIsValid(funcoid) &&
		getExtensionOfObject(ProcedureRelationId, funcoid) != extoid)
		funcoid = InvalidOid;
	return funcoid;
}

/* error context of a maintenance pass */
static void
sbq_worker_error_context(void *arg)
{
	errcontext("sbqueue maintenance pass in database \"%s\"", sbq_worker_dbname);
}

/*
 * sbq_worker_call_maintain
 *		The body of a pass, inside its transaction and snapshot: find the
 *		extension and its sbq_maintain(), and call it through SPI as the
 *		extension's owner with search_path pinned. Sets *more when the result
 *		asks for another call right away. Not inlined: its locals must not
 *		live in the frame of sbq_worker_pass's PG_TRY (longjmp clobbering).
 */
pg_noinline static SbqPassStatus
sbq_worker_call_maintain(uint64 gen, bool *more)
{
	Oid			extoid;
	Oid			extowner;
	Oid			nspoid;
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;
	char	   *nspname;
	char	   *sql;
	int			ret;

	*more = false;
	if (!sbq_find_extension(&extoid, &extowner, &nspoid))
	{
		sbq_worker_no_extension_gen = gen;
		return SBQ_PASS_NO_EXTENSION;
	}
	if (!OidIsValid(sbq_find_maintain(extoid, nspoid)))
		return SBQ_PASS_NO_FUNCTION;
	nspname = get_namespace_name(nspoid);
	if (nspname == NULL)
		elog(ERROR, "schema %u of extension sbqueue not found", nspoid);

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(extowner, save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	save_nestlevel = NewGUCNestLevel();
	sbq_restrict_search_path();

	sql = psprintf("SELECT %s.sbq_maintain()", quote_identifier(nspname));
	debug_query_string = sql;
	pgstat_report_activity(STATE_RUNNING, sql);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	ret = SPI_execute(sql, false, 1);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "%s: SPI_execute returned %d with " UINT64_FORMAT " rows",
			 sql, ret, SPI_processed);
	if (TupleDescAttr(SPI_tuptable->tupdesc, 0)->atttypid == JSONBOID)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
									  1, &isnull);

		if (!isnull)
		{
			Jsonb	   *jb = DatumGetJsonbP(d);
			JsonbValue	key;
			JsonbValue *v;

			key.type = jbvString;
			key.val.string.val = "more";
			key.val.string.len = 4;
			v = findJsonbValueFromContainer(&jb->root, JB_FOBJECT, &key);
			*more = (v != NULL && v->type == jbvBool && v->val.boolean);
			ereport(DEBUG1,
					(errmsg_internal("sbqueue maintenance: %s",
									 JsonbToCString(NULL, &jb->root, VARSIZE(jb)))));
		}
	}
	SPI_finish();

	AtEOXact_GUC(true, save_nestlevel);
	SetUserIdAndSecContext(save_userid, save_sec_context);
	return SBQ_PASS_OK;
}

/*
 * sbq_worker_xact_begin, sbq_worker_xact_end, sbq_worker_recover
 *		The frame of a worker's own transaction: started with the database
 *		named in the context of its errors; ended with statistics reported
 *		and the worker shown idle; an error caught in between is logged and
 *		the transaction rolled back.
 */
static void
sbq_worker_xact_begin(ErrorContextCallback *errcallback)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	errcallback->callback = sbq_worker_error_context;
	errcallback->arg = NULL;
	errcallback->previous = error_context_stack;
	error_context_stack = errcallback;
}

static void
sbq_worker_xact_end(ErrorContextCallback *errcallback)
{
	error_context_stack = errcallback->previous;
	debug_query_string = NULL;
	MemoryContextSwitchTo(sbq_worker_cxt);
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}

static void
sbq_worker_recover(void)
{
	MemoryContextSwitchTo(sbq_worker_cxt);
	HOLD_INTERRUPTS();
	EmitErrorReport();
	AbortCurrentTransaction();
	FlushErrorState();
	RESUME_INTERRUPTS();
}

/*
 * sbq_worker_pass
 *		One call of sbq_maintain() in a transaction of its own (STYLE.md G.40).
 *		An error is logged (with the database named in its context) and the
 *		transaction rolled back; the caller backs off. A FATAL (terminate,
 *		postmaster death) is not caught and ends the worker.
 */
static SbqPassStatus
sbq_worker_pass(bool *more)
{
	volatile SbqPassStatus status = SBQ_PASS_ERROR;
	volatile bool more_v = false;
	ErrorContextCallback errcallback;
	uint64		gen;

	/* before the look: a CREATE EXTENSION committing after it bumps this again */
	gen = sbq_shmem_recheck_generation();

	sbq_worker_xact_begin(&errcallback);

	PG_TRY();
	{
		bool		m;

		PushActiveSnapshot(GetTransactionSnapshot());
		status = sbq_worker_call_maintain(gen, &m);
		more_v = m;
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		/* log it, roll back, and let the caller back off */
		sbq_worker_recover();
		status = SBQ_PASS_ERROR;
		more_v = false;
	}
	PG_END_TRY();

	sbq_worker_xact_end(&errcallback);
	*more = more_v;
	return status;
}

/*
 * sbq_worker_tick
 *		Run passes while sbq_maintain() says there is more, at most
 *		SBQ_MAX_PASSES_PER_TICK of them; an interrupt between two passes is
 *		served at once.
 */
static SbqPassStatus
sbq_worker_tick(void)
{
	SbqPassStatus status = SBQ_PASS_OK;
	int			i;

	for (i = 0; i < SBQ_MAX_PASSES_PER_TICK; i++)
	{
		bool		more;

		status = sbq_worker_pass(&more);
		if (status != SBQ_PASS_OK || !more)
			break;
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending || !sbq_enable_maintenance_worker)
			break;
	}
	return status;
}

/*
 * sbq_worker_vacuum_due
 *		Whether sbq.messages has at least sbqueue.vacuum_threshold dead rows
 *		(as pgstat counts them) and the horizon moved since the last vacuum.
 *		Called in a transaction; sets *relid and *horizon for the vacuum.
 */
static bool
sbq_worker_vacuum_due(Oid *relid, TransactionId *horizon)
{
	Oid			nspoid;
	Relation	rel;
	PgStat_StatTabEntry *tab;

	nspoid = get_namespace_oid("sbq", true);
	if (!OidIsValid(nspoid))
		return false;
	*relid = get_relname_relid("messages", nspoid);
	if (!OidIsValid(*relid))
		return false;
	tab = pgstat_fetch_stat_tabentry(*relid);
	if (tab == NULL || SBQ_TABENTRY_DEAD(tab) < sbq_vacuum_threshold)
		return false;

	rel = try_relation_open(*relid, AccessShareLock);
	if (rel == NULL)
		return false;
	*horizon = GetOldestNonRemovableTransactionId(rel);
	relation_close(rel, AccessShareLock);
	return !TransactionIdIsValid(sbq_worker_vacuum_horizon) ||
		TransactionIdFollows(*horizon, sbq_worker_vacuum_horizon);
}

/*
 * sbq_worker_vacuum
 *		VACUUM (SKIP_LOCKED) sbq.messages when it is due: autovacuum waits for
 *		a fifth of the table to be dead and looks at a database once a
 *		minute, while a queue cycling thousands of messages a second leaves
 *		that many dead rows every second and meanwhile extends the table for
 *		its sends. Vacuuming after a fixed number of dead rows keeps a busy
 *		queue table at its size. Runs as a command of its own, as autovacuum
 *		does (vacuum() commits and starts transactions itself); an error is
 *		logged and the worker carries on.
 */
static void
sbq_worker_vacuum(void)
{
	Oid			relid = InvalidOid;
	TransactionId horizon = InvalidTransactionId;
	ErrorContextCallback errcallback;

	if (sbq_vacuum_threshold <= 0 || RecoveryInProgress())
		return;

	sbq_worker_xact_begin(&errcallback);

	PG_TRY();
	{
		if (sbq_worker_vacuum_due(&relid, &horizon))
		{
			VacuumStmt *stmt = makeNode(VacuumStmt);
			ParseState *pstate = make_parsestate(NULL);
			const char *sql = "VACUUM (SKIP_LOCKED) sbq.messages";

			stmt->options = list_make1(makeDefElem("skip_locked", NULL, -1));
			stmt->rels = list_make1(makeVacuumRelation(makeRangeVar("sbq", "messages", -1),
													   relid, NIL));
			stmt->is_vacuumcmd = true;
			pstate->p_sourcetext = sql;
			debug_query_string = sql;
			pgstat_report_activity(STATE_RUNNING, sql);
			ExecVacuum(pstate, stmt, true);
			sbq_worker_vacuum_horizon = horizon;
		}
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		sbq_worker_recover();
	}
	PG_END_TRY();

	sbq_worker_xact_end(&errcallback);
}

/*
 * sbq_worker_main
 *		A per-database worker's entry point; bgw_main_arg is the database OID.
 */
void
sbq_worker_main(Datum main_arg)
{
	int			failures = 0;
	int			quick_retries = 0;
	TimestampTz last_run = 0;
	TimestampTz next_run;
	uint64		gen;

	sbq_worker_dbid = DatumGetObjectId(main_arg);

	/* cleanup first (STYLE.md G.42): it hands the database back in the registry */
	before_shmem_exit(sbq_worker_shmem_exit, (Datum) 0);

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	/* as the bootstrap superuser; a pass switches to the extension's owner */
	BackgroundWorkerInitializeConnectionByOid(sbq_worker_dbid, InvalidOid, 0);

	/* a DDL hold, or a worker already here: leave quietly */
	if (!sbq_dbslot_register_worker(sbq_worker_dbid, MyProcPid, MyLatch))
		proc_exit(0);
	sbq_worker_registered = true;

	sbq_worker_cxt = AllocSetContextCreate(TopMemoryContext, "sbqueue worker",
										   ALLOCSET_DEFAULT_SIZES);

	/* the name, for messages that cannot look it up (no transaction, an error) */
	StartTransactionCommand();
	{
		char	   *name = get_database_name(MyDatabaseId);

		if (name != NULL)
			sbq_worker_dbname = MemoryContextStrdup(sbq_worker_cxt, name);
	}
	CommitTransactionCommand();
	MemoryContextSwitchTo(sbq_worker_cxt);
	SetConfigOption("max_parallel_workers_per_gather", "0", PGC_SUSET, PGC_S_OVERRIDE);
	pgstat_report_appname("sbqueue maintenance");

	gen = sbq_shmem_recheck_generation();
	next_run = GetCurrentTimestamp();
	for (;;)
	{
		TimestampTz now;
		long		sleep_ms;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			/* a new interval counts from the last pass, not after the old one */
			if (failures == 0 && last_run != 0)
				next_run = TimestampTzPlusMilliseconds(last_run, sbq_maintenance_interval);
		}
		if (!sbq_enable_maintenance_worker)
			proc_exit(0);

		/* sbqueue created or updated somewhere: stop backing off, look now */
		if (sbq_shmem_recheck_generation() != gen)
		{
			gen = sbq_shmem_recheck_generation();
			if (failures > 0)
			{
				failures = 0;
				next_run = GetCurrentTimestamp();
				quick_retries = SBQ_QUICK_RETRIES;
			}
		}

		now = GetCurrentTimestamp();
		if (now >= next_run)
		{
			long		delay_ms = sbq_maintenance_interval;

			last_run = now;

			/* nothing to do on a standby: queue state comes from the primary */
			if (!RecoveryInProgress())
			{
				switch (sbq_worker_tick())
				{
					case SBQ_PASS_OK:
						failures = 0;
						quick_retries = 0;
						sbq_worker_vacuum();
						break;
					case SBQ_PASS_NO_EXTENSION:
						sbq_worker_no_extension = true;
						proc_exit(0);
						break;
					case SBQ_PASS_NO_FUNCTION:

						/*
						 * Woken by the commit of an ALTER EXTENSION UPDATE:
						 * its commit callback runs before its catalog
						 * invalidations are sent, so this look may have
						 * missed the new function. Look again soon, a few
						 * times, before backing off.
						 */
						if (quick_retries > 0)
						{
							quick_retries--;
							break;
						}
						if (sbq_dbslot_warn_once(sbq_worker_dbid))
							ereport(WARNING,
									(errcode(ERRCODE_UNDEFINED_FUNCTION),
									 errmsg("sbqueue maintenance worker found no sbq_maintain() in database \"%s\"",
											sbq_worker_dbname),
									 errdetail("The installed version of the extension has no maintenance function; the worker looks again later."),
									 errhint("Update the extension with ALTER EXTENSION sbqueue UPDATE.")));
						/* FALLTHROUGH */
					case SBQ_PASS_ERROR:
						failures++;
						break;
				}
			}
			if (quick_retries > 0 && failures == 0)
				delay_ms = Min(delay_ms, SBQ_QUICK_RETRY_MS);
			if (failures > 0)
			{
				/* back off: interval * 2^failures, at most SBQ_BACKOFF_MAX_MS */
				int			shift = Min(failures, 16);

				delay_ms = Min((int64) sbq_maintenance_interval << shift,
							   (int64) Max(SBQ_BACKOFF_MAX_MS, sbq_maintenance_interval));
			}
			next_run = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), delay_ms);
			now = GetCurrentTimestamp();
		}

		sleep_ms = (long) ((next_run - now + 999) / 1000);
		if (sleep_ms > 0)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 sleep_ms, SBQ_WAIT_EVENT_WORKER);
			ResetLatch(MyLatch);
		}
	}
}

/* ------------------------------------------------------------ DDL hook */

/*
 * sbq_utility_xact_callback
 *		At the end of a transaction that held databases or created/updated
 *		sbqueue or a database: lift the holds (commit or not) and, after a
 *		commit, ask the launcher to look again. Spinlock and latch work only:
 *		it runs where an error cannot be raised.
 */
static void
sbq_utility_xact_callback(XactEvent event, void *arg)
{
	int			i;

	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
			for (i = 0; i < sbq_nheld_dbs; i++)
				sbq_dbslot_release_hold(sbq_held_dbs[i]);
			sbq_nheld_dbs = 0;
			if (event == XACT_EVENT_COMMIT && sbq_recheck_at_commit)
				sbq_shmem_request_recheck();
			sbq_recheck_at_commit = false;
			break;
		default:
			break;
	}
}

static void
sbq_utility_register_callback(void)
{
	if (!sbq_utility_callback_registered)
	{
		RegisterXactCallback(sbq_utility_xact_callback, NULL);
		sbq_utility_callback_registered = true;
	}
}

/*
 * sbq_hold_database
 *		The statement about to run needs database "name" to itself: keep
 *		sbqueue workers out of it until this transaction ends and terminate
 *		the one running there. Only for a role that owns the database (or a
 *		superuser), so nobody else can bounce the worker with a DROP that is
 *		going to fail anyway.
 */
static void
sbq_hold_database(const char *name)
{
	Oid			dbid;
	pid_t		pid;

	if (name == NULL)
		return;
	dbid = get_database_oid(name, true);
	if (!OidIsValid(dbid) || !sbq_database_ownercheck(dbid, GetUserId()))
		return;
	sbq_utility_register_callback();
	if (sbq_nheld_dbs < SBQ_MAX_HELD_DBS)
		sbq_held_dbs[sbq_nheld_dbs++] = dbid;
	pid = sbq_dbslot_hold(dbid, TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														   SBQ_HOLD_MAX_MS));
	if (pid != 0)
		(void) kill(pid, SIGTERM);
}

/* The value of option "name" of a CREATE/ALTER DATABASE, or NULL. */
static const char *
sbq_database_option(List *options, const char *name)
{
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *def = lfirst_node(DefElem, lc);

		if (strcmp(def->defname, name) == 0)
			return def->arg != NULL ? defGetString(def) : NULL;
	}
	return NULL;
}

/*
 * sbq_process_utility
 *		ProcessUtility_hook: before statements that need a database to
 *		themselves, hold it (see the file header); note the statements after
 *		which the launcher should look for sbqueue again. Then run the
 *		statement as usual.
 */
static void
sbq_process_utility(PlannedStmt *pstmt, const char *queryString,
					bool readOnlyTree, ProcessUtilityContext context,
					ParamListInfo params, QueryEnvironment *queryEnv,
					DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;

	if (sbq_shmem_available())
	{
		switch (nodeTag(parsetree))
		{
			case T_DropdbStmt:
				sbq_hold_database(((DropdbStmt *) parsetree)->dbname);
				break;
			case T_RenameStmt:
				if (((RenameStmt *) parsetree)->renameType == OBJECT_DATABASE)
					sbq_hold_database(((RenameStmt *) parsetree)->subname);
				break;
			case T_AlterDatabaseStmt:
				{
					AlterDatabaseStmt *stmt = (AlterDatabaseStmt *) parsetree;

					if (sbq_database_option(stmt->options, "tablespace") != NULL)
						sbq_hold_database(stmt->dbname);
				}
				break;
			case T_CreatedbStmt:
				sbq_hold_database(sbq_database_option(((CreatedbStmt *) parsetree)->options,
													  "template"));
				sbq_utility_register_callback();
				sbq_recheck_at_commit = true;
				break;
			case T_CreateExtensionStmt:
				if (strcmp(((CreateExtensionStmt *) parsetree)->extname, "sbqueue") == 0)
				{
					sbq_utility_register_callback();
					sbq_recheck_at_commit = true;
				}
				break;
			case T_AlterExtensionStmt:
				if (strcmp(((AlterExtensionStmt *) parsetree)->extname, "sbqueue") == 0)
				{
					sbq_utility_register_callback();
					sbq_recheck_at_commit = true;
				}
				break;
			default:
				break;
		}
	}

	if (sbq_prev_process_utility)
		sbq_prev_process_utility(pstmt, queryString, readOnlyTree, context,
								 params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
}
