/*-------------------------------------------------------------------------
 *
 * maintenance_worker.c
 *	  A maintenance worker: the process that runs sbq_maintain() in one
 *	  database, as often as that database needs it, and vacuums its message
 *	  table when enough of it is dead.
 *
 * The launcher (launcher.c) starts it in a database that is due for a tick,
 * as a dynamic background worker ("sbqueue maintenance") whose bgw_main_arg
 * is the database's OID. The worker connects to the database, claims it in
 * the database registry (registry.c; refused while DDL holds the database or
 * another worker has it: it then leaves quietly) and runs a tick at once:
 *
 *	- sbqueue not installed: it leaves that answer in the registry (with
 *	  whether a prepared transaction is pending there, which may still create
 *	  it) and exits. So does it once the extension is dropped.
 *	- installed: it runs SELECT <schema>.sbq_maintain() in a transaction of
 *	  its own, as the extension's owner with search_path pinned, again at
 *	  once while the result says "more" (at most SBQ_MAX_PASSES_PER_TICK
 *	  times, fewer when other databases wait for a worker), then vacuums
 *	  sbq.messages when pgstat counts sbqueue.vacuum_threshold dead rows
 *	  there.
 *
 * After the tick it tells the registry when it began and ended, how it went,
 * and when the next is due: sbqueue.maintenance_interval after this one
 * began; later when the tick found nothing to do (the interval doubles with
 * each such tick, up to sbqueue.idle_maintenance_interval; the count carries
 * over to the next worker there through the registry); at once when it
 * stopped short with more to do. If other databases wait for a worker slot,
 * or the launcher asks it to, it then exits; otherwise it sleeps in its
 * database with no transaction open and no snapshot held until the next
 * tick, or until the launcher wakes it for urgent work (a lock or scheduled
 * message come due) or asks it to leave.
 *
 * A failed pass is logged and rolled back, and the worker backs off (the
 * interval times 2, 4, 8, ..., at most SBQ_BACKOFF_MAX_MS). An extension
 * version without sbq_maintain() is warned about once per database and
 * treated as a failure. When the recheck generation moves (ALTER EXTENSION
 * sbqueue committed somewhere) the worker stops backing off and looks again
 * at once, a few times in quick succession. Nothing runs on a standby.
 * sbqueue.enable_maintenance_worker = off (on SIGHUP) makes it exit.
 *
 * Owns: nothing shared. It holds its database's slot of the registry while
 * it runs and gives it back from a before_shmem_exit callback, which also
 * wakes the launcher. Locks: none of its own; the registry's functions take
 * the registry's lock, a pass takes what sbq_maintain() takes, and the
 * vacuum what VACUUM takes.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/maintenance_worker.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/dependency.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "commands/vacuum.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_node.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/procarray.h"
#include "tcop/tcopprot.h"
#include "utils/backend_status.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "registry.h"
#include "sbqueue.h"
#include "worker.h"

/* sbq_maintain() calls per tick while it reports more to do */
#define SBQ_MAX_PASSES_PER_TICK		100
/* the longest a worker backs off after failed passes */
#define SBQ_BACKOFF_MAX_MS			60000
/* the least time between two back-offs cut short by rechecks */
#define SBQ_RECHECK_MIN_MS			5000
/* the longest a worker waits for its database's lock when it connects */
#define SBQ_CONNECT_LOCK_TIMEOUT	"5s"
/* looks for sbq_maintain() right after an ALTER EXTENSION, and their spacing */
#define SBQ_QUICK_RETRIES			5
#define SBQ_QUICK_RETRY_MS			200

/*
 * The removable-xid horizon of the worker's last vacuum of sbq.messages: no
 * new vacuum until it moves (while a transaction holds it back, a vacuum
 * would remove nothing and only rescan what the last one could not clean).
 */
static TransactionId sbq_worker_vacuum_horizon = InvalidTransactionId;

/* What one pass, or a tick of passes, found. */
typedef enum SbqPassStatus
{
	SBQ_PASS_OK,
	SBQ_PASS_NO_EXTENSION,
	SBQ_PASS_NO_FUNCTION,
	SBQ_PASS_ERROR
} SbqPassStatus;

/* When the next tick runs, and what the last ones found. */
typedef struct SbqWorkerSchedule
{
	int			failures;		/* ticks in a row that failed */
	int			quick_retries;	/* early looks left for a new sbq_maintain() */
	TimestampTz last_run;		/* when the last tick began, 0 before the first */
	TimestampTz next_run;		/* when the next one is due */
	uint64		gen;			/* the recheck generation last seen */
	int32		idle_ticks;		/* ticks in a row that found nothing to do */
	bool		no_function;	/* the last tick found no sbq_maintain() */
	TimestampTz recheck_at;		/* when a recheck last cut the back-off short */
	int64		ticks;			/* ticks this worker ran */
} SbqWorkerSchedule;

static Oid	sbq_worker_dbid = InvalidOid;
static char *sbq_worker_dbname = "?";
static bool sbq_worker_registered = false;
static uint64 sbq_worker_state_gen = 0; /* of the registry slot's state, when a tick began */
static bool sbq_worker_prepared = false;	/* no sbqueue, but prepared transactions */
static bool sbq_worker_busy = false;	/* the last pass found something to do */
static int32 sbq_worker_idle_ticks = 0; /* the database's idle ticks, when claimed */
static int32 sbq_worker_failures = 0;	/* its failed ticks in a row, when claimed */
static MemoryContext sbq_worker_cxt = NULL;

/*
 * sbq_worker_shmem_exit
 *		before_shmem_exit callback of a worker: give the database back in the
 *		registry and wake the launcher.
 */
static void
sbq_worker_shmem_exit(int code, Datum arg)
{
	if (sbq_worker_registered)
		sbq_dbslot_unregister_worker(sbq_worker_dbid, MyProcPid);
	else
		sbq_registry_wake_launcher();
}

/*
 * sbq_worker_prepared_pending
 *		Whether a prepared transaction of this database is pending (it may
 *		create sbqueue when it commits). Called in a transaction, with SPI
 *		not connected.
 */
static bool
sbq_worker_prepared_pending(void)
{
	bool		pending;
	bool		isnull;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute("SELECT EXISTS (SELECT FROM pg_catalog.pg_prepared_xacts"
					" WHERE database OPERATOR(pg_catalog.=) pg_catalog.current_database())",
					true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not read pg_prepared_xacts");
	pending = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
										 &isnull));
	SPI_finish();
	return pending && !isnull;
}

/*
 * sbq_find_extension
 *		Whether sbqueue is installed in this database, and if so its owner and
 *		schema. Must be called in a transaction.
 */
/* whether this process is a maintenance worker (its passes keep to its node) */
bool		sbq_am_maintenance_worker = false;

bool
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

/*
 * sbq_worker_hold_extension
 *		Find the extension, as sbq_find_extension, and lock it against a drop
 *		until the pass's call of sbq_maintain() is parsed (a drop takes the
 *		extension's lock exclusively). Without the lock, a DROP EXTENSION
 *		that committed between this look and the parse of the call failed the
 *		pass: function sbq_maintain() does not exist. One that committed
 *		while the lock was awaited is seen by the look after it (taking the
 *		lock accepts its invalidations); an extension dropped and created
 *		again meanwhile has another OID and is looked up afresh.
 */
static bool
sbq_worker_hold_extension(Oid *extoid, Oid *extowner, Oid *extnamespace)
{
	for (;;)
	{
		Oid			held;

		CHECK_FOR_INTERRUPTS();
		if (!sbq_find_extension(&held, extowner, extnamespace))
			return false;
		LockDatabaseObject(ExtensionRelationId, held, 0, AccessShareLock);
		if (sbq_find_extension(extoid, extowner, extnamespace) && *extoid == held)
			return true;
		UnlockDatabaseObject(ExtensionRelationId, held, 0, AccessShareLock);
	}
}

/*
 * sbq_worker_result_busy
 *		Whether the result of sbq_maintain() says it found something to do: a
 *		count other than "queues" above zero, or "more" or "skipped" true. A
 *		database whose passes find nothing is idle; its worker backs off.
 */
static bool
sbq_worker_result_busy(Jsonb *jb)
{
	JsonbIterator *it = JsonbIteratorInit(&jb->root);
	JsonbValue	v;
	JsonbIteratorToken tok;
	bool		busy = false;
	bool		skip = false;

	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
			skip = (v.val.string.len == 6 && memcmp(v.val.string.val, "queues", 6) == 0);
		else if (tok == WJB_VALUE && !skip)
		{
			if (v.type == jbvBool && v.val.boolean)
				busy = true;
			else if (v.type == jbvNumeric &&
					 DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(v.val.numeric),
													   DirectFunctionCall1(int4_numeric,
																		   Int32GetDatum(0)))) > 0)
				busy = true;
		}
	}
	return busy;
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
sbq_worker_call_maintain(bool *more)
{
	Oid			extoid;
	Oid			extowner;
	Oid			nspoid;
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;
	char	   *nspname;
	char	   *sql;
	SPIPlanPtr	plan;
	int			ret;

	*more = false;
	sbq_worker_busy = true;		/* until a result says otherwise */
	if (!sbq_worker_hold_extension(&extoid, &extowner, &nspoid))
	{
		sbq_worker_prepared = sbq_worker_prepared_pending();
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
	plan = SPI_prepare(sql, 0, NULL);
	if (plan == NULL)
		elog(ERROR, "%s: SPI_prepare failed: %s", sql, SPI_result_code_string(SPI_result));

	/*
	 * The call is parsed: let a drop of the extension go on now. Held while
	 * sbq_maintain() waits for its tables' locks, the extension's lock made
	 * a deadlock with a transaction that locked one of them and then dropped
	 * the extension (its DROP EXTENSION, or the pass, failed). A drop that
	 * commits from here on is taken in by the pass's first lock on its
	 * tables, and the pass skips.
	 */
	UnlockDatabaseObject(ExtensionRelationId, extoid, 0, AccessShareLock);
	ret = SPI_execute_plan(plan, NULL, NULL, false, 1);
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
			sbq_worker_busy = sbq_worker_result_busy(jb);
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

	sbq_worker_xact_begin(&errcallback);

	PG_TRY();
	{
		bool		m;

		PushActiveSnapshot(GetTransactionSnapshot());
		status = sbq_worker_call_maintain(&m);
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
 * sbq_worker_others_wait
 *		Whether this worker should make room: the launcher asked it to leave,
 *		or other databases wait for a worker slot.
 */
static bool
sbq_worker_others_wait(void)
{
	bool		leave;
	bool		run_now;

	sbq_dbslot_poll(sbq_worker_dbid, &leave, &run_now);
	return leave || sbq_registry_waiting() > 0;
}

/*
 * sbq_worker_tick
 *		Run passes while sbq_maintain() says there is more, at most
 *		SBQ_MAX_PASSES_PER_TICK of them, and fewer when other databases wait
 *		for a worker (*more then says the tick stopped short); an interrupt
 *		between two passes is served at once.
 */
static SbqPassStatus
sbq_worker_tick(bool *more)
{
	SbqPassStatus status = SBQ_PASS_OK;
	int			i;

	*more = false;
	for (i = 0; i < SBQ_MAX_PASSES_PER_TICK; i++)
	{
		status = sbq_worker_pass(more);
		if (status != SBQ_PASS_OK || !*more)
			break;
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending || !sbq_enable_maintenance_worker || sbq_worker_others_wait())
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
 * sbq_worker_drop_database_settings
 *		Undo every setting the database's settings (ALTER DATABASE ... SET,
 *		which its owner controls) gave the worker: back to the built-in
 *		value. The worker runs as the bootstrap superuser and holds one of the
 *		pool's few slots; what a database's owner sets is meant for the
 *		owner's sessions (a role to act as, vacuum cost delays that make its
 *		vacuum last for hours, planner settings that slow its passes), not
 *		for sbqueue's worker. Called in a transaction (some settings check
 *		their value in the catalogs). A value that is refused is logged and
 *		left as it was.
 */
static void
sbq_worker_drop_database_settings(void)
{
	struct config_generic **vars;
	int			nvars;
	int			i;

	vars = sbq_guc_variables(&nvars);
	for (i = 0; i < nvars; i++)
	{
		struct config_generic *g = vars[i];
		const char *value = NULL;
		char		buf[64];

		if (g->source != PGC_S_DATABASE && g->source != PGC_S_DATABASE_USER)
			continue;
		switch (g->vartype)
		{
			case PGC_BOOL:
				value = ((struct config_bool *) g)->boot_val ? "on" : "off";
				break;
			case PGC_INT:
				snprintf(buf, sizeof(buf), "%d", ((struct config_int *) g)->boot_val);
				value = buf;
				break;
			case PGC_REAL:
				snprintf(buf, sizeof(buf), "%.17g", ((struct config_real *) g)->boot_val);
				value = buf;
				break;
			case PGC_STRING:
				value = ((struct config_string *) g)->boot_val;
				break;
			case PGC_ENUM:
				value = config_enum_lookup_by_value((struct config_enum *) g,
													((struct config_enum *) g)->boot_val);
				break;
		}
		/* the session's user is the bootstrap superuser, whatever was set */
		if (strcmp(g->name, "session_authorization") == 0)
			value = GetUserNameFromId(BOOTSTRAP_SUPERUSERID, false);
		(void) set_config_option(g->name, value != NULL ? value : "", PGC_SUSET, PGC_S_OVERRIDE,
								 GUC_ACTION_SET, true, WARNING, false);
	}
}

/*
 * sbq_worker_pin_settings
 *		Override what the database's settings (ALTER DATABASE ... SET, which
 *		its owner controls) could do to a worker that runs as the bootstrap
 *		superuser and holds one of the pool's few slots, as autovacuum does:
 *		no search_path but pg_catalog's (every statement it runs as superuser
 *		names its objects, but an operator or function found on a database's
 *		search_path would run with its rights); transactions that are
 *		read committed, writable and never wait for a safe snapshot; no
 *		timeouts; no parallel workers (process slots beyond sbqueue's share).
 */
static void
sbq_worker_pin_settings(void)
{
	static const char *const pinned[][2] = {
		{"search_path", "pg_catalog, pg_temp"},
		{"default_transaction_isolation", "read committed"},
		{"default_transaction_read_only", "off"},
		{"default_transaction_deferrable", "off"},
		{"statement_timeout", "0"},
		{"lock_timeout", "0"},
		{"synchronous_commit", "local"},
		{"idle_in_transaction_session_timeout", "0"},
		{"max_parallel_workers_per_gather", "0"},
		{"max_parallel_maintenance_workers", "0"},
	};
	int			i;

	for (i = 0; i < (int) lengthof(pinned); i++)
		SetConfigOption(pinned[i][0], pinned[i][1], PGC_SUSET, PGC_S_OVERRIDE);
}

/*
 * sbq_worker_start
 *		Set the worker up in database dbid: its exit callback, signals and
 *		connection, its claim in the registry (or a quiet exit), its memory
 *		and the database's name.
 */
static void
sbq_worker_start(Oid dbid)
{
	sbq_worker_dbid = dbid;
	sbq_am_maintenance_worker = true;

	/* cleanup first (STYLE.md G.42): it hands the database back in the registry */
	before_shmem_exit(sbq_worker_shmem_exit, (Datum) 0);

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	/*
	 * As the bootstrap superuser; a pass switches to the extension's owner.
	 * Connecting takes a lock on the database, which an open ALTER DATABASE
	 * ... RENAME holds for as long as its transaction lasts: a worker that
	 * waited for it would keep its slot from every other database, so it
	 * gives up (FATAL; the launcher backs off) after a while instead. The
	 * database's own settings, applied after that lock, cannot change this.
	 */
	SetConfigOption("lock_timeout", SBQ_CONNECT_LOCK_TIMEOUT, PGC_SUSET, PGC_S_OVERRIDE);
	BackgroundWorkerInitializeConnectionByOid(sbq_worker_dbid, InvalidOid, 0);

	/* a DDL hold, or a worker already here: leave quietly */
	if (!sbq_dbslot_register_worker(sbq_worker_dbid, MyProcPid, MyLatch, &sbq_worker_idle_ticks,
									&sbq_worker_failures))
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
		sbq_worker_drop_database_settings();
	}
	CommitTransactionCommand();
	MemoryContextSwitchTo(sbq_worker_cxt);
	sbq_worker_pin_settings();
	pgstat_report_appname("sbqueue maintenance");
}

/*
 * sbq_worker_reload
 *		Serve a SIGHUP: read the configuration again.
 */
static void
sbq_worker_reload(SbqWorkerSchedule *s)
{
	ConfigReloadPending = false;
	ProcessConfigFile(PGC_SIGHUP);
	/* a new interval counts from the last pass, not after the old one */
	if (s->failures == 0 && s->last_run != 0)
		s->next_run = TimestampTzPlusMilliseconds(s->last_run, sbq_maintenance_interval);
}

/*
 * sbq_worker_recheck
 *		sbqueue created or updated somewhere (the recheck generation moved):
 *		if the back-off is for want of sbq_maintain(), stop it and look now,
 *		at most once every SBQ_RECHECK_MIN_MS (anybody can move the
 *		generation, by creating databases; a back-off after errors stays).
 */
static void
sbq_worker_recheck(SbqWorkerSchedule *s)
{
	if (sbq_registry_recheck_generation() != s->gen)
	{
		TimestampTz now = GetCurrentTimestamp();

		s->gen = sbq_registry_recheck_generation();
		if (s->failures > 0 && s->no_function &&
			(s->recheck_at == 0 || TimestampDifferenceExceeds(s->recheck_at, now, SBQ_RECHECK_MIN_MS)))
		{
			s->recheck_at = now;
			s->failures = 0;
			s->next_run = GetCurrentTimestamp();
			s->quick_retries = SBQ_QUICK_RETRIES;
		}
	}
}

/*
 * sbq_worker_judge
 *		Take in what a tick found: after a good one, vacuum; without the
 *		extension, exit (leaving that answer in the registry); without
 *		sbq_maintain(), look again soon or count a failure; after an error,
 *		count a failure. Returns how the tick ended, for the registry.
 */
static SbqPassResult
sbq_worker_judge(SbqWorkerSchedule *s, SbqPassStatus status)
{
	switch (status)
	{
		case SBQ_PASS_OK:
			s->failures = 0;
			s->quick_retries = 0;
			sbq_worker_vacuum();
			return SBQ_RESULT_OK;
		case SBQ_PASS_NO_EXTENSION:
			sbq_dbslot_set_absent(sbq_worker_dbid, sbq_worker_state_gen, sbq_worker_prepared);
			proc_exit(0);
			break;
		case SBQ_PASS_NO_FUNCTION:

			/*
			 * Woken by the commit of an ALTER EXTENSION UPDATE: its commit
			 * callback runs before its catalog invalidations are sent, so
			 * this look may have missed the new function. Look again soon, a
			 * few times, before backing off.
			 */
			if (s->quick_retries > 0)
			{
				s->quick_retries--;
				return SBQ_RESULT_NO_FUNCTION;
			}
			if (sbq_dbslot_warn_once(sbq_worker_dbid))
				ereport(WARNING,
						(errcode(ERRCODE_UNDEFINED_FUNCTION),
						 errmsg("sbqueue maintenance worker found no sbq_maintain() in database \"%s\"",
								sbq_worker_dbname),
						 errdetail("The installed version of the extension has no maintenance function; the worker looks again later."),
						 errhint("Update the extension with ALTER EXTENSION sbqueue UPDATE.")));
			s->failures++;
			return SBQ_RESULT_NO_FUNCTION;
		case SBQ_PASS_ERROR:
			s->failures++;
			return SBQ_RESULT_ERROR;
	}
	return SBQ_RESULT_ERROR;
}

/*
 * sbq_worker_run
 *		A tick is due (now): run it, unless on a standby, and schedule the
 *		next one: after the interval, sooner while looking quickly for a new
 *		sbq_maintain() or when the tick stopped short with more to do, later
 *		after failures. The registry learns when the tick began and ended,
 *		how, and when the next is due.
 */
static void
sbq_worker_run(SbqWorkerSchedule *s, TimestampTz now)
{
	long		delay_ms = sbq_maintenance_interval;
	SbqPassResult result = SBQ_RESULT_OK;
	bool		more = false;

	s->last_run = now;
	s->ticks++;
	sbq_worker_state_gen = sbq_dbslot_pass_begin(sbq_worker_dbid, now);

	/* nothing to do on a standby: queue state comes from the primary */
	if (!RecoveryInProgress())
		result = sbq_worker_judge(s, sbq_worker_tick(&more));
	if (result == SBQ_RESULT_OK && !sbq_worker_busy)
	{
		/* idle: interval * 2^idle_ticks, at most sbqueue.idle_maintenance_interval */
		int			shift = Min(s->idle_ticks, 16);

		delay_ms = Min((int64) sbq_maintenance_interval << shift,
					   (int64) Max(sbq_idle_maintenance_interval, sbq_maintenance_interval));
		s->idle_ticks++;
	}
	else
		s->idle_ticks = 0;
	if (s->quick_retries > 0 && s->failures == 0)
		delay_ms = Min(delay_ms, SBQ_QUICK_RETRY_MS);
	if (more && result == SBQ_RESULT_OK)
		delay_ms = 0;
	if (s->failures > 0)
	{
		/* back off: interval * 2^failures, at most SBQ_BACKOFF_MAX_MS */
		int			shift = Min(s->failures, 16);

		delay_ms = Min((int64) sbq_maintenance_interval << shift,
					   (int64) Max(SBQ_BACKOFF_MAX_MS, sbq_maintenance_interval));
	}
	s->no_function = (result == SBQ_RESULT_NO_FUNCTION);
	now = GetCurrentTimestamp();
	s->next_run = TimestampTzPlusMilliseconds(s->last_run, delay_ms);
	if (s->failures > 0 || s->quick_retries > 0)
		s->next_run = TimestampTzPlusMilliseconds(now, delay_ms);
	sbq_dbslot_pass_end(sbq_worker_dbid, sbq_worker_state_gen, now, result, s->failures,
						s->idle_ticks, s->next_run);
}

/*
 * sbq_worker_leave
 *		Exit, saying at DEBUG1 why and after how many ticks: a worker that
 *		leaves before its first one was started for nothing.
 */
static void
sbq_worker_leave(const SbqWorkerSchedule *s, const char *why)
{
	ereport(DEBUG1,
			(errmsg_internal("sbqueue maintenance worker leaves database \"%s\" after " INT64_FORMAT " ticks: %s",
							 sbq_worker_dbname, s->ticks, why)));
	proc_exit(0);
}

/*
 * sbq_worker_main
 *		A worker's entry point; bgw_main_arg is the database OID. It runs a
 *		tick at once (the launcher started it because one is due), then
 *		stays, sleeping until the next, unless other databases wait for a
 *		worker or the launcher asks it to leave (launcher.c).
 */
void
sbq_worker_main(Datum main_arg)
{
	SbqWorkerSchedule s;

	sbq_worker_start(DatumGetObjectId(main_arg));

	memset(&s, 0, sizeof(s));
	s.idle_ticks = sbq_worker_idle_ticks;
	s.failures = sbq_worker_failures;
	s.gen = sbq_registry_recheck_generation();
	s.next_run = GetCurrentTimestamp();
	for (;;)
	{
		TimestampTz now;
		long		sleep_ms;
		bool		leave;
		bool		run_now;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
			sbq_worker_reload(&s);
		if (!sbq_enable_maintenance_worker)
			sbq_worker_leave(&s, "sbqueue.enable_maintenance_worker is off");
		sbq_worker_recheck(&s);
		sbq_dbslot_poll(sbq_worker_dbid, &leave, &run_now);
		if (leave)
			sbq_worker_leave(&s, "the launcher asked it to");

		now = GetCurrentTimestamp();
		if (now >= s.next_run || (run_now && s.failures == 0))
		{
			sbq_worker_run(&s, now);
			/* make room for a database that waits */
			if (sbq_worker_others_wait())
				sbq_worker_leave(&s, "it makes room for other databases");
			now = GetCurrentTimestamp();
		}

		sleep_ms = (long) ((s.next_run - now + 999) / 1000);
		if (sleep_ms > 0)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 sleep_ms, SBQ_WAIT_EVENT_WORKER);
			ResetLatch(MyLatch);
		}
	}
}
