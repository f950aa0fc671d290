/*-------------------------------------------------------------------------
 *
 * storage_core.c
 *	  The core under the storage files: the storage section, the statement
 *	  cache, the incarnation ("epoch") of the tables, the queue counters, and
 *	  small value helpers.
 *
 * The SQL-callable functions in api.c check their arguments and then call
 * the storage files (storage.h) between sbq_storage_begin() and
 * sbq_storage_end(). A section connects to SPI, locks sbq.queues in
 * AccessShareLock until the end of the transaction (so a DROP EXTENSION
 * that committed before is seen and one that comes later waits: see
 * sbq_storage_epoch_locked), tells lease.c which incarnation its leases
 * belong to, and pins the settings every statement runs under before the
 * first one runs (a plain send runs none: send_direct.c stores its rows).
 *
 * Statements go through SPI with plans prepared once per backend and kept
 * (SPI_keepplan), always generic (CURSOR_OPT_GENERIC_PLAN), so a call never
 * pays for planning. Every statement runs under a GUC nest level that pins
 * search_path to pg_catalog and turns off sequential, bitmap, hash and merge
 * plans: a plan made or remade while a queue table is empty and freshly
 * analyzed still walks the indexes, so a receive costs the same with a
 * thousand or a million messages queued. Joins back to sbq.messages also
 * carry "sequence_number = ANY(ARRAY(...))", so that a generic plan made on
 * an empty table can still not walk a whole index, whichever side of a join
 * it puts the table on. A statement marked by_key (rows found by an array of
 * sequence numbers) is planned seeing only the indexes led by
 * sequence_number; a query level that orders by a table's queue_id first (a
 * queue's head: the receive orders by the whole receive index key) sees only
 * the indexes led by queue_id, not the primary key, whose order the planner
 * would otherwise take for the same (plan_key.c).
 *
 * The library runs with the SQL of an older version between an upgrade of
 * the library and ALTER EXTENSION UPDATE; each statement is prepared for the
 * flavour of the installed SQL:
 *	0.1			no sbq.duplicate_ids: text within DUPS() is made a comment,
 *				and a duplicate_detection_window is refused as 0.1 refused
 *				it (sbq_duplicate_ids_installed);
 *	before 0.3	no lease functions: LEASE_SLOT replaced by "true", and
 *				receives lock in the message rows (sbq_leasing);
 *	before 0.4	dead letters in sbq.messages: a statement's old_sql, when it
 *				has one, and SUBQUEUE_TABLE left as sbq.messages;
 *	0.4			sbq.dead_letters holds the dead-letter sub-queue;
 *	0.5 on		sbq.rights: a storage section runs as the owner of the tables
 *				and the calls check the caller's queue rights (rights.c);
 *				before, both were left to the caller's table privileges;
 *	0.9 on		the retry back-off columns of sbq.queues (queues.c picks its
 *				statements by sbq_queue_retry_installed());
 *	0.11 on		the messages' transfer_hops: text within HOPS() is made a
 *				comment before.
 * A change to pg_proc or to the relation names makes the flavour open again;
 * a kept plan of another flavour is remade.
 *
 * Time: "now" is the wall clock read once per call (GetCurrentTimestamp), not
 * the transaction start, so a lock taken late in a long transaction still
 * lasts its full duration and a lock that has run out is seen to have run out.
 *
 * Owns: backend-local state only (kept plans, the cached epoch and SQL
 * flavour, whether a maintenance pass runs). Locks: the AccessShareLock on
 * sbq.queues named above; in a maintenance pass, the names of the entities
 * whose counts it stores, shared, only when free.
 *
 * Length: over 1,000 lines on purpose. Every statement runs through the
 * layer here (its kept plan, its flavour, its errors without its SQL), and
 * the counters' store with it: a count stored waits, as the statements do,
 * for the epoch and the flavour this file keeps.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/storage_core.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_class.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "common/int.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/plancache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "distributed.h"
#include "topics.h"
#include "lease.h"
#include "storage_core.h"

/* The flavours of the installed SQL (see the file header). */
#define SBQ_FLAVOUR_UNKNOWN		-1
#define SBQ_FLAVOUR_NO_DUPLICATES 0 /* 0.1: no sbq.duplicate_ids */
#define SBQ_FLAVOUR_NO_LEASES	1	/* 0.2: no lease functions */
#define SBQ_FLAVOUR_DLQ_INLINE	2	/* 0.3: dead letters in sbq.messages */
#define SBQ_FLAVOUR_DLQ_TABLE	3	/* 0.4: sbq.dead_letters */
#define SBQ_FLAVOUR_RIGHTS		4	/* 0.5: sbq.rights, calls run as the owner */
#define SBQ_FLAVOUR_SESSIONS	5	/* 0.7: sbq.sessions */
#define SBQ_FLAVOUR_SESSION_LOCKS 6	/* 0.8: sbq.session_until, locks in memory */
#define SBQ_FLAVOUR_RETRY		7	/* 0.9 on: a queue's retry back-off in sbq.queues */
#define SBQ_FLAVOUR_TOPICS		8	/* 0.10: sbq.topics, sbq.subscriptions, sbq.rules */
#define SBQ_FLAVOUR_HOPS		9	/* 0.11 on: transfer_hops of the messages */

/*
 * The flavour of the installed SQL, or SBQ_FLAVOUR_UNKNOWN when not known
 * (a change to pg_proc or to the names of relations makes it unknown again).
 */
static int	sbq_sql_flavour = SBQ_FLAVOUR_UNKNOWN;
static bool sbq_sql_callback = false;

/*
 * GUC nest level of the settings pinned for the current storage section, 0
 * when none are (outside a section, or before its first statement).
 */
static int	sbq_guc_nest_level = 0;

/*
 * The open storage section: the transaction and subtransaction it was opened
 * in. A section that an error ended keeps its marks until the next opens; the
 * local transaction id tells a stale one from another transaction.
 */
static bool sbq_section_open = false;
static LocalTransactionId sbq_section_lxid = InvalidLocalTransactionId;
static SubTransactionId sbq_section_subxid = InvalidSubTransactionId;

/* whether a storage section is open: in this transaction, not yet ended */
static inline bool
sbq_section_live(void)
{
	return sbq_section_open && SBQ_MY_LXID() == sbq_section_lxid;
}

/* the memory context current when the storage section was opened */
static MemoryContext sbq_caller_cxt = NULL;

/*
 * The caller of the current storage section, and the user and security
 * context to go back to when it ends (it runs as the owner of the tables
 * from 0.5 on); sbq_switched says it did switch.
 */
static Oid	sbq_caller_uid = InvalidOid;
static Oid	sbq_owner_uid = InvalidOid;	/* the tables' owner, from 0.5 on */
static Oid	sbq_saved_uid = InvalidOid;
static int	sbq_saved_sec_context = 0;
static bool sbq_switched = false;

/* the OID of sbq.queues as sbq_storage_epoch knows it, until it changes */
static Oid	sbq_epoch_relid = InvalidOid;

/*
 * Add to a queue's stored counters, in one row per backend (shard). Where the
 * tables are distributed, counts of an entity that is not in the group (no
 * key to place them by) are not stored: it was deleted, or made in a
 * prepared transaction whose counts were taken as committed at PREPARE (the
 * queue's slots for prepared transactions being full, src/qstate.c), which
 * sbq_store_counts keeps while one is left.
 */
static SbqStatement stmt_count = {"count", 9, {INT4OID, INT4OID, INT8OID, INT8OID, INT8OID,
		INT8OID, INT8OID, INT8OID, INT8OID},
	"INSERT INTO sbq.queue_counters AS qc (queue_id, shard, sent, received,"
	" completed, abandoned, deferred, dead_lettered, expired" EK(", entity_key") ")"
	" SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9"
	EK(", k.e FROM (SELECT " EK_OF_ID("$1") " AS e) k WHERE k.e IS NOT NULL")
	" ON CONFLICT (queue_id, shard" EK(", entity_key") ") DO UPDATE SET"
	" sent = qc.sent + excluded.sent, received = qc.received + excluded.received,"
	" completed = qc.completed + excluded.completed,"
	" abandoned = qc.abandoned + excluded.abandoned,"
	" deferred = qc.deferred + excluded.deferred,"
	" dead_lettered = qc.dead_lettered + excluded.dead_lettered,"
	" expired = qc.expired + excluded.expired"
};

static SbqStatement stmt_no_prepared = {"no prepared transactions", 0, {InvalidOid},
	"SELECT NOT EXISTS (SELECT 1 FROM pg_catalog.pg_prepared_xacts p"
	"                    WHERE p.database = pg_catalog.current_database())"
};

/* $1 entity ids: the name keys of those that are queues or subscriptions */
static SbqStatement stmt_queue_keys = {"name keys of queues", 1, {INT4ARRAYOID},
	"SELECT q.queue_id, q.name_key FROM sbq.queues q WHERE q.queue_id = ANY($1)"
};

/* $1 entity ids: the name keys of those that are topics */
static SbqStatement stmt_topic_keys = {"name keys of topics", 1, {INT4ARRAYOID},
	"SELECT t.topic_id, t.name_key FROM sbq.topics t WHERE t.topic_id = ANY($1)"
};

/*
 * A maintenance pass runs: the counts its calls add are only gathered in
 * shared memory (sbq_add_counts), and stored by a pass that can take their
 * entity's name lock (sbq_store_all_counts).
 */
static bool sbq_counts_in_pass = false;

/* The most name locks sbq_store_all_counts takes in a pass. */
#define SBQ_COUNT_NAME_LOCKS	512

/* ------------------------------------------------------------ the installed SQL */

/* sbq_updated_here's answer, and the transaction it is of */
static LocalTransactionId sbq_updated_lxid = InvalidLocalTransactionId;
static bool sbq_updated = false;

static void
sbq_sql_inval(Datum arg, int cacheid, uint32 hashvalue)
{
	sbq_sql_flavour = SBQ_FLAVOUR_UNKNOWN;
	sbq_updated_lxid = InvalidLocalTransactionId;
}

/*
 * sbq_updated_here
 *		Whether this transaction has created or updated sbqueue, not yet
 *		committed: other sessions still run the SQL of before, which may
 *		know nothing of locks kept in shared memory (0.2). Only a transaction
 *		with a transaction id can have; the answer is kept for the
 *		transaction, until the extension's objects change.
 */
static bool
sbq_updated_here(void)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;

	if (!TransactionIdIsValid(GetTopTransactionIdIfAny()))
		return false;
	if (sbq_updated_lxid == SBQ_MY_LXID())
		return sbq_updated;
	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber, F_NAMEEQ,
				CStringGetDatum("sbqueue"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	sbq_updated = HeapTupleIsValid(tup) &&
		TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetXmin(tup->t_data));
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	sbq_updated_lxid = SBQ_MY_LXID();
	return sbq_updated;
}

/* The flavour of the installed SQL: the objects its versions added. */
int
sbq_flavour(void)
{
	if (sbq_sql_flavour == SBQ_FLAVOUR_UNKNOWN)
	{
		Oid			argtypes[1] = {INT8OID};
		oidvector  *args = buildoidvector(argtypes, 1);
		Oid			nsp = get_namespace_oid("sbq", true);

		if (!sbq_sql_callback)
		{
			CacheRegisterSyscacheCallback(PROCOID, sbq_sql_inval, (Datum) 0);
			CacheRegisterSyscacheCallback(RELNAMENSP, sbq_sql_inval, (Datum) 0);
			sbq_sql_callback = true;
		}
		/* looked up without a check of the caller's USAGE on schema sbq */
		if (!OidIsValid(nsp) || !OidIsValid(get_relname_relid("duplicate_ids", nsp)))
			sbq_sql_flavour = SBQ_FLAVOUR_NO_DUPLICATES;
		else if (!SearchSysCacheExists3(PROCNAMEARGSNSP, CStringGetDatum("lease_slot"),
										PointerGetDatum(args), ObjectIdGetDatum(nsp)))
			sbq_sql_flavour = SBQ_FLAVOUR_NO_LEASES;
		else if (!OidIsValid(get_relname_relid("dead_letters", nsp)))
			sbq_sql_flavour = SBQ_FLAVOUR_DLQ_INLINE;
		else if (!OidIsValid(get_relname_relid("rights", nsp)))
			sbq_sql_flavour = SBQ_FLAVOUR_DLQ_TABLE;
		else if (!OidIsValid(get_relname_relid("sessions", nsp)))
			sbq_sql_flavour = SBQ_FLAVOUR_RIGHTS;
		else if (!SearchSysCacheExists3(PROCNAMEARGSNSP, CStringGetDatum("session_until"),
										PointerGetDatum(args), ObjectIdGetDatum(nsp)))
			sbq_sql_flavour = SBQ_FLAVOUR_SESSIONS;
		/* the update that adds the column makes functions too: this is looked at again */
		else if (get_attnum(get_relname_relid("queues", nsp), "retry_delay") == InvalidAttrNumber)
			sbq_sql_flavour = SBQ_FLAVOUR_SESSION_LOCKS;
		else if (!OidIsValid(get_relname_relid("topics", nsp)))
			sbq_sql_flavour = SBQ_FLAVOUR_RETRY;
		/* adding a column changes the row of the table in pg_class: looked at again */
		else if (get_attnum(get_relname_relid("messages", nsp), "transfer_hops") == InvalidAttrNumber)
			sbq_sql_flavour = SBQ_FLAVOUR_TOPICS;
		else
			sbq_sql_flavour = SBQ_FLAVOUR_HOPS;
		sbq_qstate_no_new_entries = sbq_sql_flavour == SBQ_FLAVOUR_NO_DUPLICATES;
	}
	return sbq_sql_flavour;
}

/* Whether the installed SQL has the lease functions (0.3 and later). */
static bool
sbq_sql_has_leases(void)
{
	return sbq_flavour() > SBQ_FLAVOUR_NO_LEASES;
}

/*
 * Whether the installed SQL has sbq.duplicate_ids (0.2 on), the history that
 * duplicate detection keeps. 0.1 had none and refused a
 * duplicate_detection_window (api_queues.c, send.c).
 */
bool
sbq_duplicate_ids_installed(void)
{
	return sbq_flavour() > SBQ_FLAVOUR_NO_DUPLICATES;
}

/* Whether the installed SQL keeps dead letters in sbq.dead_letters (0.4 on). */
bool
sbq_dead_letter_table(void)
{
	return sbq_flavour() >= SBQ_FLAVOUR_DLQ_TABLE;
}

/*
 * Whether the installed SQL has queue rights (0.5 on): the storage section
 * then runs as the owner of the tables and the calls check the caller's
 * rights; older SQL left both to the caller's table privileges.
 */
bool
sbq_rights_enforced(void)
{
	return sbq_flavour() >= SBQ_FLAVOUR_RIGHTS;
}

/* Whether sbq.queues has the retry back-off of abandoned messages (0.9 on). */
bool
sbq_queue_retry_installed(void)
{
	return sbq_flavour() >= SBQ_FLAVOUR_RETRY;
}

/* Whether the installed SQL has topics (sbq.topics, 0.10 on). */
bool
sbq_topics_installed(void)
{
	return sbq_flavour() >= SBQ_FLAVOUR_TOPICS;
}

/*
 * Whether the messages count the times they were forwarded (transfer_hops,
 * 0.11 on), which forwarding dead letters needs.
 */
bool
sbq_hops_installed(void)
{
	return sbq_flavour() >= SBQ_FLAVOUR_HOPS;
}

/* Whether the installed SQL has sessions (sbq.sessions, 0.7 on). */
bool
sbq_sessions_installed(void)
{
	return sbq_flavour() >= SBQ_FLAVOUR_SESSIONS;
}

/*
 * Whether session locks live in shared memory (session_mem.c): with the
 * preload, on a primary, from 0.8 on. The same for every backend of a
 * server (sbqueue.memory_locks is not asked), so that two ways of holding a
 * session never meet, except locks stored in rows before a restart or an
 * update, which session.c ends or serves.
 */
bool
sbq_session_locks_in_memory(void)
{
	return sbq_lease_available() && !RecoveryInProgress() &&
		sbq_flavour() >= SBQ_FLAVOUR_SESSION_LOCKS;
}

/*
 * Whether receives in this session take leases (lease.c), as the SQL allows.
 * Not in a transaction that updates the extension: until it commits, others
 * may run SQL without leases, which sees only locks stored in rows (a
 * receive there and one of such a session took the same message).
 */
bool
sbq_leasing(void)
{
	return sbq_lease_enabled() && sbq_sql_has_leases() && !sbq_updated_here();
}

/*
 * sbq_require_lock_privilege
 *		Before 0.5 the SQL had no rights of its own: its calls ran with the
 *		caller's privileges, and a receive or a renew wrote the message's row,
 *		so it needed UPDATE on sbq.messages (on sbq.dead_letters for a dead
 *		letter, from 0.4 on). A lock kept in shared memory writes no row:
 *		under that SQL it asks for the privilege itself, or a role that may
 *		only read the tables could lock, hold and dead-letter every message.
 */
void
sbq_require_lock_privilege(int16 subqueue)
{
	const char *table;
	Oid			nsp;
	Oid			rel;
	AclResult	r;

	if (sbq_rights_enforced())
		return;
	table = subqueue == SBQ_SUBQUEUE_DLQ && sbq_flavour() >= SBQ_FLAVOUR_DLQ_TABLE ?
		"dead_letters" : "messages";
	nsp = get_namespace_oid("sbq", true);
	rel = OidIsValid(nsp) ? get_relname_relid(table, nsp) : InvalidOid;
	if (!OidIsValid(rel))
		return;
	r = pg_class_aclcheck(rel, GetUserId(), ACL_UPDATE);
	if (r != ACLCHECK_OK)
		aclcheck_error(r, OBJECT_TABLE, table);
}

/*
 * Whether a call may end the expired leases of its queue before a statement
 * that skips messages under a lease (lease_sweep.c): in a session that takes
 * leases, and in one that does not (sbqueue.memory_locks off) outside a
 * transaction block. Inside one, that session's transaction stays free of
 * lease changes, so that it can be prepared (PREPARE TRANSACTION refuses
 * those); a transaction outside a block commits or aborts, and cannot be.
 */
bool
sbq_may_end_leases(void)
{
	if (!sbq_lease_available() || RecoveryInProgress() || !sbq_sql_has_leases())
		return false;
	return sbq_memory_locks || !IsTransactionBlock();
}

/* ------------------------------------------------------------ the epoch */

/* The OID of the table sbq.queues, InvalidOid if there is none. */
Oid
sbq_queues_table_oid(void)
{
	Oid			nsp = get_namespace_oid("sbq", true);

	return OidIsValid(nsp) ? get_relname_relid("queues", nsp) : InvalidOid;
}

/*
 * The OID of the queues the current call works on: sbq.queues, or with the
 * tables distributed the shard of it in the call's group (InvalidOid
 * outside a group).
 */
Oid
sbq_queues_oid(void)
{
	if (sbq_dist_active())
		return sbq_dist_in_group() ? sbq_dist_relid("queues") : InvalidOid;
	return sbq_queues_table_oid();
}

/*
 * The OID of the table of a sub-queue (SUBQUEUE_TABLE): sbq.messages, or
 * sbq.dead_letters for the dead-letter sub-queue from 0.4 on. Looked up each
 * time: the extension may be recreated.
 */
Oid
sbq_subqueue_table_oid(int16 subqueue)
{
	const char *name = subqueue == SBQ_SUBQUEUE_DLQ && sbq_dead_letter_table() ?
		"dead_letters" : "messages";
	Oid			nsp = get_namespace_oid("sbq", false);
	Oid			relid = sbq_dist_active() ? sbq_dist_relid(name) : get_relname_relid(name, nsp);

	if (!OidIsValid(relid))
		elog(ERROR, "table sbq.%s does not exist", name);
	return relid;
}

static void
sbq_epoch_inval(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == sbq_epoch_relid)
		sbq_epoch_relid = InvalidOid;
}

/*
 * sbq_storage_epoch
 *		The "epoch" of the queues for shared memory (qstate.c, lease.c): the
 *		OID of sbq.queues, which a DROP and CREATE EXTENSION changes. Kept
 *		until a relcache invalidation of that table (its drop sends one).
 */
Oid
sbq_storage_epoch(void)
{
	/* distributed: the shard of the call's group, which each placement renews */
	if (sbq_dist_active())
		return sbq_queues_oid();
	if (!OidIsValid(sbq_epoch_relid))
	{
		sbq_on_relcache_inval(sbq_epoch_inval);
		sbq_epoch_relid = sbq_queues_oid();
	}
	return sbq_epoch_relid;
}

/*
 * sbq_storage_epoch_locked
 *		The epoch, with sbq.queues locked (AccessShareLock, until the end of
 *		the transaction): the lock takes in the invalidations that arrived,
 *		so a DROP EXTENSION that committed before is seen, and one that comes
 *		later waits for this transaction. The leases a storage section works
 *		on are then always those of the tables its statements see.
 */
static Oid
sbq_storage_epoch_locked(void)
{
	for (;;)
	{
		Oid			epoch = sbq_storage_epoch();

		if (!OidIsValid(epoch))
			return InvalidOid;
		LockRelationOid(epoch, AccessShareLock);
		if (sbq_storage_epoch() == epoch)
			return epoch;
		/* dropped meanwhile: its successor, if any */
		UnlockRelationOid(epoch, AccessShareLock);
	}
}

/* ------------------------------------------------------------ the section */


/*
 * sbq_storage_pin_settings
 *		Pin the settings every statement of the storage files runs under
 *		(search_path, and plans that use the indexes), until the storage
 *		section ends; called before a section's first statement. A call
 *		that runs none (a plain send stores its row without SQL,
 *		send_direct.c) does not pay for setting and restoring them. They
 *		must be pinned at the section's own (sub)transaction level: the end
 *		of a subtransaction opened in the section would restore them.
 */
void
sbq_storage_pin_settings(void)
{
	static const char *const off[] = {
		"enable_seqscan", "enable_bitmapscan", "enable_hashjoin", "enable_mergejoin", "jit"
	};
	int			i;

	if (!sbq_section_open || sbq_guc_nest_level != 0 ||
		SBQ_MY_LXID() != sbq_section_lxid)
		return;
	if (GetCurrentSubTransactionId() != sbq_section_subxid)
		elog(ERROR, "sbqueue settings pinned in a subtransaction of their storage section");
	sbq_guc_nest_level = NewGUCNestLevel();
	sbq_restrict_search_path();
	for (i = 0; i < (int) lengthof(off); i++)
		(void) set_config_option(off[i], "off", PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
}

/*
 * sbq_storage_refuse_nested
 *		One call at a time: a trigger, constraint or default on the tables
 *		runs inside a call's storage section as their owner, and a call of its
 *		own would take the owner for its caller and overwrite what the outer
 *		section restores (its identity, settings, shard group). Called before
 *		a call changes any of them.
 */
void
sbq_storage_refuse_nested(void)
{
	if (sbq_section_live())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("an sbqueue function cannot be called while another sbqueue call is running"),
				 errdetail("A statement of the running call, such as a trigger or constraint on sbqueue's tables, called it.")));
}

/*
 * sbq_storage_begin
 *		Open a storage section: connect to SPI; the settings its statements
 *		run under are pinned before the first (sbq_storage_pin_settings).
 *		Errors unwind both with the (sub)transaction; the normal exit is
 *		sbq_storage_end().
 */
void
sbq_storage_begin(void)
{
	Oid			epoch;

	sbq_storage_refuse_nested();
	sbq_caller_cxt = CurrentMemoryContext;
	sbq_forward_reset();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	epoch = sbq_storage_epoch_locked();
	sbq_lease_enter(epoch);
	(void) sbq_flavour();

	/*
	 * From 0.5 on the statements run as the owner of the tables, whatever
	 * the caller may do on them (nothing, normally); the calls check the
	 * caller's rights on the queue instead (rights.c). As for SECURITY
	 * DEFINER, SET ROLE is refused meanwhile, and an error goes back to the
	 * caller's user with the (sub)transaction.
	 */
	GetUserIdAndSecContext(&sbq_saved_uid, &sbq_saved_sec_context);
	sbq_caller_uid = sbq_saved_uid;
	sbq_switched = false;
	sbq_owner_uid = InvalidOid;
	if (OidIsValid(epoch) && sbq_rights_enforced())
	{
		sbq_owner_uid = sbq_rel_owner(epoch);
		if (sbq_owner_uid != sbq_saved_uid)
		{
			SetUserIdAndSecContext(sbq_owner_uid,
								   sbq_saved_sec_context | SECURITY_LOCAL_USERID_CHANGE);
			sbq_switched = true;
		}
	}
	sbq_guc_nest_level = 0;
	sbq_section_open = true;
	sbq_section_lxid = SBQ_MY_LXID();
	sbq_section_subxid = GetCurrentSubTransactionId();
	if (OidIsValid(epoch) && sbq_dist_active())
		sbq_sequence_floor(epoch);
}

/*
 * sbq_storage_subxact_aborted
 *		A subtransaction subid aborts: whether the storage section is over
 *		(none was open, or it was opened in subid or in a subtransaction that
 *		subid contains). A subtransaction begun inside the section (a
 *		forward, a trigger's exception block) leaves it open; the abort has
 *		restored the user and settings of the section's own start otherwise.
 */
bool
sbq_storage_subxact_aborted(SubTransactionId subid)
{
	if (!sbq_section_live())
		return true;
	if (subid > sbq_section_subxid)
		return false;
	sbq_section_open = false;
	sbq_guc_nest_level = 0;
	sbq_switched = false;
	return true;
}

/*
 * sbq_storage_caller_context
 *		The memory context of the caller of sbq_storage_begin(): what is made
 *		there outlives the storage section.
 */
MemoryContext
sbq_storage_caller_context(void)
{
	return sbq_caller_cxt;
}

/*
 * sbq_storage_end
 *		Close the section opened by sbq_storage_begin().
 */
void
sbq_storage_end(void)
{
	if (sbq_guc_nest_level != 0)
		AtEOXact_GUC(true, sbq_guc_nest_level);
	sbq_guc_nest_level = 0;
	sbq_section_open = false;
	sbq_lease_leave();
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	if (sbq_switched)
		SetUserIdAndSecContext(sbq_saved_uid, sbq_saved_sec_context);
	sbq_switched = false;
}

/*
 * sbq_storage_caller
 *		The role that called the current storage section (the current user
 *		when it was opened), whose rights the calls check.
 */
Oid
sbq_storage_caller(void)
{
	return sbq_caller_uid;
}

/*
 * sbq_storage_owner
 *		The owner of the tables, whom the current storage section runs as (from
 *		0.5 on; InvalidOid before): whoever has its privileges has every right.
 */
Oid
sbq_storage_owner(void)
{
	return sbq_owner_uid;
}

/* The owner of a relation. */
Oid
sbq_rel_owner(Oid relid)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);
	return owner;
}

/* ------------------------------------------------------------ statements */

/* sql with every "from" replaced by "to" */
static const char *
sbq_sql_replace(const char *sql, const char *from, const char *to)
{
	StringInfoData buf;
	const char *p = sql;
	const char *hit;

	initStringInfo(&buf);
	while ((hit = strstr(p, from)) != NULL)
	{
		appendBinaryStringInfo(&buf, p, hit - p);
		appendStringInfoString(&buf, to);
		p = hit + strlen(from);
	}
	appendStringInfoString(&buf, p);
	return buf.data;
}

/* Free the kept plans of a statement. */
static void
sbq_free_plans(SbqStatement *st)
{
	int			i;

	for (i = 0; i < (int) lengthof(st->plan); i++)
		if (st->plan[i] != NULL)
		{
			SPI_freeplan(st->plan[i]);
			st->plan[i] = NULL;
		}
}

/* The SQL of a statement for a sub-queue (which: 1 for the dead letters) and flavour. */
const char *
sbq_statement_sql(SbqStatement *st, int which, int flavour)
{
	const char *sql = st->sql;

	if (flavour < SBQ_FLAVOUR_DLQ_TABLE && st->old_sql != NULL)
		sql = st->old_sql;
	/* older SQL has no lease functions, and no leases to skip */
	if (flavour <= SBQ_FLAVOUR_NO_LEASES)
		sql = sbq_sql_replace(sql, LEASE_SLOT, "true");
	/* 0.1 has no sbq.duplicate_ids: what DUPS() wraps becomes a comment */
	if (flavour == SBQ_FLAVOUR_NO_DUPLICATES)
		sql = sbq_sql_replace(sbq_sql_replace(sql, DUPS_OPEN, "/*"), DUPS_CLOSE, "*/");
	/* older SQL has no transfer_hops: what HOPS() wraps becomes a comment */
	if (flavour < SBQ_FLAVOUR_HOPS)
		sql = sbq_sql_replace(sbq_sql_replace(sql, HOPS_OPEN, "/*"), HOPS_CLOSE, "*/");
	/* the entity keys of distributed tables */
	if (sbq_dist_active())
		sql = sbq_sql_replace(sbq_sql_replace(sql, EK_OPEN, ""), EK_CLOSE, "");
	else
		sql = sbq_sql_replace(sbq_sql_replace(sql, EK_OPEN, "/*"), EK_CLOSE, "*/");
	if (which == 1 && flavour >= SBQ_FLAVOUR_DLQ_TABLE)
	{
		if (strstr(sql, SUBQUEUE_TABLE) == NULL)
			elog(ERROR, "sbqueue statement \"%s\" has no dead-letter form", st->name);
		sql = sbq_sql_replace(sql, SUBQUEUE_TABLE, "sbq.dead_letters");
	}
	return sql;
}

/* Prepare and keep a statement's SQL. */
SPIPlanPtr
sbq_prepare_kept(SbqStatement *st, const char *sql)
{
	SPIPlanPtr	plan = SPI_prepare_cursor(sql, st->nargs, st->argtypes, CURSOR_OPT_GENERIC_PLAN);

	if (plan == NULL)
		elog(ERROR, "could not prepare sbqueue statement \"%s\": %s",
			 st->name, SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "could not keep sbqueue statement \"%s\"", st->name);
	return plan;
}

/*
 * sbq_plan
 *		The kept plan of a statement for a sub-queue, prepared on first use in
 *		this backend (and again when the installed SQL changed flavour since).
 */
static SPIPlanPtr
sbq_plan(SbqStatement *st, int16 subqueue)
{
	int			flavour = sbq_flavour();
	int			which = subqueue == SBQ_SUBQUEUE_DLQ ? 1 : 0;

	if (sbq_dist_active())
		return sbq_group_plan(st, which, flavour);
	if (st->plan_flavour != flavour)
	{
		sbq_free_plans(st);
		st->plan_flavour = flavour;
	}
	if (st->plan[which] == NULL)
		st->plan[which] = sbq_prepare_kept(st, sbq_statement_sql(st, which, flavour));
	return st->plan[which];
}

static void
sbq_nulls(const SbqStatement *st, const bool *isnull, char *nulls)
{
	int			i;

	for (i = 0; i < st->nargs; i++)
		nulls[i] = (isnull != NULL && isnull[i]) ? 'n' : ' ';
}

/*
 * sbq_hide_statement
 *		An error of a statement, rid of the statement's text: its internal
 *		query and position, and the context line SPI added with its SQL
 *		(which names sbqueue's tables and how it uses them), replaced by the
 *		statement's name. That line is the first "SQL statement" line (the
 *		context runs from the innermost out; the statements' SQL is on one
 *		line); the lines before it (inside the statement) and after it (the
 *		caller's, its own SQL statements included) stay.
 */
static void
sbq_hide_statement(ErrorData *edata, const SbqStatement *st)
{
	StringInfoData buf;
	const char *ours;
	const char *end;

	edata->internalquery = NULL;
	edata->internalpos = 0;
	initStringInfo(&buf);
	ours = edata->context != NULL ? strstr(edata->context, "SQL statement \"") : NULL;
	if (ours != NULL && (ours == edata->context || ours[-1] == '\n'))
	{
		appendBinaryStringInfo(&buf, edata->context, ours - edata->context);
		appendStringInfo(&buf, "sbqueue statement \"%s\"", st->name);
		end = strchr(ours, '\n');
		if (end != NULL)
			appendStringInfoString(&buf, end);
	}
	else
	{
		appendStringInfo(&buf, "sbqueue statement \"%s\"", st->name);
		if (edata->context != NULL)
			appendStringInfo(&buf, "\n%s", edata->context);
	}
	edata->context = buf.data;
}

/*
 * sbq_run
 *		Prepare (on first use) and run a statement on the table of a
 *		sub-queue, with the snapshot given or (InvalidSnapshot) SPI's own;
 *		an error of either step names the statement but does not show its
 *		SQL. Returns SPI's result code.
 */
static int
sbq_run(SbqStatement *st, int16 subqueue, Datum *values, const char *nulls,
		Snapshot snap, bool read_only)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			rc = 0;
	const char *outer_sql;
	SbqPlanMode outer = sbq_plan_announced(&outer_sql);

	sbq_storage_pin_settings();
	PG_TRY();
	{
		SPIPlanPtr	plan = sbq_plan(st, subqueue);
		CachedPlanSource *source = linitial(SPI_plan_get_plan_sources(plan));

		/* a plan made or remade now sees the indexes it means (plan_key.c) */
		sbq_plan_announce(st->by_key ? SBQ_PLAN_BY_KEY : SBQ_PLAN_BY_ORDER,
						  source->query_string);
		if (snap != InvalidSnapshot)
			rc = SPI_execute_snapshot(plan, values, nulls, snap, InvalidSnapshot,
									  read_only, false, 0);
		else
			rc = SPI_execute_plan(plan, values, nulls, false, 0);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		sbq_plan_announce(outer, outer_sql);
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		sbq_hide_statement(edata, st);
		ReThrowError(edata);
	}
	PG_END_TRY();
	sbq_plan_announce(outer, outer_sql);	/* also when SPI failed without an error */
	if (rc < 0)
		elog(ERROR, "sbqueue statement \"%s\" failed: %s", st->name,
			 SPI_result_code_string(rc));
	return rc;
}

/*
 * sbq_exec_in
 *		Run a statement on the table of a sub-queue (SUBQUEUE_TABLE);
 *		isnull[i] says argument i is NULL (isnull may be NULL: none is).
 *		Returns the number of rows processed. Any failure is an error, which
 *		names the statement but does not show its SQL.
 */
uint64
sbq_exec_in(SbqStatement *st, int16 subqueue, Datum *values, const bool *isnull)
{
	char		nulls[SBQ_MAX_STATEMENT_ARGS];

	sbq_nulls(st, isnull, nulls);
	(void) sbq_run(st, subqueue, values, nulls, InvalidSnapshot, false);
	return SPI_processed;
}

/* sbq_exec_in for statements of the queue itself (or of no sub-queue) */
uint64
sbq_exec(SbqStatement *st, Datum *values, const bool *isnull)
{
	return sbq_exec_in(st, SBQ_SUBQUEUE_MAIN, values, isnull);
}

/*
 * sbq_exec_fresh
 *		Run a read-only statement (no NULL arguments) with a snapshot taken
 *		now, whatever the transaction's isolation level.
 */
uint64
sbq_exec_fresh(SbqStatement *st, Datum *values)
{
	Snapshot	snap = RegisterSnapshot(GetLatestSnapshot());

	(void) sbq_run(st, SBQ_SUBQUEUE_MAIN, values, NULL, snap, true);
	UnregisterSnapshot(snap);
	return SPI_processed;
}

/*
 * sbq_exec_latest
 *		sbq_exec for a statement that must change what is there now, also
 *		under a transaction snapshot (REPEATABLE READ, SERIALIZABLE), which
 *		may not show rows committed since it was taken: the rights and
 *		messages of a queue being deleted, the rights a revoke removes. Under
 *		READ COMMITTED every statement's snapshot is taken then anyway.
 */
uint64
sbq_exec_latest(SbqStatement *st, Datum *values, const bool *isnull)
{
	char		nulls[SBQ_MAX_STATEMENT_ARGS];
	Snapshot	snap;

	if (!IsolationUsesXactSnapshot())
		return sbq_exec(st, values, isnull);
	sbq_nulls(st, isnull, nulls);
	snap = RegisterSnapshot(GetLatestSnapshot());
	(void) sbq_run(st, SBQ_SUBQUEUE_MAIN, values, nulls, snap, false);
	UnregisterSnapshot(snap);
	return SPI_processed;
}

/* Column col (from 1) of row row of the current SPI result. */
Datum
sbq_col(uint64 row, int col, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col, isnull);
}

/*
 * sbq_first_missing
 *		The first of seqs (int8 datums) that is not among the first n rows of
 *		the current SPI result, in int8 column col; 0 when all are.
 */
int64
sbq_first_missing(const Datum *seqs, int nseqs, uint64 n, int col)
{
	int			i;

	for (i = 0; i < nseqs; i++)
	{
		uint64		row;
		bool		found = false;

		for (row = 0; row < n && !found; row++)
		{
			bool		isnull;

			found = DatumGetInt64(sbq_col(row, col, &isnull)) == DatumGetInt64(seqs[i]);
		}
		if (!found)
			return DatumGetInt64(seqs[i]);
	}
	return 0;
}

/* The highest value of an int8 column of the current SPI result (0 if none). */
int64
sbq_max_col(int col)
{
	int64		max = 0;
	uint64		row;

	for (row = 0; row < SPI_processed; row++)
	{
		bool		isnull;
		int64		v = DatumGetInt64(sbq_col(row, col, &isnull));

		if (!isnull && v > max)
			max = v;
	}
	return max;
}

/* ------------------------------------------------------------ counters */

/*
 * sbq_store_counts
 *		Add counts to a queue's stored counters, in this backend's own row.
 */
static void
sbq_store_counts(int32 queue_id, const SbqCounts *c)
{
	Datum		values[2 + SBQ_NUM_COUNTERS];
	int			i;

	/* the row is there (nearly always): updated without the statement */
	if (sbq_counts_direct(get_rel_namespace(sbq_storage_epoch()), queue_id,
						  SBQ_MY_PROC_NUMBER(), c))
		return;
	values[0] = Int32GetDatum(queue_id);
	values[1] = Int32GetDatum(SBQ_MY_PROC_NUMBER());
	/* SbqCounts holds its counters in the statement's order (qstate.h) */
	for (i = 0; i < SBQ_NUM_COUNTERS; i++)
		values[2 + i] = Int64GetDatum(((const int64 *) c)[i]);
	/*
	 * The entity as it is now, also under a transaction snapshot. Counts the
	 * statement drops (no entity) come back for a later pass while this
	 * database has a prepared transaction: it may be the one that makes the
	 * entity, its counts taken as committed at PREPARE.
	 */
	if (sbq_exec_latest(&stmt_count, values, NULL) == 0 && !sbq_no_prepared())
		(void) sbq_qstate_count(sbq_storage_epoch(), queue_id, c);
}

/* Whether this database has no prepared transaction now. */
bool
sbq_no_prepared(void)
{
	bool		isnull;

	(void) sbq_exec(&stmt_no_prepared, NULL, NULL);
	return DatumGetBool(sbq_col(0, 1, &isnull));
}

/*
 * sbq_add_counts
 *		Add what a call did to its queue's counters: gathered in shared memory
 *		when there is room (qstate.c), and what has gathered there for a
 *		second or more is stored now, in this transaction; else stored now.
 */
void
sbq_add_counts(int32 queue_id, const SbqCounts *c)
{
	Oid			epoch = sbq_storage_epoch();
	SbqCounts	old;

	if (!sbq_qstate_count(epoch, queue_id, c))
	{
		/*
		 * No room in shared memory: stored now, by a pass only under the
		 * entity's name taken at once (else it is being deleted, and its
		 * counts go with it).
		 */
		if (sbq_counts_in_pass)
		{
			char	   *key;

			sbq_entity_name_keys(&queue_id, 1, &key);
			if (key == NULL || !sbq_lock_queue_name_if(key, AccessShareLock, true))
				return;
		}
		sbq_store_counts(queue_id, c);
	}
	else if (!sbq_counts_in_pass && sbq_qstate_take(epoch, queue_id, &old, true))
		sbq_store_counts(queue_id, &old);
}

/* A maintenance pass begins (true) or ends (false): see sbq_counts_in_pass. */
void
sbq_counts_pass(bool in_pass)
{
	sbq_counts_in_pass = in_pass;
}

/* An entity id and its place in the caller's list, for sbq_entity_name_keys. */
typedef struct SbqIdPlace
{
	int32		id;
	int			place;
} SbqIdPlace;

static int
sbq_id_place_cmp(const void *a, const void *b)
{
	int32		x = ((const SbqIdPlace *) a)->id;
	int32		y = ((const SbqIdPlace *) b)->id;

	return x < y ? -1 : (x > y ? 1 : 0);
}

/*
 * The name keys of the entities ids[0 .. n-1] (distinct) into keys[] (NULL:
 * none, the entity is gone or not committed yet, read with a fresh
 * snapshot), a subscription's its topic's: the name a delete of the entity
 * locks. For maintenance: its store of counts, and its look for entities
 * gone (maintain.c).
 */
void
sbq_entity_name_keys(const int32 *ids, int n, char **keys)
{
	Datum		arg = sbq_int4_array(ids, n);
	SbqIdPlace *sorted = palloc(sizeof(SbqIdPlace) * Max(n, 1));
	int			pass;
	int			i;

	memset(keys, 0, sizeof(char *) * n);
	for (i = 0; i < n; i++)
	{
		sorted[i].id = ids[i];
		sorted[i].place = i;
	}
	qsort(sorted, n, sizeof(SbqIdPlace), sbq_id_place_cmp);
	for (pass = 0; pass < 2; pass++)
	{
		uint64		rows;
		uint64		r;

		if (pass == 1 && !sbq_topics_installed())
			break;
		rows = sbq_exec_latest(pass == 0 ? &stmt_queue_keys : &stmt_topic_keys, &arg, NULL);
		for (r = 0; r < rows; r++)
		{
			bool		isnull;
			SbqIdPlace want;
			SbqIdPlace *found;
			char	   *key = TextDatumGetCString(sbq_col(r, 2, &isnull));

			want.id = DatumGetInt32(sbq_col(r, 1, &isnull));
			(void) sbq_key_to_lock_key(key);
			found = bsearch(&want, sorted, n, sizeof(SbqIdPlace), sbq_id_place_cmp);
			if (found != NULL)
				keys[found->place] = key;
		}
	}
}

/*
 * Store the counts gathered in shared memory for this database's entities,
 * for a maintenance pass. Each entity's name is locked first, as a send
 * locks it, and not waited for: a delete in progress holds it, and deletes
 * the entity's rows of counters; a pass that stored into those rows, and
 * then waited for another row the delete holds, deadlocked with it. The
 * counts of an entity whose name is held stay for a later pass, and so do
 * those past the pass's bound of name locks; the next pass of this backend
 * starts where the bound stopped this one. An entry with nothing for a take
 * takes no name. One with only moves or a prepared transaction's counts to
 * finish (which may give counts back) takes its name under a bound of its
 * own, so that finishing the moves of the last pass's stores does not use
 * up the bound of the counts gathered since.
 */
void
sbq_store_all_counts(void)
{
	static int	start = 0;
	Oid			epoch = sbq_storage_epoch();
	int32	   *ids = palloc(sizeof(int32) * sbq_qstate_max);
	char	  **keys;
	int			n = sbq_qstate_queues(epoch, ids, sbq_qstate_max, true);
	int			locks = 0;
	int			finishing = 0;
	int			k;

	if (n == 0)
		return;
	keys = palloc(sizeof(char *) * n);
	sbq_entity_name_keys(ids, n, keys);
	if (start >= n)
		start = 0;
	for (k = 0; k < n; k++)
	{
		int			i = (start + k) % n;
		bool		pending;
		SbqCounts	c;

		CHECK_FOR_INTERRUPTS();
		if (keys[i] != NULL)
		{
			if (!sbq_qstate_busy(epoch, ids[i], &pending))
				continue;
			if (pending && locks >= SBQ_COUNT_NAME_LOCKS)
			{
				start = i;
				break;
			}
			if ((!pending && finishing >= SBQ_COUNT_NAME_LOCKS) ||
				!sbq_lock_queue_name_if(keys[i], AccessShareLock, true))
				continue;
			if (pending)
				locks++;
			else
				finishing++;
		}
		if (sbq_qstate_take(epoch, ids[i], &c, false))
			sbq_store_counts(ids[i], &c);
	}
}

/* ------------------------------------------------------------ values */

/*
 * sbq_spi_strdup
 *		A text datum of an SPI result as a C string in the caller's context
 *		(the one current at sbq_storage_begin), so it outlives SPI_finish.
 */
char *
sbq_spi_strdup(Datum d, bool isnull)
{
	char	   *s;
	char	   *copy;

	if (isnull)
		return NULL;
	s = TextDatumGetCString(d);
	copy = SPI_palloc(strlen(s) + 1);
	strcpy(copy, s);
	return copy;
}
