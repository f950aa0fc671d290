/*-------------------------------------------------------------------------
 *
 * launcher.c
 *	  The maintenance launcher: the process that shares out at most
 *	  sbqueue.max_workers maintenance workers (maintenance_worker.c) among
 *	  the databases that have sbqueue.
 *
 * Only with sbqueue in shared_preload_libraries. The launcher is a static
 * background worker ("sbqueue launcher"), registered by _PG_init, started once
 * recovery has finished (so never on a standby) and restarted
 * SBQ_LAUNCHER_RESTART_S seconds after it dies, and at once after a
 * crash-restart. It connects to no database. It reads pg_database (a shared
 * catalog) for the databases that accept connections and are not templates,
 * and learns which of them have sbqueue from the database registry
 * (registry.c):
 *
 *	- A database the launcher has not heard of (every database when the
 *	  server starts, and each one created later) gets one look: a worker
 *	  connects to it and finds the extension or not. That is the only time a
 *	  worker visits a database without sbqueue, except that one with a
 *	  prepared transaction pending is looked at again every SBQ_RECHECK_MS
 *	  (that transaction may create the extension when it commits; the
 *	  COMMIT PREPARED statement tells the registry, utility_hook.c, unless a
 *	  commit told it something meanwhile), and one that shared memory
 *	  shows sbqueue state of (a queue used there) is looked at at once.
 *	- The commit of a transaction that creates or drops sbqueue says so in
 *	  the registry (utility_hook.c), and wakes the launcher; so does the
 *	  commit of CREATE DATABASE, and the end of DDL on a database, after
 *	  which the launcher reads pg_database again (at most every
 *	  SBQ_RESCAN_MIN_MS) before it starts another worker.
 *
 * Every database that has sbqueue is due for a maintenance tick when its
 * worker said: sbqueue.maintenance_interval after its last one began, later
 * while its ticks find nothing to do (up to sbqueue.idle_maintenance_interval)
 * or fail. Shared memory (lease.c, qstate.c) brings it forward: counts of
 * sends, receives or settlements not yet stored make it due an interval
 * after its last tick; a lock that has expired or a scheduled message that
 * has come due makes it "urgent", due at once (at most once per expiry, no
 * sooner than SBQ_EARLY_GAP_MS after its last tick). Urgent databases go
 * first, and so does one that has waited past the idle interval; among the
 * others the one due longest goes first. A database whose ticks fail keeps
 * to its back-off. The launcher keeps at most sbqueue.max_workers workers alive
 * and starts one in each due database, in that order, while it has fewer. A
 * worker runs its tick and then stays in its database, sleeping until the
 * next one is due, unless databases wait for a slot: the launcher publishes
 * how many wait, a worker that sees that after its tick (or between two
 * passes of it) leaves, and the launcher asks sleeping workers to leave, the
 * latest due first. So with as many databases as slots or fewer, each keeps
 * a worker as before; with more, the workers take turns, and a database costs
 * nothing between its ticks.
 *
 * A worker that stopped without completing a tick (terminated, refused by a
 * hold, an error it could not handle) is started again after a delay that
 * doubles, from 1 s up to 60 s, while that goes on. If the launcher dies,
 * the workers keep running and the new launcher counts them through the
 * registry (each worker records its pid there and wakes the launcher when it
 * exits). sbqueue.enable_maintenance_worker = off (on SIGHUP) makes the
 * launcher idle until it is turned on again.
 *
 * Owns: what the launcher knows of each database, in its own memory (a hash
 * table of SbqLauncherDb): its name, whether a look found no sbqueue (such a
 * database has no registry slot), the worker it started there and its
 * restart delay. It publishes its latch, how many databases wait, and when
 * work came due in each database in the registry. Locks: none of its own;
 * the registry's, lease.c's and qstate.c's functions take their locks, and
 * a scan of pg_database runs in a short transaction of its own.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/launcher.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <errno.h>
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
#include "lease.h"
#include "qstate.h"
#include "registry.h"
#include "worker.h"

/* seconds before the postmaster starts a dead launcher again */
#define SBQ_LAUNCHER_RESTART_S		5
/* the launcher's longest sleep: it wakes earlier on every event it cares about */
#define SBQ_LAUNCHER_NAP_MS			10000
/* how often pg_database is read again when nothing said it changed */
#define SBQ_RESCAN_MS				1000
/* ... and at most how often when commits say it changed */
#define SBQ_RESCAN_MIN_MS			100
/* how often a database without sbqueue but with a prepared transaction is looked at */
#define SBQ_RECHECK_MS				(60 * 1000)
/* the earliest an urgent database gets a tick after its last one began */
#define SBQ_EARLY_GAP_MS			200
/* how long a worker of an earlier launcher counts after it left the registry */
#define SBQ_ADOPTED_GRACE_MS		2000
/* worker restart delays: first, and the cap it doubles up to */
#define SBQ_RESTART_DELAY_MS		1000
#define SBQ_RESTART_DELAY_MAX_MS	60000

/* What the launcher knows about one database (launcher-local). */
typedef struct SbqLauncherDb
{
	Oid			dbid;			/* hash key */
	NameData	name;
	bool		seen;			/* in the last pg_database scan */
	bool		absent;			/* a look found no sbqueue: no registry slot */
	TimestampTz recheck_at;		/* absent: look again then (0: never) */
	bool		no_slot_logged; /* the full registry was logged for it */
	BackgroundWorkerHandle *handle; /* the worker this launcher started */
	pid_t		adopted_pid;	/* a worker an earlier launcher started, 0 if none */
	TimestampTz adopted_left;	/* when it left the registry, 0 while it is there */
	int64		passes_at_start;	/* its slot's ticks when the worker started */
	TimestampTz not_before;		/* no new worker before this */
	int			restart_delay_ms;
	TimestampTz work_due;		/* this round: earliest expired lock or due message */
	bool		active;			/* this round: it has counts not yet stored */
	bool		evidence;		/* this round: shared memory has state of sbqueue there */
	TimestampTz evidence_look_at;	/* when such state last made it look again */
	TimestampTz work_due_shown; /* what the registry was last told of it */
} SbqLauncherDb;

/* A database that is due and has no worker, in one round of the launcher. */
typedef struct SbqCandidate
{
	SbqLauncherDb *db;
	bool		urgent;
	TimestampTz due;
	int64		passes;			/* its slot's ticks so far */
} SbqCandidate;

/* A worker that sleeps in its database, in one round of the launcher. */
typedef struct SbqResident
{
	Oid			dbid;
	TimestampTz next_due;
} SbqResident;

static HTAB *sbq_launcher_dbs = NULL;
static MemoryContext sbq_launcher_cxt = NULL;
static MemoryContext sbq_launcher_tick_cxt = NULL;
static bool sbq_launcher_warned_slots = false;
static uint64 sbq_launcher_scan_gen = 0;
static uint64 sbq_launcher_lost = 0;	/* the registry's dropped news, as last logged */
static TimestampTz sbq_launcher_scan_at = 0;

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
 *		signals a launcher that is gone (harmless anyway, but tidy), and say
 *		that nobody waits.
 */
static void
sbq_launcher_shmem_exit(int code, Datum arg)
{
	sbq_registry_set_launcher(NULL);
	sbq_registry_set_waiting(0);
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
 * sbq_launcher_stopped
 *		Whether the worker db->handle names has stopped (then the handle is
 *		let go of); exits with the postmaster.
 */
static bool
sbq_launcher_stopped(SbqLauncherDb *db)
{
	pid_t		pid;
	BgwHandleStatus status;

	if (db->handle == NULL)
		return true;
	status = GetBackgroundWorkerPid(db->handle, &pid);
	if (status == BGWH_POSTMASTER_DIED)
		proc_exit(1);
	if (status != BGWH_STOPPED)
		return false;
	pfree(db->handle);
	db->handle = NULL;
	return true;
}

/*
 * sbq_launcher_rescan
 *		Read pg_database and bring the table up to date: new databases are
 *		entered (unheard of: they get a look), and those gone or no longer
 *		eligible are forgotten once their worker, told to stop, has stopped
 *		(until then the round counts it).
 */
static void
sbq_launcher_rescan(uint64 gen, TimestampTz now, long *nap_ms)
{
	List	   *dbs;
	ListCell   *lc;
	HASH_SEQ_STATUS hs;
	SbqLauncherDb *db;

	dbs = sbq_launcher_databases();
	sbq_launcher_scan_gen = gen;
	sbq_launcher_scan_at = now;

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
			db->passes_at_start = -1;
		}
		db->name = stub->name;
		db->seen = true;
	}

	hash_seq_init(&hs, sbq_launcher_dbs);
	while ((db = hash_seq_search(&hs)) != NULL)
	{
		SbqDbSlotState slot;

		if (db->seen)
			continue;
		if (sbq_dbslot_get(db->dbid, &slot) && slot.pid != 0)
			(void) kill(slot.pid, SIGTERM);
		if (!sbq_launcher_stopped(db))
		{
			TerminateBackgroundWorker(db->handle);
			*nap_ms = Min(*nap_ms, 1000);
			continue;			/* forget it once it has stopped */
		}
		sbq_dbslot_free_if_idle(db->dbid);
		(void) hash_search(sbq_launcher_dbs, &db->dbid, HASH_REMOVE, NULL);
	}
}

/*
 * sbq_launcher_work_due
 *		Note in each database what shared memory shows of it: the earliest of
 *		its lock expiries and scheduled messages, whether something was
 *		sent, received or settled there since its counts were last stored
 *		(or a queue of it found no room in the table of queues, so that what
 *		happens there is not seen: it is taken as busy; every database is,
 *		when a database with no entry found none), and whether it has any
 *		state of sbqueue's at all (then sbqueue is installed there, whatever
 *		the launcher believed). The table of queues answers one row per
 *		database.
 */
static void
sbq_launcher_work_due(void)
{
	HASH_SEQ_STATUS hs;
	SbqLauncherDb *db;
	int			max = 4096;
	Oid		   *dbids = palloc(sizeof(Oid) * max);
	TimestampTz *due = palloc(sizeof(TimestampTz) * max);
	bool	   *active = palloc0(sizeof(bool) * max);
	bool		blind = false;
	int			n;
	int			i;

	hash_seq_init(&hs, sbq_launcher_dbs);
	while ((db = hash_seq_search(&hs)) != NULL)
	{
		db->work_due = 0;
		db->active = false;
		db->evidence = false;
	}
	for (int pass = 0; pass < 2; pass++)
	{
		if (pass == 0)
			n = sbq_lease_due_all(dbids, due, max);
		else
			n = sbq_qstate_work_all(dbids, due, active, max, &blind);
		for (i = 0; i < n; i++)
		{
			db = hash_search(sbq_launcher_dbs, &dbids[i], HASH_FIND, NULL);
			if (db == NULL)
				continue;
			if (pass == 1)
				db->evidence = true;
			if (pass == 1 && active[i])
				db->active = true;
			if (pass == 1 && due[i] == 0)
				continue;
			/* a lease share's 0: something expired long ago */
			due[i] = Max(due[i], 1);
			if (db->work_due == 0 || due[i] < db->work_due)
				db->work_due = due[i];
		}
	}

	/* a queue with no room, in a database unknown here: take every one as busy */
	if (blind)
	{
		hash_seq_init(&hs, sbq_launcher_dbs);
		while ((db = hash_seq_search(&hs)) != NULL)
			db->active = true;
	}
}

/*
 * sbq_launcher_start_worker
 *		Register a dynamic worker for one database. False when no background
 *		worker slot is free; the caller then stops trying for this round.
 */
static bool
sbq_launcher_start_worker(SbqLauncherDb *db, int64 passes)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	MemoryContext oldcxt;

	sbq_bgworker(&worker, "sbq_worker_main", "sbqueue maintenance", BGW_NEVER_RESTART);
	snprintf(worker.bgw_name, BGW_MAXLEN, "sbqueue maintenance worker for database \"%s\"",
			 NameStr(db->name));
	worker.bgw_main_arg = ObjectIdGetDatum(db->dbid);
	worker.bgw_notify_pid = MyProcPid;

	/* the handle lives as long as the launcher's table, not the round */
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
					 errhint("You may need to increase \"max_worker_processes\": sbqueue needs one slot for its launcher and up to \"sbqueue.max_workers\" for its workers.")));
			sbq_launcher_warned_slots = true;
		}
		return false;
	}
	MemoryContextSwitchTo(oldcxt);
	db->handle = handle;
	db->passes_at_start = passes;
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
 * sbq_launcher_slot
 *		The registry slot of a database the launcher considers, made when the
 *		database has none and is not known to lack sbqueue (or is to be looked
 *		at again). False when the database needs nothing now: it lacks
 *		sbqueue, or the registry has no room for it (logged once).
 */
static bool
sbq_launcher_slot(SbqLauncherDb *db, TimestampTz now, long *nap_ms, SbqDbSlotState *slot)
{
	bool		recheck;

	if (sbq_dbslot_get(db->dbid, slot))
	{
		if (slot->state != SBQ_DB_ABSENT)
		{
			db->absent = false;
			return true;
		}
		if (slot->pid != 0)
		{
			/* dropped there (a commit said so): its worker may go */
			sbq_dbslot_ask(db->dbid, true, false);
			return true;
		}
		if (!sbq_dbslot_take_absent(db->dbid, &recheck))
			return true;		/* a hold is on */
		db->absent = true;
		db->recheck_at = recheck ? TimestampTzPlusMilliseconds(now, SBQ_RECHECK_MS) : 0;
		db->work_due_shown = 0;
	}
	if (db->absent)
	{
		/*
		 * sbqueue state in shared memory says it is installed after all:
		 * created by a commit that did not tell the registry (a COMMIT
		 * PREPARED that raced another commit), or told while the registry
		 * was full. Look again, at most once a recheck period.
		 */
		bool		evident = db->evidence &&
			(db->evidence_look_at == 0 ||
			 TimestampDifferenceExceeds(db->evidence_look_at, now, SBQ_RECHECK_MS));

		if (evident)
			db->evidence_look_at = now;
		else if (db->recheck_at == 0)
			return false;
		else if (db->recheck_at > now)
		{
			sbq_launcher_update_nap(nap_ms, now, db->recheck_at);
			return false;
		}
	}
	if (!sbq_dbslot_ensure(db->dbid, slot))
	{
		if (!db->no_slot_logged)
			ereport(LOG,
					(errmsg("sbqueue launcher has no registry slot for database \"%s\"",
							NameStr(db->name)),
					 errdetail("The registry has room for %d databases; this one gets no maintenance worker.",
							   SBQ_REGISTRY_MAX_DBS)));
		db->no_slot_logged = true;
		return false;
	}
	db->absent = false;
	return true;
}

/* qsort: urgent first, then the one due longest */
static int
sbq_candidate_cmp(const void *a, const void *b)
{
	const SbqCandidate *ca = a;
	const SbqCandidate *cb = b;

	if (ca->urgent != cb->urgent)
		return ca->urgent ? -1 : 1;
	if (ca->due != cb->due)
		return ca->due < cb->due ? -1 : 1;
	return 0;
}

/* qsort: the sleeping worker due latest first */
static int
sbq_resident_cmp(const void *a, const void *b)
{
	const SbqResident *ra = a;
	const SbqResident *rb = b;

	if (ra->next_due != rb->next_due)
		return ra->next_due > rb->next_due ? -1 : 1;
	return 0;
}

/* What one round of the launcher gathers. */
typedef struct SbqRound
{
	TimestampTz now;
	long		nap_ms;			/* how long to sleep after the round */
	int			running;		/* workers alive (started, running or leaving) */
	SbqCandidate *cand;			/* databases due with no worker */
	int			ncand;
	SbqResident *res;			/* workers sleeping in their database */
	int			nres;
} SbqRound;

/*
 * sbq_launcher_reap
 *		Whether the worker this launcher started in db has stopped (or none
 *		was started). One that stopped without completing a tick is started
 *		again only after a delay that doubles while that goes on.
 */
static bool
sbq_launcher_reap(SbqLauncherDb *db, TimestampTz now)
{
	SbqDbSlotState slot;

	/*
	 * A worker of an earlier launcher has no handle here: it holds its
	 * process slot until the postmaster has reaped it, after it has left the
	 * registry, so it is counted until the process is gone, or (its pid
	 * may have been used again) SBQ_ADOPTED_GRACE_MS after it left.
	 */
	if (db->adopted_pid != 0)
	{
		if ((db->adopted_left == 0 ||
			 !TimestampDifferenceExceeds(db->adopted_left, now, SBQ_ADOPTED_GRACE_MS)) &&
			(kill(db->adopted_pid, 0) == 0 || errno == EPERM))
			return false;
		db->adopted_pid = 0;
	}
	if (!sbq_launcher_stopped(db))
		return false;
	if (db->passes_at_start < 0)
		return true;
	if (sbq_dbslot_get(db->dbid, &slot) && slot.state != SBQ_DB_ABSENT &&
		slot.passes == db->passes_at_start)
	{
		db->not_before = TimestampTzPlusMilliseconds(now, db->restart_delay_ms);
		db->restart_delay_ms = Min(db->restart_delay_ms * 2, SBQ_RESTART_DELAY_MAX_MS);
	}
	else
		db->restart_delay_ms = SBQ_RESTART_DELAY_MS;
	db->passes_at_start = -1;
	return true;
}

/*
 * sbq_launcher_due
 *		When db is due for a tick, and whether it is urgent: when its worker
 *		said; or an interval after its last tick began if something was sent,
 *		received or settled there since (an idle database's worker backs
 *		off); or, urgent, when a lock or scheduled message came due after its
 *		last tick began, but no sooner than SBQ_EARLY_GAP_MS after that tick.
 *		A database whose ticks fail is due when its worker's back-off says.
 *		One that has waited past sbqueue.idle_maintenance_interval counts as
 *		urgent too, so that urgent databases cannot keep it waiting for ever.
 */
static TimestampTz
sbq_launcher_due(SbqRound *r, SbqLauncherDb *db, const SbqDbSlotState *slot, bool *urgent)
{
	TimestampTz due;

	*urgent = false;
	/* not looked at yet: at once, unless a look failed (then it backs off) */
	if (slot->state == SBQ_DB_UNKNOWN)
		return slot->failures > 0 ? slot->next_due : 0;
	due = slot->next_due;
	/* a database whose ticks fail keeps to its back-off */
	if (slot->failures > 0)
		return due;
	if (db->active)
		due = Min(due, TimestampTzPlusMilliseconds(slot->last_start, sbq_maintenance_interval));
	if (db->work_due != 0 && db->work_due > slot->last_start)
	{
		TimestampTz early = TimestampTzPlusMilliseconds(slot->last_start,
														Min(SBQ_EARLY_GAP_MS,
															sbq_maintenance_interval));

		early = Max(early, db->work_due);
		if (early <= r->now)
			*urgent = true;
		due = Min(due, early);
	}
	if (due != 0 && due <= TimestampTzPlusMilliseconds(r->now, -(int64) sbq_idle_maintenance_interval))
		*urgent = true;
	return due;
}

/*
 * sbq_launcher_consider
 *		One database in a round: what became of its worker, whether it has
 *		sbqueue, when it is due; then a sleeping worker there is woken early
 *		or listed as one that could make room, and a due database without a
 *		worker becomes a candidate.
 */
static void
sbq_launcher_consider(SbqRound *r, SbqLauncherDb *db)
{
	SbqDbSlotState slot;
	bool		stopped;
	bool		urgent;
	TimestampTz due;

	stopped = sbq_launcher_reap(db, r->now);
	if (!sbq_launcher_slot(db, r->now, &r->nap_ms, &slot))
	{
		if (!stopped)
			r->running++;		/* leaving, but it still holds its process slot */
		return;
	}

	/* show when work came due there (the status function reads it) */
	if (db->work_due != db->work_due_shown)
	{
		sbq_dbslot_set_work_due(db->dbid, db->work_due);
		db->work_due_shown = db->work_due;
	}

	due = sbq_launcher_due(r, db, &slot, &urgent);
	if (slot.pid != 0 && db->handle == NULL)
	{
		db->adopted_pid = slot.pid;
		db->adopted_left = 0;
	}
	else if (db->adopted_pid != 0 && slot.pid == 0 && db->adopted_left == 0)
		db->adopted_left = r->now;
	if (!stopped || slot.pid != 0)
	{
		r->running++;
		if (slot.pid == 0 || slot.in_pass || !sbq_enable_maintenance_worker)
			return;

		/*
		 * Started by this launcher and no tick ended since: it is connecting,
		 * or about to run the tick it was started for. It makes room by
		 * itself after that tick; asked to leave now, it would have been
		 * started for nothing.
		 */
		if (db->handle != NULL && slot.passes == db->passes_at_start)
			return;
		/* a sleeping worker: wake it early, or list it as one that could make room */
		if (due < slot.next_due && due <= r->now)
			sbq_dbslot_ask(db->dbid, false, true);
		else
		{
			if (due < slot.next_due)
				sbq_launcher_update_nap(&r->nap_ms, r->now, due);
			r->res[r->nres].dbid = db->dbid;
			r->res[r->nres].next_due = due;
			r->nres++;
		}
		return;
	}

	if (!sbq_enable_maintenance_worker)
		return;
	if (slot.hold_until > r->now)
		due = Max(due, slot.hold_until);
	if (db->not_before > r->now)
		due = Max(due, db->not_before);
	if (due > r->now)
	{
		sbq_launcher_update_nap(&r->nap_ms, r->now, due);
		return;
	}
	r->cand[r->ncand].db = db;
	r->cand[r->ncand].urgent = urgent;
	r->cand[r->ncand].due = due;
	r->cand[r->ncand].passes = slot.passes;
	r->ncand++;
}

/*
 * sbq_launcher_dispatch
 *		Start workers in the candidates, urgent ones first and then the one
 *		due longest, while fewer than sbqueue.max_workers run; publish how
 *		many are left waiting, and ask as many sleeping workers (the latest
 *		due first) to make room, and those above a lowered
 *		sbqueue.max_workers to go.
 */
static void
sbq_launcher_dispatch(SbqRound *r)
{
	int			started = 0;
	int			waiting;
	int			i;

	qsort(r->cand, r->ncand, sizeof(SbqCandidate), sbq_candidate_cmp);
	for (i = 0; i < r->ncand && r->running < sbq_max_workers; i++)
	{
		if (!sbq_launcher_start_worker(r->cand[i].db, r->cand[i].passes))
		{
			r->nap_ms = Min(r->nap_ms, 1000);
			break;
		}
		r->running++;
		started++;
	}

	waiting = r->ncand - started;
	sbq_registry_set_waiting(waiting);
	if (sbq_enable_maintenance_worker)
	{
		int			surplus = Max(r->running - sbq_max_workers, 0);
		int			leave = Min(waiting + surplus, r->nres);

		qsort(r->res, r->nres, sizeof(SbqResident), sbq_resident_cmp);
		for (i = 0; i < leave; i++)
			sbq_dbslot_ask(r->res[i].dbid, true, false);
	}
	if (waiting > 0)
		r->nap_ms = Min(r->nap_ms, 1000);
}

/*
 * sbq_launcher_tick
 *		One round of the launcher: read pg_database when it may have changed,
 *		see what each database needs, start workers in the due ones while
 *		fewer than sbqueue.max_workers run, and ask sleeping workers to make
 *		room for those that wait. Returns how long to sleep before the next
 *		round if nothing wakes the launcher earlier: shared memory is looked
 *		at again within an interval, since the work there wakes nobody.
 */
static long
sbq_launcher_tick(void)
{
	SbqRound	r;
	uint64		gen;
	HASH_SEQ_STATUS hs;
	SbqLauncherDb *db;
	Oid		   *slot_dbids;
	int			nslots;
	int			ndbs;
	int			i;

	MemoryContextReset(sbq_launcher_tick_cxt);
	MemoryContextSwitchTo(sbq_launcher_tick_cxt);
	memset(&r, 0, sizeof(r));
	r.nap_ms = SBQ_LAUNCHER_NAP_MS;

	/* read before the scan: a commit that changes things later bumps it again */
	gen = sbq_registry_catalog_generation();
	r.now = GetCurrentTimestamp();
	if (TimestampDifferenceExceeds(sbq_launcher_scan_at, r.now, SBQ_RESCAN_MS) ||
		(gen != sbq_launcher_scan_gen &&
		 TimestampDifferenceExceeds(sbq_launcher_scan_at, r.now, SBQ_RESCAN_MIN_MS)))
		sbq_launcher_rescan(gen, r.now, &r.nap_ms);
	else if (gen != sbq_launcher_scan_gen)
	{
		/* a DDL flood: read it at most every SBQ_RESCAN_MIN_MS, and start nothing meanwhile */
		sbq_launcher_update_nap(&r.nap_ms, r.now,
								TimestampTzPlusMilliseconds(sbq_launcher_scan_at, SBQ_RESCAN_MIN_MS));
		return r.nap_ms;
	}
	sbq_launcher_update_nap(&r.nap_ms, r.now,
							TimestampTzPlusMilliseconds(sbq_launcher_scan_at, SBQ_RESCAN_MS));

	/* registry slots of databases the launcher does not track (holds, leftovers) */
	slot_dbids = palloc(sizeof(Oid) * (SBQ_REGISTRY_MAX_DBS + 64));
	nslots = sbq_dbslot_list(slot_dbids, SBQ_REGISTRY_MAX_DBS + 64);
	for (i = 0; i < nslots; i++)
		if (hash_search(sbq_launcher_dbs, &slot_dbids[i], HASH_FIND, NULL) == NULL)
			sbq_dbslot_free_if_idle(slot_dbids[i]);

	sbq_launcher_work_due();
	if (sbq_registry_lost() != sbq_launcher_lost)
	{
		sbq_launcher_lost = sbq_registry_lost();
		ereport(LOG,
				(errmsg("sbqueue's registry of databases is full"),
				 errdetail("It has room for %d databases with sbqueue; a database where sbqueue was created since gets no maintenance worker until it is used once a slot is free.",
						   SBQ_REGISTRY_MAX_DBS)));
	}

	ndbs = Max(hash_get_num_entries(sbq_launcher_dbs), 1);
	r.cand = palloc(sizeof(SbqCandidate) * ndbs);
	r.res = palloc(sizeof(SbqResident) * ndbs);
	hash_seq_init(&hs, sbq_launcher_dbs);
	while ((db = hash_seq_search(&hs)) != NULL)
	{
		if (db->seen)
			sbq_launcher_consider(&r, db);
		else if (!sbq_launcher_stopped(db))
			r.running++;		/* gone: its worker is still on the way out */
	}

	sbq_launcher_dispatch(&r);
	return Min(r.nap_ms, sbq_maintenance_interval);
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
