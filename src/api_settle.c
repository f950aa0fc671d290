/*-------------------------------------------------------------------------
 *
 * api_settle.c
 *	  The SQL-callable settlements of message locks: complete, abandon,
 *	  defer, dead-letter and renew, each for one token, for an array of
 *	  tokens (all or nothing), and for a token given as text; and sbq_settle,
 *	  which settles what it can of an array of tokens and reports each.
 *
 * The three forms of each settlement differ only in how the tokens arrive:
 *	uuid		one token;
 *	uuid[]		several, settled all or none: the first that is not valid
 *				raises SB002, whose error undoes the others with the
 *				statement (a token given twice is not valid the second time);
 *	text		what PostgreSQL picks for an untyped literal or an untyped
 *				driver parameter, which the uuid and uuid[] forms together
 *				would leave ambiguous (42725): one token, or several in array
 *				syntax ('{...}', as drivers send a list of strings), then
 *				settled as the uuid[] form settles them. It returns what the
 *				uuid form returns.
 * sbq_settle takes a uuid[] and the settlement by name. It raises nothing
 * for a token that is not valid: it reports "lock_lost" for it, and settles
 * the others. It completes them with sbq_storage_complete_each, which judges
 * every lock under its row lock before it deletes anything (the all-or-none
 * completion deletes first and leaves the undoing of what it should not
 * have deleted to its error); the abandon, defer, dead-letter and renew of a
 * token that is not valid change nothing (they lock its row at most), so
 * those run token by token.
 *
 * Argument errors, the caller's rights and the queue's state (a dead letter
 * cannot be dead-lettered, a session's message lock cannot be renewed on its
 * own) are errors of the whole call, before any token is settled.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/api_settle.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "distributed.h"
#include "storage.h"

PG_FUNCTION_INFO_V1(sbq_complete);
PG_FUNCTION_INFO_V1(sbq_complete_text);
PG_FUNCTION_INFO_V1(sbq_complete_many);
PG_FUNCTION_INFO_V1(sbq_abandon);
PG_FUNCTION_INFO_V1(sbq_abandon_text);
PG_FUNCTION_INFO_V1(sbq_abandon_many);
PG_FUNCTION_INFO_V1(sbq_defer);
PG_FUNCTION_INFO_V1(sbq_defer_text);
PG_FUNCTION_INFO_V1(sbq_defer_many);
PG_FUNCTION_INFO_V1(sbq_deadletter);
PG_FUNCTION_INFO_V1(sbq_deadletter_text);
PG_FUNCTION_INFO_V1(sbq_deadletter_many);
PG_FUNCTION_INFO_V1(sbq_renew);
PG_FUNCTION_INFO_V1(sbq_renew_text);
PG_FUNCTION_INFO_V1(sbq_renew_many);
PG_FUNCTION_INFO_V1(sbq_settle);

#define SBQ_MAX_DEAD_LETTER_TEXT	4096

/* the longest delay an abandon takes: a year */
#define SBQ_MAX_ABANDON_DELAY	(365 * USECS_PER_DAY)

/* The settlements, as sbq_settle names them. */
typedef enum SbqDisposition
{
	SBQ_DISP_COMPLETE,
	SBQ_DISP_ABANDON,
	SBQ_DISP_DEFER,
	SBQ_DISP_DEADLETTER,
	SBQ_DISP_RENEW
} SbqDisposition;

static const char *const sbq_disposition_names[] = {
	[SBQ_DISP_COMPLETE] = "complete",
	[SBQ_DISP_ABANDON] = "abandon",
	[SBQ_DISP_DEFER] = "defer",
	[SBQ_DISP_DEADLETTER] = "deadletter",
	[SBQ_DISP_RENEW] = "renew",
};

/* what sbq_settle reports for each SbqSettled */
static const char *const sbq_settled_names[] = {
	[SBQ_SETTLED_LOST] = "lock_lost",
	[SBQ_SETTLED_COMPLETED] = "completed",
	[SBQ_SETTLED_ABANDONED] = "abandoned",
	[SBQ_SETTLED_DEFERRED] = "deferred",
	[SBQ_SETTLED_DEAD_LETTERED] = "dead_lettered",
	[SBQ_SETTLED_EXPIRED] = "expired",
	[SBQ_SETTLED_RENEWED] = "renewed",
};

/* How the tokens of a call arrive. */
typedef enum SbqTokenForm
{
	SBQ_TOKEN_ONE,				/* uuid */
	SBQ_TOKEN_TEXT,				/* text: one, or several in array syntax */
	SBQ_TOKEN_MANY				/* uuid[] */
} SbqTokenForm;

/* One settlement call: what to do, with what, on which queue. */
typedef struct SbqSettleCall
{
	SbqDisposition disp;
	const char *fname;			/* for the read-only error: "sbq_abandon()" */
	Jsonb	   *props;			/* properties_to_modify, or NULL */
	text	   *reason;			/* dead-letter reason and description, or NULL */
	text	   *description;
	int64		delay_usecs;	/* an abandon's delay; 0: none, -1: the queue's */
	SbqAddress	addr;
	SbqQueue	queue;
	Datum	   *tokens;
	int			ntokens;
	bool		many;			/* several tokens (uuid[], or text in array syntax) */
} SbqSettleCall;

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
sbq_lock_lost(const SbqSettleCall *c, const pg_uuid_t *token)
{
	sbq_lock_lost_detail(c->addr.subqueue == SBQ_SUBQUEUE_DLQ ?
						 psprintf("%s%s", c->queue.name, SBQ_DLQ_SUFFIX) : c->queue.name,
						 token,
						 "The lock has expired, the message was already settled, or the token was not issued by this queue.");
}

/*
 * A message lock of a session queue lives under its session lock: whether
 * that is held now (and then it stays held until commit).
 */
static inline bool
sbq_session_held(const SbqSettleCall *c, const pg_uuid_t *token)
{
	return !c->queue.requires_session || c->addr.subqueue != SBQ_SUBQUEUE_MAIN ||
		sbq_storage_session_guard(&c->queue, token);
}

static void
sbq_session_lock_lost_of(const SbqSettleCall *c, const pg_uuid_t *token)
{
	sbq_lock_lost_detail(c->queue.name, token,
						 "The session lock it was taken under has expired or was released, the message was already settled, or the token was not issued by this queue.");
}

/*
 * sbq_tokens_of_array
 *		The elements of a uuid[] argument: one dimension, at most
 *		SBQ_MAX_BATCH, no NULL.
 */
static Datum *
sbq_tokens_of_array(ArrayType *arr, const char *argname, int *n)
{
	Datum	   *tokens;
	bool	   *nulls;
	int			i;

	sbq_check_array_size(arr, argname, SBQ_MAX_BATCH,
						 "At most " CppAsString2(SBQ_MAX_BATCH) " locks are settled at once.");
	deconstruct_array(arr, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR, &tokens, &nulls, n);
	for (i = 0; i < *n; i++)
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not contain null elements", argname),
					 errdetail("Element %d is null.", sbq_array_subscript(arr, i))));
	return tokens;
}

/*
 * sbq_tokens_arg
 *		The token argument (position 1) of a settlement in its form: a
 *		required value, as an array of uuid Datums.
 */
static void
sbq_tokens_arg(FunctionCallInfo fcinfo, SbqTokenForm form, SbqSettleCall *c)
{
	sbq_require_arg(fcinfo, 1, form == SBQ_TOKEN_MANY ? "lock_tokens" : "lock_token");
	c->many = false;
	if (form == SBQ_TOKEN_MANY)
	{
		c->tokens = sbq_tokens_of_array(PG_GETARG_ARRAYTYPE_P(1), "lock_tokens", &c->ntokens);
		c->many = true;
		return;
	}
	if (form == SBQ_TOKEN_TEXT)
	{
		char	   *s = text_to_cstring(PG_GETARG_TEXT_PP(1));
		char	   *p = s;

		while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
			p++;
		if (*p == '{' || *p == '[')
		{
			/* a list of tokens in array syntax (array_in takes dimensions too) */
			Datum		arr = OidInputFunctionCall(F_ARRAY_IN, s, UUIDOID, -1);

			c->tokens = sbq_tokens_of_array(DatumGetArrayTypeP(arr), "lock_token",
											&c->ntokens);
			c->many = true;
			return;
		}
		c->tokens = palloc(sizeof(Datum));
		c->tokens[0] = DirectFunctionCall1(uuid_in, CStringGetDatum(s));
		c->ntokens = 1;
		return;
	}
	c->tokens = palloc(sizeof(Datum));
	c->tokens[0] = UUIDPGetDatum(PG_GETARG_UUID_P(1));
	c->ntokens = 1;
}

/*
 * sbq_props_to_modify_arg
 *		The optional properties_to_modify argument: NULL, or a JSON object.
 */
static Jsonb *
sbq_props_to_modify_arg(FunctionCallInfo fcinfo, int argno)
{
	Jsonb	   *props;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	props = PG_GETARG_JSONB_P(argno);
	sbq_check_json_object("properties_to_modify", props);
	return props;
}

/*
 * The optional delay argument of an abandon: -1 when NULL (or absent, from
 * older SQL), for the queue's retry back-off, if any.
 */
static int64
sbq_delay_arg(FunctionCallInfo fcinfo, int argno)
{
	Interval	delay;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return -1;
	delay = *PG_GETARG_INTERVAL_P(argno);
	sbq_check_interval_range("delay", &delay, 0, SBQ_MAX_ABANDON_DELAY);
	return sbq_interval_usecs(&delay);
}

static text *
sbq_dead_letter_text_arg(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	text	   *t;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	t = PG_GETARG_TEXT_PP(argno);
	sbq_check_text_length(argname, t, SBQ_MAX_DEAD_LETTER_TEXT);
	return t;
}

/*
 * sbq_settle_open
 *		What every settlement does before its tokens: writes allowed, the
 *		storage section open, the queue there and the caller allowed to
 *		listen on it, and the queue's state fit for the settlement.
 */
static void
sbq_settle_open(SbqSettleCall *c)
{
	PreventCommandIfReadOnly(c->fname);
	sbq_storage_begin();
	sbq_storage_get_queue(&c->addr, &c->queue, SBQ_RIGHT_LISTEN);
	if (c->disp == SBQ_DISP_RENEW && c->queue.requires_session &&
		c->addr.subqueue == SBQ_SUBQUEUE_MAIN)
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_INVALID_OPERATION),
				 errmsg("the lock of a message of queue \"%s\" cannot be renewed", c->queue.name),
				 errdetail("The message locks of a session live under its session lock."),
				 errhint("Renew the session lock with sbq_renew_session().")));
	if (c->delay_usecs > 0 && c->queue.requires_session &&
		c->addr.subqueue == SBQ_SUBQUEUE_MAIN)
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_INVALID_OPERATION),
				 errmsg("a message of queue \"%s\" cannot be abandoned with a delay",
						c->queue.name),
				 errdetail("A session's messages are received in order; one held back would stop its session or lose its place.")));
}

/*
 * sbq_settle_one
 *		Settle one token as the call says; false when its lock is not valid.
 *		*done gets what became of the message, *until a renewed lock's expiry.
 */
static bool
sbq_settle_one(const SbqSettleCall *c, const pg_uuid_t *token, SbqSettled *done,
			   TimestampTz *until)
{
	*done = SBQ_SETTLED_LOST;
	switch (c->disp)
	{
		case SBQ_DISP_COMPLETE:
			if (!sbq_storage_complete(&c->queue, c->addr.subqueue, token))
				return false;
			*done = SBQ_SETTLED_COMPLETED;
			return true;
		case SBQ_DISP_ABANDON:
			return sbq_storage_release(&c->queue, c->addr.subqueue, token, -1, c->props,
									   c->delay_usecs, done);
		case SBQ_DISP_DEFER:
			return sbq_storage_release(&c->queue, c->addr.subqueue, token,
									   SBQ_STATE_DEFERRED, c->props, 0, done);
		case SBQ_DISP_DEADLETTER:
			if (!sbq_storage_deadletter(&c->queue, token, c->reason, c->description,
										c->props))
				return false;
			*done = SBQ_SETTLED_DEAD_LETTERED;
			return true;
		case SBQ_DISP_RENEW:
			if (!sbq_storage_renew(&c->queue, c->addr.subqueue, token, until))
				return false;
			*done = SBQ_SETTLED_RENEWED;
			return true;
	}
	return false;
}

static int
sbq_cmp_uuid(const void *a, const void *b)
{
	return memcmp(DatumGetUUIDP(*(const Datum *) a)->data,
				  DatumGetUUIDP(*(const Datum *) b)->data, UUID_LEN);
}

/*
 * sbq_settle_all
 *		Settle every token of the call, or raise SB002 for the first that is
 *		not valid (the error undoes the others). *until gets the earliest
 *		expiry of the renewed locks (0 when none). Returns the count.
 */
static int
sbq_settle_all(SbqSettleCall *c, TimestampTz *until)
{
	Datum	   *sorted;
	int			i;

	*until = 0;
	if (c->ntokens == 0)
		return 0;

	/* the same token twice: the second settlement of a lock is a lost lock */
	if (c->ntokens > 1)
	{
		sorted = palloc(sizeof(Datum) * c->ntokens);
		memcpy(sorted, c->tokens, sizeof(Datum) * c->ntokens);
		qsort(sorted, c->ntokens, sizeof(Datum), sbq_cmp_uuid);
		for (i = 1; i < c->ntokens; i++)
			if (sbq_cmp_uuid(&sorted[i - 1], &sorted[i]) == 0)
				sbq_lock_lost_detail(c->queue.name, DatumGetUUIDP(sorted[i]),
									 "The lock token appears more than once in lock_tokens.");
		pfree(sorted);
	}

	if (c->queue.requires_session && c->addr.subqueue == SBQ_SUBQUEUE_MAIN)
	{
		i = sbq_storage_session_guard_many(&c->queue, c->tokens, c->ntokens);
		if (i >= 0)
			sbq_session_lock_lost_of(c, DatumGetUUIDP(c->tokens[i]));
	}

	if (c->disp == SBQ_DISP_COMPLETE && c->ntokens > 1)
	{
		bool	   *settled = palloc(sizeof(bool) * c->ntokens);
		int			n = sbq_storage_complete_many(&c->queue, c->addr.subqueue,
												  c->tokens, c->ntokens, settled);

		if (n != c->ntokens)
			for (i = 0; i < c->ntokens; i++)
				if (!settled[i])
					sbq_lock_lost(c, DatumGetUUIDP(c->tokens[i]));
		return n;
	}

	for (i = 0; i < c->ntokens; i++)
	{
		pg_uuid_t  *token = DatumGetUUIDP(c->tokens[i]);
		SbqSettled	done;
		TimestampTz t = 0;

		CHECK_FOR_INTERRUPTS();

		if (!sbq_settle_one(c, token, &done, &t))
			sbq_lock_lost(c, token);
		if (c->disp == SBQ_DISP_RENEW && (*until == 0 || t < *until))
			*until = t;
	}
	return c->ntokens;
}

/*
 * sbq_settle_call
 *		A settlement in one of its three forms, once its own arguments are
 *		in c: the tokens, the queue, every token settled (or SB002).
 */
static Datum
sbq_settle_call(FunctionCallInfo fcinfo, SbqTokenForm form, SbqSettleCall *c)
{
	TimestampTz until;
	int			n;

	sbq_tokens_arg(fcinfo, form, c);
	sbq_settle_open(c);
	n = sbq_settle_all(c, &until);
	sbq_storage_end();

	if (c->disp == SBQ_DISP_RENEW)
	{
		if (until == 0)
			PG_RETURN_NULL();	/* an empty array */
		PG_RETURN_TIMESTAMPTZ(until);
	}
	if (form == SBQ_TOKEN_MANY)
		PG_RETURN_INT32(n);
	PG_RETURN_VOID();
}

/* The queue argument and the settlement: the start of every call. */
static void
sbq_settle_init(FunctionCallInfo fcinfo, SbqDisposition disp, const char *fname,
				SbqSettleCall *c)
{
	memset(c, 0, sizeof(SbqSettleCall));
	c->disp = disp;
	c->fname = fname;
	sbq_queue_address(fcinfo, true, &c->addr);
	if (disp == SBQ_DISP_DEADLETTER && c->addr.subqueue == SBQ_SUBQUEUE_DLQ)
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_INVALID_OPERATION),
				 errmsg("cannot dead-letter a message of the dead-letter sub-queue of queue \"%s\"",
						c->addr.name),
				 errdetail("A dead letter stays in the dead-letter sub-queue until it is completed or resubmitted.")));
}

/* -------------------------------------------------------- the settlements */

static Datum
sbq_complete_form(FunctionCallInfo fcinfo, SbqTokenForm form)
{
	SbqSettleCall c;

	sbq_settle_init(fcinfo, SBQ_DISP_COMPLETE, "sbq_complete()", &c);
	return sbq_settle_call(fcinfo, form, &c);
}

/* sbq_complete(queue or its DLQ, lock_token): delete the message; its row lock (and lease). */
Datum
sbq_complete(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_complete_form(fcinfo, SBQ_TOKEN_ONE);
}

/* sbq_complete(queue or its DLQ, lock_token text): one token, or several in array syntax. */
Datum
sbq_complete_text(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_complete_form(fcinfo, SBQ_TOKEN_TEXT);
}

/* sbq_complete(queue or its DLQ, lock_tokens[]): all or none; the row locks (and leases). */
Datum
sbq_complete_many(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_complete_form(fcinfo, SBQ_TOKEN_MANY);
}

/* (queue, token(s), properties_to_modify, delay): from 0.9 on; older SQL passes no delay */
static Datum
sbq_abandon_form(FunctionCallInfo fcinfo, SbqTokenForm form)
{
	SbqSettleCall c;
	Jsonb	   *props = sbq_props_to_modify_arg(fcinfo, 2);
	int64		delay_usecs = sbq_delay_arg(fcinfo, 3);

	sbq_settle_init(fcinfo, SBQ_DISP_ABANDON, "sbq_abandon()", &c);
	c.props = props;
	c.delay_usecs = delay_usecs;
	return sbq_settle_call(fcinfo, form, &c);
}

/* sbq_abandon(queue or its DLQ, lock_token, properties_to_modify, delay): its row lock (and lease). */
Datum
sbq_abandon(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_abandon_form(fcinfo, SBQ_TOKEN_ONE);
}

/* sbq_abandon(queue or its DLQ, lock_token text, ...): one token, or several in array syntax. */
Datum
sbq_abandon_text(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_abandon_form(fcinfo, SBQ_TOKEN_TEXT);
}

/* sbq_abandon(queue or its DLQ, lock_tokens[], ...): all or none; their row locks (and leases). */
Datum
sbq_abandon_many(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_abandon_form(fcinfo, SBQ_TOKEN_MANY);
}

static Datum
sbq_defer_form(FunctionCallInfo fcinfo, SbqTokenForm form)
{
	SbqSettleCall c;
	Jsonb	   *props = sbq_props_to_modify_arg(fcinfo, 2);

	sbq_settle_init(fcinfo, SBQ_DISP_DEFER, "sbq_defer()", &c);
	c.props = props;
	return sbq_settle_call(fcinfo, form, &c);
}

/* sbq_defer(queue or its DLQ, lock_token, properties_to_modify): its row lock (and lease). */
Datum
sbq_defer(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_defer_form(fcinfo, SBQ_TOKEN_ONE);
}

/* sbq_defer(queue or its DLQ, lock_token text, ...): one token, or several in array syntax. */
Datum
sbq_defer_text(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_defer_form(fcinfo, SBQ_TOKEN_TEXT);
}

/* sbq_defer(queue or its DLQ, lock_tokens[], ...): all or none; their row locks (and leases). */
Datum
sbq_defer_many(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_defer_form(fcinfo, SBQ_TOKEN_MANY);
}

/*
 * (queue, token(s), reason, description, properties_to_modify): move locked
 * messages to the dead-letter sub-queue. A dead letter cannot be
 * dead-lettered again (SB010, whatever its token).
 */
static Datum
sbq_deadletter_form(FunctionCallInfo fcinfo, SbqTokenForm form)
{
	SbqSettleCall c;
	text	   *reason = sbq_dead_letter_text_arg(fcinfo, 2, "reason");
	text	   *description = sbq_dead_letter_text_arg(fcinfo, 3, "error_description");
	Jsonb	   *props = sbq_props_to_modify_arg(fcinfo, 4);

	sbq_settle_init(fcinfo, SBQ_DISP_DEADLETTER, "sbq_deadletter()", &c);
	c.reason = reason;
	c.description = description;
	c.props = props;
	return sbq_settle_call(fcinfo, form, &c);
}

/* sbq_deadletter(queue, lock_token, reason, description, properties_to_modify): its row lock (and lease). */
Datum
sbq_deadletter(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_deadletter_form(fcinfo, SBQ_TOKEN_ONE);
}

/* sbq_deadletter(queue, lock_token text, ...): one token, or several in array syntax. */
Datum
sbq_deadletter_text(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_deadletter_form(fcinfo, SBQ_TOKEN_TEXT);
}

/* sbq_deadletter(queue, lock_tokens[], ...): all or none; their row locks (and leases). */
Datum
sbq_deadletter_many(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_deadletter_form(fcinfo, SBQ_TOKEN_MANY);
}

static Datum
sbq_renew_form(FunctionCallInfo fcinfo, SbqTokenForm form)
{
	SbqSettleCall c;

	sbq_settle_init(fcinfo, SBQ_DISP_RENEW, "sbq_renew()", &c);
	return sbq_settle_call(fcinfo, form, &c);
}

/* sbq_renew(queue or its DLQ, lock_token): extend the lock; its lease, or its row lock. */
Datum
sbq_renew(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_renew_form(fcinfo, SBQ_TOKEN_ONE);
}

/* sbq_renew(queue or its DLQ, lock_token text): one token, or several in array syntax. */
Datum
sbq_renew_text(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_renew_form(fcinfo, SBQ_TOKEN_TEXT);
}

/* sbq_renew(queue or its DLQ, lock_tokens[]): all or none; the earliest new expiry. */
Datum
sbq_renew_many(PG_FUNCTION_ARGS)
{
	SBQ_ROUTE(fcinfo);
	return sbq_renew_form(fcinfo, SBQ_TOKEN_MANY);
}

/* ------------------------------------------------------------ sbq_settle */

/*
 * sbq_settle_disposition_arg
 *		sbq_settle's disposition, and the optional arguments that apply to
 *		it: one given to a settlement it does not apply to is 22023.
 */
static SbqDisposition
sbq_settle_disposition_arg(FunctionCallInfo fcinfo)
{
	char	   *name;
	int			d;
	static const struct
	{
		int			argno;
		const char *argname;
		uint8		applies;	/* a bit per SbqDisposition */
	}			opts[] = {
		{3, "reason", 1 << SBQ_DISP_DEADLETTER},
		{4, "error_description", 1 << SBQ_DISP_DEADLETTER},
		{5, "properties_to_modify",
		(1 << SBQ_DISP_ABANDON) | (1 << SBQ_DISP_DEFER) | (1 << SBQ_DISP_DEADLETTER)},
		{6, "delay", 1 << SBQ_DISP_ABANDON},
	};

	sbq_require_arg(fcinfo, 2, "disposition");
	name = text_to_cstring(PG_GETARG_TEXT_PP(2));
	for (d = 0; d < (int) lengthof(sbq_disposition_names); d++)
		if (strcmp(name, sbq_disposition_names[d]) == 0)
			break;
	if (d == (int) lengthof(sbq_disposition_names))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid disposition \"%s\"", name),
				 errhint("Use 'complete', 'abandon', 'defer', 'deadletter' or 'renew'.")));
	for (int i = 0; i < (int) lengthof(opts); i++)
		if (!PG_ARGISNULL(opts[i].argno) && (opts[i].applies & (1 << d)) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s does not apply to disposition \"%s\"", opts[i].argname, name)));
	return (SbqDisposition) d;
}

/*
 * sbq_settle_places
 *		try[i]: whether sbq_settle settles the token at place i: each token
 *		once, at its first place (a later place reports lock_lost), and on a
 *		queue with sessions only under its session's lock.
 */
static void
sbq_settle_places(const SbqSettleCall *c, bool *try)
{
	Datum	   *sorted;
	int			i;

	for (i = 0; i < c->ntokens; i++)
		try[i] = true;
	if (c->ntokens > 1)
	{
		sorted = palloc(sizeof(Datum) * c->ntokens);
		memcpy(sorted, c->tokens, sizeof(Datum) * c->ntokens);
		qsort(sorted, c->ntokens, sizeof(Datum), sbq_cmp_uuid);
		for (i = 1; i < c->ntokens; i++)
		{
			int			j;
			bool		first = true;

			if (sbq_cmp_uuid(&sorted[i - 1], &sorted[i]) != 0)
				continue;
			/* a repeated token: every place after its first */
			for (j = 0; j < c->ntokens; j++)
				if (sbq_cmp_uuid(&c->tokens[j], &sorted[i]) == 0)
				{
					if (!first)
						try[j] = false;
					first = false;
				}
		}
	}
	for (i = 0; i < c->ntokens; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (try[i] && !sbq_session_held(c, DatumGetUUIDP(c->tokens[i])))
			try[i] = false;
	}
}

/*
 * sbq_settle_each
 *		Settle what can be settled of the call's tokens: done[i] what became
 *		of place i's message (SBQ_SETTLED_LOST as it comes in), until[i] a
 *		renewed lock's expiry.
 */
static void
sbq_settle_each(const SbqSettleCall *c, SbqSettled *done, TimestampTz *until)
{
	bool	   *try = palloc(sizeof(bool) * Max(c->ntokens, 1));
	int			i;

	sbq_settle_places(c, try);
	if (c->disp == SBQ_DISP_COMPLETE)
	{
		Datum	   *tokens = palloc(sizeof(Datum) * Max(c->ntokens, 1));
		int		   *place = palloc(sizeof(int) * Max(c->ntokens, 1));
		bool	   *settled = palloc(sizeof(bool) * Max(c->ntokens, 1));
		int			n = 0;

		for (i = 0; i < c->ntokens; i++)
			if (try[i])
			{
				place[n] = i;
				tokens[n++] = c->tokens[i];
			}
		if (n > 0)
			(void) sbq_storage_complete_each(&c->queue, c->addr.subqueue, tokens, n, settled);
		for (i = 0; i < n; i++)
			if (settled[i])
				done[place[i]] = SBQ_SETTLED_COMPLETED;
		return;
	}
	for (i = 0; i < c->ntokens; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (try[i])
			(void) sbq_settle_one(c, DatumGetUUIDP(c->tokens[i]), &done[i], &until[i]);
	}
}

/*
 * sbq_settle
 *		(queue or its DLQ, lock_tokens[], disposition, reason,
 *		error_description, properties_to_modify, delay): the row locks (and
 *		leases) of the messages whose tokens are valid.
 *
 *		Settle each valid token, once, and return a row per element of
 *		lock_tokens, in order: the token, what became of its message (or
 *		lock_lost), and a renewed lock's new expiry.
 */
Datum
sbq_settle(PG_FUNCTION_ARGS)
{
	SbqSettleCall c;
	SbqDisposition disp;
	static const char *const fnames[] = {
		[SBQ_DISP_COMPLETE] = "sbq_settle(complete)",
		[SBQ_DISP_ABANDON] = "sbq_settle(abandon)",
		[SBQ_DISP_DEFER] = "sbq_settle(defer)",
		[SBQ_DISP_DEADLETTER] = "sbq_settle(deadletter)",
		[SBQ_DISP_RENEW] = "sbq_settle(renew)",
	};
	SbqSettled *done;
	TimestampTz *until;
	TupleDesc	tupdesc;
	Tuplestorestate *tupstore;
	int			i;

	SBQ_ROUTE(fcinfo);
	disp = sbq_settle_disposition_arg(fcinfo);
	sbq_settle_init(fcinfo, disp, fnames[disp], &c);
	c.reason = sbq_dead_letter_text_arg(fcinfo, 3, "reason");
	c.description = sbq_dead_letter_text_arg(fcinfo, 4, "error_description");
	c.props = sbq_props_to_modify_arg(fcinfo, 5);
	c.delay_usecs = sbq_delay_arg(fcinfo, 6);
	sbq_tokens_arg(fcinfo, SBQ_TOKEN_MANY, &c);
	tupstore = sbq_init_srf(fcinfo, &tupdesc);
	/* read after the section: made before it, outside the memory it frees */
	done = palloc0(sizeof(SbqSettled) * Max(c.ntokens, 1));
	until = palloc0(sizeof(TimestampTz) * Max(c.ntokens, 1));

	sbq_settle_open(&c);
	sbq_settle_each(&c, done, until);
	sbq_storage_end();

	for (i = 0; i < c.ntokens; i++)
	{
		Datum		values[3];
		bool		nulls[3] = {false, false, true};

		values[0] = c.tokens[i];
		values[1] = CStringGetTextDatum(sbq_settled_names[done[i]]);
		if (done[i] == SBQ_SETTLED_RENEWED)
		{
			values[2] = TimestampTzGetDatum(until[i]);
			nulls[2] = false;
		}
		tuplestore_putvalues(tupstore, tupdesc, values, nulls);
	}
	return (Datum) 0;
}
