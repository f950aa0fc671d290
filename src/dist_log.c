/*-------------------------------------------------------------------------
 *
 * dist_log.c
 *	  What a node of a Citus cluster logs of a routed call (docs/scale-out.md,
 *	  decision 3): its messages without the statement that carried the
 *	  call's arguments, and a deadlock's detail and a crash report with
 *	  that statement cut.
 *
 * Owns: the text of the last statement of this backend that was a routed
 *	  call.
 * Locks: none (it reads other backends' activity as pg_stat_activity does).
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/dist_log.c
 *
 *-------------------------------------------------------------------------
 */

#include "postgres.h"

#include <ctype.h>

#include "miscadmin.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/pg_proc.h"
#include "commands/extension.h"
#include "nodes/parsenodes.h"
#include "parser/analyze.h"
#include "pgstat.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/elog.h"
#include "utils/lsyscache.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "compat.h"
#include "dist_int.h"
#include "distributed.h"

/*
 * What a node logs of a routed call. The call reaches it as the statement
 * "SELECT r FROM <schema>.sbq_routed(key, fn, args) r(r)", its arguments
 * as constants (Citus delegates only those), and the node logs a message
 * of the call (an error, a lock waited for with log_lock_waits, a backend
 * cancelled or terminated) with that statement: a lock token there would
 * settle the message for whoever reads the log, and a body would show. So
 * messages logged while such a statement runs leave it out; a deadlock's
 * detail for the log (each process's statement) and the postmaster's report
 * of a process that crashed show a routed call's statement as such.
 *
 * A backend's own messages leave out only a statement that parse analysis
 * found to be exactly a call of sbqueue's sbq_routed with constant
 * arguments, from its analysis on (a cancel while it is planned included):
 * no other statement can hide itself from the log by looking like one, and
 * the same text found to be another statement later (the names in it mean
 * other things) is forgotten. (A backend that loaded sbqueue only to run the
 * call, without the preload, had no hook at its analysis: sbq_routed itself
 * then notes the statement, when it names sbq_routed's own schema.) Other
 * processes' statements (in a deadlock's detail, in a crash report) are
 * judged by their text, in the exact form Citus sends; a statement that
 * cannot be judged whole goes too.
 *
 * Logging every statement (log_statement, log_min_duration_statement) is
 * the server's owner's choice, and not changed.
 */
static emit_log_hook_type sbq_prev_emit_log = NULL;
static post_parse_analyze_hook_type sbq_prev_post_parse_analyze = NULL;

/* the text of the last statement parse analysis found to be a routed call */
static char *sbq_routed_text = NULL;

/* sbqueue's sbq_routed, last found (an OID is not given to another function in practice) */
static Oid	sbq_routed_oid = InvalidOid;

/* the statement this backend loaded sbqueue in: its transaction and text */
static LocalTransactionId sbq_loaded_lxid = InvalidLocalTransactionId;
static char *sbq_loaded_text = NULL;

static bool sbq_routed_whole(const char *q, size_t n, bool cut);

/* Remember text, a copy, as the statement of a routed call (the copy first: it may fail). */
static void
sbq_routed_remember(const char *text)
{
	char	   *copy;

	if (sbq_routed_text != NULL && strcmp(sbq_routed_text, text) == 0)
		return;
	copy = MemoryContextStrdup(TopMemoryContext, text);
	if (sbq_routed_text != NULL)
		pfree(sbq_routed_text);
	sbq_routed_text = copy;
}

/* Forget the remembered statement. */
static void
sbq_routed_forget(void)
{
	char	   *old = sbq_routed_text;

	sbq_routed_text = NULL;
	if (old != NULL)
		pfree(old);
}

/* Whether funcid is sbqueue's sbq_routed. */
static bool
sbq_is_routed_function(Oid funcid)
{
	char	   *name;
	Oid			ext;

	if (OidIsValid(sbq_routed_oid) && funcid == sbq_routed_oid)
		return true;
	name = get_func_name(funcid);
	if (name == NULL || strcmp(name, "sbq_routed") != 0)
		return false;
	ext = get_extension_oid("sbqueue", true);
	if (!OidIsValid(ext) || getExtensionOfObject(ProcedureRelationId, funcid) != ext)
		return false;
	sbq_routed_oid = funcid;
	return true;
}

/*
 * Whether query is exactly "SELECT <columns> FROM sbq_routed(<constants>)":
 * one function in its range, sbqueue's sbq_routed, every argument a
 * constant, and nothing else (no condition, subquery, grouping, order).
 */
static bool
sbq_routed_query(Query *query)
{
	RangeTblEntry *rte;
	RangeTblFunction *rtfunc;
	FuncExpr   *fexpr;
	ListCell   *lc;

	if (query->commandType != CMD_SELECT || query->utilityStmt != NULL ||
		list_length(query->rtable) != 1 || query->hasSubLinks || query->hasAggs ||
		query->hasWindowFuncs || query->hasTargetSRFs || query->cteList != NIL ||
		query->setOperations != NULL || query->groupClause != NIL ||
		query->havingQual != NULL || query->sortClause != NIL ||
		query->distinctClause != NIL || query->limitCount != NULL ||
		query->limitOffset != NULL || query->rowMarks != NIL ||
		query->jointree == NULL || query->jointree->quals != NULL)
		return false;
	rte = linitial_node(RangeTblEntry, query->rtable);
	if (rte->rtekind != RTE_FUNCTION || list_length(rte->functions) != 1 || rte->funcordinality)
		return false;
	rtfunc = linitial_node(RangeTblFunction, rte->functions);
	if (!IsA(rtfunc->funcexpr, FuncExpr))
		return false;
	fexpr = (FuncExpr *) rtfunc->funcexpr;
	foreach(lc, fexpr->args)
		if (!IsA(lfirst(lc), Const))
			return false;
	foreach(lc, query->targetList)
		if (!IsA(((TargetEntry *) lfirst(lc))->expr, Var))
			return false;
	return sbq_is_routed_function(fexpr->funcid);
}

/*
 * After parse analysis of a top-level statement: remembered if it is a
 * routed call, and the remembered one forgotten if it is the same text
 * found to be no routed call now (the names in it mean other things).
 */
static void
sbq_dist_post_parse_analyze(ParseState *pstate, Query *query, JumbleState *jstate)
{
	const char *text = pstate->p_sourcetext;

	if (sbq_prev_post_parse_analyze)
		sbq_prev_post_parse_analyze(pstate, query, jstate);
	if (text == NULL || text != debug_query_string)
		return;
	if (strncmp(text, "SELECT r FROM ", 14) == 0 && sbq_routed_query(query) &&
		sbq_routed_whole(text, strlen(text), false))
		sbq_routed_remember(text);
	else if (sbq_routed_text != NULL && strcmp(sbq_routed_text, text) == 0)
		sbq_routed_forget();
}

/*
 * sbq_routed_note_running
 *		sbq_routed (function fnoid) runs: when this backend loaded sbqueue
 *		in this very statement (the same transaction and text; Bind loads it
 *		and Execute runs it), no hook saw its analysis, and the statement, if
 *		it is of the form and names the function's schema, is remembered now.
 */
void
sbq_routed_note_running(Oid fnoid)
{
	const char *q = debug_query_string;
	const char *qnsp;
	size_t		len;

	if (MyProc == NULL || q == NULL || sbq_loaded_text == NULL ||
		sbq_loaded_lxid != SBQ_MY_LXID() || strcmp(sbq_loaded_text, q) != 0)
		return;
	qnsp = get_namespace_name(get_func_namespace(fnoid));
	if (qnsp == NULL)			/* dropped meanwhile */
		return;
	qnsp = quote_identifier(qnsp);
	len = strlen(qnsp);
	if (strncmp(q, "SELECT r FROM ", 14) != 0 || strncmp(q + 14, qnsp, len) != 0 ||
		strncmp(q + 14 + len, ".sbq_routed(", 12) != 0 ||
		!sbq_routed_whole(q, strlen(q), false))
		return;
	sbq_routed_remember(q);
}

/* a scan of a statement's text: where it is, where it ends, and whether it ran out */
typedef struct SbqScan
{
	const char *p;
	const char *end;
	bool		out;
} SbqScan;

/* Skip word at the scan's place: whether it is there (or the text ran out in it). */
static bool
sbq_scan_word(SbqScan *s, const char *word)
{
	while (*word)
	{
		if (s->p == s->end)
			return s->out = true;
		if (*s->p++ != *word++)
			return false;
	}
	return true;
}

static void
sbq_scan_spaces(SbqScan *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
		s->p++;
}

/* Skip an identifier, plain or quoted. */
static bool
sbq_scan_ident(SbqScan *s)
{
	const char *start = s->p;

	if (s->p < s->end && *s->p == '"')
	{
		for (s->p++;; s->p++)
		{
			if (s->p == s->end)
				return s->out = true;
			if (*s->p == '"' && (s->p + 1 == s->end || s->p[1] != '"'))
				break;
			if (*s->p == '"')
				s->p++;
		}
		s->p++;
		return true;
	}
	while (s->p < s->end && (isalnum((unsigned char) *s->p) || *s->p == '_' ||
							 IS_HIGHBIT_SET(*s->p)))
		s->p++;
	if (s->p == s->end)
		s->out = true;
	return s->p > start;
}

/* the casts Citus gives the routed call's constants */
static const char *const sbq_routed_casts[] = {
	"::integer", "::text[]", "::text", "::pg_catalog.text[]", "::pg_catalog.text"
};

/*
 * Skip a constant: an unsigned integer, or a string constant ('', or E''
 * with its backslashes), and its cast, if any, to integer, text or text[]
 * (a negative integer Citus sends as a string constant with a cast).
 */
static bool
sbq_scan_constant(SbqScan *s)
{
	int			i;

	if (s->p == s->end)
		return s->out = true;
	if (isdigit((unsigned char) *s->p))
	{
		while (s->p < s->end && isdigit((unsigned char) *s->p))
			s->p++;
	}
	else
	{
		bool		escapes = false;

		if (*s->p == 'E' || *s->p == 'e')
		{
			escapes = true;
			s->p++;
		}
		if (!sbq_scan_word(s, "'"))
			return false;
		for (;; s->p++)
		{
			if (s->p == s->end)
				return s->out = true;
			if (escapes && *s->p == '\\')
			{
				if (++s->p == s->end)
					return s->out = true;
			}
			else if (*s->p == '\'')
			{
				if (s->p + 1 == s->end)
				{
					s->p++;
					return s->out = true;
				}
				if (s->p[1] != '\'')
					break;
				s->p++;
			}
		}
		s->p++;
	}
	if (s->p == s->end)
		return s->out = true;
	if (*s->p != ':')
		return true;
	for (i = 0; i < (int) lengthof(sbq_routed_casts); i++)
	{
		size_t		len = strlen(sbq_routed_casts[i]);
		size_t		left = s->end - s->p;

		if (strncmp(s->p, sbq_routed_casts[i], Min(len, left)) != 0)
			continue;
		if (left < len)
		{
			s->p = s->end;
			return s->out = true;
		}
		/* a cast is followed by a space, a comma or the parenthesis */
		if (left > len && (isalnum((unsigned char) s->p[len]) || s->p[len] == '_' ||
						   s->p[len] == '.' || s->p[len] == '[' || IS_HIGHBIT_SET(s->p[len])))
			continue;
		s->p += len;
		return true;
	}
	return false;
}

/*
 * How long the routed call that starts q (n bytes) is, in the form Citus
 * sends it: 0 if q does not start with it. With cut, a q that ends inside
 * the form (a statement cut to track_activity_query_size) is one all of n.
 */
static size_t
sbq_routed_form(const char *q, size_t n, bool cut)
{
	SbqScan		s = {q, q + n, false};
	int			i;

	if (!sbq_scan_word(&s, "SELECT r FROM ") || s.out ||
		!sbq_scan_ident(&s) || s.out ||
		!sbq_scan_word(&s, ".sbq_routed(") || s.out)
		goto out;
	for (i = 0; i < 3; i++)
	{
		sbq_scan_spaces(&s);
		if (!sbq_scan_constant(&s) || s.out)
			goto out;
		sbq_scan_spaces(&s);
		if (!sbq_scan_word(&s, i < 2 ? "," : ")") || s.out)
			goto out;
	}
	if (!sbq_scan_word(&s, " r") || (!s.out && s.p < s.end && *s.p == '(' &&
									 !sbq_scan_word(&s, "(r)")))
		goto out;
	if (!s.out && s.p < s.end && *s.p == ';')
		s.p++;
	return s.out ? (cut ? n : 0) : (size_t) (s.p - q);
out:
	return s.out && cut ? n : 0;
}

/* Whether q (n bytes) is all one routed call in the form Citus sends it (cut: see above). */
static bool
sbq_routed_whole(const char *q, size_t n, bool cut)
{
	size_t		len = sbq_routed_form(q, n, cut);

	if (len == 0)
		return false;
	while (len < n && isspace((unsigned char) q[len]))
		len++;
	return len == n;
}

/*
 * Whether line (of len bytes) starts as a deadlock detail's line of a
 * process does: the text before the process number of proc (the line of a
 * process that shows a routed call, procdigits where its number starts),
 * a number, then the same text up to the statement (stmtoff bytes in).
 */
static bool
sbq_process_line(const char *line, size_t len, const char *proc, const char *procdigits,
				 size_t stmtoff)
{
	size_t		before = procdigits - proc;
	const char *d;
	const char *pd = procdigits;

	if (len < before + 1 || strncmp(line, proc, before) != 0 ||
		!isdigit((unsigned char) line[before]))
		return false;
	d = line + before;
	while (d < line + len && isdigit((unsigned char) *d))
		d++;
	while (isdigit((unsigned char) *pd))
		pd++;
	/* after the number: the same text as proc's up to its statement */
	return (size_t) (line + len - d) >= stmtoff - (pd - proc) &&
		strncmp(d, pd, stmtoff - (pd - proc)) == 0;
}

/*
 * detail, with the statement of every process that runs a routed call cut
 * from it: a deadlock's detail for the log ends with a line for each
 * process of the cycle, its number then its statement as the process shows
 * it in pg_stat_activity (cut to track_activity_query_size, and of as many
 * lines as it has). The statement goes when the process shows a routed call
 * and the detail has it whole at that place. A statement that starts as a
 * routed call and cannot be judged so (the process went on to another one
 * meanwhile) goes too, with every line up to the next process's.
 */
static char *
sbq_hide_routed_lines(const char *detail)
{
	StringInfoData buf;
	const char *p = detail;

	initStringInfo(&buf);
	while (*p)
	{
		const char *end = strchr(p, '\n');
		size_t		len = end != NULL ? (size_t) (end - p) : strlen(p);
		const char *colon = memchr(p, ':', len);
		const char *stmt = colon != NULL ? colon + 1 + (colon[1] == ' ') : NULL;
		const char *digits = p;
		const char *hit;
		const char *act;
		size_t		actlen;

		while (colon != NULL && digits < colon && !isdigit((unsigned char) *digits))
			digits++;
		if (stmt == NULL || digits == colon || strncmp(stmt, "SELECT r FROM ", 14) != 0 ||
			(hit = strstr(stmt, "sbq_routed(")) == NULL || hit - stmt >= 128)
		{
			/* not a process's line that starts as a routed call: as it is */
			appendBinaryStringInfo(&buf, p, len);
			if (end == NULL)
				break;
			appendStringInfoChar(&buf, '\n');
			p = end + 1;
			continue;
		}
		/* (interrupts held: a cancel here would lose the report) */
		HOLD_INTERRUPTS();
		act = pgstat_get_backend_current_activity(atoi(digits), false);
		RESUME_INTERRUPTS();
		actlen = strlen(act);
		if (strncmp(stmt, act, actlen) == 0 && (stmt[actlen] == '\0' || stmt[actlen] == '\n'))
		{
			/* the process's statement, whole at this place */
			if (!sbq_routed_whole(act, actlen,
								  actlen + 4 >= (size_t) pgstat_track_activity_query_size))
				appendBinaryStringInfo(&buf, p, stmt - p + actlen);
			else
			{
				appendBinaryStringInfo(&buf, p, stmt - p);
				appendStringInfoString(&buf, "(a routed sbqueue call)");
			}
			end = stmt[actlen] == '\n' ? stmt + actlen : NULL;
		}
		else
		{
			/* it went on to another statement: this one goes up to the next process's */
			appendBinaryStringInfo(&buf, p, stmt - p);
			appendStringInfoString(&buf, "(a routed sbqueue call)");
			while (end != NULL &&
				   !sbq_process_line(end + 1, strcspn(end + 1, "\n"), p, digits, stmt - p))
				end = strchr(end + 1, '\n');
		}
		if (end == NULL)
			break;
		appendStringInfoChar(&buf, '\n');
		p = end + 1;
	}
	return buf.data;
}

/*
 * The postmaster's detail of a process that crashed, "Failed process was
 * running: <its statement>" (cut to 1,023 bytes): the statement goes when
 * it is a routed call.
 */
static char *
sbq_hide_crashed_statement(char *detail)
{
	const char *fmt = _("Failed process was running: %s");
	const char *arg = strstr(fmt, "%s");
	size_t		before = arg != NULL ? (size_t) (arg - fmt) : 0;
	const char *stmt = detail + before;

	if (arg == NULL || arg[2] != '\0' || strncmp(detail, fmt, before) != 0 ||
		strncmp(stmt, "SELECT r FROM ", 14) != 0 ||
		!sbq_routed_whole(stmt, strlen(stmt), true))
		return detail;
	return psprintf("%.*s(a routed sbqueue call)", (int) before, detail);
}

static void
sbq_dist_emit_log(ErrorData *edata)
{
	if (sbq_routed_text != NULL && debug_query_string != NULL &&
		strcmp(debug_query_string, sbq_routed_text) == 0)
		edata->hide_stmt = true;
	if (edata->detail_log != NULL && strstr(edata->detail_log, "sbq_routed(") != NULL)
		edata->detail_log = sbq_hide_routed_lines(edata->detail_log);
	if (!IsUnderPostmaster && edata->detail != NULL && strstr(edata->detail, "sbq_routed(") != NULL)
		edata->detail = sbq_hide_crashed_statement(edata->detail);
	if (sbq_prev_emit_log)
		sbq_prev_emit_log(edata);
}

/* Install the hooks (_PG_init). */
void
sbq_dist_log_hook_install(void)
{
	sbq_prev_emit_log = emit_log_hook;
	emit_log_hook = sbq_dist_emit_log;
	sbq_prev_post_parse_analyze = post_parse_analyze_hook;
	post_parse_analyze_hook = sbq_dist_post_parse_analyze;
	/* loaded by a statement (no preload): the hook did not see its analysis */
	if (IsUnderPostmaster && MyProc != NULL && debug_query_string != NULL &&
		strncmp(debug_query_string, "SELECT r FROM ", 14) == 0)
	{
		sbq_loaded_lxid = SBQ_MY_LXID();
		sbq_loaded_text = MemoryContextStrdup(TopMemoryContext, debug_query_string);
	}
}
