/*-------------------------------------------------------------------------
 *
 * topics.c
 *	  Topics, subscriptions and rules in storage: look-up by name, create,
 *	  update, delete, and the rows of their properties.
 *
 * A topic is a row of sbq.topics; its id comes from the queues' sequence,
 * so that rights, duplicate ids and counters, keyed by queue_id, serve it
 * too. A subscription is a queue (queues.c) named
 * "<topic>/subscriptions/<subscription>", tied to its topic by a row of
 * sbq.subscriptions, with its rules in sbq.rules. The callers (api_topics.c)
 * hold the topic name's advisory lock (util.c) as they do a queue's: a
 * change of a topic or of its subscriptions and rules locks it in a
 * self-conflicting mode, a send in share mode.
 *
 * Owns: nothing beyond its statements. Locks: the row locks of its
 * statements.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/topics.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "storage_core.h"
#include "topics.h"

#define TOPIC_COLS \
	"topic_id, name, default_message_ttl, duplicate_detection_window, max_message_size"

static SbqStatement stmt_find_topic = {"find topic", 1, {TEXTOID},
	"SELECT " TOPIC_COLS " FROM sbq.topics WHERE name_key = $1"
};

/* a sender under a transaction snapshot, as for queues (queues.c) */
static SbqStatement stmt_find_topic_share = {"find topic to send", 1, {TEXTOID},
	"SELECT " TOPIC_COLS " FROM sbq.topics WHERE name_key = $1 FOR KEY SHARE"
};

static SbqStatement stmt_create_topic = {"create topic", 6, {TEXTOID, TEXTOID, INTERVALOID,
		INTERVALOID, INT4OID, TIMESTAMPTZOID},
	"INSERT INTO sbq.topics (name, name_key, default_message_ttl,"
	" duplicate_detection_window, max_message_size, created_at, updated_at)"
	" VALUES ($1, $2, $3, $4, $5, $6, $6) RETURNING topic_id"
};

static SbqStatement stmt_update_topic = {"update topic", 5, {INT4OID, INTERVALOID,
		INTERVALOID, INT4OID, TIMESTAMPTZOID},
	"UPDATE sbq.topics SET default_message_ttl = $2, duplicate_detection_window = $3,"
	" max_message_size = $4, updated_at = $5 WHERE topic_id = $1"
};

static SbqStatement stmt_delete_topic = {"delete topic", 1, {INT4OID},
	"WITH c AS (DELETE FROM sbq.queue_counters WHERE queue_id = $1),"
	" d AS (DELETE FROM sbq.duplicate_ids WHERE queue_id = $1),"
	" s AS (DELETE FROM sbq.topic_scheduled WHERE topic_id = $1)"
	" DELETE FROM sbq.topics WHERE topic_id = $1"
};

static SbqStatement stmt_topic_row = {"topic properties", 1, {INT4OID},
	"SELECT name, default_message_ttl, duplicate_detection_window, max_message_size,"
	" created_at, updated_at FROM sbq.topics WHERE topic_id = $1"
};

/* the columns of sbq_subscription_properties */
static SbqStatement stmt_subscription_row = {"subscription properties", 1, {INT4OID},
	"SELECT t.name, s.name, q.lock_duration, q.max_delivery_count, q.default_message_ttl,"
	" q.dead_lettering_on_message_expiration, q.duplicate_detection_window,"
	" q.requires_session, q.forward_to, q.forward_dead_lettered_messages_to,"
	" s.dead_lettering_on_filter_evaluation_exceptions, q.created_at, q.updated_at,"
	" q.dead_letter_ttl, q.retry_delay, q.retry_backoff, q.max_retry_delay"
	" FROM sbq.subscriptions s JOIN sbq.queues q ON q.queue_id = s.queue_id"
	" JOIN sbq.topics t ON t.topic_id = s.topic_id WHERE s.queue_id = $1"
};

/* the subscriptions of a topic, in the order they were made */
static SbqStatement stmt_topic_subscriptions = {"subscriptions of a topic", 1, {INT4OID},
	"SELECT queue_id FROM sbq.subscriptions WHERE topic_id = $1 ORDER BY queue_id"
};

static SbqStatement stmt_find_subscription = {"find subscription", 2, {INT4OID, TEXTOID},
	"SELECT queue_id, name, dead_lettering_on_filter_evaluation_exceptions"
	" FROM sbq.subscriptions WHERE topic_id = $1 AND name_key = $2"
};

/* whose subscription is a queue: its topic's name and its own, or no row */
static SbqStatement stmt_subscription_of = {"subscription of a queue", 1, {INT4OID},
	"SELECT t.name, s.name FROM sbq.subscriptions s"
	" JOIN sbq.topics t ON t.topic_id = s.topic_id WHERE s.queue_id = $1"
};

static SbqStatement stmt_create_subscription = {"create subscription", 5, {INT4OID,
		INT4OID, TEXTOID, TEXTOID, BOOLOID},
	"INSERT INTO sbq.subscriptions (queue_id, topic_id, name, name_key,"
	" dead_lettering_on_filter_evaluation_exceptions) VALUES ($1, $2, $3, $4, $5)"
};

static SbqStatement stmt_update_subscription = {"update subscription", 2, {INT4OID, BOOLOID},
	"UPDATE sbq.subscriptions SET dead_lettering_on_filter_evaluation_exceptions = $2"
	" WHERE queue_id = $1"
};

static SbqStatement stmt_delete_subscription = {"delete subscription", 1, {INT4OID},
	"WITH r AS (DELETE FROM sbq.rules WHERE queue_id = $1)"
	" DELETE FROM sbq.subscriptions WHERE queue_id = $1"
};

static SbqStatement stmt_add_rule = {"add rule", 6, {INT4OID, TEXTOID, TEXTOID, TEXTOID,
		JSONBOID, TEXTOID},
	"INSERT INTO sbq.rules (queue_id, name, name_key, sql_filter, correlation_filter,"
	" action, created_at) VALUES ($1, $2, $3, $4, $5, $6, pg_catalog.now())"
	" ON CONFLICT (queue_id, name_key" EK(", entity_key") ") DO NOTHING"
};

static SbqStatement stmt_remove_rule = {"remove rule", 2, {INT4OID, TEXTOID},
	"DELETE FROM sbq.rules WHERE queue_id = $1 AND name_key = $2"
};

/* the rules of a subscription, by name */
static SbqStatement stmt_rules = {"rules of a subscription", 1, {INT4OID},
	"SELECT name, sql_filter, correlation_filter, action FROM sbq.rules"
	" WHERE queue_id = $1 ORDER BY name_key"
};

/* ---------------------------------------------------------------- topics */

/* Decode a TOPIC_COLS row of the current SPI result into a queue-shaped topic. */
static void
sbq_topic_from_row(SbqQueue *topic)
{
	bool		isnull;
	Datum		d;

	memset(topic, 0, sizeof(*topic));
	topic->is_topic = true;
	topic->queue_id = DatumGetInt32(sbq_col(0, 1, &isnull));
	topic->name = sbq_spi_strdup(sbq_col(0, 2, &isnull), false);
	d = sbq_col(0, 3, &isnull);
	if (!isnull)
	{
		topic->has_default_ttl = true;
		topic->default_ttl = *DatumGetIntervalP(d);
	}
	d = sbq_col(0, 4, &isnull);
	if (!isnull)
	{
		topic->has_dup_window = true;
		topic->dup_window = *DatumGetIntervalP(d);
	}
	topic->max_message_size = DatumGetInt32(sbq_col(0, 5, &isnull));
	/* a topic is never locked for a receive: the rest stays zero */
}

/*
 * sbq_storage_find_topic
 *		Look a topic up by its name key into *topic (is_topic set), with the
 *		rights held on it; false when there is none, or when the installed
 *		SQL has no topics. share: lock its row against a delete (a sender
 *		under a transaction snapshot).
 */
bool
sbq_storage_find_topic(const char *key, bool share, SbqQueue *topic)
{
	Datum		values[1];

	uint64		gen = sbq_topic_cache_generation();

	if (!sbq_topics_installed())
		return false;
	values[0] = CStringGetTextDatum(key);
	if (sbq_exec(share ? &stmt_find_topic_share : &stmt_find_topic, values, NULL) == 0)
		return false;
	sbq_topic_from_row(topic);
	sbq_rights_load(topic);
	if (!share)
		sbq_topic_cache_remember(key, topic, gen);
	return true;
}

/* The interval datum of an optional duration. */
static Datum
sbq_opt_interval(bool has, const Interval *iv, bool *isnull)
{
	*isnull = !has;
	return has ? IntervalPGetDatum(iv) : (Datum) 0;
}

/*
 * sbq_storage_create_topic
 *		Store a new topic; the caller holds the name lock and has checked that
 *		no queue or topic has the name. Its creator holds manage on it.
 *		Returns its id.
 */
int32
sbq_storage_create_topic(const char *name, const char *key, const SbqQueue *props)
{
	Datum		values[6];
	bool		nulls[6] = {false};
	bool		isnull;
	int32		topic_id;

	values[0] = CStringGetTextDatum(name);
	values[1] = CStringGetTextDatum(key);
	values[2] = sbq_opt_interval(props->has_default_ttl, &props->default_ttl, &nulls[2]);
	values[3] = sbq_opt_interval(props->has_dup_window, &props->dup_window, &nulls[3]);
	values[4] = Int32GetDatum(props->max_message_size);
	values[5] = TimestampTzGetDatum(GetCurrentTimestamp());
	if (sbq_exec(&stmt_create_topic, values, nulls) != 1)
		elog(ERROR, "could not create topic \"%s\"", name);
	topic_id = DatumGetInt32(sbq_col(0, 1, &isnull));
	sbq_rights_created(topic_id);
	sbq_queue_cache_changed();
	return topic_id;
}

/* sbq_storage_update_topic: store new properties of an existing topic. */
void
sbq_storage_update_topic(const SbqQueue *props)
{
	Datum		values[5];
	bool		nulls[5] = {false};

	values[0] = Int32GetDatum(props->queue_id);
	values[1] = sbq_opt_interval(props->has_default_ttl, &props->default_ttl, &nulls[1]);
	values[2] = sbq_opt_interval(props->has_dup_window, &props->dup_window, &nulls[2]);
	values[3] = Int32GetDatum(props->max_message_size);
	values[4] = TimestampTzGetDatum(GetCurrentTimestamp());
	(void) sbq_exec(&stmt_update_topic, values, nulls);
	sbq_queue_cache_changed();
}

/*
 * sbq_storage_topic_subscriptions
 *		The queue ids of a topic's subscriptions, in the order they were
 *		made, into *ids (in the caller's memory context); returns how many.
 */
int
sbq_storage_topic_subscriptions(int32 topic_id, int32 **ids)
{
	Datum		values[1];
	uint64		n;
	uint64		i;

	values[0] = Int32GetDatum(topic_id);
	n = sbq_exec_latest(&stmt_topic_subscriptions, values, NULL);
	*ids = MemoryContextAlloc(sbq_storage_caller_context(), sizeof(int32) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		bool		isnull;

		(*ids)[i] = DatumGetInt32(sbq_col(i, 1, &isnull));
	}
	return (int) n;
}

/*
 * sbq_storage_delete_topic
 *		Drop a topic with its subscriptions (each a queue, with all it holds)
 *		and their rules.
 */
void
sbq_storage_delete_topic(int32 topic_id)
{
	Datum		values[1];
	int32	   *subs;
	int			n;
	int			i;

	n = sbq_storage_topic_subscriptions(topic_id, &subs);
	for (i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		sbq_storage_delete_subscription(subs[i]);
	}
	values[0] = Int32GetDatum(topic_id);
	sbq_rights_dropped(topic_id);
	(void) sbq_exec_latest(&stmt_delete_topic, values, NULL);
	sbq_qstate_forget(sbq_storage_epoch(), topic_id);
	sbq_queue_cache_changed();
}

/*
 * sbq_row_tuple
 *		The one row a statement on an id returns, as a tuple of tupdesc
 *		formed in mcxt; NULL when there is none (a call that locks no name may
 *		meet a delete that committed since it looked the entity up).
 */
static HeapTuple
sbq_row_tuple(SbqStatement *st, int32 id, TupleDesc tupdesc, MemoryContext mcxt)
{
	Datum		arg = Int32GetDatum(id);
	Datum	   *values;
	bool	   *nulls;
	MemoryContext old;
	HeapTuple	tuple;
	int			natts;
	int			i;

	if (sbq_exec(st, &arg, NULL) != 1)
		return NULL;
	natts = SPI_tuptable->tupdesc->natts;
	if (natts != tupdesc->natts)
		elog(ERROR, "%s: %d columns for a row type of %d", st->name, natts, tupdesc->natts);
	old = MemoryContextSwitchTo(mcxt);
	values = palloc(sizeof(Datum) * natts);
	nulls = palloc(sizeof(bool) * natts);
	for (i = 0; i < natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(SPI_tuptable->tupdesc, i);

		values[i] = sbq_col(0, i + 1, &nulls[i]);
		if (!nulls[i])
			values[i] = datumCopy(values[i], att->attbyval, att->attlen);
	}
	tuple = heap_form_tuple(tupdesc, values, nulls);
	MemoryContextSwitchTo(old);
	return tuple;
}

/*
 * sbq_storage_topic_tuple: the sbq_topic_properties row of a topic, formed in
 * mcxt; NULL when the topic is gone.
 */
HeapTuple
sbq_storage_topic_tuple(int32 topic_id, TupleDesc tupdesc, MemoryContext mcxt)
{
	return sbq_row_tuple(&stmt_topic_row, topic_id, tupdesc, mcxt);
}

/*
 * sbq_storage_subscription_tuple: the sbq_subscription_properties row of a
 * subscription, formed in mcxt; NULL when the subscription is gone.
 */
HeapTuple
sbq_storage_subscription_tuple(int32 queue_id, TupleDesc tupdesc, MemoryContext mcxt)
{
	return sbq_row_tuple(&stmt_subscription_row, queue_id, tupdesc, mcxt);
}

static SbqStatement stmt_topic_counts = {"what a topic holds", 1, {INT4OID},
	"SELECT (SELECT count(*) FROM sbq.subscriptions s WHERE s.topic_id = $1),"
	" count(*) FILTER (WHERE r.sql_filter IS NOT NULL),"
	" count(*) FILTER (WHERE r.correlation_filter IS NOT NULL)"
	" FROM sbq.rules r JOIN sbq.subscriptions s ON s.queue_id = r.queue_id"
	" WHERE s.topic_id = $1"
};

/*
 * sbq_storage_topic_counts
 *		How many subscriptions a topic has, and SQL and correlation filters in
 *		their rules.
 */
void
sbq_storage_topic_counts(int32 topic_id, int64 *subscriptions, int64 *sql_filters,
						 int64 *correlation_filters)
{
	Datum		arg = Int32GetDatum(topic_id);
	bool		isnull;

	(void) sbq_exec_latest(&stmt_topic_counts, &arg, NULL);
	*subscriptions = DatumGetInt64(sbq_col(0, 1, &isnull));
	*sql_filters = DatumGetInt64(sbq_col(0, 2, &isnull));
	*correlation_filters = DatumGetInt64(sbq_col(0, 3, &isnull));
}

/* --------------------------------------------------------- subscriptions */

/*
 * sbq_storage_find_subscription
 *		The subscription of a topic by its name key: its queue id and
 *		dead_lettering_on_filter_evaluation_exceptions; false when there is
 *		none.
 */
bool
sbq_storage_find_subscription(int32 topic_id, const char *key, int32 *queue_id,
							  bool *dlq_on_filter_errors)
{
	Datum		values[2];
	bool		isnull;

	values[0] = Int32GetDatum(topic_id);
	values[1] = CStringGetTextDatum(key);
	if (sbq_exec_latest(&stmt_find_subscription, values, NULL) == 0)
		return false;
	*queue_id = DatumGetInt32(sbq_col(0, 1, &isnull));
	*dlq_on_filter_errors = DatumGetBool(sbq_col(0, 3, &isnull));
	return true;
}

/*
 * sbq_storage_subscription_of
 *		Whether a queue is a subscription, and if so the names of its topic
 *		and of itself (in the caller's memory context; NULL pointers: not
 *		wanted).
 */
bool
sbq_storage_subscription_of(int32 queue_id, char **topic, char **subscription)
{
	Datum		values[1];
	bool		isnull;
	MemoryContext old;

	if (!sbq_topics_installed())
		return false;
	values[0] = Int32GetDatum(queue_id);
	if (sbq_exec(&stmt_subscription_of, values, NULL) == 0)
		return false;
	old = MemoryContextSwitchTo(sbq_storage_caller_context());
	if (topic != NULL)
		*topic = sbq_spi_strdup(sbq_col(0, 1, &isnull), false);
	if (subscription != NULL)
		*subscription = sbq_spi_strdup(sbq_col(0, 2, &isnull), false);
	MemoryContextSwitchTo(old);
	return true;
}

/*
 * sbq_storage_create_subscription
 *		Store a new subscription of a topic: its queue (named by its address),
 *		its tie to the topic, and the rule $Default with the true filter. The
 *		caller holds the topic name's lock and has checked that the name is
 *		free. Returns its queue id.
 */
int32
sbq_storage_create_subscription(int32 topic_id, const char *address, const char *address_key,
								const char *name, const char *key, const SbqQueue *props,
								bool dlq_on_filter_errors)
{
	Datum		values[5];
	int32		queue_id;

	queue_id = sbq_storage_create_queue(address, address_key, props);
	values[0] = Int32GetDatum(queue_id);
	values[1] = Int32GetDatum(topic_id);
	values[2] = CStringGetTextDatum(name);
	values[3] = CStringGetTextDatum(key);
	values[4] = BoolGetDatum(dlq_on_filter_errors);
	(void) sbq_exec(&stmt_create_subscription, values, NULL);
	(void) sbq_storage_add_rule(queue_id, SBQ_DEFAULT_RULE, NULL, NULL, NULL);
	return queue_id;
}

/* sbq_storage_update_subscription: its queue's properties, and its own. */
void
sbq_storage_update_subscription(const SbqQueue *props, bool dlq_on_filter_errors)
{
	Datum		values[2];

	sbq_storage_update_queue(props);
	values[0] = Int32GetDatum(props->queue_id);
	values[1] = BoolGetDatum(dlq_on_filter_errors);
	(void) sbq_exec(&stmt_update_subscription, values, NULL);
}

/* sbq_storage_delete_subscription: its queue with all it holds, and its rules. */
void
sbq_storage_delete_subscription(int32 queue_id)
{
	Datum		values[1];

	values[0] = Int32GetDatum(queue_id);
	(void) sbq_exec_latest(&stmt_delete_subscription, values, NULL);
	sbq_storage_delete_queue(queue_id);
}

/* ------------------------------------------------------------------ rules */

/*
 * sbq_storage_add_rule
 *		Store a rule of a subscription (filters and action checked by the
 *		caller); false when the subscription has a rule of that name.
 */
bool
sbq_storage_add_rule(int32 queue_id, const char *name, const char *sql_filter,
					 Jsonb *correlation_filter, const char *action)
{
	Datum		values[6];
	bool		nulls[6] = {false};
	char	   *key = sbq_name_key(CurrentMemoryContext, name);

	values[0] = Int32GetDatum(queue_id);
	values[1] = CStringGetTextDatum(name);
	values[2] = CStringGetTextDatum(key);
	nulls[3] = sql_filter == NULL;
	values[3] = nulls[3] ? (Datum) 0 : CStringGetTextDatum(sql_filter);
	nulls[4] = correlation_filter == NULL;
	values[4] = JsonbPGetDatum(correlation_filter);
	nulls[5] = action == NULL;
	values[5] = nulls[5] ? (Datum) 0 : CStringGetTextDatum(action);
	if (sbq_exec(&stmt_add_rule, values, nulls) == 0)
		return false;
	sbq_queue_cache_changed();
	return true;
}

/* sbq_storage_remove_rule: false when the subscription has no rule of that name key. */
bool
sbq_storage_remove_rule(int32 queue_id, const char *key)
{
	Datum		values[2];

	values[0] = Int32GetDatum(queue_id);
	values[1] = CStringGetTextDatum(key);
	if (sbq_exec(&stmt_remove_rule, values, NULL) == 0)
		return false;
	sbq_queue_cache_changed();
	return true;
}

/*
 * sbq_storage_rules
 *		The rules of a subscription, by name, into *rules (in the caller's
 *		memory context); returns how many.
 */
int
sbq_storage_rules(int32 queue_id, SbqRule **rules)
{
	Datum		values[1];
	uint64		n;
	uint64		i;
	MemoryContext old;

	values[0] = Int32GetDatum(queue_id);
	n = sbq_exec(&stmt_rules, values, NULL);
	old = MemoryContextSwitchTo(sbq_storage_caller_context());
	*rules = palloc0(sizeof(SbqRule) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		SbqRule    *r = &(*rules)[i];
		bool		isnull;
		Datum		d;

		r->name = sbq_spi_strdup(sbq_col(i, 1, &isnull), false);
		d = sbq_col(i, 2, &isnull);
		r->sql_filter = isnull ? NULL : sbq_spi_strdup(d, false);
		d = sbq_col(i, 3, &isnull);
		r->correlation_filter = isnull ? NULL : DatumGetJsonbPCopy(d);
		d = sbq_col(i, 4, &isnull);
		r->action = isnull ? NULL : sbq_spi_strdup(d, false);
	}
	MemoryContextSwitchTo(old);
	return (int) n;
}
