/*-------------------------------------------------------------------------
 *
 * session_probe.c
 *	  Whether a held session surely has nothing for its holder's receive,
 *	  told by two index probes instead of the receive's statement.
 *
 * A holder drains its session until a receive comes back empty: a session
 * of ten messages read ten at a time takes two receives, the second finding
 * nothing. That second one ran the statement that reads the session's next
 * messages (lease_receive.c), and starting that statement (its plan checked,
 * its projection of every column of a message built, its sub-select of the
 * session's id) cost most of the call: about 10 of a call's 16 µs. Here the
 * session's row is found by its key (sessions_pkey) and then the first of
 * its messages in state 0 (messages_session_idx), with the snapshot the
 * statement would have taken (a new one in READ COMMITTED, the transaction's
 * otherwise, after the same command counter increment, so what the caller's
 * own transaction completed is gone and what it sent is there). None: the
 * statement would have read no row, and the receive returns none without
 * it. Any, locked or not, due to expire or not: the statement runs and
 * decides, as before.
 *
 * The probe only ever says "none" when it read the indexes it knows: the
 * tables of a single server (not a distributed layout's shards), each index
 * a valid btree on the columns named above, no row security, and SELECT
 * granted on both tables to the user the statement would run as. Anything
 * else answers "not sure", and the statement runs.
 *
 * Owns: nothing shared. Locks: AccessShareLock on sbq.sessions,
 * sbq.messages and the two indexes, as the statement takes.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/session_probe.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/relation.h"
#include "access/htup_details.h"
#include "access/nbtree.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_index.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "nodes/primnodes.h"
#include "utils/acl.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "distributed.h"
#include "session_mem.h"
#include "storage_core.h"

/*
 * An index to probe: a valid btree whose first key columns are cols, in
 * order, on no expression; whole, or partial on "cols[notnull] IS NOT NULL"
 * only (notnull >= 0), which a probe with a value for that column implies.
 */
static bool
sbq_probe_index_fits(Relation idx, Oid relid, const char *const *cols, int ncols, int notnull)
{
	Form_pg_index ind = idx->rd_index;
	int			i;

	if (idx->rd_rel->relam != BTREE_AM_OID || ind->indrelid != relid || !ind->indisvalid ||
		!ind->indisready || ind->indnkeyatts < ncols ||
		!heap_attisnull(idx->rd_indextuple, Anum_pg_index_indexprs, NULL))
		return false;
	for (i = 0; i < ncols; i++)
		if (ind->indkey.values[i] == 0 || ind->indkey.values[i] != get_attnum(relid, cols[i]))
			return false;
	if (!heap_attisnull(idx->rd_indextuple, Anum_pg_index_indpred, NULL))
	{
		List	   *pred = RelationGetIndexPredicate(idx);
		NullTest   *nt = list_length(pred) == 1 ? (NullTest *) linitial(pred) : NULL;

		if (notnull < 0 || nt == NULL || !IsA(nt, NullTest) ||
			nt->nulltesttype != IS_NOT_NULL || nt->argisrow || !IsA(nt->arg, Var) ||
			((Var *) nt->arg)->varattno != ind->indkey.values[notnull])
			return false;
	}
	return true;
}

/* A table to probe: a plain one without row security that the current user may read. */
static bool
sbq_probe_table_fits(Relation rel)
{
	return rel->rd_rel->relkind == RELKIND_RELATION && !rel->rd_rel->relrowsecurity &&
		pg_class_aclcheck(RelationGetRelid(rel), GetUserId(), ACL_SELECT) == ACLCHECK_OK;
}

/* ScanKey on an index's column n (1-based) with its own collation. */
static void
sbq_probe_key(ScanKey key, Relation idx, AttrNumber n, RegProcedure eq, Datum value)
{
	ScanKeyEntryInitialize(key, 0, n, BTEqualStrategyNumber, InvalidOid,
						   idx->rd_indcollation[n - 1], eq, value);
}

/*
 * The first row of rel through idx that keys match, visible to snap, into
 * slot: false when there is none.
 */
static bool
sbq_probe_first(Relation rel, Relation idx, Snapshot snap, ScanKey keys, int nkeys,
				TupleTableSlot *slot)
{
	IndexScanDesc scan = index_beginscan(rel, idx, snap, nkeys, 0);
	bool		found;

	index_rescan(scan, keys, nkeys, NULL, 0);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);
	index_endscan(scan);
	return found;
}

/*
 * What the probes use, looked up by name once and kept until a relcache
 * invalidation of any of them (or of all): a DROP and CREATE of the
 * extension, an index made, dropped or rebuilt sends one.
 */
typedef struct SbqProbeRels
{
	bool		valid;
	bool		fits;			/* the shapes checked: the probes may run */
	Oid			relids[4];		/* sbq.sessions, its pkey, sbq.messages, its session index */
	AttrNumber	att_queue;		/* of sbq.sessions */
	AttrNumber	att_id;
} SbqProbeRels;

#define PROBE_SESSIONS		0
#define PROBE_SKEY_IDX		1
#define PROBE_MESSAGES		2
#define PROBE_MSESS_IDX		3

static SbqProbeRels sbq_probe_rels;

static void
sbq_probe_inval(Datum arg, Oid relid)
{
	int			i;

	for (i = 0; i < 4 && sbq_probe_rels.valid; i++)
		if (!OidIsValid(relid) || relid == sbq_probe_rels.relids[i])
			sbq_probe_rels.valid = false;
}

/* Whether the shapes of the four relations (opened) are the ones the probes read. */
static bool
sbq_probe_shapes_fit(Relation *rels, AttrNumber att_queue, AttrNumber att_id)
{
	static const char *const skey_cols[] = {"session_key"};
	static const char *const msess_cols[] = {"queue_id", "session_id", "state"};
	TupleDesc	sdesc = RelationGetDescr(rels[PROBE_SESSIONS]);
	TupleDesc	mdesc = RelationGetDescr(rels[PROBE_MESSAGES]);
	int2vector *skey;
	int2vector *msess;

	if (rels[PROBE_SESSIONS]->rd_rel->relkind != RELKIND_RELATION ||
		rels[PROBE_MESSAGES]->rd_rel->relkind != RELKIND_RELATION ||
		rels[PROBE_SKEY_IDX]->rd_rel->relkind != RELKIND_INDEX ||
		rels[PROBE_MSESS_IDX]->rd_rel->relkind != RELKIND_INDEX ||
		!sbq_probe_index_fits(rels[PROBE_SKEY_IDX], RelationGetRelid(rels[PROBE_SESSIONS]),
							  skey_cols, 1, -1) ||
		!sbq_probe_index_fits(rels[PROBE_MSESS_IDX], RelationGetRelid(rels[PROBE_MESSAGES]),
							  msess_cols, 3, 1) ||
		att_queue <= 0 || att_id <= 0 ||
		TupleDescAttr(sdesc, att_queue - 1)->atttypid != INT4OID ||
		TupleDescAttr(sdesc, att_id - 1)->atttypid != TEXTOID)
		return false;
	skey = &rels[PROBE_SKEY_IDX]->rd_index->indkey;
	msess = &rels[PROBE_MSESS_IDX]->rd_index->indkey;
	return TupleDescAttr(sdesc, skey->values[0] - 1)->atttypid == INT8OID &&
		TupleDescAttr(mdesc, msess->values[0] - 1)->atttypid == INT4OID &&
		TupleDescAttr(mdesc, msess->values[1] - 1)->atttypid == TEXTOID &&
		TupleDescAttr(mdesc, msess->values[2] - 1)->atttypid == INT2OID;
}

/* Look up what sbq_probe_rels keeps, by name: false when something is missing. */
static bool
sbq_probe_lookup(SbqProbeRels *p)
{
	static const char *const names[4] = {"sessions", "sessions_pkey", "messages",
	"messages_session_idx"};
	Oid			nsp = get_namespace_oid("sbq", true);
	int			i;

	if (!OidIsValid(nsp))
		return false;
	for (i = 0; i < 4; i++)
		if (!OidIsValid(p->relids[i] = get_relname_relid(names[i], nsp)))
			return false;
	p->att_queue = get_attnum(p->relids[PROBE_SESSIONS], "queue_id");
	p->att_id = get_attnum(p->relids[PROBE_SESSIONS], "session_id");
	p->fits = true;				/* until the shapes are checked, with the relations open */
	p->valid = true;
	return true;
}

/*
 * Open (AccessShareLock) the four relations the probes read into rels: false,
 * with none left open, when one is missing, its shape is not the one the
 * probes read, or it changed while they were opened.
 */
static bool
sbq_probe_open(Relation *rels)
{
	SbqProbeRels *p = &sbq_probe_rels;
	bool		first = !p->valid;
	int			i;

	sbq_on_relcache_inval(sbq_probe_inval);
	if ((first && !sbq_probe_lookup(p)) || !p->fits)
		return false;
	for (i = 0; i < 4; i++)
		if ((rels[i] = try_relation_open(p->relids[i], AccessShareLock)) == NULL)
			break;
	if (i == 4 && first)
		p->fits = sbq_probe_shapes_fit(rels, p->att_queue, p->att_id);
	/* an invalidation taken in while they were opened may have changed them */
	if (i == 4 && p->valid && p->fits)
		return true;
	while (--i >= 0)
		relation_close(rels[i], AccessShareLock);
	return false;
}

/*
 * The session this backend has just accepted, having seen a message waiting
 * in it: the first receive under it, which nearly always finds some, goes
 * straight to the statement.
 */
static int64 sbq_probe_skip_key = 0;

/* sbq_session_probe_skip: the next probe of key's session answers "not sure" */
void
sbq_session_probe_skip(int64 key)
{
	sbq_probe_skip_key = key;
}

/*
 * sbq_session_surely_empty
 *		True when the session of key (of queue_id) has no message in state 0
 *		that the statement reading its next messages would see if it ran now;
 *		false when it has one, or when this cannot tell (see the header).
 */
bool
sbq_session_surely_empty(int32 queue_id, int64 key)
{
	Relation	rels[4];
	ScanKeyData keys[3];
	TupleTableSlot *slot;
	Snapshot	snap;
	Datum		id = (Datum) 0;
	bool		isnull = true;
	bool		empty = false;
	int			i;

	if (key == sbq_probe_skip_key)
	{
		sbq_probe_skip_key = 0;
		return false;
	}
	if (sbq_dist_active() || !sbq_probe_open(rels))
		return false;
	if (!sbq_probe_table_fits(rels[PROBE_SESSIONS]) || !sbq_probe_table_fits(rels[PROBE_MESSAGES]))
		goto done;

	/* the snapshot the statement would take (SPI, not read-only) */
	PushActiveSnapshot(GetTransactionSnapshot());
	CommandCounterIncrement();
	UpdateActiveSnapshotCommandId();
	snap = GetActiveSnapshot();

	/* the session's row, by its key: its id */
	slot = table_slot_create(rels[PROBE_SESSIONS], NULL);
	sbq_probe_key(&keys[0], rels[PROBE_SKEY_IDX], 1, F_INT8EQ, Int64GetDatum(key));
	if (sbq_probe_first(rels[PROBE_SESSIONS], rels[PROBE_SKEY_IDX], snap, keys, 1, slot) &&
		DatumGetInt32(slot_getattr(slot, sbq_probe_rels.att_queue, &isnull)) == queue_id &&
		!isnull)
	{
		id = slot_getattr(slot, sbq_probe_rels.att_id, &isnull);
		if (!isnull)
			id = PointerGetDatum(PG_DETOAST_DATUM_COPY(id));
	}
	else
		isnull = true;
	ExecDropSingleTupleTableSlot(slot);

	/* its first message in state 0, if any */
	if (!isnull)
	{
		Relation	idx = rels[PROBE_MSESS_IDX];

		slot = table_slot_create(rels[PROBE_MESSAGES], NULL);
		sbq_probe_key(&keys[0], idx, 1, F_INT4EQ, Int32GetDatum(queue_id));
		sbq_probe_key(&keys[1], idx, 2, F_TEXTEQ, id);
		sbq_probe_key(&keys[2], idx, 3, F_INT2EQ, Int16GetDatum(0));
		empty = !sbq_probe_first(rels[PROBE_MESSAGES], idx, snap, keys, 3, slot);
		ExecDropSingleTupleTableSlot(slot);
		pfree(DatumGetPointer(id));
	}
	PopActiveSnapshot();

done:
	for (i = 3; i >= 0; i--)
		relation_close(rels[i], NoLock);
	return empty;
}
