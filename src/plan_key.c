/*-------------------------------------------------------------------------
 *
 * plan_key.c
 *	  The statements that find their rows by sequence number are planned
 *	  with the primary key as the only index of sbqueue's tables.
 *
 * Such a statement ("m.sequence_number = ANY($1)", the numbers of a batch
 * settlement, of deferred messages, of expired leases) has one right plan
 * whatever the table holds: a look through the primary key per number. Its
 * plan is kept for the connection (storage_core.c), made from what the
 * planner knew of the table when it was first run, and on a small table,
 * or one still empty when last analyzed, the planner preferred another
 * index: the receive index taking the queue's identity as its condition, or
 * read whole with the numbers as a condition on its last column. Either
 * reads every entry of the queue, or of the table, for every call, for as
 * long as the plan is kept: a complete of 100 messages took 80 ms beside
 * 200,000 queued, against about one through the primary key, and a cycle of
 * batches of 100 spent half its time there. No setting turns an index off,
 * so while such a statement runs, the planner is shown, of each table of
 * schema sbq that has the column sequence_number, only the indexes led by
 * it (the primary key, with entity_key after it once distributed); a
 * table without one keeps its indexes.
 *
 * A statement planned while one of these runs would see the same (a trigger
 * of the DBA's on the tables, say); none of sbqueue's statements runs
 * another inside it.
 *
 * Owns: the planner's get_relation_info_hook, installed at load, and a
 * backend-local depth of such statements (sbq_run sets it around one).
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/plan_key.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "nodes/pathnodes.h"
#include "nodes/pg_list.h"
#include "optimizer/plancat.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "storage_core.h"

static get_relation_info_hook_type sbq_prev_relation_info = NULL;

/* how many statements found by key are running in this backend */
static int	sbq_key_depth = 0;

/*
 * sbq_relation_info
 *		While a statement found by key is planned: of a table of schema sbq
 *		with sequence_number, only the indexes led by that column.
 */
static void
sbq_relation_info(PlannerInfo *root, Oid relid, bool inhparent, RelOptInfo *rel)
{
	if (sbq_prev_relation_info != NULL)
		sbq_prev_relation_info(root, relid, inhparent, rel);
	if (sbq_key_depth > 0 && rel->indexlist != NIL &&
		get_rel_namespace(relid) == get_namespace_oid("sbq", true))
	{
		AttrNumber	seq = get_attnum(relid, "sequence_number");
		List	   *keep = NIL;
		ListCell   *lc;

		if (seq == InvalidAttrNumber)
			return;
		foreach(lc, rel->indexlist)
		{
			IndexOptInfo *index = lfirst_node(IndexOptInfo, lc);

			if (index->nkeycolumns > 0 && index->indexkeys[0] == seq)
				keep = lappend(keep, index);
		}
		if (keep != NIL)
			rel->indexlist = keep;
	}
}

/* Install the hook (at load). */
void
sbq_plan_key_init(void)
{
	sbq_prev_relation_info = get_relation_info_hook;
	get_relation_info_hook = sbq_relation_info;
}

/* A statement found by key starts (true) or ends (false); returns start. */
bool
sbq_plan_key(bool start)
{
	if (start)
		sbq_key_depth++;
	else if (sbq_key_depth > 0)
		sbq_key_depth--;
	return start;
}
