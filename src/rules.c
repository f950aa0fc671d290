/*-------------------------------------------------------------------------
 *
 * rules.c
 *	  The rules of subscriptions: their filters and actions checked when a
 *	  rule is added, and a message matched against them when it is sent to
 *	  a topic.
 *
 * A correlation filter is a JSON object whose members name system
 * properties of a message (correlation_id, message_id, to, reply_to,
 * subject, session_id, reply_to_session_id, content_type) and, under
 * "properties", application properties; it matches a message whose every
 * named property equals the filter's value (strings case-sensitively).
 *
 * Owns: nothing. Locks: none.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/rules.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "topics.h"

/* the longest filter or action (Service Bus's limit) */
#define SBQ_MAX_RULE_TEXT		1024

/* the system properties a correlation filter may name */
static const char *const correlation_keys[] = {
	"correlation_id", "message_id", "to", "reply_to", "subject", "session_id",
	"reply_to_session_id", "content_type", "properties"
};

static void
sbq_bad_correlation_filter(const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid correlation filter"),
			 errdetail_internal("%s", detail)));
}

/*
 * sbq_check_correlation_filter
 *		A correlation filter is a JSON object of known system properties
 *		with string values, and "properties", an object of scalar values.
 */
void
sbq_check_correlation_filter(Jsonb *filter)
{
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	v;
	int			depth = 0;
	bool		in_props = false;
	char	   *key = NULL;

	if (!JB_ROOT_IS_OBJECT(filter))
		sbq_bad_correlation_filter("A correlation filter is a JSON object.");
	it = JsonbIteratorInit(&filter->root);
	while ((tok = JsonbIteratorNext(&it, &v, false)) != WJB_DONE)
	{
		CHECK_FOR_INTERRUPTS();
		if (tok == WJB_BEGIN_OBJECT || tok == WJB_BEGIN_ARRAY)
		{
			depth++;
			if (depth == 2 && tok == WJB_BEGIN_OBJECT && key != NULL &&
				strcmp(key, "properties") == 0)
				in_props = true;
			else if (depth >= 2)
				sbq_bad_correlation_filter(psprintf("The value of \"%s\" must be %s.", key,
													in_props ? "a string, number, boolean or null" :
													strcmp(key, "properties") == 0 ?
													"an object" : "a string"));
			continue;
		}
		if (tok == WJB_END_OBJECT || tok == WJB_END_ARRAY)
		{
			if (depth-- == 2)
				in_props = false;
			continue;
		}
		if (tok == WJB_KEY)
		{
			key = pnstrdup(v.val.string.val, v.val.string.len);
			if (depth == 1)
			{
				size_t		i;

				for (i = 0; i < lengthof(correlation_keys); i++)
					if (strcmp(key, correlation_keys[i]) == 0)
						break;
				if (i == lengthof(correlation_keys))
					sbq_bad_correlation_filter(psprintf("\"%s\" is not a property a correlation filter matches on.", key));
			}
			continue;
		}
		/* a scalar value */
		if (depth == 1 && strcmp(key, "properties") == 0)
			sbq_bad_correlation_filter("The value of \"properties\" must be an object.");
		if (depth == 1 && v.type != jbvString)
			sbq_bad_correlation_filter(psprintf("The value of \"%s\" must be a string.", key));
	}
}

/*
 * sbq_check_rule_text
 *		A filter or action: at most SBQ_MAX_RULE_TEXT characters.
 */
static char *
sbq_check_rule_text(text *t, const char *what)
{
	char	   *s = text_to_cstring(t);

	if (pg_mbstrlen(s) > SBQ_MAX_RULE_TEXT)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is too long", what),
				 errdetail("A rule's filter and action have at most %d characters each.",
						   SBQ_MAX_RULE_TEXT)));
	return s;
}

/*
 * sbq_check_sql_filter
 *		A SQL filter, checked: it must parse (22023 with the position).
 */
char *
sbq_check_sql_filter(text *filter)
{
	(void) sbq_check_rule_text(filter, "SQL filter");
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("SQL filters are not supported yet"),
			 errhint("Use a correlation filter.")));
	return NULL;
}

/*
 * sbq_check_rule_action
 *		A rule action, checked: it must parse (22023 with the position).
 */
char *
sbq_check_rule_action(text *action)
{
	(void) sbq_check_rule_text(action, "rule action");
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("rule actions are not supported yet")));
	return NULL;
}
