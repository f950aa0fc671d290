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
 * named property equals the filter's value (strings case-sensitively). A
 * filter that names a property with a string value has an anchor: that
 * property and value, which a message must have to match, so that a send
 * looks up the filters its own properties anchor (topic_send.c) instead of
 * comparing every one.
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

#include <math.h>

#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "common/int.h"
#include "common/shortest_dec.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/datetime.h"
#include "utils/timestamp.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "filter.h"
#include "topics.h"

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
	/* every send to the topic compares it: bounded, as a SQL filter is */
	if (sbq_jsonb_text_size(filter, SBQ_MAX_CORRELATION_FILTER_SIZE) > SBQ_MAX_CORRELATION_FILTER_SIZE)
		sbq_bad_correlation_filter(psprintf("A correlation filter's JSON text has at most %d bytes.",
											SBQ_MAX_CORRELATION_FILTER_SIZE));
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

/*
 * The key of a property with a string value in the correlation index:
 * system property number sysprop (of correlation_keys), or the application
 * property name (sysprop -1), and the value; no two differ only in where
 * the name ends.
 */
static void
sbq_anchor_key(StringInfo buf, int sysprop, const char *name, int namelen, const char *val,
			   int vallen)
{
	resetStringInfo(buf);
	if (sysprop >= 0)
		appendStringInfo(buf, "s%d=", sysprop);
	else
	{
		appendStringInfo(buf, "p%d:", namelen);
		appendBinaryStringInfo(buf, name, namelen);
		appendStringInfoChar(buf, '=');
	}
	appendBinaryStringInfo(buf, val, vallen);
}

/*
 * sbq_correlation_anchor
 *		A property that a message must have, with a string value, to match
 *		a correlation filter (checked by sbq_check_correlation_filter), as
 *		its key into key: a system property when the filter names one, else
 *		an application property. False when it names none with a string
 *		value (an empty filter, or numbers, booleans and nulls only).
 */
bool
sbq_correlation_anchor(Jsonb *filter, StringInfo key)
{
	JsonbIterator *it = JsonbIteratorInit(&filter->root);
	JsonbIteratorToken tok;
	JsonbValue	v;
	JsonbValue	k;
	int			depth = 0;
	bool		found = false;

	memset(&k, 0, sizeof(k));
	while ((tok = JsonbIteratorNext(&it, &v, false)) != WJB_DONE)
	{
		if (tok == WJB_BEGIN_OBJECT)
			depth++;
		else if (tok == WJB_END_OBJECT)
			depth--;
		else if (tok == WJB_KEY)
			k = v;
		else if (tok == WJB_VALUE && v.type == jbvString && depth == 1)
		{
			size_t		i;

			for (i = 0; i < lengthof(correlation_keys); i++)
				if ((int) strlen(correlation_keys[i]) == k.val.string.len &&
					memcmp(correlation_keys[i], k.val.string.val, k.val.string.len) == 0)
					break;
			sbq_anchor_key(key, (int) i, NULL, 0, v.val.string.val, v.val.string.len);
			return true;
		}
		else if (tok == WJB_VALUE && v.type == jbvString && depth == 2 && !found)
		{
			sbq_anchor_key(key, -1, k.val.string.val, k.val.string.len,
						   v.val.string.val, v.val.string.len);
			found = true;
		}
	}
	return found;
}

/*
 * sbq_correlation_keys
 *		The keys (as sbq_correlation_anchor makes them) of the properties with
 *		a string value of a message sent with props: its system properties
 *		(its content type, or default_ct) and its application properties.
 *		Into *keys and *lens (palloc'd); returns how many.
 */
int
sbq_correlation_keys(const SbqSendProps *props, const char *default_ct, char ***keys,
					 int **lens)
{
	int			room = lengthof(correlation_keys);
	int			n = 0;
	size_t		i;
	StringInfoData buf;

	*keys = palloc(sizeof(char *) * room);
	*lens = palloc(sizeof(int) * room);
	initStringInfo(&buf);
	for (i = 0; i < lengthof(correlation_keys) - 1; i++)
	{
		text	   *t = sbq_correlation_property(correlation_keys[i], props);

		if (t == NULL && strcmp(correlation_keys[i], "content_type") == 0 && default_ct != NULL)
			t = cstring_to_text(default_ct);
		if (t == NULL)
			continue;
		sbq_anchor_key(&buf, (int) i, NULL, 0, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
		(*keys)[n] = pnstrdup(buf.data, buf.len);
		(*lens)[n++] = buf.len;
	}
	if (props->application_properties != NULL && JB_ROOT_IS_OBJECT(props->application_properties))
	{
		JsonbIterator *it = JsonbIteratorInit(&props->application_properties->root);
		JsonbIteratorToken tok;
		JsonbValue	v;
		JsonbValue	k;

		memset(&k, 0, sizeof(k));
		while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
		{
			if (tok == WJB_KEY)
				k = v;
			if (tok != WJB_VALUE || v.type != jbvString)
				continue;
			if (n == room)
			{
				room *= 2;
				*keys = repalloc(*keys, sizeof(char *) * room);
				*lens = repalloc(*lens, sizeof(int) * room);
			}
			sbq_anchor_key(&buf, -1, k.val.string.val, k.val.string.len,
						   v.val.string.val, v.val.string.len);
			(*keys)[n] = pnstrdup(buf.data, buf.len);
			(*lens)[n++] = buf.len;
		}
	}
	pfree(buf.data);
	return n;
}

/* ------------------------------------------------------ the SQL language */

/* The filter engine's allocator: a memory context (arg); NULL when out of memory. */
static void *
sbq_filter_alloc(void *arg, size_t size)
{
	return MemoryContextAllocExtended((MemoryContext) arg, size, MCXT_ALLOC_NO_OOM);
}

/*
 * sbq_compile_rule
 *		Parse a rule's SQL filter and action (either may be NULL) in the
 *		current memory context; 22023 with the position of the error when
 *		one does not parse.
 */
void
sbq_compile_rule(const char *sql_filter, const char *action, SbqFilterExpr **filter,
				 SbqFilterAction **compiled_action)
{
	SbqFilterError err;

	*filter = NULL;
	*compiled_action = NULL;
	if (sql_filter != NULL &&
		!sbq_filter_parse(sql_filter, strlen(sql_filter), sbq_filter_alloc,
						  CurrentMemoryContext, filter, &err))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid SQL filter: %s", err.message),
				 errdetail("The error is at character %d of the filter.", err.position)));
	if (action != NULL &&
		!sbq_action_parse(action, strlen(action), sbq_filter_alloc, CurrentMemoryContext,
						  compiled_action, &err))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid rule action: %s", err.message),
				 errdetail("The error is at character %d of the action.", err.position)));
}

/* sbq_check_sql_filter: a SQL filter, checked (it must parse); returns its text. */
char *
sbq_check_sql_filter(text *filter)
{
	char	   *s = text_to_cstring(filter);
	SbqFilterExpr *f;
	SbqFilterAction *a;

	sbq_compile_rule(s, NULL, &f, &a);
	return s;
}

/* sbq_check_rule_action: a rule action, checked (it must parse); returns its text. */
char *
sbq_check_rule_action(text *action)
{
	char	   *s = text_to_cstring(action);
	SbqFilterExpr *f;
	SbqFilterAction *a;

	sbq_compile_rule(NULL, s, &f, &a);
	return s;
}

/* A text property as a filter value: a string, or NULL when unset. */
static void
sbq_text_value(const text *t, SbqFilterValue *v)
{
	memset(v, 0, sizeof(*v));
	if (t == NULL)
		return;
	v->kind = SBQ_FV_STRING;
	v->s = VARDATA_ANY(t);
	v->len = VARSIZE_ANY_EXHDR(t);
}

/* A C string as a filter value (NULL: NULL). */
static void
sbq_cstring_value(const char *s, SbqFilterValue *v)
{
	memset(v, 0, sizeof(*v));
	if (s == NULL)
		return;
	v->kind = SBQ_FV_STRING;
	v->s = s;
	v->len = strlen(s);
}

/*
 * A JSON value as a filter value: strings, booleans and null as such; a
 * number as an integer when it is written as one and fits int64, else as a
 * double; an object or array is a value the language cannot hold.
 */
static void
sbq_json_value(const JsonbValue *j, SbqFilterValue *v)
{
	memset(v, 0, sizeof(*v));
	switch (j->type)
	{
		case jbvNull:
			break;
		case jbvBool:
			v->kind = SBQ_FV_BOOL;
			v->b = j->val.boolean;
			break;
		case jbvString:
			v->kind = SBQ_FV_STRING;
			v->s = j->val.string.val;
			v->len = j->val.string.len;
			break;
		case jbvNumeric:
			{
				char	   *str = DatumGetCString(DirectFunctionCall1(numeric_out,
																	  NumericGetDatum(j->val.numeric)));
				char	   *end;
				long long	i;

				errno = 0;
				i = strtoll(str, &end, 10);
				if (*end == '\0' && errno == 0)
				{
					v->kind = SBQ_FV_INT;
					v->i = i;
				}
				else
				{
					v->kind = SBQ_FV_DOUBLE;
					v->d = strtod(str, NULL);
				}
				break;
			}
		default:
			v->kind = SBQ_FV_UNSUPPORTED;
			break;
	}
}

/* user_lookup: the application property name (any letter case) of the message. */
static bool
sbq_filter_user_lookup(void *arg, const char *name, size_t len, SbqFilterValue *v)
{
	SbqRuleMessage *m = arg;
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	jv;
	bool		found = false;

	if (m->properties == NULL || !JB_ROOT_IS_OBJECT(m->properties))
		return false;
	it = JsonbIteratorInit(&m->properties->root);
	while ((tok = JsonbIteratorNext(&it, &jv, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
			found = (size_t) jv.val.string.len == len &&
				pg_strncasecmp(jv.val.string.val, name, len) == 0;
		else if (tok == WJB_VALUE && found)
		{
			sbq_json_value(&jv, v);
			return true;
		}
	}
	return false;
}

/*
 * A timestamp as a filter value: its ISO 8601 text in UTC
 * ("2026-12-02T20:15:00.123456Z"), whatever the session's time zone; or NULL.
 */
static void
sbq_time_value(bool has, TimestampTz t, SbqFilterValue *v)
{
	struct pg_tm tm;
	fsec_t		fsec;

	memset(v, 0, sizeof(*v));
	if (!has || TIMESTAMP_NOT_FINITE(t) || timestamp2tm(t, NULL, &tm, &fsec, NULL, NULL) != 0)
		return;
	sbq_cstring_value(psprintf("%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year, tm.tm_mon,
							   tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int) fsec), v);
}

/* sys_lookup: the system properties a message sent to a topic has. */
static bool
sbq_filter_sys_lookup(void *arg, SbqFilterSysProp prop, SbqFilterValue *v)
{
	SbqRuleMessage *m = arg;
	const SbqSendProps *p = m->props;

	memset(v, 0, sizeof(*v));
	switch (prop)
	{
		case SBQ_FSYS_MESSAGE_ID:
			sbq_text_value(p->message_id, v);
			return true;
		case SBQ_FSYS_CORRELATION_ID:
			sbq_text_value(p->correlation_id, v);
			return true;
		case SBQ_FSYS_CONTENT_TYPE:
			if (p->content_type != NULL)
				sbq_text_value(p->content_type, v);
			else
				sbq_cstring_value(m->default_content_type, v);
			return true;
		case SBQ_FSYS_LABEL:
			sbq_text_value(p->subject, v);
			return true;
		case SBQ_FSYS_REPLY_TO:
			sbq_text_value(p->reply_to, v);
			return true;
		case SBQ_FSYS_REPLY_TO_SESSION_ID:
			sbq_text_value(p->reply_to_session_id, v);
			return true;
		case SBQ_FSYS_SESSION_ID:
			sbq_text_value(p->session_id, v);
			return true;
		case SBQ_FSYS_TO:
			sbq_text_value(p->to_address, v);
			return true;
		case SBQ_FSYS_SEQUENCE_NUMBER:
		case SBQ_FSYS_ENQUEUED_SEQUENCE_NUMBER:
			v->kind = SBQ_FV_INT;
			v->i = m->sequence_number;
			return true;
		case SBQ_FSYS_DELIVERY_COUNT:
			v->kind = SBQ_FV_INT;
			v->i = 0;
			return true;
		case SBQ_FSYS_SIZE:
			v->kind = SBQ_FV_INT;
			v->i = m->size;
			return true;
		case SBQ_FSYS_ENQUEUED_TIME_UTC:
			sbq_time_value(true, m->enqueued_time, v);
			return true;
		case SBQ_FSYS_SCHEDULED_ENQUEUE_TIME_UTC:
			sbq_time_value(p->has_scheduled, p->scheduled, v);
			return true;
		case SBQ_FSYS_EXPIRES_AT_UTC:
		case SBQ_FSYS_TIME_TO_LIVE:
		case SBQ_FSYS_LOCK_TOKEN:
		case SBQ_FSYS_DEAD_LETTER_SOURCE:
			/* not known when the message is sent: NULL */
			return true;
		default:
			return false;
	}
}

/* new_guid: 16 strong random bytes for newid(). */
static bool
sbq_filter_new_guid(void *arg, unsigned char out[16])
{
	sbq_random_bytes(out, 16);
	return true;
}

/* The engine's view of a message. */
static void
sbq_filter_message(SbqRuleMessage *m, SbqFilterMessage *fm)
{
	fm->arg = m;
	fm->user_lookup = sbq_filter_user_lookup;
	fm->sys_lookup = sbq_filter_sys_lookup;
	fm->new_guid = sbq_filter_new_guid;
}

/*
 * sbq_rule_eval_filter
 *		Evaluate a compiled filter (NULL: the true filter) against a message.
 *		On SBQ_FILTER_ERROR, *err says why.
 */
SbqFilterResult
sbq_rule_eval_filter(const SbqFilterExpr *filter, SbqRuleMessage *m, SbqFilterError *err)
{
	SbqFilterMessage fm;

	if (filter == NULL)
		return SBQ_FILTER_TRUE;
	sbq_filter_message(m, &fm);
	return sbq_filter_eval(filter, &fm, sbq_filter_alloc, CurrentMemoryContext, err);
}

/* A filter value as a JSON value; false for a double JSON cannot hold. */
static bool
sbq_value_json(const SbqFilterValue *v, JsonbValue *j)
{
	char		buf[DOUBLE_SHORTEST_DECIMAL_LEN];

	switch (v->kind)
	{
		case SBQ_FV_BOOL:
			j->type = jbvBool;
			j->val.boolean = v->b;
			return true;
		case SBQ_FV_INT:
			j->type = jbvNumeric;
			j->val.numeric = int64_to_numeric(v->i);
			return true;
		case SBQ_FV_DOUBLE:
			if (isnan(v->d) || isinf(v->d))
				return false;
			/* the shortest decimal that reads back as the same double */
			double_to_shortest_decimal_buf(v->d, buf);
			j->type = jbvNumeric;
			j->val.numeric = DatumGetNumeric(DirectFunctionCall3(numeric_in, CStringGetDatum(buf),
																 ObjectIdGetDatum(InvalidOid),
																 Int32GetDatum(-1)));
			return true;
		case SBQ_FV_STRING:
			j->type = jbvString;
			j->val.string.val = (char *) v->s;
			j->val.string.len = (int) v->len;
			return true;
		default:
			j->type = jbvNull;
			return true;
	}
}

/*
 * sbq_set_property
 *		The application properties with key (any letter case) removed, and
 *		then, unless value is NULL, set to *value.
 */
Jsonb *
sbq_set_property(Jsonb *props, const char *key, size_t keylen, const JsonbValue *value)
{
	JsonbParseState *state = NULL;
	JsonbValue *res;
	JsonbValue	k;

	(void) pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	if (props != NULL && JB_ROOT_IS_OBJECT(props))
	{
		JsonbIterator *it = JsonbIteratorInit(&props->root);
		JsonbIteratorToken tok;
		JsonbValue	jv;
		bool		skip = false;

		while ((tok = JsonbIteratorNext(&it, &jv, true)) != WJB_DONE)
		{
			if (tok == WJB_KEY)
			{
				skip = (size_t) jv.val.string.len == keylen &&
					pg_strncasecmp(jv.val.string.val, key, keylen) == 0;
				if (!skip)
					(void) pushJsonbValue(&state, WJB_KEY, &jv);
			}
			else if (tok == WJB_VALUE && !skip)
				(void) pushJsonbValue(&state, WJB_VALUE, &jv);
		}
	}
	if (value != NULL)
	{
		k.type = jbvString;
		k.val.string.val = (char *) key;
		k.val.string.len = (int) keylen;
		(void) pushJsonbValue(&state, WJB_KEY, &k);
		(void) pushJsonbValue(&state, WJB_VALUE, (JsonbValue *) value);
	}
	res = pushJsonbValue(&state, WJB_END_OBJECT, NULL);
	return JsonbValueToJsonb(res);
}

/* the text of a string value, or NULL */
static text *
sbq_value_text(const SbqFilterValue *v)
{
	return v->kind == SBQ_FV_STRING ? cstring_to_text_with_len(v->s, (int) v->len) : NULL;
}

/*
 * sbq_action_result_ok
 *		What an action left (p) of a message (before) must be what a send may
 *		give: a message id where there was one, not empty, ids of at most 128
 *		characters; else *err, for the dead-letter sub-queue. (The size is the
 *		subscription's to judge.)
 */
static bool
sbq_action_result_ok(const SbqSendProps *p, const SbqSendProps *before, SbqFilterError *err)
{
	const struct
	{
		const char *name;
		const text *value;
	}			ids[] = {
		{"MessageId", p->message_id},
		{"SessionId", p->session_id},
		{"ReplyToSessionId", p->reply_to_session_id},
	};
	size_t		i;

	err->type = "RuleActionException";
	err->position = 0;
	if ((p->message_id == NULL && before->message_id != NULL) ||
		(p->message_id != NULL && VARSIZE_ANY_EXHDR(p->message_id) == 0))
	{
		err->message = "the action leaves the message without a MessageId";
		return false;
	}
	for (i = 0; i < lengthof(ids); i++)
		if (ids[i].value != NULL &&
			pg_mbstrlen_with_len(VARDATA_ANY(ids[i].value), VARSIZE_ANY_EXHDR(ids[i].value)) > 128)
		{
			err->message = psprintf("the action sets sys.%s to more than 128 characters", ids[i].name);
			return false;
		}
	return true;
}

/*
 * sbq_rule_apply_action
 *		Run a compiled action on a message: its properties (in *props) get
 *		the action's edits. False, with *err, when the action fails (the
 *		properties are then as they were).
 */
bool
sbq_rule_apply_action(const SbqFilterAction *action, SbqRuleMessage *m, SbqSendProps *props,
					  SbqFilterError *err)
{
	SbqFilterMessage fm;
	SbqFilterEdit *edits;
	int			nedits;
	SbqSendProps p = *props;
	int			i;

	sbq_filter_message(m, &fm);
	if (!sbq_action_eval(action, &fm, sbq_filter_alloc, CurrentMemoryContext, &edits, &nedits,
						 err))
		return false;
	for (i = 0; i < nedits; i++)
	{
		SbqFilterEdit *e = &edits[i];
		JsonbValue	j;

		CHECK_FOR_INTERRUPTS();
		if (e->scope == SBQ_FSCOPE_USER)
		{
			if (!e->remove && !sbq_value_json(&e->value, &j))
			{
				err->type = "RuleActionException";
				err->message = psprintf("the value set to \"%.*s\" is not a number JSON can hold",
										(int) e->name_len, e->name);
				err->position = 0;
				return false;
			}
			p.application_properties = sbq_set_property(p.application_properties, e->name,
														e->name_len, e->remove ? NULL : &j);
			continue;
		}
		switch (e->sys)
		{
			case SBQ_FSYS_MESSAGE_ID:
				p.message_id = sbq_value_text(&e->value);
				break;
			case SBQ_FSYS_CORRELATION_ID:
				p.correlation_id = sbq_value_text(&e->value);
				break;
			case SBQ_FSYS_CONTENT_TYPE:
				p.content_type = sbq_value_text(&e->value);
				break;
			case SBQ_FSYS_LABEL:
				p.subject = sbq_value_text(&e->value);
				break;
			case SBQ_FSYS_REPLY_TO:
				p.reply_to = sbq_value_text(&e->value);
				break;
			case SBQ_FSYS_REPLY_TO_SESSION_ID:
				p.reply_to_session_id = sbq_value_text(&e->value);
				break;
			case SBQ_FSYS_SESSION_ID:
				p.session_id = sbq_value_text(&e->value);
				break;
			case SBQ_FSYS_TO:
				p.to_address = sbq_value_text(&e->value);
				break;
			default:
				/* the scheduled time: a subscription ignores it (R10.12) */
				break;
		}
	}
	if (!sbq_action_result_ok(&p, props, err))
		return false;
	*props = p;
	return true;
}
