/*-------------------------------------------------------------------------
 *
 * filter_action.c
 *	  Evaluation of a parsed rule action (filter.h): its SET and REMOVE
 *	  statements become a list of edits the caller applies to the
 *	  subscription's copy of the message.
 *
 * Statements run in order; each sees the message as the statements
 * before it left it (sbq_filter_lookup reads the edits made so far before
 * asking the message). Errors carry the type "RuleActionException"; on an
 * error no edit is returned, so the caller applies all or nothing.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/filter_action.c
 *
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include "filter_int.h"

/* the system properties SET may change: all strings */
static bool
sys_settable(SbqFilterSysProp sys)
{
	switch (sys)
	{
		case SBQ_FSYS_MESSAGE_ID:
		case SBQ_FSYS_CORRELATION_ID:
		case SBQ_FSYS_CONTENT_TYPE:
		case SBQ_FSYS_LABEL:
		case SBQ_FSYS_REPLY_TO:
		case SBQ_FSYS_REPLY_TO_SESSION_ID:
		case SBQ_FSYS_SESSION_ID:
		case SBQ_FSYS_TO:
			return true;
		default:
			return false;
	}
}

/*
 * Check a SET of a system property and say whether it makes an edit:
 * unknown, read-only or wrongly typed targets are errors;
 * ScheduledEnqueueTimeUtc is accepted and ignored (*keep false), as a
 * subscription ignores it.
 */
static bool
check_sys_set(SbqFilterEvalCtx *cx, const SbqFilterStmt *st,
			  const SbqFilterValue *v, bool *keep)
{
	*keep = false;
	if (st->sys == SBQ_FSYS_UNKNOWN)
		return sbq_filter_fail(cx, "sys property \"%.*s\" does not exist",
							   (int) (st->name_len > SBQ_FILTER_ERR_NAME ?
									  SBQ_FILTER_ERR_NAME : st->name_len),
							   st->name);
	if (st->sys == SBQ_FSYS_SCHEDULED_ENQUEUE_TIME_UTC)
		return true;
	if (!sys_settable(st->sys))
		return sbq_filter_fail(cx, "sys property \"%s\" cannot be set",
							   sbq_filter_sys_name(st->sys));
	if (v->kind != SBQ_FV_STRING && v->kind != SBQ_FV_NULL)
		return sbq_filter_fail(cx, "cannot set sys property \"%s\" to %s",
							   sbq_filter_sys_name(st->sys),
							   sbq_filter_kind_name(v->kind));
	*keep = true;
	return true;
}

/*
 * One statement: evaluate and check it, appending at most one edit to
 * edits[*n].
 */
static bool
run_statement(SbqFilterEvalCtx *cx, const SbqFilterStmt *st,
			  SbqFilterEdit *edits, int *n)
{
	SbqFilterEdit *e = &edits[*n];
	SbqFilterValue cur;
	bool		found;
	bool		keep = true;

	memset(e, 0, sizeof(*e));
	e->remove = st->remove;
	e->scope = st->scope;
	e->sys = st->sys;
	e->name = st->name;
	e->name_len = st->name_len;
	if (st->remove && st->scope == SBQ_FSCOPE_SYS)
		return sbq_filter_fail(cx, "sys property \"%.*s\" cannot be removed",
							   (int) (st->name_len > SBQ_FILTER_ERR_NAME ?
									  SBQ_FILTER_ERR_NAME : st->name_len),
							   st->name);
	if (!st->remove)
	{
		if (!sbq_filter_eval_node(cx, st->expr, &e->value))
			return false;
		if (st->scope == SBQ_FSCOPE_SYS)
		{
			if (!check_sys_set(cx, st, &e->value, &keep))
				return false;
		}
		else
		{
			/* int64 into a property that holds a double stays a double */
			if (!sbq_filter_lookup(cx, st->scope, st->sys, st->name,
								   st->name_len, &found, &cur))
				return false;
			if (found && cur.kind == SBQ_FV_DOUBLE && e->value.kind == SBQ_FV_INT)
			{
				e->value.kind = SBQ_FV_DOUBLE;
				e->value.d = (double) e->value.i;
			}
		}
	}
	if (keep)
		(*n)++;
	/* later statements see this one's edit */
	cx->nedits = *n;
	return true;
}

/*
 * Evaluate an action against a message: true and the edits in order, or
 * false and *err (type "RuleActionException") with no edits.
 */
bool
sbq_action_eval(const SbqFilterAction *a, const SbqFilterMessage *m,
				SbqFilterAlloc alloc, void *alloc_arg, SbqFilterEdit **edits,
				int *nedits, SbqFilterError *err)
{
	SbqFilterEvalCtx cx;
	SbqFilterEdit *out;
	int			n = 0;
	int			i;

	memset(&cx, 0, sizeof(cx));
	cx.msg = m;
	cx.alloc = alloc;
	cx.alloc_arg = alloc_arg;
	cx.err = err;
	cx.errtype = "RuleActionException";
	cx.budget = SBQ_FILTER_STRING_BUDGET;
	err->type = NULL;
	err->message = NULL;
	err->position = 0;
	*edits = NULL;
	*nedits = 0;
	if (a == NULL)
		return sbq_filter_fail(&cx, "no action");
	out = alloc(alloc_arg, (size_t) (a->nstmts + 1) * sizeof(SbqFilterEdit));
	if (out == NULL)
		return sbq_filter_fail(&cx, "out of memory");
	cx.edits = out;
	for (i = 0; i < a->nstmts; i++)
		if (!run_statement(&cx, &a->stmts[i], out, &n))
			return false;
	*edits = out;
	*nedits = n;
	return true;
}
