/*-------------------------------------------------------------------------
 *
 * api.c
 *	  The SQL-callable functions on messages: send, receive, peek, complete,
 *	  abandon, defer, dead-letter, renew, cancel of a scheduled message,
 *	  receive of deferred messages, resubmit. (Queue management is in
 *	  api_queues.c.)
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
#include "storage.h"
#include "wait.h"

PG_FUNCTION_INFO_V1(sbq_send_text);
PG_FUNCTION_INFO_V1(sbq_send_bytea);
PG_FUNCTION_INFO_V1(sbq_send_jsonb);
PG_FUNCTION_INFO_V1(sbq_send_batch_text);
PG_FUNCTION_INFO_V1(sbq_send_batch_bytea);
PG_FUNCTION_INFO_V1(sbq_send_batch_jsonb);
PG_FUNCTION_INFO_V1(sbq_receive);
PG_FUNCTION_INFO_V1(sbq_peek);
PG_FUNCTION_INFO_V1(sbq_complete);
PG_FUNCTION_INFO_V1(sbq_complete_text);
PG_FUNCTION_INFO_V1(sbq_complete_many);
PG_FUNCTION_INFO_V1(sbq_abandon);
PG_FUNCTION_INFO_V1(sbq_renew);
PG_FUNCTION_INFO_V1(sbq_defer);
PG_FUNCTION_INFO_V1(sbq_deadletter);
PG_FUNCTION_INFO_V1(sbq_cancel_scheduled);
PG_FUNCTION_INFO_V1(sbq_receive_deferred);
PG_FUNCTION_INFO_V1(sbq_resubmit);

#define SBQ_MAX_DEAD_LETTER_TEXT	4096


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

static text *
sbq_opt_text(FunctionCallInfo fcinfo, int argno)
{
	return PG_ARGISNULL(argno) ? NULL : PG_GETARG_TEXT_PP(argno);
}

/*
 * sbq_send_props
 *		The optional arguments of a send, checked.
 */
static void
sbq_send_props(FunctionCallInfo fcinfo, SbqSendProps *props)
{
	memset(props, 0, sizeof(SbqSendProps));
	props->message_id = sbq_opt_text(fcinfo, SEND_MESSAGE_ID);
	props->session_id = sbq_opt_text(fcinfo, SEND_SESSION_ID);
	props->correlation_id = sbq_opt_text(fcinfo, SEND_CORRELATION_ID);
	props->subject = sbq_opt_text(fcinfo, SEND_SUBJECT);
	props->content_type = sbq_opt_text(fcinfo, SEND_CONTENT_TYPE);
	props->reply_to = sbq_opt_text(fcinfo, SEND_REPLY_TO);
	props->reply_to_session_id = sbq_opt_text(fcinfo, SEND_REPLY_TO_SESSION_ID);
	props->to_address = sbq_opt_text(fcinfo, SEND_TO_ADDRESS);

	sbq_check_id_length("message_id", props->message_id);
	sbq_check_id_length("session_id", props->session_id);
	sbq_check_id_length("reply_to_session_id", props->reply_to_session_id);
	if (props->message_id != NULL && VARSIZE_ANY_EXHDR(props->message_id) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("message_id must not be empty")));

	if (!PG_ARGISNULL(SEND_TTL))
	{
		props->has_ttl = true;
		props->ttl = *PG_GETARG_INTERVAL_P(SEND_TTL);
		sbq_exact_interval(&props->ttl);
		if (sbq_interval_usecs(&props->ttl) <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("time_to_live must be positive")));
	}
	if (!PG_ARGISNULL(SEND_SCHEDULED))
	{
		props->has_scheduled = true;
		props->scheduled = PG_GETARG_TIMESTAMPTZ(SEND_SCHEDULED);
		if (TIMESTAMP_NOT_FINITE(props->scheduled))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("scheduled_enqueue_time must be finite")));
	}
	if (!PG_ARGISNULL(SEND_APP_PROPERTIES))
	{
		props->application_properties = PG_GETARG_JSONB_P(SEND_APP_PROPERTIES);
		sbq_check_json_object("application_properties", props->application_properties);
	}
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
	sbq_send_props(fcinfo, &props);
	PreventCommandIfReadOnly(batch ? "sbq_send_batch()" : "sbq_send()");

	if (batch)
	{
		ArrayType  *arr = PG_GETARG_ARRAYTYPE_P(SEND_BODY);
		Oid			elemtype = ARR_ELEMTYPE(arr);
		int16		typlen;
		bool		typbyval;
		char		typalign;
		bool	   *nulls;

		sbq_check_array_size(arr, "bodies", SBQ_MAX_BATCH,
							 "A batch sends at most " CppAsString2(SBQ_MAX_BATCH) " messages.");
		get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
		deconstruct_array(arr, elemtype, typlen, typbyval, typalign,
						  &bodies, &nulls, &nbodies);
		for (i = 0; i < nbodies; i++)
			if (nulls[i])
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("bodies must not contain null elements"),
						 errdetail("Element %d is null.", sbq_array_subscript(arr, i))));
	}
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
	return sbq_send_one(fcinfo, SBQ_BODY_TEXT);
}

/* sbq_send(queue, bytea body, properties...): one message; the queue name's lock, shared. */
Datum
sbq_send_bytea(PG_FUNCTION_ARGS)
{
	return sbq_send_one(fcinfo, SBQ_BODY_BYTEA);
}

/* sbq_send(queue, jsonb body, properties...): one message; the queue name's lock, shared. */
Datum
sbq_send_jsonb(PG_FUNCTION_ARGS)
{
	return sbq_send_one(fcinfo, SBQ_BODY_JSONB);
}

/* sbq_send_batch(queue, text[] bodies, properties...): one message each; the name's lock, shared. */
Datum
sbq_send_batch_text(PG_FUNCTION_ARGS)
{
	return sbq_send_many(fcinfo, SBQ_BODY_TEXT);
}

/* sbq_send_batch(queue, bytea[] bodies, properties...): one message each; the name's lock, shared. */
Datum
sbq_send_batch_bytea(PG_FUNCTION_ARGS)
{
	return sbq_send_many(fcinfo, SBQ_BODY_BYTEA);
}

/* sbq_send_batch(queue, jsonb[] bodies, properties...): one message each; the name's lock, shared. */
Datum
sbq_send_batch_jsonb(PG_FUNCTION_ARGS)
{
	return sbq_send_many(fcinfo, SBQ_BODY_JSONB);
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
 * sbq_wait_more
 *		After a look that found nothing: sleep until a commit on the queue,
 *		the poll interval or the deadline, and say whether to look again.
 */
bool
sbq_wait_more(int64 wait_us, TimestampTz deadline)
{
	TimestampTz now;

	if (wait_us == 0 || IsolationUsesXactSnapshot())
		return false;
	now = GetCurrentTimestamp();
	if (now >= deadline)
		return false;
	sbq_wait_sleep(Min((deadline - now + 999) / 1000, (int64) sbq_receive_poll_interval));
	return true;
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
		if (r.delivered > 0 || !sbq_wait_more(wait_us, deadline))
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

/* ------------------------------------------------------------ settling */

/* SB002 for token on the queue (or sub-queue) named name */
static void
sbq_lock_lost_detail(const char *name, const pg_uuid_t *token, const char *detail)
{
	ereport(ERROR,
			(errcode(SBQ_ERRCODE_LOCK_LOST),
			 errmsg("message lock lost for lock token %s on queue \"%s\"",
					sbq_token_string(token), name),
			 errdetail_internal("%s", detail)));
}

static void
sbq_lock_lost(const SbqQueue *queue, const SbqAddress *addr, const pg_uuid_t *token)
{
	sbq_lock_lost_detail(addr->subqueue == SBQ_SUBQUEUE_DLQ ?
						 psprintf("%s%s", queue->name, SBQ_DLQ_SUFFIX) : queue->name,
						 token,
						 "The lock has expired, the message was already settled, or the token was not issued by this queue.");
}

/*
 * sbq_session_guard
 *		A message lock of a session queue lives under its session lock: SB002
 *		unless that is held now (and then it stays held until commit).
 */
static void
sbq_session_guard(const SbqQueue *queue, const SbqAddress *addr, const pg_uuid_t *token)
{
	if (queue->requires_session && addr->subqueue == SBQ_SUBQUEUE_MAIN &&
		!sbq_storage_session_guard(queue, token))
		sbq_lock_lost_detail(queue->name, token,
							 "The session lock it was taken under has expired or was released, the message was already settled, or the token was not issued by this queue.");
}

/*
 * sbq_settle_begin
 *		The checks every settlement shares: queue and token not NULL (the
 *		token a uuid, or its text when text_token), writes allowed, the queue
 *		exists and the caller may listen on it. Opens the storage section.
 */
static pg_uuid_t *
sbq_settle_begin(FunctionCallInfo fcinfo, const char *fname, bool text_token,
				 SbqAddress *addr, SbqQueue *queue)
{
	pg_uuid_t  *token;

	sbq_queue_address(fcinfo, true, addr);
	sbq_require_arg(fcinfo, 1, "lock_token");
	if (text_token)
		token = DatumGetUUIDP(DirectFunctionCall1(uuid_in,
												  CStringGetDatum(text_to_cstring(PG_GETARG_TEXT_PP(1)))));
	else
		token = PG_GETARG_UUID_P(1);
	PreventCommandIfReadOnly(fname);
	sbq_storage_begin();
	sbq_storage_get_queue(addr, queue, SBQ_RIGHT_LISTEN);
	sbq_session_guard(queue, addr, token);
	return token;
}

static Datum
sbq_complete_one(FunctionCallInfo fcinfo, bool text_token)
{
	SbqAddress	addr;
	SbqQueue	queue;
	pg_uuid_t  *token = sbq_settle_begin(fcinfo, "sbq_complete()", text_token, &addr, &queue);

	if (!sbq_storage_complete(&queue, addr.subqueue, token))
		sbq_lock_lost(&queue, &addr, token);
	sbq_storage_end();
	PG_RETURN_VOID();
}

/* sbq_complete(queue or its DLQ, lock_token): delete the message; its row lock (and lease). */
Datum
sbq_complete(PG_FUNCTION_ARGS)
{
	return sbq_complete_one(fcinfo, false);
}

/*
 * sbq_complete(queue or its DLQ, lock_token text): the same with the token
 * as text. An untyped literal or driver parameter would be ambiguous between
 * the uuid and the uuid[] form; with this one, PostgreSQL picks text for it.
 */
Datum
sbq_complete_text(PG_FUNCTION_ARGS)
{
	return sbq_complete_one(fcinfo, true);
}

static int
sbq_cmp_uuid(const void *a, const void *b)
{
	return memcmp(DatumGetUUIDP(*(const Datum *) a)->data,
				  DatumGetUUIDP(*(const Datum *) b)->data, UUID_LEN);
}

/*
 * sbq_complete_many
 *		(queue or its DLQ, lock_tokens[]): the row locks (and leases) of the
 *		messages.
 *
 *		Complete every token of the array, or none: the first token whose lock
 *		is not valid (or that appears twice) raises SB002, which undoes the
 *		others with the statement.
 */
Datum
sbq_complete_many(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;
	ArrayType  *arr;
	Datum	   *tokens;
	Datum	   *sorted;
	bool	   *nulls;
	bool	   *settled;
	int			ntokens;
	int			n;
	int			i;

	sbq_queue_address(fcinfo, true, &addr);
	sbq_require_arg(fcinfo, 1, "lock_tokens");
	arr = PG_GETARG_ARRAYTYPE_P(1);
	sbq_check_array_size(arr, "lock_tokens", SBQ_MAX_BATCH,
						 "At most " CppAsString2(SBQ_MAX_BATCH) " locks are settled at once.");
	deconstruct_array(arr, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR,
					  &tokens, &nulls, &ntokens);
	for (i = 0; i < ntokens; i++)
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("lock_tokens must not contain null elements"),
					 errdetail("Element %d is null.", sbq_array_subscript(arr, i))));
	PreventCommandIfReadOnly("sbq_complete()");

	sbq_storage_begin();
	sbq_storage_get_queue(&addr, &queue, SBQ_RIGHT_LISTEN);

	/* the same token twice: the second settlement of a lock is a lost lock */
	sorted = palloc(sizeof(Datum) * Max(ntokens, 1));
	memcpy(sorted, tokens, sizeof(Datum) * ntokens);
	qsort(sorted, ntokens, sizeof(Datum), sbq_cmp_uuid);
	for (i = 1; i < ntokens; i++)
		if (sbq_cmp_uuid(&sorted[i - 1], &sorted[i]) == 0)
			sbq_lock_lost_detail(queue.name, DatumGetUUIDP(sorted[i]),
								 "The lock token appears more than once in lock_tokens.");

	if (ntokens == 0)
	{
		sbq_storage_end();
		PG_RETURN_INT32(0);
	}

	if (queue.requires_session && addr.subqueue == SBQ_SUBQUEUE_MAIN)
	{
		i = sbq_storage_session_guard_many(&queue, tokens, ntokens);
		if (i >= 0)
			sbq_session_guard(&queue, &addr, DatumGetUUIDP(tokens[i]));
	}
	settled = palloc(sizeof(bool) * ntokens);
	n = sbq_storage_complete_many(&queue, addr.subqueue, tokens, ntokens, settled);
	if (n != ntokens)
		for (i = 0; i < ntokens; i++)
			if (!settled[i])
				sbq_lock_lost(&queue, &addr, DatumGetUUIDP(tokens[i]));
	sbq_storage_end();
	PG_RETURN_INT32(n);
}

/*
 * sbq_props_to_modify_arg
 *		The optional properties_to_modify argument: NULL, or a JSON object.
 */
static Jsonb *
sbq_props_to_modify_arg(FunctionCallInfo fcinfo, int argno)
{
	Jsonb	   *props;

	if (PG_ARGISNULL(argno))
		return NULL;
	props = PG_GETARG_JSONB_P(argno);
	sbq_check_json_object("properties_to_modify", props);
	return props;
}

/* sbq_abandon(queue or its DLQ, lock_token, properties_to_modify): its row lock (and lease). */
Datum
sbq_abandon(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;
	Jsonb	   *props = sbq_props_to_modify_arg(fcinfo, 2);
	pg_uuid_t  *token;

	token = sbq_settle_begin(fcinfo, "sbq_abandon()", false, &addr, &queue);
	if (!sbq_storage_release(&queue, addr.subqueue, token, -1, props))
		sbq_lock_lost(&queue, &addr, token);
	sbq_storage_end();
	PG_RETURN_VOID();
}

/* sbq_defer(queue or its DLQ, lock_token, properties_to_modify): its row lock (and lease). */
Datum
sbq_defer(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;
	Jsonb	   *props = sbq_props_to_modify_arg(fcinfo, 2);
	pg_uuid_t  *token = sbq_settle_begin(fcinfo, "sbq_defer()", false, &addr, &queue);

	if (!sbq_storage_release(&queue, addr.subqueue, token, SBQ_STATE_DEFERRED, props))
		sbq_lock_lost(&queue, &addr, token);
	sbq_storage_end();
	PG_RETURN_VOID();
}

/*
 * sbq_deadletter
 *		(queue, lock_token, reason, description, properties_to_modify): the
 *		message's row lock (and lease).
 *
 *		Move a locked message to the dead-letter sub-queue. A dead letter
 *		cannot be dead-lettered again (SB010, whatever its token).
 */
Datum
sbq_deadletter(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;
	text	   *reason = PG_ARGISNULL(2) ? NULL : PG_GETARG_TEXT_PP(2);
	text	   *description = PG_ARGISNULL(3) ? NULL : PG_GETARG_TEXT_PP(3);
	Jsonb	   *props = sbq_props_to_modify_arg(fcinfo, 4);
	pg_uuid_t  *token;

	sbq_check_text_length("reason", reason, SBQ_MAX_DEAD_LETTER_TEXT);
	sbq_check_text_length("error_description", description, SBQ_MAX_DEAD_LETTER_TEXT);
	sbq_queue_address(fcinfo, true, &addr);
	if (addr.subqueue == SBQ_SUBQUEUE_DLQ)
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_INVALID_OPERATION),
				 errmsg("cannot dead-letter a message of the dead-letter sub-queue of queue \"%s\"",
						addr.name),
				 errdetail("A dead letter stays in the dead-letter sub-queue until it is completed or resubmitted.")));
	token = sbq_settle_begin(fcinfo, "sbq_deadletter()", false, &addr, &queue);
	if (!sbq_storage_deadletter(&queue, token, reason, description, props))
		sbq_lock_lost(&queue, &addr, token);
	sbq_storage_end();
	PG_RETURN_VOID();
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

	sbq_queue_address(fcinfo, true, &addr);
	sbq_require_arg(fcinfo, 1, "sequence_number");
	seq = PG_GETARG_INT64(1);
	PreventCommandIfReadOnly("sbq_cancel_scheduled()");
	sbq_storage_begin();
	sbq_storage_get_queue(&addr, &queue, SBQ_RIGHT_SEND);
	/* a dead-letter sub-queue holds no scheduled messages */
	if (addr.subqueue == SBQ_SUBQUEUE_DLQ ||
		!sbq_storage_cancel_scheduled(&queue, seq))
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

	sbq_queue_address(fcinfo, true, &addr);
	if (!PG_ARGISNULL(1))
		seqs = sbq_seq_array_arg(fcinfo, 1, "sequence_numbers",
								 "At most " CppAsString2(SBQ_MAX_RECEIVE) " dead letters are resubmitted at once.",
								 &nseqs);
	PreventCommandIfReadOnly("sbq_resubmit()");
	sbq_storage_begin();
	sbq_storage_get_queue(&addr, &queue, SBQ_RIGHT_MANAGE);
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

/* sbq_renew(queue or its DLQ, lock_token): extend the lock; its lease, or its row lock. */
Datum
sbq_renew(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;
	TimestampTz locked_until;
	pg_uuid_t  *token = sbq_settle_begin(fcinfo, "sbq_renew()", false, &addr, &queue);

	if (queue.requires_session && addr.subqueue == SBQ_SUBQUEUE_MAIN)
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_INVALID_OPERATION),
				 errmsg("the lock of a message of queue \"%s\" cannot be renewed", queue.name),
				 errdetail("The message locks of a session live under its session lock."),
				 errhint("Renew the session lock with sbq_renew_session().")));
	if (!sbq_storage_renew(&queue, addr.subqueue, token, &locked_until))
		sbq_lock_lost(&queue, &addr, token);
	sbq_storage_end();
	PG_RETURN_TIMESTAMPTZ(locked_until);
}
