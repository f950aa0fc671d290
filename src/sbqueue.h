/*-------------------------------------------------------------------------
 *
 * sbqueue.h
 *	  Declarations shared by the parts of sbqueue: error codes, the queue
 *	  and address types, the storage module's interface and the helpers.
 *
 * The SQL-callable functions (api.c) validate their arguments and never touch
 * a table: every read and write of queue state goes through the storage module
 * (storage.c), so that its design can change without touching the SQL surface.
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
#include "utils/jsonb.h"
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
#define SBQ_ERRCODE_INVALID_OPERATION	MAKE_SQLSTATE('S','B','0','1','0')

#define SBQ_MAX_NAME_LEN		260
#define SBQ_MAX_ID_LEN			128
#define SBQ_MAX_RECEIVE			5000
#define SBQ_DLQ_SUFFIX			"/$deadletterqueue"

/* sub-queues and message states, as stored */
#define SBQ_SUBQUEUE_MAIN		0
#define SBQ_SUBQUEUE_DLQ		1

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

/* A queue's properties, as stored in sbq.queues. */
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

/* util.c */
extern void sbq_parse_address(text *queue, bool allow_dlq, SbqAddress *addr);
extern int64 sbq_interval_usecs(const Interval *iv);
extern void sbq_check_interval_range(const char *argname, const Interval *iv,
									 int64 min_usecs, int64 max_usecs);
extern int64 sbq_token_sequence(const pg_uuid_t *token);
extern void sbq_make_lock_token(int64 seq, pg_uuid_t *token);
extern char *sbq_token_string(const pg_uuid_t *token);
extern void sbq_check_json_object(const char *argname, Jsonb *j);
extern void sbq_check_id_length(const char *argname, text *value);
extern void sbq_check_text_length(const char *argname, text *value, int max);
extern Tuplestorestate *sbq_init_srf(FunctionCallInfo fcinfo, TupleDesc *tupdesc);
extern void sbq_require_arg(FunctionCallInfo fcinfo, int argno, const char *argname);
extern void sbq_lock_queue_name(const char *key, LOCKMODE mode);

/* storage.c */
extern void sbq_storage_begin(void);
extern void sbq_storage_end(void);
extern MemoryContext sbq_storage_caller_context(void);
extern Oid	sbq_storage_epoch(void);
extern bool sbq_storage_find_queue(const SbqAddress *addr, SbqQueue *queue);
extern void sbq_storage_get_queue(const SbqAddress *addr, SbqQueue *queue);
extern void sbq_storage_get_queue_to_send(const SbqAddress *addr, SbqQueue *queue);
extern HeapTuple sbq_storage_queue_tuple(int32 queue_id, TupleDesc tupdesc,
										 MemoryContext mcxt);
extern int32 sbq_storage_create_queue(const char *name, const char *key,
									  const SbqQueue *props);
extern void sbq_storage_update_queue(const SbqQueue *props);
extern void sbq_storage_delete_queue(int32 queue_id);
extern int64 sbq_storage_purge(const SbqQueue *queue, int16 subqueue);
extern int	sbq_storage_send(const SbqQueue *queue, const SbqSendProps *props,
							 Datum *bodies, int nbodies, const char *default_content_type,
							 int64 *seqs);
extern SbqReceiveResult sbq_storage_receive(const SbqQueue *queue, int16 subqueue,
											int max_messages, SbqReceiveMode mode,
											Tuplestorestate *tupstore, TupleDesc tupdesc);
extern int	sbq_storage_peek(const SbqQueue *queue, int16 subqueue, int max_messages,
							 int64 from_seq, Tuplestorestate *tupstore, TupleDesc tupdesc);
extern bool sbq_storage_complete(const SbqQueue *queue, int16 subqueue,
								 const pg_uuid_t *token);
extern int	sbq_storage_complete_many(const SbqQueue *queue, int16 subqueue,
									  Datum *tokens, int ntokens, bool *settled);
extern bool sbq_storage_release(const SbqQueue *queue, int16 subqueue,
								const pg_uuid_t *token, int16 state, Jsonb *props_to_modify);
extern bool sbq_storage_deadletter(const SbqQueue *queue, const pg_uuid_t *token,
								   text *reason, text *description, Jsonb *props_to_modify);
extern bool sbq_storage_cancel_scheduled(const SbqQueue *queue, int64 seq);
extern bool sbq_storage_receive_deferred(const SbqQueue *queue, int16 subqueue,
										 Datum *seqs, int nseqs, Tuplestorestate *tupstore,
										 TupleDesc tupdesc, int64 *missing);
extern int	sbq_storage_resubmit(const SbqQueue *queue, Datum *seqs, int nseqs,
								 int64 *missing);
extern Jsonb *sbq_storage_maintain(void);
extern bool sbq_storage_renew(const SbqQueue *queue, int16 subqueue,
							  const pg_uuid_t *token, TimestampTz *locked_until);

/* sbqueue.c: settings */
extern int	sbq_receive_poll_interval;

#endif							/* SBQUEUE_H */
