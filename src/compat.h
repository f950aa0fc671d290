/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  Every difference between the PostgreSQL versions sbqueue builds on
 *	  (15 to 17) that its code meets, in one place: the PG_VERSION_NUM tests,
 *	  and a feature test for what a minor release back-patched. No other file
 *	  tests a version; it uses the macros here.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/compat.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SBQ_COMPAT_H
#define SBQ_COMPAT_H

#include "postgres.h"
#include "funcapi.h"
#include "storage/proc.h"

/* The PGPROC slot number of this backend: dense and unique among live backends. */
#if PG_VERSION_NUM >= 170000
#define SBQ_MY_PROC_NUMBER() ((int) MyProcNumber)
#else
#define SBQ_MY_PROC_NUMBER() (MyProc->pgprocno)
#endif

/* This backend's local transaction id: a field of its own from 17 on. */
#if PG_VERSION_NUM >= 170000
#define SBQ_MY_LXID() (MyProc->vxid.lxid)
#else
#define SBQ_MY_LXID() (MyProc->lxid)
#endif

/*
 * shmem_request_hook (the only correct place to ask for shared memory) comes
 * with 15, and so does MarkGUCPrefixReserved; sbqueue does not build on less.
 */
#if PG_VERSION_NUM < 150000
#error "sbqueue requires PostgreSQL 15 or later"
#endif

/*
 * The materialized set-returning call setup: InitMaterializedSRF from 15.1
 * on (renamed in the 15 branch), SetSingleFuncCall in 15.0.
 */
#ifndef MAT_SRF_USE_EXPECTED_DESC
#define InitMaterializedSRF(fcinfo, flags) SetSingleFuncCall((fcinfo), (flags))
#define MAT_SRF_USE_EXPECTED_DESC SRF_SINGLE_USE_EXPECTED
#endif

/*
 * The wait events sbqueue reports: named ones (WaitEventExtensionNew) come
 * with 17; on 15 and 16 they all show as "Extension".
 */
#define SBQ_WAIT_EVENT_RECEIVE PG_WAIT_EXTENSION
#define SBQ_WAIT_EVENT_LAUNCHER PG_WAIT_EXTENSION
#define SBQ_WAIT_EVENT_WORKER PG_WAIT_EXTENSION

/*
 * sbq_restrict_search_path
 *		Pin search_path to "pg_catalog, pg_temp" until the current GUC nest
 *		level is left (the caller opened it with NewGUCNestLevel and closes it
 *		with AtEOXact_GUC). PG17 has RestrictSearchPath() for this; on 15 and
 *		16 it is spelt out.
 */
#if PG_VERSION_NUM >= 170000
#define sbq_restrict_search_path() RestrictSearchPath()
#else
#define sbq_restrict_search_path() \
	((void) set_config_option("search_path", "pg_catalog, pg_temp", \
							  PGC_USERSET, PGC_S_SESSION, \
							  GUC_ACTION_SAVE, true, 0, false))
#endif

/* Whether a role owns a database (the per-class ownercheck functions went in 16). */
#if PG_VERSION_NUM >= 160000
#define sbq_database_ownercheck(dbid, roleid) \
	object_ownercheck(DatabaseRelationId, (dbid), (roleid))
#else
#define sbq_database_ownercheck(dbid, roleid) pg_database_ownercheck((dbid), (roleid))
#endif

/* A role's privilege on a database (the per-class aclcheck functions went in 16). */
#if PG_VERSION_NUM >= 160000
#define sbq_database_aclcheck(dbid, roleid, mode) \
	object_aclcheck(DatabaseRelationId, (dbid), (roleid), (mode))
#else
#define sbq_database_aclcheck(dbid, roleid, mode) pg_database_aclcheck((dbid), (roleid), (mode))
#endif

/* A role's privilege on a function. */
#if PG_VERSION_NUM >= 160000
#define sbq_proc_aclcheck(fnoid, roleid, mode) \
	object_aclcheck(ProcedureRelationId, (fnoid), (roleid), (mode))
#else
#define sbq_proc_aclcheck(fnoid, roleid, mode) pg_proc_aclcheck((fnoid), (roleid), (mode))
#endif

/* A role's privilege on a schema. */
#if PG_VERSION_NUM >= 160000
#define sbq_namespace_aclcheck(nspoid, roleid, mode) \
	object_aclcheck(NamespaceRelationId, (nspoid), (roleid), (mode))
#else
#define sbq_namespace_aclcheck(nspoid, roleid, mode) pg_namespace_aclcheck((nspoid), (roleid), (mode))
#endif

/* All the settings, and how many (16 returns the count through its argument). */
#if PG_VERSION_NUM >= 160000
#define sbq_guc_variables(n) get_guc_variables(n)
#else
#define sbq_guc_variables(n) (*(n) = GetNumConfigOptions(), get_guc_variables())
#endif

/*
 * The oldest transaction whose commit status pg_xact still holds (read under
 * XactTruncationLock): the struct it lives in was renamed in 17.
 */
#if PG_VERSION_NUM >= 170000
#define SBQ_OLDEST_CLOG_XID() (TransamVariables->oldestClogXid)
#else
#define SBQ_OLDEST_CLOG_XID() (ShmemVariableCache->oldestClogXid)
#endif

/* The dead rows pgstat counts for a table (the field was renamed in 16). */
#if PG_VERSION_NUM >= 160000
#define SBQ_TABENTRY_DEAD(e) ((e)->dead_tuples)
#else
#define SBQ_TABENTRY_DEAD(e) ((e)->n_dead_tuples)
#endif

/*
 * A database that an interrupted DROP DATABASE left invalid (datconnlimit
 * -2): nobody may connect to it. Back-patched into 15.4, 16.0 has it.
 */
#ifdef DATCONNLIMIT_INVALID_DB
#define sbq_database_is_invalid(form) database_is_invalid_form(form)
#else
#define sbq_database_is_invalid(form) false
#endif

/*
 * The range table of an executor state made by hand (send_direct.c): its
 * permissions are a list of their own from 16 on.
 */
#if PG_VERSION_NUM >= 160000
#include "parser/parse_relation.h"
#define SBQ_EXEC_INIT_RANGE_TABLE(estate, rte) \
	do { \
		List	   *perminfos_ = NIL; \
		addRTEPermissionInfo(&perminfos_, (rte)); \
		ExecInitRangeTable((estate), list_make1(rte), perminfos_); \
	} while (0)
#else
#define SBQ_EXEC_INIT_RANGE_TABLE(estate, rte) \
	ExecInitRangeTable((estate), list_make1(rte))
#endif

/*
 * The index entries of a row just stored through the table access method
 * (send_direct.c's batches): 14 took the ResultRelInfo as an argument, 16
 * added whether to update only summarizing indexes.
 */
#if PG_VERSION_NUM >= 160000
#define sbq_insert_index_tuples(rri, slot, estate) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, false, NULL, NIL, false)
#elif PG_VERSION_NUM >= 140000
#define sbq_insert_index_tuples(rri, slot, estate) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, false, NULL, NIL)
#else
#define sbq_insert_index_tuples(rri, slot, estate) \
	((estate)->es_result_relation_info = (rri), \
	 ExecInsertIndexTuples((slot), (estate), false, NULL, NIL))
#endif

/*
 * The same for an update of the columns cols (attribute numbers offset by
 * FirstLowInvalidHeapAttributeNumber, as the executor keeps them), which
 * tells index AMs and generated columns what changed (counts_direct.c).
 */
#if PG_VERSION_NUM >= 160000
#define SBQ_EXEC_INIT_RANGE_TABLE_UPDATE(estate, rte, cols) \
	do { \
		List	   *perminfos_ = NIL; \
		RTEPermissionInfo *perminfo_ = addRTEPermissionInfo(&perminfos_, (rte)); \
		perminfo_->updatedCols = (cols); \
		ExecInitRangeTable((estate), list_make1(rte), perminfos_); \
	} while (0)
#else
#define SBQ_EXEC_INIT_RANGE_TABLE_UPDATE(estate, rte, cols) \
	do { \
		(rte)->updatedCols = (cols); \
		ExecInitRangeTable((estate), list_make1(rte)); \
	} while (0)
#endif

/*
 * A predicate lock on a heap tuple read under snap, as an index scan takes
 * it (session_probe.c). PostgreSQL 14 locks it by its TID and inserter.
 */
#if PG_VERSION_NUM >= 140000
#define SBQ_PREDICATE_LOCK_TUPLE(rel, tuple, snap) \
	PredicateLockTID((rel), &(tuple)->t_self, (snap), HeapTupleHeaderGetXmin((tuple)->t_data))
#else
#define SBQ_PREDICATE_LOCK_TUPLE(rel, tuple, snap) PredicateLockTuple((rel), (tuple), (snap))
#endif

/*
 * Whether a heap tuple is dead to every transaction (its index entries may
 * be marked dead), judged by what SBQ_VISTEST_FOR gave for its relation.
 * PostgreSQL 14 judges it by a GlobalVisState.
 */
#if PG_VERSION_NUM >= 140000
#define SBQ_VISTEST_FOR(rel) GlobalVisTestFor(rel)
#define SBQ_TUPLE_SURELY_DEAD(tuple, vistest) HeapTupleIsSurelyDead((tuple), (vistest))
#else
#define SBQ_VISTEST_FOR(rel) NULL
#define SBQ_TUPLE_SURELY_DEAD(tuple, vistest) HeapTupleIsSurelyDead((tuple), RecentGlobalXmin)
#endif

/*
 * The status of the i-th backend (1-based) in this backend's copy of the
 * backends' status: PostgreSQL 17 renamed the function.
 */
#if PG_VERSION_NUM >= 170000
#define sbq_local_beentry(i) pgstat_get_local_beentry_by_index(i)
#else
#define sbq_local_beentry(i) pgstat_fetch_stat_local_beentry(i)
#endif

#endif							/* SBQ_COMPAT_H */
