/*-------------------------------------------------------------------------
 *
 * session_probe.c
 *	  Looks at sessions through the indexes, in place of statements, for
 *	  the calls of a session drain (session_mem.c, lease_receive.c).
 *
 * A drain of a session takes an accept-next, a receive or more, the receive
 * that finds it empty, and a release; with the session locks in shared
 * memory, statements were most of their cost, and starting a statement (its
 * plan checked, its projection and sub-selects built) cost more than the
 * few index entries it read. So where a statement only asked whether a
 * session has messages, or read the sessions in line one after another, the
 * indexes are read directly:
 *	- the receive that would find a session empty: its row by its key
 *	  (sessions_pkey), then its first message in state 0
 *	  (messages_session_idx); none, and the receive returns none without
 *	  the statement that reads a session's next messages. The first receive
 *	  after accept-next, which nearly always finds some, does not look;
 *	- accept-next's look at each session (is a message available in it: in
 *	  state 0, no lock stored in its row, not expired);
 *	- accept-next's walk of the line (sessions_ready_idx, in order), one
 *	  session at a time, where the statement read sixteen (a new snapshot
 *	  for each sixteen, as the statement took). It starts at the line's
 *	  floor (qstate.c), not at the start of the line: it reads every row
 *	  version an entry leads to and judges each against its snapshot, and
 *	  raises the floor to the first entry that is not gone for good (a
 *	  version deleted before the snapshot, or never committed), so that the
 *	  entries of sessions drained under a snapshot held open elsewhere,
 *	  which no scan may mark dead, are passed once rather than by every
 *	  walk;
 *	- a release that finds no message of the session active or deferred:
 *	  the session's ready mark is then all its look would have read.
 * Each look takes the snapshot its statement would have taken (SPI's for a
 * statement that is not read-only: a new one in READ COMMITTED, the
 * transaction's, or for a statement run by sbq_exec_latest the latest,
 * otherwise; after the same command counter increment, so that what the
 * caller's own transaction did is seen), and where the statement found a
 * message the look finds it too; anything it is not sure of (a message
 * there at all, for the receive) runs the statement, which decides as
 * before.
 *
 * The indexes are read only when they are the ones these looks know: the
 * tables of a single server (not a distributed layout's shards), each index
 * a valid btree over the columns named above, ascending, in each column's
 * own (deterministic) collation and its type's default operator family,
 * partial on exactly the NOT NULL its scans imply (the line's index must
 * be), and usable by the transaction's snapshots; no row security, no table
 * inheriting from them, and SELECT granted on the tables to the user the
 * statements would run as. Anything else answers "not sure", and the
 * statement runs. What is looked up by name is kept until a relcache
 * invalidation of one of the relations.
 *
 * Owns: nothing shared. Locks: AccessShareLock on sbq.sessions,
 * sbq.messages and their three indexes read here, as the statements take.
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
#include "access/heapam.h"
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
#include "commands/defrem.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "nodes/primnodes.h"
#include "storage/bufmgr.h"
#include "storage/predicate.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "distributed.h"
#include "qstate.h"
#include "session_mem.h"
#include "storage_core.h"

/*
 * An index to probe: a valid btree whose first key columns are cols, in
 * order, ascending, on no expression, each with its column's collation (a
 * deterministic one) and its type's default operator family. Partial only on
 * "cols[notnull] IS NOT NULL" (notnull >= 0), which a probe with a value for
 * that column implies; with need_pred, it must be (a walk of its entries
 * takes the predicate for granted).
 */
static bool
sbq_probe_index_fits(Relation idx, Relation rel, const char *const *cols, int ncols,
					 int notnull, bool need_pred)
{
	Form_pg_index ind = idx->rd_index;
	Oid			relid = RelationGetRelid(rel);
	int			i;

	if (idx->rd_rel->relam != BTREE_AM_OID || ind->indrelid != relid || !ind->indisvalid ||
		!ind->indisready || ind->indnkeyatts < ncols ||
		!heap_attisnull(idx->rd_indextuple, Anum_pg_index_indexprs, NULL))
		return false;
	for (i = 0; i < ncols; i++)
	{
		AttrNumber	att = ind->indkey.values[i];
		Form_pg_attribute a;
		Oid			opclass;

		if (att <= 0 || att > RelationGetDescr(rel)->natts || att != get_attnum(relid, cols[i]) ||
			idx->rd_indoption[i] != 0)
			return false;
		a = TupleDescAttr(RelationGetDescr(rel), att - 1);
		opclass = GetDefaultOpClass(a->atttypid, BTREE_AM_OID);
		if (idx->rd_indcollation[i] != a->attcollation ||
			(OidIsValid(a->attcollation) && !get_collation_isdeterministic(a->attcollation)) ||
			!OidIsValid(opclass) || idx->rd_opfamily[i] != get_opclass_family(opclass))
			return false;
	}
	if (!heap_attisnull(idx->rd_indextuple, Anum_pg_index_indpred, NULL))
	{
		List	   *pred = RelationGetIndexPredicate(idx);
		NullTest   *nt = list_length(pred) == 1 ? (NullTest *) linitial(pred) : NULL;

		if (notnull < 0 || nt == NULL || !IsA(nt, NullTest) ||
			nt->nulltesttype != IS_NOT_NULL || nt->argisrow || !IsA(nt->arg, Var) ||
			((Var *) nt->arg)->varattno != ind->indkey.values[notnull])
			return false;
	}
	else if (need_pred)
		return false;
	return true;
}

/*
 * Whether an index that fits may serve this transaction's snapshots: one made
 * over broken HOT chains may not until every snapshot is younger than it, as
 * the planner judges (indcheckxmin).
 */
static bool
sbq_probe_index_usable(Relation idx)
{
	return !idx->rd_index->indcheckxmin ||
		TransactionIdPrecedes(HeapTupleHeaderGetXmin(idx->rd_indextuple->t_data),
							  TransactionXmin);
}

/*
 * A table to probe: a plain one, without row security or tables inheriting
 * from it (which a statement would read too), that the current user may read.
 */
static bool
sbq_probe_table_fits(Relation rel)
{
	return rel->rd_rel->relkind == RELKIND_RELATION && !rel->rd_rel->relrowsecurity &&
		!rel->rd_rel->relhassubclass &&
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
#define PROBE_SESSIONS		0	/* sbq.sessions */
#define PROBE_SKEY_IDX		1	/* its primary key */
#define PROBE_MESSAGES		2	/* sbq.messages */
#define PROBE_MSESS_IDX		3	/* its index of each session's messages */
#define PROBE_READY_IDX		4	/* sbq.sessions' index of the line for accept-next */
#define PROBE_RELS			5

typedef struct SbqProbeRels
{
	bool		valid;			/* looked up, and no invalidation of them since */
	bool		checked;		/* their shapes checked, with the relations open */
	bool		fits;			/* and found to be what the probes read */
	Oid			relids[PROBE_RELS];	/* see PROBE_SESSIONS ... */
	AttrNumber	att_queue;		/* of sbq.sessions */
	AttrNumber	att_key;
	AttrNumber	att_token;
	AttrNumber	att_id;
	AttrNumber	att_ready;
	AttrNumber	att_lock;		/* of sbq.messages */
	AttrNumber	att_expires;
} SbqProbeRels;

static SbqProbeRels sbq_probe_rels;

/* a walk of a queue's line for accept-next (see sbq_session_line_begin) */
#define SBQ_LINE_SNAPSHOT		16

struct SbqSessionLine
{
	Relation	rels[PROBE_RELS];
	int32		queue_id;
	Oid			epoch;			/* of the line's floor (qstate.c) */
	SbqLine		floor;			/* as read before the first snapshot */
	bool		have_floor;		/* read, and not yet raised */
	Snapshot	snap;			/* registered */
	IndexScanDesc scan;
	TupleTableSlot *slot;
	int			read;			/* sessions read under snap */
	bool		more;			/* the entry's HOT chain has more row versions */
	bool		entry_open;		/* an entry is being read */
	bool		entry_live;		/* a version of it that is not gone was read */
	bool		entry_dead;		/* every version of the entry read so far is dead to all */
	bool		fixed;			/* an entry that is not gone was read */
	int			gone_after;		/* entries gone for good read after it */
	struct GlobalVisState *vistest;	/* what "dead to all" is judged by */
	int64		after;
	AttrNumber	att_queue;		/* as looked up when the walk began */
	AttrNumber	att_key;
	AttrNumber	att_ready;
	AttrNumber	att_token;
	AttrNumber	att_id;
};

/* invalidations that may concern what is kept, and whether a look-up runs */
static uint64 sbq_probe_invals = 0;
static bool sbq_probe_looking = false;

static void
sbq_probe_inval(Datum arg, Oid relid)
{
	int			i;
	bool		hit = sbq_probe_looking || !OidIsValid(relid);

	for (i = 0; i < PROBE_RELS && !hit && sbq_probe_rels.valid; i++)
		hit = relid == sbq_probe_rels.relids[i];
	if (hit)
	{
		sbq_probe_rels.valid = false;
		sbq_probe_invals++;
	}
}

/* Whether column att (from 1) of desc is there, of type typid. */
static bool
sbq_probe_col(TupleDesc desc, AttrNumber att, Oid typid)
{
	return att > 0 && att <= desc->natts && !TupleDescAttr(desc, att - 1)->attisdropped &&
		TupleDescAttr(desc, att - 1)->atttypid == typid;
}

/* Whether the shapes of the relations (opened) are the ones the probes read. */
static bool
sbq_probe_shapes_fit(Relation *rels, const SbqProbeRels *p)
{
	static const char *const skey_cols[] = {"session_key"};
	static const char *const msess_cols[] = {"queue_id", "session_id", "state"};
	static const char *const ready_cols[] = {"queue_id", "ready_seq"};
	TupleDesc	sdesc = RelationGetDescr(rels[PROBE_SESSIONS]);
	TupleDesc	mdesc = RelationGetDescr(rels[PROBE_MESSAGES]);
	int2vector *skey;
	int2vector *msess;

	if (rels[PROBE_SESSIONS]->rd_rel->relkind != RELKIND_RELATION ||
		rels[PROBE_MESSAGES]->rd_rel->relkind != RELKIND_RELATION ||
		rels[PROBE_SKEY_IDX]->rd_rel->relkind != RELKIND_INDEX ||
		rels[PROBE_MSESS_IDX]->rd_rel->relkind != RELKIND_INDEX ||
		rels[PROBE_READY_IDX]->rd_rel->relkind != RELKIND_INDEX ||
		!sbq_probe_index_fits(rels[PROBE_READY_IDX], rels[PROBE_SESSIONS], ready_cols, 2, 1,
							  true) ||
		!sbq_probe_index_fits(rels[PROBE_SKEY_IDX], rels[PROBE_SESSIONS], skey_cols, 1, -1,
							  false) ||
		!sbq_probe_index_fits(rels[PROBE_MSESS_IDX], rels[PROBE_MESSAGES], msess_cols, 3, 1,
							  false))
		return false;
	skey = &rels[PROBE_SKEY_IDX]->rd_index->indkey;
	msess = &rels[PROBE_MSESS_IDX]->rd_index->indkey;
	if (p->att_id <= 0 || p->att_id > sdesc->natts ||
		TupleDescAttr(sdesc, p->att_id - 1)->attcollation !=
		TupleDescAttr(mdesc, msess->values[1] - 1)->attcollation)
		return false;
	return skey->values[0] == p->att_key &&
		sbq_probe_col(sdesc, p->att_key, INT8OID) &&
		sbq_probe_col(sdesc, p->att_token, UUIDOID) &&
		sbq_probe_col(sdesc, p->att_queue, INT4OID) &&
		sbq_probe_col(sdesc, p->att_id, TEXTOID) &&
		sbq_probe_col(sdesc, p->att_ready, INT8OID) &&
		sbq_probe_col(mdesc, msess->values[0], INT4OID) &&
		sbq_probe_col(mdesc, msess->values[1], TEXTOID) &&
		sbq_probe_col(mdesc, msess->values[2], INT2OID) &&
		sbq_probe_col(mdesc, p->att_lock, UUIDOID) &&
		sbq_probe_col(mdesc, p->att_expires, TIMESTAMPTZOID);
}

/*
 * Look up what sbq_probe_rels keeps, by name: false when something is
 * missing, or an invalidation came in meanwhile (what was read may be old).
 */
static bool
sbq_probe_lookup(SbqProbeRels *p)
{
	static const char *const names[PROBE_RELS] = {"sessions", "sessions_pkey", "messages",
	"messages_session_idx", "sessions_ready_idx"};
	uint64		invals = sbq_probe_invals;
	Oid			nsp;
	bool		found = true;
	int			i;

	sbq_probe_looking = true;
	nsp = get_namespace_oid("sbq", true);
	for (i = 0; i < PROBE_RELS && found; i++)
		found = OidIsValid(nsp) && OidIsValid(p->relids[i] = get_relname_relid(names[i], nsp));
	if (found)
	{
		p->att_key = get_attnum(p->relids[PROBE_SESSIONS], "session_key");
		p->att_token = get_attnum(p->relids[PROBE_SESSIONS], "session_token");
		p->att_queue = get_attnum(p->relids[PROBE_SESSIONS], "queue_id");
		p->att_id = get_attnum(p->relids[PROBE_SESSIONS], "session_id");
		p->att_ready = get_attnum(p->relids[PROBE_SESSIONS], "ready_seq");
		p->att_lock = get_attnum(p->relids[PROBE_MESSAGES], "lock_token");
		p->att_expires = get_attnum(p->relids[PROBE_MESSAGES], "expires_at");
	}
	sbq_probe_looking = false;
	if (!found || invals != sbq_probe_invals)
		return false;
	p->checked = false;
	p->valid = true;
	return true;
}

/*
 * Open (AccessShareLock) the relations the probes read into rels: false,
 * with none left open, when one is missing, its shape is not the one the
 * probes read, or it changed while they were opened.
 */
static bool
sbq_probe_open(Relation *rels)
{
	SbqProbeRels *p = &sbq_probe_rels;
	int			i;

	sbq_on_relcache_inval(sbq_probe_inval);
	if ((!p->valid && !sbq_probe_lookup(p)) || (p->checked && !p->fits))
		return false;
	for (i = 0; i < PROBE_RELS; i++)
		if ((rels[i] = try_relation_open(p->relids[i], AccessShareLock)) == NULL)
			break;
	/* an invalidation taken in while they were opened may have changed them */
	if (i == PROBE_RELS && p->valid && !p->checked)
	{
		p->fits = sbq_probe_shapes_fit(rels, p);
		p->checked = true;
	}
	if (i == PROBE_RELS && p->valid && p->fits &&
		sbq_probe_index_usable(rels[PROBE_SKEY_IDX]) &&
		sbq_probe_index_usable(rels[PROBE_MSESS_IDX]) &&
		sbq_probe_index_usable(rels[PROBE_READY_IDX]))
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

/*
 * sbq_session_probe_skip: the next probe of key's session for a receive
 * answers "not sure" (in a later transaction too: a client that accepts and
 * receives in two is the usual case, and "not sure" only ever runs the
 * statement)
 */
void
sbq_session_probe_skip(int64 key)
{
	sbq_probe_skip_key = key;
}

/*
 * Whether a message row (in slot) counts for the probe: any, or with
 * p->available only one with no lock stored in it and not expired at p->now
 * (what accept-next's look counts as available).
 */
static bool
sbq_probe_counts(const SbqSessionProbe *p, TupleTableSlot *slot)
{
	bool		isnull;
	Datum		exp;

	if (!p->available)
		return true;
	(void) slot_getattr(slot, sbq_probe_rels.att_lock, &isnull);
	if (!isnull)
		return false;
	exp = slot_getattr(slot, sbq_probe_rels.att_expires, &isnull);
	return isnull || DatumGetTimestampTz(exp) > p->now;
}

/*
 * The probes, on the relations opened, with snap: the session's row, then
 * its messages in each of p->states.
 */
static SbqProbeResult
sbq_probe_run(SbqSessionProbe *p, Relation *rels, Snapshot snap)
{
	ScanKeyData keys[3];
	TupleTableSlot *slot;
	Relation	idx = rels[PROBE_MSESS_IDX];
	Datum		id;
	Datum		ready;
	bool		isnull;
	SbqProbeResult result = SBQ_PROBE_NONE;
	int			i;

	/* the session's row, by its key: its queue, id and ready mark */
	slot = table_slot_create(rels[PROBE_SESSIONS], NULL);
	sbq_probe_key(&keys[0], rels[PROBE_SKEY_IDX], 1, F_INT8EQ, Int64GetDatum(p->key));
	if (!sbq_probe_first(rels[PROBE_SESSIONS], rels[PROBE_SKEY_IDX], snap, keys, 1, slot))
	{
		ExecDropSingleTupleTableSlot(slot);
		return SBQ_PROBE_NO_ROW;
	}
	if (DatumGetInt32(slot_getattr(slot, sbq_probe_rels.att_queue, &isnull)) != p->queue_id ||
		isnull)
	{
		ExecDropSingleTupleTableSlot(slot);
		return SBQ_PROBE_UNSURE;
	}
	ready = slot_getattr(slot, sbq_probe_rels.att_ready, &p->ready_null);
	p->ready_seq = p->ready_null ? 0 : DatumGetInt64(ready);
	id = slot_getattr(slot, sbq_probe_rels.att_id, &isnull);
	if (!isnull)
		id = PointerGetDatum(PG_DETOAST_DATUM_COPY(id));
	ExecDropSingleTupleTableSlot(slot);
	if (isnull)
		return SBQ_PROBE_UNSURE;

	/* its messages in each state asked for, until one counts */
	slot = table_slot_create(rels[PROBE_MESSAGES], NULL);
	for (i = 0; i < p->nstates && result == SBQ_PROBE_NONE; i++)
	{
		IndexScanDesc scan;

		sbq_probe_key(&keys[0], idx, 1, F_INT4EQ, Int32GetDatum(p->queue_id));
		sbq_probe_key(&keys[1], idx, 2, F_TEXTEQ, id);
		sbq_probe_key(&keys[2], idx, 3, F_INT2EQ, Int16GetDatum(p->states[i]));
		scan = index_beginscan(rels[PROBE_MESSAGES], idx, snap, 3, 0);
		index_rescan(scan, keys, 3, NULL, 0);
		while (index_getnext_slot(scan, ForwardScanDirection, slot))
		{
			CHECK_FOR_INTERRUPTS();
			if (sbq_probe_counts(p, slot))
			{
				result = SBQ_PROBE_SOME;
				break;
			}
		}
		index_endscan(scan);
	}
	ExecDropSingleTupleTableSlot(slot);
	pfree(DatumGetPointer(id));
	return result;
}

/*
 * Push and return the snapshot that SPI takes for a statement that is not
 * read-only: run by sbq_exec_latest (latest), or by sbq_exec.
 */
static Snapshot
sbq_probe_snapshot(bool latest)
{
	if (latest && IsolationUsesXactSnapshot())
		PushCopiedSnapshot(GetLatestSnapshot());
	else
		PushActiveSnapshot(GetTransactionSnapshot());
	CommandCounterIncrement();
	UpdateActiveSnapshotCommandId();
	return GetActiveSnapshot();
}

/*
 * sbq_session_probe
 *		Look at the session of p->key (of p->queue_id) through the indexes,
 *		with the snapshot the statement it stands for would take: p->latest
 *		a statement run by sbq_exec_latest, else by sbq_exec. SBQ_PROBE_NO_ROW:
 *		the session has no row; SBQ_PROBE_NONE: it has (its ready mark in
 *		p->ready_seq, p->ready_null) and none of its messages in p->states
 *		counts (see sbq_probe_counts); SBQ_PROBE_SOME: one does;
 *		SBQ_PROBE_UNSURE: this cannot tell (see the header), and the
 *		statement must run. Within a walk of the line (line), on the
 *		relations the walk opened and checked, held until it ends.
 */
SbqProbeResult
sbq_session_probe(SbqSessionProbe *p, const SbqSessionLine *line)
{
	Relation	rels[PROBE_RELS];
	SbqProbeResult result = SBQ_PROBE_UNSURE;
	int			i;

	/* within a walk of the line, on the relations it opened and checked */
	if (line != NULL)
	{
		result = sbq_probe_run(p, (Relation *) line->rels, sbq_probe_snapshot(p->latest));
		PopActiveSnapshot();
		return result;
	}
	if (sbq_dist_active() || !sbq_probe_open(rels))
		return SBQ_PROBE_UNSURE;
	if (sbq_probe_table_fits(rels[PROBE_SESSIONS]) && sbq_probe_table_fits(rels[PROBE_MESSAGES]))
	{
		result = sbq_probe_run(p, rels, sbq_probe_snapshot(p->latest));
		PopActiveSnapshot();
	}
	for (i = PROBE_RELS - 1; i >= 0; i--)
		relation_close(rels[i], NoLock);
	return result;
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
	SbqSessionProbe p = {0};

	if (key == sbq_probe_skip_key)
	{
		sbq_probe_skip_key = 0;
		return false;
	}
	p.queue_id = queue_id;
	p.key = key;
	p.nstates = 1;
	p.states[0] = 0;
	return sbq_session_probe(&p, NULL) == SBQ_PROBE_NONE;
}

/*
 * A walk of a queue's line for accept-next (sessions_ready_idx, in order),
 * one session at a time, in place of the statement that read sixteen at a
 * time: nearly always the first one it offers is taken. As the statement
 * took a new snapshot for each sixteen, the walk takes one for each
 * SBQ_LINE_SNAPSHOT sessions, going on after the last one's mark, so that a
 * long walk sees the sessions that joined the line meanwhile.
 */

/*
 * (Re)start the walk's scan under its snapshot, after l->after (the last
 * mark it read, or below its floor). The index page it was on is left: an
 * index scan that returns its entries keeps its page pinned, and vacuum
 * would wait for it while the caller runs its statements.
 */
static void
sbq_line_restart(SbqSessionLine *l)
{
	Relation	idx = l->rels[PROBE_READY_IDX];
	ScanKeyData keys[2];

	sbq_probe_key(&keys[0], idx, 1, F_INT4EQ, Int32GetDatum(l->queue_id));
	ScanKeyEntryInitialize(&keys[1], 0, 2, BTGreaterStrategyNumber, InvalidOid,
						   idx->rd_indcollation[1], F_INT8GT, Int64GetDatum(l->after));
	index_rescan(l->scan, keys, 2, NULL, 0);
	l->more = false;
	l->entry_open = false;
	l->entry_dead = false;
}

/* (Re)start the walk's scan with a new snapshot. */
static void
sbq_line_scan(SbqSessionLine *l)
{
	if (l->scan != NULL)
	{
		index_endscan(l->scan);
		UnregisterSnapshot(l->snap);
	}
	l->snap = RegisterSnapshot(sbq_probe_snapshot(true));
	PopActiveSnapshot();

	/*
	 * The index is scanned under l->snap (its predicate locks are those of
	 * the statement's scan); the table is read with every row version, each
	 * judged against l->snap (sbq_line_next_row).
	 */
	l->scan = index_beginscan(l->rels[PROBE_SESSIONS], l->rels[PROBE_READY_IDX], l->snap,
							  2, 0);
	/*
	 * Its entries too: a version read must be the entry's (sbq_line_judge).
	 * So the scan keeps the page it reads pinned, and vacuum cannot free
	 * the place of an entry's row while the walk is there.
	 */
	l->scan->xs_want_itup = true;
	sbq_line_restart(l);
	l->read = 0;
}

/* what a row version of the line is to a walk */
typedef enum SbqLineRow
{
	SBQ_LINE_VISIBLE,			/* in the walk's snapshot */
	SBQ_LINE_GONE,				/* deleted, or never committed: for every snapshot to come */
	SBQ_LINE_MAYBE				/* not in the snapshot, but may be in a later one */
} SbqLineRow;

/*
 * What the row version in slot (from sbq_line_next_row) is to the walk's
 * snapshot; predicate locks and conflicts as an index scan under that
 * snapshot takes them.
 */
static SbqLineRow
sbq_line_judge(SbqSessionLine *l, TupleTableSlot *slot)
{
	BufferHeapTupleTableSlot *bslot = (BufferHeapTupleTableSlot *) slot;
	HeapTuple	tuple = bslot->base.tuple;
	Buffer		buffer = bslot->buffer;
	Relation	rel = l->rels[PROBE_SESSIONS];
	IndexTuple	itup = l->scan->xs_itup;
	TupleDesc	idesc = l->scan->xs_itupdesc;
	SbqLineRow	row;
	bool		visible;
	bool		inull[2];
	bool		hnull[2];
	Datum		iq;
	Datum		ir;
	Datum		hq;
	Datum		hr;

	/*
	 * Only a version with the entry's queue and mark is the entry's. (While
	 * the scan is on the entry's index page it keeps the page pinned, and
	 * vacuum cannot have removed the entry and freed its row's place for
	 * another row; this is a check of that, should it change.)
	 */
	iq = index_getattr(itup, 1, idesc, &inull[0]);
	ir = index_getattr(itup, 2, idesc, &inull[1]);
	hq = slot_getattr(slot, l->att_queue, &hnull[0]);
	hr = slot_getattr(slot, l->att_ready, &hnull[1]);
	if (inull[0] || inull[1] || hnull[0] || hnull[1] || DatumGetInt32(hq) != DatumGetInt32(iq) ||
		DatumGetInt64(hr) != DatumGetInt64(ir))
	{
		l->entry_dead = false;	/* (not the entry's: not judged) */
		return SBQ_LINE_GONE;
	}

	LockBuffer(buffer, BUFFER_LOCK_SHARE);
	visible = HeapTupleSatisfiesVisibility(tuple, l->snap, buffer);
	HeapCheckForSerializableConflictOut(visible, rel, tuple, buffer, l->snap);
	if (visible)
	{
		row = SBQ_LINE_VISIBLE;
		SBQ_PREDICATE_LOCK_TUPLE(rel, tuple, l->snap);
	}
	else
	{
		/*
		 * Gone: deleted by a transaction that committed before the snapshot
		 * (whatever replaced it was indexed before then: the scan, which
		 * started after, reads that entry), or inserted by one that aborted.
		 * Anything else not in the snapshot (an insert or a delete in
		 * progress, an insert that committed after it) may be in a later
		 * one. This transaction's own row versions are never gone: a
		 * rollback to a savepoint may bring them back.
		 */
		TransactionId xmin = HeapTupleHeaderGetXmin(tuple->t_data);

		row = SBQ_LINE_MAYBE;
		switch (HeapTupleSatisfiesVacuum(tuple, InvalidTransactionId, buffer))
		{
			case HEAPTUPLE_DEAD:
			case HEAPTUPLE_RECENTLY_DEAD:
				if (!TransactionIdIsCurrentTransactionId(xmin) &&
					!XidInMVCCSnapshot(xmin, l->snap))
					row = SBQ_LINE_GONE;
				break;
			default:
				break;
		}
	}
	/* dead to every transaction: the entry may be marked dead, as an index scan marks it */
	if (row != SBQ_LINE_GONE || !SBQ_TUPLE_SURELY_DEAD(tuple, l->vistest))
		l->entry_dead = false;
	if (row != SBQ_LINE_GONE)
		l->entry_live = true;
	LockBuffer(buffer, BUFFER_LOCK_UNLOCK);
	return row;
}

/*
 * The next row version the walk's scan reaches, every version of each
 * entry's HOT chain in turn up to the one in the snapshot (an MVCC fetch
 * reads no further), into l->slot, judged (*row); false at the end of the
 * scan. An entry whose versions were all dead to every transaction is
 * marked dead in the index as the scan moves on, as an index scan does.
 */
static bool
sbq_line_next_row(SbqSessionLine *l, SbqLineRow *row)
{
	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (!l->more)
		{
			/* (not one dead to all: it is marked dead, and later walks pass it cheaply) */
			if (l->entry_open && !l->entry_live && !l->entry_dead && l->fixed)
				l->gone_after++;
			if (l->entry_dead && !l->scan->xactStartedInRecovery)
				l->scan->kill_prior_tuple = true;
			l->entry_open = false;
			if (index_getnext_tid(l->scan, ForwardScanDirection) == NULL)
				return false;
			l->entry_open = true;
			l->entry_live = false;
			l->entry_dead = true;
		}
		if (!table_index_fetch_tuple(l->scan->xs_heapfetch, &l->scan->xs_heaptid, SnapshotAny,
									 l->slot, &l->more, NULL))
			continue;			/* the end of the chain */
		pgstat_count_heap_fetch(l->scan->indexRelation);
		*row = sbq_line_judge(l, l->slot);
		if (*row == SBQ_LINE_VISIBLE)
			l->more = false;
		return true;
	}
}

/*
 * The first entry of the walk that is not gone has mark: no entry below it
 * is there for a snapshot to come, and the line's floor may rise to it.
 */
static void
sbq_line_floor(SbqSessionLine *l, int64 mark)
{
	l->fixed = true;
	if (l->have_floor)
		sbq_qstate_line_raise(l->epoch, l->queue_id, &l->floor, mark);
	l->have_floor = false;
}

/*
 * sbq_session_line_begin
 *		Start a walk of queue_id's line after the mark start (PG_INT64_MIN:
 *		from its front), with the snapshot of a statement run by
 *		sbq_exec_latest; NULL when the indexes cannot serve (see the header),
 *		and the statement must.
 */
SbqSessionLine *
sbq_session_line_begin(int32 queue_id, int64 start)
{
	SbqSessionLine *l = palloc0(sizeof(SbqSessionLine));
	int			i;

	if (sbq_dist_active() || !sbq_probe_open(l->rels))
	{
		pfree(l);
		return NULL;
	}
	/* (the walk judges heap row versions itself: sbq_line_judge) */
	if (!sbq_probe_table_fits(l->rels[PROBE_SESSIONS]) ||
		!sbq_probe_table_fits(l->rels[PROBE_MESSAGES]) ||
		l->rels[PROBE_SESSIONS]->rd_rel->relam != HEAP_TABLE_AM_OID)
	{
		for (i = PROBE_RELS - 1; i >= 0; i--)
			relation_close(l->rels[i], NoLock);
		pfree(l);
		return NULL;
	}
	l->queue_id = queue_id;
	l->epoch = sbq_storage_epoch();
	/* the floor, then the first snapshot (see qstate.c) */
	l->have_floor = sbq_qstate_line(l->epoch, queue_id, &l->floor);
	l->after = PG_INT64_MIN;	/* (no mark is that low) */
	if (l->have_floor && l->floor.floor > PG_INT64_MIN)
		l->after = l->floor.floor - 1;
	if (start > l->after)
	{
		/* from the middle of the line: its first entry is no floor */
		l->after = start;
		l->have_floor = false;
	}
	l->vistest = SBQ_VISTEST_FOR(l->rels[PROBE_SESSIONS]);
	l->att_queue = sbq_probe_rels.att_queue;
	l->att_key = sbq_probe_rels.att_key;
	l->att_ready = sbq_probe_rels.att_ready;
	l->att_token = sbq_probe_rels.att_token;
	l->att_id = sbq_probe_rels.att_id;
	l->slot = table_slot_create(l->rels[PROBE_SESSIONS], NULL);
	sbq_line_scan(l);
	return l;
}

/*
 * sbq_session_line_next
 *		The next session in line: its key, its ready mark, whether its row
 *		stores a lock, and its id (palloc'd). False at the end of the line.
 */
bool
sbq_session_line_next(SbqSessionLine *l, int64 *key, int64 *ready, bool *row_held, char **id)
{
	bool		isnull;
	Datum		d;

	for (;;)
	{
		SbqLineRow	row;

		CHECK_FOR_INTERRUPTS();
		if (l->read >= SBQ_LINE_SNAPSHOT)
			sbq_line_scan(l);
		if (!sbq_line_next_row(l, &row))
		{
			/* all gone: the floor may rise as far as its bound */
			sbq_line_floor(l, PG_INT64_MAX);
			return false;
		}
		if (row == SBQ_LINE_GONE)
			continue;
		d = slot_getattr(l->slot, l->att_ready, &isnull);
		if (isnull)
			continue;			/* (the index holds none without a mark) */
		sbq_line_floor(l, DatumGetInt64(d));
		if (row == SBQ_LINE_VISIBLE)
			break;
	}
	l->read++;
	*ready = DatumGetInt64(d);
	l->after = *ready;
	*key = DatumGetInt64(slot_getattr(l->slot, l->att_key, &isnull));
	(void) slot_getattr(l->slot, l->att_token, &isnull);
	*row_held = !isnull;
	d = slot_getattr(l->slot, l->att_id, &isnull);
	*id = isnull ? pstrdup("") : TextDatumGetCString(d);
	/* the caller runs statements on this one: leave the pages read */
	ExecClearTuple(l->slot);
	sbq_line_restart(l);
	return true;
}

/*
 * sbq_session_line_gone
 *		How many entries gone for good the walk read after its first entry
 *		that is not: what a floor stopped by that entry (a session
 *		held there) does not spare the walks to come.
 */
int
sbq_session_line_gone(const SbqSessionLine *l)
{
	return l->gone_after;
}

/* sbq_session_line_end: the walk is over */
void
sbq_session_line_end(SbqSessionLine *l)
{
	int			i;

	index_endscan(l->scan);
	ExecDropSingleTupleTableSlot(l->slot);
	UnregisterSnapshot(l->snap);
	for (i = PROBE_RELS - 1; i >= 0; i--)
		relation_close(l->rels[i], NoLock);
	pfree(l);
}
