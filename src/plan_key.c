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
 * Only the statement's own planning is so: sbq_run announces it, the next
 * planning is its (a kept plan being remade), and the executor's start ends
 * the announcement, so that a query planned while the statement runs (a
 * trigger of the DBA's on the tables, whose plan PL/pgSQL keeps for the
 * connection) sees every index.
 *
 * Owns: the planner's planner_hook and get_relation_info_hook, installed at
 * load, and two backend-local flags (the announcement, the planning).
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
#include "optimizer/planner.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "storage_core.h"

static get_relation_info_hook_type sbq_prev_relation_info = NULL;
static planner_hook_type sbq_prev_planner = NULL;

/* a statement found by key is about to run: its planning, if it needs one, is next */
static bool sbq_key_pending = false;

/* that planning is under way */
static bool sbq_key_planning = false;

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
	if (sbq_key_planning && rel->indexlist != NIL &&
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

/*
 * sbq_planner
 *		The first planning after a statement found by key was announced is
 *		that statement's: it alone sees the restricted indexes, not what is
 *		planned while it runs (a trigger's query, whose plan would be kept).
 */
static PlannedStmt *
sbq_planner(Query *parse, const char *query_string, int cursor_options,
			ParamListInfo bound_params)
{
	PlannedStmt *result;
	volatile bool ours = sbq_key_pending && !sbq_key_planning;

	if (ours)
	{
		sbq_key_pending = false;
		sbq_key_planning = true;
	}
	PG_TRY();
	{
		if (sbq_prev_planner != NULL)
			result = sbq_prev_planner(parse, query_string, cursor_options, bound_params);
		else
			result = standard_planner(parse, query_string, cursor_options, bound_params);
	}
	PG_FINALLY();
	{
		if (ours)
			sbq_key_planning = false;
	}
	PG_END_TRY();
	return result;
}

/* Install the hooks (at load). */
void
sbq_plan_key_init(void)
{
	sbq_prev_relation_info = get_relation_info_hook;
	get_relation_info_hook = sbq_relation_info;
	sbq_prev_planner = planner_hook;
	planner_hook = sbq_planner;
}

/*
 * A statement found by key is about to run (true) or has run (false);
 * returns start. Every executor start ends the announcement too: the
 * statement's plan is made, or found kept, before it starts.
 */
bool
sbq_plan_key(bool start)
{
	sbq_key_pending = start;
	return start;
}
