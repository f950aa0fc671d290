/*-------------------------------------------------------------------------
 *
 * api_topics.c
 *	  The SQL-callable functions that manage topics, subscriptions and
 *	  rules: sbq_create_topic, sbq_update_topic, sbq_delete_topic,
 *	  sbq_get_topic, sbq_create_subscription, sbq_update_subscription,
 *	  sbq_delete_subscription, sbq_get_subscription, sbq_add_rule,
 *	  sbq_remove_rule.
 *
 * As api_queues.c: arguments checked first (22004, 22023), writes refused on
 * a read-only transaction (25006), the work done in a storage section.
 * Creating and deleting a topic, and deleting one of its subscriptions, hold
 * the topic's name lock exclusively (a send holds it in share mode: the
 * delete waits for a send that may be storing a copy); any other change of
 * its properties, subscriptions or rules holds it in a self-conflicting mode,
 * so that two changes never overwrite each other. Deleting a subscription
 * also holds its address's lock exclusively, as deleting a queue does.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/api_topics.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"

#include "distributed.h"
#include "storage_core.h"
#include "topics.h"

PG_FUNCTION_INFO_V1(sbq_create_topic);
PG_FUNCTION_INFO_V1(sbq_update_topic);
PG_FUNCTION_INFO_V1(sbq_delete_topic);
PG_FUNCTION_INFO_V1(sbq_get_topic);
PG_FUNCTION_INFO_V1(sbq_create_subscription);
PG_FUNCTION_INFO_V1(sbq_update_subscription);
PG_FUNCTION_INFO_V1(sbq_delete_subscription);
PG_FUNCTION_INFO_V1(sbq_get_subscription);
PG_FUNCTION_INFO_V1(sbq_add_rule);
PG_FUNCTION_INFO_V1(sbq_remove_rule);
PG_FUNCTION_INFO_V1(sbq_test_filter);
PG_FUNCTION_INFO_V1(sbq_test_action);

/* sbq_create_topic / sbq_update_topic: topic, ttl, window, size */
static const int topic_arg_positions[SBQ_NUM_QUEUE_ARGS] = {
	[ARG_QUEUE] = 0,
	[ARG_LOCK_DURATION] = -1, [ARG_MAX_DELIVERY_COUNT] = -1,
	[ARG_DEFAULT_TTL] = 1,
	[ARG_DLQ_ON_EXPIRATION] = -1,
	[ARG_DUP_WINDOW] = 2,
	[ARG_REQUIRES_SESSION] = -1, [ARG_FORWARD_TO] = -1, [ARG_FORWARD_DLQ_TO] = -1,
	[ARG_MAX_MESSAGE_SIZE] = 3,
	[ARG_DEAD_LETTER_TTL] = -1, [ARG_RETRY_DELAY] = -1, [ARG_RETRY_BACKOFF] = -1,
	[ARG_MAX_RETRY_DELAY] = -1
};

/* sbq_create_subscription / sbq_update_subscription: topic, subscription, properties */
#define SUB_ARG_DLQ_ON_FILTER_ERRORS 10
static const int subscription_arg_positions[SBQ_NUM_QUEUE_ARGS] = {
	[ARG_QUEUE] = 0,
	[ARG_LOCK_DURATION] = 2, [ARG_MAX_DELIVERY_COUNT] = 3, [ARG_DEFAULT_TTL] = 4,
	[ARG_DLQ_ON_EXPIRATION] = 5, [ARG_DUP_WINDOW] = 6, [ARG_REQUIRES_SESSION] = 7,
	[ARG_FORWARD_TO] = 8, [ARG_FORWARD_DLQ_TO] = 9,
	[ARG_MAX_MESSAGE_SIZE] = -1,
	[ARG_DEAD_LETTER_TTL] = 11, [ARG_RETRY_DELAY] = 12, [ARG_RETRY_BACKOFF] = 13,
	[ARG_MAX_RETRY_DELAY] = 14
};

/* Refuse a topic call on SQL that has no topics. */
static void
sbq_require_topics(void)
{
	if (!sbq_topics_installed())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("topics need version 0.10 or later of extension sbqueue"),
				 errhint("Run ALTER EXTENSION sbqueue UPDATE.")));
}

static void
sbq_topic_not_found(const char *name)
{
	ereport(ERROR,
			(errcode(SBQ_ERRCODE_ENTITY_NOT_FOUND),
			 errmsg("topic \"%s\" does not exist", name)));
}

static void
sbq_subscription_not_found(const char *name, const SbqQueue *topic)
{
	ereport(ERROR,
			(errcode(SBQ_ERRCODE_ENTITY_NOT_FOUND),
			 errmsg("subscription \"%s\" of topic \"%s\" does not exist", name, topic->name)));
}

/*
 * sbq_topic_call_begin
 *		What the calls on an existing topic share: its name checked, writes
 *		allowed (fname names a call that writes, NULL for one that reads), the
 *		name's lock in lockmode (NoLock: none), a storage section open, and
 *		the topic looked up (SB008 when there is none) with the caller's
 *		right checked.
 */
static void
sbq_topic_call_begin(FunctionCallInfo fcinfo, const char *fname, LOCKMODE lockmode,
					 int16 rights, SbqAddress *addr, SbqQueue *topic)
{
	sbq_require_arg(fcinfo, 0, "topic");
	sbq_parse_address(PG_GETARG_TEXT_PP(0), false, addr);
	if (fname != NULL)
		PreventCommandIfReadOnly(fname);
	sbq_storage_begin();
	sbq_require_topics();
	if (lockmode != NoLock)
	{
		/* the right first: a role without it must not queue for the lock */
		if (!sbq_storage_find_topic(addr->key, false, topic))
			sbq_topic_not_found(addr->name);
		sbq_rights_require(topic, rights);
		sbq_storage_end();
		sbq_lock_queue_name(addr->key, lockmode);
		sbq_storage_begin();
	}
	if (!sbq_storage_find_topic(addr->key, false, topic))
		sbq_topic_not_found(addr->name);
	sbq_rights_require(topic, rights);
}

/*
 * The row of a topic's properties as this call's result; SB008 when a delete
 * committed since the topic was looked up (a call that locks no name).
 */
static Datum
sbq_topic_result(FunctionCallInfo fcinfo, const char *name, int32 topic_id)
{
	TupleDesc	tupdesc;
	HeapTuple	tuple;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	tupdesc = BlessTupleDesc(tupdesc);
	tuple = sbq_storage_topic_tuple(topic_id, tupdesc, sbq_storage_caller_context());
	if (tuple == NULL)
		sbq_topic_not_found(name);
	return HeapTupleGetDatum(tuple);
}

/*
 * sbq_check_topic_props
 *		The checks of a queue's properties that apply to a topic: the
 *		others are left valid for the shared check.
 */
static void
sbq_check_topic_props(SbqQueue *p)
{
	p->lock_duration.time = SBQ_MIN_LOCK_DURATION;
	p->max_delivery_count = 1;
	sbq_check_queue_props(p);
}

/* sbq_create_topic(topic, properties...): a new topic; locks its name exclusively. */
Datum
sbq_create_topic(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	props;
	SbqQueue	existing;
	Datum		result;

	SBQ_ROUTE(fcinfo);
	sbq_require_arg(fcinfo, 0, "topic");
	sbq_parse_address(PG_GETARG_TEXT_PP(0), false, &addr);
	sbq_refuse_reserved_name(&addr);
	memset(&props, 0, sizeof(props));
	sbq_overlay_queue_props(fcinfo, &props, true, topic_arg_positions);
	sbq_check_topic_props(&props);
	PreventCommandIfReadOnly("sbq_create_topic()");

	sbq_lock_queue_name(addr.key, AccessExclusiveLock);
	sbq_storage_begin();
	sbq_require_topics();
	if (sbq_storage_find_topic(addr.key, false, &existing))
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_QUEUE_EXISTS),
				 errmsg("topic \"%s\" already exists", existing.name)));
	if (sbq_storage_find_queue(&addr, &existing))
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_QUEUE_EXISTS),
				 errmsg("queue \"%s\" already exists", existing.name),
				 errdetail("Queues and topics share their names.")));
	sbq_refuse_unmanaged_forwarders(&addr);
	props.queue_id = sbq_storage_create_topic(addr.name, addr.key, &props);
	result = sbq_topic_result(fcinfo, addr.name, props.queue_id);
	sbq_storage_end();
	PG_RETURN_DATUM(result);
}

/* sbq_update_topic(topic, properties...): new properties; locks its name against other changes. */
Datum
sbq_update_topic(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	props;
	Datum		result;

	SBQ_ROUTE(fcinfo);
	sbq_topic_call_begin(fcinfo, "sbq_update_topic()", ShareUpdateExclusiveLock,
						 SBQ_RIGHT_MANAGE, &addr, &props);
	sbq_overlay_queue_props(fcinfo, &props, false, topic_arg_positions);
	sbq_check_topic_props(&props);
	sbq_storage_update_topic(&props);
	result = sbq_topic_result(fcinfo, addr.name, props.queue_id);
	sbq_storage_end();
	PG_RETURN_DATUM(result);
}

/* sbq_delete_topic(topic): the topic with its subscriptions; locks its name exclusively. */
Datum
sbq_delete_topic(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	topic;

	SBQ_ROUTE(fcinfo);
	sbq_topic_call_begin(fcinfo, "sbq_delete_topic()", AccessExclusiveLock,
						 SBQ_RIGHT_MANAGE, &addr, &topic);
	sbq_storage_delete_topic(topic.queue_id);
	sbq_storage_end();
	PG_RETURN_VOID();
}

/* sbq_get_topic(topic): its properties; locks nothing. */
Datum
sbq_get_topic(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	topic;
	Datum		result;

	SBQ_ROUTE(fcinfo);
	sbq_topic_call_begin(fcinfo, NULL, NoLock, SBQ_RIGHT_ANY, &addr, &topic);
	result = sbq_topic_result(fcinfo, addr.name, topic.queue_id);
	sbq_storage_end();
	PG_RETURN_DATUM(result);
}

/*
 * sbq_topic_limit
 *		Refuse (54000) one more of what a topic holds n of, at most max.
 */
static void
sbq_topic_limit(const SbqQueue *topic, int64 n, int64 max, const char *what)
{
	if (n >= max)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("topic \"%s\" has " INT64_FORMAT " %s", topic->name, n, what),
				 errdetail("A topic has at most " INT64_FORMAT " %s.", max, what)));
}

/* ---------------------------------------------------------- subscriptions */

/*
 * sbq_entity_name_key
 *		Check a subscription or rule name (argument argno): 1-50 characters
 *		of A-Z a-z 0-9 . - _, starting and ending with a letter or digit
 *		(22004, 22023). Returns it; *key gets its lower-case form.
 */
static char *
sbq_entity_name_key(FunctionCallInfo fcinfo, int argno, const char *what, char **key)
{
	char	   *name;
	size_t		len;
	size_t		i;
	bool		ok;

	sbq_require_arg(fcinfo, argno, what);
	name = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	len = strlen(name);
	/* the default rule's name is the one that may start with "$" */
	if (strcmp(what, "rule") == 0 && pg_strcasecmp(name, SBQ_DEFAULT_RULE) == 0)
	{
		*key = pstrdup("$default");
		return pstrdup(SBQ_DEFAULT_RULE);
	}
	ok = len >= 1 && len <= SBQ_MAX_SUBSCRIPTION_NAME_LEN &&
		isalnum((unsigned char) name[0]) && isalnum((unsigned char) name[len - 1]);
	for (i = 0; ok && i < len; i++)
		ok = (isalnum((unsigned char) name[i]) && !IS_HIGHBIT_SET(name[i])) ||
			name[i] == '.' || name[i] == '-' || name[i] == '_';
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid %s name \"%s\"", what, name),
				 errdetail("A %s name has 1 to %d letters, digits, periods, hyphens and underscores, and starts and ends with a letter or digit.",
						   what, SBQ_MAX_SUBSCRIPTION_NAME_LEN)));
	*key = sbq_name_key(CurrentMemoryContext, name);
	return name;
}

/* The address of a subscription: "<topic>/subscriptions/<subscription>". */
static void
sbq_subscription_address(const SbqQueue *topic, const char *name, SbqAddress *addr)
{
	addr->name = psprintf("%s" SBQ_SUBSCRIPTIONS_SEGMENT "%s", topic->name, name);
	addr->key = sbq_name_key(CurrentMemoryContext, addr->name);
	addr->subqueue = SBQ_SUBQUEUE_MAIN;
}

/*
 * sbq_find_subscription
 *		The topic and the subscription named by a call (both looked up in a
 *		storage section; SB008 when either is missing), and whether the
 *		caller holds one of the rights asked for on the subscription or on its
 *		topic (42501 naming the subscription when neither).
 */
static void
sbq_find_subscription(const SbqAddress *taddr, const char *name, const char *key,
					  int16 rights, SbqQueue *topic, SbqQueue *sub, bool *dlq_on_filter_errors)
{
	SbqAddress	saddr;
	int32		queue_id;

	sbq_require_topics();
	if (!sbq_storage_find_topic(taddr->key, false, topic))
		sbq_topic_not_found(taddr->name);
	if (!sbq_storage_find_subscription(topic->queue_id, key, &queue_id, dlq_on_filter_errors))
		sbq_subscription_not_found(name, topic);
	sbq_subscription_address(topic, name, &saddr);

	/*
	 * Each look-up reads with a snapshot of its own: a delete of the
	 * subscription that committed between the two (a call that locks no
	 * name) leaves no queue, or a new subscription of that name another one.
	 * Either way the subscription looked up no longer exists.
	 */
	if (!sbq_storage_find_queue(&saddr, sub) || sub->queue_id != queue_id)
		sbq_subscription_not_found(name, topic);
	if (!sbq_rights_have(topic, rights))
		sbq_rights_require(sub, rights);
}

/*
 * sbq_subscription_call_begin
 *		The calls on an existing subscription: the names checked, writes
 *		allowed (fname names a call that writes), the caller's right on the
 *		subscription or its topic checked, the topic name's lock in lockmode
 *		(NoLock: none), then in a storage section the topic and subscription
 *		looked up again and the right checked again.
 */
static void
sbq_subscription_call_begin(FunctionCallInfo fcinfo, const char *fname, LOCKMODE lockmode,
							int16 rights, SbqQueue *topic, SbqQueue *sub,
							bool *dlq_on_filter_errors)
{
	SbqAddress	taddr;
	char	   *name;
	char	   *key;

	sbq_require_arg(fcinfo, 0, "topic");
	sbq_parse_address(PG_GETARG_TEXT_PP(0), false, &taddr);
	name = sbq_entity_name_key(fcinfo, 1, "subscription", &key);
	if (fname != NULL)
		PreventCommandIfReadOnly(fname);
	if (lockmode != NoLock)
	{
		/* the right first: a role without it must not queue for the lock */
		sbq_storage_begin();
		sbq_find_subscription(&taddr, name, key, rights, topic, sub, dlq_on_filter_errors);
		sbq_storage_end();
		sbq_lock_queue_name(taddr.key, lockmode);
	}
	sbq_storage_begin();
	sbq_find_subscription(&taddr, name, key, rights, topic, sub, dlq_on_filter_errors);
}

/*
 * sbq_check_subscription_props
 *		A subscription's properties: a queue's, but no duplicate detection of
 *		its own (the topic's applies, once, to what is sent to it; the copies
 *		of one message share its id).
 */
static void
sbq_check_subscription_props(SbqQueue *p)
{
	if (p->has_dup_window)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a subscription has no duplicate_detection_window"),
				 errdetail("Duplicate detection is the topic's: set it with sbq_create_topic() or sbq_update_topic().")));
	sbq_check_queue_props(p);
}

/*
 * sbq_refuse_forward_to_own_topic
 *		A subscription that forwarded to its own topic would multiply every
 *		message by the topic's subscriptions at each of the hops a message
 *		makes (22023).
 */
static void
sbq_refuse_forward_to_own_topic(const SbqQueue *sub, const SbqQueue *topic)
{
	if ((sub->forward_to != NULL && pg_strcasecmp(sub->forward_to, topic->name) == 0) ||
		(sub->forward_dlq_to != NULL && pg_strcasecmp(sub->forward_dlq_to, topic->name) == 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a subscription of topic \"%s\" cannot forward to it", topic->name),
				 errdetail("Each hop would copy the message to every subscription again.")));
}

/*
 * The row of a subscription's properties as this call's result (a call whose
 * second argument names the subscription); SB008 when a delete committed
 * since the subscription was looked up (a call that locks no name).
 */
static Datum
sbq_subscription_result(FunctionCallInfo fcinfo, const SbqQueue *topic, int32 queue_id)
{
	TupleDesc	tupdesc;
	HeapTuple	tuple;
	char	   *key;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	tupdesc = BlessTupleDesc(tupdesc);
	tuple = sbq_storage_subscription_tuple(queue_id, tupdesc, sbq_storage_caller_context());
	if (tuple == NULL)
		sbq_subscription_not_found(sbq_entity_name_key(fcinfo, 1, "subscription", &key),
								   topic);
	return HeapTupleGetDatum(tuple);
}

/*
 * sbq_create_subscription(topic, subscription, properties...): a new
 * subscription with the rule $Default; the caller needs manage on the topic.
 */
Datum
sbq_create_subscription(PG_FUNCTION_ARGS)
{
	SbqAddress	taddr;
	SbqAddress	saddr;
	SbqQueue	topic;
	SbqQueue	props;
	SbqQueue	existing;
	char	   *name;
	char	   *key;
	bool		dlq_on_filter_errors;
	int32		queue_id;
	int64		nsubs;
	int64		nsql;
	int64		ncorr;
	Datum		result;

	SBQ_ROUTE(fcinfo);
	name = sbq_entity_name_key(fcinfo, 1, "subscription", &key);
	memset(&props, 0, sizeof(props));
	props.max_message_size = SBQ_MAX_MESSAGE_SIZE;
	sbq_overlay_queue_props(fcinfo, &props, true, subscription_arg_positions);
	sbq_require_arg(fcinfo, SUB_ARG_DLQ_ON_FILTER_ERRORS,
					"dead_lettering_on_filter_evaluation_exceptions");
	dlq_on_filter_errors = PG_GETARG_BOOL(SUB_ARG_DLQ_ON_FILTER_ERRORS);
	sbq_check_subscription_props(&props);

	sbq_topic_call_begin(fcinfo, "sbq_create_subscription()", ShareUpdateExclusiveLock,
						 SBQ_RIGHT_MANAGE, &taddr, &topic);
	if (props.requires_session && !sbq_storage_sessions_available())
		elog(ERROR, "sessions are not available");
	sbq_storage_topic_counts(topic.queue_id, &nsubs, &nsql, &ncorr);
	sbq_topic_limit(&topic, nsubs, SBQ_MAX_SUBSCRIPTIONS_PER_TOPIC, "subscriptions");
	sbq_subscription_address(&topic, name, &saddr);
	sbq_refuse_forward_to_own_topic(&props, &topic);
	sbq_check_forward_to(&props, NULL, NULL);
	if (sbq_storage_find_subscription(topic.queue_id, key, &queue_id, &dlq_on_filter_errors) ||
		sbq_storage_find_queue(&saddr, &existing))
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_QUEUE_EXISTS),
				 errmsg("subscription \"%s\" of topic \"%s\" already exists", name, topic.name)));
	dlq_on_filter_errors = PG_GETARG_BOOL(SUB_ARG_DLQ_ON_FILTER_ERRORS);
	queue_id = sbq_storage_create_subscription(topic.queue_id, saddr.name, saddr.key, name,
											   key, &props, dlq_on_filter_errors);
	result = sbq_subscription_result(fcinfo, &topic, queue_id);
	sbq_storage_end();
	PG_RETURN_DATUM(result);
}

/* sbq_update_subscription(topic, subscription, properties...): needs manage on it. */
Datum
sbq_update_subscription(PG_FUNCTION_ARGS)
{
	SbqQueue	topic;
	SbqQueue	sub;
	SbqQueue	before;
	bool		dlq_on_filter_errors;
	bool		was_session;
	Datum		result;

	SBQ_ROUTE(fcinfo);
	sbq_subscription_call_begin(fcinfo, "sbq_update_subscription()", ShareUpdateExclusiveLock,
								SBQ_RIGHT_MANAGE, &topic, &sub, &dlq_on_filter_errors);
	was_session = sub.requires_session;
	before = sub;
	sbq_overlay_queue_props(fcinfo, &sub, false, subscription_arg_positions);
	if (sub.requires_session != was_session)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("requires_session of subscription \"%s\" cannot be changed", sub.name),
				 errdetail("It is set when a subscription is created, and only then.")));
	if (!PG_ARGISNULL(SUB_ARG_DLQ_ON_FILTER_ERRORS))
		dlq_on_filter_errors = PG_GETARG_BOOL(SUB_ARG_DLQ_ON_FILTER_ERRORS);
	sbq_check_subscription_props(&sub);
	sbq_refuse_forward_to_own_topic(&sub, &topic);
	sbq_check_forward_to(&sub, &before, NULL);
	if (sbq_forward_changes(&before, &sub))
	{
		/* its copies come from sends to the topic: the topic's name, exclusively */
		char	   *tkey = sbq_name_key(sbq_storage_caller_context(), topic.name);

		sbq_storage_end();
		sbq_lock_queue_name(tkey, AccessExclusiveLock);
		sbq_storage_begin();
		sbq_check_forward_start(&before, &sub);
	}
	sbq_storage_update_subscription(&sub, dlq_on_filter_errors);
	result = sbq_subscription_result(fcinfo, &topic, sub.queue_id);
	sbq_storage_end();
	PG_RETURN_DATUM(result);
}

/* sbq_delete_subscription(topic, subscription): it and all it holds; needs manage on it. */
Datum
sbq_delete_subscription(PG_FUNCTION_ARGS)
{
	SbqQueue	topic;
	SbqQueue	sub;
	bool		dlq_on_filter_errors;

	SBQ_ROUTE(fcinfo);
	/*
	 * The topic's name exclusively, as a send takes it in share mode: a send
	 * in progress may be storing a copy in the subscription, which the delete
	 * would not see and leave behind.
	 */
	sbq_subscription_call_begin(fcinfo, "sbq_delete_subscription()", AccessExclusiveLock,
								SBQ_RIGHT_MANAGE, &topic, &sub, &dlq_on_filter_errors);
	sbq_lock_queue_name(sbq_name_key(CurrentMemoryContext, sub.name), AccessExclusiveLock);
	sbq_storage_delete_subscription(sub.queue_id);
	sbq_storage_end();
	PG_RETURN_VOID();
}

/* sbq_get_subscription(topic, subscription): its properties; locks nothing. */
Datum
sbq_get_subscription(PG_FUNCTION_ARGS)
{
	SbqQueue	topic;
	SbqQueue	sub;
	bool		dlq_on_filter_errors;
	Datum		result;

	SBQ_ROUTE(fcinfo);
	sbq_subscription_call_begin(fcinfo, NULL, NoLock, SBQ_RIGHT_ANY, &topic, &sub,
								&dlq_on_filter_errors);
	result = sbq_subscription_result(fcinfo, &topic, sub.queue_id);
	sbq_storage_end();
	PG_RETURN_DATUM(result);
}

/* ------------------------------------------------------------------ rules */

/*
 * sbq_add_rule(topic, subscription, rule, sql_filter, correlation_filter,
 * action): a rule of a subscription; needs manage on it. At most one of the
 * two filters (neither: the true filter).
 */
Datum
sbq_add_rule(PG_FUNCTION_ARGS)
{
	SbqQueue	topic;
	SbqQueue	sub;
	bool		dlq_on_filter_errors;
	char	   *name;
	char	   *key;
	char	   *sql_filter = NULL;
	Jsonb	   *correlation = NULL;
	char	   *action = NULL;
	int64		nsubs;
	int64		nsql;
	int64		ncorr;

	SBQ_ROUTE(fcinfo);
	name = sbq_entity_name_key(fcinfo, 2, "rule", &key);
	if (!PG_ARGISNULL(3) && !PG_ARGISNULL(4))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a rule has one filter at most"),
				 errdetail("Give sql_filter or correlation_filter, or neither for the true filter.")));
	if (!PG_ARGISNULL(3))
		sql_filter = sbq_check_sql_filter(PG_GETARG_TEXT_PP(3));
	if (!PG_ARGISNULL(4))
	{
		correlation = PG_GETARG_JSONB_P(4);
		sbq_check_correlation_filter(correlation);
	}
	if (!PG_ARGISNULL(5))
		action = sbq_check_rule_action(PG_GETARG_TEXT_PP(5));

	sbq_subscription_call_begin(fcinfo, "sbq_add_rule()", ShareUpdateExclusiveLock,
								SBQ_RIGHT_MANAGE, &topic, &sub, &dlq_on_filter_errors);
	sbq_storage_topic_counts(topic.queue_id, &nsubs, &nsql, &ncorr);
	if (sql_filter != NULL)
		sbq_topic_limit(&topic, nsql, SBQ_MAX_SQL_FILTERS_PER_TOPIC, "SQL filters");
	if (correlation != NULL)
		sbq_topic_limit(&topic, ncorr, SBQ_MAX_CORRELATION_FILTERS_PER_TOPIC,
						"correlation filters");
	if (!sbq_storage_add_rule(sub.queue_id, name, sql_filter, correlation, action))
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_QUEUE_EXISTS),
				 errmsg("rule \"%s\" of subscription \"%s\" already exists", name, sub.name)));
	sbq_storage_end();
	PG_RETURN_VOID();
}

/* sbq_remove_rule(topic, subscription, rule): needs manage on the subscription. */
Datum
sbq_remove_rule(PG_FUNCTION_ARGS)
{
	SbqQueue	topic;
	SbqQueue	sub;
	bool		dlq_on_filter_errors;
	char	   *name;
	char	   *key;

	SBQ_ROUTE(fcinfo);
	name = sbq_entity_name_key(fcinfo, 2, "rule", &key);
	sbq_subscription_call_begin(fcinfo, "sbq_remove_rule()", ShareUpdateExclusiveLock,
								SBQ_RIGHT_MANAGE, &topic, &sub, &dlq_on_filter_errors);
	if (!sbq_storage_remove_rule(sub.queue_id, key))
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_ENTITY_NOT_FOUND),
				 errmsg("rule \"%s\" of subscription \"%s\" does not exist", name, sub.name)));
	sbq_storage_end();
	PG_RETURN_VOID();
}

/* ------------------------------------------------- trying rules out */

/*
 * The message of argument 1 (an sbq_new_message) as a rule sees it when it
 * is sent to a topic: no sequence number yet, enqueued now.
 */
static void
sbq_test_message(FunctionCallInfo fcinfo, SbqSendProps *props, SbqRuleMessage *m)
{
	bytea	   *body;

	sbq_require_arg(fcinfo, 1, "message");
	body = sbq_new_message_props(PG_GETARG_HEAPTUPLEHEADER(1), props);
	memset(m, 0, sizeof(*m));
	m->props = props;
	m->properties = props->application_properties;
	m->size = VARSIZE_ANY_EXHDR(body);
	m->enqueued_time = GetCurrentTimestamp();
}

static void
sbq_test_failed(const char *what, const SbqFilterError *err)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("%s failed: %s", what, err->message),
			 errdetail("A subscription dead-letters the message with reason \"%s\".", err->type)));
}

/*
 * sbq_test_filter(sql_filter, message): whether a SQL filter matches a
 * message (NULL: its value is unknown, which does not match); an error of
 * the filter is raised (22023) with the reason a subscription would give the
 * message. Reads nothing, writes nothing.
 */
Datum
sbq_test_filter(PG_FUNCTION_ARGS)
{
	SbqSendProps props;
	SbqRuleMessage m;
	SbqFilterExpr *filter;
	SbqFilterAction *action;
	SbqFilterError err;

	sbq_require_arg(fcinfo, 0, "sql_filter");
	sbq_compile_rule(text_to_cstring(PG_GETARG_TEXT_PP(0)), NULL, &filter, &action);
	sbq_test_message(fcinfo, &props, &m);
	switch (sbq_rule_eval_filter(filter, &m, &err))
	{
		case SBQ_FILTER_TRUE:
			PG_RETURN_BOOL(true);
		case SBQ_FILTER_FALSE:
			PG_RETURN_BOOL(false);
		case SBQ_FILTER_UNKNOWN:
			PG_RETURN_NULL();
		default:
			sbq_test_failed("SQL filter", &err);
	}
	PG_RETURN_NULL();
}

/*
 * sbq_test_action(action, message): the message as a rule's action leaves
 * it (a subscription's copy also gets RuleName, which this leaves out); an
 * error of the action is raised (22023) as sbq_test_filter raises one.
 */
Datum
sbq_test_action(PG_FUNCTION_ARGS)
{
	SbqSendProps props;
	SbqSendProps before;
	SbqRuleMessage m;
	SbqFilterExpr *filter;
	SbqFilterAction *action;
	SbqFilterError err;
	HeapTupleHeader in;
	TupleDesc	tupdesc;
	HeapTupleData tuple;
	Datum		values[NEW_NATTS];
	bool		nulls[NEW_NATTS];
	text	   *const *after[] = {&props.message_id, &props.session_id, &props.correlation_id,
		&props.subject, &props.content_type, &props.reply_to, &props.reply_to_session_id,
	&props.to_address};
	size_t		i;

	sbq_require_arg(fcinfo, 0, "action");
	sbq_compile_rule(NULL, text_to_cstring(PG_GETARG_TEXT_PP(0)), &filter, &action);
	sbq_test_message(fcinfo, &props, &m);
	before = props;
	if (!sbq_rule_apply_action(action, &m, &props, &err))
		sbq_test_failed("rule action", &err);

	/* the message given, with what the action changed */
	in = PG_GETARG_HEAPTUPLEHEADER(1);
	tupdesc = lookup_rowtype_tupdesc(HeapTupleHeaderGetTypeId(in), HeapTupleHeaderGetTypMod(in));
	tuple.t_len = HeapTupleHeaderGetDatumLength(in);
	tuple.t_data = in;
	heap_deform_tuple(&tuple, tupdesc, values, nulls);
	for (i = 0; i < lengthof(after); i++)
	{
		nulls[NEW_MESSAGE_ID - 1 + i] = *after[i] == NULL;
		values[NEW_MESSAGE_ID - 1 + i] = PointerGetDatum(*after[i]);
	}
	if (props.application_properties != before.application_properties)
	{
		nulls[NEW_APP_PROPERTIES - 1] = props.application_properties == NULL;
		values[NEW_APP_PROPERTIES - 1] = JsonbPGetDatum(props.application_properties);
	}
	{
		TupleDesc	copy = CreateTupleDescCopy(tupdesc);

		ReleaseTupleDesc(tupdesc);
		tupdesc = BlessTupleDesc(copy);
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
