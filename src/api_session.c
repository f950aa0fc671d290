/*-------------------------------------------------------------------------
 *
 * api_session.c
 *	  The SQL-callable functions of sessions: accept, receive, receive of
 *	  deferred messages, renew, state, release, list.
 *
 * Each checks its arguments, opens a storage section, looks the queue up
 * with the caller's listen right, and calls session.c. A session token is
 * judged there; a lost one is SB004 here.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/api_session.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/int.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "distributed.h"
#include "shmem.h"
#include "storage.h"
#include "wait.h"

PG_FUNCTION_INFO_V1(sbq_accept_session);
PG_FUNCTION_INFO_V1(sbq_receive_session);
PG_FUNCTION_INFO_V1(sbq_receive_deferred_session);
PG_FUNCTION_INFO_V1(sbq_renew_session);
PG_FUNCTION_INFO_V1(sbq_get_session_state);
PG_FUNCTION_INFO_V1(sbq_set_session_state);
PG_FUNCTION_INFO_V1(sbq_release_session);
PG_FUNCTION_INFO_V1(sbq_list_sessions);
PG_FUNCTION_INFO_V1(sbq_session_boot_sql);

/* SB010 for a session call on a queue without sessions */
static void
sbq_require_sessions(const SbqQueue *queue)
{
	if (!queue->requires_session)
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_INVALID_OPERATION),
				 errmsg("queue \"%s\" does not require sessions", queue->name),
				 errdetail("Sessions exist only on queues created with requires_session."),
				 errhint("Receive with sbq_receive().")));
}

/*
 * sbq_session_call_begin
 *		What every session call shares: the queue (never a dead-letter
 *		sub-queue: it is received without sessions), writes allowed when
 *		fname is set, the storage section open, the queue looked up with the
 *		caller's listen right and checked to require sessions. A call that
 *		stores a session's state (stores) holds the queue name's lock in
 *		share mode first, as a send does (a subscription's with its
 *		topic's): a delete of the queue that committed while it ran would
 *		leave the state lost, the call reporting success.
 */
static void
sbq_session_call_begin(FunctionCallInfo fcinfo, const char *fname, bool stores,
					   SbqAddress *addr, SbqQueue *queue)
{
	sbq_queue_address(fcinfo, true, addr);
	if (fname != NULL)
		PreventCommandIfReadOnly(fname);
	if (stores)
		sbq_lock_entity_name(addr->key, AccessShareLock);
	sbq_storage_begin();
	if (stores)
		sbq_storage_get_queue_held(addr, queue, SBQ_RIGHT_LISTEN);
	else
		sbq_storage_get_queue(addr, queue, SBQ_RIGHT_LISTEN);
	if (addr->subqueue == SBQ_SUBQUEUE_DLQ)
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_INVALID_OPERATION),
				 errmsg("the dead-letter sub-queue of queue \"%s\" has no sessions",
						queue->name),
				 errhint("Receive from it with sbq_receive().")));
	sbq_require_sessions(queue);
}

/* SB004 for a session token */
void
sbq_session_lock_lost(const SbqQueue *queue, const pg_uuid_t *token)
{
	ereport(ERROR,
			(errcode(SBQ_ERRCODE_SESSION_LOCK_LOST),
			 errmsg("session lock lost for session token %s on queue \"%s\"",
					sbq_token_string(token), queue->name),
			 errdetail("The session lock has expired or was released, or the token was not issued by this queue."),
			 errhint("Accept the session again.")));
}

/* The session token argument (argno), which must not be NULL. */
static pg_uuid_t *
sbq_session_token_arg(FunctionCallInfo fcinfo, int argno)
{
	sbq_require_arg(fcinfo, argno, "session_token");
	return PG_GETARG_UUID_P(argno);
}

/*
 * sbq_accept_session
 *		(queue, session_id or NULL for the next, max_wait): lock a session.
 *		A named session is accepted at once or is SB005; the next one is
 *		waited for up to max_wait, and none found returns no row.
 */
Datum
sbq_accept_session(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;
	text	   *session_id = NULL;
	int64		wait_us;
	TimestampTz deadline;
	TupleDesc	tupdesc;
	Tuplestorestate *tupstore;
	SbqSessionLock lock;
	SbqAcceptResult r;
	bool		looked = false;

	SBQ_ROUTE(fcinfo);
	if (!PG_ARGISNULL(1))
	{
		session_id = PG_GETARG_TEXT_PP(1);
		if (VARSIZE_ANY_EXHDR(session_id) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("session_id must not be empty"),
					 errhint("Pass NULL to accept the next session with available messages.")));
		sbq_check_id_length("session_id", session_id);
	}
	wait_us = sbq_max_wait_arg(fcinfo, 2, &deadline);
	tupstore = sbq_init_srf(fcinfo, &tupdesc);
	sbq_session_call_begin(fcinfo, "sbq_accept_session()", false, &addr, &queue);
	for (;;)
	{
		/*
		 * Each try holds the name in share mode, as a send does (a
		 * subscription's with its topic's), and gives it back before a wait:
		 * a delete of the queue that committed under a try would leave the
		 * session's row of no queue behind, the call reporting success; one
		 * waiting for the name would hold up every send until the wait ran
		 * out.
		 */
		sbq_storage_end();
		sbq_lock_entity_name(addr.key, AccessShareLock);
		sbq_storage_begin();
		if (looked)
			sbq_storage_recheck_queue(&addr, &queue, SBQ_RIGHT_LISTEN);
		else
			sbq_storage_get_queue_held(&addr, &queue, SBQ_RIGHT_LISTEN);
		sbq_require_sessions(&queue);
		looked = true;
		if (wait_us > 0 && session_id == NULL)
			sbq_wait_prepare(queue.queue_id);
		r = sbq_storage_accept_session(&queue, session_id, &lock);
		if (r != SBQ_ACCEPT_NONE)
			break;
		sbq_unlock_entity_name(addr.key, AccessShareLock);
		if (!sbq_wait_more(wait_us, deadline))
			break;
	}
	if (wait_us > 0 && session_id == NULL)
		sbq_wait_cancel();
	if (r == SBQ_ACCEPT_HELD)
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_SESSION_LOCKED),
				 errmsg("session \"%s\" of queue \"%s\" cannot be locked",
						text_to_cstring(session_id), queue.name),
				 errdetail("Another receiver holds its lock."),
				 errhint("Once the lock expires or is released, the session can be accepted.")));
	if (r == SBQ_ACCEPT_OK)
	{
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		values[0] = CStringGetTextDatum(lock.session_id);
		values[1] = UUIDPGetDatum(&lock.token);
		values[2] = TimestampTzGetDatum(lock.locked_until);
		tuplestore_putvalues(tupstore, tupdesc, values, nulls);
	}
	sbq_storage_end();
	return (Datum) 0;
}

/*
 * sbq_receive_session
 *		(queue, session_token, max_messages, max_wait): the session's
 *		messages in sequence order, locked under its lock. Waits up to
 *		max_wait for one, judging the session lock again after each sleep.
 */
Datum
sbq_receive_session(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;
	pg_uuid_t  *token;
	int			max_messages;
	int64		wait_us;
	TimestampTz deadline;
	TupleDesc	tupdesc;
	Tuplestorestate *tupstore;
	bool		looked = false;

	SBQ_ROUTE(fcinfo);
	token = sbq_session_token_arg(fcinfo, 1);
	max_messages = sbq_max_messages_arg(fcinfo, 2);
	wait_us = sbq_max_wait_arg(fcinfo, 3, &deadline);
	tupstore = sbq_init_srf(fcinfo, &tupdesc);
	sbq_session_call_begin(fcinfo, "sbq_receive_session()", false, &addr, &queue);
	for (;;)
	{
		SbqSessionLock lock;
		SbqReceiveResult r;

		if (looked)
		{
			/* made again meanwhile, maybe without sessions: as a new call */
			sbq_storage_recheck_queue(&addr, &queue, SBQ_RIGHT_LISTEN);
			sbq_require_sessions(&queue);
		}
		looked = true;
		if (wait_us > 0)
			sbq_wait_prepare(queue.queue_id);
		if (!sbq_storage_session_held(&queue, token, &lock))
			sbq_session_lock_lost(&queue, token);
		r = sbq_storage_receive_session(&queue, &lock, max_messages, tupstore, tupdesc);
		if (r.delivered > 0 || !sbq_poll_again(wait_us, deadline))
			break;
	}
	if (wait_us > 0)
		sbq_wait_cancel();
	sbq_storage_end();
	return (Datum) 0;
}

/*
 * sbq_receive_deferred_session
 *		(queue, sequence_numbers, session_token): the session's deferred
 *		messages by sequence number, for its holder; all or none (SB003).
 */
Datum
sbq_receive_deferred_session(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;
	pg_uuid_t  *token;
	Datum	   *seqs;
	int			nseqs;
	int64		missing = 0;
	TupleDesc	tupdesc;
	Tuplestorestate *tupstore;
	SbqSessionLock lock;

	SBQ_ROUTE(fcinfo);
	sbq_require_arg(fcinfo, 1, "sequence_numbers");
	seqs = sbq_seq_array_arg(fcinfo, 1, "sequence_numbers",
							 "At most " CppAsString2(SBQ_MAX_RECEIVE) " messages are received at once.",
							 &nseqs);
	token = sbq_session_token_arg(fcinfo, 2);
	tupstore = sbq_init_srf(fcinfo, &tupdesc);
	sbq_session_call_begin(fcinfo, "sbq_receive_deferred()", false, &addr, &queue);
	if (!sbq_storage_session_held(&queue, token, &lock))
		sbq_session_lock_lost(&queue, token);
	if (nseqs > 0 &&
		!sbq_storage_receive_deferred_session(&queue, &lock, seqs, nseqs, tupstore, tupdesc,
											  &missing))
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_MESSAGE_NOT_FOUND),
				 errmsg("deferred message " INT64_FORMAT " not found in session \"%s\" of queue \"%s\"",
						missing, lock.session_id, queue.name),
				 errdetail("It is not a deferred message of this session, or it is locked.")));
	sbq_storage_end();
	return (Datum) 0;
}

/* sbq_renew_session(queue, session_token): the new locked_until */
Datum
sbq_renew_session(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;
	pg_uuid_t  *token = sbq_session_token_arg(fcinfo, 1);
	TimestampTz until;

	SBQ_ROUTE(fcinfo);
	sbq_session_call_begin(fcinfo, "sbq_renew_session()", false, &addr, &queue);
	if (!sbq_storage_renew_session(&queue, token, &until))
		sbq_session_lock_lost(&queue, token);
	sbq_storage_end();
	PG_RETURN_TIMESTAMPTZ(until);
}

/* sbq_get_session_state(queue, session_token): the state, NULL when none */
Datum
sbq_get_session_state(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;
	pg_uuid_t  *token = sbq_session_token_arg(fcinfo, 1);
	bytea	   *state = NULL;

	SBQ_ROUTE(fcinfo);
	/* it locks the session row: not in a read-only transaction */
	sbq_session_call_begin(fcinfo, "sbq_get_session_state()", false, &addr, &queue);
	if (!sbq_storage_session_state(&queue, token, false, &state))
		sbq_session_lock_lost(&queue, token);
	sbq_storage_end();
	if (state == NULL)
		PG_RETURN_NULL();
	PG_RETURN_BYTEA_P(state);
}

/*
 * sbq_set_session_state(queue, session_token, state): NULL clears it; at
 * most the queue's max_message_size bytes (SB007).
 */
Datum
sbq_set_session_state(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;
	pg_uuid_t  *token = sbq_session_token_arg(fcinfo, 1);
	bytea	   *state = PG_ARGISNULL(2) ? NULL : PG_GETARG_BYTEA_PP(2);

	SBQ_ROUTE(fcinfo);
	sbq_session_call_begin(fcinfo, "sbq_set_session_state()", true, &addr, &queue);
	if (state != NULL && VARSIZE_ANY_EXHDR(state) > (Size) queue.max_message_size)
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_MESSAGE_TOO_LARGE),
				 errmsg("session state of %zu bytes is too large for queue \"%s\"",
						VARSIZE_ANY_EXHDR(state), queue.name),
				 errdetail("A session state has at most max_message_size (%d) bytes.",
						   queue.max_message_size)));
	if (state != NULL)
		state = PG_DETOAST_DATUM_COPY(PG_GETARG_DATUM(2));
	if (!sbq_storage_session_state(&queue, token, true, &state))
		sbq_session_lock_lost(&queue, token);
	sbq_storage_end();
	PG_RETURN_VOID();
}

/* sbq_release_session(queue, session_token): its message locks go, uncounted */
Datum
sbq_release_session(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;
	pg_uuid_t  *token = sbq_session_token_arg(fcinfo, 1);

	SBQ_ROUTE(fcinfo);
	sbq_session_call_begin(fcinfo, "sbq_release_session()", false, &addr, &queue);
	if (!sbq_storage_release_session(&queue, token))
		sbq_session_lock_lost(&queue, token);
	sbq_storage_end();
	PG_RETURN_VOID();
}

/* sbq_list_sessions(queue): the sessions that exist, by session id */
Datum
sbq_list_sessions(PG_FUNCTION_ARGS)
{
	SbqAddress	addr;
	SbqQueue	queue;
	TupleDesc	tupdesc;
	Tuplestorestate *tupstore = sbq_init_srf(fcinfo, &tupdesc);

	SBQ_ROUTE(fcinfo);
	sbq_session_call_begin(fcinfo, NULL, false, &addr, &queue);
	sbq_storage_list_sessions(&queue, tupstore, tupdesc);
	sbq_storage_end();
	return (Datum) 0;
}

/* sbq.session_boot(): what session locks are stamped with (shmem.c) */
Datum
sbq_session_boot_sql(PG_FUNCTION_ARGS)
{
	PG_RETURN_TIMESTAMPTZ(sbq_shmem_boot());
}
