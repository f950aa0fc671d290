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
 * The statements that read a queue's head ("the first 10 active messages of
 * queue 5 from sequence number 1000 on", a peek, a receive, maintenance's
 * look at locks) have the opposite trap. They order by the receive index's
 * whole key, (queue_id, subqueue, state, sequence_number), but with the
 * first three columns fixed by equalities the planner drops them from the
 * ordering, and the primary key gives the order that remains. Their plans
 * are generic, so the planner judges "queue_id = $1" by the table's
 * statistics: beside one large queue it expects most rows to match and
 * prefers walking the primary key from the starting number, filtering by
 * queue, to stop after $4 rows. For a small queue that walk reads every
 * later row of the table (a peek of a queue of 3 messages took 350 ms beside
 * 1,400,000 queued in another; its first receive 200 ms). So a query level
 * of an sbqueue statement whose ORDER BY begins with the queue_id of one of
 * its tables is planned seeing, of that table, only the indexes led by
 * queue_id: the ordering is how the statement names the index it means.
 * Other references to the table (a join back by sequence number) keep
 * every index.
 *
 * Only the statement's own planning is so. sbq_run announces the statement
 * by the text its kept plan was made from, and a planning is its only when
 * the planner is given that very text (a kept plan being remade passes its
 * own copy) for the query that sets the statement's result: not a DBA's
 * rule action planned with it, not another module's query planned first
 * (a planner hook that reads a table of its own), and not a query planned
 * while the statement is planned or runs (a trigger of the DBA's on the
 * tables, a function called while planning, whose plans PL/pgSQL keeps for
 * the connection): those see every index. Of the indexes led by the column,
 * one at least must be whole (not partial): with the DBA's receive index
 * dropped, the partial ones alone would leave no usable index, and the
 * statement then keeps every index.
 *
 * Owns: the planner's planner_hook and get_relation_info_hook, installed at
 * load, and two backend-local modes (the announcement with its statement's
 * text, the planning).
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
#include "optimizer/optimizer.h"
#include "optimizer/plancat.h"
#include "optimizer/planner.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "storage_core.h"

static get_relation_info_hook_type sbq_prev_relation_info = NULL;
static planner_hook_type sbq_prev_planner = NULL;

/* an sbqueue statement runs: how its planning, if it needs one, goes */
static SbqPlanMode sbq_plan_pending = SBQ_PLAN_ANY;

/* and the text its kept plan is made from (the one the planner is given) */
static const char *sbq_plan_pending_sql = NULL;

/* that planning is under way */
static SbqPlanMode sbq_plan_planning = SBQ_PLAN_ANY;

/*
 * The column of table relid (a range table index) that the ORDER BY of the
 * query level being planned begins with, or InvalidAttrNumber.
 */
static AttrNumber
sbq_first_order_column(PlannerInfo *root, int relid)
{
	Query	   *parse = root->parse;
	Node	   *expr;

	if (parse == NULL || parse->sortClause == NIL)
		return InvalidAttrNumber;
	expr = get_sortgroupclause_expr(linitial_node(SortGroupClause, parse->sortClause),
									parse->targetList);
	if (expr != NULL && IsA(expr, Var) && ((Var *) expr)->varno == relid &&
		((Var *) expr)->varlevelsup == 0)
		return ((Var *) expr)->varattno;
	return InvalidAttrNumber;
}

/*
 * sbq_relation_info
 *		While an sbqueue statement is planned, of a table of schema sbq with
 *		sequence_number: when the statement finds its rows by key, only the
 *		indexes led by that column; when the query level orders by the
 *		table's queue_id first, only the indexes led by queue_id. Either when
 *		one of them at least is not partial.
 */
static void
sbq_relation_info(PlannerInfo *root, Oid relid, bool inhparent, RelOptInfo *rel)
{
	AttrNumber	lead;
	List	   *keep = NIL;
	bool		whole = false;
	ListCell   *lc;

	if (sbq_prev_relation_info != NULL)
		sbq_prev_relation_info(root, relid, inhparent, rel);
	if (sbq_plan_planning == SBQ_PLAN_ANY || rel->indexlist == NIL ||
		get_rel_namespace(relid) != get_namespace_oid("sbq", true))
		return;
	lead = get_attnum(relid, "sequence_number");
	if (lead == InvalidAttrNumber)
		return;
	if (sbq_plan_planning == SBQ_PLAN_BY_ORDER)
	{
		lead = get_attnum(relid, "queue_id");
		if (lead == InvalidAttrNumber || sbq_first_order_column(root, (int) rel->relid) != lead)
			return;
	}
	foreach(lc, rel->indexlist)
	{
		IndexOptInfo *index = lfirst_node(IndexOptInfo, lc);

		if (index->nkeycolumns > 0 && index->indexkeys[0] == lead)
		{
			keep = lappend(keep, index);
			whole |= index->indpred == NIL;
		}
	}
	if (whole)
		rel->indexlist = keep;
}

/*
 * sbq_planner
 *		The planning of the announced statement's text, for the query that
 *		sets its result, is the statement's: it alone sees the restricted
 *		indexes. Any other planning, also one made while the statement's is
 *		under way, sees every index.
 */
static PlannedStmt *
sbq_planner(Query *parse, const char *query_string, int cursor_options,
			ParamListInfo bound_params)
{
	PlannedStmt *result;
	SbqPlanMode outer = sbq_plan_planning;

	if (sbq_plan_pending != SBQ_PLAN_ANY && query_string != NULL &&
		query_string == sbq_plan_pending_sql && parse->canSetTag)
		sbq_plan_planning = sbq_plan_pending;
	else
		sbq_plan_planning = SBQ_PLAN_ANY;
	PG_TRY();
	{
		if (sbq_prev_planner != NULL)
			result = sbq_prev_planner(parse, query_string, cursor_options, bound_params);
		else
			result = standard_planner(parse, query_string, cursor_options, bound_params);
	}
	PG_FINALLY();
	{
		sbq_plan_planning = outer;
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
 * An sbqueue statement is about to run (mode: how it is planned; sql: the
 * text of its kept plan), or has run (SBQ_PLAN_ANY and NULL: the caller
 * puts back what it found, for a statement run inside another's).
 */
void
sbq_plan_announce(SbqPlanMode mode, const char *sql)
{
	sbq_plan_pending = mode;
	sbq_plan_pending_sql = sql;
}

/* What is announced now (for the caller to put back), and its text. */
SbqPlanMode
sbq_plan_announced(const char **sql)
{
	*sql = sbq_plan_pending_sql;
	return sbq_plan_pending;
}
