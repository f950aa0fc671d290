/*-------------------------------------------------------------------------
 *
 * rights.c
 *	  Rights on queues: what sbq_grant and sbq_revoke store, the check every
 *	  call makes against them, and the dependencies that keep a role with
 *	  rights from being dropped.
 *
 * A right is held by a role (or PUBLIC, role 0) on a queue and covers its
 * dead-letter sub-queue: send (send, cancel a scheduled message), listen
 * (receive, peek, settle, receive deferred messages) and manage (update,
 * purge, delete, resubmit, grant and revoke), which implies the other two.
 * sbq.rights keeps one row per queue and role with the rights as bits. A
 * role has a right when it has the privileges of a role that holds it (as
 * for table privileges), when PUBLIC holds it, or when it has the
 * privileges of the owner of the tables (superusers have every role's).
 *
 * The calls run their statements as the owner of the tables (storage_core.c
 * switches the user for the storage section) and check the caller's rights
 * here, once the queue is found and before any work on it. The rights of a
 * queue are read with it and kept in the queue cache (queues.c); a change
 * invalidates that cache in every backend, as a change of the queue does.
 *
 * Dropping a role that holds rights is refused, as PostgreSQL refuses to
 * drop a role that holds privileges: every role named in sbq.rights has a
 * privilege dependency (pg_shdepend) of the view sbq.queue_rights on it, so
 * DROP ROLE reports "privileges for view sbq.queue_rights" in this database. DROP
 * OWNED leaves the rights alone; sbq_revoke removes them, and with the last
 * one the dependency. Each change brings the dependency of the roles it
 * touches in line with the table, so after a restore a role's comes back
 * with the first grant or revoke of its rights.
 *
 * Owns: nothing beyond its statements. Locks: the row locks of its
 * statements, and the lock on each role that updateAclDependencies takes.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/rights.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/dependency.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_shdepend.h"
#include "catalog/pg_type.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "distributed.h"
#include "storage_core.h"
#include "topics.h"

static SbqStatement stmt_rights_of_queue = {"rights of a queue", 1, {INT4OID},
	"SELECT role::oid, rights FROM sbq.rights WHERE queue_id = $1 ORDER BY role"
};

/* 0.10 on: a subscription's, and manage on it for those who manage its topic */
static SbqStatement stmt_rights_of_queue_topics = {"rights of a queue", 1, {INT4OID},
	"SELECT role::oid, rights FROM sbq.rights WHERE queue_id = $1"
	" UNION ALL"
	" SELECT r.role::oid, 4::smallint FROM sbq.subscriptions s"
	"   JOIN sbq.rights r ON r.queue_id = s.topic_id"
	"  WHERE s.queue_id = $1 AND (r.rights & 4) <> 0"
	" ORDER BY 1"
};

static SbqStatement stmt_grant = {"grant", 3, {INT4OID, OIDOID, INT2OID},
	"INSERT INTO sbq.rights AS r (queue_id, role, rights) VALUES ($1, $2::regrole, $3)"
	" ON CONFLICT (queue_id, role" EK(", entity_key") ") DO UPDATE SET rights = r.rights | excluded.rights"
};

/* a revoke of every right a role holds removes its row; of some, the bits */
static SbqStatement stmt_revoke_all = {"revoke", 3, {INT4OID, OIDOID, INT2OID},
	"DELETE FROM sbq.rights WHERE queue_id = $1 AND role = $2::regrole"
	" AND rights & ~$3 = 0"
};

static SbqStatement stmt_revoke_some = {"revoke", 3, {INT4OID, OIDOID, INT2OID},
	"UPDATE sbq.rights SET rights = rights & ~$3"
	" WHERE queue_id = $1 AND role = $2::regrole AND rights & $3 <> 0"
};

static SbqStatement stmt_drop_queue_rights = {"drop the rights of a queue", 1, {INT4OID},
	"DELETE FROM sbq.rights WHERE queue_id = $1 RETURNING role::oid"
};

static SbqStatement stmt_role_holds = {"role holds rights", 1, {OIDOID},
	"SELECT EXISTS (SELECT 1 FROM sbq.rights WHERE role = $1::regrole)"
};

/* the queue's row, under a transaction snapshot: 40001 when deleted since */
static SbqStatement stmt_lock_queue_row = {"lock the queue's row", 1, {INT4OID},
	"SELECT 1 FROM sbq.queues WHERE queue_id = $1 FOR KEY SHARE"
};

/* the same for a topic */
static SbqStatement stmt_lock_topic_row = {"lock the topic's row", 1, {INT4OID},
	"SELECT 1 FROM sbq.topics WHERE topic_id = $1 FOR KEY SHARE"
};

static SbqStatement stmt_drop_role_rights = {"drop the rights of a dropped role", 1, {OIDOID},
	"DELETE FROM sbq.rights WHERE role = $1::regrole"
};

/*
 * The same, with the tables distributed (docs/scale-out.md, decision 9): a
 * row's role is the one named role_name on this node, as a role's OID
 * differs from node to node and a shard moved in keeps the OIDs of the node
 * it came from. A row whose role has no such name here is nobody's. $2 is
 * the role's OID here.
 */
#define NAME_OF_2 "(SELECT a.rolname FROM pg_catalog.pg_roles a WHERE a.oid = $2)"
#define ROW_OF_2 \
	"(CASE WHEN r.role_name IS NULL THEN r.role::oid = $2 ELSE r.role_name = " NAME_OF_2 " END)"

static SbqStatement stmt_rights_of_queue_named = {"rights of a queue", 1, {INT4OID},
	"SELECT x.role, x.rights FROM (SELECT " SBQ_RIGHTS_ROLE_OF("r") " AS role, r.rights"
	"  FROM sbq.rights r WHERE r.queue_id = $1) x"
	" WHERE x.role IS NOT NULL ORDER BY 1"
};

static SbqStatement stmt_rights_of_queue_topics_named = {"rights of a queue", 1, {INT4OID},
	"SELECT x.role, x.rights FROM ("
	" SELECT " SBQ_RIGHTS_ROLE_OF("r") " AS role, r.rights"
	"   FROM sbq.rights r WHERE r.queue_id = $1"
	" UNION ALL"
	" SELECT " SBQ_RIGHTS_ROLE_OF("r") ", 4::smallint FROM sbq.subscriptions s"
	"   JOIN sbq.rights r ON r.queue_id = s.topic_id"
	"  WHERE s.queue_id = $1 AND (r.rights & 4) <> 0) x"
	" WHERE x.role IS NOT NULL ORDER BY 1"
};

/*
 * A row of this OID that names another role came with a shard from another
 * node, and is that role's: before a grant takes the OID, the row goes to the
 * OID of its role here (its rights added to any that role has), or goes if no
 * role here has its name, or if that role's OID here has a row of a third
 * name (moved in too): merged, it gave one role's rights to another.
 */
static SbqStatement stmt_grant_rekey = {"grant: a moved row of the OID", 3, {INT4OID, OIDOID, INT2OID},
	"WITH m AS (DELETE FROM sbq.rights r WHERE r.queue_id = $1 AND r.role = $2::regrole"
	"             AND r.role_name IS NOT NULL AND r.role_name IS DISTINCT FROM " NAME_OF_2
	"             AND $3 IS NOT NULL"
	"           RETURNING r.role_name, r.rights)"
	" INSERT INTO sbq.rights AS r (queue_id, role, rights, role_name)"
	" SELECT $1, a.oid::regrole, m.rights, m.role_name"
	"   FROM m JOIN pg_catalog.pg_roles a ON a.rolname = m.role_name"
	" ON CONFLICT (queue_id, role, entity_key) DO UPDATE"
	" SET rights = r.rights | excluded.rights, role_name = excluded.role_name"
	" WHERE r.role_name IS NULL OR r.role_name = excluded.role_name"
};

/* a row of this OID granted before the name was kept (role_name NULL) is the role's */
static SbqStatement stmt_grant_named = {"grant", 3, {INT4OID, OIDOID, INT2OID},
	"INSERT INTO sbq.rights AS r (queue_id, role, rights, role_name)"
	" VALUES ($1, $2::regrole, $3, " NAME_OF_2 ")"
	" ON CONFLICT (queue_id, role, entity_key) DO UPDATE"
	" SET rights = r.rights | excluded.rights, role_name = excluded.role_name"
};

static SbqStatement stmt_revoke_all_named = {"revoke", 3, {INT4OID, OIDOID, INT2OID},
	"DELETE FROM sbq.rights r WHERE r.queue_id = $1 AND " ROW_OF_2
	" AND r.rights & ~$3 = 0"
};

static SbqStatement stmt_revoke_some_named = {"revoke", 3, {INT4OID, OIDOID, INT2OID},
	"UPDATE sbq.rights r SET rights = r.rights & ~$3"
	" WHERE r.queue_id = $1 AND " ROW_OF_2 " AND r.rights & $3 <> 0"
};

/*
 * Whether the rights of this storage section keep their roles by name: the
 * tables distributed, by a library that gives sbq.rights the column
 * role_name (dist_layout.c). Distributed by an older one, they have none
 * until sbq_distribute() runs again.
 */
bool
sbq_rights_by_name(void)
{
	Oid			relid;

	if (!sbq_dist_in_group())
		return false;
	relid = get_relname_relid("rights", get_namespace_oid("sbq", false));
	return OidIsValid(relid) && get_attnum(relid, "role_name") != InvalidAttrNumber;
}

/* The name of a right, or of a set of rights as a check asks for it. */
static const char *
sbq_right_name(int16 rights)
{
	switch (rights)
	{
		case SBQ_RIGHT_SEND:
			return "send";
		case SBQ_RIGHT_LISTEN:
			return "listen";
		case SBQ_RIGHT_MANAGE:
			return "manage";
		default:
			return "send, listen or manage";
	}
}

/*
 * sbq_rights_load
 *		Read the rights held on a queue into queue->grants (in the caller's
 *		memory context). With SQL older than 0.5 there are none to read.
 */
void
sbq_rights_load(SbqQueue *queue)
{
	Datum		values[1];
	uint64		n;
	uint64		i;

	queue->ngrants = 0;
	queue->grants = NULL;
	if (!sbq_rights_enforced())
		return;
	/* as they are now, whatever the transaction's snapshot: a revoke counts at once */
	values[0] = Int32GetDatum(queue->queue_id);
	if (sbq_rights_by_name())
		n = sbq_exec_fresh(sbq_topics_installed() && !queue->is_topic ?
						   &stmt_rights_of_queue_topics_named : &stmt_rights_of_queue_named,
						   values);
	else
		n = sbq_exec_fresh(sbq_topics_installed() && !queue->is_topic ?
						   &stmt_rights_of_queue_topics : &stmt_rights_of_queue, values);
	if (n == 0)
		return;
	queue->grants = MemoryContextAlloc(sbq_storage_caller_context(), sizeof(SbqGrant) * n);
	for (i = 0; i < n; i++)
	{
		bool		isnull;

		queue->grants[i].role = DatumGetObjectId(sbq_col(i, 1, &isnull));
		queue->grants[i].rights = DatumGetInt16(sbq_col(i, 2, &isnull));
	}
	queue->ngrants = (int) n;
}

/*
 * sbq_rights_holds
 *		Whether a role has one of the rights asked for on a queue.
 */
static bool
sbq_rights_holds(Oid role, const SbqQueue *queue, int16 rights)
{
	int			i;

	/* the owner the section looked up when it opened: no second look a call */
	if (has_privs_of_role(role, sbq_storage_owner()))
		return true;
	for (i = 0; i < queue->ngrants; i++)
	{
		const SbqGrant *g = &queue->grants[i];

		if ((g->rights & (rights | SBQ_RIGHT_MANAGE)) == 0)
			continue;
		if (!OidIsValid(g->role) || has_privs_of_role(role, g->role))
			return true;
	}
	return false;
}

/*
 * sbq_rights_have
 *		Whether the caller has one of the rights asked for on a queue or
 *		topic (always, with SQL older than 0.5).
 */
bool
sbq_rights_have(const SbqQueue *queue, int16 rights)
{
	return !sbq_rights_enforced() || sbq_rights_holds(sbq_storage_caller(), queue, rights);
}

/*
 * sbq_rights_require
 *		Refuse (42501) a call whose caller has none of the rights asked for
 *		on the queue. SQL older than 0.5 has no rights: its table privileges
 *		decided, and still do.
 */
void
sbq_rights_require(const SbqQueue *queue, int16 rights)
{
	Oid			caller = sbq_storage_caller();
	const char *role;

	if (!sbq_rights_enforced() || sbq_rights_holds(caller, queue, rights))
		return;
	role = GetUserNameFromId(caller, true);
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied for %s \"%s\"", queue->is_topic ? "topic" : "queue",
					queue->name),
			 errdetail("The call needs the right \"%s\" on the %s, which role \"%s\" does not hold.",
					   sbq_right_name(rights), queue->is_topic ? "topic" : "queue",
					   role != NULL ? role : "?"),
			 errhint("A role with the right \"manage\" on the %s grants rights with sbq_grant().",
					 queue->is_topic ? "topic" : "queue")));
}

/*
 * Whether a privilege dependency of sbq.queue_rights (relid) on role is recorded
 * in this database.
 */
static bool
sbq_rights_dependency(Oid relid, Oid role)
{
	Relation	rel = table_open(SharedDependRelationId, AccessShareLock);
	ScanKeyData key[4];
	SysScanDesc scan;
	HeapTuple	tuple;
	bool		found = false;

	ScanKeyInit(&key[0], Anum_pg_shdepend_dbid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(MyDatabaseId));
	ScanKeyInit(&key[1], Anum_pg_shdepend_classid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(RelationRelationId));
	ScanKeyInit(&key[2], Anum_pg_shdepend_objid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(relid));
	ScanKeyInit(&key[3], Anum_pg_shdepend_objsubid, BTEqualStrategyNumber, F_INT4EQ,
				Int32GetDatum(0));
	scan = systable_beginscan(rel, SharedDependDependerIndexId, true, NULL, 4, key);
	while (!found && HeapTupleIsValid(tuple = systable_getnext(scan)))
	{
		Form_pg_shdepend dep = (Form_pg_shdepend) GETSTRUCT(tuple);

		found = dep->deptype == SHARED_DEPENDENCY_ACL &&
			dep->refclassid == AuthIdRelationId && dep->refobjid == role;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * The object the privilege dependencies are of: the view sbq.queue_rights, an
 * empty view of sbqueue's own that nobody is meant to grant anything on, so
 * that a dependency there is always one of these; owned by the bootstrap
 * superuser, so that no ownership change drops one (the install says why). DROP ROLE then reports
 * "privileges for view sbq.queue_rights". PUBLIC may read it (it shows
 * nothing), so that DROP OWNED by a role without other privileges on it
 * revokes nothing instead of failing.
 */
static Oid
sbq_rights_marker_oid(void)
{
	Oid			relid = get_relname_relid("queue_rights", get_namespace_oid("sbq", false));

	if (!OidIsValid(relid))
		elog(ERROR, "view sbq.queue_rights does not exist");
	return relid;
}

/* Whether role holds any right, as committed now (and as this transaction left it). */
static bool
sbq_rights_role_holds(Oid role)
{
	Datum		values[1];
	bool		isnull;

	values[0] = ObjectIdGetDatum(role);
	(void) sbq_exec_fresh(&stmt_role_holds, values);
	return DatumGetBool(sbq_col(0, 1, &isnull));
}

/*
 * sbq_rights_sync_role
 *		Record a privilege dependency on a role that holds rights, and drop
 *		the one of a role that no longer does (PUBLIC needs none), whatever
 *		the number of queues: an index probe and a look at the marker's
 *		dependencies. granted says the caller gave the role rights.
 *
 *		A grant and a revoke that would drop the dependency take turns, on a
 *		lock of the role held until the transaction ends, in modes that
 *		conflict with each other only (grants RowExclusive, revokes Share):
 *		whichever comes second waits and then sees what the first did, so a
 *		revoke of a role's last right on one queue and a grant on another
 *		cannot leave the role with rights and no dependency. Two grants, or
 *		two revokes, never wait for each other, and a revoke that leaves the
 *		role other rights takes no lock. Both modes keep DROP ROLE out until
 *		the transaction ends. The rights of a role that no longer exists (a
 *		restore) go when a revoke or delete touches it: nobody holds them, and
 *		a role made later with its OID must not; a grant to it is an error.
 */
static void
sbq_rights_sync_role(Oid role, bool granted)
{
	Oid			relid;
	Datum		values[1];
	bool		holds;
	bool		recorded;
	Oid		   *old_roles;
	Oid		   *new_roles;

	if (!OidIsValid(role))
		return;
	relid = sbq_rights_marker_oid();
	if (granted)
		LockSharedObject(AuthIdRelationId, role, 0, RowExclusiveLock);
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(role)))
	{
		if (granted)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("role with OID %u does not exist", role),
					 errdetail("It was dropped while the grant went on.")));
		values[0] = ObjectIdGetDatum(role);
		(void) sbq_exec(&stmt_drop_role_rights, values, NULL);
		return;
	}
	holds = sbq_rights_role_holds(role);
	recorded = sbq_rights_dependency(relid, role);
	if (!holds && recorded && !granted)
	{
		/* wait for grants under way, then look again */
		LockSharedObject(AuthIdRelationId, role, 0, ShareLock);
		holds = sbq_rights_role_holds(role);
		recorded = sbq_rights_dependency(relid, role);
	}
	if (holds == recorded)
		return;
	/*
	 * updateAclDependencies frees the arrays. No owner is given: the marker
	 * belongs to the bootstrap superuser, which needs none (it is pinned).
	 */
	old_roles = palloc(sizeof(Oid));
	old_roles[0] = role;
	new_roles = palloc(sizeof(Oid));
	new_roles[0] = role;
	updateAclDependencies(RelationRelationId, relid, 0, InvalidOid,
						  recorded ? 1 : 0, old_roles, holds ? 1 : 0, new_roles);
}

/*
 * sbq_set_rights
 *		Grant (or revoke) rights on a queue or topic to (from) a role,
 *		InvalidOid for PUBLIC; made_here: the entity is this transaction's
 *		own, just made.
 */
static void
sbq_set_rights(const SbqQueue *queue, Oid role, int16 rights, bool grant, bool made_here)
{
	Datum		values[3];

	values[0] = Int32GetDatum(queue->queue_id);
	/*
	 * A transaction snapshot (REPEATABLE READ, SERIALIZABLE) may show a
	 * queue deleted since, whose id no live queue has: locking its row (a
	 * topic's in sbq.topics) is then a serialization error, where the rights
	 * would otherwise go to the dead id. (Under READ COMMITTED the caller's
	 * name lock keeps deletes out, and the lookup saw every one that
	 * committed before.)
	 */
	if (!made_here && IsolationUsesXactSnapshot() &&
		sbq_exec(queue->is_topic ? &stmt_lock_topic_row : &stmt_lock_queue_row, values, NULL) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not serialize access due to a concurrent delete of queue \"%s\"",
						queue->name)));
	values[1] = ObjectIdGetDatum(role);
	values[2] = Int16GetDatum(rights);
	if (sbq_rights_by_name())
	{
		/* a role may have two rows here (one moved in, one granted): every one */
		if (grant)
		{
			(void) sbq_exec(&stmt_grant_rekey, values, NULL);
			(void) sbq_exec(&stmt_grant_named, values, NULL);
		}
		else
		{
			(void) sbq_exec_latest(&stmt_revoke_all_named, values, NULL);
			(void) sbq_exec_latest(&stmt_revoke_some_named, values, NULL);
		}
	}
	else if (grant)
		(void) sbq_exec(&stmt_grant, values, NULL);
	else if (sbq_exec_latest(&stmt_revoke_all, values, NULL) == 0)
		(void) sbq_exec_latest(&stmt_revoke_some, values, NULL);
	sbq_rights_sync_role(role, grant);
	sbq_queue_cache_changed();
}

/*
 * sbq_storage_set_rights
 *		Grant (or revoke) rights on a queue or topic to (from) a role,
 *		InvalidOid for PUBLIC. The caller holds manage on it.
 */
void
sbq_storage_set_rights(const SbqQueue *queue, Oid role, int16 rights, bool grant)
{
	sbq_set_rights(queue, role, rights, grant, false);
}

/*
 * sbq_rights_created
 *		A new queue: its creator holds manage on it.
 */
void
sbq_rights_created(int32 queue_id)
{
	SbqQueue	queue;

	if (!sbq_rights_enforced())
		return;
	memset(&queue, 0, sizeof(queue));
	queue.queue_id = queue_id;
	sbq_set_rights(&queue, sbq_storage_caller(), SBQ_RIGHT_MANAGE, true, true);
}

/*
 * sbq_rights_dropped
 *		A queue is deleted: so are the rights on it.
 */
void
sbq_rights_dropped(int32 queue_id)
{
	Datum		values[1];
	uint64		n;
	uint64		i;
	Oid		   *roles;

	if (!sbq_rights_enforced())
		return;
	values[0] = Int32GetDatum(queue_id);
	n = sbq_exec_latest(&stmt_drop_queue_rights, values, NULL);
	roles = palloc(sizeof(Oid) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		bool		isnull;

		roles[i] = DatumGetObjectId(sbq_col(i, 1, &isnull));
	}
	for (i = 0; i < n; i++)
		sbq_rights_sync_role(roles[i], false);
}
