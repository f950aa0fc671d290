/*-------------------------------------------------------------------------
 *
 * utility_hook.c
 *	  The ProcessUtility hook, in every backend: it keeps the maintenance
 *	  workers out of the way of DDL that needs a database to itself, and
 *	  tells the launcher when sbqueue may have appeared somewhere.
 *
 * Installed by _PG_init when sbqueue is preloaded, so it runs in every
 * backend of the server, not in the workers only.
 *
 * DROP DATABASE (without FORCE) fails when another session is connected to
 * the database for more than 5 s, and so do ALTER DATABASE RENAME, ALTER
 * DATABASE SET TABLESPACE and CREATE DATABASE ... TEMPLATE. The hook runs
 * before such a statement: it puts a hold on the database in the database
 * registry (registry.c), which keeps workers out, and sends SIGTERM to the
 * worker running there; the statement's own wait for other sessions then
 * finds the worker gone. The hold ends when the transaction ends (commit or
 * abort: at commit the database is gone or renamed and the launcher sees
 * that; at abort it starts the worker again), or after SBQ_HOLD_MAX_MS at the
 * latest.
 *
 * After CREATE or ALTER EXTENSION sbqueue (statements only a superuser can
 * run) commits, it bumps the registry's recheck generation, which wakes the
 * launcher and every worker (launcher.c, maintenance_worker.c); after CREATE
 * DATABASE, the catalog generation, which wakes the launcher only. Both only
 * for a statement that succeeded.
 *
 * The launcher must also know which databases have sbqueue without sending
 * a worker to look. An object access hook notes that the transaction created
 * or dropped an extension, by any path (CREATE EXTENSION, its CASCADE, DROP
 * EXTENSION, DROP SCHEMA ... CASCADE, DROP OWNED). Just before such a
 * transaction commits, the hook looks whether sbqueue is installed in the
 * database now, and once it has committed it tells the registry. COMMIT
 * PREPARED runs no transaction callback: a prepared transaction that created
 * or dropped an extension has the launcher look at its database again every minute while
 * prepared transactions are pending there (and sbqueue state in shared
 * memory makes it look too, launcher.c). The COMMIT PREPARED statement
 * itself passes the utility hook, though: once it has run, the hook reads
 * whether sbqueue is installed in the database now and tells the registry
 * if that is news (and no commit told it anything meanwhile), so that a
 * database created by a prepared transaction gets its worker at once.
 *
 * Owns: the backend-local list of databases this transaction holds, whether
 * it created or dropped an extension, and a transaction callback (registered
 * on first use) that ends the holds, tells the registry, and asks for the
 * recheck. Locks: none of its own; the registry's functions take the
 * registry's lock, also from the transaction callback, which at commit and
 * abort must not fail and does nothing else.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/utility_hook.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "registry.h"
#include "shmem.h"
#include "worker.h"

/* the longest a DDL hold keeps workers out of a database */
#define SBQ_HOLD_MAX_MS				60000

#define SBQ_MAX_HELD_DBS	8
static ProcessUtility_hook_type sbq_prev_process_utility = NULL;
static object_access_hook_type sbq_prev_object_access = NULL;
static Oid	sbq_held_dbs[SBQ_MAX_HELD_DBS];
static int	sbq_nheld_dbs = 0;
static bool sbq_recheck_at_commit = false;
static bool sbq_rescan_at_commit = false;
static bool sbq_utility_callback_registered = false;

/* this transaction created or dropped an extension; and, just before commit, whether
 * sbqueue is installed now */
static bool sbq_extension_changed = false;
static bool sbq_extension_installed = false;

/*
 * sbq_utility_xact_callback
 *		At the end of a transaction that held databases or created/updated
 *		sbqueue or a database: lift the holds (commit or not) and, after a
 *		commit, ask the launcher to look again. The registry's LWLock and
 *		latches only: it runs where an error cannot be raised.
 */
static void
sbq_utility_xact_callback(XactEvent event, void *arg)
{
	int			i;

	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			/* still in the transaction: the catalogs can be read (and this may fail) */
			if (sbq_extension_changed)
				sbq_extension_installed = OidIsValid(get_extension_oid("sbqueue", true));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
			for (i = 0; i < sbq_nheld_dbs; i++)
				sbq_dbslot_release_hold(sbq_held_dbs[i]);
			sbq_nheld_dbs = 0;

			/*
			 * The recheck generation moves before the news that starts a
			 * worker here: a worker started for this CREATE EXTENSION must
			 * not take the move for a later update and look again five times
			 * over (sbq_worker_recheck).
			 */
			if (event == XACT_EVENT_COMMIT && sbq_recheck_at_commit)
				sbq_registry_request_recheck();
			if (event == XACT_EVENT_COMMIT && sbq_extension_changed)
				sbq_dbslot_publish(MyDatabaseId, sbq_extension_installed);
			if (event == XACT_EVENT_PREPARE && sbq_extension_changed)
				sbq_dbslot_publish_prepared(MyDatabaseId);
			if (event == XACT_EVENT_COMMIT && sbq_rescan_at_commit)
				sbq_registry_request_rescan();
			sbq_recheck_at_commit = false;
			sbq_rescan_at_commit = false;
			sbq_extension_changed = false;
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
	bool		recheck = false;
	bool		rescan = false;
	bool		prepared_done = false;

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
				rescan = true;
				break;
			case T_CreateExtensionStmt:
				recheck = strcmp(((CreateExtensionStmt *) parsetree)->extname, "sbqueue") == 0;
				break;
			case T_AlterExtensionStmt:
				recheck = strcmp(((AlterExtensionStmt *) parsetree)->extname, "sbqueue") == 0;
				break;
			case T_TransactionStmt:
				prepared_done = ((TransactionStmt *) parsetree)->kind == TRANS_STMT_COMMIT_PREPARED;
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

	/*
	 * The prepared transaction has committed: if it created or dropped
	 * sbqueue here, no callback of ours ran at its commit, so tell the
	 * registry now (a prepared CREATE EXTENSION, as a distributed
	 * transaction's participants run it, gets its maintenance at once)
	 */
	if (prepared_done && sbq_shmem_available())
	{
		bool		known;
		uint64		gen = sbq_dbslot_seen(MyDatabaseId, &known);

		/* what the registry held before the catalog read: see the callee */
		sbq_dbslot_publish_if_changed(MyDatabaseId,
									  OidIsValid(get_extension_oid("sbqueue", true)),
									  known, gen);
	}

	/* only once the statement has succeeded (a refused one asks for nothing) */
	if (recheck || rescan)
	{
		sbq_utility_register_callback();
		sbq_recheck_at_commit |= recheck;
		sbq_rescan_at_commit |= rescan;
	}
}

/*
 * sbq_extension_access
 *		object_access_hook: note that this transaction creates or drops an
 *		extension (which one is looked up just before commit).
 */
static void
sbq_extension_access(ObjectAccessType access, Oid classId, Oid objectId,
					 int subId, void *arg)
{
	if (sbq_prev_object_access)
		sbq_prev_object_access(access, classId, objectId, subId, arg);
	if ((access == OAT_POST_CREATE || access == OAT_DROP) &&
		classId == ExtensionRelationId && sbq_shmem_available())
	{
		sbq_utility_register_callback();
		sbq_extension_changed = true;
	}
}

/*
 * sbq_utility_hook_install
 *		Install the hooks. Called by _PG_init only while
 *		shared_preload_libraries is processed (and not in binary upgrade
 *		mode).
 */
void
sbq_utility_hook_install(void)
{
	sbq_prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = sbq_process_utility;
	sbq_prev_object_access = object_access_hook;
	object_access_hook = sbq_extension_access;
}
