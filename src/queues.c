/*-------------------------------------------------------------------------
 *
 * queues.c
 *	  Queues: look-up by name (with a per-backend cache, which keeps the
 *	  rights on each queue too), properties, create, update, delete, purge.
 *
 * The callers (api.c) hold the queue name's advisory lock (util.c,
 * sbq_lock_queue_name) before they look a queue up to change it; a send
 * holds it in share mode. Deleting a queue deletes its messages, counters
 * and duplicate-detection history in the same statement; its leases and
 * per-queue shared state go at commit (lease.c, qstate.c).
 *
 * Owns: the queue cache, backend-local. Locks: none of its own beyond the
 * row locks of its statements.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/queues.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "lease.h"
#include "storage_core.h"
#include "topics.h"

#define QUEUE_COLS(later) \
	"queue_id, name, lock_duration, max_delivery_count, default_message_ttl, " \
	"dead_lettering_on_message_expiration, duplicate_detection_window, " \
	"requires_session, forward_to, forward_dead_lettered_messages_to, max_message_size, " \
	later
/* 0.9 on: dead_letter_ttl and the retry back-off */
#define QUEUE_COLS_RETRY QUEUE_COLS("dead_letter_ttl, retry_delay, retry_backoff, max_retry_delay")
/* SQL before 0.9 has no retry back-off: none */
#define QUEUE_COLS_NEW	QUEUE_COLS("dead_letter_ttl, NULL::interval, false, NULL::interval")
/* SQL before 0.4 has no dead_letter_ttl either */
#define QUEUE_COLS_OLD	QUEUE_COLS("NULL::interval, NULL::interval, false, NULL::interval")

/*
 * Each statement on sbq.queues comes twice: for the SQL of 0.9 on (..._retry),
 * and for older SQL (its old_sql for before 0.4). sbq_queue_stmt() picks.
 */
static SbqStatement stmt_find_queue = {"find queue", 1, {TEXTOID},
	"SELECT " QUEUE_COLS_NEW " FROM sbq.queues WHERE name_key = $1",
	.old_sql = "SELECT " QUEUE_COLS_OLD " FROM sbq.queues WHERE name_key = $1"
};
static SbqStatement stmt_find_queue_retry = {"find queue", 1, {TEXTOID},
	"SELECT " QUEUE_COLS_RETRY " FROM sbq.queues WHERE name_key = $1"
};

/* a sender under a transaction snapshot: see sbq_storage_get_queue_to_send */
static SbqStatement stmt_find_queue_share = {"find queue to send", 1, {TEXTOID},
	"SELECT " QUEUE_COLS_NEW " FROM sbq.queues WHERE name_key = $1 FOR SHARE",
	.old_sql = "SELECT " QUEUE_COLS_OLD " FROM sbq.queues WHERE name_key = $1 FOR SHARE"
};
static SbqStatement stmt_find_queue_share_retry = {"find queue to send", 1, {TEXTOID},
	"SELECT " QUEUE_COLS_RETRY " FROM sbq.queues WHERE name_key = $1 FOR SHARE"
};

static SbqStatement stmt_all_queues = {"all queues", 0, {InvalidOid},
	"SELECT " QUEUE_COLS_NEW " FROM sbq.queues ORDER BY queue_id",
	.old_sql = "SELECT " QUEUE_COLS_OLD " FROM sbq.queues ORDER BY queue_id"
};
static SbqStatement stmt_all_queues_retry = {"all queues", 0, {InvalidOid},
	"SELECT " QUEUE_COLS_RETRY " FROM sbq.queues ORDER BY queue_id"
};

/*
 * the columns of sbq_queue_properties, which SQL before 0.4 ends at
 * updated_at, and SQL before 0.9 at dead_letter_ttl
 */
#define QUEUE_ROW \
	"SELECT name, lock_duration, max_delivery_count, default_message_ttl," \
	" dead_lettering_on_message_expiration, duplicate_detection_window," \
	" requires_session, forward_to, forward_dead_lettered_messages_to," \
	" max_message_size, created_at, updated_at"

static SbqStatement stmt_queue_row = {"queue properties", 1, {INT4OID},
	QUEUE_ROW ", dead_letter_ttl FROM sbq.queues WHERE queue_id = $1",
	.old_sql = QUEUE_ROW " FROM sbq.queues WHERE queue_id = $1"
};
static SbqStatement stmt_queue_row_retry = {"queue properties", 1, {INT4OID},
	QUEUE_ROW ", dead_letter_ttl, retry_delay, retry_backoff, max_retry_delay"
	" FROM sbq.queues WHERE queue_id = $1"
};

#define CREATE_QUEUE(later_cols, later_values) \
	"INSERT INTO sbq.queues (name, name_key, lock_duration, max_delivery_count," \
	" default_message_ttl, dead_lettering_on_message_expiration," \
	" duplicate_detection_window, requires_session, forward_to," \
	" forward_dead_lettered_messages_to, max_message_size, created_at, updated_at" \
	later_cols ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12" later_values ")" \
	" RETURNING queue_id"

/* $13: dead_letter_ttl, which SQL before 0.4 cannot store; $14 .. $16 the retry back-off */
#define CREATE_QUEUE_ARGS TEXTOID, TEXTOID, INTERVALOID, INT4OID, INTERVALOID, BOOLOID, \
	INTERVALOID, BOOLOID, TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID, INTERVALOID
static SbqStatement stmt_create_queue = {"create queue", 13, {CREATE_QUEUE_ARGS},
	CREATE_QUEUE(", dead_letter_ttl", ", $13"),
	.old_sql = CREATE_QUEUE("", "")
};
static SbqStatement stmt_create_queue_retry = {"create queue", 16, {CREATE_QUEUE_ARGS,
		INTERVALOID, BOOLOID, INTERVALOID},
	CREATE_QUEUE(", dead_letter_ttl, retry_delay, retry_backoff, max_retry_delay",
				 ", $13, $14, $15, $16")
};

/* $2 .. $10 in the order of sbq_queue_args; $12 dead_letter_ttl (from 0.4); $13 .. $15 retry */
#define UPDATE_QUEUE(later) \
	"UPDATE sbq.queues SET lock_duration = $2, max_delivery_count = $3," \
	" default_message_ttl = $4, dead_lettering_on_message_expiration = $5," \
	" duplicate_detection_window = $6, requires_session = $7, forward_to = $8," \
	" forward_dead_lettered_messages_to = $9, max_message_size = $10," \
	" updated_at = $11" later " WHERE queue_id = $1"

#define UPDATE_QUEUE_ARGS INT4OID, INTERVALOID, INT4OID, INTERVALOID, BOOLOID, INTERVALOID, \
	BOOLOID, TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID, INTERVALOID
static SbqStatement stmt_update_queue = {"update queue", 12, {UPDATE_QUEUE_ARGS},
	UPDATE_QUEUE(", dead_letter_ttl = $12"),
	.old_sql = UPDATE_QUEUE("")
};
static SbqStatement stmt_update_queue_retry = {"update queue", 15, {UPDATE_QUEUE_ARGS,
		INTERVALOID, BOOLOID, INTERVALOID},
	UPDATE_QUEUE(", dead_letter_ttl = $12, retry_delay = $13, retry_backoff = $14,"
				 " max_retry_delay = $15")
};

/* the statement of a pair for the installed SQL */
static inline SbqStatement *
sbq_queue_stmt(SbqStatement *older, SbqStatement *retry)
{
	return sbq_queue_retry_installed() ? retry : older;
}

/* 0.1 has no sbq.duplicate_ids (DUPS) */
#define DELETE_QUEUE_ROWS \
	" c AS (DELETE FROM sbq.queue_counters WHERE queue_id = $1)" \
	DUPS(", d AS (DELETE FROM sbq.duplicate_ids WHERE queue_id = $1)") \
	" DELETE FROM sbq.queues WHERE queue_id = $1"

static SbqStatement stmt_delete_queue = {"delete queue", 1, {INT4OID},
	"WITH m AS (DELETE FROM sbq.messages WHERE queue_id = $1),"
	" l AS (DELETE FROM sbq.dead_letters WHERE queue_id = $1),"
	DELETE_QUEUE_ROWS,
	.old_sql =
	"WITH m AS (DELETE FROM sbq.messages WHERE queue_id = $1),"
	DELETE_QUEUE_ROWS
};

/*
 * What a move between the two tables committed while the delete waited for
 * its row: the delete skipped the row it had moved from, and its snapshot did
 * not show the row it moved to. A statement of its own has a snapshot that
 * does (under READ COMMITTED; under REPEATABLE READ the wait was an error).
 */
static SbqStatement stmt_delete_sessions = {"delete the sessions of a queue", 1, {INT4OID},
	"DELETE FROM sbq.sessions WHERE queue_id = $1"
};

static SbqStatement stmt_delete_queue_moved = {"delete moved messages of a queue", 1, {INT4OID},
	"WITH m AS (DELETE FROM sbq.messages WHERE queue_id = $1)"
	" DELETE FROM sbq.dead_letters WHERE queue_id = $1",
	.old_sql = "SELECT 1"
};

static SbqStatement stmt_purge = {"purge", 2, {INT4OID, INT2OID},
	"DELETE FROM " SUBQUEUE_TABLE " WHERE queue_id = $1 AND subqueue = $2"
};

/*
 * sbq_queue_from_row
 *		Decode a QUEUE_COLS row of the current SPI result.
 */
static void
sbq_queue_from_row(uint64 row, SbqQueue *queue)
{
	bool		isnull;
	Datum		d;

	memset(queue, 0, sizeof(SbqQueue));
	queue->queue_id = DatumGetInt32(sbq_col(row, 1, &isnull));
	queue->name = sbq_spi_strdup(sbq_col(row, 2, &isnull), false);
	queue->lock_duration = *DatumGetIntervalP(sbq_col(row, 3, &isnull));
	queue->max_delivery_count = DatumGetInt32(sbq_col(row, 4, &isnull));
	d = sbq_col(row, 5, &isnull);
	queue->has_default_ttl = !isnull;
	if (!isnull)
		queue->default_ttl = *DatumGetIntervalP(d);
	queue->dlq_on_expiration = DatumGetBool(sbq_col(row, 6, &isnull));
	d = sbq_col(row, 7, &isnull);
	queue->has_dup_window = !isnull;
	if (!isnull)
		queue->dup_window = *DatumGetIntervalP(d);
	queue->requires_session = DatumGetBool(sbq_col(row, 8, &isnull));
	d = sbq_col(row, 9, &isnull);
	queue->forward_to = sbq_spi_strdup(d, isnull);
	d = sbq_col(row, 10, &isnull);
	queue->forward_dlq_to = sbq_spi_strdup(d, isnull);
	queue->max_message_size = DatumGetInt32(sbq_col(row, 11, &isnull));
	d = sbq_col(row, 12, &isnull);
	queue->has_dead_letter_ttl = !isnull;
	if (!isnull)
		queue->dead_letter_ttl = *DatumGetIntervalP(d);
	d = sbq_col(row, 13, &isnull);
	queue->has_retry_delay = !isnull;
	if (!isnull)
		queue->retry_delay = *DatumGetIntervalP(d);
	queue->retry_backoff = DatumGetBool(sbq_col(row, 14, &isnull));
	d = sbq_col(row, 15, &isnull);
	queue->has_max_retry_delay = !isnull;
	if (!isnull)
		queue->max_retry_delay = *DatumGetIntervalP(d);
	/* applied as the exact lengths they were checked as, stored before 0.5 or not */
	sbq_exact_interval(&queue->lock_duration);
	sbq_exact_interval(&queue->default_ttl);
	sbq_exact_interval(&queue->dup_window);
	sbq_exact_interval(&queue->dead_letter_ttl);
	sbq_exact_interval(&queue->retry_delay);
	sbq_exact_interval(&queue->max_retry_delay);
}

/*
 * The queue cache: the properties of the queues this backend used, by name
 * key, so a send, receive or settlement does not look its queue up in
 * sbq.queues every time. Creating, changing and deleting a queue send a
 * relcache invalidation for sbq.queues at commit, and every backend drops its
 * cache when it gets one (a backend's own uncommitted change is invalidated
 * at once, and again at abort). Every lookup first takes in the invalidations
 * that arrived, and the queue management calls (and sends) hold the queue
 * name's lock before they look, which its changers held until after they had
 * sent their invalidations: a lookup never misses a change that committed
 * before it.
 */
typedef struct SbqCachedQueue
{
	char		key[SBQ_MAX_NAME_LEN + 1];
	SbqQueue	queue;
} SbqCachedQueue;

static HTAB *sbq_queue_cache = NULL;
static MemoryContext sbq_queue_cache_cxt = NULL;
static Oid	sbq_queues_relid = InvalidOid;

/* the invalidations of sbq.queues this backend has taken in */
static uint64 sbq_queue_cache_invals = 0;

/* relcache invalidation callback: a change to sbq.queues drops the cache */
static void
sbq_queue_cache_inval(Datum arg, Oid relid)
{
	if (relid != InvalidOid && relid != sbq_queues_relid)
		return;
	sbq_queue_cache_invals++;
	/* looked up again by the next call: a DROP EXTENSION is one of these */
	sbq_queues_relid = InvalidOid;
	if (sbq_queue_cache != NULL)
	{
		sbq_queue_cache = NULL;
		MemoryContextReset(sbq_queue_cache_cxt);
	}
}

/*
 * Watch sbq.queues for invalidations from before a read whose row may be
 * kept: the first read of a backend, or the first after the cache was
 * dropped, included (sbq_storage_find_queue). On every call: the table is
 * looked up only after an invalidation.
 */
static void
sbq_queue_cache_watch(void)
{
	sbq_on_relcache_inval(sbq_queue_cache_inval);	/* once, whatever the calls */
	if (!OidIsValid(sbq_queues_relid))
		sbq_queues_relid = sbq_queues_table_oid();
}

/* Tell every backend, at commit, that the queues (or the rights on them) changed. */
void
sbq_queue_cache_changed(void)
{
	Oid			relid = sbq_queues_table_oid();

	if (OidIsValid(relid))
		CacheInvalidateRelcacheByRelid(relid);
}

static char *
sbq_strdup_in(MemoryContext cxt, const char *s)
{
	return s == NULL ? NULL : MemoryContextStrdup(cxt, s);
}

/* Copy a queue's properties, its strings into cxt. */
void
sbq_queue_copy(SbqQueue *dst, const SbqQueue *src, MemoryContext cxt)
{
	*dst = *src;
	dst->name = sbq_strdup_in(cxt, src->name);
	dst->forward_to = sbq_strdup_in(cxt, src->forward_to);
	dst->forward_dlq_to = sbq_strdup_in(cxt, src->forward_dlq_to);
	dst->grants = NULL;
	if (src->ngrants > 0)
	{
		dst->grants = MemoryContextAlloc(cxt, sizeof(SbqGrant) * src->ngrants);
		memcpy(dst->grants, src->grants, sizeof(SbqGrant) * src->ngrants);
	}
}

/*
 * sbq_storage_find_queue
 *		Look a queue up by its address; false when there is none. The strings
 *		in *queue are in the caller's memory context.
 */
bool
sbq_storage_find_queue(const SbqAddress *addr, SbqQueue *queue)
{
	Datum		values[1];
	SbqCachedQueue *entry;
	bool		found;
	uint64		invals;

	AcceptInvalidationMessages();
	sbq_queue_cache_watch();
	invals = sbq_queue_cache_invals;
	if (sbq_queue_cache != NULL && strlen(addr->key) <= SBQ_MAX_NAME_LEN)
	{
		entry = hash_search(sbq_queue_cache, addr->key, HASH_FIND, NULL);
		if (entry != NULL)
		{
			sbq_queue_copy(queue, &entry->queue, sbq_storage_caller_context());
			return true;
		}
	}

	values[0] = CStringGetTextDatum(addr->key);
	if (sbq_exec(sbq_queue_stmt(&stmt_find_queue, &stmt_find_queue_retry), values, NULL) == 0)
		return false;
	sbq_queue_from_row(0, queue);
	sbq_rights_load(queue);

	/*
	 * Remember it, unless an invalidation came in meanwhile (the read of the
	 * rights opens relations, which takes them in): the change it announces
	 * may have committed after the row was read, and the row kept would hide
	 * it from every later call (a revoke, a queue deleted or changed). Nor
	 * when it was read with a transaction snapshot (REPEATABLE READ,
	 * SERIALIZABLE), which may predate a change whose invalidation this
	 * backend has already taken in.
	 */
	if (strlen(addr->key) > SBQ_MAX_NAME_LEN || IsolationUsesXactSnapshot() ||
		sbq_queue_cache_invals != invals)
		return true;
	if (sbq_queue_cache == NULL)
	{
		HASHCTL		ctl;

		if (sbq_queue_cache_cxt == NULL)
			sbq_queue_cache_cxt = AllocSetContextCreate(TopMemoryContext,
														"sbqueue queue cache",
														ALLOCSET_SMALL_SIZES);
		if (!OidIsValid(sbq_queues_relid))
			return true;
		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = SBQ_MAX_NAME_LEN + 1;
		ctl.entrysize = sizeof(SbqCachedQueue);
		ctl.hcxt = sbq_queue_cache_cxt;
		sbq_queue_cache = hash_create("sbqueue queue cache", 16, &ctl,
									  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	}
	entry = hash_search(sbq_queue_cache, addr->key, HASH_ENTER, &found);
	sbq_queue_copy(&entry->queue, queue, sbq_queue_cache_cxt);
	return true;
}

/* SB001; or SB010 when the name is a topic's, which holds no messages */
void
sbq_queue_not_found(const SbqAddress *addr)
{
	SbqQueue	topic;

	if (sbq_storage_find_topic(addr->key, false, &topic))
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_INVALID_OPERATION),
				 errmsg("\"%s\" is a topic, not a queue", topic.name),
				 errdetail("A topic holds no messages: its subscriptions do."),
				 errhint("Receive from \"%s" SBQ_SUBSCRIPTIONS_SEGMENT "<subscription>\".",
						 topic.name)));
	ereport(ERROR,
			(errcode(SBQ_ERRCODE_QUEUE_NOT_FOUND),
			 errmsg("queue \"%s\" does not exist", addr->name)));
}

/*
 * sbq_refuse_subscription_send
 *		A subscription gets its messages from its topic, never from a send
 *		(SB010).
 */
void
sbq_refuse_subscription_send(const SbqAddress *addr, const SbqQueue *queue)
{
	char	   *topic;

	if (strstr(addr->key, SBQ_SUBSCRIPTIONS_SEGMENT) != NULL &&
		sbq_storage_subscription_of(queue->queue_id, &topic, NULL))
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_INVALID_OPERATION),
				 errmsg("cannot send to subscription \"%s\"", queue->name),
				 errdetail("A subscription gets copies of the messages sent to its topic."),
				 errhint("Send to topic \"%s\".", topic)));
}

/*
 * The queues and subscriptions that forward their messages or dead letters to
 * the name whose key is $1 (names are ASCII: their lower-case form in "C" is
 * the key, in any database's locale).
 */
#define FORWARDERS_TO \
	" FROM sbq.queues" \
	" WHERE pg_catalog.lower(forward_to COLLATE \"C\") = $1" \
	"    OR pg_catalog.lower(forward_dead_lettered_messages_to COLLATE \"C\") = $1" \
	" ORDER BY queue_id"
static SbqStatement stmt_forwarders = {"entities that forward to a name", 1, {TEXTOID},
	"SELECT " QUEUE_COLS_NEW FORWARDERS_TO,
	.old_sql = "SELECT " QUEUE_COLS_OLD FORWARDERS_TO
};
static SbqStatement stmt_forwarders_retry = {"entities that forward to a name", 1, {TEXTOID},
	"SELECT " QUEUE_COLS_RETRY FORWARDERS_TO
};

/*
 * sbq_refuse_unmanaged_forwarders
 *		For a queue or topic about to be made under addr's name (its lock
 *		held exclusively): 42501 when a queue or subscription still forwards
 *		its messages or dead letters to that name (its destination was
 *		deleted, and it dead-letters them meanwhile) and the caller does not
 *		manage it. Made, the new entity would receive them, and a role that
 *		may make queues would read another's messages: setting forward_to
 *		needs the right manage on both ends, and so does taking up a
 *		forward left pointing at a name. Naming the source only to a caller
 *		that holds a right on it.
 */
void
sbq_refuse_unmanaged_forwarders(const SbqAddress *addr)
{
	SbqQueue   *sources;
	Datum		values[1];
	uint64		n;
	uint64		i;

	/*
	 * Those that forward there now, whatever the snapshot (one taken before
	 * a forward was set up would not show it); first, as the rights' reads
	 * replace the result.
	 */
	values[0] = CStringGetTextDatum(addr->key);
	n = sbq_exec_latest(sbq_queue_stmt(&stmt_forwarders, &stmt_forwarders_retry), values, NULL);
	sources = palloc(sizeof(SbqQueue) * Max(n, 1));
	for (i = 0; i < n; i++)
		sbq_queue_from_row(i, &sources[i]);
	if (SPI_tuptable != NULL)
		SPI_freetuptable(SPI_tuptable);
	SPI_tuptable = NULL;
	for (i = 0; i < n; i++)
	{
		SbqQueue	source = sources[i];

		sbq_rights_load(&source);
		if (sbq_rights_have(&source, SBQ_RIGHT_MANAGE))
			continue;
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to create \"%s\"", addr->name),
				 sbq_rights_have(&source, SBQ_RIGHT_ANY) ?
				 errdetail("\"%s\" forwards to that name: made, it would receive what \"%s\" forwards, which needs the right \"manage\" on both.",
						   source.name, source.name) :
				 errdetail("An entity the role does not manage forwards to that name: made, it would receive what that entity forwards, which needs the right \"manage\" on both."),
				 errhint("A role that manages both makes it, or the forwarding entity's manager stops forwarding there (forward_to => '').")));
	}
	pfree(sources);
}

/*
 * sbq_storage_get_queue_or_topic
 *		sbq_storage_get_queue, or the topic of that name (is_topic set) when
 *		no queue has it.
 */
void
sbq_storage_get_queue_or_topic(const SbqAddress *addr, SbqQueue *queue, int16 rights)
{
	if (!sbq_storage_find_queue(addr, queue) &&
		(addr->subqueue != SBQ_SUBQUEUE_MAIN ||
		 !sbq_storage_find_topic(addr->key, false, queue)))
		sbq_queue_not_found(addr);
	sbq_rights_require(queue, rights);
}

/*
 * sbq_find_queue_held
 *		Under a transaction snapshot (REPEATABLE READ, SERIALIZABLE), for a
 *		caller that holds the queue name's lock in share mode: the queue by
 *		its key, its row locked in share mode (false: none). The caller's
 *		lock keeps every later delete out; the snapshot may predate one that
 *		committed before, and the row lock then fails with a serialization
 *		error instead of letting the call store rows of a queue that is gone.
 */
static bool
sbq_find_queue_held(const SbqAddress *addr, SbqQueue *queue)
{
	Datum		values[1];

	values[0] = CStringGetTextDatum(addr->key);
	if (sbq_exec(sbq_queue_stmt(&stmt_find_queue_share, &stmt_find_queue_share_retry),
				 values, NULL) == 0)
		return false;
	sbq_queue_from_row(0, queue);
	sbq_rights_load(queue);
	return true;
}

/*
 * sbq_storage_get_queue_held
 *		sbq_storage_get_queue for a call that will store rows of the queue
 *		(sessions, their state, dead letters resubmitted), whose caller holds
 *		the queue name's lock in share mode, so no delete of the queue can
 *		commit from now on: under READ COMMITTED the lookup's fresh snapshot
 *		sees every delete that committed before, and a transaction snapshot
 *		locks the queue's row (sbq_find_queue_held). Only those isolation
 *		levels pay for the row lock.
 */
void
sbq_storage_get_queue_held(const SbqAddress *addr, SbqQueue *queue, int16 rights)
{
	if (!IsolationUsesXactSnapshot())
	{
		sbq_storage_get_queue(addr, queue, rights);
		return;
	}
	if (!sbq_find_queue_held(addr, queue))
		sbq_queue_not_found(addr);
	sbq_rights_require(queue, rights);
}

/*
 * sbq_storage_get_queue_to_send
 *		sbq_storage_get_queue for a call that will store messages in the
 *		queue or topic, as sbq_storage_get_queue_held: the caller needs the
 *		right to send.
 */
void
sbq_storage_get_queue_to_send(const SbqAddress *addr, SbqQueue *queue)
{
	if (!IsolationUsesXactSnapshot())
	{
		/* a topic this backend sent to: no look at sbq.queues for it */
		if (addr->subqueue == SBQ_SUBQUEUE_MAIN && sbq_topic_cache_lookup(addr->key, queue))
		{
			sbq_rights_require(queue, SBQ_RIGHT_SEND);
			return;
		}
		sbq_storage_get_queue_or_topic(addr, queue, SBQ_RIGHT_SEND);
		sbq_refuse_subscription_send(addr, queue);
		return;
	}
	if (!sbq_find_queue_held(addr, queue) && !sbq_storage_find_topic(addr->key, true, queue))
		sbq_queue_not_found(addr);
	sbq_rights_require(queue, SBQ_RIGHT_SEND);
	sbq_refuse_subscription_send(addr, queue);
}

/*
 * sbq_storage_get_queue
 *		sbq_storage_find_queue, or SB001 when the queue does not exist, and
 *		42501 when the caller holds none of the rights asked for on it
 *		(SBQ_RIGHT_*, or'ed).
 */
void
sbq_storage_get_queue(const SbqAddress *addr, SbqQueue *queue, int16 rights)
{
	if (!sbq_storage_find_queue(addr, queue))
		sbq_queue_not_found(addr);
	sbq_rights_require(queue, rights);
}

/*
 * sbq_storage_recheck_queue
 *		For a call that waits: the queue it looked up (sbq_storage_get_queue)
 *		and the caller's rights on it, again. Looked up anew only when
 *		something changed the queues or their rights since (a revoke, a
 *		delete), so that a long wait does not allocate at every look; the
 *		caller's roles are asked again every time (a membership revoked).
 */
void
sbq_storage_recheck_queue(const SbqAddress *addr, SbqQueue *queue, int16 rights)
{
	AcceptInvalidationMessages();
	if (sbq_queue_cache == NULL || strlen(addr->key) > SBQ_MAX_NAME_LEN ||
		hash_search(sbq_queue_cache, addr->key, HASH_FIND, NULL) == NULL)
	{
		sbq_storage_get_queue(addr, queue, rights);
		return;
	}
	sbq_rights_require(queue, rights);
}

/*
 * sbq_storage_queue_tuple
 *		The sbq_queue_properties row of a queue, formed in mcxt (which must
 *		outlive the storage section); NULL when the queue is gone (a call that
 *		holds no lock on its name may meet a delete that committed since it
 *		looked the queue up).
 */
HeapTuple
sbq_storage_queue_tuple(int32 queue_id, TupleDesc tupdesc, MemoryContext mcxt)
{
	Datum		args[1];
	Datum		values[16];
	bool		nulls[16];
	MemoryContext oldcxt;
	HeapTuple	tuple;
	int			natts;
	int			i;

	args[0] = Int32GetDatum(queue_id);
	if (sbq_exec(sbq_queue_stmt(&stmt_queue_row, &stmt_queue_row_retry), args, NULL) != 1)
		return NULL;
	/* 12 columns before 0.4, 13 to 0.8, 16 since: the installed type and statement agree */
	natts = SPI_tuptable->tupdesc->natts;
	if (tupdesc->natts != natts || natts > (int) lengthof(values))
		elog(ERROR, "sbq_queue_properties has %d columns, expected %d", tupdesc->natts, natts);
	for (i = 0; i < natts; i++)
		values[i] = sbq_col(0, i + 1, &nulls[i]);
	oldcxt = MemoryContextSwitchTo(mcxt);
	tuple = heap_form_tuple(tupdesc, values, nulls);
	MemoryContextSwitchTo(oldcxt);
	return tuple;
}

/*
 * Queue properties as statement arguments, in the order of stmt_update_queue
 * ($2 .. $10), which stmt_create_queue shares from its $3 on.
 */
static void
sbq_queue_args(const SbqQueue *p, Datum *values, bool *nulls)
{
	values[0] = IntervalPGetDatum(&p->lock_duration);
	nulls[0] = false;
	values[1] = Int32GetDatum(p->max_delivery_count);
	nulls[1] = false;
	values[2] = IntervalPGetDatum(&p->default_ttl);
	nulls[2] = !p->has_default_ttl;
	values[3] = BoolGetDatum(p->dlq_on_expiration);
	nulls[3] = false;
	values[4] = IntervalPGetDatum(&p->dup_window);
	nulls[4] = !p->has_dup_window;
	values[5] = BoolGetDatum(p->requires_session);
	nulls[5] = false;
	values[6] = p->forward_to ? CStringGetTextDatum(p->forward_to) : (Datum) 0;
	nulls[6] = p->forward_to == NULL;
	values[7] = p->forward_dlq_to ? CStringGetTextDatum(p->forward_dlq_to) : (Datum) 0;
	nulls[7] = p->forward_dlq_to == NULL;
	values[8] = Int32GetDatum(p->max_message_size);
	nulls[8] = false;
}

/*
 * The properties that later versions added, as statement arguments:
 * dead_letter_ttl (0.4), retry_delay, retry_backoff, max_retry_delay (0.9).
 * A statement for older SQL takes the ones it knows, from the front.
 */
static void
sbq_queue_later_args(const SbqQueue *p, Datum *values, bool *nulls)
{
	values[0] = IntervalPGetDatum(&p->dead_letter_ttl);
	nulls[0] = !p->has_dead_letter_ttl;
	values[1] = IntervalPGetDatum(&p->retry_delay);
	nulls[1] = !p->has_retry_delay;
	values[2] = BoolGetDatum(p->retry_backoff);
	nulls[2] = false;
	values[3] = IntervalPGetDatum(&p->max_retry_delay);
	nulls[3] = !p->has_max_retry_delay;
}

/*
 * sbq_storage_create_queue
 *		Store a new queue; the caller holds the name lock and has checked
 *		that the name is free. Returns its id.
 */
int32
sbq_storage_create_queue(const char *name, const char *key, const SbqQueue *props)
{
	Datum		values[16];
	bool		nulls[16];
	int32		queue_id;
	bool		isnull;

	values[0] = CStringGetTextDatum(name);
	nulls[0] = false;
	values[1] = CStringGetTextDatum(key);
	nulls[1] = false;
	sbq_queue_args(props, values + 2, nulls + 2);
	values[11] = TimestampTzGetDatum(GetCurrentTimestamp());
	nulls[11] = false;
	sbq_queue_later_args(props, values + 12, nulls + 12);
	if (sbq_exec(sbq_queue_stmt(&stmt_create_queue, &stmt_create_queue_retry),
				 values, nulls) != 1)
		elog(ERROR, "could not create queue \"%s\"", name);
	queue_id = DatumGetInt32(sbq_col(0, 1, &isnull));
	sbq_rights_created(queue_id);
	sbq_queue_cache_changed();
	return queue_id;
}

/*
 * sbq_storage_update_queue
 *		Store new properties for an existing queue.
 */
void
sbq_storage_update_queue(const SbqQueue *props)
{
	Datum		values[15];
	bool		nulls[15];

	values[0] = Int32GetDatum(props->queue_id);
	nulls[0] = false;
	sbq_queue_args(props, values + 1, nulls + 1);
	values[10] = TimestampTzGetDatum(GetCurrentTimestamp());
	nulls[10] = false;
	sbq_queue_later_args(props, values + 11, nulls + 11);
	(void) sbq_exec(sbq_queue_stmt(&stmt_update_queue, &stmt_update_queue_retry),
					values, nulls);
	sbq_queue_cache_changed();
}

/*
 * sbq_storage_delete_queue
 *		Drop a queue with its messages, dead letters and counters.
 */
void
sbq_storage_delete_queue(int32 queue_id)
{
	Datum		values[1];

	values[0] = Int32GetDatum(queue_id);
	/* the rights first: the queue's row goes with its messages below */
	sbq_rights_dropped(queue_id);
	(void) sbq_exec_latest(&stmt_delete_queue, values, NULL);
	(void) sbq_exec_latest(&stmt_delete_queue_moved, values, NULL);
	if (sbq_sessions_installed())
		(void) sbq_exec_latest(&stmt_delete_sessions, values, NULL);
	/* the leases of its messages go at commit (a claim made since sees the delete) */
	(void) sbq_lease_take_queue(queue_id, -1);
	sbq_qstate_forget(sbq_storage_epoch(), queue_id);
	sbq_queue_cache_changed();
}

/*
 * sbq_storage_purge
 *		Delete every message of a queue (or of its dead-letter sub-queue).
 */
int64
sbq_storage_purge(const SbqQueue *queue, int16 subqueue)
{
	Datum		values[2];
	SbqCounts	counts = {0};
	int64		n;

	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = Int16GetDatum(subqueue);
	n = (int64) sbq_exec_in(&stmt_purge, subqueue, values, NULL);
	if (queue->requires_session && subqueue == SBQ_SUBQUEUE_MAIN && n > 0)
		sbq_session_purged(queue);

	/*
	 * The leases of its messages go at commit (a claim made since sees the
	 * delete), and their deliveries, over now, are counted.
	 */
	counts.received = sbq_lease_take_queue(queue->queue_id, subqueue);
	if (counts.received > 0)
		sbq_add_counts(queue->queue_id, &counts);
	return n;
}

/*
 * sbq_all_queues
 *		Every queue of the database, in queue id order, into *queues (in the
 *		caller's memory context); returns how many.
 */
int
sbq_all_queues(SbqQueue **queues)
{
	uint64		n = sbq_exec(sbq_queue_stmt(&stmt_all_queues, &stmt_all_queues_retry),
						  NULL, NULL);
	uint64		q;

	*queues = palloc(sizeof(SbqQueue) * Max(n, 1));
	for (q = 0; q < n; q++)
		sbq_queue_from_row(q, &(*queues)[q]);
	return (int) n;
}

#define TOPIC_QUEUES \
	"SELECT " QUEUE_COLS_RETRY ", (SELECT s.dead_lettering_on_filter_evaluation_exceptions" \
	"  FROM sbq.subscriptions s WHERE s.queue_id = q.queue_id)" \
	" FROM sbq.queues q" \
	" WHERE q.queue_id IN (SELECT s.queue_id FROM sbq.subscriptions s WHERE s.topic_id = $1)" \
	" ORDER BY q.queue_id"
static SbqStatement stmt_topic_queues = {"subscription queues of a topic", 1, {INT4OID},
	TOPIC_QUEUES
};

/*
 * A sender under a transaction snapshot, as for queues: a subscription
 * deleted after the snapshot is a serialization error, not a copy left in a
 * queue that is gone.
 */
static SbqStatement stmt_topic_queues_share = {"subscription queues of a topic to send", 1,
	{INT4OID},
	TOPIC_QUEUES " FOR SHARE OF q"
};

/*
 * sbq_storage_topic_queues
 *		The subscriptions of a topic as queues, in the order they were made,
 *		into *subs, and whether each dead-letters on a filter's error into
 *		*dlq_on_errors (both in the caller's memory context); returns how
 *		many.
 */
int
sbq_storage_topic_queues(int32 topic_id, SbqQueue **subs, bool **dlq_on_errors)
{
	Datum		values[1];
	uint64		n;
	uint64		i;
	MemoryContext old;

	values[0] = Int32GetDatum(topic_id);
	n = sbq_exec(IsolationUsesXactSnapshot() ? &stmt_topic_queues_share : &stmt_topic_queues,
				 values, NULL);
	old = MemoryContextSwitchTo(sbq_storage_caller_context());
	*subs = palloc(sizeof(SbqQueue) * Max(n, 1));
	*dlq_on_errors = palloc(sizeof(bool) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		bool		isnull;

		sbq_queue_from_row(i, &(*subs)[i]);
		(*dlq_on_errors)[i] = DatumGetBool(sbq_col(i, 16, &isnull));
	}
	MemoryContextSwitchTo(old);
	return (int) n;
}

/* the first message of the queue in the receive index's order (plan_key.c) */
static SbqStatement stmt_queue_has_messages = {"queue holds messages", 1, {INT4OID},
	"SELECT (SELECT 1 FROM sbq.messages WHERE queue_id = $1 AND subqueue = 0"
	"         ORDER BY queue_id, subqueue, state, sequence_number LIMIT 1) IS NOT NULL"
};

/* sbq_storage_queue_has_messages: whether a queue's main queue holds a message. */
bool
sbq_storage_queue_has_messages(int32 queue_id)
{
	Datum		arg = Int32GetDatum(queue_id);
	bool		isnull;

	(void) sbq_exec_latest(&stmt_queue_has_messages, &arg, NULL);
	return DatumGetBool(sbq_col(0, 1, &isnull));
}

/*
 * sbq_storage_find_to_forward
 *		The queue or topic a forwarding entity names, looked up as a send looks
 *		its target up but without the caller's right (forwarding is the
 *		entity's): under a transaction snapshot its row is locked, so that one
 *		deleted since is a serialization error. The caller holds its name's
 *		lock in share mode. False when there is none.
 */
bool
sbq_storage_find_to_forward(const SbqAddress *addr, SbqQueue *queue)
{
	Datum		values[1];

	if (!IsolationUsesXactSnapshot())
		return sbq_topic_cache_lookup(addr->key, queue) ||
			sbq_storage_find_queue(addr, queue) ||
			sbq_storage_find_topic(addr->key, false, queue);
	values[0] = CStringGetTextDatum(addr->key);
	if (sbq_exec(sbq_queue_stmt(&stmt_find_queue_share, &stmt_find_queue_share_retry),
				 values, NULL) == 0)
		return sbq_storage_find_topic(addr->key, true, queue);
	sbq_queue_from_row(0, queue);
	sbq_rights_load(queue);
	return true;
}
