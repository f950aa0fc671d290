/*-------------------------------------------------------------------------
 *
 * counts_direct.c
 *	  A queue's counters added to its stored row without the SQL executor.
 *
 * Without shared memory to gather counts in (sbqueue not preloaded, or its
 * table of queues full), every send and settlement adds what it did to the
 * row of sbq.queue_counters that its queue and its backend own, with an
 * INSERT ... ON CONFLICT DO UPDATE through SPI: starting that statement
 * (its cached plan, the projection, the look for a conflict, then the
 * update) cost about as much as a plain UPDATE's whole round trip.
 *
 * Here, once that row exists, it is found through the table's primary key,
 * locked and updated with ExecSimpleRelationUpdate, as a logical replication
 * worker applies an UPDATE: the same new row version (a HOT one: no key
 * column changes), the same wait for a transaction that holds the row (say
 * a prepared one of an earlier backend with this number), the same checks of
 * the table's constraints, and an overflow refused as bigint addition
 * refuses it. The row is taken as it is now, not as the transaction's
 * snapshot saw it, as the statement took it under the latest snapshot.
 *
 * It serves only a plain table with no triggers, rules or row security that
 * the current user (the tables' owner, in a storage section) may insert
 * into, read and update, as the statement needs, whose primary key is (queue_id, shard) and whose counters are
 * bigints; on a single server (a distributed installation stores into the
 * shard of each call's group, with its entity key). Otherwise, and for a row
 * that is not there yet (the first count of a queue from a backend number),
 * the caller runs the statement.
 *
 * Owns: nothing shared. Locks: RowExclusiveLock on sbq.queue_counters and
 * its indexes, and the row in FOR NO KEY UPDATE mode (no key column
 * changes), as the statement takes them.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/counts_direct.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/sysattr.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "common/int.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relcache.h"

#include "compat.h"
#include "distributed.h"
#include "storage.h"
#include "storage_core.h"

/* the counters' columns, in the order of SbqCounts (qstate.h) */
static const char *const sbq_counter_names[SBQ_NUM_COUNTERS] = {
	"sent", "received", "completed", "abandoned", "deferred", "dead_lettered", "expired"
};

/* Where the columns the update reads and writes are. */
typedef struct SbqCountsLayout
{
	AttrNumber	queue_att;
	AttrNumber	shard_att;
	AttrNumber	counter_att[SBQ_NUM_COUNTERS];
	Oid			key_index;		/* the primary key (queue_id, shard) */
	bool		simple;			/* no DBA's code runs in an update */
} SbqCountsLayout;

/* the context line of an error while updating: the statement this replaces */
static void
sbq_counts_context(void *arg)
{
	errcontext("sbqueue statement \"%s\"", "count");
}

/* The number of rel's column name of type typid, or InvalidAttrNumber. */
static AttrNumber
sbq_counts_column(TupleDesc desc, const char *name, Oid typid)
{
	int			i;

	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (!att->attisdropped && strcmp(NameStr(att->attname), name) == 0)
			return att->atttypid == typid ? att->attnum : InvalidAttrNumber;
	}
	return InvalidAttrNumber;
}

/*
 * Whether rel's primary key is the btree index (queue_id, shard), into *l;
 * and in l->simple whether it is the only index, and no constraint or
 * generated column is checked or computed in an update (then no code of a
 * DBA's runs in it).
 */
static bool
sbq_counts_key(Relation rel, SbqCountsLayout *l)
{
	TupleConstr *constr = RelationGetDescr(rel)->constr;
	List	   *indexes = RelationGetIndexList(rel);	/* sets rd_pkindex */
	Relation	idx;
	bool		fits;

	l->simple = list_length(indexes) == 1 &&
		(constr == NULL || (constr->num_check == 0 && !constr->has_generated_stored));
	list_free(indexes);
	l->key_index = rel->rd_pkindex;
	/*
	 * From 16 on the look-up compares whole rows unless the index is the
	 * replica identity's (the primary key's without one): a key-only search
	 * would never match
	 */
	if (!OidIsValid(l->key_index) ||
		(OidIsValid(RelationGetReplicaIndex(rel)) && RelationGetReplicaIndex(rel) != l->key_index))
		return false;
	idx = index_open(l->key_index, RowExclusiveLock);
	fits = idx->rd_rel->relam == BTREE_AM_OID && idx->rd_index->indisvalid &&
		IndexRelationGetNumberOfKeyAttributes(idx) == 2 &&
		IndexRelationGetNumberOfAttributes(idx) == 2 &&
		idx->rd_index->indkey.values[0] == l->queue_att &&
		idx->rd_index->indkey.values[1] == l->shard_att;
	index_close(idx, NoLock);
	return fits;
}

/* Whether rel takes the update the way this file makes it, its layout into *l. */
static bool
sbq_counts_fits(Relation rel, SbqCountsLayout *l)
{
	TupleDesc	desc = RelationGetDescr(rel);
	Oid			relid = RelationGetRelid(rel);
	int			i;

	if (rel->rd_rel->relkind != RELKIND_RELATION || rel->trigdesc != NULL ||
		rel->rd_rules != NULL || rel->rd_rel->relrowsecurity ||
		rel->rd_rel->relispartition ||
		pg_class_aclcheck(relid, GetUserId(), ACL_INSERT) != ACLCHECK_OK ||
		pg_class_aclcheck(relid, GetUserId(), ACL_SELECT) != ACLCHECK_OK ||
		pg_class_aclcheck(relid, GetUserId(), ACL_UPDATE) != ACLCHECK_OK)
		return false;
	l->queue_att = sbq_counts_column(desc, "queue_id", INT4OID);
	l->shard_att = sbq_counts_column(desc, "shard", INT4OID);
	if (l->queue_att == InvalidAttrNumber || l->shard_att == InvalidAttrNumber)
		return false;
	for (i = 0; i < SBQ_NUM_COUNTERS; i++)
		if ((l->counter_att[i] = sbq_counts_column(desc, sbq_counter_names[i], INT8OID)) ==
			InvalidAttrNumber)
			return false;
	return sbq_counts_key(rel, l);
}

/*
 * sbq_counts_update
 *		Add c to the row (queue_id, shard) of rel, found and locked through
 *		its primary key; false, having changed nothing, when there is none.
 */
static bool
sbq_counts_update(Relation rel, const SbqCountsLayout *l, int32 queue_id, int32 shard,
				  const SbqCounts *c)
{
	TupleDesc	desc = RelationGetDescr(rel);
	EState	   *estate = CreateExecutorState();
	MemoryContext caller = MemoryContextSwitchTo(estate->es_query_cxt);
	RangeTblEntry *rte = makeNode(RangeTblEntry);
	ResultRelInfo *rri = makeNode(ResultRelInfo);
	Bitmapset  *updated = NULL;
	EPQState	epq;
	TupleTableSlot *search;
	TupleTableSlot *old;
	TupleTableSlot *new;
	const int64 *add = (const int64 *) c;	/* SbqCounts: its counters in order */
	bool		found;
	int			i;

	for (i = 0; i < SBQ_NUM_COUNTERS; i++)
		updated = bms_add_member(updated,
								 l->counter_att[i] - FirstLowInvalidHeapAttributeNumber);
	rte->rtekind = RTE_RELATION;
	rte->relid = RelationGetRelid(rel);
	rte->relkind = RELKIND_RELATION;
	rte->rellockmode = RowExclusiveLock;
	SBQ_EXEC_INIT_RANGE_TABLE_UPDATE(estate, rte, updated);
	InitResultRelInfo(rri, rel, 1, NULL, 0);
	estate->es_output_cid = GetCurrentCommandId(true);
	ExecOpenIndices(rri, false);
	search = ExecInitExtraTupleSlot(estate, desc, &TTSOpsVirtual);
	new = ExecInitExtraTupleSlot(estate, desc, &TTSOpsVirtual);
	old = table_slot_create(rel, &estate->es_tupleTable);

	ExecClearTuple(search);
	memset(search->tts_isnull, true, sizeof(bool) * desc->natts);
	search->tts_values[l->queue_att - 1] = Int32GetDatum(queue_id);
	search->tts_isnull[l->queue_att - 1] = false;
	search->tts_values[l->shard_att - 1] = Int32GetDatum(shard);
	search->tts_isnull[l->shard_att - 1] = false;
	ExecStoreVirtualTuple(search);

	/* no key column changes: the statement's lock mode, which FOR KEY SHARE does not block */
	found = RelationFindReplTupleByIndex(rel, l->key_index, LockTupleNoKeyExclusive, search,
										 old);
	if (found)
	{
		slot_getallattrs(old);
		ExecClearTuple(new);
		memcpy(new->tts_values, old->tts_values, sizeof(Datum) * desc->natts);
		memcpy(new->tts_isnull, old->tts_isnull, sizeof(bool) * desc->natts);
		for (i = 0; i < SBQ_NUM_COUNTERS; i++)
		{
			int			a = l->counter_att[i] - 1;
			int64		sum;

			/* NULL plus a count is NULL, as in the statement */
			if (new->tts_isnull[a])
				continue;
			if (pg_add_s64_overflow(DatumGetInt64(new->tts_values[a]), add[i], &sum))
				ereport(ERROR,
						(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
						 errmsg("bigint out of range")));
			new->tts_values[a] = Int64GetDatum(sum);
		}
		ExecStoreVirtualTuple(new);
		/* used by row triggers only, and the table has none */
		memset(&epq, 0, sizeof(epq));
		ExecSimpleRelationUpdate(rri, estate, &epq, old, new);
	}

	ExecCloseIndices(rri);
	ExecResetTupleTable(estate->es_tupleTable, false);
	MemoryContextSwitchTo(caller);
	FreeExecutorState(estate);
	return found;
}

/*
 * sbq_counts_direct
 *		Add c to the stored counters of queue_id in the row of backend
 *		number shard, in sbq.queue_counters of schema nsp. Returns false,
 *		having changed nothing, when the row is not there or the table is
 *		not one this file updates: the caller runs the statement.
 */
bool
sbq_counts_direct(Oid nsp, int32 queue_id, int32 shard, const SbqCounts *c)
{
	SbqCountsLayout l;
	Oid			relid;
	Relation	rel;
	ErrorContextCallback errcb;
	bool		done = false;

	/* a read-only transaction: the statement refuses, as it did */
	if (!OidIsValid(nsp) || sbq_dist_active() || XactReadOnly)
		return false;
	relid = get_relname_relid("queue_counters", nsp);
	if (!OidIsValid(relid))
		return false;
	rel = table_open(relid, RowExclusiveLock);
	if (sbq_counts_fits(rel, &l))
	{
		/* a DBA's constraint or index runs as the statement ran it */
		if (!l.simple)
			sbq_storage_pin_settings();
		/* an error names the statement, as its errors did (never its SQL) */
		errcb.callback = sbq_counts_context;
		errcb.arg = NULL;
		errcb.previous = error_context_stack;
		error_context_stack = &errcb;
		done = sbq_counts_update(rel, &l, queue_id, shard, c);
		error_context_stack = errcb.previous;
	}
	table_close(rel, NoLock);
	/* what follows in this transaction sees the row, as after the statement */
	if (done)
		CommandCounterIncrement();
	return done;
}
