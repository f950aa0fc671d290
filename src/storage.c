/*-------------------------------------------------------------------------
 *
 * storage.c
 *	  The storage module: every read and write of queue state.
 *
 * The SQL-callable functions in api.c check their arguments and then call
 * the functions here, between sbq_storage_begin() and sbq_storage_end(). This
 * is the only file that knows the tables of the schema sbq; a faster storage
 * design replaces this file and leaves the SQL surface alone.
 *
 * Joins back to sbq.messages also carry "sequence_number = ANY(ARRAY(...))"
 * and the receive orders by the whole receive index key, which the primary
 * key cannot provide: a generic plan made on an empty table can then still not
 * walk a whole index, whichever side of a join it puts the table on.
 *
 * Queries go through SPI with plans prepared once per backend and kept
 * (SPI_keepplan), always generic (CURSOR_OPT_GENERIC_PLAN), so a call never
 * pays for planning. Every query runs under a GUC nest level that pins
 * search_path to pg_catalog and turns off sequential, bitmap, hash and merge
 * plans: a plan made or remade while a queue table is empty and freshly
 * analyzed still walks the indexes, so a receive costs the same with a
 * thousand or a million messages queued.
 *
 * Time: "now" is the wall clock read once per call (GetCurrentTimestamp), not
 * the transaction start, so a lock taken late in a long transaction still
 * lasts its full duration and a lock that has run out is seen to have run out.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/storage.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "nodes/value.h"
#include "parser/parse_func.h"
#include "utils/syscache.h"
#include "common/int.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/itemptr.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/tuplestore.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "lease.h"
#include "qstate.h"
#include "sbqueue.h"
#include "wait.h"

/* The prepared statements, by number. */
typedef enum SbqPlanId
{
	PLAN_FIND_QUEUE,
	PLAN_FIND_QUEUE_SHARE,
	PLAN_QUEUE_ROW,
	PLAN_CREATE_QUEUE,
	PLAN_UPDATE_QUEUE,
	PLAN_DELETE_QUEUE,
	PLAN_PURGE,
	PLAN_SEND_ONE,
	PLAN_SEND_MANY,
	PLAN_RECEIVE_LOCK,
	PLAN_RECEIVE_DELETE,
	PLAN_PEEK,
	PLAN_COMPLETE,
	PLAN_COMPLETE_MANY,
	PLAN_LOCK_FOR_SETTLE,
	PLAN_UNLOCK,
	PLAN_DEADLETTER,
	PLAN_DELETE_ONE,
	PLAN_RENEW,
	PLAN_COUNT,
	PLAN_NEXT_SEQUENCE,
	PLAN_DEDUP_CLAIM,
	PLAN_DEDUP_FIRST,
	PLAN_ACTIVATE,
	PLAN_CANCEL_SCHEDULED,
	PLAN_DEFERRED_CANDIDATES,
	PLAN_LOCK_DEFERRED,
	PLAN_RESUBMIT,
	PLAN_ALL_QUEUES,
	PLAN_MAINTAIN_LOCKS,
	PLAN_MAINTAIN_TTL,
	PLAN_FORGET_DUPLICATES,
	PLAN_LEASE_CANDIDATES,
	PLAN_LEASE_STORE,
	PLAN_LEASE_DEADLETTER,
	PLAN_LEASE_DROP,
	PLAN_LEASE_COMPLETE,
	PLAN_LEASE_COMPLETE_MANY,
	PLAN_ROW_FOR_SETTLE,
	PLAN_ROW_EXISTS,
	PLAN_NEXT_DUE,
	PLAN_NO_PREPARED,
	PLAN_BELOW_HEAD,
	PLAN_QUEUES_EXIST,
	SBQ_NUM_PLANS
} SbqPlanId;

typedef struct SbqPlanDef
{
	const char *sql;
	int			nargs;
	Oid			argtypes[20];
} SbqPlanDef;

/* A time to live this long never runs out (30-day months, as intervals compare). */
#define SBQ_NEVER_EXPIRES		"10000 years"
#define SBQ_NEVER_EXPIRES_USECS	((int64) 10000 * MONTHS_PER_YEAR * DAYS_PER_MONTH * USECS_PER_DAY)

/*
 * The columns of sbq_message, in its order, from the row alias m. The three
 * lock columns vary with the statement.
 */
#define MSG_COLS(token, until, count) \
	"m.sequence_number, m.message_id, " token " AS lock_token, " \
	until " AS locked_until, " count " AS delivery_count, " \
	"m.enqueued_time, m.scheduled_enqueue_time, m.expires_at, m.time_to_live, " \
	"CASE m.state WHEN 0 THEN 'active'::text WHEN 1 THEN 'deferred'::text " \
	"ELSE 'scheduled'::text END AS state, " \
	"m.session_id, m.correlation_id, m.subject, m.content_type, m.reply_to, " \
	"m.reply_to_session_id, m.to_address, m.application_properties, m.body, " \
	"m.dead_letter_reason, m.dead_letter_error_description, m.dead_letter_source"
#define SBQ_MESSAGE_NATTS 22

#define QUEUE_COLS \
	"queue_id, name, lock_duration, max_delivery_count, default_message_ttl, " \
	"dead_lettering_on_message_expiration, duplicate_detection_window, " \
	"requires_session, forward_to, forward_dead_lettered_messages_to, max_message_size"

#define INSERT_MESSAGE_COLS \
	"INSERT INTO sbq.messages (sequence_number, queue_id, subqueue, state, " \
	"delivery_count, enqueued_time, scheduled_enqueue_time, expires_at, time_to_live, " \
	"message_id, session_id, correlation_id, subject, content_type, reply_to, " \
	"reply_to_session_id, to_address, application_properties, body) "

#define NEXT_SEQUENCE "nextval('sbq.message_seq'::regclass)"
#define INSERT_MESSAGE_VALUES(seq, body) \
	seq ", $1, 0, $2, 0, $3, $4, $5, $6, " \
	"coalesce($7, gen_random_uuid()::text), $8, $9, $10, $11, $12, $13, $14, $15, " body

/*
 * The head of the receive queue: up to $4 messages in sequence order that are
 * active and not under a valid lock, skipping rows another transaction holds.
 * Rows whose expired lock was their last allowed delivery (over) or whose time
 * to live has passed (expired) are taken too, and settled by the statement
 * instead of being handed out.
 *	$1 queue_id, $2 subqueue, $3 now, $4 limit, $5 max_delivery_count,
 *	$6 new locked_until, $7 dead-letter on expiration, $8 queue name,
 *	$9 max delivery description
 */
/*
 * A statement that moves messages through the table skips messages that have
 * an entry in the lease table (lease.c): a lease, valid or expired, or a
 * leasing receive's claim. It asks twice: in the WHERE clause of the scan
 * that locks the rows (last, since it is costly, so only about rows that
 * qualify otherwise), which keeps leased messages out of its LIMIT, and again
 * in the statement that writes each row, after the row lock is held: a
 * leasing receive claims first and then looks for row locks, so one of the
 * two always sees the other. Always true without shared memory.
 */
#define LEASE_SLOT "sbq.lease_slot(m.sequence_number)"

#define RECEIVE_HEAD \
	"WITH c AS MATERIALIZED (" \
	"  SELECT m.sequence_number," \
	"         (m.subqueue = 0 AND m.locked_until IS NOT NULL" \
	"          AND m.delivery_count >= $5) AS over," \
	"         (m.subqueue = 0 AND m.expires_at IS NOT NULL" \
	"          AND m.expires_at <= $3) AS expired" \
	"    FROM sbq.messages m" \
	"   WHERE m.queue_id = $1 AND m.subqueue = $2 AND m.state = 0" \
	"     AND (m.locked_until IS NULL OR m.locked_until <= $3)" \
	"     AND " LEASE_SLOT \
	"   ORDER BY m.queue_id, m.subqueue, m.state, m.sequence_number" \
	"   LIMIT $4" \
	"   FOR UPDATE OF m SKIP LOCKED), "
#define RECEIVE_TAIL \
	", d AS (" \
	"  UPDATE sbq.messages m" \
	"     SET subqueue = 1, state = 0, lock_token = NULL, locked_until = NULL," \
	"         dead_letter_reason = CASE WHEN c.over THEN 'MaxDeliveryCountExceeded'" \
	"                                   ELSE 'TTLExpiredException' END," \
	"         dead_letter_error_description = CASE WHEN c.over THEN $9" \
	"                 ELSE 'The message expired and was dead-lettered.' END," \
	"         dead_letter_source = $8" \
	"    FROM c" \
	"   WHERE m.sequence_number = c.sequence_number" \
	"     AND m.sequence_number = ANY(ARRAY(SELECT sequence_number FROM c))" \
	"     AND (c.over OR (c.expired AND $7)) AND " LEASE_SLOT \
	"  RETURNING c.over), " \
	"x AS (" \
	"  DELETE FROM sbq.messages m USING c" \
	"   WHERE m.sequence_number = c.sequence_number" \
	"     AND m.sequence_number = ANY(ARRAY(SELECT sequence_number FROM c))" \
	"     AND c.expired AND NOT c.over AND NOT $7 AND " LEASE_SLOT \
	"  RETURNING 1) " \
	"SELECT l.*, s.n_over, s.n_expired_dead, s.n_dropped" \
	"  FROM (SELECT (SELECT count(*) FROM d WHERE d.over)::int4 AS n_over," \
	"               (SELECT count(*) FROM d WHERE NOT d.over)::int4 AS n_expired_dead," \
	"               (SELECT count(*) FROM x)::int4 AS n_dropped) s" \
	"  LEFT JOIN l ON true" \
	" ORDER BY l.sequence_number"

#define RECEIVE_ARGS {INT4OID, INT2OID, TIMESTAMPTZOID, INT4OID, INT4OID, \
		TIMESTAMPTZOID, BOOLOID, TEXTOID, TEXTOID}

/* The valid-lock condition: $1 sequence, $2 queue, $3 subqueue, $4 token, $5 now */
#define VALID_LOCK \
	"m.sequence_number = $1 AND m.queue_id = $2 AND m.subqueue = $3" \
	" AND m.lock_token = $4 AND m.locked_until > $5"

/* application_properties with the object $2 merged in at the top level */
#define MERGE_PROPS(param) \
	"CASE WHEN " param "::jsonb IS NULL THEN m.application_properties" \
	" ELSE coalesce(m.application_properties, '{}'::jsonb) || " param "::jsonb END"

/*
 * The (sequence number, count, row version) triples $1, $2, $3 of the lease
 * statements. A leasing receive passes the row versions its scan read: a
 * row that changed since (a settlement of an expired row lock that waited
 * for the row, say) is not written. Maintenance passes none: it holds the
 * leases it ends, so nothing else can change those rows.
 */
#define LEASE_TRIPLES \
	"WITH c AS MATERIALIZED (" \
	"  SELECT u.seq, u.cnt, u.tid" \
	"    FROM unnest($1::int8[], $2::int4[], $3::tid[]) AS u(seq, cnt, tid)) "
#define LEASE_ROW_AS_SEEN "(c.tid IS NULL OR m.ctid = c.tid)"

static const SbqPlanDef sbq_plan_defs[SBQ_NUM_PLANS] = {
	[PLAN_FIND_QUEUE] = {
		"SELECT " QUEUE_COLS " FROM sbq.queues WHERE name_key = $1",
		1, {TEXTOID}
	},
	[PLAN_FIND_QUEUE_SHARE] = {
		/* a sender under a transaction snapshot: see PLAN_FIND_QUEUE's caller */
		"SELECT " QUEUE_COLS " FROM sbq.queues WHERE name_key = $1 FOR KEY SHARE",
		1, {TEXTOID}
	},
	[PLAN_QUEUE_ROW] = {
		"SELECT name, lock_duration, max_delivery_count, default_message_ttl,"
		" dead_lettering_on_message_expiration, duplicate_detection_window,"
		" requires_session, forward_to, forward_dead_lettered_messages_to,"
		" max_message_size, created_at, updated_at"
		" FROM sbq.queues WHERE queue_id = $1",
		1, {INT4OID}
	},
	[PLAN_CREATE_QUEUE] = {
		"INSERT INTO sbq.queues (name, name_key, lock_duration, max_delivery_count,"
		" default_message_ttl, dead_lettering_on_message_expiration,"
		" duplicate_detection_window, requires_session, forward_to,"
		" forward_dead_lettered_messages_to, max_message_size, created_at, updated_at)"
		" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12)"
		" RETURNING queue_id",
		12, {TEXTOID, TEXTOID, INTERVALOID, INT4OID, INTERVALOID, BOOLOID,
		INTERVALOID, BOOLOID, TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID}
	},
	[PLAN_UPDATE_QUEUE] = {
		"UPDATE sbq.queues SET lock_duration = $2, max_delivery_count = $3,"
		" default_message_ttl = $4, dead_lettering_on_message_expiration = $5,"
		" duplicate_detection_window = $6, requires_session = $7, forward_to = $8,"
		" forward_dead_lettered_messages_to = $9, max_message_size = $10,"
		" updated_at = $11 WHERE queue_id = $1",
		11, {INT4OID, INTERVALOID, INT4OID, INTERVALOID, BOOLOID, INTERVALOID,
		BOOLOID, TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID}
	},
	[PLAN_DELETE_QUEUE] = {
		"WITH m AS (DELETE FROM sbq.messages WHERE queue_id = $1),"
		" c AS (DELETE FROM sbq.queue_counters WHERE queue_id = $1),"
		" d AS (DELETE FROM sbq.duplicate_ids WHERE queue_id = $1)"
		" DELETE FROM sbq.queues WHERE queue_id = $1",
		1, {INT4OID}
	},
	[PLAN_PURGE] = {
		"DELETE FROM sbq.messages WHERE queue_id = $1 AND subqueue = $2",
		2, {INT4OID, INT2OID}
	},
	[PLAN_SEND_ONE] = {
		/* $17: the sequence number duplicate detection drew, or NULL */
		INSERT_MESSAGE_COLS "VALUES ("
		INSERT_MESSAGE_VALUES("coalesce($17, " NEXT_SEQUENCE ")", "$16") ")"
		" RETURNING sequence_number",
		17, {INT4OID, INT2OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
			INTERVALOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID,
		TEXTOID, TEXTOID, JSONBOID, BYTEAOID, INT8OID}
	},
	[PLAN_SEND_MANY] = {
		INSERT_MESSAGE_COLS "SELECT " INSERT_MESSAGE_VALUES(NEXT_SEQUENCE, "u.body")
		" FROM unnest($16::bytea[]) WITH ORDINALITY AS u(body, ord)"
		" ORDER BY u.ord RETURNING sequence_number",
		16, {INT4OID, INT2OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
			INTERVALOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID,
		TEXTOID, TEXTOID, JSONBOID, BYTEAARRAYOID}
	},
	[PLAN_RECEIVE_LOCK] = {
		RECEIVE_HEAD
		"l AS ("
		"  UPDATE sbq.messages m"
		"     SET lock_token = sbq.new_lock_token(m.sequence_number),"
		"         locked_until = $6, delivery_count = m.delivery_count + 1"
		"    FROM c"
		"   WHERE m.sequence_number = c.sequence_number AND NOT c.over AND NOT c.expired"
		"     AND m.sequence_number = ANY(ARRAY(SELECT sequence_number FROM c))"
		"     AND " LEASE_SLOT
		"  RETURNING " MSG_COLS("m.lock_token", "m.locked_until", "m.delivery_count") ")"
		RECEIVE_TAIL,
		9, RECEIVE_ARGS
	},
	[PLAN_RECEIVE_DELETE] = {
		RECEIVE_HEAD
		"l AS ("
		"  DELETE FROM sbq.messages m USING c"
		"   WHERE m.sequence_number = c.sequence_number AND NOT c.over AND NOT c.expired"
		"     AND m.sequence_number = ANY(ARRAY(SELECT sequence_number FROM c))"
		"     AND " LEASE_SLOT
		"  RETURNING " MSG_COLS("NULL::uuid", "NULL::timestamptz", "m.delivery_count + 1") ")"
		RECEIVE_TAIL,
		9, RECEIVE_ARGS
	},
	[PLAN_PEEK] = {
		/* one ordered index scan per state, merged: peek shows every state */
		"SELECT " MSG_COLS("NULL::uuid",
						   "CASE WHEN m.locked_until > $4 THEN m.locked_until END",
						   "m.delivery_count")
		" FROM ((SELECT * FROM sbq.messages WHERE queue_id = $1 AND subqueue = $2"
		"         AND state = 0 AND sequence_number >= $3"
		"         ORDER BY sequence_number LIMIT $5)"
		"       UNION ALL"
		"       (SELECT * FROM sbq.messages WHERE queue_id = $1 AND subqueue = $2"
		"         AND state = 1 AND sequence_number >= $3"
		"         ORDER BY sequence_number LIMIT $5)"
		"       UNION ALL"
		"       (SELECT * FROM sbq.messages WHERE queue_id = $1 AND subqueue = $2"
		"         AND state = 2 AND sequence_number >= $3"
		"         ORDER BY sequence_number LIMIT $5)) m"
		" ORDER BY m.sequence_number LIMIT $5",
		5, {INT4OID, INT2OID, INT8OID, TIMESTAMPTZOID, INT4OID}
	},
	/*
	 * The settlements of locks stored in the rows return the lock's expiry:
	 * the caller judges it again with a clock read after the statement, when
	 * the row lock is held (the statement may have waited for it).
	 */
	[PLAN_COMPLETE] = {
		"DELETE FROM sbq.messages m WHERE " VALID_LOCK
		" RETURNING m.locked_until",
		5, {INT8OID, INT4OID, INT2OID, UUIDOID, TIMESTAMPTZOID}
	},
	[PLAN_COMPLETE_MANY] = {
		"DELETE FROM sbq.messages m"
		" WHERE m.sequence_number = ANY($1) AND m.queue_id = $2 AND m.subqueue = $3"
		"   AND m.lock_token = ANY($4) AND m.locked_until > $5"
		" RETURNING m.lock_token, m.locked_until",
		5, {INT8ARRAYOID, INT4OID, INT2OID, UUIDARRAYOID, TIMESTAMPTZOID}
	},
	[PLAN_LOCK_FOR_SETTLE] = {
		"SELECT m.delivery_count, m.state, m.expires_at, m.locked_until FROM sbq.messages m"
		" WHERE " VALID_LOCK " FOR UPDATE",
		5, {INT8OID, INT4OID, INT2OID, UUIDOID, TIMESTAMPTZOID}
	},
	[PLAN_UNLOCK] = {
		/* $3: the new state (deferred), or NULL to keep it; $4 the delivery count */
		"UPDATE sbq.messages m SET lock_token = NULL, locked_until = NULL,"
		" state = coalesce($3, m.state), delivery_count = GREATEST(m.delivery_count, $4),"
		" application_properties = " MERGE_PROPS("$2")
		" WHERE m.sequence_number = $1",
		4, {INT8OID, JSONBOID, INT2OID, INT4OID}
	},
	[PLAN_DEADLETTER] = {
		"UPDATE sbq.messages m SET subqueue = 1, state = 0, lock_token = NULL,"
		" locked_until = NULL, dead_letter_reason = $2,"
		" dead_letter_error_description = $3, dead_letter_source = $4,"
		" application_properties = " MERGE_PROPS("$5") ","
		" delivery_count = GREATEST(m.delivery_count, $6)"
		" WHERE m.sequence_number = $1",
		6, {INT8OID, TEXTOID, TEXTOID, TEXTOID, JSONBOID, INT4OID}
	},
	[PLAN_DELETE_ONE] = {
		"DELETE FROM sbq.messages WHERE sequence_number = $1",
		1, {INT8OID}
	},
	[PLAN_RENEW] = {
		"UPDATE sbq.messages m SET locked_until = $6 WHERE " VALID_LOCK
		" RETURNING m.locked_until",
		6, {INT8OID, INT4OID, INT2OID, UUIDOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
	},
	[PLAN_COUNT] = {
		"INSERT INTO sbq.queue_counters AS qc (queue_id, shard, sent, received,"
		" completed, abandoned, deferred, dead_lettered, expired)"
		" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
		" ON CONFLICT (queue_id, shard) DO UPDATE SET"
		" sent = qc.sent + excluded.sent, received = qc.received + excluded.received,"
		" completed = qc.completed + excluded.completed,"
		" abandoned = qc.abandoned + excluded.abandoned,"
		" deferred = qc.deferred + excluded.deferred,"
		" dead_lettered = qc.dead_lettered + excluded.dead_lettered,"
		" expired = qc.expired + excluded.expired",
		9, {INT4OID, INT4OID, INT8OID, INT8OID, INT8OID, INT8OID, INT8OID, INT8OID, INT8OID}
	},
	[PLAN_NEXT_SEQUENCE] = {
		"SELECT " NEXT_SEQUENCE,
		0, {InvalidOid}
	},
	[PLAN_DEDUP_CLAIM] = {
		/*
		 * Claim a message id for a new message: a row comes back when the id
		 * is new or its last use is older than the window ($5, the cutoff).
		 * A concurrent send of the same id waits here for the first to end.
		 */
		"INSERT INTO sbq.duplicate_ids AS d (queue_id, message_id, sequence_number, sent_at)"
		" VALUES ($1, $2, $3, $4)"
		" ON CONFLICT (queue_id, message_id) DO UPDATE"
		" SET sequence_number = excluded.sequence_number, sent_at = excluded.sent_at"
		" WHERE d.sent_at <= $5"
		" RETURNING d.sequence_number",
		5, {INT4OID, TEXTOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID}
	},
	[PLAN_DEDUP_FIRST] = {
		"SELECT sequence_number FROM sbq.duplicate_ids"
		" WHERE queue_id = $1 AND message_id = $2",
		2, {INT4OID, TEXTOID}
	},
	[PLAN_ACTIVATE] = {
		/*
		 * Scheduled messages that are due join the back of the queue: a new
		 * sequence number each, in the order of their scheduled times.
		 * $1 queue, $2 now, $3 limit
		 */
		"WITH c AS MATERIALIZED ("
		"  SELECT m.sequence_number, m.scheduled_enqueue_time FROM sbq.messages m"
		"   WHERE m.queue_id = $1 AND m.state = 2 AND m.scheduled_enqueue_time <= $2"
		"   ORDER BY m.scheduled_enqueue_time, m.sequence_number LIMIT $3"
		"   FOR UPDATE OF m SKIP LOCKED),"
		" n AS MATERIALIZED ("
		"  SELECT o.sequence_number AS old_seq, " NEXT_SEQUENCE " AS new_seq"
		"    FROM (SELECT c.sequence_number FROM c"
		"           ORDER BY c.scheduled_enqueue_time, c.sequence_number) o)"
		" UPDATE sbq.messages m SET sequence_number = n.new_seq, state = 0, enqueued_time = $2"
		"   FROM n WHERE m.sequence_number = n.old_seq"
		"    AND m.sequence_number = ANY(ARRAY(SELECT old_seq FROM n))"
		" RETURNING n.new_seq",
		3, {INT4OID, TIMESTAMPTZOID, INT4OID}
	},
	[PLAN_CANCEL_SCHEDULED] = {
		"DELETE FROM sbq.messages"
		" WHERE sequence_number = $1 AND queue_id = $2 AND subqueue = 0 AND state = 2",
		2, {INT8OID, INT4OID}
	},
	[PLAN_DEFERRED_CANDIDATES] = {
		"SELECT m.sequence_number, m.state, m.locked_until, m.delivery_count, m.expires_at"
		"  FROM sbq.messages m"
		" WHERE m.sequence_number = ANY($1) AND m.queue_id = $2 AND m.subqueue = $3"
		" FOR UPDATE SKIP LOCKED",
		3, {INT8ARRAYOID, INT4OID, INT2OID}
	},
	[PLAN_LOCK_DEFERRED] = {
		"WITH l AS ("
		"  UPDATE sbq.messages m"
		"     SET lock_token = sbq.new_lock_token(m.sequence_number),"
		"         locked_until = $2, delivery_count = m.delivery_count + 1"
		"   WHERE m.sequence_number = ANY($1)"
		"  RETURNING " MSG_COLS("m.lock_token", "m.locked_until", "m.delivery_count") ")"
		" SELECT * FROM l ORDER BY l.sequence_number",
		2, {INT8ARRAYOID, TIMESTAMPTZOID}
	},
	[PLAN_RESUBMIT] = {
		/*
		 * Dead letters back to the queue as new messages, in their old order.
		 * $1 queue, $2 now, $3 the sequence numbers or NULL for all
		 */
		"WITH c AS MATERIALIZED ("
		"  SELECT m.sequence_number FROM sbq.messages m"
		"   WHERE m.queue_id = $1 AND m.subqueue = 1"
		"     AND ($3::int8[] IS NULL OR m.sequence_number = ANY($3))"
		"     AND (m.locked_until IS NULL OR m.locked_until <= $2) AND " LEASE_SLOT
		"   ORDER BY m.sequence_number FOR UPDATE OF m SKIP LOCKED),"
		" n AS MATERIALIZED ("
		"  SELECT o.sequence_number AS old_seq, " NEXT_SEQUENCE " AS new_seq"
		"    FROM (SELECT c.sequence_number FROM c ORDER BY c.sequence_number) o)"
		" UPDATE sbq.messages m"
		"    SET sequence_number = n.new_seq, subqueue = 0, state = 0, delivery_count = 0,"
		"        lock_token = NULL, locked_until = NULL, enqueued_time = $2,"
		"        expires_at = CASE WHEN m.time_to_live < interval '" SBQ_NEVER_EXPIRES "'"
		"                          THEN $2 + m.time_to_live END,"
		"        dead_letter_reason = NULL,"
		"        dead_letter_error_description = NULL, dead_letter_source = NULL"
		"   FROM n WHERE m.sequence_number = n.old_seq AND " LEASE_SLOT
		" RETURNING n.old_seq, n.new_seq",
		3, {INT4OID, TIMESTAMPTZOID, INT8ARRAYOID}
	},
	[PLAN_ALL_QUEUES] = {
		"SELECT " QUEUE_COLS " FROM sbq.queues ORDER BY queue_id",
		0, {InvalidOid}
	},
	[PLAN_MAINTAIN_LOCKS] = {
		/*
		 * Expired locks among the first $4 active and the first $4 deferred
		 * messages of a queue (receives take from the head, so that is where
		 * locks are): dead-letter those on their last allowed delivery,
		 * release the others.
		 * $1 queue, $2 now, $3 max_delivery_count, $4 head, $5 limit,
		 * $6 queue name, $7 max delivery description
		 */
		"WITH head AS MATERIALIZED ("
		"  (SELECT sequence_number FROM sbq.messages"
		"    WHERE queue_id = $1 AND subqueue = 0 AND state = 0"
		"    ORDER BY sequence_number LIMIT $4)"
		"  UNION ALL"
		"  (SELECT sequence_number FROM sbq.messages"
		"    WHERE queue_id = $1 AND subqueue = 0 AND state = 1"
		"    ORDER BY sequence_number LIMIT $4)),"
		" c AS MATERIALIZED ("
		"  SELECT m.sequence_number, m.delivery_count >= $3 AS over"
		"    FROM head h JOIN sbq.messages m ON m.sequence_number = h.sequence_number"
		"   WHERE m.locked_until <= $2 AND " LEASE_SLOT
		"   LIMIT $5 FOR UPDATE OF m SKIP LOCKED),"
		" d AS ("
		"  UPDATE sbq.messages m"
		"     SET subqueue = 1, state = 0, lock_token = NULL, locked_until = NULL,"
		"         dead_letter_reason = 'MaxDeliveryCountExceeded',"
		"         dead_letter_error_description = $7, dead_letter_source = $6"
		"    FROM c WHERE m.sequence_number = c.sequence_number AND c.over"
		"     AND " LEASE_SLOT
		"  RETURNING 1),"
		" r AS ("
		"  UPDATE sbq.messages m SET lock_token = NULL, locked_until = NULL"
		"    FROM c WHERE m.sequence_number = c.sequence_number AND NOT c.over"
		"     AND " LEASE_SLOT
		"  RETURNING 1)"
		" SELECT (SELECT count(*) FROM d)::int4, (SELECT count(*) FROM r)::int4",
		7, {INT4OID, TIMESTAMPTZOID, INT4OID, INT4OID, INT4OID, TEXTOID, TEXTOID}
	},
	[PLAN_MAINTAIN_TTL] = {
		/*
		 * Messages whose time to live has passed and that no valid lock
		 * holds: dead-lettered or dropped, as the queue says.
		 * $1 queue, $2 now, $3 limit, $4 dead-letter on expiration, $5 name
		 */
		"WITH c AS MATERIALIZED ("
		"  SELECT m.sequence_number FROM sbq.messages m"
		"   WHERE m.queue_id = $1 AND m.subqueue = 0 AND m.expires_at IS NOT NULL"
		"     AND m.expires_at <= $2 AND m.state <> 2"
		"     AND (m.locked_until IS NULL OR m.locked_until <= $2) AND " LEASE_SLOT
		"   ORDER BY m.expires_at LIMIT $3 FOR UPDATE OF m SKIP LOCKED),"
		" d AS ("
		"  UPDATE sbq.messages m"
		"     SET subqueue = 1, state = 0, lock_token = NULL, locked_until = NULL,"
		"         dead_letter_reason = 'TTLExpiredException',"
		"         dead_letter_error_description = 'The message expired and was dead-lettered.',"
		"         dead_letter_source = $5"
		"    FROM c WHERE m.sequence_number = c.sequence_number AND $4"
		"     AND " LEASE_SLOT
		"  RETURNING 1),"
		" x AS ("
		"  DELETE FROM sbq.messages m USING c"
		"   WHERE m.sequence_number = c.sequence_number AND NOT $4"
		"     AND " LEASE_SLOT
		"  RETURNING 1)"
		" SELECT (SELECT count(*) FROM d)::int4, (SELECT count(*) FROM x)::int4",
		5, {INT4OID, TIMESTAMPTZOID, INT4OID, BOOLOID, TEXTOID}
	},
	[PLAN_FORGET_DUPLICATES] = {
		"WITH c AS ("
		"  SELECT d.message_id FROM sbq.duplicate_ids d"
		"   WHERE d.queue_id = $1 AND d.sent_at <= $2"
		"   ORDER BY d.sent_at LIMIT $3 FOR UPDATE SKIP LOCKED)"
		" DELETE FROM sbq.duplicate_ids d USING c"
		"  WHERE d.queue_id = $1 AND d.message_id = c.message_id",
		3, {INT4OID, TIMESTAMPTZOID, INT4OID}
	},
	[PLAN_LEASE_CANDIDATES] = {
		/*
		 * The head of the queue for a leasing receive: active messages that
		 * no lock holds, in sequence order, skipping rows that another
		 * transaction is changing or holds locked (as SKIP LOCKED would).
		 * Nothing is locked here; the caller claims each in shared memory and
		 * then checks that the row version it read is still the latest.
		 * $1 queue, $2 subqueue, $3 now, $4 limit, $5 where the head is (qstate.c)
		 */
		"SELECT " MSG_COLS("NULL::uuid", "NULL::timestamptz", "m.delivery_count") ","
		"       m.ctid, m.locked_until IS NOT NULL, m.expires_at"
		"  FROM sbq.messages m"
		" WHERE m.queue_id = $1 AND m.subqueue = $2 AND m.state = 0"
		"   AND m.sequence_number >= $5"
		"   AND sbq.lease_free(m.sequence_number, $3, m.xmax, m.locked_until)"
		" ORDER BY m.queue_id, m.subqueue, m.state, m.sequence_number"
		" LIMIT $4",
		5, {INT4OID, INT2OID, TIMESTAMPTZOID, INT4OID, INT8OID}
	},
	[PLAN_LEASE_STORE] = {
		/* store the delivery counts of expired leases (or row locks) and free the rows */
		LEASE_TRIPLES
		"UPDATE sbq.messages m"
		"   SET delivery_count = GREATEST(m.delivery_count, c.cnt),"
		"       lock_token = NULL, locked_until = NULL"
		"  FROM c WHERE m.sequence_number = c.seq AND m.sequence_number = ANY($1)"
		"   AND m.queue_id = $4 AND " LEASE_ROW_AS_SEEN
		" RETURNING m.sequence_number",
		4, {INT8ARRAYOID, INT4ARRAYOID, TIDARRAYOID, INT4OID}
	},
	[PLAN_LEASE_DEADLETTER] = {
		/* $4 queue, $5 reason, $6 description, $7 source (the queue's name) */
		LEASE_TRIPLES
		"UPDATE sbq.messages m"
		"   SET subqueue = 1, state = 0, lock_token = NULL, locked_until = NULL,"
		"       delivery_count = GREATEST(m.delivery_count, c.cnt),"
		"       dead_letter_reason = $5, dead_letter_error_description = $6,"
		"       dead_letter_source = $7"
		"  FROM c WHERE m.sequence_number = c.seq AND m.sequence_number = ANY($1)"
		"   AND m.queue_id = $4 AND m.subqueue = 0 AND " LEASE_ROW_AS_SEEN
		" RETURNING m.sequence_number",
		7, {INT8ARRAYOID, INT4ARRAYOID, TIDARRAYOID, INT4OID, TEXTOID, TEXTOID, TEXTOID}
	},
	[PLAN_LEASE_DROP] = {
		LEASE_TRIPLES
		"DELETE FROM sbq.messages m USING c"
		" WHERE m.sequence_number = c.seq AND m.sequence_number = ANY($1)"
		"   AND m.queue_id = $4 AND m.subqueue = 0 AND " LEASE_ROW_AS_SEEN
		" RETURNING m.sequence_number",
		4, {INT8ARRAYOID, INT4ARRAYOID, TIDARRAYOID, INT4OID}
	},
	[PLAN_LEASE_COMPLETE] = {
		"DELETE FROM sbq.messages m"
		" WHERE m.sequence_number = $1 AND m.queue_id = $2 AND m.subqueue = $3",
		3, {INT8OID, INT4OID, INT2OID}
	},
	[PLAN_LEASE_COMPLETE_MANY] = {
		"DELETE FROM sbq.messages m"
		" WHERE m.sequence_number = ANY($1) AND m.queue_id = $2 AND m.subqueue = $3"
		" RETURNING m.sequence_number",
		3, {INT8ARRAYOID, INT4OID, INT2OID}
	},
	[PLAN_ROW_FOR_SETTLE] = {
		"SELECT m.delivery_count, m.state, m.expires_at FROM sbq.messages m"
		" WHERE m.sequence_number = $1 AND m.queue_id = $2 AND m.subqueue = $3"
		" FOR UPDATE",
		3, {INT8OID, INT4OID, INT2OID}
	},
	[PLAN_NO_PREPARED] = {
		"SELECT NOT EXISTS (SELECT 1 FROM pg_catalog.pg_prepared_xacts p"
		"                    WHERE p.database = pg_catalog.current_database())",
		0, {InvalidOid}
	},
	[PLAN_BELOW_HEAD] = {
		/* maintenance's check of a head hint: an active message below it ($2) */
		"SELECT m.sequence_number FROM sbq.messages m"
		" WHERE m.queue_id = $1 AND m.subqueue = 0 AND m.state = 0"
		"   AND m.sequence_number < $2"
		" ORDER BY m.queue_id, m.subqueue, m.state, m.sequence_number"
		" LIMIT 1",
		2, {INT4OID, INT8OID}
	},
	[PLAN_NEXT_DUE] = {
		"SELECT min(m.scheduled_enqueue_time) FROM sbq.messages m"
		" WHERE m.queue_id = $1 AND m.state = 2",
		1, {INT4OID}
	},
	[PLAN_QUEUES_EXIST] = {
		"SELECT queue_id FROM sbq.queues WHERE queue_id = ANY($1)",
		1, {INT4ARRAYOID}
	},
	[PLAN_ROW_EXISTS] = {
		"SELECT 1 FROM sbq.messages m"
		" WHERE m.sequence_number = $1 AND m.queue_id = $2 AND m.subqueue = $3",
		3, {INT8OID, INT4OID, INT2OID}
	},
};

static SPIPlanPtr sbq_plans[SBQ_NUM_PLANS];

/*
 * Whether the installed SQL has the lease functions (0.3 and later): 1, 0,
 * or -1 when not known. A database still on older SQL (the library was
 * upgraded and ALTER EXTENSION UPDATE has not run yet) gets what that
 * version did: locks in the message rows, no lease in its statements. Any
 * change to pg_proc makes it unknown again; the kept plans are those of
 * sbq_plans_leases.
 */
static int	sbq_sql_leases = -1;
static int	sbq_plans_leases = -1;
static bool sbq_sql_callback = false;

/* How many rows one maintenance step (or a receive's activation) handles. */
#define SBQ_MAINTAIN_BATCH		1000

/* How far into a queue's head maintenance looks for expired locks. */
#define SBQ_MAINTAIN_HEAD		5000

/* GUC nest level of the current storage section, 0 when outside one */
static int	sbq_guc_nest_level = 0;

/* the memory context current when the storage section was opened */
static MemoryContext sbq_caller_cxt = NULL;


static Oid	sbq_storage_epoch_locked(void);

static void
sbq_sql_inval(Datum arg, int cacheid, uint32 hashvalue)
{
	sbq_sql_leases = -1;
}

/*
 * sbq_sql_has_leases
 *		Whether the installed SQL has the lease functions; when that changed,
 *		the kept plans go (they were prepared for the other SQL).
 */
static bool
sbq_sql_has_leases(void)
{
	if (sbq_sql_leases < 0)
	{
		Oid			argtypes[1] = {INT8OID};
		List	   *name = list_make2(makeString("sbq"), makeString("lease_slot"));
		int			i;

		if (!sbq_sql_callback)
		{
			CacheRegisterSyscacheCallback(PROCOID, sbq_sql_inval, (Datum) 0);
			sbq_sql_callback = true;
		}
		sbq_sql_leases = OidIsValid(LookupFuncName(name, 1, argtypes, true)) ? 1 : 0;
		if (sbq_plans_leases >= 0 && sbq_plans_leases != sbq_sql_leases)
		{
			for (i = 0; i < SBQ_NUM_PLANS; i++)
			{
				if (sbq_plans[i] != NULL)
					SPI_freeplan(sbq_plans[i]);
				sbq_plans[i] = NULL;
			}
		}
		sbq_plans_leases = sbq_sql_leases;
	}
	return sbq_sql_leases == 1;
}

/* Whether receives in this session take leases (lease.c), as the SQL allows. */
static bool
sbq_leasing(void)
{
	return sbq_lease_enabled() && sbq_sql_has_leases();
}

/*
 * sbq_storage_begin
 *		Open a storage section: connect to SPI and pin the settings every
 *		query of this module runs under. Errors unwind both with the
 *		(sub)transaction; the normal exit is sbq_storage_end().
 */
void
sbq_storage_begin(void)
{
	sbq_caller_cxt = CurrentMemoryContext;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	sbq_lease_enter(sbq_storage_epoch_locked());
	(void) sbq_sql_has_leases();
	sbq_guc_nest_level = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("enable_seqscan", "off",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("enable_bitmapscan", "off",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("enable_hashjoin", "off",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("enable_mergejoin", "off",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("jit", "off",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
}

/*
 * sbq_storage_caller_context
 *		The memory context of the caller of sbq_storage_begin(): what is made
 *		there outlives the storage section.
 */
MemoryContext
sbq_storage_caller_context(void)
{
	return sbq_caller_cxt;
}

/*
 * sbq_storage_end
 *		Close the section opened by sbq_storage_begin().
 */
void
sbq_storage_end(void)
{
	AtEOXact_GUC(true, sbq_guc_nest_level);
	sbq_guc_nest_level = 0;
	sbq_lease_leave();
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
}

/*
 * sbq_plan
 *		The kept plan of a statement, prepared on first use in this backend.
 */
static SPIPlanPtr
sbq_plan(SbqPlanId id)
{
	if (sbq_plans[id] == NULL)
	{
		const SbqPlanDef *def = &sbq_plan_defs[id];
		const char *sql = def->sql;
		SPIPlanPtr	plan;

		/* older SQL has no lease functions, and no leases to skip */
		if (!sbq_sql_has_leases() && strstr(sql, LEASE_SLOT) != NULL)
		{
			StringInfoData buf;
			const char *p = sql;
			const char *hit;

			initStringInfo(&buf);
			while ((hit = strstr(p, LEASE_SLOT)) != NULL)
			{
				appendBinaryStringInfo(&buf, p, hit - p);
				appendStringInfoString(&buf, "true");
				p = hit + strlen(LEASE_SLOT);
			}
			appendStringInfoString(&buf, p);
			sql = buf.data;
		}
		plan = SPI_prepare_cursor(sql, def->nargs, (Oid *) def->argtypes,
								  CURSOR_OPT_GENERIC_PLAN);
		if (plan == NULL)
			elog(ERROR, "could not prepare sbqueue statement %d: %s",
				 (int) id, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "could not keep sbqueue statement %d", (int) id);
		sbq_plans[id] = plan;
	}
	return sbq_plans[id];
}

/*
 * sbq_exec
 *		Run a kept plan; nulls[i] says argument i is NULL. Returns the number
 *		of rows processed. Any failure is an error.
 */
static uint64
sbq_exec(SbqPlanId id, Datum *values, const bool *isnull)
{
	const SbqPlanDef *def = &sbq_plan_defs[id];
	char		nulls[20];
	int			rc;
	int			i;

	for (i = 0; i < def->nargs; i++)
		nulls[i] = (isnull != NULL && isnull[i]) ? 'n' : ' ';
	rc = SPI_execute_plan(sbq_plan(id), values, nulls, false, 0);
	if (rc < 0)
		elog(ERROR, "sbqueue statement %d failed: %s", (int) id,
			 SPI_result_code_string(rc));
	return SPI_processed;
}

static Datum
sbq_col(int row, int col, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col, isnull);
}

static Oid	sbq_epoch(void);

/*
 * sbq_store_counts
 *		Add counts to a queue's stored counters, in this backend's own row.
 */
static void
sbq_store_counts(int32 queue_id, const SbqCounts *c)
{
	Datum		values[9];

	values[0] = Int32GetDatum(queue_id);
	values[1] = Int32GetDatum(SBQ_MY_PROC_NUMBER());
	values[2] = Int64GetDatum(c->sent);
	values[3] = Int64GetDatum(c->received);
	values[4] = Int64GetDatum(c->completed);
	values[5] = Int64GetDatum(c->abandoned);
	values[6] = Int64GetDatum(c->deferred);
	values[7] = Int64GetDatum(c->dead_lettered);
	values[8] = Int64GetDatum(c->expired);
	(void) sbq_exec(PLAN_COUNT, values, NULL);
}

/*
 * sbq_add_counts
 *		Add what a call did to its queue's counters: gathered in shared memory
 *		when there is room (qstate.c), and what has gathered there for a
 *		second or more is stored now, in this transaction; else stored now.
 */
static void
sbq_add_counts(int32 queue_id, const SbqCounts *c)
{
	Oid			epoch = sbq_epoch();
	SbqCounts	old;

	if (!sbq_qstate_count(epoch, queue_id, c))
		sbq_store_counts(queue_id, c);
	else if (sbq_qstate_take(epoch, queue_id, &old, true))
		sbq_store_counts(queue_id, &old);
}

/* Store every count gathered in shared memory for this database's queues. */
static void
sbq_store_all_counts(void)
{
	Oid			epoch = sbq_epoch();
	int32		ids[1024];
	int			n = sbq_qstate_queues(epoch, ids, lengthof(ids));
	int			i;

	for (i = 0; i < n; i++)
	{
		SbqCounts	c;

		if (sbq_qstate_take(epoch, ids[i], &c, false))
			sbq_store_counts(ids[i], &c);
	}
}

static TimestampTz
sbq_add_interval(TimestampTz t, const Interval *iv)
{
	return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
												   TimestampTzGetDatum(t),
												   IntervalPGetDatum(iv)));
}

/*
 * sbq_spi_strdup
 *		A text datum of an SPI result as a C string in the caller's context
 *		(the one current at sbq_storage_begin), so it outlives SPI_finish.
 */
/*
 * sbq_expiry
 *		When a message that lives ttl from start expires; false when never:
 *		a time to live of SBQ_NEVER_EXPIRES or more (Service Bus's default is
 *		TimeSpan.MaxValue), or an expiry past the end of the timestamp range.
 */
static bool
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

static char *
sbq_spi_strdup(Datum d, bool isnull)
{
	char	   *s;
	char	   *copy;

	if (isnull)
		return NULL;
	s = TextDatumGetCString(d);
	copy = SPI_palloc(strlen(s) + 1);
	strcpy(copy, s);
	return copy;
}

/*
 * sbq_storage_find_queue
 *		Look a queue up by its address; false when there is none. The strings
 *		and intervals in *queue are in the caller's memory context.
 */
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
static bool sbq_queue_cache_callback = false;

/* relcache invalidation callback: a change to sbq.queues drops the cache */
static void
sbq_queue_cache_inval(Datum arg, Oid relid)
{
	if (sbq_queue_cache != NULL && (relid == InvalidOid || relid == sbq_queues_relid))
	{
		sbq_queue_cache = NULL;
		MemoryContextReset(sbq_queue_cache_cxt);
	}
}

/* The OID of sbq.queues, InvalidOid if there is none. */
static Oid
sbq_queues_oid(void)
{
	Oid			nsp = get_namespace_oid("sbq", true);

	return OidIsValid(nsp) ? get_relname_relid("queues", nsp) : InvalidOid;
}

/* The OID of sbq.messages (looked up each time: the extension may be recreated). */
static Oid
sbq_messages_oid(void)
{
	Oid			nsp = get_namespace_oid("sbq", false);
	Oid			relid = get_relname_relid("messages", nsp);

	if (!OidIsValid(relid))
		elog(ERROR, "table sbq.messages does not exist");
	return relid;
}

/* the OID of sbq.queues as sbq_storage_epoch knows it, until it changes */
static Oid	sbq_epoch_relid = InvalidOid;
static bool sbq_epoch_callback = false;

static void
sbq_epoch_inval(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == sbq_epoch_relid)
		sbq_epoch_relid = InvalidOid;
}

/*
 * sbq_storage_epoch
 *		The "epoch" of the queues for shared memory (qstate.c, lease.c): the
 *		OID of sbq.queues, which a DROP and CREATE EXTENSION changes. Kept
 *		until a relcache invalidation of that table (its drop sends one).
 */
Oid
sbq_storage_epoch(void)
{
	if (!OidIsValid(sbq_epoch_relid))
	{
		if (!sbq_epoch_callback)
		{
			CacheRegisterRelcacheCallback(sbq_epoch_inval, (Datum) 0);
			sbq_epoch_callback = true;
		}
		sbq_epoch_relid = sbq_queues_oid();
	}
	return sbq_epoch_relid;
}

/*
 * sbq_storage_epoch_locked
 *		The epoch, with sbq.queues locked (AccessShareLock, until the end of
 *		the transaction): the lock takes in the invalidations that arrived,
 *		so a DROP EXTENSION that committed before is seen, and one that comes
 *		later waits for this transaction. The leases a storage section works
 *		on are then always those of the tables its statements see.
 */
static Oid
sbq_storage_epoch_locked(void)
{
	for (;;)
	{
		Oid			epoch = sbq_storage_epoch();

		if (!OidIsValid(epoch))
			return InvalidOid;
		LockRelationOid(epoch, AccessShareLock);
		if (sbq_storage_epoch() == epoch)
			return epoch;
		/* dropped meanwhile: its successor, if any */
		UnlockRelationOid(epoch, AccessShareLock);
	}
}

static Oid
sbq_epoch(void)
{
	return sbq_storage_epoch();
}

/* Tell every backend, at commit, that the queues changed. */
static void
sbq_queue_cache_changed(void)
{
	Oid			relid = sbq_queues_oid();

	if (OidIsValid(relid))
		CacheInvalidateRelcacheByRelid(relid);
}

static char *
sbq_strdup_in(MemoryContext cxt, const char *s)
{
	return s == NULL ? NULL : MemoryContextStrdup(cxt, s);
}

/* Copy a queue's properties, its strings into cxt. */
static void
sbq_queue_copy(SbqQueue *dst, const SbqQueue *src, MemoryContext cxt)
{
	*dst = *src;
	dst->name = sbq_strdup_in(cxt, src->name);
	dst->forward_to = sbq_strdup_in(cxt, src->forward_to);
	dst->forward_dlq_to = sbq_strdup_in(cxt, src->forward_dlq_to);
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

	AcceptInvalidationMessages();
	if (sbq_queue_cache != NULL && strlen(addr->key) <= SBQ_MAX_NAME_LEN)
	{
		entry = hash_search(sbq_queue_cache, addr->key, HASH_FIND, NULL);
		if (entry != NULL)
		{
			sbq_queue_copy(queue, &entry->queue, sbq_caller_cxt);
			return true;
		}
	}

	values[0] = CStringGetTextDatum(addr->key);
	if (sbq_exec(PLAN_FIND_QUEUE, values, NULL) == 0)
		return false;
	sbq_queue_from_row(0, queue);

	/* remember it, unless an invalidation came in meanwhile */
	if (strlen(addr->key) > SBQ_MAX_NAME_LEN)
		return true;
	if (sbq_queue_cache == NULL)
	{
		HASHCTL		ctl;

		if (sbq_queue_cache_cxt == NULL)
			sbq_queue_cache_cxt = AllocSetContextCreate(TopMemoryContext,
														"sbqueue queue cache",
														ALLOCSET_SMALL_SIZES);
		if (!sbq_queue_cache_callback)
		{
			CacheRegisterRelcacheCallback(sbq_queue_cache_inval, (Datum) 0);
			sbq_queue_cache_callback = true;
		}
		sbq_queues_relid = sbq_queues_oid();
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

/*
 * sbq_storage_get_queue_to_send
 *		sbq_storage_get_queue for a call that will store messages in the queue.
 *
 * The caller holds the queue name's lock in share mode, so no delete of the
 * queue can commit from now on; under READ COMMITTED the lookup's fresh
 * snapshot also sees every delete that committed before. A transaction
 * snapshot (REPEATABLE READ, SERIALIZABLE) may predate such a delete, so there
 * the queue row is locked too: a row deleted after the snapshot then fails
 * with a serialization error instead of taking a message for a queue that is
 * gone. Only those isolation levels pay for the row lock.
 */
void
sbq_storage_get_queue_to_send(const SbqAddress *addr, SbqQueue *queue)
{
	Datum		values[1];

	if (!IsolationUsesXactSnapshot())
	{
		sbq_storage_get_queue(addr, queue);
		return;
	}
	values[0] = CStringGetTextDatum(addr->key);
	if (sbq_exec(PLAN_FIND_QUEUE_SHARE, values, NULL) == 0)
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_QUEUE_NOT_FOUND),
				 errmsg("queue \"%s\" does not exist", addr->name)));
	sbq_queue_from_row(0, queue);
}

/*
 * sbq_storage_get_queue
 *		sbq_storage_find_queue, or SB001 when the queue does not exist.
 */
void
sbq_storage_get_queue(const SbqAddress *addr, SbqQueue *queue)
{
	if (!sbq_storage_find_queue(addr, queue))
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_QUEUE_NOT_FOUND),
				 errmsg("queue \"%s\" does not exist", addr->name)));
}

/*
 * sbq_storage_queue_tuple
 *		The sbq_queue_properties row of a queue, formed in mcxt (which must
 *		outlive the storage section).
 */
HeapTuple
sbq_storage_queue_tuple(int32 queue_id, TupleDesc tupdesc, MemoryContext mcxt)
{
	Datum		args[1];
	Datum		values[12];
	bool		nulls[12];
	MemoryContext oldcxt;
	HeapTuple	tuple;
	int			i;

	args[0] = Int32GetDatum(queue_id);
	if (sbq_exec(PLAN_QUEUE_ROW, args, NULL) != 1)
		elog(ERROR, "queue %d vanished", queue_id);
	if (tupdesc->natts != 12)
		elog(ERROR, "sbq_queue_properties has %d columns, expected 12", tupdesc->natts);
	for (i = 0; i < 12; i++)
		values[i] = sbq_col(0, i + 1, &nulls[i]);
	oldcxt = MemoryContextSwitchTo(mcxt);
	tuple = heap_form_tuple(tupdesc, values, nulls);
	MemoryContextSwitchTo(oldcxt);
	return tuple;
}

/*
 * Queue properties as statement arguments, in the order of PLAN_UPDATE_QUEUE
 * ($2 .. $10), which PLAN_CREATE_QUEUE shares from its $3 on.
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
 * sbq_storage_create_queue
 *		Store a new queue; the caller holds the name lock and has checked
 *		that the name is free. Returns its id.
 */
int32
sbq_storage_create_queue(const char *name, const char *key, const SbqQueue *props)
{
	Datum		values[12];
	bool		nulls[12];

	values[0] = CStringGetTextDatum(name);
	nulls[0] = false;
	values[1] = CStringGetTextDatum(key);
	nulls[1] = false;
	sbq_queue_args(props, values + 2, nulls + 2);
	values[11] = TimestampTzGetDatum(GetCurrentTimestamp());
	nulls[11] = false;
	if (sbq_exec(PLAN_CREATE_QUEUE, values, nulls) != 1)
		elog(ERROR, "could not create queue \"%s\"", name);
	sbq_queue_cache_changed();
	{
		bool		isnull;

		return DatumGetInt32(sbq_col(0, 1, &isnull));
	}
}

/*
 * sbq_storage_update_queue
 *		Store new properties for an existing queue.
 */
void
sbq_storage_update_queue(const SbqQueue *props)
{
	Datum		values[11];
	bool		nulls[11];

	values[0] = Int32GetDatum(props->queue_id);
	nulls[0] = false;
	sbq_queue_args(props, values + 1, nulls + 1);
	values[10] = TimestampTzGetDatum(GetCurrentTimestamp());
	nulls[10] = false;
	(void) sbq_exec(PLAN_UPDATE_QUEUE, values, nulls);
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
	(void) sbq_exec(PLAN_DELETE_QUEUE, values, NULL);
	/* the leases of its messages go at commit (a claim made since sees the delete) */
	(void) sbq_lease_take_queue(queue_id, -1);
	sbq_qstate_forget(sbq_epoch(), queue_id);
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
	n = (int64) sbq_exec(PLAN_PURGE, values, NULL);

	/*
	 * The leases of its messages go at commit (a claim made since sees the
	 * delete), and their deliveries, over now, are counted.
	 */
	counts.received = sbq_lease_take_queue(queue->queue_id, subqueue);
	if (counts.received > 0)
		sbq_add_counts(queue->queue_id, &counts);
	return n;
}

static int
sbq_cmp_int64(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return (x > y) - (x < y);
}

/*
 * sbq_send_with_dedup
 *		Store messages one by one under duplicate detection: each draws a
 *		sequence number and claims its message id; an id sent within the
 *		window stores nothing and gives back the first message's number.
 *		values/nulls are PLAN_SEND_ONE's arguments but for $16 and $17.
 */
static int64
sbq_send_with_dedup(const SbqQueue *queue, Datum *values, bool *nulls,
					Datum *bodies, int nbodies, TimestampTz now, int64 *seqs)
{
	Datum		claim[5];
	Datum		first[2];
	int64		stored = 0;
	int			i;

	claim[0] = Int32GetDatum(queue->queue_id);
	claim[1] = values[6];		/* message_id */
	claim[3] = TimestampTzGetDatum(now);
	claim[4] = TimestampTzGetDatum(now - sbq_interval_usecs(&queue->dup_window));
	first[0] = claim[0];
	first[1] = claim[1];

	for (i = 0; i < nbodies; i++)
	{
		bool		isnull;
		int64		seq;

		(void) sbq_exec(PLAN_NEXT_SEQUENCE, NULL, NULL);
		seq = DatumGetInt64(sbq_col(0, 1, &isnull));
		claim[2] = Int64GetDatum(seq);
		if (sbq_exec(PLAN_DEDUP_CLAIM, claim, NULL) == 1)
		{
			values[15] = bodies[i];
			values[16] = Int64GetDatum(seq);
			nulls[16] = false;
			(void) sbq_exec(PLAN_SEND_ONE, values, nulls);
			seqs[i] = seq;
			stored++;
		}
		else
		{
			if (sbq_exec(PLAN_DEDUP_FIRST, first, NULL) != 1)
				elog(ERROR, "duplicate detection lost the first message of an id");
			seqs[i] = DatumGetInt64(sbq_col(0, 1, &isnull));
		}
	}
	return stored;
}

/*
 * sbq_storage_send
 *		Store nbodies messages (bytea datums, checked for size by the caller)
 *		with the same properties; their sequence numbers go into seqs in the
 *		order of the bodies (a duplicate gets its first message's number).
 *		Returns the number of bodies.
 */
int
sbq_storage_send(const SbqQueue *queue, const SbqSendProps *props,
				 Datum *bodies, int nbodies, const char *default_content_type,
				 int64 *seqs)
{
	Datum		values[17];
	bool		nulls[17];
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz start = now;
	bool		scheduled = props->has_scheduled && props->scheduled > now;
	Interval	ttl;
	bool		has_ttl = false;
	SbqCounts	counts = {0};

	if (nbodies == 0)
		return 0;

	/* A message's time to live is capped to the queue's default. */
	if (props->has_ttl)
	{
		ttl = props->ttl;
		has_ttl = true;
		if (queue->has_default_ttl &&
			sbq_interval_usecs(&queue->default_ttl) < sbq_interval_usecs(&ttl))
			ttl = queue->default_ttl;
	}
	else if (queue->has_default_ttl)
	{
		ttl = queue->default_ttl;
		has_ttl = true;
	}
	/* a scheduled message lives from the time it is due */
	if (scheduled)
		start = props->scheduled;

	memset(nulls, 0, sizeof(nulls));
	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = Int16GetDatum(scheduled ? SBQ_STATE_SCHEDULED : SBQ_STATE_ACTIVE);
	values[2] = TimestampTzGetDatum(now);
	values[3] = TimestampTzGetDatum(props->scheduled);
	nulls[3] = !props->has_scheduled;
	values[4] = (Datum) 0;
	nulls[4] = true;
	if (has_ttl)
	{
		TimestampTz expires_at = 0;

		nulls[4] = !sbq_expiry(start, &ttl, &expires_at);
		values[4] = TimestampTzGetDatum(expires_at);
	}
	values[5] = has_ttl ? IntervalPGetDatum(&ttl) : (Datum) 0;
	nulls[5] = !has_ttl;

#define TEXT_ARG(idx, field) \
	do { values[idx] = PointerGetDatum(props->field); nulls[idx] = props->field == NULL; } while (0)
	TEXT_ARG(6, message_id);
	TEXT_ARG(7, session_id);
	TEXT_ARG(8, correlation_id);
	TEXT_ARG(9, subject);
	TEXT_ARG(11, reply_to);
	TEXT_ARG(12, reply_to_session_id);
	TEXT_ARG(13, to_address);
#undef TEXT_ARG
	if (props->content_type != NULL)
		values[10] = PointerGetDatum(props->content_type);
	else if (default_content_type != NULL)
		values[10] = CStringGetTextDatum(default_content_type);
	else
		nulls[10] = true;
	values[14] = PointerGetDatum(props->application_properties);
	nulls[14] = props->application_properties == NULL;
	nulls[16] = true;

	/* active messages join the queue: announce it (qstate.c) */
	if (!scheduled)
		sbq_qstate_send_begin(sbq_epoch(), queue->queue_id);

	if (queue->has_dup_window && props->message_id != NULL)
	{
		/* a message without an id gets a fresh UUID: never a duplicate */
		counts.sent = sbq_send_with_dedup(queue, values, nulls, bodies, nbodies,
										  now, seqs);
	}
	else
	{
		uint64		n;
		uint64		i;

		if (nbodies == 1)
		{
			values[15] = bodies[0];
			n = sbq_exec(PLAN_SEND_ONE, values, nulls);
		}
		else
		{
			values[15] = PointerGetDatum(construct_array(bodies, nbodies, BYTEAOID,
														 -1, false, TYPALIGN_INT));
			n = sbq_exec(PLAN_SEND_MANY, values, nulls);
		}
		if (n != (uint64) nbodies)
			elog(ERROR, "stored " UINT64_FORMAT " of %d messages", n, nbodies);

		for (i = 0; i < n; i++)
		{
			bool		isnull;

			seqs[i] = DatumGetInt64(sbq_col(i, 1, &isnull));
		}
		/* sequence numbers follow the order of the bodies */
		qsort(seqs, n, sizeof(int64), sbq_cmp_int64);
		counts.sent = n;
	}

	if (counts.sent > 0)
	{
		int64		max_seq = 0;
		int			i;

		for (i = 0; i < nbodies; i++)
			max_seq = Max(max_seq, seqs[i]);
		if (!scheduled)
			sbq_qstate_send_done(sbq_epoch(), max_seq);
		sbq_add_counts(queue->queue_id, &counts);
		if (!scheduled)
			sbq_wait_wake_at_commit(queue->queue_id);
		else
			sbq_qstate_scheduled(sbq_epoch(), queue->queue_id, props->scheduled);
	}
	return nbodies;
}

static void
sbq_max_delivery_description(const SbqQueue *queue, char *buf, size_t len)
{
	snprintf(buf, len, "Message could not be consumed after %d delivery attempts.",
			 queue->max_delivery_count);
}

/* The highest value of an int8 column of the current SPI result (0 if none). */
static int64
sbq_max_col(int col)
{
	int64		max = 0;
	uint64		row;

	for (row = 0; row < SPI_processed; row++)
	{
		bool		isnull;
		int64		v = DatumGetInt64(sbq_col(row, col, &isnull));

		if (!isnull && v > max)
			max = v;
	}
	return max;
}

static Datum
sbq_int8_array(const int64 *v, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(n, 1));
	int			i;

	for (i = 0; i < n; i++)
		d[i] = Int64GetDatum(v[i]);
	return PointerGetDatum(construct_array(d, n, INT8OID, sizeof(int64),
										   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

static Datum
sbq_int4_array(const int32 *v, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(n, 1));
	int			i;

	for (i = 0; i < n; i++)
		d[i] = Int32GetDatum(v[i]);
	return PointerGetDatum(construct_array(d, n, INT4OID, sizeof(int32),
										   true, TYPALIGN_INT));
}

/*
 * sbq_lease_rows
 *		Run a lease statement over the triples (seqs[i], counts[i], tids[i])
 *		(tids NULL: any row version) with further arguments extra[] (after
 *		$1, $2 and $3); returns how many rows it changed, and marks done[i]
 *		for those it returned (when done != NULL).
 */
static int
sbq_lease_rows(SbqPlanId id, const int64 *seqs, const int32 *counts,
			   const ItemPointerData *tids, int n, Datum *extra, int nextra, bool *done)
{
	Datum		values[10];
	bool		nulls[10] = {false};
	uint64		rows;
	uint64		r;
	int			i;

	if (n == 0)
		return 0;
	values[0] = sbq_int8_array(seqs, n);
	values[1] = sbq_int4_array(counts, n);
	if (tids != NULL)
	{
		Datum	   *d = palloc(sizeof(Datum) * n);

		for (i = 0; i < n; i++)
			d[i] = PointerGetDatum(&tids[i]);
		values[2] = PointerGetDatum(construct_array(d, n, TIDOID, sizeof(ItemPointerData),
													false, TYPALIGN_SHORT));
	}
	else
	{
		values[2] = (Datum) 0;
		nulls[2] = true;
	}
	for (i = 0; i < nextra; i++)
		values[3 + i] = extra[i];
	rows = sbq_exec(id, values, nulls);
	if (done != NULL)
	{
		for (i = 0; i < n; i++)
			done[i] = false;
		for (r = 0; r < rows; r++)
		{
			bool		isnull;
			int64		seq = DatumGetInt64(sbq_col(r, 1, &isnull));

			for (i = 0; i < n; i++)
				if (seqs[i] == seq)
					done[i] = true;
		}
	}
	return (int) rows;
}

/* Move messages to the dead-letter sub-queue with their delivery counts. */
static int
sbq_lease_deadletter_rows(const SbqQueue *queue, const int64 *seqs, const int32 *counts,
						  const ItemPointerData *tids, int n, const char *reason,
						  const char *description, bool *done)
{
	Datum		extra[4];

	if (n == 0)
		return 0;
	extra[0] = Int32GetDatum(queue->queue_id);
	extra[1] = CStringGetTextDatum(reason);
	extra[2] = CStringGetTextDatum(description);
	extra[3] = CStringGetTextDatum(queue->name);
	return sbq_lease_rows(PLAN_LEASE_DEADLETTER, seqs, counts, tids, n, extra, 4, done);
}

/*
 * sbq_lease_sweep
 *		End up to SBQ_MAINTAIN_BATCH expired leases of this database (of the
 *		queue only_queue when not 0): store each one's delivery count in its
 *		message, or dead-letter the message when that was its last allowed
 *		delivery. queues[] are the queues to know: a lease of a queue not
 *		among them just goes if its queue is gone, and is given back if the
 *		queue exists (made since the caller read its list). Adds what it did
 *		to *released and *dead_lettered; returns how many leases it took.
 */
static int
sbq_lease_sweep(const SbqQueue *queues, int nqueues, int32 only_queue, TimestampTz now,
				int64 *released, int64 *dead_lettered)
{
	SbqExpiredLease *items;
	int64	   *seqs;
	int32	   *counts;
	int			n;
	int			q;

	if (!sbq_lease_available() || RecoveryInProgress())
		return 0;
	items = palloc(sizeof(SbqExpiredLease) * SBQ_MAINTAIN_BATCH);
	n = sbq_lease_take_expired(only_queue, now, items, SBQ_MAINTAIN_BATCH);
	if (n == 0)
		return 0;
	seqs = palloc(sizeof(int64) * n);
	counts = palloc(sizeof(int32) * n);

	for (q = 0; q < nqueues; q++)
	{
		const SbqQueue *queue = &queues[q];
		SbqCounts	c = {0};
		char		description[128];
		int			nover = 0;
		int			nstore = 0;
		int			i;
		Datum		extra[1];

		/* over the limit first, at the front of the arrays */
		for (i = 0; i < n; i++)
			if (items[i].queue_id == queue->queue_id &&
				items[i].subqueue == SBQ_SUBQUEUE_MAIN &&
				items[i].delivery_count >= queue->max_delivery_count)
			{
				seqs[nover] = items[i].seq;
				counts[nover++] = items[i].delivery_count;
			}
		for (i = 0; i < n; i++)
			if (items[i].queue_id == queue->queue_id &&
				!(items[i].subqueue == SBQ_SUBQUEUE_MAIN &&
				  items[i].delivery_count >= queue->max_delivery_count))
			{
				seqs[nover + nstore] = items[i].seq;
				counts[nover + nstore++] = items[i].delivery_count;
			}
		if (nover + nstore == 0)
			continue;

		sbq_max_delivery_description(queue, description, sizeof(description));
		c.dead_lettered = sbq_lease_deadletter_rows(queue, seqs, counts, NULL, nover,
													"MaxDeliveryCountExceeded", description,
													NULL);
		extra[0] = Int32GetDatum(queue->queue_id);
		*released += sbq_lease_rows(PLAN_LEASE_STORE, seqs + nover, counts + nover, NULL,
									nstore, extra, 1, NULL);
		*dead_lettered += c.dead_lettered;
		c.received = nover + nstore;	/* those deliveries are over now */
		sbq_add_counts(queue->queue_id, &c);
		sbq_wait_wake_at_commit(queue->queue_id);
	}

	/*
	 * Leases of queues not among queues[]: of a deleted queue, or of one
	 * made after the caller's list was read (or that its transaction
	 * snapshot cannot see). Asked with a snapshot taken now: a queue that
	 * exists gets its leases back, for a later pass that knows it.
	 */
	{
		int32	   *ids = palloc(sizeof(int32) * n);
		int			nids = 0;
		int			i;

		for (i = 0; i < n; i++)
		{
			bool		known = false;

			for (q = 0; q < nqueues && !known; q++)
				known = items[i].queue_id == queues[q].queue_id;
			if (!known)
				ids[nids++] = items[i].queue_id;
		}
		if (nids > 0)
		{
			Snapshot	snap = RegisterSnapshot(GetLatestSnapshot());
			Datum		values[1];
			uint64		rows;
			uint64		r;
			int			rc;

			values[0] = sbq_int4_array(ids, nids);
			rc = SPI_execute_snapshot(sbq_plan(PLAN_QUEUES_EXIST), values, NULL, snap,
									  InvalidSnapshot, true, false, 0);
			UnregisterSnapshot(snap);
			if (rc < 0)
				elog(ERROR, "sbqueue statement %d failed: %s", (int) PLAN_QUEUES_EXIST,
					 SPI_result_code_string(rc));
			rows = SPI_processed;
			for (r = 0; r < rows; r++)
			{
				bool		isnull;
				int32		id = DatumGetInt32(sbq_col(r, 1, &isnull));

				for (i = 0; i < n; i++)
					if (items[i].queue_id == id)
						sbq_lease_unclaim(items[i].seq);
			}
		}
	}
	return n;
}

/* What a leasing receive does with a message it claimed. */
typedef enum SbqFate
{
	SBQ_FATE_HAND,				/* hand it out */
	SBQ_FATE_STORE,				/* store its last delivery count, then hand it out */
	SBQ_FATE_OVER,				/* its last allowed delivery expired: dead-letter */
	SBQ_FATE_EXPIRED,			/* its time to live passed: dead-letter */
	SBQ_FATE_DROP,				/* its time to live passed: drop */
	SBQ_FATE_GONE				/* settled or moved meanwhile: not ours */
} SbqFate;

typedef struct SbqClaimed
{
	int64		seq;
	ItemPointerData ctid;		/* the row version the scan saw */
	int32		prev_lease;		/* delivery count of an expired lease taken over, or 0 */
	int32		count;			/* the delivery count to store or hand out */
	int			row;			/* its row in the fetch result */
	SbqFate		fate;
} SbqClaimed;

/* A message a receive hands out, with its sequence number to sort by. */
typedef struct SbqOutRow
{
	int64		seq;
	HeapTuple	tuple;
} SbqOutRow;

static int
sbq_cmp_out_row(const void *a, const void *b)
{
	int64		x = ((const SbqOutRow *) a)->seq;
	int64		y = ((const SbqOutRow *) b)->seq;

	return (x > y) - (x < y);
}

/*
 * sbq_give_back
 *		After a write over the claims of one fate (in claim order, n of them):
 *		give back those whose row was not written (done[i] false), as it
 *		changed after the scan read it.
 */
static void
sbq_give_back(SbqClaimed *claims, int nclaims, SbqFate fate, int n, const bool *done)
{
	int			k;
	int			m = 0;

	if (n == 0)
		return;
	for (k = 0; k < nclaims && m < n; k++)
	{
		if (claims[k].fate != fate)
			continue;
		if (!done[m++])
		{
			claims[k].fate = SBQ_FATE_GONE;
			sbq_lease_unclaim(claims[k].seq);
		}
	}
}

static void sbq_receive_rows(const SbqQueue *queue, int16 subqueue, int max_messages,
							 SbqReceiveMode mode, TimestampTz now, SbqReceiveResult *result,
							 Tuplestorestate *tupstore, TupleDesc tupdesc, SbqOutRow *outs);

/*
 * sbq_check_claims
 *		Check with a snapshot taken now that each claimed row version is still
 *		the message's latest and that no other transaction has started to
 *		change it; a claim that fails is given back (c->row = -1). Under
 *		REPEATABLE READ or SERIALIZABLE a changed row is a serialization
 *		failure instead, as a row lock on it would be.
 */
static void
sbq_check_claims(SbqClaimed *claims, int nclaims, const SbqQueue *queue)
{
	Relation	rel = table_open(sbq_messages_oid(), AccessShareLock);
	Snapshot	snap = RegisterSnapshot(GetLatestSnapshot());
	int			k;

	for (k = 0; k < nclaims; k++)
	{
		SbqClaimed *c = &claims[k];
		HeapTupleData tup;
		Buffer		buf;
		bool		ok;

		tup.t_self = c->ctid;
		ok = heap_fetch(rel, snap, &tup, &buf, false);
		if (ok)
		{
			TransactionId xmax;
			uint16		infomask;

			/*
			 * Someone else started to change or lock it after our scan: a
			 * row-lock path that locked it before our claim was made, and
			 * that will not see our claim (see lease.c's header). xmax and
			 * its flags are read together, under the buffer's lock.
			 */
			LockBuffer(buf, BUFFER_LOCK_SHARE);
			xmax = HeapTupleHeaderGetRawXmax(tup.t_data);
			infomask = tup.t_data->t_infomask;
			LockBuffer(buf, BUFFER_LOCK_UNLOCK);
			if (sbq_row_busy_infomask(xmax, infomask))
				ok = false;
			ReleaseBuffer(buf);
		}
		else if (IsolationUsesXactSnapshot())
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to concurrent update"),
					 errdetail("Message " INT64_FORMAT " of queue \"%s\" changed after this transaction's snapshot was taken.",
							   c->seq, queue->name)));
		if (!ok)
		{
			sbq_lease_unclaim(c->seq);
			c->row = -1;
		}
	}
	UnregisterSnapshot(snap);
	table_close(rel, AccessShareLock);
}

/*
 * sbq_receive_leased
 *		A peek-lock receive that locks in shared memory (lease.c): find the
 *		head of the queue, claim each message there, read the claimed ones
 *		again with the latest snapshot (a settlement that committed after
 *		the scan's snapshot released its lease before our claim, so the row
 *		is gone by then), and hand them out. Only messages whose earlier
 *		delivery has to be recorded (an expired lease or row lock), or that
 *		expire or reach their delivery limit, cause a write; a plain receive
 *		writes nothing at all.
 *
 * Under REPEATABLE READ or SERIALIZABLE a claimed message that changed after
 * the transaction's snapshot is a serialization failure, as a row lock on it
 * would be.
 */
static SbqReceiveResult
sbq_receive_leased(const SbqQueue *queue, int16 subqueue, int max_messages,
				   TimestampTz now, Tuplestorestate *tupstore, TupleDesc tupdesc)
{
	SbqReceiveResult result = {0};
	SbqCounts	counts = {0};
	TimestampTz until = sbq_add_interval(now, &queue->lock_duration);
	int			busy_rounds = 0;
	bool		rows_instead = false;
	char		description[128];
	SbqOutRow  *outs = palloc(sizeof(SbqOutRow) * max_messages);
	int			o;
	Oid			epoch = sbq_epoch();

	if (tupdesc->natts != SBQ_MESSAGE_NATTS)
		elog(ERROR, "sbq_message has %d columns, expected %d",
			 tupdesc->natts, SBQ_MESSAGE_NATTS);
	sbq_max_delivery_description(queue, description, sizeof(description));

	while (result.delivered < max_messages)
	{
		int			want = max_messages - result.delivered;
		int			delivered_before = result.delivered;
		Datum		values[5];
		int64		hint = 0;
		int64		bound = 0;
		bool		use_hint;
		SPITupleTable *fetched;
		uint64		n;
		uint64		i;
		SbqClaimed *claims;
		int			nclaims = 0;
		bool		full = false;
		int64	   *seqs;
		int32	   *cnts;
		ItemPointerData *tids;
		bool	   *done;
		bool		wrote = false;
		int			k;
		int			j;
		int			nlist;

		values[0] = Int32GetDatum(queue->queue_id);
		values[1] = Int16GetDatum(subqueue);
		values[2] = TimestampTzGetDatum(now);
		values[3] = Int32GetDatum(want);

		/*
		 * Start at the head of the queue (qstate.c): read the hint and its
		 * bound before the scan's snapshot is taken, and move the hint to the
		 * first row the scan saw. A transaction snapshot may miss messages
		 * that committed since it was taken: then only use the hint.
		 */
		use_hint = subqueue == SBQ_SUBQUEUE_MAIN &&
			sbq_qstate_head(epoch, queue->queue_id, &hint, &bound);
		values[4] = Int64GetDatum(use_hint ? hint : 0);
		sbq_lease_scan_start();
		n = sbq_exec(PLAN_LEASE_CANDIDATES, values, NULL);

		/*
		 * The locks granted below start now, not when the statement began:
		 * the scan saw changes that committed up to its snapshot, and a lock
		 * on a message another session abandoned meanwhile must not claim a
		 * start before that abandon (locked_until orders the deliveries of a
		 * message for whoever reads them).
		 */
		now = GetCurrentTimestamp();
		until = sbq_add_interval(now, &queue->lock_duration);
		if (use_hint && !IsolationUsesXactSnapshot())
		{
			int64		first = sbq_lease_scan_first();

			sbq_qstate_advance(epoch, queue->queue_id,
							   first >= 0 && first < bound ? first : bound);
		}
		if (n == 0)
			break;
		fetched = SPI_tuptable;

		claims = palloc(sizeof(SbqClaimed) * n);
		for (i = 0; i < n; i++)
		{
			bool		isnull;
			int64		seq = DatumGetInt64(sbq_col(i, 1, &isnull));
			SbqClaimed *c = &claims[nclaims];
			SbqClaimResult r;

			r = sbq_lease_claim(seq, queue->queue_id, subqueue, now, &c->prev_lease);
			if (r == SBQ_CLAIM_FULL)
			{
				full = true;
				break;
			}
			if (r == SBQ_CLAIM_BUSY)
				continue;
			c->seq = seq;
			ItemPointerCopy((ItemPointer) DatumGetPointer(sbq_col(i, SBQ_MESSAGE_NATTS + 1,
																  &isnull)), &c->ctid);
			c->row = (int) i;
			c->fate = SBQ_FATE_GONE;
			nclaims++;
		}
		if (full)
			rows_instead = true;
		if (nclaims == 0)
		{
			/* other receivers took them between our scan and our claims */
			if (full || ++busy_rounds > 64)
				break;
			continue;
		}

		/*
		 * Is the row version the scan read still the latest? A settlement
		 * that committed after the scan's snapshot released its lease before
		 * our claim, so a check with a snapshot taken now sees it.
		 */
		sbq_check_claims(claims, nclaims, queue);

		seqs = palloc(sizeof(int64) * nclaims);
		cnts = palloc(sizeof(int32) * nclaims);
		done = palloc(sizeof(bool) * nclaims);
		for (k = 0; k < nclaims; k++)
		{
			SbqClaimed *c = &claims[k];
			HeapTuple	tup;
			TupleDesc	td = fetched->tupdesc;
			bool		isnull;
			int32		row_count;
			bool		row_locked;
			Datum		exp;
			int32		prev;
			bool		had;

			if (c->row < 0)
				continue;
			tup = fetched->vals[c->row];
			row_count = DatumGetInt32(SPI_getbinval(tup, td, 5, &isnull));
			row_locked = DatumGetBool(SPI_getbinval(tup, td, SBQ_MESSAGE_NATTS + 2, &isnull));
			exp = SPI_getbinval(tup, td, SBQ_MESSAGE_NATTS + 3, &isnull);
			prev = Max(row_count, c->prev_lease);
			had = row_locked || c->prev_lease > 0;

			if (subqueue == SBQ_SUBQUEUE_MAIN && had && prev >= queue->max_delivery_count)
				c->fate = SBQ_FATE_OVER;
			else if (subqueue == SBQ_SUBQUEUE_MAIN && !isnull && DatumGetTimestampTz(exp) <= now)
				c->fate = queue->dlq_on_expiration ? SBQ_FATE_EXPIRED : SBQ_FATE_DROP;
			else
				c->fate = had ? SBQ_FATE_STORE : SBQ_FATE_HAND;
			c->count = c->fate == SBQ_FATE_STORE || c->fate == SBQ_FATE_HAND ? prev + 1 : prev;
			if (c->fate != SBQ_FATE_STORE && c->fate != SBQ_FATE_HAND)
				sbq_lease_make_marker(c->seq);
		}

		/*
		 * What has to be written: dead letters, dropped messages, delivery
		 * counts, each only to the row version the scan read. A claim whose
		 * row changed meanwhile is given back (its entry as it was).
		 */
		tids = palloc(sizeof(ItemPointerData) * nclaims);
#define SBQ_COLLECT(cond) \
		do { \
			nlist = 0; \
			for (k = 0; k < nclaims; k++) \
				if (cond) \
				{ \
					seqs[nlist] = claims[k].seq; \
					tids[nlist] = claims[k].ctid; \
					cnts[nlist++] = claims[k].fate == SBQ_FATE_STORE ? \
						claims[k].count - 1 : claims[k].count; \
				} \
			wrote |= nlist > 0; \
		} while (0)

		SBQ_COLLECT(claims[k].fate == SBQ_FATE_OVER);
		j = sbq_lease_deadletter_rows(queue, seqs, cnts, tids, nlist,
									  "MaxDeliveryCountExceeded", description, done);
		sbq_give_back(claims, nclaims, SBQ_FATE_OVER, nlist, done);
		result.dead_lettered += j;

		SBQ_COLLECT(claims[k].fate == SBQ_FATE_EXPIRED);
		j = sbq_lease_deadletter_rows(queue, seqs, cnts, tids, nlist, "TTLExpiredException",
									  "The message expired and was dead-lettered.", done);
		sbq_give_back(claims, nclaims, SBQ_FATE_EXPIRED, nlist, done);
		result.expired_dead_lettered += j;

		SBQ_COLLECT(claims[k].fate == SBQ_FATE_DROP);
		if (nlist > 0)
		{
			Datum		extra[1];

			extra[0] = Int32GetDatum(queue->queue_id);
			result.expired_dropped += sbq_lease_rows(PLAN_LEASE_DROP, seqs, cnts, tids, nlist,
													 extra, 1, done);
			sbq_give_back(claims, nclaims, SBQ_FATE_DROP, nlist, done);
		}

		SBQ_COLLECT(claims[k].fate == SBQ_FATE_STORE);
		if (nlist > 0)
		{
			Datum		extra[1];

			extra[0] = Int32GetDatum(queue->queue_id);
			(void) sbq_lease_rows(PLAN_LEASE_STORE, seqs, cnts, tids, nlist, extra, 1, done);
			sbq_give_back(claims, nclaims, SBQ_FATE_STORE, nlist, done);
		}
#undef SBQ_COLLECT

		/* an expired lease taken over: its delivery is over, count it now */
		for (k = 0; k < nclaims; k++)
			if (claims[k].fate != SBQ_FATE_GONE && claims[k].prev_lease > 0)
				counts.received++;

		/*
		 * The writes may have waited for row locks: a lock handed out starts
		 * now, so none is handed out already expired.
		 */
		if (wrote)
		{
			now = GetCurrentTimestamp();
			until = sbq_add_interval(now, &queue->lock_duration);
		}

		/* hand out the rest, in sequence order */
		for (k = 0; k < nclaims; k++)
		{
			SbqClaimed *c = &claims[k];
			Datum		out[SBQ_MESSAGE_NATTS];
			bool		nulls[SBQ_MESSAGE_NATTS];
			pg_uuid_t  *token;
			int			col;

			if (c->fate != SBQ_FATE_HAND && c->fate != SBQ_FATE_STORE)
				continue;
			for (col = 0; col < SBQ_MESSAGE_NATTS; col++)
				out[col] = SPI_getbinval(fetched->vals[c->row], fetched->tupdesc, col + 1,
										 &nulls[col]);
			token = palloc(sizeof(pg_uuid_t));
			sbq_make_lock_token(c->seq, token);
			sbq_lease_grant(c->seq, token, until, c->count);
			out[2] = UUIDPGetDatum(token);
			nulls[2] = false;
			out[3] = TimestampTzGetDatum(until);
			nulls[3] = false;
			out[4] = Int32GetDatum(c->count);
			nulls[4] = false;
			outs[result.delivered].seq = c->seq;
			outs[result.delivered++].tuple = heap_form_tuple(tupdesc, out, nulls);
		}

		/* the scan came back short: the head has nothing more */
		if (n < (uint64) want || rows_instead)
			break;
		/* others keep taking or changing what we find: give up after a while */
		if (result.delivered == delivered_before && ++busy_rounds > 64)
			break;
	}

	/*
	 * This database's share of the lease table, or the table, is full: lock
	 * the rest in the message rows, as with sbqueue.memory_locks off.
	 */
	if (rows_instead && result.delivered < max_messages)
	{
		SbqReceiveResult r = {0};

		sbq_receive_rows(queue, subqueue, max_messages - result.delivered, SBQ_PEEK_LOCK,
						 GetCurrentTimestamp(), &r, NULL, tupdesc, outs + result.delivered);
		result.delivered += r.delivered;
		result.dead_lettered += r.dead_lettered;
		result.expired_dead_lettered += r.expired_dead_lettered;
		result.expired_dropped += r.expired_dropped;
		counts.received += r.delivered;
	}

	/*
	 * A later pass can find a message before those of an earlier one (one
	 * abandoned meanwhile): hand them out in sequence order.
	 */
	qsort(outs, result.delivered, sizeof(SbqOutRow), sbq_cmp_out_row);
	for (o = 0; o < result.delivered; o++)
		tuplestore_puttuple(tupstore, outs[o].tuple);

	counts.dead_lettered = result.dead_lettered + result.expired_dead_lettered;
	counts.expired = result.expired_dead_lettered + result.expired_dropped;
	if (counts.received + counts.dead_lettered + counts.expired > 0)
		sbq_add_counts(queue->queue_id, &counts);
	if (counts.dead_lettered > 0)
		sbq_wait_wake_at_commit(queue->queue_id);
	return result;
}

/*
 * sbq_put_message_rows
 *		Copy the sbq_message columns of the current SPI result into a
 *		tuplestore, skipping a row whose sequence number is NULL (the row a
 *		receive returns when it handed out nothing).
 */
static int
sbq_put_message_rows_at(Tuplestorestate *tupstore, TupleDesc tupdesc, bool leases,
						TimestampTz now)
{
	Datum		values[SBQ_MESSAGE_NATTS];
	bool		nulls[SBQ_MESSAGE_NATTS];
	uint64		row;
	int			put = 0;

	if (tupdesc->natts != SBQ_MESSAGE_NATTS)
		elog(ERROR, "sbq_message has %d columns, expected %d",
			 tupdesc->natts, SBQ_MESSAGE_NATTS);

	for (row = 0; row < SPI_processed; row++)
	{
		int			col;

		for (col = 0; col < SBQ_MESSAGE_NATTS; col++)
			values[col] = sbq_col(row, col + 1, &nulls[col]);
		if (nulls[0])
			continue;
		if (leases)
		{
			TimestampTz until;
			int32		count;

			/* a lease is the message's lock (it is not in the row) */
			if (sbq_lease_lookup(DatumGetInt64(values[0]), &until, &count))
			{
				values[3] = TimestampTzGetDatum(until);
				nulls[3] = until <= now;
				values[4] = Int32GetDatum(count);
				nulls[4] = false;
			}
		}
		tuplestore_putvalues(tupstore, tupdesc, values, nulls);
		put++;
	}
	return put;
}

static int
sbq_put_message_rows(Tuplestorestate *tupstore, TupleDesc tupdesc)
{
	return sbq_put_message_rows_at(tupstore, tupdesc, false, 0);
}

/*
 * sbq_activate_due
 *		Let up to limit due scheduled messages of a queue join it; returns how
 *		many did. Receive calls this first, so scheduled messages become
 *		receivable on time without the background worker.
 */
static int
sbq_activate_due(const SbqQueue *queue, TimestampTz now, int limit, bool always)
{
	Datum		values[3];
	uint64		n;
	uint64		gen;
	Oid			epoch = sbq_epoch();

	/* nothing is due yet, as far as shared memory knows (qstate.c) */
	if (!sbq_qstate_due(epoch, queue->queue_id, now, &gen) && !always)
		return 0;

	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = TimestampTzGetDatum(now);
	values[2] = Int32GetDatum(limit);
	/* they join the queue with new numbers: announce it (qstate.c) */
	sbq_qstate_send_begin(epoch, queue->queue_id);
	n = sbq_exec(PLAN_ACTIVATE, values, NULL);
	if (n > 0)
	{
		sbq_qstate_send_done(epoch, sbq_max_col(1));
		sbq_wait_wake_at_commit(queue->queue_id);
	}

	/*
	 * When is the next one due? A transaction snapshot may miss a scheduled
	 * send that committed before gen was read: then learn nothing.
	 */
	if (!IsolationUsesXactSnapshot() && !RecoveryInProgress())
	{
		bool		isnull;
		Datum		next;

		(void) sbq_exec(PLAN_NEXT_DUE, values, NULL);
		next = sbq_col(0, 1, &isnull);
		sbq_qstate_set_due(epoch, queue->queue_id, gen, !isnull,
						   isnull ? 0 : DatumGetTimestampTz(next));
	}
	return (int) n;
}

/*
 * sbq_receive_rows
 *		The receive that locks in the message rows (peek-lock) or removes them
 *		(receive-and-delete): up to max_messages, added to *result, into
 *		tupstore, or formed as tuples of tupdesc into outs[] when outs is
 *		not NULL (the caller sorts and puts them).
 */
static void
sbq_receive_rows(const SbqQueue *queue, int16 subqueue, int max_messages,
				 SbqReceiveMode mode, TimestampTz now, SbqReceiveResult *result,
				 Tuplestorestate *tupstore, TupleDesc tupdesc, SbqOutRow *outs)
{
	Datum		values[9];
	char		description[128];
	SbqPlanId	plan = mode == SBQ_PEEK_LOCK ? PLAN_RECEIVE_LOCK : PLAN_RECEIVE_DELETE;
	int			delivered = 0;

	sbq_max_delivery_description(queue, description, sizeof(description));
	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = Int16GetDatum(subqueue);
	values[2] = TimestampTzGetDatum(now);
	values[4] = Int32GetDatum(queue->max_delivery_count);
	values[5] = TimestampTzGetDatum(sbq_add_interval(now, &queue->lock_duration));
	values[6] = BoolGetDatum(queue->dlq_on_expiration);
	values[7] = CStringGetTextDatum(queue->name);
	values[8] = CStringGetTextDatum(description);

	while (delivered < max_messages)
	{
		int			n_over;
		int			n_expired_dead;
		int			n_dropped;
		bool		isnull;

		values[3] = Int32GetDatum(max_messages - delivered);
		if (sbq_exec(plan, values, NULL) == 0)
			elog(ERROR, "receive returned no row");

		n_over = DatumGetInt32(sbq_col(0, SBQ_MESSAGE_NATTS + 1, &isnull));
		n_expired_dead = DatumGetInt32(sbq_col(0, SBQ_MESSAGE_NATTS + 2, &isnull));
		n_dropped = DatumGetInt32(sbq_col(0, SBQ_MESSAGE_NATTS + 3, &isnull));
		if (outs == NULL)
			delivered += sbq_put_message_rows(tupstore, tupdesc);
		else
		{
			uint64		row;

			for (row = 0; row < SPI_processed; row++)
			{
				Datum		out[SBQ_MESSAGE_NATTS];
				bool		nulls[SBQ_MESSAGE_NATTS];
				int			col;

				for (col = 0; col < SBQ_MESSAGE_NATTS; col++)
					out[col] = sbq_col(row, col + 1, &nulls[col]);
				if (nulls[0])
					continue;
				outs[delivered].seq = DatumGetInt64(out[0]);
				outs[delivered++].tuple = heap_form_tuple(tupdesc, out, nulls);
			}
		}
		result->dead_lettered += n_over;
		result->expired_dead_lettered += n_expired_dead;
		result->expired_dropped += n_dropped;

		/* the head held nothing but what we handed out: nothing more to find */
		if (n_over + n_expired_dead + n_dropped == 0)
			break;
	}
	result->delivered += delivered;
}

/*
 * sbq_storage_receive
 *		One receive pass: hand out up to max_messages available messages in
 *		sequence order into tupstore, locking them (peek-lock) or removing them
 *		(receive-and-delete). Messages met on the way whose expired lock was
 *		their last allowed delivery are dead-lettered, and messages whose time
 *		to live has passed are dead-lettered or dropped as the queue says: they
 *		are never handed out, and the pass goes on past them.
 */
SbqReceiveResult
sbq_storage_receive(const SbqQueue *queue, int16 subqueue, int max_messages,
					SbqReceiveMode mode, Tuplestorestate *tupstore, TupleDesc tupdesc)
{
	SbqReceiveResult result = {0};
	SbqCounts	counts = {0};
	TimestampTz now = GetCurrentTimestamp();

	if (subqueue == SBQ_SUBQUEUE_MAIN)
		(void) sbq_activate_due(queue, now, SBQ_MAINTAIN_BATCH, false);

	if (mode == SBQ_PEEK_LOCK && sbq_leasing())
		return sbq_receive_leased(queue, subqueue, max_messages, now, tupstore, tupdesc);

	/*
	 * The statements below skip messages under a lease, expired ones too:
	 * end the expired leases of this queue first, so their messages are
	 * receivable here. Not with sbqueue.memory_locks off: that session's
	 * transactions stay free of lease changes (PREPARE TRANSACTION refuses
	 * those), and maintenance ends them.
	 */
	if (sbq_leasing())
	{
		int64		released = 0;
		int64		dead = 0;

		(void) sbq_lease_sweep(queue, 1, queue->queue_id, now, &released, &dead);
	}

	sbq_receive_rows(queue, subqueue, max_messages, mode, now, &result, tupstore, tupdesc,
					 NULL);

	counts.received = result.delivered;
	counts.completed = mode == SBQ_RECEIVE_AND_DELETE ? result.delivered : 0;
	counts.dead_lettered = result.dead_lettered + result.expired_dead_lettered;
	counts.expired = result.expired_dead_lettered + result.expired_dropped;
	if (counts.received + counts.dead_lettered + counts.expired > 0)
		sbq_add_counts(queue->queue_id, &counts);
	if (counts.dead_lettered > 0)
		sbq_wait_wake_at_commit(queue->queue_id);	/* the dead-letter sub-queue got some */
	return result;
}

/*
 * sbq_storage_peek
 *		Up to max_messages messages from from_seq on, in sequence order and in
 *		any state, without locking or counting them.
 */
int
sbq_storage_peek(const SbqQueue *queue, int16 subqueue, int max_messages,
				 int64 from_seq, Tuplestorestate *tupstore, TupleDesc tupdesc)
{
	Datum		values[5];
	TimestampTz now = GetCurrentTimestamp();

	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = Int16GetDatum(subqueue);
	values[2] = Int64GetDatum(from_seq);
	values[3] = TimestampTzGetDatum(now);
	values[4] = Int32GetDatum(max_messages);
	(void) sbq_exec(PLAN_PEEK, values, NULL);
	return sbq_put_message_rows_at(tupstore, tupdesc, sbq_lease_available(), now);
}

/*
 * sbq_row_lock_valid
 *		Whether a lock stored in a row, whose expiry a settling statement
 *		returned, is still valid by a clock read now: after that statement,
 *		so after it held the row lock, which it may have waited for while
 *		the lock ran out (and a leasing receive took the message over).
 */
static bool
sbq_row_lock_valid(Datum locked_until)
{
	return DatumGetTimestampTz(locked_until) > GetCurrentTimestamp();
}

static void
sbq_lock_args(Datum *values, const SbqQueue *queue, int16 subqueue,
			  const pg_uuid_t *token, TimestampTz now)
{
	values[0] = Int64GetDatum(sbq_token_sequence(token));
	values[1] = Int32GetDatum(queue->queue_id);
	values[2] = Int16GetDatum(subqueue);
	values[3] = UUIDPGetDatum(token);
	values[4] = TimestampTzGetDatum(now);
}

/*
 * sbq_storage_complete
 *		Remove the message locked by token; false when the lock is not valid.
 */
bool
sbq_storage_complete(const SbqQueue *queue, int16 subqueue, const pg_uuid_t *token)
{
	Datum		values[5];
	SbqCounts	counts = {0};
	TimestampTz now = GetCurrentTimestamp();
	int64		seq = sbq_token_sequence(token);

	if (sbq_lease_holds(seq, token, queue->queue_id, subqueue, now))
	{
		int32		delivery_count;

		/* the row lock orders us after another settler of the same token */
		values[0] = Int64GetDatum(seq);
		values[1] = Int32GetDatum(queue->queue_id);
		values[2] = Int16GetDatum(subqueue);
		if (sbq_exec(PLAN_LEASE_COMPLETE, values, NULL) != 1 ||
			!sbq_lease_settle(seq, token, queue->queue_id, subqueue, GetCurrentTimestamp(),
							  &delivery_count))
			return false;		/* the caller's error undoes the delete */
		counts.received = 1;
	}
	else
	{
		bool		isnull;

		sbq_lock_args(values, queue, subqueue, token, now);
		if (sbq_exec(PLAN_COMPLETE, values, NULL) != 1)
			return false;
		/* judged again now that the row is ours (the delete may have waited) */
		if (!sbq_row_lock_valid(sbq_col(0, 1, &isnull)))
			return false;		/* the caller's error undoes the delete */
	}
	counts.completed = 1;
	sbq_add_counts(queue->queue_id, &counts);
	return true;
}

/*
 * sbq_storage_complete_many
 *		Remove the messages locked by tokens (distinct, checked by the caller).
 *		settled[i] tells whether token i was valid; returns how many were.
 *		The caller raises an error unless all were, which undoes the rest.
 */
int
sbq_storage_complete_many(const SbqQueue *queue, int16 subqueue,
						  Datum *tokens, int ntokens, bool *settled)
{
	Datum		values[5];
	Datum	   *seqs = palloc(sizeof(Datum) * ntokens);
	Datum	   *row_tokens = palloc(sizeof(Datum) * ntokens);
	int64	   *lease_seqs = palloc(sizeof(int64) * ntokens);
	int		   *lease_index = palloc(sizeof(int) * ntokens);
	bool	   *leased = palloc(sizeof(bool) * ntokens);
	int			nlease = 0;
	int			nrow = 0;
	int			n = 0;
	uint64		rows;
	uint64		row;
	int			i;
	SbqCounts	counts = {0};
	TimestampTz now = GetCurrentTimestamp();

	/* tokens of leases, and tokens of locks stored in the rows */
	for (i = 0; i < ntokens; i++)
	{
		pg_uuid_t  *token = DatumGetUUIDP(tokens[i]);
		int64		seq = sbq_token_sequence(token);

		settled[i] = false;
		leased[i] = sbq_lease_holds(seq, token, queue->queue_id, subqueue, now);
		if (leased[i])
		{
			lease_index[nlease] = i;
			lease_seqs[nlease++] = seq;
		}
		else
		{
			seqs[nrow] = Int64GetDatum(seq);
			row_tokens[nrow++] = tokens[i];
		}
	}

	if (nlease > 0)
	{
		values[0] = sbq_int8_array(lease_seqs, nlease);
		values[1] = Int32GetDatum(queue->queue_id);
		values[2] = Int16GetDatum(subqueue);
		rows = sbq_exec(PLAN_LEASE_COMPLETE_MANY, values, NULL);
		for (row = 0; row < rows; row++)
		{
			bool		isnull;
			int64		seq = DatumGetInt64(sbq_col(row, 1, &isnull));
			int			k;

			for (k = 0; k < nlease; k++)
			{
				int32		delivery_count;

				i = lease_index[k];
				if (lease_seqs[k] == seq &&
					sbq_lease_settle(seq, DatumGetUUIDP(tokens[i]), queue->queue_id,
									 subqueue, GetCurrentTimestamp(), &delivery_count))
				{
					settled[i] = true;
					n++;
					counts.received++;
				}
			}
		}
	}

	if (nrow > 0)
	{
		values[0] = PointerGetDatum(construct_array(seqs, nrow, INT8OID,
													sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		values[1] = Int32GetDatum(queue->queue_id);
		values[2] = Int16GetDatum(subqueue);
		values[3] = PointerGetDatum(construct_array(row_tokens, nrow, UUIDOID,
													UUID_LEN, false, TYPALIGN_CHAR));
		values[4] = TimestampTzGetDatum(now);
		rows = sbq_exec(PLAN_COMPLETE_MANY, values, NULL);
		for (row = 0; row < rows; row++)
		{
			bool		isnull;
			pg_uuid_t  *done = DatumGetUUIDP(sbq_col(row, 1, &isnull));

			/* judged again now that the row is ours: else not settled */
			if (!sbq_row_lock_valid(sbq_col(row, 2, &isnull)))
				continue;
			for (i = 0; i < ntokens; i++)
				if (!leased[i] &&
					memcmp(done->data, DatumGetUUIDP(tokens[i])->data, UUID_LEN) == 0)
				{
					settled[i] = true;
					n++;
				}
		}
	}
	if (n == ntokens)
	{
		counts.completed = n;
		sbq_add_counts(queue->queue_id, &counts);
	}
	return n;
}

/*
 * sbq_settle_lock
 *		Lock the message of token for a settlement that keeps it (abandon,
 *		defer, dead-letter): its row locked, its lease (if the lock is one)
 *		being settled. Fills in its delivery count, and whether its time to
 *		live has passed; *leased says the lock was a lease (the delivery ends
 *		now, for the "received" counter). False when the lock is not valid.
 */
static bool
sbq_settle_lock(const SbqQueue *queue, int16 subqueue, const pg_uuid_t *token,
				TimestampTz now, int32 *delivery_count, bool *expired, bool *leased)
{
	Datum		values[5];
	int64		seq = sbq_token_sequence(token);
	bool		isnull;
	Datum		expires_at;

	*leased = sbq_lease_holds(seq, token, queue->queue_id, subqueue, now);
	if (*leased)
	{
		values[0] = Int64GetDatum(seq);
		values[1] = Int32GetDatum(queue->queue_id);
		values[2] = Int16GetDatum(subqueue);
		if (sbq_exec(PLAN_ROW_FOR_SETTLE, values, NULL) != 1)
			return false;
	}
	else
	{
		sbq_lock_args(values, queue, subqueue, token, now);
		if (sbq_exec(PLAN_LOCK_FOR_SETTLE, values, NULL) != 1 ||
			!sbq_row_lock_valid(sbq_col(0, 4, &isnull)))
			return false;
	}
	*delivery_count = DatumGetInt32(sbq_col(0, 1, &isnull));
	expires_at = sbq_col(0, 3, &isnull);
	*expired = !isnull && DatumGetTimestampTz(expires_at) <= now;
	/* judged by a clock read now that the row is ours (the lock may have waited) */
	if (*leased &&
		!sbq_lease_settle(seq, token, queue->queue_id, subqueue, GetCurrentTimestamp(),
						  delivery_count))
		return false;
	return true;
}

/*
 * sbq_storage_release
 *		Abandon (state -1: keep the state) or defer (state SBQ_STATE_DEFERRED)
 *		the message locked by token: release the lock at once, merging
 *		props_to_modify into its application properties. Both count as a
 *		failed delivery: on the last allowed one the message is dead-lettered
 *		instead (MaxDeliveryCountExceeded), and one whose time to live has
 *		passed meanwhile expires now (dead-lettered or dropped as the queue
 *		says). In the dead-letter sub-queue there is no delivery limit and no
 *		expiry. False when the lock is not valid.
 */
bool
sbq_storage_release(const SbqQueue *queue, int16 subqueue, const pg_uuid_t *token,
					int16 state, Jsonb *props_to_modify)
{
	Datum		values[6];
	bool		nulls[6] = {false, false, false, false, false, false};
	TimestampTz now = GetCurrentTimestamp();
	int64		seq = sbq_token_sequence(token);
	int32		delivery_count;
	bool		expired;
	bool		leased;
	SbqCounts	counts = {0};

	if (!sbq_settle_lock(queue, subqueue, token, now, &delivery_count, &expired, &leased))
		return false;
	counts.received = leased ? 1 : 0;

	if (state == SBQ_STATE_DEFERRED)
		counts.deferred = 1;
	else
		counts.abandoned = 1;
	values[0] = Int64GetDatum(seq);
	if (subqueue == SBQ_SUBQUEUE_MAIN && delivery_count >= queue->max_delivery_count)
	{
		char		description[128];

		sbq_max_delivery_description(queue, description, sizeof(description));
		values[1] = CStringGetTextDatum("MaxDeliveryCountExceeded");
		values[2] = CStringGetTextDatum(description);
		values[3] = CStringGetTextDatum(queue->name);
		values[4] = PointerGetDatum(props_to_modify);
		nulls[4] = props_to_modify == NULL;
		values[5] = Int32GetDatum(delivery_count);
		(void) sbq_exec(PLAN_DEADLETTER, values, nulls);
		counts.dead_lettered = 1;
	}
	else if (subqueue == SBQ_SUBQUEUE_MAIN && expired && queue->dlq_on_expiration)
	{
		values[1] = CStringGetTextDatum("TTLExpiredException");
		values[2] = CStringGetTextDatum("The message expired and was dead-lettered.");
		values[3] = CStringGetTextDatum(queue->name);
		values[4] = PointerGetDatum(props_to_modify);
		nulls[4] = props_to_modify == NULL;
		values[5] = Int32GetDatum(delivery_count);
		(void) sbq_exec(PLAN_DEADLETTER, values, nulls);
		counts.dead_lettered = 1;
		counts.expired = 1;
	}
	else if (subqueue == SBQ_SUBQUEUE_MAIN && expired)
	{
		(void) sbq_exec(PLAN_DELETE_ONE, values, NULL);
		counts.expired = 1;
	}
	else
	{
		values[1] = PointerGetDatum(props_to_modify);
		nulls[1] = props_to_modify == NULL;
		values[2] = Int16GetDatum(state);
		nulls[2] = state < 0;
		values[3] = Int32GetDatum(delivery_count);
		(void) sbq_exec(PLAN_UNLOCK, values, nulls);
	}
	sbq_add_counts(queue->queue_id, &counts);
	/* an abandoned message, or a new dead letter, can be received now */
	if (counts.dead_lettered > 0 || (counts.expired == 0 && state != SBQ_STATE_DEFERRED))
		sbq_wait_wake_at_commit(queue->queue_id);
	return true;
}

/*
 * sbq_storage_deadletter
 *		Move the message locked by token to the dead-letter sub-queue with a
 *		reason and description; false when the lock is not valid.
 */
bool
sbq_storage_deadletter(const SbqQueue *queue, const pg_uuid_t *token,
					   text *reason, text *description, Jsonb *props_to_modify)
{
	Datum		values[6];
	bool		nulls[6] = {false, false, false, false, false, false};
	SbqCounts	counts = {0};
	int32		delivery_count;
	bool		expired;
	bool		leased;

	if (!sbq_settle_lock(queue, SBQ_SUBQUEUE_MAIN, token, GetCurrentTimestamp(),
						 &delivery_count, &expired, &leased))
		return false;
	counts.received = leased ? 1 : 0;
	values[5] = Int32GetDatum(delivery_count);
	values[0] = Int64GetDatum(sbq_token_sequence(token));
	values[1] = PointerGetDatum(reason);
	nulls[1] = reason == NULL;
	values[2] = PointerGetDatum(description);
	nulls[2] = description == NULL;
	values[3] = CStringGetTextDatum(queue->name);
	values[4] = PointerGetDatum(props_to_modify);
	nulls[4] = props_to_modify == NULL;
	(void) sbq_exec(PLAN_DEADLETTER, values, nulls);
	counts.dead_lettered = 1;
	sbq_add_counts(queue->queue_id, &counts);
	sbq_wait_wake_at_commit(queue->queue_id);
	return true;
}

/*
 * sbq_storage_cancel_scheduled
 *		Delete a scheduled message; false when seq is not one of this queue.
 */
bool
sbq_storage_cancel_scheduled(const SbqQueue *queue, int64 seq)
{
	Datum		values[2];

	values[0] = Int64GetDatum(seq);
	values[1] = Int32GetDatum(queue->queue_id);
	return sbq_exec(PLAN_CANCEL_SCHEDULED, values, NULL) == 1;
}

/*
 * sbq_storage_receive_deferred
 *		Lock and return the deferred messages with the given (distinct)
 *		sequence numbers, all or none: the first number that is not a deferred
 *		message of this queue free to lock is returned in *missing (and false),
 *		with nothing locked. A message is not free when another transaction
 *		holds its row, when a valid lock holds it, when its time to live has
 *		passed, or when its expired lock was its last allowed delivery: those
 *		are not receivable, and maintenance moves the last two on.
 */
bool
sbq_storage_receive_deferred(const SbqQueue *queue, int16 subqueue, Datum *seqs, int nseqs,
							 Tuplestorestate *tupstore, TupleDesc tupdesc, int64 *missing)
{
	Datum		values[3];
	TimestampTz now = GetCurrentTimestamp();
	bool	   *ok = palloc0(sizeof(bool) * nseqs);
	ArrayType  *arr = construct_array(seqs, nseqs, INT8OID, sizeof(int64),
									  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE);
	uint64		n;
	uint64		row;
	int			i;
	SbqCounts	counts = {0};

	values[0] = PointerGetDatum(arr);
	values[1] = Int32GetDatum(queue->queue_id);
	values[2] = Int16GetDatum(subqueue);
	n = sbq_exec(PLAN_DEFERRED_CANDIDATES, values, NULL);
	for (row = 0; row < n; row++)
	{
		bool		isnull;
		int64		seq = DatumGetInt64(sbq_col(row, 1, &isnull));
		int16		state = DatumGetInt16(sbq_col(row, 2, &isnull));
		Datum		locked_until = sbq_col(row, 3, &isnull);
		bool		has_lock = !isnull;
		int32		delivery_count = DatumGetInt32(sbq_col(row, 4, &isnull));
		Datum		expires_at = sbq_col(row, 5, &isnull);
		bool		free = state == SBQ_STATE_DEFERRED;

		if (has_lock && DatumGetTimestampTz(locked_until) > now)
			free = false;
		if (subqueue == SBQ_SUBQUEUE_MAIN)
		{
			if (!isnull && DatumGetTimestampTz(expires_at) <= now)
				free = false;
			if (has_lock && delivery_count >= queue->max_delivery_count)
				free = false;
		}
		for (i = 0; i < nseqs; i++)
			if (DatumGetInt64(seqs[i]) == seq)
				ok[i] = free;
	}
	for (i = 0; i < nseqs; i++)
	{
		if (!ok[i])
		{
			*missing = DatumGetInt64(seqs[i]);
			return false;
		}
	}

	values[1] = TimestampTzGetDatum(sbq_add_interval(now, &queue->lock_duration));
	(void) sbq_exec(PLAN_LOCK_DEFERRED, values, NULL);
	counts.received = sbq_put_message_rows(tupstore, tupdesc);
	if (counts.received != nseqs)
		elog(ERROR, "locked %d of %d deferred messages", (int) counts.received, nseqs);
	sbq_add_counts(queue->queue_id, &counts);
	return true;
}

/*
 * sbq_storage_resubmit
 *		Move dead letters back to the queue as new messages: those with the
 *		given (distinct) sequence numbers, or all when seqs is NULL; none under
 *		a valid lock. Returns how many moved; with seqs, the caller checks that
 *		all did (an error then undoes the move), and *missing names one that
 *		did not.
 */
int
sbq_storage_resubmit(const SbqQueue *queue, Datum *seqs, int nseqs, int64 *missing)
{
	Datum		values[3];
	bool		nulls[3] = {false, false, false};
	uint64		n;
	SbqCounts	counts = {0};

	/*
	 * Dead letters under an expired lease can be resubmitted once it ended;
	 * with sbqueue.memory_locks off, maintenance ends it (the transaction
	 * stays free of lease changes, so it can be prepared).
	 */
	if (sbq_leasing())
	{
		int64		released = 0;
		int64		dead = 0;

		(void) sbq_lease_sweep(queue, 1, queue->queue_id, GetCurrentTimestamp(),
							   &released, &dead);
	}
	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
	if (seqs != NULL)
		values[2] = PointerGetDatum(construct_array(seqs, nseqs, INT8OID, sizeof(int64),
													FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	else
		nulls[2] = true;
	sbq_qstate_send_begin(sbq_epoch(), queue->queue_id);
	n = sbq_exec(PLAN_RESUBMIT, values, nulls);
	if (n > 0)
		sbq_qstate_send_done(sbq_epoch(), sbq_max_col(2));
	if (seqs != NULL && n != (uint64) nseqs)
	{
		int			i;

		for (i = 0; i < nseqs; i++)
		{
			uint64		row;
			bool		moved = false;

			for (row = 0; row < n && !moved; row++)
			{
				bool		isnull;

				moved = DatumGetInt64(sbq_col(row, 1, &isnull)) == DatumGetInt64(seqs[i]);
			}
			if (!moved)
			{
				*missing = DatumGetInt64(seqs[i]);
				break;
			}
		}
	}
	if (n > 0)
	{
		counts.sent = n;
		sbq_add_counts(queue->queue_id, &counts);
		sbq_wait_wake_at_commit(queue->queue_id);
	}
	return (int) n;
}

/*
 * sbq_storage_renew
 *		Extend the lock of token by the queue's lock duration from now; false
 *		when the lock is not valid.
 */
bool
sbq_storage_renew(const SbqQueue *queue, int16 subqueue, const pg_uuid_t *token,
				  TimestampTz *locked_until)
{
	Datum		values[6];
	TimestampTz now = GetCurrentTimestamp();
	bool		isnull;

	int64		seq = sbq_token_sequence(token);

	if (sbq_lease_holds(seq, token, queue->queue_id, subqueue, now))
	{
		TimestampTz until = sbq_add_interval(now, &queue->lock_duration);

		/* a lease outlives a purge of its message: the message must be there */
		values[0] = Int64GetDatum(seq);
		values[1] = Int32GetDatum(queue->queue_id);
		values[2] = Int16GetDatum(subqueue);
		if (sbq_exec(PLAN_ROW_EXISTS, values, NULL) != 1)
			return false;
		if (!sbq_lease_renew(seq, token, queue->queue_id, subqueue, now, until))
		{
			/*
			 * Another transaction is settling it: wait for that one (its row
			 * lock) and look again; the lease is back if it rolled back.
			 */
			if (!sbq_lease_holds(seq, token, queue->queue_id, subqueue, now) ||
				sbq_exec(PLAN_ROW_FOR_SETTLE, values, NULL) != 1)
				return false;
			now = GetCurrentTimestamp();
			until = sbq_add_interval(now, &queue->lock_duration);
			if (!sbq_lease_renew(seq, token, queue->queue_id, subqueue, now, until))
				return false;
		}
		*locked_until = until;
		return true;
	}
	/* lock the row, then judge the lock with a clock read after that */
	sbq_lock_args(values, queue, subqueue, token, now);
	if (sbq_exec(PLAN_LOCK_FOR_SETTLE, values, NULL) != 1 ||
		!sbq_row_lock_valid(sbq_col(0, 4, &isnull)))
		return false;
	now = GetCurrentTimestamp();
	sbq_lock_args(values, queue, subqueue, token, now);
	values[5] = TimestampTzGetDatum(sbq_add_interval(now, &queue->lock_duration));
	if (sbq_exec(PLAN_RENEW, values, NULL) != 1)
		return false;
	*locked_until = DatumGetTimestampTz(sbq_col(0, 1, &isnull));
	return true;
}

/*
 * sbq_storage_maintain
 *		One maintenance pass over this database, each step of it bounded by
 *		SBQ_MAINTAIN_BATCH rows a queue: activate due scheduled messages,
 *		dead-letter messages whose expired lock was their last allowed
 *		delivery and release the other expired locks, expire messages whose
 *		time to live has passed, forget duplicate-detection history older than
 *		the window. Returns the counts as a JSON object; "more" says a step
 *		hit its bound and another pass would do more.
 *
 * Every step takes its rows with SKIP LOCKED, so a pass never waits for
 * receivers, settlers or another pass: passes running at the same time share
 * the work. (A pass-wide lock would let one caller holding a transaction open
 * stop maintenance for the whole database.) On a standby nothing happens and
 * "skipped" is true.
 */
Jsonb *
sbq_storage_maintain(void)
{
	TimestampTz now = GetCurrentTimestamp();
	int64		nqueues = 0;
	int64		activated = 0;
	int64		released = 0;
	int64		dead_lettered = 0;
	int64		expired_dead = 0;
	int64		expired_dropped = 0;
	int64		forgotten = 0;
	bool		more = false;
	bool		skipped = false;
	StringInfoData buf;

	if (RecoveryInProgress())
		skipped = true;
	else
	{
		SbqQueue   *queues;
		uint64		q;

		bool		no_prepared;
		bool		isnull;

		/* a prepared transaction's floor holds until none is left (qstate.c) */
		(void) sbq_exec(PLAN_NO_PREPARED, NULL, NULL);
		no_prepared = DatumGetBool(sbq_col(0, 1, &isnull));

		nqueues = (int64) sbq_exec(PLAN_ALL_QUEUES, NULL, NULL);
		queues = palloc(sizeof(SbqQueue) * Max(nqueues, 1));
		for (q = 0; q < (uint64) nqueues; q++)
			sbq_queue_from_row(q, &queues[q]);

		/* counts gathered in shared memory go to sbq.queue_counters */
		sbq_store_all_counts();

		/* expired leases: delivery counts stored, or dead letters */
		more |= sbq_lease_sweep(queues, (int) nqueues, 0, now, &released,
								&dead_lettered) >= SBQ_MAINTAIN_BATCH;

		for (q = 0; q < (uint64) nqueues; q++)
		{
			SbqQueue   *queue = &queues[q];
			SbqCounts	counts = {0};
			Datum		values[7];
			char		description[128];
			bool		isnull;
			int			n;
			int			d;
			int			r;
			int64		hint;

			CHECK_FOR_INTERRUPTS();

			if (sbq_qstate_refresh(sbq_epoch(), queue->queue_id, now, no_prepared, &hint))
			{
				values[0] = Int32GetDatum(queue->queue_id);
				values[1] = Int64GetDatum(hint);
				if (sbq_exec(PLAN_BELOW_HEAD, values, NULL) > 0)
					sbq_qstate_lower(sbq_epoch(), queue->queue_id,
									 DatumGetInt64(sbq_col(0, 1, &isnull)));
			}
			n = sbq_activate_due(queue, now, SBQ_MAINTAIN_BATCH, true);
			activated += n;
			more |= n >= SBQ_MAINTAIN_BATCH;

			sbq_max_delivery_description(queue, description, sizeof(description));
			values[0] = Int32GetDatum(queue->queue_id);
			values[1] = TimestampTzGetDatum(now);
			values[2] = Int32GetDatum(queue->max_delivery_count);
			values[3] = Int32GetDatum(SBQ_MAINTAIN_HEAD);
			values[4] = Int32GetDatum(SBQ_MAINTAIN_BATCH);
			values[5] = CStringGetTextDatum(queue->name);
			values[6] = CStringGetTextDatum(description);
			(void) sbq_exec(PLAN_MAINTAIN_LOCKS, values, NULL);
			d = DatumGetInt32(sbq_col(0, 1, &isnull));
			r = DatumGetInt32(sbq_col(0, 2, &isnull));
			dead_lettered += d;
			released += r;
			counts.dead_lettered += d;
			more |= d + r >= SBQ_MAINTAIN_BATCH;

			values[2] = Int32GetDatum(SBQ_MAINTAIN_BATCH);
			values[3] = BoolGetDatum(queue->dlq_on_expiration);
			values[4] = CStringGetTextDatum(queue->name);
			(void) sbq_exec(PLAN_MAINTAIN_TTL, values, NULL);
			d = DatumGetInt32(sbq_col(0, 1, &isnull));
			n = DatumGetInt32(sbq_col(0, 2, &isnull));
			expired_dead += d;
			expired_dropped += n;
			counts.dead_lettered += d;
			counts.expired += d + n;
			more |= d + n >= SBQ_MAINTAIN_BATCH;

			if (queue->has_dup_window)
			{
				values[1] = TimestampTzGetDatum(now - sbq_interval_usecs(&queue->dup_window));
				values[2] = Int32GetDatum(SBQ_MAINTAIN_BATCH);
				n = (int) sbq_exec(PLAN_FORGET_DUPLICATES, values, NULL);
				forgotten += n;
				more |= n >= SBQ_MAINTAIN_BATCH;
			}

			if (counts.dead_lettered + counts.expired > 0)
				sbq_add_counts(queue->queue_id, &counts);
			if (r + counts.dead_lettered > 0)
				sbq_wait_wake_at_commit(queue->queue_id);
		}
	}

	initStringInfo(&buf);
	appendStringInfo(&buf,
					 "{\"queues\": " INT64_FORMAT ", \"scheduled_activated\": " INT64_FORMAT
					 ", \"locks_released\": " INT64_FORMAT ", \"dead_lettered\": " INT64_FORMAT
					 ", \"expired_dead_lettered\": " INT64_FORMAT
					 ", \"expired_dropped\": " INT64_FORMAT
					 ", \"duplicates_forgotten\": " INT64_FORMAT
					 ", \"more\": %s, \"skipped\": %s}",
					 nqueues, activated, released, dead_lettered, expired_dead,
					 expired_dropped, forgotten, more ? "true" : "false",
					 skipped ? "true" : "false");
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
}
