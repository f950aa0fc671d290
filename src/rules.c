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
#include "utils/numeric.h"

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

/* The system property a correlation filter's key names, as a send gives it. */
static text *
sbq_correlation_property(const char *key, const SbqSendProps *props)
{
	if (strcmp(key, "correlation_id") == 0)
		return props->correlation_id;
	if (strcmp(key, "message_id") == 0)
		return props->message_id;
	if (strcmp(key, "to") == 0)
		return props->to_address;
	if (strcmp(key, "reply_to") == 0)
		return props->reply_to;
	if (strcmp(key, "subject") == 0)
		return props->subject;
	if (strcmp(key, "session_id") == 0)
		return props->session_id;
	if (strcmp(key, "reply_to_session_id") == 0)
		return props->reply_to_session_id;
	return props->content_type;
}

/* Whether a text equals a JSON string, byte for byte. */
static bool
sbq_text_equals(const text *t, const JsonbValue *v)
{
	return t != NULL && v->type == jbvString &&
		(int) VARSIZE_ANY_EXHDR(t) == v->val.string.len &&
		memcmp(VARDATA_ANY(t), v->val.string.val, v->val.string.len) == 0;
}

/*
 * Whether the application properties hold key with a value equal to want:
 * strings byte for byte, numbers by value, booleans and null as themselves.
 */
static bool
sbq_app_property_equals(Jsonb *props, const JsonbValue *key, const JsonbValue *want)
{
	JsonbValue *have;

	if (props == NULL || !JB_ROOT_IS_OBJECT(props))
		return false;
	have = findJsonbValueFromContainer(&props->root, JB_FOBJECT, (JsonbValue *) key);
	if (have == NULL || have->type != want->type)
		return false;
	switch (want->type)
	{
		case jbvString:
			return have->val.string.len == want->val.string.len &&
				memcmp(have->val.string.val, want->val.string.val, want->val.string.len) == 0;
		case jbvNumeric:
			return DatumGetBool(DirectFunctionCall2(numeric_eq,
													NumericGetDatum(have->val.numeric),
													NumericGetDatum(want->val.numeric)));
		case jbvBool:
			return have->val.boolean == want->val.boolean;
		case jbvNull:
			return true;
		default:
			return false;
	}
}

/*
 * sbq_correlation_matches
 *		Whether a message sent with props matches a correlation filter (checked
 *		by sbq_check_correlation_filter): every property it names is equal.
 *		A message without a content type of its own has the default one of
 *		its body's type.
 */
bool
sbq_correlation_matches(Jsonb *filter, const SbqSendProps *props, const char *default_ct)
{
	JsonbIterator *it = JsonbIteratorInit(&filter->root);
	JsonbIteratorToken tok;
	JsonbValue	v;
	JsonbValue	key;
	int			depth = 0;
	bool		in_props = false;
	text	   *ct = props->content_type;

	if (ct == NULL && default_ct != NULL)
		ct = cstring_to_text(default_ct);
	key.type = jbvNull;
	while ((tok = JsonbIteratorNext(&it, &v, false)) != WJB_DONE)
	{
		if (tok == WJB_BEGIN_OBJECT)
		{
			in_props = ++depth == 2;
			continue;
		}
		if (tok == WJB_END_OBJECT)
		{
			depth--;
			in_props = false;
			continue;
		}
		if (tok == WJB_KEY)
		{
			key = v;
			continue;
		}
		if (tok != WJB_VALUE)
			continue;
		if (in_props)
		{
			if (!sbq_app_property_equals(props->application_properties, &key, &v))
				return false;
		}
		else
		{
			char	   *k = pnstrdup(key.val.string.val, key.val.string.len);
			text	   *have = strcmp(k, "content_type") == 0 ? ct :
				sbq_correlation_property(k, props);

			if (!sbq_text_equals(have, &v))
				return false;
		}
	}
	return true;
}
