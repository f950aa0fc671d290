/*-------------------------------------------------------------------------
 *
 * storage_core.h
 *	  What the storage files (queues.c, send.c, receive.c, lease_receive.c,
 *	  settle.c, maintain.c) share: statements, the storage section's state,
 *	  counters, and the SQL fragments more than one of them uses. Only those
 *	  files include it; everybody else calls storage.h.
 *
 * Each storage file keeps its own statements (SbqStatement) next to the code
 * that binds their parameters; storage_core.c prepares them on first use.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/storage_core.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SBQ_STORAGE_CORE_H
#define SBQ_STORAGE_CORE_H

#include "executor/spi.h"
#include "utils/snapshot.h"

#include "qstate.h"
#include "storage.h"

#define SBQ_MAX_STATEMENT_ARGS	24

/*
 * A statement of the storage files: its name, argument types and SQL, and
 * its plans, prepared on first use in a backend and kept (SPI_keepplan),
 * always generic. One static SbqStatement per statement, in the file that
 * runs it, written as {name, nargs, {argument types}, SQL}, and with
 * .old_sql = SQL when the SQL before 0.4 (dead letters in sbq.messages)
 * needs a text of its own.
 *
 * A statement that works on either sub-queue names its table SUBQUEUE_TABLE
 * and runs through sbq_exec_in(): it is prepared once per table.
 */
typedef struct SbqStatement
{
	const char *name;			/* for error messages */
	int			nargs;
	Oid			argtypes[SBQ_MAX_STATEMENT_ARGS];
	const char *sql;
	const char *old_sql;		/* for SQL before 0.4, or NULL: sql serves */
	SPIPlanPtr	plan[2];		/* the kept plans, by sub-queue, or NULL */
	int			plan_flavour;	/* the SQL flavour they were prepared for */
	bool		by_key;			/* its rows come by primary key (sbq_run) */
} SbqStatement;

/*
 * The table of the sub-queue a statement runs on (sbq_exec_in): sbq.messages
 * as written, replaced by sbq.dead_letters for the dead-letter sub-queue
 * when the installed SQL has that table (0.4 and later). Both tables have
 * the same leading columns, subqueue included (0 in one, 1 in the other),
 * so one text serves both. SQL before 0.4 keeps dead letters in
 * sbq.messages, where the text serves as written.
 */
#define SUBQUEUE_TABLE "sbq.messages /* of the sub-queue */"


/*
 * SQL that names the messages' transfer_hops column (0.11 on): within HOPS()
 * it is prepared as written, and made a comment for older SQL.
 */
#define HOPS_OPEN "/*hops{*/"
#define HOPS_CLOSE "/*}hops*/"
#define HOPS(sql) HOPS_OPEN sql HOPS_CLOSE

/*
 * SQL that names sbq.duplicate_ids (0.2 on): within DUPS() it is prepared as
 * written, and made a comment for the SQL of 0.1.
 */
#define DUPS_OPEN "/*dups{*/"
#define DUPS_CLOSE "/*}dups*/"
#define DUPS(sql) DUPS_OPEN sql DUPS_CLOSE

/*
 * SQL for distributed tables only (distributed.c), which have the column
 * entity_key: within EK() it is prepared as written when they are, and made
 * a comment otherwise. A statement that may write a row of another entity
 * than the call's gives the column its value; elsewhere its default (the
 * call's entity) serves.
 */
#define EK_OPEN "/*ek{*/"
#define EK_CLOSE "/*}ek*/"
#define EK(sql) EK_OPEN sql EK_CLOSE

/*
 * The columns a dead letter is stored with, and the values moving the
 * message row "src" there gives them: the message as it was, but state
 * active, no lock, delivery count "count", the reason, description and
 * source given, and the time it was dead-lettered. DEAD_LETTER_INSERT_PROPS
 * also sets its application properties.
 */
#define DEAD_LETTER_INSERT(src, count, reason, description, source) \
	DEAD_LETTER_INSERT_PROPS(src, count, reason, description, source, \
							 src ".application_properties")
#define DEAD_LETTER_INSERT_PROPS(src, count, reason, description, source, props) \
	"INSERT INTO sbq.dead_letters (sequence_number, queue_id, subqueue, state, " \
	"delivery_count, enqueued_time, scheduled_enqueue_time, expires_at, time_to_live, " \
	"message_id, session_id, correlation_id, subject, content_type, reply_to, " \
	"reply_to_session_id, to_address, application_properties, dead_letter_reason, " \
	"dead_letter_error_description, dead_letter_source, dead_lettered_at, body" \
	HOPS(", transfer_hops") EK(", entity_key") ") " \
	"SELECT " src ".sequence_number, " src ".queue_id, 1, 0, " count ", " \
	src ".enqueued_time, " src ".scheduled_enqueue_time, " src ".expires_at, " \
	src ".time_to_live, " src ".message_id, " src ".session_id, " src ".correlation_id, " \
	src ".subject, " src ".content_type, " src ".reply_to, " src ".reply_to_session_id, " \
	src ".to_address, " props ", " reason ", " description ", " \
	source ", pg_catalog.clock_timestamp(), " src ".body" \
	HOPS(", " src ".transfer_hops") EK(", " src ".entity_key") " FROM " src " "

/* The entity key of the queue or topic with id "id" (within EK()). */
#define EK_OF_ID(id) \
	"(SELECT q.entity_key FROM sbq.queues q WHERE q.queue_id = " id \
	" UNION ALL SELECT t.entity_key FROM sbq.topics t WHERE t.topic_id = " id " LIMIT 1)"

/* How many rows one maintenance step (or a receive's activation) handles. */
#define SBQ_MAINTAIN_BATCH		1000

/* A time to live this long never runs out (30-day months, as intervals compare). */
#define SBQ_NEVER_EXPIRES		"10000 years"
#define SBQ_NEVER_EXPIRES_USECS	((int64) 10000 * MONTHS_PER_YEAR * DAYS_PER_MONTH * USECS_PER_DAY)

/* The dead-letter reasons and descriptions sbqueue itself gives (Service Bus's). */
#define SBQ_DLQ_REASON_MAX_DELIVERY		"MaxDeliveryCountExceeded"
#define SBQ_DLQ_REASON_EXPIRED			"TTLExpiredException"
#define SBQ_DLQ_DESCRIPTION_EXPIRED		"The message expired and was dead-lettered."
#define SBQ_DLQ_DESCRIPTION_MAX_DELIVERY "Message could not be consumed after %d delivery attempts."
#define SBQ_SQL_LITERAL(s)				"'" s "'"

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

#define NEXT_SEQUENCE "nextval('sbq.message_seq'::regclass)"

/*
 * A statement that moves messages through the table skips messages that have
 * an entry in the lease table (lease.c): a lease, valid or expired, or a
 * leasing receive's claim. It asks twice: in the WHERE clause of the scan
 * that locks the rows (last, since it is costly, so only about rows that
 * qualify otherwise), which keeps leased messages out of its LIMIT, and again
 * in the statement that writes each row, after the row lock is held: a
 * leasing receive claims first and then looks for row locks, so one of the
 * two always sees the other. On SQL older than 0.3 storage_core.c prepares
 * the statement with "true" in its place.
 */
#define LEASE_SLOT "sbq.lease_slot(m.sequence_number)"

/* A message a receive hands out, with its sequence number to sort by. */
typedef struct SbqOutRow
{
	int64		seq;
	HeapTuple	tuple;
} SbqOutRow;

/* storage_core.c: statements */
extern int	sbq_flavour(void);
extern const char *sbq_statement_sql(SbqStatement *st, int which, int flavour);
extern SPIPlanPtr sbq_prepare_kept(SbqStatement *st, const char *sql);
/* dist_storage.c: the statements of a shard group, and the sequences past it */
extern SPIPlanPtr sbq_group_plan(SbqStatement *st, int which, int flavour);
extern void sbq_sequence_floor(Oid epoch);
extern void sbq_sequence_mark(const char *entity, int64 max_seq);
extern uint64 sbq_exec(SbqStatement *st, Datum *values, const bool *isnull);
extern uint64 sbq_exec_in(SbqStatement *st, int16 subqueue, Datum *values,
						  const bool *isnull);
extern uint64 sbq_exec_fresh(SbqStatement *st, Datum *values);
extern uint64 sbq_exec_latest(SbqStatement *st, Datum *values, const bool *isnull);
extern bool sbq_no_prepared(void);
extern Datum sbq_col(uint64 row, int col, bool *isnull);
extern int64 sbq_max_col(int col);
extern int64 sbq_first_missing(const Datum *seqs, int nseqs, uint64 n, int col);

/* storage_core.c: the section and the installed SQL */
extern bool sbq_leasing(void);
extern void sbq_require_lock_privilege(int16 subqueue);
extern bool sbq_may_end_leases(void);
extern bool sbq_dead_letter_table(void);
extern bool sbq_duplicate_ids_installed(void);
extern bool sbq_rights_enforced(void);
extern bool sbq_sessions_installed(void);
extern bool sbq_hops_installed(void);
extern bool sbq_queue_retry_installed(void);
extern bool sbq_session_locks_in_memory(void);
extern Oid	sbq_rel_owner(Oid relid);
extern Oid	sbq_storage_owner(void);
extern Oid	sbq_queues_oid(void);
extern Oid	sbq_queues_table_oid(void);

/* plan_key.c: the indexes an sbqueue statement is planned with */
typedef enum SbqPlanMode
{
	SBQ_PLAN_ANY,				/* not an sbqueue statement's planning: every index */
	SBQ_PLAN_BY_KEY,			/* found by key: the indexes led by sequence_number */
	SBQ_PLAN_BY_ORDER			/* a level ordered by queue_id first: those led by it */
} SbqPlanMode;
extern void sbq_plan_key_init(void);
extern void sbq_plan_announce(SbqPlanMode mode, const char *sql);
extern SbqPlanMode sbq_plan_announced(const char **sql);
extern Oid	sbq_subqueue_table_oid(int16 subqueue);

/* storage_core.c: counters */
extern void sbq_add_counts(int32 queue_id, const SbqCounts *c);

/* counts_direct.c */
extern bool sbq_counts_direct(Oid nsp, int32 queue_id, int32 shard, const SbqCounts *c);
extern void sbq_store_all_counts(void);
extern void sbq_counts_pass(bool in_pass);
extern void sbq_entity_name_keys(const int32 *ids, int n, char **keys);

/* storage_core.c: values */
extern char *sbq_spi_strdup(Datum d, bool isnull);

/* util.c: times and statement values */
extern TimestampTz sbq_add_interval(TimestampTz t, const Interval *iv);
extern bool sbq_expiry(TimestampTz start, const Interval *ttl, TimestampTz *expires_at);
extern Datum sbq_int8_array(const int64 *v, int n);
extern Datum sbq_int4_array(const int32 *v, int n);
extern void sbq_max_delivery_description(const SbqQueue *queue, char *buf, size_t len);
extern int	sbq_cmp_out_row(const void *a, const void *b);

/* queues.c */
extern int	sbq_all_queues(SbqQueue **queues);
extern void sbq_queue_cache_changed(void);
extern void sbq_queue_copy(SbqQueue *dst, const SbqQueue *src, MemoryContext cxt);

/* session.c */
extern void sbq_session_note_sent(const SbqQueue *queue, Datum session_id, int64 seq);
extern void sbq_session_purged(const SbqQueue *queue);
extern int	sbq_session_expire_all(const SbqQueue *queue, TimestampTz now, int limit,
								   int64 *dead_lettered);

/* rights.c */
/*
 * With the tables distributed, the role of rights row "r" on this node: the
 * one named r.role_name (NULL: none of that name here), or r.role for PUBLIC
 * (role_name NULL). See rights.c.
 */
#define SBQ_RIGHTS_ROLE_OF(r) \
	"(CASE WHEN " r ".role_name IS NULL THEN " r ".role::oid" \
	" ELSE (SELECT a.oid FROM pg_catalog.pg_roles a WHERE a.rolname = " r ".role_name) END)"
extern bool sbq_rights_by_name(void);
extern void sbq_rights_load(SbqQueue *queue);
extern void sbq_rights_require(const SbqQueue *queue, int16 rights);
extern bool sbq_rights_have(const SbqQueue *queue, int16 rights);
extern void sbq_rights_created(int32 queue_id);
extern void sbq_rights_dropped(int32 queue_id);

/* send.c */
extern int	sbq_activate_due(const SbqQueue *queue, TimestampTz now, int limit, bool always);

/* receive.c */
extern void sbq_check_message_desc(TupleDesc tupdesc);
extern bool sbq_message_row(SPITupleTable *tt, uint64 row, Datum *values, bool *nulls);
extern int	sbq_put_message_rows(Tuplestorestate *tupstore, TupleDesc tupdesc,
								 const SbqQueue *leases_of, int16 subqueue, TimestampTz now);
extern void sbq_receive_rows(const SbqQueue *queue, int16 subqueue, int max_messages,
							 SbqReceiveMode mode, TimestampTz now, SbqReceiveResult *result,
							 Tuplestorestate *tupstore, TupleDesc tupdesc, SbqOutRow *outs);

/*
 * How many messages one transaction's receives take off their queues on their
 * way (their time to live passed, or their last allowed delivery expired):
 * with locks in memory each holds an entry of the shared table of locks until
 * the commit, and in rows each is a pass of its own. Past that many a receive
 * reads on past such messages and leaves them for maintenance or the next
 * transaction (a message that waits behind them is still found); the looks
 * of a receive that waits, and a receive that goes on in rows when the table
 * is full, count against the same number.
 */
#define SBQ_MAX_CLEARED			10000
/*
 * A session receive reads its session's head in windows that double while
 * they hold only what it passes over or takes off, up to this many rows
 * beyond what it wants: the receive looks at the session lock's end between
 * windows, and a window of 10,000 rows to dead-letter ran past it (one of
 * 1,000 did too, on a loaded machine, where each dead letter cost 1 ms).
 */
#define SBQ_SESSION_WINDOW		250
extern int64 sbq_cleared_in_xact(void);
extern void sbq_cleared_add(int64 n);

/*
 * Whether half of a lock from start to until (0: none yet) has passed at now:
 * a receive that handed out a message under it looks for no more, so that no
 * lock it returns has run out.
 */
static inline bool
sbq_lock_half_gone(TimestampTz start, TimestampTz until, TimestampTz now)
{
	return until != 0 && now >= start + (until - start) / 2;
}

/* lease_receive.c */
/* lease_sweep.c: what leases leave to store, and the sweep */
extern SbqStatement sbq_stmt_lease_store;
extern SbqStatement sbq_stmt_lease_drop;
extern int	sbq_lease_rows(SbqStatement *st, int16 subqueue, const int64 *seqs,
						   const int32 *counts, const ItemPointerData *tids, int n,
						   Datum *extra, int nextra, bool *done);
extern int	sbq_lease_deadletter_rows(const SbqQueue *queue, const int64 *seqs,
									  const int32 *counts, const ItemPointerData *tids,
									  int n, const char *reason, const char *description,
									  bool *done);

/* a receive under a session lock held in shared memory (session_mem.c) */
typedef struct SbqLeaseSession
{
	int64		key;			/* the session's row */
	TimestampTz locked_until;	/* of the session lock */
	const int64 *seqs;			/* deferred messages asked for, or NULL */
	int			nseqs;
	int64		missing;		/* set: a message it could not take */
	int64		lo;				/* set: the range of what it locked, */
	int64		hi;				/* or 0 and 0 */
} SbqLeaseSession;

extern SbqReceiveResult sbq_receive_leased_session(const SbqQueue *queue,
												   SbqLeaseSession *session,
												   int max_messages,
												   Tuplestorestate *tupstore,
												   TupleDesc tupdesc);
extern SbqReceiveResult sbq_receive_leased(const SbqQueue *queue, int16 subqueue,
										   int max_messages, TimestampTz now,
										   Tuplestorestate *tupstore, TupleDesc tupdesc);
extern int	sbq_lease_sweep(const SbqQueue *queues, int nqueues, int32 only_queue,
							TimestampTz now, int64 *released, int64 *dead_lettered);
extern void sbq_lease_sweep_queue(const SbqQueue *queue, TimestampTz now);

#endif							/* SBQ_STORAGE_CORE_H */
