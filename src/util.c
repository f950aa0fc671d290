/*-------------------------------------------------------------------------
 *
 * util.c
 *	  Argument checks and small helpers shared by the SQL-callable functions:
 *	  queue names and addresses, durations, lock tokens, JSON objects, the
 *	  set-returning function setup, the per-name lock of queue management,
 *	  times, and the array arguments of the storage statements.
 *
 * Owns nothing. Locks: sbq_lock_queue_name takes a transaction-level
 * advisory lock on a queue name (its own field4, so it never meets an
 * application's pg_advisory_lock); nothing else here locks.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/util.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "common/hashfn.h"
#include "common/int.h"
#include "mb/pg_wchar.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "compat.h"
#include "lease.h"
#include "sbqueue.h"
#include "storage_core.h"
#include "topics.h"

PG_FUNCTION_INFO_V1(sbq_new_lock_token);

static bool
sbq_name_char_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		(c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_' || c == '/';
}

static bool
sbq_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static void
sbq_bad_queue_name(text *queue, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid queue name \"%s\"", text_to_cstring(queue)),
			 errdetail_internal("%s", detail)));
}

/*
 * sbq_parse_address
 *		Check a queue name and split off a "/$deadletterqueue" suffix (any
 *		letter case) when allow_dlq says the call takes one.
 *
 * A queue name is 1-260 characters of A-Z a-z 0-9 . - _ /, starting and ending
 * with a letter or digit. Anything else is 22023; NULL is the caller's check.
 */
/*
 * sbq_name_key
 *		The key a name is looked up and locked by: its lower-case form
 *		(names compare case-insensitively), made in cxt.
 */
char *
sbq_name_key(MemoryContext cxt, const char *name)
{
	char	   *key = MemoryContextStrdup(cxt, name);
	char	   *c;

	for (c = key; *c; c++)
		*c = pg_ascii_tolower((unsigned char) *c);
	return key;
}

/*
 * The longest address a name of len characters may be: a queue name has at
 * most SBQ_MAX_NAME_LEN, and so has the topic's part of a subscription's
 * address, which adds "/subscriptions/" and a name of at most 50.
 */
static size_t
sbq_max_address_len(const char *name, size_t len)
{
	const char *seg = NULL;
	const char *p;
	size_t		seglen = strlen(SBQ_SUBSCRIPTIONS_SEGMENT);

	for (p = name; p + seglen <= name + len; p++)
		if (pg_strncasecmp(p, SBQ_SUBSCRIPTIONS_SEGMENT, seglen) == 0)
			seg = p;
	if (seg == NULL || seg - name > SBQ_MAX_NAME_LEN)
		return SBQ_MAX_NAME_LEN;
	return (seg - name) + seglen + SBQ_MAX_SUBSCRIPTION_NAME_LEN;
}

void
sbq_parse_address(text *queue, bool allow_dlq, SbqAddress *addr)
{
	char	   *full = text_to_cstring(queue);
	size_t		len = strlen(full);
	size_t		suffix_len = strlen(SBQ_DLQ_SUFFIX);
	size_t		i;

	addr->subqueue = SBQ_SUBQUEUE_MAIN;
	if (allow_dlq && len > suffix_len &&
		pg_strcasecmp(full + len - suffix_len, SBQ_DLQ_SUFFIX) == 0)
	{
		addr->subqueue = SBQ_SUBQUEUE_DLQ;
		len -= suffix_len;
		full[len] = '\0';
	}

	if (len == 0 || len > sbq_max_address_len(full, len))
		sbq_bad_queue_name(queue, psprintf("A queue name has 1 to %d characters.",
										   SBQ_MAX_NAME_LEN));
	for (i = 0; i < len; i++)
		if (!sbq_name_char_ok(full[i]))
			sbq_bad_queue_name(queue, "A queue name may contain only letters, digits, periods, hyphens, underscores and slashes.");
	if (!sbq_alnum(full[0]) || !sbq_alnum(full[len - 1]))
		sbq_bad_queue_name(queue, "A queue name starts and ends with a letter or digit.");

	addr->name = full;
	addr->key = sbq_name_key(CurrentMemoryContext, full);
}

/*
 * sbq_refuse_reserved_name
 *		A new queue or topic may not have a name with the segment
 *		"/subscriptions/" (any letter case): that form addresses the
 *		subscriptions of topics (22023).
 */
void
sbq_refuse_reserved_name(const SbqAddress *addr)
{
	if (strstr(addr->key, SBQ_SUBSCRIPTIONS_SEGMENT) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid queue name \"%s\"", addr->name),
				 errdetail("A name with the segment \"%s\" addresses a subscription of a topic.",
						   SBQ_SUBSCRIPTIONS_SEGMENT)));
}

/*
 * sbq_queue_address
 *		The address in argument 0, checked: 22004 when NULL, 22023 when bad.
 */
void
sbq_queue_address(FunctionCallInfo fcinfo, bool allow_dlq, SbqAddress *addr)
{
	sbq_require_arg(fcinfo, 0, "queue");
	sbq_parse_address(PG_GETARG_TEXT_PP(0), allow_dlq, addr);
}

/*
 * sbq_interval_usecs
 *		An interval as microseconds, a month counted as 30 days (as PostgreSQL's
 *		own interval comparisons do). Saturates instead of overflowing.
 */
int64
sbq_interval_usecs(const Interval *iv)
{
	int128		total;

	total = (int128) iv->time +
		(int128) iv->day * USECS_PER_DAY +
		(int128) iv->month * DAYS_PER_MONTH * USECS_PER_DAY;
	if (total > PG_INT64_MAX)
		return PG_INT64_MAX;
	if (total < PG_INT64_MIN)
		return PG_INT64_MIN;
	return (int64) total;
}

/* t plus iv, as timestamptz + interval computes it */
TimestampTz
sbq_add_interval(TimestampTz t, const Interval *iv)
{
	return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
												   TimestampTzGetDatum(t),
												   IntervalPGetDatum(iv)));
}

/*
 * sbq_expiry
 *		When a message that lives ttl from start expires; false when never:
 *		a time to live of SBQ_NEVER_EXPIRES or more (Service Bus's default is
 *		TimeSpan.MaxValue), or an expiry past the end of the timestamp range.
 */
bool
sbq_expiry(TimestampTz start, const Interval *ttl, TimestampTz *expires_at)
{
	int64		usecs = sbq_interval_usecs(ttl);
	int64		bound;

	if (usecs >= SBQ_NEVER_EXPIRES_USECS ||
		pg_add_s64_overflow(start, usecs + 31 * USECS_PER_DAY, &bound) ||
		!IS_VALID_TIMESTAMP(bound))
		return false;
	*expires_at = sbq_add_interval(start, ttl);
	return true;
}

/*
 * sbq_exact_interval
 *		A duration as the exact length sbq_interval_usecs counts (a day 24
 *		hours, a month 30 days), in microseconds only, in place. A duration is
 *		checked and then applied: as given, '1 mon' would be checked as 30
 *		days and applied as a calendar month, and a day across a change to or
 *		from daylight saving time as 23 or 25 hours, so that a mix of signs
 *		('1000 mon -30000 days 10 seconds': 10 s as checked, 436 days as
 *		applied) could pass any check. Made exact, the value checked is the
 *		value stored and applied, in SQL or in C, in any time zone.
 */
void
sbq_exact_interval(Interval *iv)
{
	iv->time = sbq_interval_usecs(iv);
	iv->day = 0;
	iv->month = 0;
}

/*
 * Message sizes, as Service Bus counts them: the body, and the properties
 * (system and application) that travel with it, which take at most
 * SBQ_MAX_PROPERTIES_SIZE bytes; the two together at most the queue's
 * max_message_size. A property counts its bytes as stored; the application
 * properties, and a JSON body, the length of their JSON text (which a reader
 * gets: a jsonb number of a few bytes can print as 100,000 digits). What
 * sbqueue gives a message itself does not count: a message id it makes up,
 * the content type of a text or JSON body. A body of max_message_size bytes
 * sent without properties fits, as the contract has it.
 */
int64
sbq_text_size(const text *t)
{
	return t == NULL ? 0 : (int64) VARSIZE_ANY_EXHDR(t);
}

/* The length of a JSON string as jsonb prints it: quotes and escapes. */
static int64
sbq_json_string_size(const char *s, int len)
{
	int64		size = len + 2;
	int			i;

	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' ||
			c == '\r' || c == '\t')
			size += 1;
		else if (c < 0x20)
			size += 5;			/* \u00XX */
	}
	return size;
}

/*
 * sbq_jsonb_text_size
 *		The length of a jsonb value's JSON text (jsonb's own output, or a few
 *		bytes more: never less), without making the text: it stops counting
 *		past limit and returns more than limit, so a value that prints huge
 *		costs no more than limit bytes of work. Each number's text is freed
 *		once counted.
 */
int64
sbq_jsonb_text_size(Jsonb *j, int64 limit)
{
	JsonbIterator *it = JsonbIteratorInit(&j->root);
	JsonbValue	v;
	JsonbIteratorToken tok;
	int64		size = 0;

	while ((tok = JsonbIteratorNext(&it, &v, false)) != WJB_DONE)
	{
		CHECK_FOR_INTERRUPTS();
		if (tok == WJB_END_ARRAY || tok == WJB_END_OBJECT)
		{
			size += 1;
			continue;
		}
		/* a separator and a space, or a key's colon and space, before each */
		size += 2;
		if (tok == WJB_BEGIN_ARRAY || tok == WJB_BEGIN_OBJECT)
		{
			size += 1;
			continue;
		}
		switch (v.type)
		{
			case jbvString:
				size += sbq_json_string_size(v.val.string.val, v.val.string.len);
				break;
			case jbvNumeric:
				{
					char	   *digits = DatumGetCString(DirectFunctionCall1(numeric_out,
																			 NumericGetDatum(v.val.numeric)));

					size += strlen(digits);
					pfree(digits);
					break;
				}
			case jbvBool:
				size += v.val.boolean ? 4 : 5;
				break;
			default:
				size += 4;		/* null */
				break;
		}
		if (size > limit)
			return limit + 1;
	}
	return size;
}

/* The bytes of the properties a send gives its messages. */
int64
sbq_props_size(const SbqSendProps *props)
{
	int64		size = 0;

	size += sbq_text_size(props->message_id);
	size += sbq_text_size(props->session_id);
	size += sbq_text_size(props->correlation_id);
	size += sbq_text_size(props->subject);
	size += sbq_text_size(props->content_type);
	size += sbq_text_size(props->reply_to);
	size += sbq_text_size(props->reply_to_session_id);
	size += sbq_text_size(props->to_address);
	if (props->application_properties != NULL && size <= SBQ_MAX_PROPERTIES_SIZE)
		size += sbq_jsonb_text_size(props->application_properties,
									SBQ_MAX_PROPERTIES_SIZE - size);
	return size;
}

/* queries started, and changes to the lease and queue-state tables, counted */
uint64		sbq_shared_change_gen = 0;

/*
 * sbq_snapshot_key
 *		The key of the active snapshot (false: none is active). Under READ
 *		COMMITTED each statement has a snapshot of its own, under REPEATABLE
 *		READ the transaction has one; two snapshots taken with no transaction
 *		ended in between see the same (the count of ended transactions says
 *		so). Also which query reads, and this transaction's changes to the
 *		shared tables (see SbqSnapshotKey).
 */
bool
sbq_snapshot_key(SbqSnapshotKey *key)
{
	Snapshot	snap;

	if (!ActiveSnapshotSet())
		return false;
	snap = GetActiveSnapshot();
	memset(key, 0, sizeof(*key));
	key->lxid = SBQ_MY_LXID();
	key->xmin = snap->xmin;
	key->xmax = snap->xmax;
	key->xcnt = snap->xcnt;
	key->completions = snap->snapXactCompletionCount;
	key->gen = sbq_shared_change_gen;
	return true;
}

/*
 * Strong random bytes drawn ahead, for the message ids, lock tokens and
 * filter GUIDs that one call needs a few of: a draw (pg_strong_random) costs
 * some microseconds whatever its size, more than a small send takes for
 * everything else. Each byte is handed out once and then cleared.
 */
#define SBQ_RANDOM_POOL		1024
static unsigned char sbq_random_pool[SBQ_RANDOM_POOL];
static Size sbq_random_left = 0;	/* bytes not yet handed out, at the start */

/*
 * The relcache callbacks of sbqueue's caches, called through one callback of
 * its own: a backend has room for ten (PostgreSQL 15 and later; a FATAL error
 * when they run out), and a server that preloads other extensions besides
 * (a distributed one registers five) has few to spare.
 */
#define SBQ_MAX_RELCACHE_FNS	8
static RelcacheCallbackFunction sbq_relcache_fns[SBQ_MAX_RELCACHE_FNS];
static int	sbq_nrelcache_fns = 0;

static void
sbq_relcache_dispatch(Datum arg, Oid relid)
{
	int			i;

	for (i = 0; i < sbq_nrelcache_fns; i++)
		sbq_relcache_fns[i] (arg, relid);
}

/*
 * sbq_on_relcache_inval
 *		Have fn called (with 0 for its argument) on every relcache
 *		invalidation from now on in this backend, as
 *		CacheRegisterRelcacheCallback would. Once for each fn, whatever the
 *		number of calls.
 */
void
sbq_on_relcache_inval(RelcacheCallbackFunction fn)
{
	int			i;

	for (i = 0; i < sbq_nrelcache_fns; i++)
		if (sbq_relcache_fns[i] == fn)
			return;
	if (sbq_nrelcache_fns == SBQ_MAX_RELCACHE_FNS)
		elog(ERROR, "sbqueue has too many relcache callbacks");
	if (sbq_nrelcache_fns == 0)
		CacheRegisterRelcacheCallback(sbq_relcache_dispatch, (Datum) 0);
	sbq_relcache_fns[sbq_nrelcache_fns++] = fn;
}

/*
 * sbq_random_bytes
 *		Fill b with len strong random bytes: from the pool, or for a large
 *		request from a draw of its own.
 */
void
sbq_random_bytes(void *b, Size len)
{
	if (len > SBQ_RANDOM_POOL / 2)
	{
		if (!pg_strong_random(b, len))
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not generate random values")));
		return;
	}
	if (sbq_random_left < len)
	{
		sbq_random_left = 0;
		if (!pg_strong_random(sbq_random_pool, SBQ_RANDOM_POOL))
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not generate random values")));
		sbq_random_left = SBQ_RANDOM_POOL;
	}
	sbq_random_left -= len;
	memcpy(b, sbq_random_pool + sbq_random_left, len);
	memset(sbq_random_pool + sbq_random_left, 0, len);
}

/*
 * sbq_new_message_ids
 *		n message ids for messages sent without one: version 4 UUIDs as
 *		lower-case text, as gen_random_uuid() makes them (palloc'd), their
 *		random bytes from sbq_random_bytes.
 */
text	  **
sbq_new_message_ids(int n)
{
	unsigned char *b = palloc(16 * (Size) Max(n, 1));
	text	  **ids = palloc(sizeof(text *) * Max(n, 1));
	int			k;

	sbq_random_bytes(b, 16 * (Size) n);
	for (k = 0; k < n; k++)
	{
		unsigned char *u = b + 16 * k;
		text	   *t = palloc(VARHDRSZ + 36);
		char	   *s = VARDATA(t);
		int			i;
		int			o = 0;

		u[6] = (u[6] & 0x0f) | 0x40;
		u[8] = (u[8] & 0x3f) | 0x80;
		for (i = 0; i < 16; i++)
		{
			if (i == 4 || i == 6 || i == 8 || i == 10)
				s[o++] = '-';
			s[o++] = "0123456789abcdef"[u[i] >> 4];
			s[o++] = "0123456789abcdef"[u[i] & 0x0f];
		}
		SET_VARSIZE(t, VARHDRSZ + 36);
		ids[k] = t;
	}
	pfree(b);
	return ids;
}

/* sbq_new_message_id: one of sbq_new_message_ids, as a C string */
char *
sbq_new_message_id(void)
{
	return text_to_cstring(sbq_new_message_ids(1)[0]);
}

/*
 * Whether a message id has the form of those sbqueue makes up (a version 4
 * UUID as lower-case text), which do not count towards a message's size.
 */
bool
sbq_made_up_message_id(const char *id, int len)
{
	int			i;

	if (len != 36)
		return false;
	for (i = 0; i < 36; i++)
	{
		char		c = id[i];

		if (i == 8 || i == 13 || i == 18 || i == 23)
		{
			if (c != '-')
				return false;
		}
		else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return false;
	}
	return id[14] == '4' && strchr("89ab", id[19]) != NULL;
}

/*
 * sbq_check_message_size
 *		SB007 for a message of body and props bytes that the queue cannot
 *		take; what says which message ("message", "message 42 with its
 *		properties_to_modify").
 */
void
sbq_check_message_size(const SbqQueue *queue, int64 body, int64 props, const char *what)
{
	if (props > SBQ_MAX_PROPERTIES_SIZE)
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_MESSAGE_TOO_LARGE),
				 errmsg("%s has " INT64_FORMAT " bytes of properties, too many for queue \"%s\"",
						what, props, queue->name),
				 errdetail("A message's properties take at most %d bytes.",
						   SBQ_MAX_PROPERTIES_SIZE)));
	if (body + props > queue->max_message_size)
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_MESSAGE_TOO_LARGE),
				 errmsg("%s of " INT64_FORMAT " bytes is too large for queue \"%s\"",
						what, body + props, queue->name),
				 errdetail("The queue's max_message_size is %d bytes: " INT64_FORMAT
						   " bytes of body and " INT64_FORMAT " bytes of properties.",
						   queue->max_message_size, body, props)));
}

/*
 * sbq_check_interval_range
 *		22023 unless min_usecs <= iv <= max_usecs.
 */
void
sbq_check_interval_range(const char *argname, const Interval *iv,
						 int64 min_usecs, int64 max_usecs)
{
	int64		us = sbq_interval_usecs(iv);

	if (us < min_usecs || us > max_usecs)
	{
		char	   *given = DatumGetCString(DirectFunctionCall1(interval_out,
																IntervalPGetDatum(iv)));
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s %s is out of range", argname, given),
				 errdetail("It must be between " INT64_FORMAT " and " INT64_FORMAT " seconds.",
						   min_usecs / USECS_PER_SEC, max_usecs / USECS_PER_SEC)));
	}
}

/*
 * sbq_storage_subxact_begin
 *		Begin a subtransaction in the storage section, in the caller's memory
 *		context, the section's settings pinned first at the section's own
 *		level (the subtransaction's end would unpin them). It ends with
 *		sbq_subxact_commit, or in its PG_CATCH with sbq_subxact_failed.
 */
void
sbq_storage_subxact_begin(void)
{
	MemoryContext cxt = CurrentMemoryContext;

	sbq_storage_pin_settings();
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
}

/*
 * sbq_subxact_commit
 *		Commit a subtransaction (BeginInternalSubTransaction, with cxt and
 *		owner current before it), and go on in cxt under owner.
 */
void
sbq_subxact_commit(MemoryContext cxt, ResourceOwner owner)
{
	ReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
}

/*
 * sbq_subxact_failed
 *		In the PG_CATCH of a subtransaction (BeginInternalSubTransaction,
 *		with cxt and owner current before it):
 *		end the subtransaction, whatever the error, and return a copy of the
 *		error for the caller to pass on (ReThrowError) or to free. Ending it
 *		first matters: an error passed on with the subtransaction open leaves
 *		the session's transaction in a state its statements cannot use.
 */
ErrorData *
sbq_subxact_failed(MemoryContext cxt, ResourceOwner owner)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	FlushErrorState();
	RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return edata;
}

/*
 * Lock tokens.
 *
 * A token is a version 4 style UUID: its first 8 bytes are random (58 bits,
 * around the version nibble), its last 8 carry the message's sequence number
 * (62 bits, under the RFC 4122 variant bits) XORed with a mix of the first
 * 8, so tokens look random. Settling reads the sequence number out of the token and finds
 * the message by primary key, then compares the whole token: no index on lock
 * tokens is needed, so taking a lock stays a HOT update.
 */
static uint64
sbq_token_mask(const pg_uuid_t *token)
{
	uint64		z = 0;
	int			i;

	/* the splitmix64 finalizer over the random half */
	for (i = 0; i < 8; i++)
		z = (z << 8) | token->data[i];
	z = (z ^ (z >> 30)) * UINT64CONST(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64CONST(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/*
 * sbq_make_lock_token
 *		A fresh lock token for the message seq: 58 random bits, and the
 *		sequence number mixed with them, so settling finds the message by its
 *		primary key and still compares the whole token.
 */
void
sbq_make_lock_token(int64 seq, pg_uuid_t *token)
{
	uint64		s;
	int			i;

	sbq_random_bytes(token->data, 8);
	token->data[6] = (token->data[6] & 0x0F) | 0x40;	/* version 4 */
	s = (uint64) seq ^ sbq_token_mask(token);
	for (i = 15; i >= 8; i--)
	{
		token->data[i] = (unsigned char) (s & 0xFF);
		s >>= 8;
	}
	token->data[8] = (token->data[8] & 0x3F) | 0x80;	/* RFC 4122 variant */
}

/* sbq.new_lock_token(sequence_number): a new lock token for it (internal); locks nothing. */
Datum
sbq_new_lock_token(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *token = palloc(sizeof(pg_uuid_t));

	sbq_lease_internal("sbq.new_lock_token");
	sbq_make_lock_token(PG_GETARG_INT64(0), token);
	PG_RETURN_UUID_P(token);
}

/*
 * sbq_token_sequence
 *		The sequence number a lock token was issued for (garbage for a token
 *		sbqueue never issued; the full-token comparison then fails).
 */
int64
sbq_token_sequence(const pg_uuid_t *token)
{
	uint64		s = 0;
	int			i;

	for (i = 8; i < 16; i++)
		s = (s << 8) | token->data[i];
	return (int64) ((s ^ sbq_token_mask(token)) & UINT64CONST(0x3FFFFFFFFFFFFFFF));
}

char *
sbq_token_string(const pg_uuid_t *token)
{
	return DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(token)));
}

/*
 * sbq_check_json_object
 *		22023 unless j is a JSON object.
 */
void
sbq_check_json_object(const char *argname, Jsonb *j)
{
	if (!JB_ROOT_IS_OBJECT(j) || JB_ROOT_IS_SCALAR(j))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a JSON object", argname)));
}

/*
 * sbq_check_id_length
 *		22023 when an identifier property is longer than 128 characters.
 */
void
sbq_check_id_length(const char *argname, text *value)
{
	sbq_check_text_length(argname, value, SBQ_MAX_ID_LEN);
}

/*
 * sbq_check_text_length
 *		22023 when a text is longer than max characters.
 */
void
sbq_check_text_length(const char *argname, text *value, int max)
{
	if (value != NULL &&
		pg_mbstrlen_with_len(VARDATA_ANY(value), VARSIZE_ANY_EXHDR(value)) > max)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is longer than %d characters", argname, max)));
}

/*
 * sbq_check_array_size
 *		22023 when an array argument has more than one dimension or more than
 *		max elements, checked before any work on them: what a call does grows
 *		with its arrays, and must stay bounded whoever calls it.
 */
void
sbq_check_array_size(ArrayType *arr, const char *argname, int max, const char *why)
{
	int			n = ArrayGetNItems(ARR_NDIM(arr), ARR_DIMS(arr));

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a one-dimensional array", argname)));
	if (n > max)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s has %d elements", argname, n),
				 errdetail("%s", why)));
}

/* a value and its place in the caller's array, to sort by value */
typedef struct SbqPlace
{
	int64		value;
	int			place;
} SbqPlace;

static int
sbq_cmp_place(const void *a, const void *b)
{
	const SbqPlace *x = a;
	const SbqPlace *y = b;

	if (x->value != y->value)
		return (x->value > y->value) - (x->value < y->value);
	return (x->place > y->place) - (x->place < y->place);
}

/*
 * sbq_array_subscript
 *		The subscript of the i-th element (from 0) of a one-dimensional
 *		array, as the caller wrote it: arrays need not start at 1.
 */
int
sbq_array_subscript(ArrayType *arr, int i)
{
	return (ARR_NDIM(arr) > 0 ? ARR_LBOUND(arr)[0] : 1) + i;
}

/*
 * sbq_distinct_int8
 *		Drop the repeats among the n int8 datums of elems, in place, keeping
 *		the first of each in the caller's order; returns how many are left.
 *		O(n log n), and cancellable.
 */
int
sbq_distinct_int8(Datum *elems, int n)
{
	SbqPlace   *sorted = palloc(sizeof(SbqPlace) * Max(n, 1));
	bool	   *repeat = palloc0(sizeof(bool) * Max(n, 1));
	int			out = 0;
	int			i;

	for (i = 0; i < n; i++)
	{
		sorted[i].value = DatumGetInt64(elems[i]);
		sorted[i].place = i;
	}
	qsort(sorted, n, sizeof(SbqPlace), sbq_cmp_place);
	for (i = 1; i < n; i++)
		if (sorted[i].value == sorted[i - 1].value)
			repeat[sorted[i].place] = true;
	for (i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (!repeat[i])
			elems[out++] = elems[i];
	}
	pfree(sorted);
	pfree(repeat);
	return out;
}

/*
 * sbq_require_arg
 *		22004 when a required argument is NULL: the functions are not STRICT, so
 *		that a NULL never silently does nothing.
 */
void
sbq_require_arg(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", argname)));
}

/*
 * sbq_init_srf
 *		Set up a materialized set-returning call (InitMaterializedSRF, with
 *		the caller's expected tuple descriptor); returns its tuplestore and
 *		descriptor.
 */
Tuplestorestate *
sbq_init_srf(FunctionCallInfo fcinfo, TupleDesc *tupdesc)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	*tupdesc = rsinfo->setDesc;
	return rsinfo->setResult;
}

/*
 * sbq_lock_queue_name
 *		Take the transaction-level lock on a queue name. Creating and deleting a
 *		queue take it exclusively, sending takes it shared: a send can then never
 *		store a message for a queue whose deletion committed after the send
 *		looked the queue up, and two creates of one name never race.
 */
void
sbq_lock_queue_name(const char *key, LOCKMODE mode)
{
	(void) sbq_lock_queue_name_if(key, mode, false);
}

/* The lock tag of a queue name. */
static void
sbq_queue_name_tag(const char *key, LOCKTAG *tag)
{
	uint64		h = hash_bytes_extended((const unsigned char *) key, strlen(key), 0);

	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h,
						 SBQ_LOCKTAG_FIELD4);
}

/*
 * sbq_lock_queue_name_if
 *		sbq_lock_queue_name, or (nowait) take it only if no one holds it in a
 *		conflicting mode and the lock table has room: false then, and
 *		nothing taken.
 */
bool
sbq_lock_queue_name_if(const char *key, LOCKMODE mode, bool nowait)
{
	LOCKTAG		tag;

	sbq_queue_name_tag(key, &tag);
	/* not waiting, a full lock table is "not now" too, not an error */
	return LockAcquireExtended(&tag, mode, false, nowait, !nowait, NULL) !=
		LOCKACQUIRE_NOT_AVAIL;
}

/* An entity's name key cut, in place, to a subscription's topic's (true). */
bool
sbq_key_to_lock_key(char *key)
{
	char	   *seg = strstr(key, SBQ_SUBSCRIPTIONS_SEGMENT);

	if (seg == NULL)
		return false;
	*seg = '\0';
	return true;
}

/*
 * sbq_lock_entity_name: sbq_lock_queue_name for a call that stores rows of
 * an entity; a subscription changes under its topic's name, taken first.
 */
void
sbq_lock_entity_name(const char *key, LOCKMODE mode)
{
	char	   *topic = pstrdup(key);

	if (sbq_key_to_lock_key(topic))
		sbq_lock_queue_name(topic, mode);
	sbq_lock_queue_name(key, mode);
}

/* Give back one hold of what sbq_lock_entity_name took (earlier ones stay). */
void
sbq_unlock_entity_name(const char *key, LOCKMODE mode)
{
	char	   *topic = pstrdup(key);
	LOCKTAG		tag;

	sbq_queue_name_tag(key, &tag);
	(void) LockRelease(&tag, mode, false);
	if (sbq_key_to_lock_key(topic))
	{
		sbq_queue_name_tag(topic, &tag);
		(void) LockRelease(&tag, mode, false);
	}
}

/* ------------------------------------------------------------ statement values */

/* An int8[] (wide) or int4[] of the n integers at v, for a statement argument. */
static Datum
sbq_int_array(const void *v, int n, bool wide)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(n, 1));
	int			i;

	for (i = 0; i < n; i++)
		d[i] = wide ? Int64GetDatum(((const int64 *) v)[i]) :
			Int32GetDatum(((const int32 *) v)[i]);
	if (wide)
		return PointerGetDatum(construct_array(d, n, INT8OID, sizeof(int64),
											   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	return PointerGetDatum(construct_array(d, n, INT4OID, sizeof(int32),
										   true, TYPALIGN_INT));
}

Datum
sbq_int8_array(const int64 *v, int n)
{
	return sbq_int_array(v, n, true);
}

Datum
sbq_int4_array(const int32 *v, int n)
{
	return sbq_int_array(v, n, false);
}

/* The description of a dead letter that reached the queue's delivery limit. */
void
sbq_max_delivery_description(const SbqQueue *queue, char *buf, size_t len)
{
	snprintf(buf, len, SBQ_DLQ_DESCRIPTION_MAX_DELIVERY, queue->max_delivery_count);
}

/* qsort comparator of SbqOutRow by sequence number */
int
sbq_cmp_out_row(const void *a, const void *b)
{
	int64		x = ((const SbqOutRow *) a)->seq;
	int64		y = ((const SbqOutRow *) b)->seq;

	return (x > y) - (x < y);
}
