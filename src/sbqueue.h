/*-------------------------------------------------------------------------
 *
 * sbqueue.h
 *	  Declarations every part of sbqueue shares: the SQLSTATEs, limits, the
 *	  queue, address, send and receive types, the argument checks and helpers
 *	  of util.c, and the settings of sbqueue.c.
 *
 * The SQL-callable functions (api.c, api_queues.c) validate their arguments
 * and never touch a table: every read and write of queue state goes through
 * the storage interface (storage.h), so that its design can change without
 * touching the SQL surface.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/sbqueue.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SBQUEUE_H
#define SBQUEUE_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "funcapi.h"
#include "storage/lockdefs.h"
#include "utils/array.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/resowner.h"
#include "utils/tuplestore.h"
#include "utils/uuid.h"

/* SQLSTATEs of API.md */
#define SBQ_ERRCODE_QUEUE_NOT_FOUND		MAKE_SQLSTATE('S','B','0','0','1')
#define SBQ_ERRCODE_LOCK_LOST			MAKE_SQLSTATE('S','B','0','0','2')
#define SBQ_ERRCODE_MESSAGE_NOT_FOUND	MAKE_SQLSTATE('S','B','0','0','3')
#define SBQ_ERRCODE_SESSION_LOCK_LOST	MAKE_SQLSTATE('S','B','0','0','4')
#define SBQ_ERRCODE_SESSION_LOCKED		MAKE_SQLSTATE('S','B','0','0','5')
#define SBQ_ERRCODE_QUEUE_EXISTS		MAKE_SQLSTATE('S','B','0','0','6')
#define SBQ_ERRCODE_MESSAGE_TOO_LARGE	MAKE_SQLSTATE('S','B','0','0','7')
#define SBQ_ERRCODE_ENTITY_NOT_FOUND	MAKE_SQLSTATE('S','B','0','0','8')
#define SBQ_ERRCODE_INVALID_OPERATION	MAKE_SQLSTATE('S','B','0','1','0')

#define SBQ_MAX_NAME_LEN		260
#define SBQ_MAX_ID_LEN			128
#define SBQ_MAX_RECEIVE			5000
#define SBQ_MAX_BATCH			5000	/* elements of any array argument */
#define SBQ_MAX_PROPERTIES_SIZE	65536	/* bytes of a message's properties */
#define SBQ_MAX_MESSAGE_SIZE	(256 * 1024 * 1024)	/* the largest max_message_size */
#define SBQ_MAX_BATCH_BYTES		(64 * 1024 * 1024)	/* bytes of a batch's messages */
#define SBQ_DLQ_SUFFIX			"/$deadletterqueue"

/*
 * field4 of the advisory lock tags sbqueue takes (util.c, dist_layout.c): user
 * advisory locks use 1 and 2, so these never collide with an application's
 * pg_advisory_lock().
 */
#define SBQ_LOCKTAG_FIELD4		0x5342

/* the content types a send gives a text and a JSON body without one */
#define SBQ_CONTENT_TYPE_TEXT	"text/plain; charset=utf-8"
#define SBQ_CONTENT_TYPE_JSON	"application/json"

/* sub-queues and message states, as stored */
#define SBQ_SUBQUEUE_MAIN		0
#define SBQ_SUBQUEUE_DLQ		1
/* not a sub-queue: the lock of a session, as an entry of the lease table */
#define SBQ_SUBQUEUE_SESSION	9

#define SBQ_STATE_ACTIVE		0
#define SBQ_STATE_DEFERRED		1
#define SBQ_STATE_SCHEDULED		2

/* Where a call is addressed: a queue, or its dead-letter sub-queue. */
typedef struct SbqAddress
{
	char	   *name;			/* the queue's name as the caller wrote it */
	char	   *key;			/* lower-case, for lookups */
	int16		subqueue;		/* SBQ_SUBQUEUE_* */
} SbqAddress;

/* Rights on a queue (rights.c), as stored in sbq.rights: bits. */
#define SBQ_RIGHT_SEND			1
#define SBQ_RIGHT_LISTEN		2
#define SBQ_RIGHT_MANAGE		4	/* implies the other two */
#define SBQ_RIGHT_ANY			(SBQ_RIGHT_SEND | SBQ_RIGHT_LISTEN | SBQ_RIGHT_MANAGE)

/* The rights a role (InvalidOid: PUBLIC) holds on a queue. */
typedef struct SbqGrant
{
	Oid			role;
	int16		rights;
} SbqGrant;

/* A queue's properties, as stored in sbq.queues, and the rights on it. */
typedef struct SbqQueue
{
	int32		queue_id;
	char	   *name;
	Interval	lock_duration;
	int32		max_delivery_count;
	bool		has_default_ttl;
	Interval	default_ttl;
	bool		dlq_on_expiration;
	bool		has_dup_window;
	Interval	dup_window;
	bool		requires_session;
	char	   *forward_to;
	char	   *forward_dlq_to;
	int32		max_message_size;
	bool		has_dead_letter_ttl;
	Interval	dead_letter_ttl;	/* how long dead letters are kept */
	bool		has_retry_delay;	/* an abandon waits before redelivery (0.9 on) */
	Interval	retry_delay;
	bool		retry_backoff;	/* doubled with each delivery */
	bool		has_max_retry_delay;
	Interval	max_retry_delay;
	int			ngrants;		/* the rights held on it (none before 0.5) */
	SbqGrant   *grants;
	bool		is_topic;		/* a topic (topics.c): only the name, the TTL,
								 * the duplicate detection window and the size
								 * are set */
} SbqQueue;

/* The optional properties of a send, shared by every message of a batch. */
typedef struct SbqSendProps
{
	text	   *message_id;
	text	   *session_id;
	text	   *correlation_id;
	text	   *subject;
	text	   *content_type;
	text	   *reply_to;
	text	   *reply_to_session_id;
	text	   *to_address;
	bool		has_ttl;
	Interval	ttl;
	bool		has_scheduled;
	TimestampTz scheduled;
	Jsonb	   *application_properties;
	/* what a dead letter forwarded out of its sub-queue keeps (R10.20), else NULL */
	text	   *dead_letter_reason;
	text	   *dead_letter_description;
	text	   *dead_letter_source;
} SbqSendProps;

/* Receive modes */
typedef enum SbqReceiveMode
{
	SBQ_PEEK_LOCK,
	SBQ_RECEIVE_AND_DELETE
} SbqReceiveMode;

/* What a receive pass did besides handing out messages. */
typedef struct SbqReceiveResult
{
	int			delivered;		/* rows put into the tuplestore */
	int			dead_lettered;	/* over-delivered, moved to the DLQ */
	int			expired_dead_lettered;	/* TTL passed, moved to the DLQ */
	int			expired_dropped;	/* TTL passed, removed */
} SbqReceiveResult;

/* Limits of the queue properties */
#define SBQ_MIN_LOCK_DURATION	(5 * USECS_PER_SEC)
#define SBQ_MAX_LOCK_DURATION	(5 * 60 * USECS_PER_SEC)
#define SBQ_MIN_TTL				USECS_PER_SEC
#define SBQ_MIN_DUP_WINDOW		(20 * USECS_PER_SEC)
#define SBQ_MAX_DUP_WINDOW		(7 * USECS_PER_DAY)

/* The queue properties as arguments of sbq_create_queue and sbq_update_queue (api_queues.c). */
enum
{
	ARG_QUEUE,
	ARG_LOCK_DURATION,
	ARG_MAX_DELIVERY_COUNT,
	ARG_DEFAULT_TTL,
	ARG_DLQ_ON_EXPIRATION,
	ARG_DUP_WINDOW,
	ARG_REQUIRES_SESSION,
	ARG_FORWARD_TO,
	ARG_FORWARD_DLQ_TO,
	ARG_MAX_MESSAGE_SIZE,
	ARG_DEAD_LETTER_TTL,		/* from 0.4: SQL before it passes one argument less */
	ARG_RETRY_DELAY,			/* from 0.9: SQL before it passes these three less */
	ARG_RETRY_BACKOFF,
	ARG_MAX_RETRY_DELAY,
	SBQ_NUM_QUEUE_ARGS
};

/* The attributes of sbq_new_message, in order (from 0.9). */
enum
{
	NEW_BODY = 1,
	NEW_MESSAGE_ID,
	NEW_SESSION_ID,
	NEW_CORRELATION_ID,
	NEW_SUBJECT,
	NEW_CONTENT_TYPE,
	NEW_REPLY_TO,
	NEW_REPLY_TO_SESSION_ID,
	NEW_TO_ADDRESS,
	NEW_TTL,
	NEW_SCHEDULED,
	NEW_APP_PROPERTIES,
	NEW_NATTS = NEW_APP_PROPERTIES
};

/* api.c: the body and properties of an sbq_new_message */
extern bytea *sbq_new_message_props(HeapTupleHeader msg, SbqSendProps *props);

/* api_queues.c: the queue properties of a create or update call */
extern const int sbq_queue_arg_positions[SBQ_NUM_QUEUE_ARGS];
extern void sbq_overlay_queue_props(FunctionCallInfo fcinfo, SbqQueue *p, bool required,
									const int *pos);
extern void sbq_check_queue_props(SbqQueue *p);
extern void sbq_check_forward_to(SbqQueue *p, const SbqQueue *before, const char *self_key);

/* maintenance_worker.c: sbqueue's OID, owner and schema here (in a transaction) */
extern bool sbq_find_extension(Oid *extoid, Oid *extowner, Oid *extnamespace);
extern bool sbq_am_maintenance_worker;
extern bool sbq_forward_changes(const SbqQueue *before, const SbqQueue *after);
extern void sbq_check_forward_start(const SbqQueue *before, const SbqQueue *after);

/*
 * What a snapshot sees, as far as the views' readers of shared memory care
 * (util.c, sbq_snapshot_key): equal keys, equal snapshots of the same
 * transaction; with gen, also of the same query, with nothing this
 * transaction did to the shared tables since (gen: bumped when a query
 * starts, sbqueue.c, and by lease.c and qstate.c at every change they make
 * or undo).
 */
typedef struct SbqSnapshotKey
{
	LocalTransactionId lxid;
	TransactionId xmin;
	TransactionId xmax;
	uint32		xcnt;
	uint64		completions;
	uint64		gen;
} SbqSnapshotKey;

extern uint64 sbq_shared_change_gen;

/* util.c */
extern bool sbq_snapshot_key(SbqSnapshotKey *key);
extern void sbq_parse_address(text *queue, bool allow_dlq, SbqAddress *addr);
extern char *sbq_name_key(MemoryContext cxt, const char *name);
extern void sbq_queue_address(FunctionCallInfo fcinfo, bool allow_dlq, SbqAddress *addr);
extern int64 sbq_interval_usecs(const Interval *iv);
extern void sbq_exact_interval(Interval *iv);
extern void sbq_check_interval_range(const char *argname, const Interval *iv,
									 int64 min_usecs, int64 max_usecs);
extern int64 sbq_token_sequence(const pg_uuid_t *token);
extern void sbq_subxact_commit(MemoryContext cxt, ResourceOwner owner);
extern ErrorData *sbq_subxact_failed(MemoryContext cxt, ResourceOwner owner);
extern void sbq_make_lock_token(int64 seq, pg_uuid_t *token);
extern char *sbq_token_string(const pg_uuid_t *token);
extern void sbq_check_json_object(const char *argname, Jsonb *j);
extern int64 sbq_text_size(const text *t);
extern int64 sbq_props_size(const SbqSendProps *props);
extern int64 sbq_jsonb_text_size(Jsonb *j, int64 limit);
extern bool sbq_made_up_message_id(const char *id, int len);
extern char *sbq_new_message_id(void);
extern void sbq_random_bytes(void *b, Size len);
extern void sbq_on_relcache_inval(RelcacheCallbackFunction fn);
extern text **sbq_new_message_ids(int n);
extern void sbq_check_message_size(const SbqQueue *queue, int64 body, int64 props,
								   const char *what);
extern void sbq_check_id_length(const char *argname, text *value);
extern void sbq_check_text_length(const char *argname, text *value, int max);
extern Tuplestorestate *sbq_init_srf(FunctionCallInfo fcinfo, TupleDesc *tupdesc);
extern void sbq_require_arg(FunctionCallInfo fcinfo, int argno, const char *argname);
extern void sbq_check_array_size(ArrayType *arr, const char *argname, int max,
								 const char *why);
extern int	sbq_array_subscript(ArrayType *arr, int i);
extern int	sbq_distinct_int8(Datum *elems, int n);
extern void sbq_lock_queue_name(const char *key, LOCKMODE mode);
extern bool sbq_lock_queue_name_if(const char *key, LOCKMODE mode, bool nowait);
/* the name a delete or change of an entity locks: a subscription's topic's */
extern bool sbq_key_to_lock_key(char *key);
extern void sbq_lock_entity_name(const char *key, LOCKMODE mode);
extern void sbq_unlock_entity_name(const char *key, LOCKMODE mode);

/* api.c, api_session.c: arguments and errors the calls share */
extern int	sbq_max_messages_arg(FunctionCallInfo fcinfo, int argno);
extern Datum *sbq_seq_array_arg(FunctionCallInfo fcinfo, int argno, const char *argname,
								const char *why, int *n);
extern int64 sbq_max_wait_arg(FunctionCallInfo fcinfo, int argno, TimestampTz *deadline);
extern bool sbq_wait_more(int64 wait_us, TimestampTz deadline);
extern bool sbq_poll_again(int64 wait_us, TimestampTz deadline);
extern void sbq_refuse_forwarding_receive(const SbqQueue *queue, const SbqAddress *addr);
extern void sbq_refuse_sessionless(const SbqQueue *queue, const SbqAddress *addr,
								   const char *use);
extern void sbq_session_lock_lost(const SbqQueue *queue, const pg_uuid_t *token);

/* sbqueue.c: settings */
extern int	sbq_receive_poll_interval;

#endif							/* SBQUEUE_H */
