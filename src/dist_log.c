/*-------------------------------------------------------------------------
 *
 * dist_log.c
 *	  What a node of a Citus cluster logs of a routed call (docs/scale-out.md,
 *	  decision 3): its messages without the statement that carried the
 *	  call's arguments, and a deadlock's detail with that statement cut.
 *
 * Owns: which top-level statement of this backend ran sbq_routed.
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
#include "pgstat.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/elog.h"

#include "compat.h"
#include "dist_int.h"
#include "distributed.h"

/*
 * What a node logs of a routed call. The call reaches it as the statement
 * "SELECT r FROM <schema>.sbq_routed(key, fn, args) r(r)", its arguments
 * as constants (Citus delegates only those), and the node logs a message
 * of the call (an error, a lock waited for with log_lock_waits, a backend
 * terminated) with that statement: a lock token there would settle the
 * message for whoever reads the log, and a body would show. So messages
 * logged while such a statement runs sbq_routed in this backend leave it
 * out, and a deadlock's detail for the log (each process's statement) shows
 * a routed call's as such. Only a statement of exactly that form, whose
 * every part is a constant, and for this backend's own messages only while
 * it runs sbq_routed: no other statement can hide itself from the log by
 * looking like one. Logging every statement (log_statement,
 * log_min_duration_statement) is the server's owner's choice, and not
 * changed.
 */
static emit_log_hook_type sbq_prev_emit_log = NULL;

/* the top-level statement that ran sbq_routed here: its transaction and start */
static LocalTransactionId sbq_routed_lxid = InvalidLocalTransactionId;
static TimestampTz sbq_routed_stmt_start = 0;

/* Note that this backend's top-level statement runs sbq_routed (sbq_routed). */
void
sbq_routed_note_running(void)
{
	sbq_routed_lxid = SBQ_MY_LXID();
	sbq_routed_stmt_start = GetCurrentStatementStartTimestamp();
}

/* Whether this backend's top-level statement ran sbq_routed. */
static bool
sbq_routed_running(void)
{
	return MyProc != NULL && sbq_routed_lxid != InvalidLocalTransactionId &&
		sbq_routed_lxid == SBQ_MY_LXID() &&
		sbq_routed_stmt_start == GetCurrentStatementStartTimestamp();
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

/*
 * Skip a constant: an integer (a negative one Citus sends as a string constant
 * with a cast), or a string constant ('', or E'' with its
 * backslashes), and its cast, if any, to a type named by words.
 */
static bool
sbq_scan_constant(SbqScan *s)
{
	if (s->p == s->end)
		return s->out = true;
	if (isdigit((unsigned char) *s->p) ||
		(*s->p == '-' && s->p + 1 < s->end && isdigit((unsigned char) s->p[1])))
	{
		s->p++;
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
	if (s->end - s->p >= 2 && s->p[0] == ':' && s->p[1] == ':')
	{
		for (s->p += 2; s->p < s->end; s->p++)
			if (!isalnum((unsigned char) *s->p) && *s->p != '_' && *s->p != '.' &&
				*s->p != '[' && *s->p != ']')
				break;
	}
	if (s->p == s->end)
		s->out = true;
	return true;
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
 * detail, with the statement of every process that runs a routed call cut
 * from it: a deadlock's detail for the log ends with a line for each
 * process of the cycle, its number then its statement as the process shows
 * it in pg_stat_activity (cut to track_activity_query_size, and of as many
 * lines as it has). The statement goes when the process shows a routed
 * call and the detail has it whole at that place.
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
		const char *act = NULL;
		size_t		actlen = 0;

		if (stmt != NULL && strncmp(stmt, "SELECT r FROM ", 14) == 0)
		{
			const char *d = p;
			int			pid;

			while (d < colon && !isdigit((unsigned char) *d))
				d++;
			pid = d < colon ? atoi(d) : 0;
			if (pid > 0)
				act = pgstat_get_backend_current_activity(pid, false);
			if (act != NULL)
				actlen = strlen(act);
			if (act == NULL || strncmp(stmt, act, actlen) != 0 ||
				(stmt[actlen] != '\0' && stmt[actlen] != '\n') ||
				!sbq_routed_whole(act, actlen,
								  actlen + 4 >= (size_t) pgstat_track_activity_query_size))
				act = NULL;
		}
		if (act != NULL)
		{
			appendBinaryStringInfo(&buf, p, stmt - p);
			appendStringInfoString(&buf, "(a routed sbqueue call)");
			end = stmt[actlen] == '\n' ? stmt + actlen : NULL;
		}
		else
			appendBinaryStringInfo(&buf, p, len);
		if (end == NULL)
			break;
		appendStringInfoChar(&buf, '\n');
		p = end + 1;
	}
	return buf.data;
}

static void
sbq_dist_emit_log(ErrorData *edata)
{
	if (sbq_routed_running() && debug_query_string != NULL &&
		sbq_routed_whole(debug_query_string, strlen(debug_query_string), false))
		edata->hide_stmt = true;
	if (edata->detail_log != NULL && strstr(edata->detail_log, "sbq_routed(") != NULL)
		edata->detail_log = sbq_hide_routed_lines(edata->detail_log);
	if (sbq_prev_emit_log)
		sbq_prev_emit_log(edata);
}

/* Install the hook (_PG_init). */
void
sbq_dist_log_hook_install(void)
{
	sbq_prev_emit_log = emit_log_hook;
	emit_log_hook = sbq_dist_emit_log;
}

