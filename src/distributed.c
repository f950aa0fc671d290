/*-------------------------------------------------------------------------
 *
 * distributed.c
 *	  sbqueue on a Citus cluster (docs/scale-out.md). With the tables
 *	  distributed (sbq_distribute()), every table has the column entity_key,
 *	  a fixed hash of the canonical name of the entity a row belongs to, and
 *	  the rows of one entity are in the shards of one shard group, on one
 *	  node. A call runs there, against those shard tables, never through the
 *	  distributed planner:
 *	- SBQ_ROUTE, at the top of each SQL-callable function whose argument 0
 *	  is an address, finds the group of the entity. When this node holds it,
 *	  the group becomes the call's (its statements and tables are the
 *	  group's shards: dist_storage.c); otherwise the call goes to the node
 *	  that holds it (dist_route.c), where a call that arrives for a group
 *	  the node does not hold (a shard moved meanwhile) is refused (55000),
 *	  never run against a stale copy.
 *	- Entering a group share-locks its metadata for the transaction, as
 *	  Citus's own writers do, and then looks at the placements again with a
 *	  fresh snapshot: a shard move takes that lock exclusively on every node
 *	  before its last catch-up and keeps it until the placements are
 *	  switched, so a move waits for the call and the call for the move.
 *	- The rows a call writes take the entity's key from the column default
 *	  (sbq.current_entity_key()); a write for another entity of the group (a
 *	  subscription, a forward) pushes that entity's key.
 * The layout itself and sbq_distribute() are in dist_layout.c.
 *
 * Owns: backend-local state only: whether the tables are distributed, the
 * shard groups (their hash ranges, shard ids and whether they are local),
 * the live lease epochs (the queues shards of the local groups), and the
 * group and entity key of the current call. Locks: Citus's metadata lock of
 * colocated shards for the group (ShareLock, transaction-level).
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/distributed.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "common/hashfn.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "compat.h"
#include "dist_int.h"
#include "distributed.h"
#include "sbqueue.h"
#include "storage.h"
#include "topics.h"

PG_FUNCTION_INFO_V1(sbq_entity_key_sql);
PG_FUNCTION_INFO_V1(sbq_current_entity_key);

/* The distributed tables, all colocated with sbq.queues. */
const char *const sbq_dist_tables[SBQ_DIST_NTABLES] = {
	"queues", "messages", "dead_letters", "queue_counters", "topics", "subscriptions",
	"rules", "topic_scheduled", "duplicate_ids", "rights", "sessions"
};

/*
 * Citus's lock on the metadata of colocated shards (its resource_lock.h): an
 * advisory lock of this class on (shard index, colocation id).
 */
#define SBQ_CITUS_COLOCATED_SHARDS_METADATA_LOCK 8

/* One shard group: a hash range and the shard of each table in it. */
typedef struct SbqShardGroup
{
	int32		min;
	int32		max;
	bool		local;			/* placed on this node */
	bool		has_route_key;
	int32		route_key;		/* a key of the range (hashes into it) */
	int64		shardid[SBQ_DIST_NTABLES];
} SbqShardGroup;

/* -1: not known; 0: the tables are local; 1: distributed */
static int	sbq_dist_state = -1;
static MemoryContext sbq_dist_cxt = NULL;
static SbqShardGroup *sbq_groups = NULL;
static int	sbq_ngroups = 0;
static Oid	sbq_dist_base[SBQ_DIST_NTABLES];	/* the tables, for invalidations */
static uint32 sbq_colocation_id = 0;	/* of sbq.queues and the rest */
static bool sbq_dist_seen = false;	/* distributed when last looked at */

/* the queues shards of the groups this node holds: the live lease epochs */
#define SBQ_MAX_LIVE_EPOCHS 1024
static Oid	sbq_live_epochs[SBQ_MAX_LIVE_EPOCHS];
static int	sbq_nlive_epochs = 0;

/* the group of the current call, a copy (the list may be reloaded meanwhile) */
static bool sbq_cur_set = false;
static SbqShardGroup sbq_cur;
static Oid	sbq_cur_relid[SBQ_DIST_NTABLES];
static int32 sbq_cur_key = 0;
static bool sbq_cur_key_set = false;	/* a maintenance pass has none */

/* ------------------------------------------------------------ the entity key */

/*
 * sbq_entity_key
 *		The entity key of an address: FNV-1a (32 bits) of its canonical base
 *		name, the name in lower case without a dead-letter suffix and without
 *		a subscription part ("/subscriptions/..."): a queue, its dead-letter
 *		sub-queue, a topic and its subscriptions share one key, whatever the
 *		letter case. The same on every node and platform.
 */
int32
sbq_entity_key(const char *address, size_t len)
{
	const char *dlq = SBQ_DLQ_SUFFIX;
	size_t		dlq_len = strlen(dlq);
	size_t		seg_len = strlen(SBQ_SUBSCRIPTIONS_SEGMENT);
	uint32		h = 2166136261u;
	size_t		i;

	if (len > dlq_len && pg_strncasecmp(address + len - dlq_len, dlq, dlq_len) == 0)
		len -= dlq_len;
	for (i = 0; i + seg_len <= len; i++)
		if (pg_strncasecmp(address + i, SBQ_SUBSCRIPTIONS_SEGMENT, seg_len) == 0)
		{
			len = i;
			break;
		}
	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) address[i];

		if (c >= 'A' && c <= 'Z')
			c += 'a' - 'A';
		h ^= c;
		h *= 16777619u;
	}
	return (int32) h;
}

/* sbq.entity_key(address text): the key sbq_distribute() gives a row */
Datum
sbq_entity_key_sql(PG_FUNCTION_ARGS)
{
	text	   *t = PG_GETARG_TEXT_PP(0);

	PG_RETURN_INT32(sbq_entity_key(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t)));
}

/*
 * sbq.current_entity_key(): the entity key of the current call, the default
 * of every entity_key column once distributed, so that the storage
 * statements, which do not name the column, store it.
 */
Datum
sbq_current_entity_key(PG_FUNCTION_ARGS)
{
	if (!sbq_cur_set || !sbq_cur_key_set)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("sbqueue rows can only be written by sbqueue's functions")));
	PG_RETURN_INT32(sbq_cur_key);
}

/* ------------------------------------------------------------ the groups */

/*
 * The invalidations of the tables this backend has taken in: one that comes
 * while the groups are read may be of a change the read's snapshot missed.
 */
static uint64 sbq_dist_invals = 0;

static void
sbq_dist_inval(Datum arg, Oid relid)
{
	int			i;

	if (sbq_dist_state < 0)
		return;
	if (relid != InvalidOid)
	{
		for (i = 0; i < SBQ_DIST_NTABLES; i++)
			if (relid == sbq_dist_base[i])
				break;
		if (i == SBQ_DIST_NTABLES && !(sbq_cur_set && relid == sbq_cur_relid[0]))
			return;
	}
	sbq_dist_invals++;
	sbq_dist_state = -1;
}

/*
 * Run a read of Citus's metadata with a snapshot taken now: a call that
 * waited for a shard move's lock must see where the move put the shards,
 * not what its statement's snapshot shows (SPI connected; SPI_processed and
 * SPI_tuptable hold the result).
 */
static void
sbq_dist_read_latest(const char *sql, int nargs, Oid *argtypes, Datum *values)
{
	SPIPlanPtr	plan = SPI_prepare(sql, nargs, argtypes);
	Snapshot	snap;
	int			rc;

	if (plan == NULL)
		elog(ERROR, "could not prepare a read of Citus's metadata");
	snap = RegisterSnapshot(GetLatestSnapshot());
	rc = SPI_execute_snapshot(plan, values, NULL, snap, InvalidSnapshot, true, false, 0);
	UnregisterSnapshot(snap);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read Citus's metadata");
}

/* Whether Citus knows sbq.queues as a distributed table. */
static bool
sbq_dist_lookup_state(void)
{
	Oid			nsp = get_namespace_oid("sbq", true);
	Oid			queues;
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1];
	bool		result;
	int			i;

	for (i = 0; i < SBQ_DIST_NTABLES; i++)
		sbq_dist_base[i] = OidIsValid(nsp) ? get_relname_relid(sbq_dist_tables[i], nsp) : InvalidOid;
	queues = sbq_dist_base[0];
	if (!OidIsValid(queues) || !OidIsValid(get_extension_oid("citus", true)))
		return false;
	values[0] = ObjectIdGetDatum(queues);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	sbq_dist_read_latest("SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1",
						 1, argtypes, values);
	result = SPI_processed > 0;
	SPI_finish();
	return result;
}

static int
sbq_group_cmp(const void *a, const void *b)
{
	int32		x = ((const SbqShardGroup *) a)->min;
	int32		y = ((const SbqShardGroup *) b)->min;

	return x < y ? -1 : x > y ? 1 : 0;
}

/* The colocation of sbq.queues (and so of every table), SPI connected. */
static void
sbq_dist_read_colocation(void)
{
	Oid			argtype[1] = {OIDOID};
	Datum		value[1] = {ObjectIdGetDatum(sbq_dist_base[0])};
	bool		isnull;

	sbq_dist_read_latest("SELECT colocationid::pg_catalog.int8 FROM pg_catalog.pg_dist_partition"
						 " WHERE logicalrelid = $1", 1, argtype, value);
	sbq_colocation_id = SPI_processed > 0 ?
		(uint32) DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
											 1, &isnull)) : 0;
}

/*
 * Check that every table has a shard in every group, and keep the queues
 * shards of the groups this node holds: the live lease epochs.
 */
void
sbq_dist_note_live_epochs(void)
{
	int			i;
	int			t;

	for (i = 0; i < sbq_ngroups; i++)
		for (t = 0; t < SBQ_DIST_NTABLES; t++)
			if (sbq_groups[i].shardid[t] == 0)
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("sbq.%s is not distributed like sbq.queues", sbq_dist_tables[t]),
						 errhint("sbq_distribute() distributes every table of sbqueue.")));
	sbq_nlive_epochs = 0;
	for (i = 0; i < sbq_ngroups && sbq_nlive_epochs < SBQ_MAX_LIVE_EPOCHS; i++)
	{
		char		name[NAMEDATALEN];
		Oid			relid;

		if (!sbq_groups[i].local)
			continue;
		snprintf(name, sizeof(name), "queues_" INT64_FORMAT, sbq_groups[i].shardid[0]);
		relid = get_relname_relid(name, get_namespace_oid("sbq", false));
		if (OidIsValid(relid))
			sbq_live_epochs[sbq_nlive_epochs++] = relid;
	}
}

static SbqShardGroup *sbq_dist_group_of(int32 key);

/*
 * A key of each group's range, to route what concerns the group rather than
 * an entity (the views of the whole cluster): the keys 0, 1, 2 ... hash
 * uniformly, so a range of the usual width has one of the first few
 * hundred. A narrow range (a tenant isolated, a split) may have none among
 * the keys tried: sbq_dist_set_route_key() gives it one of its rows'.
 */
static void
sbq_dist_find_route_keys(void)
{
	int			left = sbq_ngroups;
	int32		limit = 64 * sbq_ngroups + 4096;
	int32		k;

	for (k = 0; left > 0 && k < limit; k++)
	{
		SbqShardGroup *g = sbq_dist_group_of(k);

		if (g != NULL && !g->has_route_key)
		{
			g->has_route_key = true;
			g->route_key = k;
			left--;
		}
	}
}

/*
 * How many times this backend has read groups other than those it held
 * (sbq_dist_groups_read), and a hash of the last ones read.
 */
static uint64 sbq_dist_reads = 0;
static uint32 sbq_dist_groups_hash = 0;

/* Read the shard groups of the tables from Citus's metadata. */
static void
sbq_dist_load_groups(void)
{
	Oid			argtypes[1] = {OIDARRAYOID};
	Datum		values[1];
	Datum		elems[SBQ_DIST_NTABLES];
	uint64		n;
	uint64		r;
	int			i;

	if (sbq_dist_cxt == NULL)
		sbq_dist_cxt = AllocSetContextCreate(TopMemoryContext, "sbqueue shard groups",
											 ALLOCSET_SMALL_SIZES);
	MemoryContextReset(sbq_dist_cxt);
	sbq_groups = NULL;
	sbq_ngroups = 0;

	for (i = 0; i < SBQ_DIST_NTABLES; i++)
		elems[i] = ObjectIdGetDatum(sbq_dist_base[i]);
	values[0] = PointerGetDatum(construct_array(elems, SBQ_DIST_NTABLES, OIDOID,
												sizeof(Oid), true, TYPALIGN_INT));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	sbq_dist_read_colocation();
	sbq_dist_read_latest("SELECT s.logicalrelid, s.shardid,"
							  " s.shardminvalue::pg_catalog.int4, s.shardmaxvalue::pg_catalog.int4,"
							  " EXISTS (SELECT 1 FROM pg_catalog.pg_dist_placement p"
							  "          WHERE p.shardid = s.shardid AND p.groupid ="
							  "                (SELECT l.groupid FROM pg_catalog.pg_dist_local_group l))"
							  " FROM pg_catalog.pg_dist_shard s"
							  " WHERE s.logicalrelid = ANY ($1)",
							  1, argtypes, values);
	n = SPI_processed;

	/* the groups are the shards of sbq.queues */
	sbq_groups = MemoryContextAllocZero(sbq_dist_cxt, sizeof(SbqShardGroup) * Max(n, 1));
	for (r = 0; r < n; r++)
	{
		bool		isnull;
		Oid			rel = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[r],
														 SPI_tuptable->tupdesc, 1, &isnull));
		SbqShardGroup *g;

		if (rel != sbq_dist_base[0])
			continue;
		g = &sbq_groups[sbq_ngroups++];
		g->shardid[0] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r],
													SPI_tuptable->tupdesc, 2, &isnull));
		g->min = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[r],
											 SPI_tuptable->tupdesc, 3, &isnull));
		g->max = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[r],
											 SPI_tuptable->tupdesc, 4, &isnull));
		g->local = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[r],
											  SPI_tuptable->tupdesc, 5, &isnull));
	}
	qsort(sbq_groups, sbq_ngroups, sizeof(SbqShardGroup), sbq_group_cmp);

	/* and the shard of every other table with the same range */
	for (r = 0; r < n; r++)
	{
		bool		isnull;
		HeapTuple	tup = SPI_tuptable->vals[r];
		Oid			rel = DatumGetObjectId(SPI_getbinval(tup, SPI_tuptable->tupdesc, 1, &isnull));
		int32		min = DatumGetInt32(SPI_getbinval(tup, SPI_tuptable->tupdesc, 3, &isnull));
		int			t;
		int			g;

		for (t = 1; t < SBQ_DIST_NTABLES; t++)
			if (rel == sbq_dist_base[t])
				break;
		if (t == SBQ_DIST_NTABLES)
			continue;
		for (g = 0; g < sbq_ngroups; g++)
			if (sbq_groups[g].min == min)
				sbq_groups[g].shardid[t] = DatumGetInt64(SPI_getbinval(tup, SPI_tuptable->tupdesc,
																	   2, &isnull));
	}
	SPI_finish();
	{
		uint32		h = hash_bytes((const unsigned char *) &sbq_ngroups, sizeof(sbq_ngroups));

		for (i = 0; i < sbq_ngroups; i++)
			h = hash_combine(h, hash_bytes((const unsigned char *) &sbq_groups[i].shardid[0],
										   sizeof(int64)));
		if (h != sbq_dist_groups_hash)
			sbq_dist_reads++;
		sbq_dist_groups_hash = h;
	}
	sbq_dist_note_live_epochs();
	sbq_dist_find_route_keys();
}

/*
 * sbq_dist_forget_shards
 *		Invalidate the relcache entries of the distributed tables: in this
 *		backend now, in the others when the transaction commits. Citus then
 *		builds its metadata of them again (sbq_dist_run_routing), and so
 *		does this file.
 */
void
sbq_dist_forget_shards(void)
{
	int			t;

	for (t = 0; t < SBQ_DIST_NTABLES; t++)
		if (OidIsValid(sbq_dist_base[t]) &&
			SearchSysCacheExists1(RELOID, ObjectIdGetDatum(sbq_dist_base[t])))
			CacheInvalidateRelcacheByRelid(sbq_dist_base[t]);
	CommandCounterIncrement();
}

/*
 * Whether the tables are distributed here; the groups loaded when they are.
 *
 * The groups are read with a snapshot taken then; a shard move that commits
 * after it sends its invalidation of the tables after that, which may be
 * taken in before the reading ends (a catalog look-up of the read opens a
 * relation). Then the read is done again: kept, the groups would say this
 * node still holds the group that moved, with nothing left to say it no
 * longer does, and a call locking the group after the move would write
 * into the shard the move left behind, to be dropped with it.
 */
bool
sbq_dist_active(void)
{
	while (sbq_dist_state < 0)
	{
		uint64		invals = sbq_dist_invals;

		CHECK_FOR_INTERRUPTS();
		sbq_on_relcache_inval(sbq_dist_inval);
		sbq_dist_state = 0;
		PG_TRY();
		{
			if (sbq_dist_lookup_state())
			{
				sbq_dist_load_groups();
				sbq_dist_state = 1;
			}
			sbq_dist_seen = sbq_dist_state == 1;
		}
		PG_CATCH();
		{
			sbq_dist_state = -1;
			PG_RE_THROW();
		}
		PG_END_TRY();
		if (sbq_dist_invals != invals)
			sbq_dist_state = -1;
	}
	return sbq_dist_state == 1;
}

/*
 * sbq_dist_call_active
 *		sbq_dist_active() for a call about to work on the tables: first
 *		sbq.queues is share-locked (until the end of the transaction), which
 *		takes in the invalidations that arrived, so the answer holds for the
 *		whole call: sbq_distribute() and sbq_undistribute() change the table
 *		under an exclusive lock.
 */
bool
sbq_dist_call_active(void)
{
	if (sbq_dist_state < 0)
		(void) sbq_dist_active();
	if (OidIsValid(sbq_dist_base[0]))
		LockRelationOid(sbq_dist_base[0], AccessShareLock);
	return sbq_dist_active();
}

/*
 * sbq_dist_epoch_live
 *		Whether the lease epoch (a queues shard's OID) may be of a shard group
 *		this node holds, other than the current call's: then its leases are
 *		not another incarnation's to clear (lease.c). Without distribution
 *		there is one epoch, and no other is alive. No catalog access: called
 *		under the lease table's locks.
 */
bool
sbq_dist_epoch_live(Oid epoch)
{
	int			i;

	if (sbq_dist_state < 0)
		return sbq_dist_seen;	/* not known now: keep what may be alive */
	if (sbq_dist_state == 0)
		return false;
	for (i = 0; i < sbq_nlive_epochs; i++)
		if (sbq_live_epochs[i] == epoch)
			return true;
	return sbq_nlive_epochs == SBQ_MAX_LIVE_EPOCHS;
}

/* The group the last sbq_dist_enter() entered, and the index it locked. */
static int64 sbq_entered_id = 0;
static int	sbq_entered_index = -1;

/* The group of a key's hash, or NULL (a gap in the ranges: none). */
static SbqShardGroup *
sbq_dist_group_of(int32 key)
{
	int32		h = DatumGetInt32(DirectFunctionCall1(hashint4, Int32GetDatum(key)));
	int			lo = 0;
	int			hi = sbq_ngroups - 1;

	while (lo <= hi)
	{
		int			mid = (lo + hi) / 2;

		if (h < sbq_groups[mid].min)
			hi = mid - 1;
		else if (h > sbq_groups[mid].max)
			lo = mid + 1;
		else
			return &sbq_groups[mid];
	}
	return NULL;
}

/*
 * sbq_dist_lock_group
 *		Share-lock the metadata of a shard group (the group at index "index"
 *		of the sorted ranges), as Citus's writers do: a shard move takes it
 *		exclusively on every node before its last catch-up and holds it
 *		until the placements are switched, so it waits for this transaction,
 *		and this call waits for it. Citus locks colocated hash-distributed
 *		shards by colocation and shard index, not by shard id.
 */
static void
sbq_dist_group_locktag(LOCKTAG *tag, int index)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) index, sbq_colocation_id,
						 SBQ_CITUS_COLOCATED_SHARDS_METADATA_LOCK);
}

static void
sbq_dist_lock_group(int index)
{
	LOCKTAG		tag;

	sbq_dist_group_locktag(&tag, index);
	(void) LockAcquire(&tag, ShareLock, false, false);
}

/* Give back one hold of the lock sbq_dist_lock_group(index) took. */
static void
sbq_dist_release_index(int index)
{
	LOCKTAG		tag;

	sbq_dist_group_locktag(&tag, index);
	(void) LockRelease(&tag, ShareLock, false);
}

/* The index of the group whose queues shard is "id", or -1. */
static int
sbq_dist_group_index(int64 id)
{
	int			i;

	for (i = 0; i < sbq_ngroups; i++)
		if (sbq_groups[i].shardid[0] == id)
			return i;
	return -1;
}

/*
 * sbq_dist_enter
 *		Make the group of shard id "id" (its queues shard) the current call's,
 *		for the entity key "key". False when this node does not hold it (or no
 *		longer: checked again after the lock, with the invalidations that
 *		arrived meanwhile).
 */
bool
sbq_dist_enter(int64 id, int32 key, bool has_key)
{
	Oid			nsp = get_namespace_oid("sbq", false);
	SbqShardGroup *g;
	int			locked = -1;
	int			at;
	int			t;

	/*
	 * The lock is by the group's index among the ranges, which a split
	 * changes (and a group made by one is not among the ranges last read):
	 * lock the index the ranges give, read them again, and again while
	 * they put the group elsewhere.
	 */
	for (;;)
	{
		at = sbq_dist_group_index(id);
		if (at >= 0 && at != locked)
		{
			sbq_dist_lock_group(at);
			if (locked >= 0)
				sbq_dist_release_index(locked);
			locked = at;
		}
		AcceptInvalidationMessages();
		if (!sbq_dist_active())
			return false;
		at = sbq_dist_group_index(id);
		if (at < 0 || !sbq_groups[at].local)
			return false;
		if (at == locked)
			break;
	}
	g = &sbq_groups[at];
	sbq_entered_id = id;
	sbq_entered_index = at;
	sbq_cur = *g;
	for (t = 0; t < SBQ_DIST_NTABLES; t++)
	{
		char		name[NAMEDATALEN];

		snprintf(name, sizeof(name), "%s_" INT64_FORMAT, sbq_dist_tables[t], g->shardid[t]);
		sbq_cur_relid[t] = get_relname_relid(name, nsp);
		if (!OidIsValid(sbq_cur_relid[t]))
		{
			sbq_cur_set = false;
			return false;
		}
	}
	sbq_cur_key = key;
	sbq_cur_key_set = has_key;
	sbq_cur_set = true;
	return true;
}

/*
 * sbq_dist_push_key
 *		Rows written from now on belong to the entity "name" (a send to a
 *		subscription, a forward to another queue of the group): returns what
 *		sbq_dist_pop_key() restores.
 */
int64
sbq_dist_push_key(const char *name)
{
	int64		saved = sbq_cur_key_set ? (int64) (uint32) sbq_cur_key : -1;

	sbq_cur_key = sbq_entity_key(name, strlen(name));
	sbq_cur_key_set = true;
	return saved;
}

void
sbq_dist_pop_key(int64 saved)
{
	sbq_cur_key_set = saved >= 0;
	sbq_cur_key = saved >= 0 ? (int32) (uint32) saved : 0;
}

/* The current call leaves its group (nothing runs against the tables until a next). */
void
sbq_dist_leave(void)
{
	sbq_cur_set = false;
	sbq_cur_key_set = false;
}

bool
sbq_dist_in_group(void)
{
	return sbq_cur_set;
}

/*
 * The entity key rows written now get (sbq.current_entity_key()'s), into
 * *key: false when there is none (no group, or a maintenance pass).
 */
bool
sbq_dist_current_key(int32 *key)
{
	*key = sbq_cur_key;
	return sbq_cur_set && sbq_cur_key_set;
}

/* The current group's id (its queues shard), 0 with none. */
int64
sbq_dist_group_id(void)
{
	return sbq_cur_set ? sbq_cur.shardid[0] : 0;
}

/*
 * Whether the entity of key name (a canonical base name) lives in another
 * shard group than the current call's: forwarding there is not supported.
 */
bool
sbq_dist_key_elsewhere(const char *name)
{
	SbqShardGroup *g;

	if (!sbq_cur_set)
		return false;
	g = sbq_dist_group_of(sbq_entity_key(name, strlen(name)));
	return g != NULL && g->shardid[0] != sbq_cur.shardid[0];
}

/* The current group's shard of sbq.<table>. */
Oid
sbq_dist_relid(const char *table)
{
	int			t;

	if (!sbq_cur_set)
		elog(ERROR, "sbqueue: no shard group for sbq.%s", table);
	for (t = 0; t < SBQ_DIST_NTABLES; t++)
		if (strcmp(sbq_dist_tables[t], table) == 0)
			return sbq_cur_relid[t];
	elog(ERROR, "sbq.%s is not a table of sbqueue", table);
	return InvalidOid;			/* keep compiler quiet */
}

static bool
sbq_ident_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		c == '_' || c == '$';
}

/*
 * sbq_dist_sql
 *		A storage statement for the current group: every sbq.<table> of the
 *		distributed tables named as the group's shard of it.
 */
const char *
sbq_dist_sql(const char *sql)
{
	StringInfoData buf;
	const char *p = sql;

	if (!sbq_cur_set)
		elog(ERROR, "sbqueue: a storage statement without a shard group");
	initStringInfo(&buf);
	while (*p)
	{
		int			t = SBQ_DIST_NTABLES;

		if (strncmp(p, "sbq.", 4) == 0 && (p == sql || !sbq_ident_char(p[-1])))
		{
			for (t = 0; t < SBQ_DIST_NTABLES; t++)
			{
				size_t		len = strlen(sbq_dist_tables[t]);

				if (strncmp(p + 4, sbq_dist_tables[t], len) == 0 &&
					!sbq_ident_char(p[4 + len]))
				{
					appendStringInfo(&buf, "sbq.%s_" INT64_FORMAT, sbq_dist_tables[t],
									 sbq_cur.shardid[t]);
					p += 4 + len;
					break;
				}
			}
		}
		if (t == SBQ_DIST_NTABLES)
			appendStringInfoChar(&buf, *p++);
	}
	return buf.data;
}

/* The ids of the groups this node holds, in *ids (palloc'd); their number. */
int
sbq_dist_local_groups(int64 **ids)
{
	int			n = 0;
	int			i;

	*ids = palloc(sizeof(int64) * Max(sbq_ngroups, 1));
	if (!sbq_dist_active())
		return 0;
	for (i = 0; i < sbq_ngroups; i++)
		if (sbq_groups[i].local)
			(*ids)[n++] = sbq_groups[i].shardid[0];
	return n;
}

/* Group i routes by key from now on (a key of its range found in its rows). */
void
sbq_dist_set_route_key(int i, int32 key)
{
	SbqShardGroup *g = sbq_dist_group_of(key);

	if (i >= 0 && i < sbq_ngroups && g == &sbq_groups[i])
	{
		g->has_route_key = true;
		g->route_key = key;
	}
}

/* Group i's hash range. */
void
sbq_dist_group_range(int i, int32 *min, int32 *max)
{
	*min = sbq_groups[i].min;
	*max = sbq_groups[i].max;
}

/*
 * Release the lock sbq_dist_enter() took on group id, once for that entry
 * (a read that is done: a shard move need not wait for the transaction).
 */
void
sbq_dist_unlock_group(int64 id)
{
	/* the index it locked: the ranges may have been read again since */
	if (sbq_entered_id == id && sbq_entered_index >= 0)
		sbq_dist_release_index(sbq_entered_index);
	sbq_entered_index = -1;
}

/*
 * How many times this backend has read shard groups other than those it
 * held: a loop over them by index (sbq_dist_group_at) holds only while this
 * stays the same.
 */
uint64
sbq_dist_groups_read(void)
{
	return sbq_dist_reads;
}

/* The number of shard groups (sbq_dist_active() first). */
int
sbq_dist_ngroups(void)
{
	return sbq_ngroups;
}

/*
 * Shard group i (in the order of their ranges): its id, whether this node
 * holds it, and a key that routes to it; false when no key is known for it
 * (or there is no group i).
 */
bool
sbq_dist_group_at(int i, int64 *id, bool *local, int32 *route_key)
{
	if (i < 0 || i >= sbq_ngroups)
		return false;
	*id = sbq_groups[i].shardid[0];
	*local = sbq_groups[i].local;
	*route_key = sbq_groups[i].route_key;
	return sbq_groups[i].has_route_key;
}

/* Enter a group this node holds, for maintenance: its rows have many keys. */
bool
sbq_dist_enter_group(int64 id)
{
	sbq_storage_refuse_nested();	/* (sbq_dist_route's own check, for a call) */
	return sbq_dist_enter(id, 0, false);
}

/*
 * The group of an entity key: 1 when this node holds it (*id its id), 0
 * when another does, -1 when no shard's range has the key.
 */
int
sbq_dist_key_group(int32 key, int64 *id)
{
	SbqShardGroup *g = sbq_dist_group_of(key);

	if (g == NULL)
		return -1;
	*id = g->shardid[0];
	return g->local ? 1 : 0;
}

