/*-------------------------------------------------------------------------
 *
 * send_direct.c
 *	  A plain send stored without the SQL executor: the rows go into
 *	  sbq.messages through the table access method and its indexes, as a
 *	  logical replication worker applies an INSERT.
 *
 * A send ran one INSERT ... VALUES through SPI. Starting that statement
 * (looking up its cached plan, checking the search_path it was planned
 * under, building a projection of 25 columns and the executor's nodes) cost
 * more than storing the row: about a third of a send's time in the server.
 * Here the row is built from the same arguments and stored with
 * ExecSimpleRelationInsert, which checks the table's NOT NULL and CHECK
 * constraints and inserts into every index, as the INSERT did.
 *
 * A batch's rows are stored as COPY stores them: checked one by one, then
 * put into the heap together (table_multi_insert: each page is found, locked
 * and logged once for the rows that go into it, not once a row), then given
 * their index entries one by one. A group holds at most SBQ_DIRECT_GROUP
 * rows and stops growing past SBQ_DIRECT_GROUP_BYTES of row data, so a
 * batch of large messages is not copied whole once more while it is stored;
 * what the heap copies for a group (compressed values, its array of rows) is
 * freed after it. Only sbqueue's own kind of constraints and indexes see a
 * group: where a DBA's run code (a CHECK calling a function, an index on an
 * expression), the rows are stored one by one as the INSERT stored them, so
 * that such code sees each earlier row of the batch in the heap and in every
 * index, and the first row to fail raises the error the INSERT raised.
 *
 * The executor would parse and plan the table's CHECK constraints and the
 * predicates of its partial indexes again for every row it stores in a new
 * executor state. When they are simple, as sbqueue's own are (columns
 * compared with integers or tested for NULL, on built-in kinds of index),
 * they are prepared once here, kept for the backend (for each of the last
 * tables stored into: a node of a distributed installation stores into the
 * shard of each call's group), and given to each executor state; a change to
 * the table or its indexes (a relcache invalidation of them) drops them. What
 * opening each index builds (its IndexInfo: its columns, predicate and
 * uniqueness) is kept the same way when every index is a btree: a send opens
 * and locks the indexes itself with a copy of it, where the executor built it again for
 * every store (about 5 % of a single send), and reads whether each takes
 * inserts from the index as opened, as CREATE and DROP INDEX CONCURRENTLY
 * change that. A partial index whose kept predicate reads only what every
 * row of the call shares (its queue, state, properties) and is false for
 * them is not opened at all: a plain send goes into two of sbq.messages'
 * five indexes, and opening the other three (a lock taken and released, a
 * relcache look-up each) cost about 6 % of its time.
 *
 * Anything else a DBA adds (a constraint calling a function, an index on an
 * expression or of an operator class of an extension) runs code: the
 * executor prepares it for each store, as functions are now, and the
 * settings of the storage section are pinned first, so that it runs under
 * search_path = pg_catalog, pg_temp, as it ran in the INSERT (the store runs
 * as the owner of the tables).
 *
 * It serves only when it stores exactly what the INSERT would: the table is
 * a plain one with no triggers, rules or row security, the current user may
 * insert into it and take numbers from its sequence, and every column of
 * the table (whatever version of the SQL installed it) is one this file
 * knows, with the type it expects and no type modifier. Otherwise the caller
 * runs the INSERT.
 *
 * Length: over 1,000 lines on purpose. What a backend keeps per table (the
 * column map, the prepared constraints and predicates, the index infos) is
 * one private entry whose validity (relcache invalidations, pinning while a
 * store runs) every step of a store relies on; split across files, each
 * would have to see its layout and its rules.
 *
 * Owns: nothing shared. Locks: RowExclusiveLock on sbq.messages and the
 * indexes the rows go into, as the INSERT takes (it locks every index).
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/send_direct.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "compat.h"
#include "distributed.h"
#include "storage.h"
#include "storage_core.h"

/* Where a column's value comes from. */
typedef enum SbqColSource
{
	SBQ_COL_SEQUENCE,			/* the message's new sequence number */
	SBQ_COL_ARG,				/* an argument of the send ($n) */
	SBQ_COL_MESSAGE_ID,			/* $7, or a new UUID as text */
	SBQ_COL_BODY,				/* the body */
	SBQ_COL_ZERO,				/* 0 */
	SBQ_COL_NULL,				/* nothing */
	SBQ_COL_ENTITY_KEY			/* the call's entity key (distributed tables) */
} SbqColSource;

typedef struct SbqDirectCol
{
	const char *name;
	Oid			type;
	SbqColSource source;
	int			arg;			/* for SBQ_COL_ARG: the index of $n (n - 1) */
} SbqDirectCol;

/*
 * The columns of sbq.messages and what a send stores in each: what
 * send.c's INSERT_SENT_COLS / INSERT_SENT_VALUES say, column by column. In
 * the table's order (0.11 added transfer_hops last), which is looked at first.
 */
static const SbqDirectCol sbq_direct_cols[] = {
	{"sequence_number", INT8OID, SBQ_COL_SEQUENCE, 0},
	{"queue_id", INT4OID, SBQ_COL_ARG, 0},
	{"subqueue", INT2OID, SBQ_COL_ZERO, 0},
	{"state", INT2OID, SBQ_COL_ARG, 1},
	{"delivery_count", INT4OID, SBQ_COL_ZERO, 0},
	{"lock_token", UUIDOID, SBQ_COL_NULL, 0},
	{"locked_until", TIMESTAMPTZOID, SBQ_COL_NULL, 0},
	{"enqueued_time", TIMESTAMPTZOID, SBQ_COL_ARG, 2},
	{"scheduled_enqueue_time", TIMESTAMPTZOID, SBQ_COL_ARG, 3},
	{"expires_at", TIMESTAMPTZOID, SBQ_COL_ARG, 4},
	{"time_to_live", INTERVALOID, SBQ_COL_ARG, 5},
	{"message_id", TEXTOID, SBQ_COL_MESSAGE_ID, 6},
	{"session_id", TEXTOID, SBQ_COL_ARG, 7},
	{"correlation_id", TEXTOID, SBQ_COL_ARG, 8},
	{"subject", TEXTOID, SBQ_COL_ARG, 9},
	{"content_type", TEXTOID, SBQ_COL_ARG, 10},
	{"reply_to", TEXTOID, SBQ_COL_ARG, 11},
	{"reply_to_session_id", TEXTOID, SBQ_COL_ARG, 12},
	{"to_address", TEXTOID, SBQ_COL_ARG, 13},
	{"application_properties", JSONBOID, SBQ_COL_ARG, 14},
	{"dead_letter_reason", TEXTOID, SBQ_COL_ARG, 15},
	{"dead_letter_error_description", TEXTOID, SBQ_COL_ARG, 16},
	{"dead_letter_source", TEXTOID, SBQ_COL_ARG, 17},
	{"body", BYTEAOID, SBQ_COL_BODY, 0},
	{"transfer_hops", INT2OID, SBQ_COL_ARG, 18},
	{"entity_key", INT4OID, SBQ_COL_ENTITY_KEY, 0},
};

/*
 * The entry of sbq_direct_cols for each attribute of desc (NULL for a
 * dropped one) in map; false when a column is not one of them or has
 * another type.
 */
static bool
sbq_direct_map(TupleDesc desc, const SbqDirectCol **map)
{
	int			i;

	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		int			j;

		map[i] = NULL;
		if (att->attisdropped)
			continue;
		if (i < (int) lengthof(sbq_direct_cols) &&
			strcmp(NameStr(att->attname), sbq_direct_cols[i].name) == 0)
			map[i] = &sbq_direct_cols[i];
		for (j = 0; map[i] == NULL && j < (int) lengthof(sbq_direct_cols); j++)
		{
			if (strcmp(NameStr(att->attname), sbq_direct_cols[j].name) == 0)
			{
				map[i] = &sbq_direct_cols[j];
				break;
			}
		}
		/* entity_key's default is the key the store gives it (distributed.c) */
		if (map[i] == NULL || map[i]->type != att->atttypid || att->atttypmod != -1 ||
			(att->atthasdef && map[i]->source != SBQ_COL_ENTITY_KEY) ||
			att->attgenerated != '\0' || att->attidentity != '\0')
			return false;
	}
	return true;
}

/*
 * Whether map (of desc, by sbq_direct_map) has every column of
 * sbq_direct_cols but entity_key and transfer_hops (*all), and transfer_hops
 * (*hops): the columns the send's INSERT names.
 */
static void
sbq_direct_map_complete(TupleDesc desc, const SbqDirectCol **map, bool *all, bool *hops)
{
	int			j;

	*all = true;
	*hops = false;
	for (j = 0; j < (int) lengthof(sbq_direct_cols); j++)
	{
		const SbqDirectCol *c = &sbq_direct_cols[j];
		bool		found = false;
		int			i;

		for (i = 0; i < desc->natts && !found; i++)
			found = map[i] == c;
		if (strcmp(c->name, "transfer_hops") == 0)
			*hops = found;
		else if (!found && c->source != SBQ_COL_ENTITY_KEY)
			*all = false;
	}
}

/*
 * What is kept of a table stored into: its column map, and the prepared
 * CHECK constraints of sbq.messages and predicates of its partial indexes.
 * One entry per table, for the SBQ_DIRECT_KEPT tables last stored into: a
 * node of a distributed installation stores into the shard of each call's
 * group, several of them in turn. An entry is kept until a relcache
 * invalidation of its table (any change to its columns, constraints or
 * indexes is one); while a store uses it (pinned), the invalidation only
 * marks it, and it is dropped when that store ends.
 */
#define SBQ_DIRECT_KEPT 16

typedef struct SbqDirectKept
{
	Oid			relid;			/* InvalidOid: a free entry */
	uint64		used;			/* when last pinned: the oldest is replaced */
	bool		in_use;			/* pinned by a store in progress */
	bool		stale;			/* invalidated while pinned: drop it after */
	MemoryContext map_cxt;
	MemoryContext exprs_cxt;
	/* the column map: valid while map != NULL and natts is the table's */
	int			natts;
	bool		map_ok;
	bool		map_all;		/* every column the INSERT names is there */
	bool		map_hops;		/* ... transfer_hops among them */
	const SbqDirectCol **map;
	/* the constraints and predicates: valid while exprs_valid */
	bool		exprs_valid;
	int			ncheck;
	char	  **ccbin;			/* the constraints as prepared */
	ExprState **checks;
	int			nindex;
	Oid		   *index_oids;
	ExprState **predicates;		/* NULL for an index with none */
	Bitmapset **pred_attrs;		/* the columns each predicate reads (pull_varattnos) */
	bool		simple;			/* all of them simple (sbq_direct_simple): used */
	IndexInfo **infos;			/* what opening each index builds, when simple */
	bool		infos_kept;		/* ... and every index is a btree without exclusion */
} SbqDirectKept;

static SbqDirectKept sbq_direct_kept[SBQ_DIRECT_KEPT];
static uint64 sbq_direct_clock = 0;
static MemoryContext sbq_direct_cxt = NULL;

/* Drop what an entry keeps: now, or when the store using it ends. */
static void
sbq_direct_forget(SbqDirectKept *e)
{
	if (e->in_use)
	{
		e->stale = true;
		return;
	}
	e->relid = InvalidOid;
	e->stale = false;
	e->map = NULL;
	e->exprs_valid = false;
	e->infos_kept = false;
	if (e->map_cxt != NULL)
	{
		MemoryContextReset(e->map_cxt);
		MemoryContextReset(e->exprs_cxt);
	}
}

/* a relcache invalidation of a table (an index made or dropped is one) */
static void
sbq_direct_inval(Datum arg, Oid relid)
{
	int			i;

	for (i = 0; i < SBQ_DIRECT_KEPT; i++)
		if (sbq_direct_kept[i].relid != InvalidOid &&
			(!OidIsValid(relid) || relid == sbq_direct_kept[i].relid))
			sbq_direct_forget(&sbq_direct_kept[i]);
}

/* Have sbq_direct_inval called from now on. */
static void
sbq_direct_register(void)
{
	if (sbq_direct_cxt == NULL)
	{
		MemoryContext cxt = AllocSetContextCreate(CacheMemoryContext, "sbqueue direct send",
												  ALLOCSET_SMALL_SIZES);

		/* nothing is kept before the callback is in place */
		sbq_on_relcache_inval(sbq_direct_inval);
		sbq_direct_cxt = cxt;
	}
}

/*
 * sbq_direct_pin
 *		The entry of relid, pinned, taken from the free or oldest unpinned
 *		entry when there is none; NULL when there is none to take or the
 *		entry of relid is pinned already (a store within a store: the
 *		caller runs the INSERT). Raises no error once the entry is pinned.
 */
static SbqDirectKept *
sbq_direct_pin(Oid relid)
{
	SbqDirectKept *e = NULL;
	int			i;

	sbq_direct_register();
	for (i = 0; i < SBQ_DIRECT_KEPT; i++)
	{
		SbqDirectKept *k = &sbq_direct_kept[i];

		if (k->relid == relid)
		{
			if (k->in_use)
				return NULL;
			e = k;
			break;
		}
		/* a free entry before any other, else the one pinned longest ago */
		if (!k->in_use &&
			(e == NULL || (e->relid != InvalidOid &&
						   (k->relid == InvalidOid || k->used < e->used))))
			e = k;
	}
	if (e == NULL)
		return NULL;
	if (e->map_cxt == NULL)
	{
		/* both or neither: an error between the two leaves the entry as it was */
		MemoryContext map_cxt = AllocSetContextCreate(sbq_direct_cxt, "sbqueue direct send map",
													  ALLOCSET_SMALL_SIZES);
		MemoryContext exprs_cxt = AllocSetContextCreate(sbq_direct_cxt,
														"sbqueue direct send exprs",
														ALLOCSET_SMALL_SIZES);

		e->map_cxt = map_cxt;
		e->exprs_cxt = exprs_cxt;
	}
	if (e->relid != relid)
	{
		sbq_direct_forget(e);
		e->relid = relid;
	}
	e->used = ++sbq_direct_clock;
	e->in_use = true;
	return e;
}

/* The store using e has ended. */
static void
sbq_direct_unpin(SbqDirectKept *e)
{
	e->in_use = false;
	if (e->stale)
		sbq_direct_forget(e);
}

/* The column map of rel (pinned entry e), made when what e keeps is not for it. */
static const SbqDirectCol **
sbq_direct_map_of(SbqDirectKept *e, Relation rel, bool *ok)
{
	TupleDesc	desc = RelationGetDescr(rel);

	if (e->map == NULL || e->natts != desc->natts)
	{
		const SbqDirectCol **map;

		MemoryContextReset(e->map_cxt);
		e->map = NULL;
		map = MemoryContextAllocZero(e->map_cxt, sizeof(SbqDirectCol *) * Max(desc->natts, 1));
		e->map_ok = sbq_direct_map(desc, map);
		sbq_direct_map_complete(desc, map, &e->map_all, &e->map_hops);
		e->natts = desc->natts;
		e->map = map;
	}
	/*
	 * a column the INSERT names that the table lacks: the INSERT fails, and
	 * so must the send (transfer_hops is named from 0.11 on)
	 */
	*ok = e->map_ok && e->map_all && (e->map_hops || !sbq_hops_installed());
	return e->map;
}

/* Whether what e keeps is for rel as it is now, with the indexes index_oids. */
static bool
sbq_direct_kept_fits(SbqDirectKept *e, Relation rel, List *index_oids)
{
	TupleConstr *constr = RelationGetDescr(rel)->constr;
	ListCell   *lc;
	int			i;

	if (!e->exprs_valid || e->stale ||
		e->ncheck != (constr != NULL ? constr->num_check : 0) ||
		e->nindex != list_length(index_oids))
		return false;
	for (i = 0; i < e->ncheck; i++)
		if (strcmp(e->ccbin[i], constr->check[i].ccbin) != 0)
			return false;
	i = 0;
	foreach(lc, index_oids)
		if (e->index_oids[i++] != lfirst_oid(lc))
			return false;
	return true;
}

/*
 * Whether what e keeps fits rel and is simple: then opening its indexes runs
 * nothing of a DBA's (opening one builds its predicate and expressions, and
 * may fold them, calling their functions), and neither does storing a row.
 * The index list is the one ExecOpenIndices opens, in its order.
 */
static bool
sbq_direct_kept_simple(SbqDirectKept *e, Relation rel)
{
	List	   *index_oids = RelationGetIndexList(rel);
	bool		fits = sbq_direct_kept_fits(e, rel, index_oids) && e->simple;

	list_free(index_oids);
	return fits;
}

/*
 * Whether an expression is simple: columns and constants compared with the
 * built-in equality of integers, tested for NULL, combined with AND, OR and
 * NOT, as sbqueue's own constraint and predicates are. A simple expression
 * runs no code that could depend on search_path or on a function changed
 * since it was prepared; anything else (a DBA's constraint calling a
 * function of theirs, say) is prepared by the executor for every store, and
 * runs with the settings pinned.
 */
static bool
sbq_direct_not_simple(Node *node, void *context)
{
	if (node == NULL)
		return false;
	switch (nodeTag(node))
	{
		case T_Var:
			/*
			 * a whole row or a system column: evaluating one keeps state in
			 * the executor state's memory, which is gone after this store
			 */
			if (((Var *) node)->varattno <= 0)
				return true;
			break;
		case T_Const:
		case T_NullTest:
		case T_BoolExpr:
		case T_List:
			break;
		case T_OpExpr:
			{
				OpExpr	   *op = (OpExpr *) node;
				Oid			fn = OidIsValid(op->opfuncid) ? op->opfuncid : get_opcode(op->opno);

				if (fn != F_INT2EQ && fn != F_INT24EQ && fn != F_INT4EQ && fn != F_INT42EQ &&
					fn != F_INT8EQ)
					return true;
				break;
			}
		default:
			return true;
	}
	return expression_tree_walker(node, sbq_direct_not_simple, context);
}

/* Whether index i of rri is a built-in kind on columns, its predicate simple. */
static bool
sbq_direct_index_simple(ResultRelInfo *rri, int i)
{
	Relation	index = rri->ri_IndexRelationDescs[i];
	IndexInfo  *ii = rri->ri_IndexRelationInfo[i];
	int			k;

	if (index->rd_rel->relam >= FirstNormalObjectId || ii->ii_Expressions != NIL ||
		sbq_direct_not_simple((Node *) ii->ii_Predicate, NULL))
		return false;
	for (k = 0; k < IndexRelationGetNumberOfKeyAttributes(index); k++)
		if (index->rd_opfamily[k] >= FirstNormalObjectId)
			return false;
	return true;
}

/* Whether e's predicates are for the indexes rri opened, in its order. */
static bool
sbq_direct_same_indexes(const SbqDirectKept *e, ResultRelInfo *rri)
{
	int			i;

	if (e->nindex != rri->ri_NumIndices)
		return false;
	for (i = 0; i < e->nindex; i++)
		if (e->index_oids[i] != RelationGetRelid(rri->ri_IndexRelationDescs[i]))
			return false;
	return true;
}

/*
 * Keep a copy of what opening each index built (its IndexInfo: columns,
 * predicate, uniqueness), for sbq_direct_open_indices, when every index is a
 * btree with no exclusion constraint: a btree keeps nothing of its own in
 * an IndexInfo between inserts, and its definition is fixed with its OID.
 * In e->exprs_cxt, made current by the caller.
 */
static void
sbq_direct_keep_infos(SbqDirectKept *e, ResultRelInfo *rri)
{
	int			i;

	e->infos = palloc0(sizeof(IndexInfo *) * Max(e->nindex, 1));
	e->infos_kept = e->simple;
	for (i = 0; i < e->nindex && e->infos_kept; i++)
	{
		IndexInfo  *ii = rri->ri_IndexRelationInfo[i];
		IndexInfo  *k;

		/* opclass options are in the memory of the store that built them */
		if (rri->ri_IndexRelationDescs[i]->rd_rel->relam != BTREE_AM_OID ||
			ii->ii_ExclusionOps != NULL || ii->ii_Expressions != NIL ||
			ii->ii_OpclassOptions != NULL)
		{
			e->infos_kept = false;
			break;
		}
		k = palloc(sizeof(IndexInfo));
		memcpy(k, ii, sizeof(IndexInfo));
		k->ii_Predicate = copyObject(ii->ii_Predicate);
		k->ii_PredicateState = NULL;
		k->ii_ExpressionsState = NIL;
		k->ii_AmCache = NULL;
		k->ii_Context = NULL;
		e->infos[i] = k;
	}
}

static void sbq_direct_fill(TupleTableSlot *slot, const SbqDirectCol **map,
							const Datum *values, const bool *nulls, text **ids,
							const Datum *bodies, int i, int64 seq, int32 key);

/*
 * Whether a predicate that reads the columns attrs has the same value for
 * every row of a call: it reads none that a row has of its own (its sequence
 * number, message id or body) and no system column or whole row.
 */
static bool
sbq_direct_per_call(const Bitmapset *attrs, const SbqDirectCol **map, int natts)
{
	int			x = -1;

	while ((x = bms_next_member(attrs, x)) >= 0)
	{
		AttrNumber	a = x + FirstLowInvalidHeapAttributeNumber;

		if (a <= 0 || a > natts)
			return false;
		if (map[a - 1] != NULL &&
			(map[a - 1]->source == SBQ_COL_SEQUENCE || map[a - 1]->source == SBQ_COL_MESSAGE_ID ||
			 map[a - 1]->source == SBQ_COL_BODY))
			return false;
	}
	return true;
}

/*
 * sbq_direct_open_indices
 *		ExecOpenIndices without building each index's IndexInfo again: open
 *		and lock (RowExclusiveLock) the indexes e keeps, which the caller
 *		found to be rel's (sbq_direct_kept_simple), each with a copy of its
 *		kept IndexInfo, and give rri the constraints and predicates e keeps
 *		(what sbq_direct_prepare does for what fits). Whether an index takes
 *		inserts is read from it now: CREATE and DROP INDEX CONCURRENTLY
 *		change that for the same index. ExecCloseIndices closes them.
 *
 *		A partial index whose predicate reads only what every row of the
 *		call shares, and is false for it, is left closed: no row of the call
 *		goes into it, as the executor would have decided row by row, and
 *		opening it (a lock taken and given back, a relcache look-up) was
 *		most of what a single send spent on its indexes (a plain send goes
 *		into two of sbq.messages' five). What an index left closed gives up
 *		is only its lock, which ExecCloseIndices gives back at the end of
 *		every store anyway: CREATE, DROP and REINDEX ... CONCURRENTLY wait
 *		on the table's lock, held to the end of the transaction.
 */
static void
sbq_direct_open_indices(SbqDirectKept *e, ResultRelInfo *rri, EState *estate,
						TupleTableSlot *slot, const SbqDirectCol **map, const Datum *values,
						const bool *nulls, int32 key)
{
	ExprContext *econtext = GetPerTupleExprContext(estate);
	bool		filled = false;
	int			i;

	if (e->ncheck > 0)
		rri->ri_ConstraintExprs = e->checks;
	rri->ri_NumIndices = 0;
	if (e->nindex == 0)
		return;
	rri->ri_IndexRelationDescs = palloc(sizeof(Relation) * e->nindex);
	rri->ri_IndexRelationInfo = palloc(sizeof(IndexInfo *) * e->nindex);
	for (i = 0; i < e->nindex; i++)
	{
		Relation	index;
		IndexInfo  *ii;
		int			n = rri->ri_NumIndices;

		if (e->predicates[i] != NULL &&
			sbq_direct_per_call(e->pred_attrs[i], map, slot->tts_tupleDescriptor->natts))
		{
			if (!filled)
			{
				sbq_direct_fill(slot, map, values, nulls, NULL, NULL, 0, 0, key);
				econtext->ecxt_scantuple = slot;
				filled = true;
			}
			if (!ExecQual(e->predicates[i], econtext))
				continue;
		}
		index = index_open(e->index_oids[i], RowExclusiveLock);
		ii = palloc(sizeof(IndexInfo));
		memcpy(ii, e->infos[i], sizeof(IndexInfo));
		ii->ii_ReadyForInserts = index->rd_index->indisready;
		ii->ii_Context = CurrentMemoryContext;
		ii->ii_PredicateState = e->predicates[i];
		rri->ri_IndexRelationDescs[n] = index;
		rri->ri_IndexRelationInfo[n] = ii;
		rri->ri_NumIndices = n + 1;
	}
	if (filled)
	{
		ResetExprContext(econtext);
		ExecClearTuple(slot);
	}
}

/*
 * sbq_direct_prepare
 *		Give rri (its indexes open) the constraints and predicates e keeps,
 *		prepared first when what e keeps does not fit; false when none are
 *		given: they are not simple (then the settings must be pinned before
 *		the store runs them). kept_simple is what sbq_direct_kept_simple
 *		said before the indexes were opened.
 */
static bool
sbq_direct_prepare(SbqDirectKept *e, Relation rel, ResultRelInfo *rri, bool kept_simple)
{
	TupleConstr *constr = RelationGetDescr(rel)->constr;
	MemoryContext old;
	int			i;

	if (!kept_simple || !sbq_direct_same_indexes(e, rri))
	{
		/* e is pinned by this store alone: what it kept is used by none */
		e->exprs_valid = false;
		e->infos_kept = false;
		MemoryContextReset(e->exprs_cxt);
		old = MemoryContextSwitchTo(e->exprs_cxt);
		e->simple = true;
		e->ncheck = constr != NULL ? constr->num_check : 0;
		e->ccbin = palloc0(sizeof(char *) * Max(e->ncheck, 1));
		e->checks = palloc0(sizeof(ExprState *) * Max(e->ncheck, 1));
		for (i = 0; i < e->ncheck; i++)
		{
			Node	   *check;

			e->ccbin[i] = pstrdup(constr->check[i].ccbin);
			check = stringToNode(e->ccbin[i]);
			if (sbq_direct_not_simple(check, NULL))
				e->simple = false;
			else
				e->checks[i] = ExecInitExpr(expression_planner((Expr *) check), NULL);
		}
		e->nindex = rri->ri_NumIndices;
		e->index_oids = palloc0(sizeof(Oid) * Max(e->nindex, 1));
		e->predicates = palloc0(sizeof(ExprState *) * Max(e->nindex, 1));
		e->pred_attrs = palloc0(sizeof(Bitmapset *) * Max(e->nindex, 1));
		for (i = 0; i < e->nindex; i++)
		{
			List	   *pred = rri->ri_IndexRelationInfo[i]->ii_Predicate;

			e->index_oids[i] = RelationGetRelid(rri->ri_IndexRelationDescs[i]);
			if (!sbq_direct_index_simple(rri, i))
				e->simple = false;
			else if (pred != NIL)
			{
				e->predicates[i] =
					ExecInitQual((List *) expression_planner((Expr *) copyObject(pred)), NULL);
				pull_varattnos((Node *) pred, 1, &e->pred_attrs[i]);
			}
		}
		sbq_direct_keep_infos(e, rri);
		MemoryContextSwitchTo(old);
		e->exprs_valid = true;
	}
	if (!e->simple)
		return false;
	if (e->ncheck > 0)
		rri->ri_ConstraintExprs = e->checks;
	for (i = 0; i < e->nindex; i++)
		if (e->predicates[i] != NULL)
			rri->ri_IndexRelationInfo[i]->ii_PredicateState = e->predicates[i];
	return true;
}

/* the most rows of a batch stored into the heap together, and their data's bytes */
#define SBQ_DIRECT_GROUP		100
#define SBQ_DIRECT_GROUP_BYTES	(1024 * 1024)

static void sbq_direct_store(ResultRelInfo *rri, EState *estate, TupleTableSlot *slot,
							 const SbqDirectCol **map, const Datum *values,
							 const bool *nulls, const Datum *bodies, int nbodies,
							 Oid seqid, int32 key, bool grouped, int64 *seqs);

/* the context line of an error while storing: the name of the statement */
static void
sbq_direct_context(void *arg)
{
	errcontext("sbqueue statement \"%s\"", (const char *) arg);
}

/* Whether rel takes a row the way this file stores it. */
static bool
sbq_direct_fits(Relation rel)
{
	return rel->rd_rel->relkind == RELKIND_RELATION && rel->trigdesc == NULL &&
		rel->rd_rules == NULL &&
		!rel->rd_rel->relrowsecurity && !rel->rd_rel->relispartition &&
		pg_class_aclcheck(RelationGetRelid(rel), GetUserId(), ACL_INSERT) == ACLCHECK_OK;
}

/*
 * sbq_direct_open
 *		The table a plain send stores into, opened (RowExclusiveLock), with
 *		the message sequence (*seqid), the entity key its rows get (*key:
 *		distributed tables only, *have_key) and its entry of what is kept,
 *		pinned (*e); NULL when the store cannot serve and the INSERT runs
 *		(which takes the same lock: it is kept).
 */
static Relation
sbq_direct_open(Oid nsp, Oid *seqid, int32 *key, bool *have_key, SbqDirectKept **e)
{
	Oid			relid;
	Relation	rel;

	*key = 0;
	if (!OidIsValid(nsp))
		return NULL;
	/* distributed: the call's group's shard, its rows with the call's entity key */
	*have_key = sbq_dist_active() && sbq_dist_current_key(key);
	if (sbq_dist_active() && !*have_key)
		return NULL;
	relid = *have_key ? sbq_dist_relid("messages") : get_relname_relid("messages", nsp);
	*seqid = get_relname_relid("message_seq", nsp);
	/* nextval() needs USAGE or UPDATE on the sequence (either: ACLMASK_ANY) */
	if (!OidIsValid(relid) || !OidIsValid(*seqid) ||
		pg_class_aclcheck(*seqid, GetUserId(), ACL_USAGE | ACL_UPDATE) != ACLCHECK_OK)
		return NULL;

	sbq_direct_register();
	rel = table_open(relid, RowExclusiveLock);
	if (!sbq_direct_fits(rel) || (*e = sbq_direct_pin(relid)) == NULL)
	{
		table_close(rel, NoLock);
		return NULL;
	}
	return rel;
}

/*
 * sbq_direct_run
 *		sbq_send_direct's store into rel, opened, with its entry e pinned;
 *		false, having stored nothing, when rel has a column this file does
 *		not store the way the INSERT would.
 */
static bool
sbq_direct_run(SbqDirectKept *e, Relation rel, bool have_key, Oid seqid, int32 key,
			   const Datum *values, const bool *nulls, const Datum *bodies, int nbodies,
			   int64 *seqs)
{
	TupleDesc	desc = RelationGetDescr(rel);
	const SbqDirectCol **map;
	bool		mapped;
	EState	   *estate;
	ResultRelInfo *rri;
	RangeTblEntry *rte;
	TupleTableSlot *slot;
	bool		simple;
	ErrorContextCallback errcb;
	int			i;

	map = sbq_direct_map_of(e, rel, &mapped);
	/* a column entity_key outside a call of a distributed installation: the INSERT's */
	for (i = 0; mapped && !have_key && i < desc->natts; i++)
		mapped = map[i] == NULL || map[i]->source != SBQ_COL_ENTITY_KEY;
	if (!mapped)
		return false;

	estate = CreateExecutorState();
	rte = makeNode(RangeTblEntry);
	rte->rtekind = RTE_RELATION;
	rte->relid = RelationGetRelid(rel);
	rte->relkind = RELKIND_RELATION;
	rte->rellockmode = RowExclusiveLock;
	SBQ_EXEC_INIT_RANGE_TABLE(estate, rte);
	rri = makeNode(ResultRelInfo);
	InitResultRelInfo(rri, rel, 1, NULL, 0);
	estate->es_output_cid = GetCurrentCommandId(true);
	/*
	 * Unless what is kept says the indexes and constraints are sbqueue's own
	 * kind, the settings are pinned before the indexes are opened: opening
	 * one may fold its predicate, running a DBA's functions.
	 */
	simple = sbq_direct_kept_simple(e, rel);
	if (!simple)
		sbq_storage_pin_settings();
	slot = ExecInitExtraTupleSlot(estate, desc, &TTSOpsVirtual);
	if (simple && e->infos_kept)
		sbq_direct_open_indices(e, rri, estate, slot, map, values, nulls, key);
	else
	{
		ExecOpenIndices(rri, false);
		/* what is not simple runs the way the INSERT ran it: with the settings pinned, row by row */
		simple = sbq_direct_prepare(e, rel, rri, simple);
		if (!simple)
			sbq_storage_pin_settings();
	}

	/* an error names the statement this replaces, as its errors did (never its SQL) */
	errcb.callback = sbq_direct_context;
	errcb.arg = (void *) (nbodies == 1 ? "send one" : "send many");
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;
	sbq_direct_store(rri, estate, slot, map, values, nulls, bodies, nbodies, seqid, key,
					 simple, seqs);
	error_context_stack = errcb.previous;

	ExecCloseIndices(rri);
	ExecResetTupleTable(estate->es_tupleTable, false);
	FreeExecutorState(estate);
	return true;
}

/* sbq_direct_run, the entry unpinned whatever happens */
static pg_noinline bool
sbq_direct_guarded(SbqDirectKept *e, Relation rel, bool have_key, Oid seqid, int32 key,
				   const Datum *values, const bool *nulls, const Datum *bodies, int nbodies,
				   int64 *seqs)
{
	bool		stored;

	PG_TRY();
	{
		stored = sbq_direct_run(e, rel, have_key, seqid, key, values, nulls, bodies, nbodies,
								seqs);
	}
	PG_CATCH();
	{
		sbq_direct_unpin(e);
		PG_RE_THROW();
	}
	PG_END_TRY();
	sbq_direct_unpin(e);
	return stored;
}

/*
 * sbq_send_direct
 *		Store nbodies messages of a send (values and nulls are its arguments,
 *		as send.c's SEND_ARGS) in sbq.messages, their sequence numbers into
 *		seqs in the order of the bodies. Returns false, having stored
 *		nothing, when the table is not one it can store into (the caller
 *		runs the INSERT, which stores or fails as it always did).
 */
bool
sbq_send_direct(const Datum *values, const bool *nulls, const Datum *bodies, int nbodies,
				int64 *seqs)
{
	Oid			seqid;
	int32		key;
	bool		have_key;
	SbqDirectKept *e = NULL;
	Relation	rel;
	bool		stored;

	rel = sbq_direct_open(get_rel_namespace(sbq_storage_epoch()), &seqid, &key, &have_key,
						  &e);
	if (rel == NULL)
		return false;
	stored = sbq_direct_guarded(e, rel, have_key, seqid, key, values, nulls, bodies, nbodies,
								seqs);
	table_close(rel, NoLock);
	if (!stored)
		return false;
	/* what follows in this transaction sees the rows, as after the INSERT */
	CommandCounterIncrement();
	return true;
}

/*
 * sbq_direct_fill
 *		Message i of a send into slot, with its sequence number seq (ids:
 *		the message ids made for the batch, or NULL). Without bodies, what
 *		every row of the call shares, the columns each row has of its own
 *		NULL: what sbq_direct_open_indices judges a predicate on.
 */
static void
sbq_direct_fill(TupleTableSlot *slot, const SbqDirectCol **map, const Datum *values,
				const bool *nulls, text **ids, const Datum *bodies, int i, int64 seq,
				int32 key)
{
	TupleDesc	desc = slot->tts_tupleDescriptor;
	int			a;

	ExecClearTuple(slot);
	for (a = 0; a < desc->natts; a++)
	{
		const SbqDirectCol *c = map[a];
		Datum	   *v = &slot->tts_values[a];
		bool	   *n = &slot->tts_isnull[a];

		*n = false;
		if (c == NULL || (bodies == NULL && (c->source == SBQ_COL_SEQUENCE ||
											 c->source == SBQ_COL_MESSAGE_ID ||
											 c->source == SBQ_COL_BODY)))
		{
			*v = (Datum) 0;
			*n = true;
			continue;
		}
		switch (c->source)
		{
			case SBQ_COL_SEQUENCE:
				*v = Int64GetDatum(seq);
				break;
			case SBQ_COL_ARG:
				*v = values[c->arg];
				*n = nulls[c->arg];
				break;
			case SBQ_COL_MESSAGE_ID:
				if (nulls[c->arg])
					*v = PointerGetDatum(ids[i]);
				else
					*v = values[c->arg];
				break;
			case SBQ_COL_BODY:
				*v = bodies[i];
				break;
			case SBQ_COL_ZERO:
				*v = c->type == INT2OID ? Int16GetDatum(0) : Int32GetDatum(0);
				break;
			case SBQ_COL_NULL:
				*v = (Datum) 0;
				*n = true;
				break;
			case SBQ_COL_ENTITY_KEY:
				*v = Int32GetDatum(key);
				break;
		}
	}
	ExecStoreVirtualTuple(slot);
}

/*
 * sbq_direct_store_group
 *		The n rows of a group, filled into slots and checked, stored into the
 *		heap together, then indexed. What the heap allocates for them (it
 *		leaves its copies to its caller's memory context, as COPY knows) and
 *		what the checks and index inserts evaluated is freed afterwards.
 */
static void
sbq_direct_store_group(ResultRelInfo *rri, EState *estate, TupleTableSlot **slots, int n)
{
	Relation	rel = rri->ri_RelationDesc;
	MemoryContext old;
	int			i;

	old = MemoryContextSwitchTo(GetPerTupleMemoryContext(estate));
	table_multi_insert(rel, slots, n, estate->es_output_cid, 0, NULL);
	for (i = 0; i < n; i++)
		if (rri->ri_NumIndices > 0)
			list_free(sbq_insert_index_tuples(rri, slots[i], estate));
	MemoryContextSwitchTo(old);
	for (i = 0; i < n; i++)
		ExecClearTuple(slots[i]);
	ResetPerTupleExprContext(estate);
}

/* The rows of sbq_send_direct, stored through rri. */
static void
sbq_direct_store(ResultRelInfo *rri, EState *estate, TupleTableSlot *slot,
				 const SbqDirectCol **map, const Datum *values, const bool *nulls,
				 const Datum *bodies, int nbodies, Oid seqid, int32 key, bool grouped,
				 int64 *seqs)
{
	TupleDesc	desc = slot->tts_tupleDescriptor;
	Relation	rel = rri->ri_RelationDesc;
	text	  **ids = NULL;
	TupleTableSlot **group;
	MemoryContext old;
	int			n;
	Size		bytes;
	Size		rest = 0;
	int			i;

	for (i = 0; i < desc->natts; i++)
		if (map[i] != NULL && map[i]->source == SBQ_COL_MESSAGE_ID && nulls[map[i]->arg])
			ids = sbq_new_message_ids(nbodies);
	if (nbodies == 1 || !grouped)
	{
		for (i = 0; i < nbodies; i++)
		{
			CHECK_FOR_INTERRUPTS();
			/* its rights were checked once above, as nextval() checks them */
			seqs[i] = nextval_internal(seqid, false);
			sbq_direct_fill(slot, map, values, nulls, ids, bodies, i, seqs[i], key);
			ExecSimpleRelationInsert(rri, estate, slot);
		}
		return;
	}

	/*
	 * What ExecSimpleRelationInsert does for a row, in groups: the table has
	 * no triggers, no generated columns and no partitions (sbq_direct_fits,
	 * sbq_direct_map), and an INSERT needs no replica identity.
	 */
	old = MemoryContextSwitchTo(estate->es_query_cxt);
	group = palloc(sizeof(TupleTableSlot *) * Min(nbodies, SBQ_DIRECT_GROUP));
	for (i = 0; i < Min(nbodies, SBQ_DIRECT_GROUP); i++)
		group[i] = table_slot_create(rel, &estate->es_tupleTable);
	MemoryContextSwitchTo(old);
	n = 0;
	bytes = 0;
	for (i = 0; i < nbodies; i++)
	{
		CHECK_FOR_INTERRUPTS();
		seqs[i] = nextval_internal(seqid, false);
		sbq_direct_fill(group[n], map, values, nulls, ids, bodies, i, seqs[i], key);
		if (rel->rd_att->constr != NULL)
			ExecConstraints(rri, group[n], estate);
		/*
		 * The row's data: its body, and what every row of the batch copies
		 * (the properties), measured on the first row
		 */
		if (i == 0)
		{
			Size		all = heap_compute_data_size(desc, group[0]->tts_values,
													 group[0]->tts_isnull);
			Size		body = VARSIZE_ANY(DatumGetPointer(bodies[0]));

			rest = all > body ? all - body : 0;
		}
		bytes += rest + VARSIZE_ANY(DatumGetPointer(bodies[i]));
		if (++n == SBQ_DIRECT_GROUP || bytes >= SBQ_DIRECT_GROUP_BYTES)
		{
			sbq_direct_store_group(rri, estate, group, n);
			n = 0;
			bytes = 0;
		}
	}
	if (n > 0)
		sbq_direct_store_group(rri, estate, group, n);
}
