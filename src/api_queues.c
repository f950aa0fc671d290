/*-------------------------------------------------------------------------
 *
 * api_queues.c
 *	  The SQL-callable functions that manage queues: sbq_create_queue,
 *	  sbq_update_queue, sbq_delete_queue, sbq_purge_queue, sbq_get_queue,
 *	  and sbq_maintain.
 *
 * As in api.c (the functions on messages): each checks its arguments (22004
 * for a NULL where a value is required, 22023 for a bad value), refuses to
 * write on a read-only transaction or a standby (25006), and does its work
 * through the storage files (storage.h) in a storage section. Creating and
 * deleting a queue hold its name's lock (util.c) exclusively, updating holds
 * it in a self-conflicting mode, until the transaction ends.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/api_queues.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "distributed.h"
#include "storage_core.h"
#include "topics.h"

PG_FUNCTION_INFO_V1(sbq_create_queue);
PG_FUNCTION_INFO_V1(sbq_update_queue);
PG_FUNCTION_INFO_V1(sbq_delete_queue);
PG_FUNCTION_INFO_V1(sbq_purge_queue);
PG_FUNCTION_INFO_V1(sbq_get_queue);
PG_FUNCTION_INFO_V1(sbq_maintain);
PG_FUNCTION_INFO_V1(sbq_grant);
PG_FUNCTION_INFO_V1(sbq_revoke);



/* the longest retry delay, as the longest delay of an abandon (api_settle.c) */
#define SBQ_MAX_RETRY_DELAY		(365 * USECS_PER_DAY)

/*
 * sbq_check_queue_props
 *		Check every property of a queue about to be created or updated, then
 *		make its durations exact
 *		(sbq_exact_interval): what was checked is what is stored and applied.
 *		An error shows a duration as the caller gave it.
 */
void
sbq_check_queue_props(SbqQueue *p)
{
	sbq_check_interval_range("lock_duration", &p->lock_duration,
							 SBQ_MIN_LOCK_DURATION, SBQ_MAX_LOCK_DURATION);
	if (p->max_delivery_count < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_delivery_count %d is out of range", p->max_delivery_count),
				 errdetail("It must be at least 1.")));
	if (p->has_default_ttl)
		sbq_check_interval_range("default_message_ttl", &p->default_ttl,
								 SBQ_MIN_TTL, PG_INT64_MAX);
	if (p->has_dup_window)
		sbq_check_interval_range("duplicate_detection_window", &p->dup_window,
								 SBQ_MIN_DUP_WINDOW, SBQ_MAX_DUP_WINDOW);
	if (p->forward_to != NULL && p->requires_session)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("an entity that requires sessions cannot forward its messages"),
				 errdetail("forward_to is for entities without sessions; one may forward into an entity that requires them.")));
	if (p->has_dead_letter_ttl)
		sbq_check_interval_range("dead_letter_ttl", &p->dead_letter_ttl,
								 SBQ_MIN_TTL, PG_INT64_MAX);
	if (p->has_retry_delay)
		sbq_check_interval_range("retry_delay", &p->retry_delay, 0, SBQ_MAX_RETRY_DELAY);
	if (p->has_max_retry_delay)
		sbq_check_interval_range("max_retry_delay", &p->max_retry_delay, 0, SBQ_MAX_RETRY_DELAY);
	if (p->requires_session && p->has_retry_delay && sbq_interval_usecs(&p->retry_delay) > 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a queue that requires sessions cannot have a retry_delay"),
				 errdetail("A session's messages are received in order; one held back would stop its session or lose its place.")));
	if (p->max_message_size < 1 || p->max_message_size > SBQ_MAX_MESSAGE_SIZE)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_message_size %d is out of range", p->max_message_size),
				 errdetail("It must be between 1 and %d bytes.", SBQ_MAX_MESSAGE_SIZE)));
	sbq_exact_interval(&p->lock_duration);
	sbq_exact_interval(&p->default_ttl);
	sbq_exact_interval(&p->dup_window);
	sbq_exact_interval(&p->dead_letter_ttl);
	sbq_exact_interval(&p->retry_delay);
	sbq_exact_interval(&p->max_retry_delay);
}

/* where sbq_create_queue and sbq_update_queue take each property */
const int	sbq_queue_arg_positions[SBQ_NUM_QUEUE_ARGS] = {
	ARG_QUEUE, ARG_LOCK_DURATION, ARG_MAX_DELIVERY_COUNT, ARG_DEFAULT_TTL,
	ARG_DLQ_ON_EXPIRATION, ARG_DUP_WINDOW, ARG_REQUIRES_SESSION, ARG_FORWARD_TO,
	ARG_FORWARD_DLQ_TO, ARG_MAX_MESSAGE_SIZE, ARG_DEAD_LETTER_TTL, ARG_RETRY_DELAY,
	ARG_RETRY_BACKOFF, ARG_MAX_RETRY_DELAY
};

/* whether the call passes the property at pos[arg] and it is not NULL */
static inline bool
sbq_has_prop(FunctionCallInfo fcinfo, const int *pos, int arg)
{
	return pos[arg] >= 0 && PG_NARGS() > pos[arg] && !PG_ARGISNULL(pos[arg]);
}

#define PROP_ARG(arg) PG_GETARG_DATUM(pos[arg])

/*
 * sbq_check_forward_dest
 *		The destination *to of a queue's or subscription's forward_to or
 *		forward_dead_lettered_messages_to (what), when it is set or changed
 *		(before: what it was, NULL for a new entity): '' stops forwarding
 *		(NULL leaves it as it is); else a queue or topic that exists (SB001;
 *		its name lock is taken in share mode, so it cannot be deleted before
 *		this commits), not the entity itself (self_key) nor a subscription
 *		(22023), and one the caller manages (42501): as in Service Bus,
 *		forwarding is set up by one who manages both ends. Stored as the
 *		destination's name. In a storage section.
 */
static void
sbq_check_forward_dest(char **to, const char *what, const char *before, const char *self_key)
{
	SbqAddress	dest;
	SbqQueue	target;

	if (*to != NULL && (*to)[0] == '\0')
	{
		*to = NULL;
		return;
	}
	if (*to == NULL || (before != NULL && strcmp(*to, before) == 0))
		return;
	sbq_parse_address(cstring_to_text(*to), false, &dest);
	if (strstr(dest.key, SBQ_SUBSCRIPTIONS_SEGMENT) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s \"%s\" names a subscription", what, dest.name),
				 errdetail("Messages are forwarded to a queue or a topic.")));
	if (self_key != NULL && strcmp(dest.key, self_key) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"%s\" cannot forward its messages to itself", dest.name),
				 errdetail("%s names the entity that has it.", what)));
	/*
	 * With the tables distributed, the destination is looked for in the
	 * source's shard group only: one of another group is not found there
	 * (SB001 as for any missing entity), and the detail says why.
	 */
	if (sbq_dist_key_elsewhere(dest.key))
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_QUEUE_NOT_FOUND),
				 errmsg("%s: queue or topic \"%s\" does not exist", what, dest.name),
				 errdetail("With sbqueue's tables distributed, messages are forwarded only within a shard group, and \"%s\" would be in another.",
						   dest.name),
				 errhint("Forward to an entity whose name places it in the same shard group.")));
	sbq_lock_queue_name(dest.key, AccessShareLock);
	if (!sbq_storage_find_queue(&dest, &target) &&
		!sbq_storage_find_topic(dest.key, false, &target))
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_QUEUE_NOT_FOUND),
				 errmsg("%s: queue or topic \"%s\" does not exist", what, dest.name)));
	sbq_rights_require(&target, SBQ_RIGHT_MANAGE);
	*to = MemoryContextStrdup(sbq_storage_caller_context(), target.name);
}

/*
 * sbq_check_forward_to
 *		The destinations of a queue's or subscription's forwarding, set or
 *		changed (before: the entity as it was, NULL for a new one), checked
 *		by sbq_check_forward_dest. Dead letters are forwarded from 0.11 on,
 *		which counts a message's hops across its dead-letterings (0A000
 *		before ALTER EXTENSION UPDATE).
 */
void
sbq_check_forward_to(SbqQueue *p, const SbqQueue *before, const char *self_key)
{
	sbq_check_forward_dest(&p->forward_to, "forward_to",
						   before ? before->forward_to : NULL, self_key);
	if (p->forward_dlq_to != NULL && p->forward_dlq_to[0] != '\0' &&
		(before == NULL || before->forward_dlq_to == NULL ||
		 strcmp(p->forward_dlq_to, before->forward_dlq_to) != 0) &&
		!sbq_hops_installed())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("forward_dead_lettered_messages_to needs version 0.11 or later of extension sbqueue"),
				 errhint("Run ALTER EXTENSION sbqueue UPDATE.")));
	sbq_check_forward_dest(&p->forward_dlq_to, "forward_dead_lettered_messages_to",
						   before ? before->forward_dlq_to : NULL, self_key);
}

/*
 * sbq_check_dup_window
 *		A duplicate_detection_window set or changed (before: the queue as it
 *		was, NULL for a new one) needs the history of sbq.duplicate_ids, from
 *		0.2 on: the SQL of 0.1 has none, and 0.1 refused a window (0A000 before
 *		ALTER EXTENSION UPDATE). A window already set may stay, or go.
 */
static void
sbq_check_dup_window(const SbqQueue *p, const SbqQueue *before)
{
	if (p->has_dup_window &&
		(before == NULL || !before->has_dup_window ||
		 sbq_interval_usecs(&p->dup_window) != sbq_interval_usecs(&before->dup_window)) &&
		!sbq_duplicate_ids_installed())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("duplicate detection needs version 0.2 or later of extension sbqueue"),
				 errhint("Run ALTER EXTENSION sbqueue UPDATE.")));
}

/*
 * sbq_forward_changes
 *		Whether an update changes where an entity forwards its messages to
 *		(starts, stops, or names another destination). A send reads the
 *		destination before it locks the destination's name: such an update
 *		must keep sends out until it commits, or a send would store its
 *		message by the destination it read (dead-lettered as a destination
 *		deleted since, while the entity forwarded elsewhere).
 */
bool
sbq_forward_changes(const SbqQueue *before, const SbqQueue *after)
{
	if (before->forward_to == NULL || after->forward_to == NULL)
		return before->forward_to != after->forward_to;
	return strcmp(before->forward_to, after->forward_to) != 0;
}

/*
 * sbq_check_forward_start
 *		An entity that starts to forward must hold no message: none would
 *		ever be received (SB010 on a receive). The caller holds the lock that
 *		keeps sends out.
 */
void
sbq_check_forward_start(const SbqQueue *before, const SbqQueue *after)
{
	if (before->forward_to == NULL && after->forward_to != NULL &&
		sbq_storage_queue_has_messages(after->queue_id))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"%s\" holds messages and cannot start to forward", after->name),
				 errdetail("A receive from an entity that forwards is refused: its messages would stay."),
				 errhint("Receive or purge its messages first.")));
}

/*
 * sbq_overlay_queue_props
 *		Copy the non-NULL property arguments into *p, the property ARG_x
 *		taken from argument pos[ARG_x] (-1: the call has none; an argument
 *		past the call's last is one that older SQL does not pass); with
 *		required, a NULL where create needs a value is 22004.
 */
void
sbq_overlay_queue_props(FunctionCallInfo fcinfo, SbqQueue *p, bool required, const int *pos)
{
	static const struct
	{
		int			arg;
		const char *name;
	}			needed[] = {
		{ARG_LOCK_DURATION, "lock_duration"},
		{ARG_MAX_DELIVERY_COUNT, "max_delivery_count"},
		{ARG_DLQ_ON_EXPIRATION, "dead_lettering_on_message_expiration"},
		{ARG_REQUIRES_SESSION, "requires_session"},
		{ARG_MAX_MESSAGE_SIZE, "max_message_size"},
		{ARG_RETRY_BACKOFF, "retry_backoff"},
	};
	size_t		i;

	/* (an argument the older SQL does not pass takes its default) */
	for (i = 0; required && i < lengthof(needed); i++)
		if (pos[needed[i].arg] >= 0 && PG_NARGS() > pos[needed[i].arg])
			sbq_require_arg(fcinfo, pos[needed[i].arg], needed[i].name);
	if (sbq_has_prop(fcinfo, pos, ARG_LOCK_DURATION))
		p->lock_duration = *DatumGetIntervalP(PROP_ARG(ARG_LOCK_DURATION));
	if (sbq_has_prop(fcinfo, pos, ARG_MAX_DELIVERY_COUNT))
		p->max_delivery_count = DatumGetInt32(PROP_ARG(ARG_MAX_DELIVERY_COUNT));
	if (sbq_has_prop(fcinfo, pos, ARG_DEFAULT_TTL))
	{
		p->has_default_ttl = true;
		p->default_ttl = *DatumGetIntervalP(PROP_ARG(ARG_DEFAULT_TTL));
	}
	if (sbq_has_prop(fcinfo, pos, ARG_DLQ_ON_EXPIRATION))
		p->dlq_on_expiration = DatumGetBool(PROP_ARG(ARG_DLQ_ON_EXPIRATION));
	if (sbq_has_prop(fcinfo, pos, ARG_DUP_WINDOW))
	{
		p->has_dup_window = true;
		p->dup_window = *DatumGetIntervalP(PROP_ARG(ARG_DUP_WINDOW));
	}
	if (sbq_has_prop(fcinfo, pos, ARG_REQUIRES_SESSION))
		p->requires_session = DatumGetBool(PROP_ARG(ARG_REQUIRES_SESSION));
	if (sbq_has_prop(fcinfo, pos, ARG_FORWARD_TO))
		p->forward_to = TextDatumGetCString(PROP_ARG(ARG_FORWARD_TO));
	if (sbq_has_prop(fcinfo, pos, ARG_FORWARD_DLQ_TO))
		p->forward_dlq_to = TextDatumGetCString(PROP_ARG(ARG_FORWARD_DLQ_TO));
	if (sbq_has_prop(fcinfo, pos, ARG_MAX_MESSAGE_SIZE))
		p->max_message_size = DatumGetInt32(PROP_ARG(ARG_MAX_MESSAGE_SIZE));
	if (sbq_has_prop(fcinfo, pos, ARG_DEAD_LETTER_TTL))
	{
		p->has_dead_letter_ttl = true;
		p->dead_letter_ttl = *DatumGetIntervalP(PROP_ARG(ARG_DEAD_LETTER_TTL));
	}
	if (sbq_has_prop(fcinfo, pos, ARG_RETRY_DELAY))
	{
		p->has_retry_delay = true;
		p->retry_delay = *DatumGetIntervalP(PROP_ARG(ARG_RETRY_DELAY));
	}
	if (sbq_has_prop(fcinfo, pos, ARG_RETRY_BACKOFF))
		p->retry_backoff = DatumGetBool(PROP_ARG(ARG_RETRY_BACKOFF));
	if (sbq_has_prop(fcinfo, pos, ARG_MAX_RETRY_DELAY))
	{
		p->has_max_retry_delay = true;
		p->max_retry_delay = *DatumGetIntervalP(PROP_ARG(ARG_MAX_RETRY_DELAY));
	}
}

/*
 * sbq_properties_result
 *		The sbq_queue_properties row of a queue as this call's result; SB001
 *		when a delete committed since the queue was looked up (a call that
 *		locks no name, its snapshot taken after the delete's).
 */
static Datum
sbq_properties_result(FunctionCallInfo fcinfo, const SbqAddress *addr, int32 queue_id)
{
	TupleDesc	tupdesc;
	HeapTuple	tuple;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	tupdesc = BlessTupleDesc(tupdesc);
	tuple = sbq_storage_queue_tuple(queue_id, tupdesc, sbq_storage_caller_context());
	if (tuple == NULL)
		sbq_queue_not_found(addr);
	return HeapTupleGetDatum(tuple);
}

/*
 * sbq_queue_call_begin
 *		What the calls on an existing queue share: the address checked, writes
 *		allowed (fname names a call that writes, NULL for one that reads), the
 *		queue name's lock in lockmode (NoLock: none), a storage section open,
 *		and the queue looked up (SB001 when there is none).
 */
static void
sbq_queue_call_begin(FunctionCallInfo fcinfo, bool allow_dlq, const char *fname,
					 LOCKMODE lockmode, int16 rights, SbqAddress *addr, SbqQueue *queue)
{
	sbq_queue_address(fcinfo, allow_dlq, addr);
	if (fname != NULL)
		PreventCommandIfReadOnly(fname);
	if (lockmode != NoLock)
	{
		/*
		 * The caller's right first: a role without it must not queue for the
		 * name's lock, where it would hold up the queue's senders.
		 */
		sbq_storage_begin();
		sbq_storage_get_queue(addr, queue, rights);
		sbq_storage_end();
		sbq_lock_queue_name(addr->key, lockmode);
	}
	sbq_storage_begin();
	sbq_storage_get_queue(addr, queue, rights);
}

/*
 * sbq_refuse_subscription_manage
 *		SB010 for a queue call that would change or delete a subscription:
 *		its topic ties it, and the subscription calls keep the two in step.
 */
static void
sbq_refuse_subscription_manage(const SbqAddress *addr, const SbqQueue *queue, const char *use)
{
	char	   *topic;
	char	   *name;

	if (strstr(addr->key, SBQ_SUBSCRIPTIONS_SEGMENT) != NULL &&
		sbq_storage_subscription_of(queue->queue_id, &topic, &name))
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_INVALID_OPERATION),
				 errmsg("\"%s\" is subscription \"%s\" of topic \"%s\"", queue->name, name, topic),
				 errhint("Use %s.", use)));
}

/* sbq_create_queue(queue, properties...): a new queue; locks its name exclusively. */
Datum
sbq_create_queue(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	props;
	SbqQueue	existing;
	Datum		result;

	SBQ_ROUTE(fcinfo);
	sbq_queue_address(fcinfo, false, &addr);
	sbq_refuse_reserved_name(&addr);
	memset(&props, 0, sizeof(props));
	sbq_overlay_queue_props(fcinfo, &props, true, sbq_queue_arg_positions);
	sbq_check_queue_props(&props);
	PreventCommandIfReadOnly("sbq_create_queue()");

	sbq_lock_queue_name(addr.key, AccessExclusiveLock);
	sbq_storage_begin();
	if (sbq_storage_find_queue(&addr, &existing))
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_QUEUE_EXISTS),
				 errmsg("queue \"%s\" already exists", existing.name)));
	if (sbq_storage_find_topic(addr.key, false, &existing))
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_QUEUE_EXISTS),
				 errmsg("topic \"%s\" already exists", existing.name),
				 errdetail("Queues and topics share their names.")));
	if (props.requires_session && !sbq_storage_sessions_available())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("sessions need version 0.7 or later of extension sbqueue"),
				 errhint("Run ALTER EXTENSION sbqueue UPDATE.")));
	sbq_check_dup_window(&props, NULL);
	sbq_check_forward_to(&props, NULL, addr.key);
	sbq_refuse_unmanaged_forwarders(&addr);
	props.queue_id = sbq_storage_create_queue(addr.name, addr.key, &props);
	result = sbq_properties_result(fcinfo, &addr, props.queue_id);
	sbq_storage_end();
	PG_RETURN_DATUM(result);
}

/* sbq_update_queue(queue, properties...): new properties; locks its name against other updates. */
Datum
sbq_update_queue(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	props;
	SbqQueue	before;
	Datum		result;
	bool		was_session;

	SBQ_ROUTE(fcinfo);
	/* self-conflicting, so two updates never overwrite each other's change */
	sbq_queue_call_begin(fcinfo, false, "sbq_update_queue()", ShareUpdateExclusiveLock,
						 SBQ_RIGHT_MANAGE, &addr, &props);
	sbq_refuse_subscription_manage(&addr, &props, "sbq_update_subscription()");
	was_session = props.requires_session;
	before = props;
	sbq_overlay_queue_props(fcinfo, &props, false, sbq_queue_arg_positions);
	if (props.requires_session != was_session)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("requires_session of queue \"%s\" cannot be changed", props.name),
				 errdetail("It is set when a queue is created, and only then.")));
	sbq_check_queue_props(&props);
	sbq_check_dup_window(&props, &before);
	sbq_check_forward_to(&props, &before, addr.key);
	if (sbq_forward_changes(&before, &props))
	{
		/* no send may come between the look and the update: the name, exclusively */
		sbq_storage_end();
		sbq_lock_queue_name(addr.key, AccessExclusiveLock);
		sbq_storage_begin();
		sbq_check_forward_start(&before, &props);
	}
	sbq_storage_update_queue(&props);
	result = sbq_properties_result(fcinfo, &addr, props.queue_id);
	sbq_storage_end();
	PG_RETURN_DATUM(result);
}

/* sbq_delete_queue(queue): the queue and all it holds; locks its name exclusively. */
Datum
sbq_delete_queue(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;

	SBQ_ROUTE(fcinfo);
	sbq_queue_call_begin(fcinfo, false, "sbq_delete_queue()", AccessExclusiveLock,
						 SBQ_RIGHT_MANAGE, &addr, &queue);
	sbq_refuse_subscription_manage(&addr, &queue, "sbq_delete_subscription()");
	sbq_storage_delete_queue(queue.queue_id);
	sbq_storage_end();
	PG_RETURN_VOID();
}

/*
 * sbq_purge_queue(queue or its DLQ): delete every message; row locks of those
 * messages. It takes no name lock: it would hold it while it waits for the
 * row locks of another's settlement or purge, and that transaction's delete
 * of the queue would then wait for it (a deadlock). A purge that found
 * nothing looks the queue up again, with a fresh snapshot: a delete that
 * committed since the first look (or that it waited for) left it nothing to
 * purge, and the purge fails as one after the delete (SB001), not with 0 for
 * a queue that had messages; or purges the queue made again under its name
 * meanwhile, as a purge after both would.
 */
Datum
sbq_purge_queue(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;
	SbqQueue	now;
	int64		n;
	int			tries;

	SBQ_ROUTE(fcinfo);
	sbq_queue_call_begin(fcinfo, true, "sbq_purge_queue()", NoLock, SBQ_RIGHT_MANAGE,
						 &addr, &queue);
	for (tries = 0;; tries++)
	{
		n = sbq_storage_purge(&queue, addr.subqueue);
		if (n > 0)
			break;
		if (!sbq_storage_find_queue(&addr, &now))
			sbq_queue_not_found(&addr);
		if (now.queue_id == queue.queue_id || tries >= 2)
			break;
		/* made again under its name meanwhile: that one, as a purge after */
		sbq_rights_require(&now, SBQ_RIGHT_MANAGE);
		queue = now;
	}
	sbq_storage_end();
	PG_RETURN_INT64(n);
}

/* sbq_get_queue(queue or its DLQ): the queue's properties; locks nothing. */
Datum
sbq_get_queue(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;
	Datum		result;

	SBQ_ROUTE(fcinfo);
	sbq_queue_call_begin(fcinfo, true, NULL, NoLock, SBQ_RIGHT_ANY, &addr, &queue);
	result = sbq_properties_result(fcinfo, &addr, queue.queue_id);
	sbq_storage_end();
	PG_RETURN_DATUM(result);
}

/* sbq_maintain(): one maintenance pass (maintain.c); row locks taken with SKIP LOCKED. */
Datum
sbq_maintain(PG_FUNCTION_ARGS)
{
	SbqMaintainResult res = {0};

	if (sbq_dist_call_active())
	{
		/*
		 * distributed: a maintenance worker's pass over the groups of its
		 * node, anyone else's over every group of the cluster
		 */
		sbq_dist_maintain(&res, !sbq_am_maintenance_worker);
	}
	else
	{
		sbq_storage_begin();
		sbq_storage_maintain(&res);
		sbq_storage_end();
	}
	PG_RETURN_JSONB_P(sbq_maintain_result_json(&res));
}

/* ---------------------------------------------------------------- rights */

/* The most elements the rights argument of a grant or revoke may have. */
#define SBQ_MAX_RIGHTS_ARG	16

/*
 * sbq_rights_arg
 *		The rights argument of sbq_grant and sbq_revoke as bits: a non-empty
 *		array of "send", "listen" and "manage" (any letter case).
 */
static int16
sbq_rights_arg(FunctionCallInfo fcinfo, int argno)
{
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	int			i;
	int16		rights = 0;

	sbq_require_arg(fcinfo, argno, "rights");
	arr = PG_GETARG_ARRAYTYPE_P(argno);
	sbq_check_array_size(arr, "rights", SBQ_MAX_RIGHTS_ARG,
						 "The rights are send, listen and manage.");
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("rights must not be empty"),
				 errhint("The rights are send, listen and manage.")));
	for (i = 0; i < n; i++)
	{
		char	   *name;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("rights must not contain null elements")));
		name = text_to_cstring(DatumGetTextPP(elems[i]));
		if (pg_strcasecmp(name, "send") == 0)
			rights |= SBQ_RIGHT_SEND;
		else if (pg_strcasecmp(name, "listen") == 0)
			rights |= SBQ_RIGHT_LISTEN;
		else if (pg_strcasecmp(name, "manage") == 0)
			rights |= SBQ_RIGHT_MANAGE;
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("unknown right \"%s\"", name),
					 errhint("The rights are send, listen and manage.")));
	}
	return rights;
}

/*
 * sbq_grant_common
 *		sbq_grant and sbq_revoke (queue, role, rights[]): the caller needs
 *		manage on the queue; the queue name's lock, self-conflicting, so two
 *		changes of one queue's rights never cross.
 *
 *		The role is a role's name, or "public". Rights are granted on a
 *		queue and cover its dead-letter sub-queue, so the sub-queue's name is
 *		refused. Revoking a right the role does not hold changes nothing, and
 *		revoking send or listen from a role that holds manage leaves manage,
 *		which implies them (as it is stored: the rights are independent).
 */
static Datum
sbq_grant_common(FunctionCallInfo fcinfo, bool grant)
{
	SbqAddress	addr;
	SbqQueue	queue;
	Oid			role;
	int16		rights;

	sbq_queue_address(fcinfo, true, &addr);
	if (addr.subqueue == SBQ_SUBQUEUE_DLQ)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("rights are granted on a queue, not on its dead-letter sub-queue"),
				 errdetail("The rights on a queue cover its dead-letter sub-queue.")));
	sbq_require_arg(fcinfo, 1, "role");
	rights = sbq_rights_arg(fcinfo, 2);
	if (strcmp(NameStr(*PG_GETARG_NAME(1)), "public") == 0)
		role = InvalidOid;
	else
		role = get_role_oid(NameStr(*PG_GETARG_NAME(1)), false);
	PreventCommandIfReadOnly(grant ? "sbq_grant()" : "sbq_revoke()");

	/* the caller's right first, as sbq_queue_call_begin checks it; a topic's too */
	sbq_storage_begin();
	sbq_storage_get_queue_or_topic(&addr, &queue, SBQ_RIGHT_MANAGE);
	sbq_storage_end();

	/*
	 * A subscription's with its topic's (whose delete takes only the topic's
	 * name): a right stored as the topic is deleted would name a queue that
	 * is gone, which no revoke reaches and which keeps the role from being
	 * dropped.
	 */
	sbq_lock_entity_name(addr.key, ShareUpdateExclusiveLock);
	sbq_storage_begin();
	sbq_storage_get_queue_or_topic(&addr, &queue, SBQ_RIGHT_MANAGE);
	sbq_storage_set_rights(&queue, role, rights, grant);
	sbq_storage_end();
	PG_RETURN_VOID();
}

/* sbq_grant(queue, role, rights[]) */
Datum
sbq_grant(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_grant_common(fcinfo, true);
}

/* sbq_revoke(queue, role, rights[]) */
Datum
sbq_revoke(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_grant_common(fcinfo, false);
}
