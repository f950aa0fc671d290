/*-------------------------------------------------------------------------
 *
 * api.c
 *	  The SQL-callable functions on messages: send (one, a batch, a batch of
 *	  sbq_new_message), receive, peek, cancel of a scheduled message, receive
 *	  of deferred messages, resubmit. (Settlements are in api_settle.c, queue
 *	  management in api_queues.c.)
 *
 * Each function checks its arguments (22004 for a NULL where a value is
 * required, 22023 for a bad value), refuses to write on a read-only
 * transaction or a standby (25006), and does its work through the storage
 * files (storage.h) in a storage section. Nothing here reads or writes a
 * table. The one-line comment above each says what it takes and what it
 * locks; every call also holds sbq.queues in AccessShareLock (storage_core.c).
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/api.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/int.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "distributed.h"
#include "storage.h"
#include "topics.h"
#include "wait.h"

PG_FUNCTION_INFO_V1(sbq_send_text);
PG_FUNCTION_INFO_V1(sbq_send_bytea);
PG_FUNCTION_INFO_V1(sbq_send_jsonb);
PG_FUNCTION_INFO_V1(sbq_send_batch_text);
PG_FUNCTION_INFO_V1(sbq_send_batch_bytea);
PG_FUNCTION_INFO_V1(sbq_send_batch_jsonb);
PG_FUNCTION_INFO_V1(sbq_send_batch_messages);
PG_FUNCTION_INFO_V1(sbq_new_message_text);
PG_FUNCTION_INFO_V1(sbq_new_message_bytea);
PG_FUNCTION_INFO_V1(sbq_new_message_jsonb);
PG_FUNCTION_INFO_V1(sbq_receive);
PG_FUNCTION_INFO_V1(sbq_peek);
PG_FUNCTION_INFO_V1(sbq_cancel_scheduled);
PG_FUNCTION_INFO_V1(sbq_receive_deferred);
PG_FUNCTION_INFO_V1(sbq_resubmit);


/* The argument positions shared by the send functions. */
enum
{
	SEND_QUEUE,
	SEND_BODY,
	SEND_MESSAGE_ID,
	SEND_SESSION_ID,
	SEND_CORRELATION_ID,
	SEND_SUBJECT,
	SEND_CONTENT_TYPE,
	SEND_REPLY_TO,
	SEND_REPLY_TO_SESSION_ID,
	SEND_TO_ADDRESS,
	SEND_TTL,
	SEND_SCHEDULED,
	SEND_APP_PROPERTIES
};

typedef enum SbqBodyType
{
	SBQ_BODY_TEXT,
	SBQ_BODY_BYTEA,
	SBQ_BODY_JSONB
} SbqBodyType;

static void
sbq_refuse_dlq_send(const SbqAddress *addr)
{
	if (addr->subqueue == SBQ_SUBQUEUE_DLQ)
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_INVALID_OPERATION),
				 errmsg("cannot send to the dead-letter sub-queue of queue \"%s\"", addr->name),
				 errdetail("Messages enter a dead-letter sub-queue only by being dead-lettered.")));
}

/*
 * sbq_refuse_sessionless
 *		SB010 for a call that takes messages of a queue that requires sessions
 *		without one (its dead-letter sub-queue has none: it is allowed).
 */
void
sbq_refuse_sessionless(const SbqQueue *queue, const SbqAddress *addr, const char *use)
{
	if (queue->requires_session && addr->subqueue == SBQ_SUBQUEUE_MAIN)
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_INVALID_OPERATION),
				 errmsg("queue \"%s\" requires sessions", queue->name),
				 errdetail("It is not possible for an entity that requires sessions to create a non-sessionful message receiver."),
				 errhint("Accept a session with sbq_accept_session() and use %s.", use)));
}

/* ------------------------------------------------------------- sending */

/*
 * sbq_body_bytes
 *		A message body as the bytes that are stored: bytea as it is, text and
 *		jsonb as their UTF-8 text.
 */
static bytea *
sbq_body_bytes(Datum body, SbqBodyType type)
{
	char	   *data;
	int			len;
	char	   *utf8;
	bytea	   *result;

	switch (type)
	{
		case SBQ_BODY_BYTEA:
			return DatumGetByteaPP(body);
		case SBQ_BODY_TEXT:
			{
				text	   *t = DatumGetTextPP(body);

				data = VARDATA_ANY(t);
				len = VARSIZE_ANY_EXHDR(t);
				break;
			}
		case SBQ_BODY_JSONB:
			{
				Jsonb	   *j = DatumGetJsonbP(body);

				data = JsonbToCString(NULL, &j->root, VARSIZE(j));
				len = strlen(data);
				break;
			}
		default:
			elog(ERROR, "unknown body type %d", (int) type);
	}

	utf8 = pg_server_to_any(data, len, PG_UTF8);
	if (utf8 != data)
		len = strlen(utf8);
	result = palloc(VARHDRSZ + len);
	SET_VARSIZE(result, VARHDRSZ + len);
	memcpy(VARDATA(result), utf8, len);
	return result;
}

/*
 * sbq_check_send_props
 *		Check the optional properties of a message, and make its time to live
 *		exact.
 */
static void
sbq_check_send_props(SbqSendProps *props)
{
	sbq_check_id_length("message_id", props->message_id);
	sbq_check_id_length("session_id", props->session_id);
	sbq_check_id_length("reply_to_session_id", props->reply_to_session_id);
	if (props->has_ttl)
	{
		sbq_exact_interval(&props->ttl);
		if (sbq_interval_usecs(&props->ttl) <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("time_to_live must be positive")));
	}
	if (props->has_scheduled && TIMESTAMP_NOT_FINITE(props->scheduled))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("scheduled_enqueue_time must be finite")));
	if (props->application_properties != NULL)
		sbq_check_json_object("application_properties", props->application_properties);
}

/* The i-th optional property of a message from where it is given, 0 being message_id. */
typedef Datum (*SbqPropGetter) (void *src, int i, bool *isnull);

/*
 * sbq_fill_send_props
 *		The optional properties of a message, in sbq_send's order of its
 *		arguments from message_id on, read with get from src; checked.
 */
static void
sbq_fill_send_props(SbqSendProps *props, SbqPropGetter get, void *src)
{
	text	  **texts[] = {
		&props->message_id, &props->session_id, &props->correlation_id, &props->subject,
		&props->content_type, &props->reply_to, &props->reply_to_session_id,
		&props->to_address
	};
	int			n = lengthof(texts);
	bool		isnull;
	Datum		d;
	int			i;

	memset(props, 0, sizeof(SbqSendProps));
	for (i = 0; i < n; i++)
	{
		d = get(src, i, &isnull);
		*texts[i] = isnull ? NULL : DatumGetTextPP(d);
		/* message_id, session_id (to a queue without sessions too): never empty */
		if (i < 2 && !isnull && VARSIZE_ANY_EXHDR(*texts[i]) == 0)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("%s must not be empty", i == 0 ? "message_id" : "session_id")));
	}
	d = get(src, n, &isnull);
	props->has_ttl = !isnull;
	if (!isnull)
		props->ttl = *DatumGetIntervalP(d);
	d = get(src, n + 1, &isnull);
	props->has_scheduled = !isnull;
	if (!isnull)
		props->scheduled = DatumGetTimestampTz(d);
	d = get(src, n + 2, &isnull);
	if (!isnull)
		props->application_properties = DatumGetJsonbP(d);
	sbq_check_send_props(props);
}

/* the optional arguments of a send */
static Datum
sbq_send_arg(void *src, int i, bool *isnull)
{
	FunctionCallInfo fcinfo = src;

	*isnull = PG_ARGISNULL(SEND_MESSAGE_ID + i);
	return *isnull ? (Datum) 0 : PG_GETARG_DATUM(SEND_MESSAGE_ID + i);
}

/*
 * sbq_require_session_id
 *		22023, in Service Bus's words, for a message without a session id to a
 *		queue that requires sessions.
 */
static void
sbq_require_session_id(const SbqQueue *queue, const SbqSendProps *props)
{
	if (queue->requires_session &&
		(props->session_id == NULL || VARSIZE_ANY_EXHDR(props->session_id) == 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the SessionId was not set on a message, and it cannot be sent to queue \"%s\"",
						queue->name),
				 errdetail("Entities that have session support enabled can only receive messages that have the SessionId set to a valid value.")));
}

/*
 * sbq_batch_bodies
 *		The bodies of a batch: at most SBQ_MAX_BATCH, none NULL, and not
 *		several under one message id. *nbodies gets their count.
 */
static Datum *
sbq_batch_bodies(FunctionCallInfo fcinfo, const SbqSendProps *props, int *nbodies)
{
	ArrayType  *arr = PG_GETARG_ARRAYTYPE_P(SEND_BODY);
	Oid			elemtype = ARR_ELEMTYPE(arr);
	int16		typlen;
	bool		typbyval;
	char		typalign;
	bool	   *nulls;
	Datum	   *bodies;
	int			i;

	sbq_check_array_size(arr, "bodies", SBQ_MAX_BATCH,
						 "A batch sends at most " CppAsString2(SBQ_MAX_BATCH) " messages.");
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(arr, elemtype, typlen, typbyval, typalign, &bodies, &nulls, nbodies);
	for (i = 0; i < *nbodies; i++)
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("bodies must not contain null elements"),
					 errdetail("Element %d is null.", sbq_array_subscript(arr, i))));
	/* with duplicate detection all but the first would be dropped unseen */
	if (props->message_id != NULL && *nbodies > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("message_id cannot be shared by the %d messages of a batch", *nbodies),
				 errdetail("Every message has its own message id."),
				 errhint("Leave message_id NULL for new ids, or send an array of sbq_new_message, each with its own.")));
	return bodies;
}

/*
 * sbq_send_common
 *		Send one body or an array of bodies; fills seqs (palloc'd, one per
 *		body) and returns how many were sent.
 */
static int
sbq_send_common(FunctionCallInfo fcinfo, SbqBodyType type, bool batch, int64 **seqs)
{
	SbqAddress	addr;
	SbqQueue	queue;
	SbqSendProps props;
	Datum	   *bodies;
	int			nbodies;
	int			i;
	int64		props_size;
	int64		batch_size = 0;
	static const char *const default_content_types[] = {
		[SBQ_BODY_TEXT] = SBQ_CONTENT_TYPE_TEXT,
		[SBQ_BODY_BYTEA] = NULL,
		[SBQ_BODY_JSONB] = SBQ_CONTENT_TYPE_JSON,
	};

	sbq_queue_address(fcinfo, true, &addr);
	sbq_refuse_dlq_send(&addr);
	sbq_require_arg(fcinfo, SEND_BODY, batch ? "bodies" : "body");
	sbq_fill_send_props(&props, sbq_send_arg, fcinfo);
	PreventCommandIfReadOnly(batch ? "sbq_send_batch()" : "sbq_send()");

	if (batch)
		bodies = sbq_batch_bodies(fcinfo, &props, &nbodies);
	else
	{
		bodies = palloc(sizeof(Datum));
		bodies[0] = PG_GETARG_DATUM(SEND_BODY);
		nbodies = 1;
	}
	*seqs = palloc(sizeof(int64) * Max(nbodies, 1));

	sbq_lock_queue_name(addr.key, AccessShareLock);
	sbq_storage_begin();
	sbq_storage_get_queue_to_send(&addr, &queue);
	sbq_require_session_id(&queue, &props);
	/*
	 * The bodies as bytes once the queue is known and the caller may send to
	 * it: work for a queue that is there. Each message, body and properties,
	 * must fit the queue, and a batch SBQ_MAX_BATCH_BYTES.
	 */
	props_size = sbq_props_size(&props);
	for (i = 0; i < nbodies; i++)
	{
		int64		size;

		CHECK_FOR_INTERRUPTS();
		/*
		 * A JSON body that would print far larger than the queue takes (a
		 * number of a few bytes can print as 100,000 digits) is not printed;
		 * one near the limit is, and is measured exactly below.
		 */
		if (type == SBQ_BODY_JSONB &&
			sbq_jsonb_text_size(DatumGetJsonbP(bodies[i]),
								2 * (int64) queue.max_message_size + 1024) >
			2 * (int64) queue.max_message_size + 1024)
			ereport(ERROR,
					(errcode(SBQ_ERRCODE_MESSAGE_TOO_LARGE),
					 errmsg("message of more than " INT64_FORMAT " bytes is too large for queue \"%s\"",
							2 * (int64) queue.max_message_size + 1024, queue.name),
					 errdetail("The queue's max_message_size is %d bytes.",
							   queue.max_message_size)));
		bodies[i] = PointerGetDatum(sbq_body_bytes(bodies[i], type));
		size = VARSIZE_ANY_EXHDR(DatumGetPointer(bodies[i]));
		sbq_check_message_size(&queue, size, props_size, "message");
		batch_size += size + props_size;
		if (batch && batch_size > SBQ_MAX_BATCH_BYTES)
			ereport(ERROR,
					(errcode(SBQ_ERRCODE_MESSAGE_TOO_LARGE),
					 errmsg("batch for queue \"%s\" is too large", queue.name),
					 errdetail("A batch sends at most %d bytes; its first %d messages take "
							   INT64_FORMAT ".", SBQ_MAX_BATCH_BYTES, i + 1, batch_size)));
	}
	nbodies = sbq_storage_send(&queue, &props, bodies, nbodies,
							   default_content_types[type], *seqs);
	sbq_storage_end();
	return nbodies;
}

static Datum
sbq_send_one(FunctionCallInfo fcinfo, SbqBodyType type)
{
	int64	   *seqs;

	(void) sbq_send_common(fcinfo, type, false, &seqs);
	PG_RETURN_INT64(seqs[0]);
}

static Datum
sbq_send_many(FunctionCallInfo fcinfo, SbqBodyType type)
{
	int64	   *seqs;
	int			n;
	int			i;
	TupleDesc	tupdesc;
	Tuplestorestate *tupstore = sbq_init_srf(fcinfo, &tupdesc);

	n = sbq_send_common(fcinfo, type, true, &seqs);
	for (i = 0; i < n; i++)
	{
		Datum		value = Int64GetDatum(seqs[i]);
		bool		isnull = false;

		tuplestore_putvalues(tupstore, tupdesc, &value, &isnull);
	}
	return (Datum) 0;
}

/* sbq_send(queue, text body, properties...): one message; the queue name's lock, shared. */
Datum
sbq_send_text(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_send_one(fcinfo, SBQ_BODY_TEXT);
}

/* sbq_send(queue, bytea body, properties...): one message; the queue name's lock, shared. */
Datum
sbq_send_bytea(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_send_one(fcinfo, SBQ_BODY_BYTEA);
}

/* sbq_send(queue, jsonb body, properties...): one message; the queue name's lock, shared. */
Datum
sbq_send_jsonb(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_send_one(fcinfo, SBQ_BODY_JSONB);
}

/* sbq_send_batch(queue, text[] bodies, properties...): one message each; the name's lock, shared. */
Datum
sbq_send_batch_text(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_send_many(fcinfo, SBQ_BODY_TEXT);
}

/* sbq_send_batch(queue, bytea[] bodies, properties...): one message each; the name's lock, shared. */
Datum
sbq_send_batch_bytea(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_send_many(fcinfo, SBQ_BODY_BYTEA);
}

/* sbq_send_batch(queue, jsonb[] bodies, properties...): one message each; the name's lock, shared. */
Datum
sbq_send_batch_jsonb(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_send_many(fcinfo, SBQ_BODY_JSONB);
}


/* the element of messages an error is about, for its context line */
static void
sbq_element_context(void *arg)
{
	int		   *element = arg;

	if (*element > 0)
		errcontext("element %d of messages", *element);
}

/* the attributes of an sbq_new_message after its body */
static Datum
sbq_new_message_attr(void *src, int i, bool *isnull)
{
	return GetAttributeByNum((HeapTupleHeader) src, NEW_MESSAGE_ID + i, isnull);
}

/*
 * sbq_new_message_props
 *		The body and properties of one sbq_new_message, checked as a send
 *		checks its arguments.
 */
bytea *
sbq_new_message_props(HeapTupleHeader msg, SbqSendProps *props)
{
	bool		isnull;
	Datum		body;

	if (HeapTupleHeaderGetNatts(msg) < NEW_NATTS)
		elog(ERROR, "sbq_new_message has %d attributes, not %d",
			 HeapTupleHeaderGetNatts(msg), NEW_NATTS);
	body = GetAttributeByNum(msg, NEW_BODY, &isnull);
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("body must not be null")));
	sbq_fill_send_props(props, sbq_new_message_attr, msg);
	return DatumGetByteaPP(body);
}

/*
 * sbq_new_message_of
 *		sbq_new_message(body, properties...): a message for a batch, its body
 *		as the bytes that would be stored, the properties as given, and the
 *		content type of a text or JSON body by default, as sbq_send gives it.
 *		Checks nothing else: the batch checks each message against its queue.
 */
static Datum
sbq_new_message_of(FunctionCallInfo fcinfo, SbqBodyType type)
{
	static const char *const default_content_types[] = {
		[SBQ_BODY_TEXT] = SBQ_CONTENT_TYPE_TEXT,
		[SBQ_BODY_BYTEA] = NULL,
		[SBQ_BODY_JSONB] = SBQ_CONTENT_TYPE_JSON,
	};
	TupleDesc	tupdesc;
	Datum		values[NEW_NATTS];
	bool		nulls[NEW_NATTS];
	int			i;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE ||
		tupdesc->natts != NEW_NATTS)
		elog(ERROR, "sbq_new_message must return a row of %d columns", NEW_NATTS);
	sbq_require_arg(fcinfo, 0, "body");
	/* a JSON body that would print larger than any queue takes is not printed */
	if (type == SBQ_BODY_JSONB &&
		sbq_jsonb_text_size(PG_GETARG_JSONB_P(0), SBQ_MAX_MESSAGE_SIZE) >
		SBQ_MAX_MESSAGE_SIZE)
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_MESSAGE_TOO_LARGE),
				 errmsg("message of more than %d bytes is too large for any queue",
						SBQ_MAX_MESSAGE_SIZE)));
	/* the arguments are the attributes, in order */
	for (i = 0; i < NEW_NATTS; i++)
	{
		nulls[i] = PG_ARGISNULL(i);
		values[i] = nulls[i] ? (Datum) 0 : PG_GETARG_DATUM(i);
	}
	values[NEW_BODY - 1] = PointerGetDatum(sbq_body_bytes(PG_GETARG_DATUM(0), type));
	if (nulls[NEW_CONTENT_TYPE - 1] && default_content_types[type] != NULL)
	{
		values[NEW_CONTENT_TYPE - 1] = CStringGetTextDatum(default_content_types[type]);
		nulls[NEW_CONTENT_TYPE - 1] = false;
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}

/* sbq_new_message(text body, properties...): no lock. */
Datum
sbq_new_message_text(PG_FUNCTION_ARGS)
{
	return sbq_new_message_of(fcinfo, SBQ_BODY_TEXT);
}

/* sbq_new_message(bytea body, properties...): no lock. */
Datum
sbq_new_message_bytea(PG_FUNCTION_ARGS)
{
	return sbq_new_message_of(fcinfo, SBQ_BODY_BYTEA);
}

/* sbq_new_message(jsonb body, properties...): no lock. */
Datum
sbq_new_message_jsonb(PG_FUNCTION_ARGS)
{
	return sbq_new_message_of(fcinfo, SBQ_BODY_JSONB);
}

/*
 * sbq_send_batch_messages
 *		(queue, messages sbq_new_message[]): the queue name's lock, shared.
 *
 *		Send each message with its own properties, in order, all or none;
 *		returns their sequence numbers. Each is checked and sent as sbq_send
 *		would send it (duplicate detection too, message by message); the
 *		content type a constructor gave a text or JSON body does not count
 *		towards its size, as it would not have at sbq_send.
 */
Datum
sbq_send_batch_messages(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;
	ArrayType  *arr;
	Datum	   *msgs;
	bool	   *nulls;
	int			nmsgs;
	SbqSendProps *props;
	Datum	   *bodies;
	int64	   *seqs;
	int64		batch_size = 0;
	int			element = 0;
	int			i;
	TupleDesc	tupdesc;
	Tuplestorestate *tupstore;
	ErrorContextCallback errcb;

	SBQ_ROUTE(fcinfo);
	sbq_queue_address(fcinfo, true, &addr);
	sbq_refuse_dlq_send(&addr);
	sbq_require_arg(fcinfo, 1, "messages");
	arr = PG_GETARG_ARRAYTYPE_P(1);
	sbq_check_array_size(arr, "messages", SBQ_MAX_BATCH,
						 "A batch sends at most " CppAsString2(SBQ_MAX_BATCH) " messages.");
	deconstruct_array(arr, ARR_ELEMTYPE(arr), -1, false, TYPALIGN_DOUBLE,
					  &msgs, &nulls, &nmsgs);
	props = palloc(sizeof(SbqSendProps) * Max(nmsgs, 1));
	bodies = palloc(sizeof(Datum) * Max(nmsgs, 1));
	seqs = palloc(sizeof(int64) * Max(nmsgs, 1));

	errcb.callback = sbq_element_context;
	errcb.arg = &element;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;
	for (i = 0; i < nmsgs; i++)
	{
		CHECK_FOR_INTERRUPTS();
		element = sbq_array_subscript(arr, i);
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("messages must not contain null elements"),
					 errdetail("Element %d is null.", element)));
		bodies[i] = PointerGetDatum(sbq_new_message_props(DatumGetHeapTupleHeader(msgs[i]),
														  &props[i]));
	}
	element = 0;
	PreventCommandIfReadOnly("sbq_send_batch()");

	tupstore = sbq_init_srf(fcinfo, &tupdesc);
	sbq_lock_queue_name(addr.key, AccessShareLock);
	sbq_storage_begin();
	sbq_storage_get_queue_to_send(&addr, &queue);
	/* each message must fit the queue, and the batch SBQ_MAX_BATCH_BYTES */
	for (i = 0; i < nmsgs; i++)
	{
		int64		body = VARSIZE_ANY_EXHDR(DatumGetPointer(bodies[i]));
		int64		size = sbq_props_size(&props[i]);
		text	   *ct = props[i].content_type;

		CHECK_FOR_INTERRUPTS();
		element = sbq_array_subscript(arr, i);
		sbq_require_session_id(&queue, &props[i]);
		if (ct != NULL &&
			((VARSIZE_ANY_EXHDR(ct) == strlen(SBQ_CONTENT_TYPE_TEXT) &&
			  memcmp(VARDATA_ANY(ct), SBQ_CONTENT_TYPE_TEXT, VARSIZE_ANY_EXHDR(ct)) == 0) ||
			 (VARSIZE_ANY_EXHDR(ct) == strlen(SBQ_CONTENT_TYPE_JSON) &&
			  memcmp(VARDATA_ANY(ct), SBQ_CONTENT_TYPE_JSON, VARSIZE_ANY_EXHDR(ct)) == 0)))
			size -= VARSIZE_ANY_EXHDR(ct);
		sbq_check_message_size(&queue, body, size, "message");
		batch_size += body + size;
		if (batch_size > SBQ_MAX_BATCH_BYTES)
			ereport(ERROR,
					(errcode(SBQ_ERRCODE_MESSAGE_TOO_LARGE),
					 errmsg("batch for queue \"%s\" is too large", queue.name),
					 errdetail("A batch sends at most %d bytes; its first %d messages take "
							   INT64_FORMAT ".", SBQ_MAX_BATCH_BYTES, i + 1, batch_size)));
	}
	element = 0;
	for (i = 0; i < nmsgs; i++)
	{
		CHECK_FOR_INTERRUPTS();
		(void) sbq_storage_send(&queue, &props[i], &bodies[i], 1, NULL, &seqs[i]);
	}
	sbq_storage_end();
	error_context_stack = errcb.previous;

	for (i = 0; i < nmsgs; i++)
	{
		Datum		value = Int64GetDatum(seqs[i]);
		bool		isnull = false;

		tuplestore_putvalues(tupstore, tupdesc, &value, &isnull);
	}
	return (Datum) 0;
}

/* ----------------------------------------------------------- receiving */

int
sbq_max_messages_arg(FunctionCallInfo fcinfo, int argno)
{
	int32		n;

	sbq_require_arg(fcinfo, argno, "max_messages");
	n = PG_GETARG_INT32(argno);
	if (n < 1 || n > SBQ_MAX_RECEIVE)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_messages %d is out of range", n),
				 errdetail("It must be between 1 and %d.", SBQ_MAX_RECEIVE)));
	return n;
}

/* The max_wait argument in microseconds (saturating), 22023 when negative. */
int64
sbq_max_wait_arg(FunctionCallInfo fcinfo, int argno, TimestampTz *deadline)
{
	int64		wait_us;

	sbq_require_arg(fcinfo, argno, "max_wait");
	wait_us = sbq_interval_usecs(PG_GETARG_INTERVAL_P(argno));
	if (wait_us < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_wait must be zero or a finite positive interval")));
	if (pg_add_s64_overflow(GetCurrentTimestamp(), wait_us, deadline))
		*deadline = PG_INT64_MAX;
	return wait_us;
}

/*
 * sbq_receive
 *		(queue or its DLQ, max_messages, max_wait, receive_mode): leases, or
 *		row locks taken with SKIP LOCKED.
 *
 *		Hand out up to max_messages available messages. With max_wait > 0 and
 *		nothing available, look again every sbqueue.receive_poll_interval until
 *		something is or the time is up; the wait ends at once on a cancel or
 *		statement_timeout. Under REPEATABLE READ or SERIALIZABLE the snapshot
 *		never changes, so there is nothing to wait for: it looks once.
 */
Datum
sbq_receive(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;
	int			max_messages;
	int64		wait_us;
	char	   *mode_name;
	SbqReceiveMode mode;
	TupleDesc	tupdesc;
	Tuplestorestate *tupstore;
	TimestampTz deadline;
	bool		looked = false;

	SBQ_ROUTE(fcinfo);
	sbq_queue_address(fcinfo, true, &addr);
	max_messages = sbq_max_messages_arg(fcinfo, 1);
	/* saturates: a wait longer than time can hold waits until cancelled */
	wait_us = sbq_max_wait_arg(fcinfo, 2, &deadline);
	sbq_require_arg(fcinfo, 3, "receive_mode");
	mode_name = text_to_cstring(PG_GETARG_TEXT_PP(3));
	if (strcmp(mode_name, "peek_lock") == 0)
		mode = SBQ_PEEK_LOCK;
	else if (strcmp(mode_name, "receive_and_delete") == 0)
		mode = SBQ_RECEIVE_AND_DELETE;
	else
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid receive_mode \"%s\"", mode_name),
				 errhint("Use 'peek_lock' or 'receive_and_delete'.")));
	PreventCommandIfReadOnly("sbq_receive()");

	tupstore = sbq_init_srf(fcinfo, &tupdesc);

	sbq_storage_begin();
	sbq_storage_get_queue(&addr, &queue, SBQ_RIGHT_LISTEN);
	sbq_refuse_sessionless(&queue, &addr, "sbq_receive_session()");
	sbq_refuse_forwarding_receive(&queue, &addr);
	for (;;)
	{
		SbqReceiveResult r;

		/* after a sleep: the queue and the caller's right again (a revoke, a delete) */
		if (looked)
			sbq_storage_recheck_queue(&addr, &queue, SBQ_RIGHT_LISTEN);
		looked = true;
		/* get on the wait list before looking, so no commit slips between */
		if (wait_us > 0)
			sbq_wait_prepare(queue.queue_id);
		r = sbq_storage_receive(&queue, addr.subqueue, max_messages, mode,
								tupstore, tupdesc);
		if (r.delivered > 0 || !sbq_poll_again(wait_us, deadline))
			break;
	}
	if (wait_us > 0)
		sbq_wait_cancel();
	sbq_storage_end();
	return (Datum) 0;
}

/* sbq_peek(queue or its DLQ, max_messages, from_sequence_number): locks nothing. */
Datum
sbq_peek(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;
	int			max_messages;
	int64		from_seq = 0;
	TupleDesc	tupdesc;
	Tuplestorestate *tupstore;

	SBQ_ROUTE(fcinfo);
	sbq_queue_address(fcinfo, true, &addr);
	max_messages = sbq_max_messages_arg(fcinfo, 1);
	if (!PG_ARGISNULL(2))
		from_seq = PG_GETARG_INT64(2);

	tupstore = sbq_init_srf(fcinfo, &tupdesc);
	sbq_storage_begin();
	sbq_storage_get_queue(&addr, &queue, SBQ_RIGHT_LISTEN);
	(void) sbq_storage_peek(&queue, addr.subqueue, max_messages, from_seq,
							tupstore, tupdesc);
	sbq_storage_end();
	return (Datum) 0;
}

/*
 * sbq_seq_array_arg
 *		A bigint[] argument as distinct sequence numbers (22004 for a NULL
 *		element); *n gets their count.
 */
Datum *
sbq_seq_array_arg(FunctionCallInfo fcinfo, int argno, const char *argname, const char *why,
				  int *n)
{
	ArrayType  *arr = PG_GETARG_ARRAYTYPE_P(argno);
	Datum	   *elems;
	bool	   *nulls;
	int			nelems;
	int			i;

	sbq_check_array_size(arr, argname, SBQ_MAX_RECEIVE, why);
	deconstruct_array(arr, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
					  &elems, &nulls, &nelems);
	for (i = 0; i < nelems; i++)
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not contain null elements", argname),
					 errdetail("Element %d is null.", sbq_array_subscript(arr, i))));
	*n = sbq_distinct_int8(elems, nelems);
	return elems;
}

static void
sbq_message_not_found(const SbqAddress *addr, const char *what, int64 seq)
{
	ereport(ERROR,
			(errcode(SBQ_ERRCODE_MESSAGE_NOT_FOUND),
			 errmsg("no %s message with sequence number " INT64_FORMAT " on queue \"%s%s\"",
					what, seq, addr->name,
					addr->subqueue == SBQ_SUBQUEUE_DLQ ? SBQ_DLQ_SUFFIX : "")));
}

/* sbq_cancel_scheduled(queue, sequence_number): delete a scheduled message; its row lock. */
Datum
sbq_cancel_scheduled(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;
	int64		seq;

	SBQ_ROUTE(fcinfo);
	sbq_queue_address(fcinfo, true, &addr);
	sbq_require_arg(fcinfo, 1, "sequence_number");
	seq = PG_GETARG_INT64(1);
	PreventCommandIfReadOnly("sbq_cancel_scheduled()");
	sbq_storage_begin();
	sbq_storage_get_queue_or_topic(&addr, &queue, SBQ_RIGHT_SEND);
	/* a subscription's scheduled copies are its topic's to cancel */
	sbq_refuse_subscription_send(&addr, &queue);
	/* what a forwarding entity sent on is its destination's: cancel it there */
	if (queue.forward_to != NULL)
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_INVALID_OPERATION),
				 errmsg("\"%s\" forwards its messages to \"%s\": they are scheduled there",
						queue.name, queue.forward_to),
				 errhint("Cancel it with sbq_cancel_scheduled('%s', " INT64_FORMAT "), which needs the right to send there.",
						 queue.forward_to, seq)));
	/* a dead-letter sub-queue holds no scheduled messages */
	if (queue.is_topic && !sbq_storage_cancel_scheduled(&queue, seq))
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_MESSAGE_NOT_FOUND),
				 errmsg("no scheduled message with sequence number " INT64_FORMAT " on topic \"%s\"",
						seq, queue.name),
				 errdetail("Its copies have come due, were cancelled, or none was stored.")));
	if (!queue.is_topic &&
		(addr.subqueue == SBQ_SUBQUEUE_DLQ || !sbq_storage_cancel_scheduled(&queue, seq)))
		sbq_message_not_found(&addr, "scheduled", seq);
	sbq_storage_end();
	PG_RETURN_VOID();
}

/*
 * sbq_receive_deferred
 *		(queue or its DLQ, sequence_numbers[]): row locks of those messages.
 *
 *		Lock and return deferred messages by sequence number, all or none
 *		(SB003 naming the first that is not a deferred message free to lock).
 */
Datum
sbq_receive_deferred(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;
	Datum	   *seqs;
	int			nseqs;
	int64		missing;
	TupleDesc	tupdesc;
	Tuplestorestate *tupstore;

	SBQ_ROUTE(fcinfo);
	sbq_queue_address(fcinfo, true, &addr);
	sbq_require_arg(fcinfo, 1, "sequence_numbers");
	seqs = sbq_seq_array_arg(fcinfo, 1, "sequence_numbers",
							 "At most " CppAsString2(SBQ_MAX_RECEIVE) " messages are received at once.",
							 &nseqs);
	PreventCommandIfReadOnly("sbq_receive_deferred()");

	tupstore = sbq_init_srf(fcinfo, &tupdesc);
	sbq_storage_begin();
	sbq_storage_get_queue(&addr, &queue, SBQ_RIGHT_LISTEN);
	sbq_refuse_sessionless(&queue, &addr, "sbq_receive_deferred(queue, sequence_numbers, session_token)");
	sbq_refuse_forwarding_receive(&queue, &addr);
	if (nseqs > 0 &&
		!sbq_storage_receive_deferred(&queue, addr.subqueue, seqs, nseqs,
									  tupstore, tupdesc, &missing))
		sbq_message_not_found(&addr, "deferred", missing);
	sbq_storage_end();
	return (Datum) 0;
}

/*
 * sbq_resubmit
 *		(queue, sequence_numbers[] or NULL for all): row locks taken with SKIP
 *		LOCKED.
 *
 *		Dead letters back to their queue as new messages: the given ones (all
 *		or none, SB003 naming one that is not a dead letter free to move), or
 *		all that no valid lock holds.
 */
Datum
sbq_resubmit(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;
	Datum	   *seqs = NULL;
	int			nseqs = 0;
	int64		missing = 0;
	int			n;

	SBQ_ROUTE(fcinfo);
	sbq_queue_address(fcinfo, true, &addr);
	if (!PG_ARGISNULL(1))
		seqs = sbq_seq_array_arg(fcinfo, 1, "sequence_numbers",
								 "At most " CppAsString2(SBQ_MAX_RECEIVE) " dead letters are resubmitted at once.",
								 &nseqs);
	PreventCommandIfReadOnly("sbq_resubmit()");

	/*
	 * The name in share mode, as a send: an update that starts forwarding
	 * (the queue must be empty) or a delete waits for what this stores.
	 */
	sbq_lock_entity_name(addr.key, AccessShareLock);
	sbq_storage_begin();
	sbq_storage_get_queue_held(&addr, &queue, SBQ_RIGHT_MANAGE);
	if (queue.forward_to != NULL)
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_INVALID_OPERATION),
				 errmsg("cannot resubmit to \"%s\", which forwards its messages to \"%s\"",
						queue.name, queue.forward_to),
				 errdetail("A resubmitted message would stay where no one may receive it."),
				 errhint("Stop forwarding first (forward_to => ''), or peek the dead letters and send them to \"%s\".",
						 queue.forward_to)));
	if (seqs != NULL && nseqs == 0)
		n = 0;
	else
		n = sbq_storage_resubmit(&queue, seqs, nseqs, &missing);
	if (seqs != NULL && n != nseqs)
	{
		/* the error undoes the moves that were made */
		addr.subqueue = SBQ_SUBQUEUE_DLQ;
		sbq_message_not_found(&addr, "dead-lettered", missing);
	}
	sbq_storage_end();
	PG_RETURN_INT32(n);
}
