/*-------------------------------------------------------------------------
 *
 * qstate.c
 *	  Per-queue state in shared memory: counters not yet stored, when the
 *	  queue's next scheduled message is due, the head of the queue, where
 *	  past the messages held under leases a receive may start, and whether
 *	  its rows may store locks.
 *
 * Counters. Every send, settlement and receive used to add to its queue's
 * counters in sbq.queue_counters, one upsert per call: a WAL record and a
 * good part of the call's cost, for numbers that are only shown. With sbqueue
 * preloaded, a call's counts are kept in the transaction until it commits
 * (dropped if it, or its subtransaction, aborts) and then added to the
 * queue's entry here. They are moved into sbq.queue_counters by maintenance,
 * and by any call that counts while its queue's entry has not been emptied
 * for a second, in that call's transaction: moved counts come back if that
 * transaction aborts. sbq_queue_stats adds what is here (and the current
 * transaction's own counts) to what is stored, so while nothing crashes the
 * counters read the same as before; a crash, or a restart, loses what was
 * not stored yet (about a second of counting).
 *
 * A move must not make a counter go back, even for an instant: a monitoring
 * system takes a counter that falls for a reset, and an alert on its
 * increase fires. So what a transaction moves out stays in the entry, in a
 * move slot with the transaction's id, until every snapshot of the database
 * sees that transaction as finished: a reader adds a slot's counts unless its
 * own snapshot sees the transaction committed (then the rows it stored are
 * what the reader sees). The commit callback marks the slot committed, so a
 * reader needs the commit log only for a transaction that was prepared (or
 * whose callback has not run yet), and never for one older than what the
 * commit log still holds. An abort frees the slot at once, its counts back
 * with the rest. The next move, or the next maintenance pass (which looks at
 * every queue of the database, with counts or not), frees a slot once the
 * database's horizon has passed its transaction; one that was prepared and
 * rolled back gives its counts back then. With every slot in use (a snapshot
 * held open in the database) counts are not moved until one frees: they
 * gather here, and a crash would lose more.
 *
 * A prepared transaction's counts may yet be rolled back, and nothing here
 * learns of its COMMIT or ROLLBACK PREPARED. So PREPARE keeps them in a slot
 * of the entry with the transaction's id (two per entry): readers add them
 * once the commit log says it committed, as they add what a commit put in
 * pending, and the next move puts them in pending, or drops them, once it
 * has ended. With both slots in use they are taken as committed at PREPARE.
 *
 * Scheduled messages. A receive activated due scheduled messages with a
 * statement on every call, nearly always finding none. Each entry has the
 * time its queue's next scheduled message is due (or "none", or "unknown"
 * after a restart); a receive runs the activation only when that time has
 * come, and then looks up the next one. A scheduled send lowers the time when
 * it commits, bumping a generation number, so a receive whose look-up raced
 * with such a commit does not store a time that is too late. Maintenance
 * activates regardless, so the hint can only make a receive late, by design
 * never: a send committed before the look-up's snapshot is seen by it. A
 * look-up also sees what its own transaction did to the scheduled messages
 * (activated or cancelled them): if that transaction, or the subtransaction
 * that looked, rolls back, the time is unknown again. A transaction prepared
 * after it scheduled a message or looked leaves a mark on the entry instead,
 * since nothing here learns of its COMMIT or ROLLBACK PREPARED: every receive
 * looks until maintenance sees no prepared transaction in the database.
 *
 * The head of the queue. When a transaction held open elsewhere keeps the
 * rows of completed messages from being pruned, a receive that walks the
 * queue's index from its start pays for every one of them. So each queue
 * entry has a head hint: no message of the main queue that is or may become
 * receivable has a lower sequence number, and a leasing receive starts its
 * scan there. A receive advances it to the lowest row its scan saw (locked
 * or not: a lock can end; a row, once seen, stays visible until it is gone),
 * but never past a message that may still appear below: the transactions
 * that take sequence numbers for the main queue (sends, activations of
 * scheduled messages, resubmits) announce themselves in a per-backend slot
 * before they take one, with a floor their numbers cannot be below (one more
 * than the highest number announced as taken, which they raise after taking
 * theirs), and a receive reads those slots and that highest number before its
 * scan's snapshot is taken. A slot is cleared when its transaction ends; a
 * prepared transaction leaves its floor behind in the database's entry until
 * maintenance sees no prepared transaction there (it reads a count of such
 * PREPAREs before it asks, and keeps what a later one left). After a restart
 * with max_prepared_transactions set, the floor starts at 1 for the same
 * reason. A scan does not see the rows its own transaction took out of the
 * queue: should that transaction roll back (or be prepared), the hint goes
 * back down to where it was before the transaction moved it, and a receive
 * that read the hint before it went down (a generation number says so) does
 * not move it. Maintenance also checks every hint once a minute, looking for
 * an active message below it, and lowers the hint to the first it finds,
 * which covers rows no announced path wrote (a restore into a queue in use).
 * It does not drop the hint: with a transaction held open elsewhere, the
 * receives after a drop would each walk every row that transaction keeps,
 * until one of them moved the hint again. Between those checks maintenance's
 * own looks for a queue's active messages start at the hint too
 * (sbq_qstate_maintain_floor), for the same reason.
 *
 * The free hint. With many consumers each holding messages under leases, the
 * rows at the head are nearly all held, and a receive that starts at the head
 * hint passes every one of them (each a heap fetch and a look in the lease
 * table) before it finds a free one. So each entry also has a free hint, with
 * the time until which it holds: below it, from the head hint on, every
 * message of the main queue was found held under a lease that does not
 * expire before that time, or taken by the receive that set it. A leasing
 * receive starts its scan there while the time has not come, and moves the
 * hint to just before the first row it read that may be receivable at any
 * moment (a lock stored in a row, another receive's claim, a row another
 * transaction changes), or past the last it read (lease_receive.c). A lease
 * that ends before its expiry without its message leaving the queue (an
 * abandon, a rolled-back receive or renew) lowers the hint to its message
 * once the lease is gone (lease.c), bumping a generation number, so that a
 * receive that read the hint before does not move it up again; so does
 * anything that lowers the head hint. Its bound is the head hint's, and a
 * transaction that has written keeps the same record, whose abort lowers
 * both. At worst a fault here delays a message until the leases it was
 * found behind expire: the hint is then not used.
 *
 * Locks stored in rows. Maintenance looks for expired locks stored in a
 * queue's rows (a receive with sbqueue.memory_locks off or a full lease
 * table, a deferred message received that way, an abandon's delay) by
 * reading the first rows of the queue, every pass: with consumers holding
 * their locks here instead, it read every row of the head to find none. So
 * each entry has a mark, "no row stores a lock", set by a look that read all
 * of the queue's active and deferred messages and found none (maintain.c),
 * and cleared by a look that found one and by every writer of such a lock,
 * after its write and before its transaction ends (sbq_qstate_row_lock).
 * While it is set, passes skip the look but once a minute (for rows written
 * another way: a restore, a shard moved in). A writer whose transaction is
 * open while a look runs is not seen by the look's snapshot, so the entry
 * keeps the newest writer's transaction id, and the look sets the mark only
 * if that transaction had ended before its snapshot was taken (older than
 * its xmin). A look in a transaction that has written may have seen a lock
 * that transaction ended, which its rollback would bring back: it sets the
 * mark at commit (a record of the undo log), on the same condition. Neither
 * sets it if the mark was cleared (a count says so) since the look began,
 * nor if the head hint, where the look started, went down meanwhile (a
 * rollback brought messages back below it); a hint that goes down clears
 * the mark too. A new
 * entry takes the id before the next one as that writer (one that found no
 * entry is older), so a restart, which drops the marks, brings every
 * queue's look back.
 *
 * The line of a session queue. Accept-next walks the queue's sessions in
 * line (sessions_ready_idx, by ready mark); under a transaction held open
 * elsewhere, every mark that a drain took off or moved stays in the index,
 * and each walk from the start of the line passed them all. So each entry
 * has a line floor: every entry of the line below it is gone for good (its
 * row version deleted or never committed, for every snapshot to come), and
 * the walk starts there (session_probe.c). A walk raises it to the first
 * entry it cannot call gone, but never past the bound of the head hint: the
 * marks of sends, activations and resubmits are numbers they take, which
 * they announce as above. Every other writer of a mark (a release that
 * leaves messages, an expired or stale lock's end, held sessions moved to
 * the back) lowers the floor to its mark after its write and bumps a
 * generation number, so that a walk that read the floor before, and may
 * have passed the place of the new entry, does not raise it. Reading the
 * bound costs a look at every backend's send slot, so a walk reads it only
 * when the walk before found that the floor could rise, and asked.
 * Maintenance drops the floor once a minute, with the head hint's check, for
 * marks no such path wrote (a restore).
 *
 * Without shared memory, or when the table is full (sbqueue.max_queues
 * entries) or the database has used its share of it
 * (sbqueue.max_queues_per_database, half the table by default), the callers
 * fall back to what they did before: an upsert per call, an activation per
 * receive. The share keeps one database (a churn of reply queues while a
 * transaction is held open there, say) from taking every entry of the
 * server; the database's own entry (queue id 0) is not held to it.
 * sbq_queue_table() (0.15) shows how full the table and the share are.
 *
 * What a transaction does to the table (counts to add or moved out, a
 * scheduled time, a deleted queue) is kept in a backend-local undo log
 * (undo.c): this file's transaction callbacks have it applied at commit, and
 * at PREPARE (a prepared transaction's counts into a slot, its other records
 * as if it committed), and undone at abort.
 *
 * Owns: the table of queues ("sbqueue queues") and the per-backend send
 * slots ("sbqueue send slots") in shared memory; shmem.c has them made.
 *
 * Locking: one LWLock (tranche "sbqueue queues") guards the table's shape
 * (entries are added, and removed when their database or incarnation is
 * dropped, sbq_qstate_forget_all, or their entity is gone, below); each
 * entry's fields, and each send
 * slot, are guarded by its own spinlock, held for a few loads and stores
 * only. The commit and abort callbacks only look entries up (the LWLock,
 * shared) and take spinlocks: they cannot fail.
 *
 * A caller keeps an entry's address after the LWLock is released and takes
 * its spinlock without it, and a backend keeps the addresses of the last
 * entries it found from call to call (a send looks its entry up a few
 * times), forgetting them all whenever any entry is removed. That is safe
 * because an entry is only removed when its database is dropped (no
 * session may be connected then) or its incarnation is (DROP EXTENSION
 * takes sbq.queues in AccessExclusiveLock, and every storage section holds
 * AccessShareLock on it until after its transaction's commit callbacks have
 * run), or when its queue or topic is gone and no transaction that could
 * have seen it is left. A deleted entity's entry is not removed by the
 * delete (a call that looked the entity up before may still use the
 * entry), so without the last case every queue made and deleted would keep
 * one for good, and a server whose databases make and delete queues (a
 * reply queue a request) filled the table after 4,096. Maintenance finds
 * the entries whose entity no fresh snapshot shows and marks them with the
 * time; an entry marked in an earlier pass goes once every other
 * transaction of its database began after that time (their start, from
 * the backends' status), as only a transaction that saw the entity could
 * look its entry up, and none has counts, moves or a prepared
 * transaction's counts in it. A backend whose activity is not tracked
 * (track_activities off) stops the removal, as its start is unknown, and so
 * does a background worker in a transaction that shows no start. The walks
 * of the whole table that keep addresses after the LWLock (the views'
 * counts, a pass's store of counts) pass over marked entries: one that took
 * an address before the mark began before it, and stops the removal. A
 * transaction that counted for a marked entity (one it made while a pass
 * ran) takes the mark off at its commit, so that its counts show at once. (A
 * wall clock stepped back between a transaction's start and a mark would
 * let the removal come early.)
 *
 * Length: over 1,000 lines on purpose. The counters, the scheduled times,
 * the head hints and the send slots are fields of one shared entry under one
 * spinlock, changed through one undo log and its transaction callbacks; split
 * across files, each would have to see the entry's layout and the log.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/qstate.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/twophase.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/backend_status.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "lease.h"
#include "qstate.h"
#include "sbqueue.h"
#include "undo.h"

PG_FUNCTION_INFO_V1(sbq_pending_counts_sql);
PG_FUNCTION_INFO_V1(sbq_queue_table_sql);

#define SBQ_QSTATE_TRANCHE	"sbqueue queues"

/* how long counts may gather here before a counting call stores them */
#define SBQ_QSTATE_STORE_USECS	USECS_PER_SEC

/* how often maintenance looks below a queue's head hint */
#define SBQ_HINT_CHECK_USECS	(60 * USECS_PER_SEC)

/* moves an entry keeps until every snapshot sees them finished */
#define SBQ_QSTATE_MOVES		4

/* prepared transactions' counts an entry keeps until they finish */
#define SBQ_QSTATE_PREPS		2

typedef struct SbqQueueKey
{
	Oid			dbid;
	Oid			epoch;
	int32		queue_id;
} SbqQueueKey;

typedef struct SbqQueueState
{
	SbqQueueKey key;
	slock_t		mutex;
	int64		pending[SBQ_NUM_COUNTERS];
	TransactionId move_xid[SBQ_QSTATE_MOVES];	/* invalid: a free slot */
	bool		move_committed[SBQ_QSTATE_MOVES];	/* its commit callback ran */
	int64		moved[SBQ_QSTATE_MOVES][SBQ_NUM_COUNTERS];	/* what each moved */
	TransactionId prep_xid[SBQ_QSTATE_PREPS];	/* invalid: a free slot */
	int64		prep[SBQ_QSTATE_PREPS][SBQ_NUM_COUNTERS];	/* what each counted */
	TimestampTz last_take;		/* when the counts were last moved out */
	bool		due_known;		/* next_due is known */
	TimestampTz next_due;		/* DT_NOEND: no scheduled message */
	uint64		due_gen;		/* bumped by every scheduled send that commits */
	int64		due_prepared;	/* a prepared transaction changed them: look */
	int64		head_hint;		/* queue entries: see the file header; 0 none */
	uint64		hint_gen;		/* bumped whenever the head hint is lowered */
	int64		free_hint;		/* queue entries: see the file header; 0 none */
	TimestampTz free_until;		/* the free hint holds until then */
	uint64		free_gen;		/* bumped whenever the free hint is lowered */
	TimestampTz hint_set_at;	/* when maintenance last checked it */
	bool		no_row_locks;	/* no row of the main queue stores a lock */
	FullTransactionId row_lock_xid; /* the newest writer of one, or older than all */
	uint64		row_lock_gen;	/* bumped whenever the mark is cleared */
	TimestampTz row_look_at;	/* when maintenance last looked for them */
	int64		max_seq;		/* the database's entry (queue id 0): highest number taken */
	int64		prepared_floor; /* the database's entry: floor of prepared senders */
	int64		prepares;		/* the database's entry: bumped after each such PREPARE */
	int64		line_floor;		/* session queues: see the file header */
	uint64		line_gen;		/* bumped whenever the line floor is lowered */
	bool		line_want;		/* a walk would have raised it: the next reads the bound */
	int64		accept_resume;	/* where the last accept-next ran out of looks, or PG_INT64_MIN */
	TimestampTz gone_since;		/* maintenance found its entity gone then (0: not); */
	/* under the LWLock, exclusive */
} SbqQueueState;

/* A backend's announcement that its transaction takes sequence numbers. */
typedef struct SbqSendSlot
{
	slock_t		mutex;
	bool		active;
	Oid			dbid;
	Oid			epoch;
	int32		queue_id;		/* 0: more than one queue */
	int64		floor;
} SbqSendSlot;

/* What this transaction did to an entry, applied at commit or undone at abort. */
typedef enum SbqQstateKind
{
	SBQ_QS_ADD,					/* counts to add at commit */
	SBQ_QS_TAKE,				/* counts moved out: back at abort */
	SBQ_QS_SCHEDULED,			/* a scheduled message: lower next_due at commit */
	SBQ_QS_LOOKED,				/* a look by a writer taught next_due: unknown at abort */
	SBQ_QS_ADVANCED,			/* a writer moved the head hint: back down at abort */
	SBQ_QS_NO_ROW_LOCKS,		/* a look found no lock in a row: mark at commit */
	SBQ_QS_FORGET				/* the queue was deleted: empty it at commit */
} SbqQstateKind;

typedef struct SbqQstateRecord
{
	SbqUndoHeader hdr;			/* undo.c's */
	SbqQstateKind kind;
	SbqQueueKey key;
	SbqCounts	counts;
	TimestampTz when;
	int64		old_hint;		/* SBQ_QS_ADVANCED: the head hint before */
	int			slot;			/* SBQ_QS_TAKE: its move slot */
	TransactionId xid;			/* SBQ_QS_TAKE: the moving transaction */
	FullTransactionId xmin;		/* SBQ_QS_NO_ROW_LOCKS: its snapshot's xmin */
	uint64		gen;			/* SBQ_QS_NO_ROW_LOCKS: row_lock_gen before the look */
	int64		floor;			/* SBQ_QS_NO_ROW_LOCKS: where its look started */
} SbqQstateRecord;

/*
 * How many entries each database has, under the table's LWLock; whether a
 * call of the database found no room since the launcher last looked; and the
 * launcher's own sums of the database's entries (only it writes them, under
 * the LWLock held shared, which keeps the shares where they are).
 */
typedef struct SbqQstateShare
{
	Oid			dbid;
	int32		count;
	pg_atomic_uint32 refused;
	TimestampTz due;
	bool		active;
} SbqQstateShare;

/* What the table's users share besides it. */
typedef struct SbqQstateShared
{
	pg_atomic_uint64 removals;	/* bumped by each removal */
	pg_atomic_uint32 refused;	/* a call found no room, in no database's share */
	pg_atomic_uint64 logged_at[2];	/* when each kind of "no room" was last logged */
} SbqQstateShared;

/* the server log says "no room" of each kind at most once in this time */
#define SBQ_QSTATE_LOG_USECS	(60 * USECS_PER_SEC)

int			sbq_qstate_max = 4096;
int			sbq_qstate_max_per_database = -1;

static HTAB *sbq_qstate_hash = NULL;
static HTAB *sbq_qstate_shares = NULL;
static LWLock *sbq_qstate_lock = NULL;
static SbqQstateShared *sbq_qstate_shared = NULL;
static pg_atomic_uint64 *sbq_qstate_removals = NULL;	/* bumped by each removal */

/*
 * The entries this backend found last, by key: a call finds its queue's
 * entry here without the table's LWLock and its hash, a few times a send.
 * An entry's address stays good until it is removed (sbq_qstate_forget_all,
 * sbq_qstate_sweep_gone), which bumps the removal count: the addresses are
 * then forgotten.
 */
#define SBQ_QSTATE_CACHED	8
typedef struct SbqQstateCached
{
	SbqQueueKey key;
	SbqQueueState *entry;
} SbqQstateCached;
static SbqQstateCached sbq_qstate_cached[SBQ_QSTATE_CACHED];
static int	sbq_qstate_ncached = 0;
static int	sbq_qstate_cache_next = 0;
static uint64 sbq_qstate_cached_removals = 0;
static SbqSendSlot *sbq_send_slots = NULL;
static bool sbq_my_slot_active = false;
static bool sbq_qstate_preparing = false;	/* the records are applied at PREPARE */
static TransactionId sbq_qstate_prepare_xid = InvalidTransactionId;	/* ... of this one */
static int	sbq_qstate_nscheduled = 0;	/* SBQ_QS_SCHEDULED records made (or more) */

static bool sbq_row_look_holds(const SbqQueueState *entry, uint64 gen, int64 floor,
							   FullTransactionId xmin);
static void sbq_qstate_apply(const void *record);
static void sbq_qstate_undo(const void *record);

/* this transaction's records (undo.c), and whether its callbacks are registered */
static SbqUndoLog sbq_qstate_log = SBQ_UNDO_LOG(SbqQstateRecord, 16, sbq_qstate_apply,
												sbq_qstate_undo);
static bool sbq_qstate_callbacks = false;

static void sbq_qstate_xact_callback(XactEvent event, void *arg);
static void sbq_qstate_slot_prepared(void);
static void sbq_qstate_slot_clear(void);
static void sbq_qstate_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
										SubTransactionId parentSubid, void *arg);

Size
sbq_qstate_shmem_size(void)
{
	Size		size = hash_estimate_size(sbq_qstate_max, sizeof(SbqQueueState));

	/* every entry could be of another database */
	size = add_size(size, hash_estimate_size(sbq_qstate_max, sizeof(SbqQstateShare)));
	size = add_size(size, mul_size(MaxBackends, sizeof(SbqSendSlot)));
	return add_size(size, sizeof(SbqQstateShared));
}

void
sbq_qstate_shmem_request(void)
{
	RequestNamedLWLockTranche(SBQ_QSTATE_TRANCHE, 1);
}

/* Attach to (or create) the table; the caller holds AddinShmemInitLock. */
void
sbq_qstate_shmem_startup(void)
{
	HASHCTL		info;

	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(SbqQueueKey);
	info.entrysize = sizeof(SbqQueueState);
	sbq_qstate_hash = ShmemInitHash("sbqueue queues", sbq_qstate_max, sbq_qstate_max, &info,
									HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(Oid);
	info.entrysize = sizeof(SbqQstateShare);
	sbq_qstate_shares = ShmemInitHash("sbqueue queue shares", sbq_qstate_max, sbq_qstate_max,
									  &info, HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	sbq_qstate_lock = &(GetNamedLWLockTranche(SBQ_QSTATE_TRANCHE))->lock;
	{
		bool		found;
		int			i;

		sbq_send_slots = ShmemInitStruct("sbqueue send slots",
										 mul_size(MaxBackends, sizeof(SbqSendSlot)), &found);
		if (!found)
			for (i = 0; i < MaxBackends; i++)
			{
				SpinLockInit(&sbq_send_slots[i].mutex);
				sbq_send_slots[i].active = false;
			}
		sbq_qstate_shared = ShmemInitStruct("sbqueue queues shared",
											sizeof(SbqQstateShared), &found);
		if (!found)
		{
			pg_atomic_init_u64(&sbq_qstate_shared->removals, 0);
			pg_atomic_init_u32(&sbq_qstate_shared->refused, 0);
			pg_atomic_init_u64(&sbq_qstate_shared->logged_at[0], 0);
			pg_atomic_init_u64(&sbq_qstate_shared->logged_at[1], 0);
		}
		sbq_qstate_removals = &sbq_qstate_shared->removals;
	}
}

static void
sbq_qstate_key(SbqQueueKey *key, Oid epoch, int32 queue_id)
{
	memset(key, 0, sizeof(*key));
	key->dbid = MyDatabaseId;
	key->epoch = epoch;
	key->queue_id = queue_id;
}

/* How many entries one database may have (sbqueue.max_queues_per_database). */
int
sbq_qstate_db_limit(void)
{
	if (sbq_qstate_max_per_database < 0)
		return Max(sbq_qstate_max / 2, 1);
	return Min(sbq_qstate_max_per_database, sbq_qstate_max);
}

/*
 * Why key can have no new entry (the table's LWLock held): SBQ_ROOM when it
 * can. The database's own entry is held to the table's size only.
 */
typedef enum SbqQstateRoom
{
	SBQ_ROOM,
	SBQ_ROOM_TABLE_FULL,
	SBQ_ROOM_SHARE_USED
} SbqQstateRoom;

static void sbq_qstate_say_full(const SbqQueueKey *key, SbqQstateRoom room);
static void sbq_qstate_free_ended_preps(void);

static SbqQstateRoom
sbq_qstate_room(const SbqQueueKey *key)
{
	SbqQstateShare *share = hash_search(sbq_qstate_shares, &key->dbid, HASH_FIND, NULL);
	SbqQstateRoom room = SBQ_ROOM;

	if (hash_get_num_entries(sbq_qstate_hash) >= sbq_qstate_max)
		room = SBQ_ROOM_TABLE_FULL;
	else if (key->queue_id != 0 && share != NULL && share->count >= sbq_qstate_db_limit())
		room = SBQ_ROOM_SHARE_USED;

	/*
	 * What happens to a queue without an entry is not seen here: the
	 * launcher takes its database as busy (sbq_qstate_work_all).
	 */
	if (room != SBQ_ROOM)
		pg_atomic_write_u32(share != NULL ? &share->refused : &sbq_qstate_shared->refused, 1);
	return room;
}

/*
 * Remove an entry, and count it out of its database's share (the LWLock
 * held exclusive). Removing the element a sequential scan is at is allowed.
 */
static void
sbq_qstate_remove(const SbqQueueKey *key)
{
	SbqQueueKey copy = *key;	/* the key may live in the entry */
	SbqQstateShare *share;

	if (hash_search(sbq_qstate_hash, &copy, HASH_REMOVE, NULL) == NULL)
		return;
	share = hash_search(sbq_qstate_shares, &copy.dbid, HASH_FIND, NULL);
	if (share != NULL && --share->count <= 0)
		(void) hash_search(sbq_qstate_shares, &copy.dbid, HASH_REMOVE, NULL);
}

/* Keep an entry's address, in place of the one kept longest. */
static void
sbq_qstate_remember(const SbqQueueKey *key, SbqQueueState *entry)
{
	int			i;

	if (sbq_qstate_ncached < SBQ_QSTATE_CACHED)
		i = sbq_qstate_ncached++;
	else
	{
		i = sbq_qstate_cache_next;
		sbq_qstate_cache_next = (sbq_qstate_cache_next + 1) % SBQ_QSTATE_CACHED;
	}

	sbq_qstate_cached[i].key = *key;
	sbq_qstate_cached[i].entry = entry;
}

/* A new entry's fields (the table's LWLock held exclusive). */
static void
sbq_qstate_init_entry(SbqQueueState *entry)
{
	SpinLockInit(&entry->mutex);

	/*
	 * Rows may store locks. A writer of one that found no entry had its
	 * transaction id before it looked, so before this lock was taken:
	 * below the next one, read here.
	 */
	entry->no_row_locks = false;
	entry->row_lock_xid =
		FullTransactionIdFromU64(U64FromFullTransactionId(ReadNextFullTransactionId()) - 1);
	entry->row_lock_gen = 0;
	entry->row_look_at = 0;
	memset(entry->pending, 0, sizeof(entry->pending));
	memset(entry->move_xid, 0, sizeof(entry->move_xid));
	memset(entry->move_committed, 0, sizeof(entry->move_committed));
	memset(entry->prep_xid, 0, sizeof(entry->prep_xid));
	entry->last_take = GetCurrentTimestamp();
	entry->due_known = false;
	entry->next_due = 0;
	entry->due_gen = 0;

	/*
	 * A transaction prepared before the server started (or this entry
	 * was made) may be pending, and nothing here knows what it did: it
	 * is taken as there until maintenance sees none (the first count).
	 */
	entry->due_prepared = max_prepared_xacts > 0 ? 1 : 0;
	entry->head_hint = 0;
	entry->hint_gen = 0;
	entry->free_hint = 0;
	entry->free_until = 0;
	entry->free_gen = 0;
	entry->hint_set_at = 0;	/* checked at the first maintenance */
	entry->max_seq = 0;
	entry->prepared_floor = max_prepared_xacts > 0 ? 1 : PG_INT64_MAX;
	entry->prepares = 1;
	entry->line_floor = PG_INT64_MIN;
	entry->line_gen = 0;
	entry->line_want = true;
	entry->accept_resume = PG_INT64_MIN;
	entry->gone_since = 0;
}

/* see qstate.h: set for the SQL of 0.1 (storage_core.c) */
bool		sbq_qstate_no_new_entries = false;

/*
 * The entry of a queue (queue_id 0: of the database) in this database, made
 * if need be; NULL without shared memory or room. An address kept from an
 * earlier call is used while no entry has been removed since: removals come
 * with DROP DATABASE or DROP EXTENSION, and with maintenance for an entity
 * gone, and the entry a caller works with cannot go meanwhile (see the file
 * header).
 */
static SbqQueueState *
sbq_qstate_entry(Oid epoch, int32 queue_id, bool create)
{
	SbqQueueKey keydata;
	SbqQueueKey *key = &keydata;
	SbqQueueState *entry;
	bool		found;
	SbqQstateRoom room = SBQ_ROOM;
	uint64		removals;
	int			i;

	if (sbq_qstate_no_new_entries)
		create = false;
	sbq_qstate_key(key, epoch, queue_id);

	if (sbq_qstate_hash == NULL || !OidIsValid(key->epoch))
		return NULL;
	removals = pg_atomic_read_u64(sbq_qstate_removals);
	if (removals != sbq_qstate_cached_removals)
	{
		sbq_qstate_ncached = 0;
		sbq_qstate_cached_removals = removals;
	}
	for (i = 0; i < sbq_qstate_ncached; i++)
		if (memcmp(&sbq_qstate_cached[i].key, key, sizeof(*key)) == 0)
			return sbq_qstate_cached[i].entry;
	LWLockAcquire(sbq_qstate_lock, LW_SHARED);
	entry = hash_search(sbq_qstate_hash, key, HASH_FIND, NULL);
	/* no room: say so without the exclusive lock, which every call would take */
	if (entry == NULL && create)
		room = sbq_qstate_room(key);
	LWLockRelease(sbq_qstate_lock);
	if (entry != NULL || !create || room != SBQ_ROOM)
	{
		if (entry != NULL)
			sbq_qstate_remember(key, entry);
		else if (create)
			sbq_qstate_say_full(key, room);
		return entry;
	}

	LWLockAcquire(sbq_qstate_lock, LW_EXCLUSIVE);
	entry = hash_search(sbq_qstate_hash, key, HASH_FIND, NULL);
	found = entry != NULL;
	if (!found)
		room = sbq_qstate_room(key);
	if (!found && room == SBQ_ROOM)
	{
		SbqQstateShare *share;

		/* a share per entry at most: the shares' table has room for it */
		share = hash_search(sbq_qstate_shares, &key->dbid, HASH_ENTER_NULL, &found);
		if (share != NULL)
		{
			if (!found)
			{
				share->count = 0;
				pg_atomic_init_u32(&share->refused, 0);
				share->due = 0;
				share->active = false;
			}
			share->count++;
			entry = hash_search(sbq_qstate_hash, key, HASH_ENTER_NULL, &found);
			Assert(entry != NULL && !found);
		}
		found = false;
	}
	if (entry != NULL && !found)
		sbq_qstate_init_entry(entry);
	LWLockRelease(sbq_qstate_lock);
	if (entry != NULL)
		sbq_qstate_remember(key, entry);
	else
		sbq_qstate_say_full(key, room);
	return entry;
}

/*
 * The fallback works, but slower: say so in the server log, at most once a
 * minute for the server (maintenance workers come and go) and each kind.
 */
static void
sbq_qstate_say_full(const SbqQueueKey *key, SbqQstateRoom room)
{
	pg_atomic_uint64 *at = &sbq_qstate_shared->logged_at[room == SBQ_ROOM_SHARE_USED ? 1 : 0];
	uint64		now = (uint64) GetCurrentTimestamp();
	uint64		last = pg_atomic_read_u64(at);

	if (last != 0 && now >= last && now - last < SBQ_QSTATE_LOG_USECS)
		return;
	if (!pg_atomic_compare_exchange_u64(at, &last, now))
		return;					/* another backend says it */
	if (room == SBQ_ROOM_SHARE_USED)
		ereport(LOG,
				(errmsg("database %u has used its share of sbqueue's shared table of queues (%d entries)",
						key->dbid, sbq_qstate_db_limit()),
				 errdetail("Queue %d and further queues of the database store their counters "
						   "at each call and look for due scheduled messages at each receive.",
						   key->queue_id),
				 errhint("Raise \"sbqueue.max_queues_per_database\" (reload) or \"sbqueue.max_queues\" "
						 "(restart). Maintenance frees the entries of deleted queues and topics once "
						 "no transaction that began before their delete is left.")));
	else
		ereport(LOG,
				(errmsg("sbqueue's shared table of queues is full (%d queues of all databases)",
						sbq_qstate_max),
				 errdetail("Queue %d of database %u and further queues store their counters "
						   "at each call and look for due scheduled messages at each receive.",
						   key->queue_id, key->dbid),
				 errhint("Raise \"sbqueue.max_queues\" (restart). Maintenance frees the entries of "
						 "deleted queues and topics once no transaction that began before their "
						 "delete is left; dropping a database or the extension frees its entries.")));
}

/*
 * Register the transaction callbacks, once per process: a step of recording
 * and of announcing that can fail.
 */
static void
sbq_qstate_callbacks_on(void)
{
	if (!sbq_qstate_callbacks)
	{
		RegisterXactCallback(sbq_qstate_xact_callback, NULL);
		RegisterSubXactCallback(sbq_qstate_subxact_callback, NULL);
		sbq_qstate_callbacks = true;
	}
}

/* Room for one more record of this transaction (the step that can fail). */
static SbqQstateRecord *
sbq_qstate_record(SbqQstateKind kind, const SbqQueueKey *key)
{
	SbqQstateRecord *r;

	sbq_qstate_callbacks_on();
	sbq_undo_reserve(&sbq_qstate_log, 1);
	r = sbq_undo_add(&sbq_qstate_log);
	sbq_shared_change_gen++;
	r->kind = kind;
	r->key = *key;
	return r;
}

static void
sbq_counts_add(int64 *pending, const SbqCounts *c, int sign)
{
	const int64 *v = (const int64 *) c;
	int			i;

	for (i = 0; i < SBQ_NUM_COUNTERS; i++)
		pending[i] += sign * v[i];
}

/*
 * Lower a queue's free hint to seq, under its entry's spinlock. Every call
 * bumps free_gen, also when the hint is below seq already: a receive that
 * read the generation before may have passed seq as held, and must not move
 * the hint past it (sbq_qstate_free_advance).
 */
static inline void
sbq_free_lower_locked(SbqQueueState *entry, int64 seq)
{
	if (seq < entry->free_hint)
		entry->free_hint = seq;
	entry->free_gen++;
}

/*
 * Lower a queue's head hint to seq, under its entry's spinlock, and its free
 * hint with it: a message may be receivable at seq. Every lowering bumps
 * hint_gen: a receive that read the hint before does not move it up again
 * (sbq_qstate_advance).
 */
static inline void
sbq_hint_lower_locked(SbqQueueState *entry, int64 seq)
{
	if (seq < entry->head_hint)
	{
		entry->head_hint = seq;
		entry->hint_gen++;
		/* a look for locks in rows started above seq: it did not read all */
		entry->no_row_locks = false;
		entry->row_lock_gen++;
	}
	sbq_free_lower_locked(entry, seq);
}

/* Lower the free hint, or both hints (head), of a queue to seq. Never fails. */
static void
sbq_qstate_lower_to(Oid epoch, int32 queue_id, int64 seq, bool head)
{
	SbqQueueState *entry = sbq_qstate_entry(epoch, queue_id, false);

	if (entry == NULL)
		return;
	SpinLockAcquire(&entry->mutex);
	if (head)
		sbq_hint_lower_locked(entry, seq);
	else
		sbq_free_lower_locked(entry, seq);
	SpinLockRelease(&entry->mutex);
}

/* how far back sbq_qstate_last looks, past records of other queues */
#define SBQ_QSTATE_LOOK_BACK	128

/*
 * sbq_qstate_last
 *		This transaction's newest record for the queue (key), if it is of
 *		kind and made at the current nest level; else NULL. Records of
 *		other queues after it are passed over (the newest
 *		SBQ_QSTATE_LOOK_BACK of the log): each queue's records apply to its
 *		own entry, so their order against other queues' does not matter,
 *		and a message copied to every subscription of a topic, or on along
 *		a chain of forwards, made a record per copy (the log is kept at its
 *		largest for the backend's life: 15 MB for a send whose forwards made
 *		100,000 copies). One for the queue of another kind or level ends
 *		the look: what comes after it must apply after it.
 */
static SbqQstateRecord *
sbq_qstate_last(SbqQstateKind kind, const SbqQueueKey *key)
{
	int			n = sbq_undo_count(&sbq_qstate_log);
	int			i;

	for (i = n - 1; i >= 0 && i >= n - SBQ_QSTATE_LOOK_BACK; i--)
	{
		SbqQstateRecord *r = sbq_undo_entry(&sbq_qstate_log, i);

		if (memcmp(&r->key, key, sizeof(*key)) != 0)
			continue;
		if (r->kind != kind || r->hdr.level != GetCurrentTransactionNestLevel())
			return NULL;
		return r;
	}
	return NULL;
}

/*
 * sbq_qstate_writer_record
 *		A record of kind for the queue when this transaction has written
 *		(NULL when it has not): the newest one, if it is of that kind, queue
 *		and nest level (a loop of receives in one transaction keeps one),
 *		else a new one.
 */
static SbqQstateRecord *
sbq_qstate_writer_record(SbqQstateKind kind, Oid epoch, int32 queue_id)
{
	SbqQueueKey key;
	SbqQstateRecord *r;

	if (!TransactionIdIsValid(GetTopTransactionIdIfAny()))
		return NULL;
	sbq_qstate_key(&key, epoch, queue_id);
	r = sbq_qstate_last(kind, &key);
	if (r != NULL)
		return r;
	(void) sbq_qstate_entry(epoch, 0, true);	/* for a PREPARE's count */
	r = sbq_qstate_record(kind, &key);
	r->old_hint = PG_INT64_MAX;
	return r;
}

/*
 * sbq_qstate_bump_prepares
 *		A transaction of the database (epoch) is being prepared and leaves a
 *		mark behind: bump the database's count of such PREPAREs and return it,
 *		to be stored with the mark. Maintenance reads the count before it
 *		asks whether a prepared transaction is left, and drops only marks
 *		stored with a count not above it (sbq_qstate_refresh): one made by a
 *		PREPARE it may not have seen stays. PG_INT64_MAX without the entry:
 *		such a mark stays until the server restarts.
 */
static int64
sbq_qstate_bump_prepares(Oid epoch)
{
	SbqQueueState *db = sbq_qstate_entry(epoch, 0, false);
	int64		count;

	if (db == NULL)
		return PG_INT64_MAX;
	SpinLockAcquire(&db->mutex);
	count = ++db->prepares;
	SpinLockRelease(&db->mutex);
	return count;
}

/*
 * sbq_qstate_prep_slot
 *		Keep a prepared transaction's counts in a slot of the entry, with its
 *		id, under the entry's spinlock: they count once the commit log says
 *		it committed (sbq_entry_counts), and go to the gathered counts, or
 *		away, once it has finished (sbq_qstate_take). False when no slot is
 *		free: the caller counts them now, as committed.
 */
static bool
sbq_qstate_prep_slot(SbqQueueState *entry, TransactionId xid, const SbqCounts *c)
{
	int			slot = -1;
	int			i;

	if (!TransactionIdIsValid(xid))
		return false;
	for (i = 0; i < SBQ_QSTATE_PREPS; i++)
	{
		if (entry->prep_xid[i] == xid)
		{
			slot = i;
			break;
		}
		if (slot < 0 && !TransactionIdIsValid(entry->prep_xid[i]))
			slot = i;
	}
	if (slot < 0)
		return false;
	if (entry->prep_xid[slot] != xid)
	{
		entry->prep_xid[slot] = xid;
		memset(entry->prep[slot], 0, sizeof(entry->prep[slot]));
	}
	sbq_counts_add(entry->prep[slot], c, 1);
	return true;
}

/*
 * Counts of an entity that a pass found gone are committed: it is not (this
 * transaction counted for it; it made the entity, say, while the pass ran),
 * and the walks pass over a marked entry, so its counts would not show until
 * the next pass. This transaction began before the mark and still shows in
 * the backends' status, so the entry cannot go meanwhile. Never fails.
 */
static void
sbq_qstate_unmark(SbqQueueState *entry)
{
	if (entry->gone_since == 0)
		return;
	LWLockAcquire(sbq_qstate_lock, LW_EXCLUSIVE);
	entry->gone_since = 0;
	LWLockRelease(sbq_qstate_lock);
}

/* Apply (commit) or undo (abort) one record. Never fails. */
static void
sbq_qstate_finish(const SbqQstateRecord *r, bool commit)
{
	SbqQueueState *entry = sbq_qstate_entry(r->key.epoch, r->key.queue_id, false);
	int64		prepares = 0;

	if (entry == NULL)
		return;

	if (commit && r->kind == SBQ_QS_ADD)
		sbq_qstate_unmark(entry);
	/* the count first, the mark after it: see sbq_qstate_bump_prepares */
	if (sbq_qstate_preparing &&
		(r->kind == SBQ_QS_SCHEDULED || r->kind == SBQ_QS_LOOKED))
		prepares = sbq_qstate_bump_prepares(r->key.epoch);
	SpinLockAcquire(&entry->mutex);
	switch (r->kind)
	{
		case SBQ_QS_ADD:
			if (commit && sbq_qstate_preparing &&
				sbq_qstate_prep_slot(entry, sbq_qstate_prepare_xid, &r->counts))
				break;
			if (commit)
				sbq_counts_add(entry->pending, &r->counts, 1);
			break;
		case SBQ_QS_TAKE:
			/* committed: the slot stays until every snapshot sees it */
			if (entry->move_xid[r->slot] != r->xid)
				break;
			if (!commit)
			{
				sbq_counts_add(entry->pending, &r->counts, 1);
				entry->move_xid[r->slot] = InvalidTransactionId;
			}
			else if (!sbq_qstate_preparing)
				entry->move_committed[r->slot] = true;
			break;
		case SBQ_QS_SCHEDULED:
		case SBQ_QS_LOOKED:
			if (sbq_qstate_preparing)
			{
				/*
				 * Prepared: what the transaction scheduled or took is seen
				 * by nobody until COMMIT or ROLLBACK PREPARED, and neither
				 * comes here. Every receive looks until maintenance sees no
				 * prepared transaction in the database.
				 */
				entry->due_known = false;
				if (prepares > entry->due_prepared)
					entry->due_prepared = prepares;
				entry->due_gen++;
			}
			else if (commit && r->kind == SBQ_QS_SCHEDULED)
			{
				if (entry->due_known && r->when < entry->next_due)
					entry->next_due = r->when;
				entry->due_gen++;
			}
			else if (!commit && r->kind == SBQ_QS_LOOKED)
			{
				/* the look saw this transaction's changes, now undone */
				entry->due_known = false;
				entry->due_gen++;
			}
			break;
		case SBQ_QS_ADVANCED:
			/* prepared: it may yet roll back, and nothing here would know */
			if (!commit || sbq_qstate_preparing)
				sbq_hint_lower_locked(entry, r->old_hint);
			break;
		case SBQ_QS_NO_ROW_LOCKS:
			/* prepared, it may yet roll back what the look did not see */
			if (commit && !sbq_qstate_preparing &&
				sbq_row_look_holds(entry, r->gen, r->floor, r->xmin))
				entry->no_row_locks = true;
			break;
		case SBQ_QS_FORGET:
			if (commit)
			{
				memset(entry->pending, 0, sizeof(entry->pending));
				memset(entry->move_xid, 0, sizeof(entry->move_xid));
				memset(entry->prep_xid, 0, sizeof(entry->prep_xid));
				entry->due_known = false;
				entry->due_gen++;
				sbq_hint_lower_locked(entry, 0);
			}
			break;
	}
	SpinLockRelease(&entry->mutex);
}

/* The undo log's apply and undo (undo.c): sbq_qstate_finish. */
static void
sbq_qstate_apply(const void *record)
{
	sbq_qstate_finish(record, true);
}

static void
sbq_qstate_undo(const void *record)
{
	sbq_qstate_finish(record, false);
}

/*
 * sbq_qstate_xact_callback
 *		Commit applies the transaction's records, abort undoes them. A
 *		prepared transaction's counts wait in a slot for its end
 *		(sbq_qstate_prep_slot), and counts it moved to the table stay there.
 */
static void
sbq_qstate_xact_callback(XactEvent event, void *arg)
{
	/*
	 * At PREPARE, not before: the transaction is in pg_prepared_xacts by
	 * then, so maintenance either sees it or sees the count its floor bumps
	 * (sbq_qstate_bump_prepares); its slot holds the floor until here.
	 */
	if (sbq_my_slot_active && event == XACT_EVENT_PREPARE)
		sbq_qstate_slot_prepared();
	if (sbq_my_slot_active &&
		(event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		 event == XACT_EVENT_PREPARE || event == XACT_EVENT_ABORT ||
		 event == XACT_EVENT_PARALLEL_ABORT))
		sbq_qstate_slot_clear();

	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			/*
			 * The leases this transaction ended go first, its counts after:
			 * a reader of both waits until both are done, which lease.c's
			 * callback says (its header, "Deliveries not counted yet"). This
			 * callback, registered later than lease.c's, runs before it.
			 */
			sbq_lease_at_commit();
			sbq_undo_commit(&sbq_qstate_log);
			break;
		case XACT_EVENT_PRE_PREPARE:

			/*
			 * The id its counts are kept with (sbq_qstate_prep_slot), read
			 * while the transaction surely still has it. Every call that
			 * counts has written, so has one; without, they are taken as
			 * committed.
			 */
			sbq_qstate_prepare_xid = GetTopTransactionIdIfAny();
			sbq_qstate_free_ended_preps();
			return;
		case XACT_EVENT_PREPARE:
			/* a prepared move is not committed yet: its slot stays unmarked */
			sbq_qstate_preparing = true;
			sbq_undo_commit(&sbq_qstate_log);
			sbq_qstate_preparing = false;
			sbq_qstate_prepare_xid = InvalidTransactionId;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			sbq_undo_abort(&sbq_qstate_log);
			sbq_qstate_prepare_xid = InvalidTransactionId;
			break;
		default:
			return;
	}
	sbq_qstate_nscheduled = 0;
}

/* A subtransaction's records: undone at its abort, its parent's at its commit. */
static void
sbq_qstate_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
							SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		sbq_shared_change_gen++;
	sbq_undo_subxact(&sbq_qstate_log, event);
}

/* ---------------------------------------------------------------- counters */

/*
 * sbq_qstate_count
 *		Keep what a call counted for the queue, to be added at commit. False:
 *		not kept (no shared memory, no room, or a standby), the caller stores
 *		the counts itself.
 */
bool
sbq_qstate_count(Oid epoch, int32 queue_id, const SbqCounts *c)
{
	SbqQueueKey key;
	SbqQstateRecord *r;

	if (sbq_qstate_hash == NULL || RecoveryInProgress())
		return false;
	sbq_qstate_key(&key, epoch, queue_id);
	if (sbq_qstate_entry(epoch, queue_id, true) == NULL)
		return false;
	r = sbq_qstate_last(SBQ_QS_ADD, &key);
	if (r != NULL)
	{
		/* a loop of calls in one transaction keeps one record */
		sbq_counts_add((int64 *) &r->counts, c, 1);
		return true;
	}
	r = sbq_qstate_record(SBQ_QS_ADD, &key);
	r->counts = *c;
	return true;
}

/*
 * sbq_xid_committed
 *		Whether a transaction committed, from the commit log; *known is false
 *		when the log no longer holds it (older than any that can matter here:
 *		the caller takes it as committed, its counts stored). Not under a
 *		spinlock.
 */
static bool
sbq_xid_committed(TransactionId xid, bool *known)
{
	bool		committed = false;

	LWLockAcquire(XactTruncationLock, LW_SHARED);
	*known = !TransactionIdPrecedes(xid, SBQ_OLDEST_CLOG_XID());
	if (*known)
		committed = TransactionIdDidCommit(xid);
	LWLockRelease(XactTruncationLock);
	return committed;
}

/*
 * sbq_xid_end
 *		How a transaction ended, from the commit log: 1 committed (or older
 *		than the log holds: long committed), -1 rolled back, 0 not yet (a
 *		prepared one, too). Not under a spinlock.
 */
static int
sbq_xid_end(TransactionId xid)
{
	int			end = 0;

	LWLockAcquire(XactTruncationLock, LW_SHARED);
	if (TransactionIdPrecedes(xid, SBQ_OLDEST_CLOG_XID()) || TransactionIdDidCommit(xid))
		end = 1;
	else if (TransactionIdDidAbort(xid))
		end = -1;
	LWLockRelease(XactTruncationLock);
	return end;
}

/*
 * sbq_qstate_finished
 *		Which of the move slots seen (their transactions, and whether marked
 *		committed) every snapshot of this database sees finished: done[i],
 *		to be freed; give_back[i] when that transaction did not commit (it
 *		was prepared, then rolled back), so its counts come back. The horizon
 *		is that of the database's tables (sbq.queues, epoch), as only its
 *		sessions read these counters. Not under the spinlock. True when any
 *		slot was in use.
 */
static bool
sbq_qstate_finished(Oid epoch, const TransactionId *seen, const bool *seen_committed,
					bool *done, bool *give_back)
{
	Relation	rel = NULL;
	bool		used = false;
	int			i;

	for (i = 0; i < SBQ_QSTATE_MOVES; i++)
	{
		done[i] = give_back[i] = false;
		if (!TransactionIdIsValid(seen[i]))
			continue;
		used = true;
		if (TransactionIdIsCurrentTransactionId(seen[i]))
			continue;
		if (rel == NULL)
			rel = RelationIdGetRelation(epoch);
		done[i] = GlobalVisCheckRemovableXid(RelationIsValid(rel) ? rel : NULL, seen[i]);
		if (done[i] && !seen_committed[i])
		{
			bool		known;

			give_back[i] = !sbq_xid_committed(seen[i], &known) && known;
		}
	}
	if (RelationIsValid(rel))
		RelationClose(rel);
	return used;
}

/*
 * sbq_qstate_preps_ended
 *		How each prepared transaction seen in an entry's slots ended: end[i]
 *		1 committed (or too old for the commit log to say: long committed)
 *		and its rows seen by every snapshot taken from now on, -1 rolled
 *		back, 0 not yet (or a free slot). The rows matter: the counts are
 *		stored by a statement that must find the queue, which the transaction
 *		may have made, and COMMIT PREPARED marks the commit log before it
 *		makes the transaction's rows seen. Not under the spinlock. True when
 *		any slot was in use.
 */
static bool
sbq_qstate_preps_ended(const TransactionId *xids, int *end)
{
	bool		used = false;
	int			i;

	for (i = 0; i < SBQ_QSTATE_PREPS; i++)
	{
		end[i] = 0;
		if (!TransactionIdIsValid(xids[i]))
			continue;
		used = true;
		end[i] = sbq_xid_end(xids[i]);
		if (end[i] > 0 && TransactionIdIsInProgress(xids[i]))
			end[i] = 0;
	}
	return used;
}

/*
 * sbq_qstate_free_moves
 *		Under the entry's spinlock: the move slots seen finished
 *		(sbq_qstate_finished) are freed, the counts of those to give back
 *		added to what is gathered. Returns a free slot, or -1.
 */
static int
sbq_qstate_free_moves(SbqQueueState *entry, const TransactionId *seen, const bool *done,
					  const bool *give_back)
{
	int			slot = -1;
	int			i;

	for (i = 0; i < SBQ_QSTATE_MOVES; i++)
	{
		if (done[i] && entry->move_xid[i] == seen[i])
		{
			int			k;

			if (give_back[i])
				for (k = 0; k < SBQ_NUM_COUNTERS; k++)
					entry->pending[k] += entry->moved[i][k];
			entry->move_xid[i] = InvalidTransactionId;
		}
		if (slot < 0 && !TransactionIdIsValid(entry->move_xid[i]))
			slot = i;
	}
	return slot;
}

/*
 * sbq_qstate_merge_preps
 *		Under the entry's spinlock: the slots of the prepared transactions
 *		seen ended (sbq_qstate_preps_ended) are freed, the counts of those
 *		that committed added to what is gathered.
 */
static void
sbq_qstate_merge_preps(SbqQueueState *entry, const TransactionId *preps, const int *end)
{
	int			i;

	for (i = 0; i < SBQ_QSTATE_PREPS; i++)
	{
		if (end[i] == 0 || entry->prep_xid[i] != preps[i])
			continue;
		if (end[i] > 0)
			sbq_counts_add(entry->pending, (SbqCounts *) entry->prep[i], 1);
		entry->prep_xid[i] = InvalidTransactionId;
	}
}

/*
 * sbq_qstate_free_ended_preps
 *		Before this transaction is prepared: free the prepared slots of the
 *		queues it counted for whose transactions have ended (their counts
 *		added or dropped, as sbq_qstate_take does), so that its counts wait
 *		in a slot. Only a take freed them, and a take comes about once a
 *		second: a PREPARE soon after two prepared transactions of the queue
 *		had ended found no slot and counted as committed, and its ROLLBACK
 *		PREPARED then left the counters too high for good. Reads the commit
 *		log, so not in the PREPARE callback, which must not fail.
 */
static void
sbq_qstate_free_ended_preps(void)
{
	int			n = sbq_undo_count(&sbq_qstate_log);
	int			i;

	for (i = 0; i < n; i++)
	{
		const SbqQstateRecord *r = sbq_undo_entry(&sbq_qstate_log, i);
		SbqQueueState *entry;
		TransactionId preps[SBQ_QSTATE_PREPS];
		int			end[SBQ_QSTATE_PREPS];

		if (r->kind != SBQ_QS_ADD)
			continue;
		entry = sbq_qstate_entry(r->key.epoch, r->key.queue_id, false);
		if (entry == NULL)
			continue;
		SpinLockAcquire(&entry->mutex);
		memcpy(preps, entry->prep_xid, sizeof(preps));
		SpinLockRelease(&entry->mutex);
		if (!sbq_qstate_preps_ended(preps, end))
			continue;
		SpinLockAcquire(&entry->mutex);
		sbq_qstate_merge_preps(entry, preps, end);
		SpinLockRelease(&entry->mutex);
	}
}

/*
 * sbq_qstate_take
 *		Move the queue's gathered counts out of shared memory, for the caller
 *		to store in this transaction (they come back if it aborts). With
 *		only_if_old, only when they were last moved more than a second ago.
 *		Frees the move slots that every snapshot of the database sees
 *		finished, whether or not there is anything to move. False when
 *		nothing was moved: there was nothing, or no move slot was free (the
 *		counts stay here).
 */
bool
sbq_qstate_take(Oid epoch, int32 queue_id, SbqCounts *c, bool only_if_old)
{
	SbqQueueKey key;
	SbqQueueState *entry;
	SbqQstateRecord *r = NULL;
	TimestampTz now = GetCurrentTimestamp();
	TransactionId seen[SBQ_QSTATE_MOVES];
	bool		seen_committed[SBQ_QSTATE_MOVES];
	bool		done[SBQ_QSTATE_MOVES];
	bool		give_back[SBQ_QSTATE_MOVES];
	TransactionId preps[SBQ_QSTATE_PREPS];
	int			prep_end[SBQ_QSTATE_PREPS];
	bool		due;
	bool		any = false;
	bool		used;
	TransactionId xid = InvalidTransactionId;
	int64	   *v = (int64 *) c;
	int			slot;
	int			i;

	sbq_qstate_key(&key, epoch, queue_id);
	entry = sbq_qstate_entry(epoch, queue_id, false);
	if (entry == NULL)
		return false;

	/* its time? anything to move, any slot to look at? */
	SpinLockAcquire(&entry->mutex);
	due = !only_if_old || now - entry->last_take >= SBQ_QSTATE_STORE_USECS;
	if (due)
	{
		for (i = 0; i < SBQ_NUM_COUNTERS; i++)
			any |= entry->pending[i] != 0;
		memcpy(seen, entry->move_xid, sizeof(seen));
		memcpy(seen_committed, entry->move_committed, sizeof(seen_committed));
		memcpy(preps, entry->prep_xid, sizeof(preps));
		if (!any)
			entry->last_take = now;
	}
	SpinLockRelease(&entry->mutex);
	if (!due)
		return false;

	used = sbq_qstate_finished(epoch, seen, seen_committed, done, give_back);
	used |= sbq_qstate_preps_ended(preps, prep_end);
	if (!any && !used)
		return false;
	for (i = 0; i < SBQ_QSTATE_MOVES; i++)
		any |= give_back[i];	/* what comes back is moved now */
	for (i = 0; i < SBQ_QSTATE_PREPS; i++)
		any |= prep_end[i] > 0; /* and what a COMMIT PREPARED counted */
	if (any)
	{
		xid = GetTopTransactionId();
		r = sbq_qstate_record(SBQ_QS_TAKE, &key);
	}

	any = false;
	SpinLockAcquire(&entry->mutex);
	sbq_qstate_merge_preps(entry, preps, prep_end);
	slot = sbq_qstate_free_moves(entry, seen, done, give_back);
	if (r != NULL)
	{
		entry->last_take = now;
		if (slot >= 0)
		{
			for (i = 0; i < SBQ_NUM_COUNTERS; i++)
			{
				v[i] = entry->pending[i];
				any |= v[i] != 0;
				entry->moved[slot][i] = v[i];
				entry->pending[i] = 0;
			}
			if (any)
			{
				entry->move_xid[slot] = xid;
				entry->move_committed[slot] = false;
			}
		}
	}
	SpinLockRelease(&entry->mutex);
	if (any)
	{
		r->counts = *c;
		r->slot = slot;
		r->xid = xid;
	}
	else if (r != NULL)
		sbq_undo_forget_last(&sbq_qstate_log); /* nothing moved: no record */
	return any;
}

/*
 * The queue ids of this database (and epoch) that have an entry; with
 * live_only not those marked gone (whose address a walk must not take: see
 * the file header).
 */
int
sbq_qstate_queues(Oid epoch, int32 *queue_ids, int max, bool live_only)
{
	HASH_SEQ_STATUS status;
	SbqQueueState *entry;
	int			n = 0;

	if (sbq_qstate_hash == NULL)
		return 0;
	LWLockAcquire(sbq_qstate_lock, LW_SHARED);
	hash_seq_init(&status, sbq_qstate_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->key.dbid != MyDatabaseId || entry->key.epoch != epoch ||
			(live_only && entry->gone_since != 0))
			continue;
		if (n >= max)
		{
			hash_seq_term(&status);
			break;
		}
		queue_ids[n++] = entry->key.queue_id;
	}
	LWLockRelease(sbq_qstate_lock);
	return n;
}

/*
 * sbq_qstate_work_all
 *		For the launcher: for every database with entries in the table (so
 *		sbqueue is installed there), when the next scheduled message of its
 *		queues is due (0 if unknown or none), and whether it may have work
 *		not seen here: counts not yet stored (something was sent, received or
 *		settled since maintenance last stored them), or a queue that found no
 *		room for an entry since the launcher last asked (what happens there
 *		is not seen). Up to max databases; returns how many. *blind says that
 *		a database with no entry at all found no room, or that there were
 *		more than max: then any database may have such work.
 */
int
sbq_qstate_work_all(Oid *dbids, TimestampTz *due, bool *active, int max, bool *blind)
{
	HASH_SEQ_STATUS status;
	HASH_SEQ_STATUS shares;
	SbqQueueState *entry;
	SbqQstateShare *share;
	SbqQstateShare *last = NULL;
	int			n = 0;

	*blind = false;
	if (sbq_qstate_hash == NULL)
		return 0;
	*blind = pg_atomic_exchange_u32(&sbq_qstate_shared->refused, 0) != 0;
	LWLockAcquire(sbq_qstate_lock, LW_SHARED);
	/* the sums are the launcher's alone; the LWLock keeps the shares in place */
	hash_seq_init(&shares, sbq_qstate_shares);
	while ((share = hash_seq_search(&shares)) != NULL)
	{
		share->due = 0;
		share->active = false;
	}
	hash_seq_init(&status, sbq_qstate_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		TimestampTz when;
		bool		counts = false;
		TransactionId preps[SBQ_QSTATE_PREPS];
		int			i;

		if (entry->key.queue_id == 0)
			continue;
		SpinLockAcquire(&entry->mutex);
		when = entry->due_known && entry->next_due != DT_NOEND ? entry->next_due : 0;
		for (i = 0; i < SBQ_NUM_COUNTERS; i++)
			counts |= entry->pending[i] != 0;
		memcpy(preps, entry->prep_xid, sizeof(preps));
		SpinLockRelease(&entry->mutex);
		/* a prepared transaction that ended: its counts to store, or to drop */
		for (i = 0; i < SBQ_QSTATE_PREPS && !counts; i++)
			counts = TransactionIdIsValid(preps[i]) && sbq_xid_end(preps[i]) != 0;
		if (last == NULL || last->dbid != entry->key.dbid)
			last = hash_search(sbq_qstate_shares, &entry->key.dbid, HASH_FIND, NULL);
		if (last == NULL)
			continue;			/* every entry counts in a share */
		if (when != 0 && (last->due == 0 || when < last->due))
			last->due = when;
		last->active |= counts;
	}
	hash_seq_init(&shares, sbq_qstate_shares);
	while ((share = hash_seq_search(&shares)) != NULL)
	{
		if (n >= max)
		{
			hash_seq_term(&shares);
			*blind = true;
			break;
		}
		dbids[n] = share->dbid;
		due[n] = share->due;
		active[n] = share->active ||
			pg_atomic_exchange_u32(&share->refused, 0) != 0;
		n++;
	}
	LWLockRelease(sbq_qstate_lock);
	return n;
}

/* int32 comparator for the sorted list of gone entities */
static int
sbq_int32_cmp(const void *a, const void *b)
{
	int32		x = *(const int32 *) a;
	int32		y = *(const int32 *) b;

	return x < y ? -1 : (x > y ? 1 : 0);
}

/*
 * sbq_qstate_oldest_start
 *		When the oldest transaction of this database's other backends began
 *		(DT_NOEND: none is in one); 0 when that is not known (a backend's
 *		activity, or this one's, is not tracked, or one in a transaction
 *		shows no start). For sbq_qstate_sweep_gone: read before the snapshot
 *		that finds entities gone.
 */
TimestampTz
sbq_qstate_oldest_start(void)
{
	TimestampTz oldest = DT_NOEND;
	int			n;
	int			i;

	if (!pgstat_track_activities)
		return 0;
	pgstat_clear_backend_activity_snapshot();	/* read it now, not as this transaction first did */
	n = pgstat_fetch_stat_numbackends();
	for (i = 1; i <= n; i++)
	{
		LocalPgBackendStatus *local = sbq_local_beentry(i);
		PgBackendStatus *be;

		if (local == NULL)
			continue;
		be = &local->backendStatus;
		if (be->st_procpid == MyProcPid || be->st_databaseid != MyDatabaseId)
			continue;
		if (be->st_state == STATE_DISABLED)
			return 0;
		/*
		 * A client backend (or a background worker) in a transaction with no
		 * start shown: tracked only since it began. (A walsender streams
		 * changes "running" with no transaction; its SQL shows a start.)
		 */
		if (be->st_xact_start_timestamp == 0 &&
			(be->st_backendType == B_BACKEND || be->st_backendType == B_BG_WORKER) &&
			(be->st_state == STATE_RUNNING || be->st_state == STATE_IDLEINTRANSACTION ||
			 be->st_state == STATE_FASTPATH ||
			 be->st_state == STATE_IDLEINTRANSACTION_ABORTED))
			return 0;
		/* a background worker that reports no activity: in a transaction? */
		if (be->st_xact_start_timestamp == 0 && be->st_backendType == B_BG_WORKER)
		{
			PGPROC	   *proc = BackendPidGetProc(be->st_procpid);

			if (proc != NULL && (TransactionIdIsValid(proc->xmin) ||
								 TransactionIdIsValid(proc->xid)))
				return 0;
		}
		if (be->st_xact_start_timestamp != 0 && be->st_xact_start_timestamp < oldest)
			oldest = be->st_xact_start_timestamp;
	}
	return oldest;
}

/* Whether the entry holds a prepared transaction's counts (its spinlock held). */
static bool
sbq_entry_prepared_locked(SbqQueueState *entry)
{
	int			i;

	for (i = 0; i < SBQ_QSTATE_PREPS; i++)
		if (TransactionIdIsValid(entry->prep_xid[i]))
			return true;
	return false;
}

/* Whether an entry holds nothing to store or a removal would lose (its spinlock taken here). */
static bool
sbq_entry_idle(SbqQueueState *entry)
{
	bool		idle;
	int			i;

	SpinLockAcquire(&entry->mutex);
	idle = !sbq_entry_prepared_locked(entry);
	for (i = 0; i < SBQ_NUM_COUNTERS; i++)
		idle &= entry->pending[i] == 0;
	for (i = 0; i < SBQ_QSTATE_MOVES; i++)
		idle &= !TransactionIdIsValid(entry->move_xid[i]);
	SpinLockRelease(&entry->mutex);
	return idle;
}

/* Whether the entry holds a prepared transaction's counts. */
static bool
sbq_entry_prepared(SbqQueueState *entry)
{
	bool		prepared;

	SpinLockAcquire(&entry->mutex);
	prepared = sbq_entry_prepared_locked(entry);
	SpinLockRelease(&entry->mutex);
	return prepared;
}

/*
 * Whether the entry of a queue or topic has anything for a take
 * (sbq_qstate_take): counts gathered (*pending), or moves or a prepared
 * transaction's counts to finish, which may give counts back. False: no
 * entry, or nothing.
 */
bool
sbq_qstate_busy(Oid epoch, int32 queue_id, bool *pending)
{
	SbqQueueState *entry = sbq_qstate_entry(epoch, queue_id, false);
	int			i;

	*pending = false;
	if (entry == NULL)
		return false;
	SpinLockAcquire(&entry->mutex);
	for (i = 0; i < SBQ_NUM_COUNTERS; i++)
		*pending |= entry->pending[i] != 0;
	SpinLockRelease(&entry->mutex);
	return *pending || !sbq_entry_idle(entry);
}

/*
 * sbq_qstate_sweep_gone
 *		For maintenance: gone[0 .. ngone-1] are the ids of this database's
 *		entries whose queue or topic no fresh snapshot shows (gone is
 *		sorted here), among all its entries when listed; oldest is what
 *		sbq_qstate_oldest_start gave before that snapshot was taken (0: no
 *		entry may go, a prepared transaction is pending, say). Those not
 *		marked yet are marked; those marked in an earlier pass go when every
 *		other transaction of the database began after the mark. Every other
 *		entry of the database is unmarked (its entity is there). See the
 *		file header. Returns how many went.
 */
int
sbq_qstate_sweep_gone(Oid epoch, int32 *gone, int ngone, TimestampTz oldest)
{
	HASH_SEQ_STATUS status;
	SbqQueueState *entry;
	TimestampTz now = GetCurrentTimestamp();
	int			removed = 0;

	if (sbq_qstate_hash == NULL)
		return 0;
	qsort(gone, ngone, sizeof(int32), sbq_int32_cmp);
	LWLockAcquire(sbq_qstate_lock, LW_EXCLUSIVE);
	hash_seq_init(&status, sbq_qstate_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->key.dbid != MyDatabaseId || entry->key.epoch != epoch ||
			entry->key.queue_id == 0)
			continue;
		/*
		 * Counts of a prepared transaction keep the entry unmarked: it may
		 * have made the entity, and COMMIT PREPARED runs no callback here
		 * that could take a mark off (sbq_qstate_unmark), so the views
		 * would pass over its counts until the next pass.
		 */
		if (bsearch(&entry->key.queue_id, gone, ngone, sizeof(int32), sbq_int32_cmp) == NULL ||
			sbq_entry_prepared(entry))
			entry->gone_since = 0;
		else if (entry->gone_since == 0)
			entry->gone_since = now;
		else if (entry->gone_since < oldest && sbq_entry_idle(entry))
		{
			sbq_qstate_remove(&entry->key);
			removed++;
		}
	}
	/* every backend forgets the addresses it kept (a full barrier) */
	if (removed > 0)
		(void) pg_atomic_fetch_add_u64(sbq_qstate_removals, 1);
	LWLockRelease(sbq_qstate_lock);
	return removed;
}

/*
 * sbq_qstate_forget_all
 *		A database (epoch InvalidOid) or an incarnation of the extension in
 *		one was dropped, and that committed: its entries go, so a database
 *		made later with the same OID (from the same template) starts afresh.
 *		Never fails.
 */
void
sbq_qstate_forget_all(Oid dbid, Oid epoch)
{
	HASH_SEQ_STATUS status;
	SbqQueueState *entry;

	if (sbq_qstate_hash == NULL)
		return;
	LWLockAcquire(sbq_qstate_lock, LW_EXCLUSIVE);
	hash_seq_init(&status, sbq_qstate_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->key.dbid == dbid && (!OidIsValid(epoch) || entry->key.epoch == epoch))
			sbq_qstate_remove(&entry->key);
	}
	/* every backend forgets the addresses it kept (a full barrier) */
	(void) pg_atomic_fetch_add_u64(sbq_qstate_removals, 1);
	LWLockRelease(sbq_qstate_lock);
}

/* A deleted queue: at commit its gathered counts and its hint go. */
void
sbq_qstate_forget(Oid epoch, int32 queue_id)
{
	SbqQueueKey key;

	sbq_qstate_key(&key, epoch, queue_id);
	if (sbq_qstate_entry(epoch, queue_id, false) != NULL)
		(void) sbq_qstate_record(SBQ_QS_FORGET, &key);
}

/*
 * Add to sum an entry's counts gathered and not stored yet, as snapshot snap
 * reads sbq.queue_counters.
 */
static void
sbq_entry_counts(SbqQueueState *entry, Snapshot snap, int64 *sum)
{
	int64		pending[SBQ_NUM_COUNTERS];
	TransactionId xids[SBQ_QSTATE_MOVES];
	bool		committed[SBQ_QSTATE_MOVES];
	int64		moved[SBQ_QSTATE_MOVES][SBQ_NUM_COUNTERS];
	TransactionId prep_xids[SBQ_QSTATE_PREPS];
	int64		prep[SBQ_QSTATE_PREPS][SBQ_NUM_COUNTERS];
	int			i;
	int			j;

	SpinLockAcquire(&entry->mutex);
	memcpy(pending, entry->pending, sizeof(pending));
	memcpy(xids, entry->move_xid, sizeof(xids));
	memcpy(committed, entry->move_committed, sizeof(committed));
	memcpy(moved, entry->moved, sizeof(moved));
	memcpy(prep_xids, entry->prep_xid, sizeof(prep_xids));
	memcpy(prep, entry->prep, sizeof(prep));
	SpinLockRelease(&entry->mutex);

	for (i = 0; i < SBQ_NUM_COUNTERS; i++)
		sum[i] += pending[i];

	/*
	 * A prepared transaction's counts count from its COMMIT PREPARED on, as
	 * a committed transaction's do from its commit: by the commit log, not
	 * by the snapshot (what is gathered here is not in any row yet). Once
	 * the slot is emptied they are in pending, read under the same spinlock.
	 */
	for (j = 0; j < SBQ_QSTATE_PREPS; j++)
	{
		int			end;

		if (!TransactionIdIsValid(prep_xids[j]))
			continue;
		end = sbq_xid_end(prep_xids[j]);
		if (end > 0)
			for (i = 0; i < SBQ_NUM_COUNTERS; i++)
				sum[i] += prep[j][i];
		else if (end < 0)
		{
			/*
			 * Rolled back: free the slot now, before the commit log that
			 * says so can be truncated (it would then read as committed).
			 */
			SpinLockAcquire(&entry->mutex);
			if (entry->prep_xid[j] == prep_xids[j])
				entry->prep_xid[j] = InvalidTransactionId;
			SpinLockRelease(&entry->mutex);
		}
	}

	/*
	 * A move's counts are in the rows this snapshot reads when it sees the
	 * move committed (or made it); else they are counted from here. Running
	 * or prepared when the snapshot was taken: not seen. Finished before it:
	 * seen if it committed, which the slot says, or (prepared, or its
	 * callback still to run) the commit log; one the log no longer holds is
	 * long committed.
	 */
	for (j = 0; j < SBQ_QSTATE_MOVES; j++)
	{
		bool		known;

		if (!TransactionIdIsValid(xids[j]) || TransactionIdIsCurrentTransactionId(xids[j]))
			continue;
		if (!XidInMVCCSnapshot(xids[j], snap) &&
			(committed[j] || sbq_xid_committed(xids[j], &known) || !known))
			continue;
		for (i = 0; i < SBQ_NUM_COUNTERS; i++)
			sum[i] += moved[j][i];
	}
}

/*
 * The gathered counts of every queue of this database, read once for a
 * snapshot (sbq_snapshot_key), together with the pending deliveries under
 * leases (lease.c, sbq_lease_count_pending_all): the views read both for
 * each queue, and each lease count was a scan of the whole lease table, so a
 * view of 100 queues made 100 scans. Both are read at one instant, under
 * lease.c's partition locks while no commit is between ending its leases and
 * adding its counts (lease.c's header): a delivery whose lease ends is
 * counted by one of them, never by neither (the counter would go back for a
 * moment, which a monitoring system takes for a reset) nor by both (it must
 * never read higher than it will later). Kept while the key is the same:
 * for one query and snapshot, until this transaction changes a lease or a
 * count. Bounded by the table's size; backend-local.
 */
typedef struct SbqCountsSeen
{
	SbqQueueKey key;
	int64		sum[SBQ_NUM_COUNTERS];
} SbqCountsSeen;

static HTAB *sbq_counts_seen_hash = NULL;
static SbqSnapshotKey sbq_counts_seen_key;

/* What sbq_counts_read reads into, made before the locks are taken. */
typedef struct SbqCountsRead
{
	Snapshot	snap;
	SbqQueueState **entries;	/* room for max */
	SbqCountsSeen *sums;		/* room for max */
	int			max;
	int			n;				/* how many the database has (more than max: none read) */
} SbqCountsRead;

/* the room the last read of this backend needed */
static int	sbq_counts_room = 64;

/*
 * The gathered counts of this database's entries into r, under lease.c's
 * partition locks (sbq_lease_count_pending_all): allocates nothing; false
 * when r has no room for them all (r->n says how many there are).
 */
static bool
sbq_counts_read(void *arg)
{
	SbqCountsRead *r = (SbqCountsRead *) arg;
	HASH_SEQ_STATUS status;
	SbqQueueState *entry;
	int			i;

	r->n = 0;
	if (sbq_qstate_hash == NULL)
		return true;
	LWLockAcquire(sbq_qstate_lock, LW_SHARED);
	hash_seq_init(&status, sbq_qstate_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		/* not one marked gone: its address may not last (file header) */
		if (entry->key.dbid != MyDatabaseId || entry->gone_since != 0)
			continue;
		if (r->n < r->max)
			r->entries[r->n] = entry;
		r->n++;
	}
	LWLockRelease(sbq_qstate_lock);
	if (r->n > r->max)
		return false;
	for (i = 0; i < r->n; i++)
	{
		r->sums[i].key = r->entries[i]->key;
		memset(r->sums[i].sum, 0, sizeof(r->sums[i].sum));
		sbq_entry_counts(r->entries[i], r->snap, r->sums[i].sum);
	}
	return true;
}

/*
 * sbq_counts_seen
 *		Make sure the counts are read for the active snapshot; false when
 *		none is active (then the callers count for themselves).
 */
bool
sbq_counts_seen(void)
{
	SbqSnapshotKey key;
	HASHCTL		ctl;
	HTAB	   *seen;
	SbqCountsRead r;
	int			i;

	if (!sbq_snapshot_key(&key))
		return false;
	if (sbq_counts_seen_hash != NULL &&
		memcmp(&key, &sbq_counts_seen_key, sizeof(key)) == 0)
		return true;
	if (sbq_counts_seen_hash != NULL)
		hash_destroy(sbq_counts_seen_hash);
	sbq_counts_seen_hash = NULL;

	/* room first: sbq_counts_read runs under partition locks (entries may come) */
	r.snap = GetActiveSnapshot();
	r.max = sbq_counts_room;
	for (;;)
	{
		r.entries = palloc(sizeof(SbqQueueState *) * r.max);
		r.sums = palloc(sizeof(SbqCountsSeen) * r.max);
		if (sbq_lease_count_pending_all(sbq_counts_read, &r))
			break;
		pfree(r.entries);
		pfree(r.sums);
		/* entries may come meanwhile: some more room */
		r.max = r.n + 64;
	}
	sbq_counts_room = Max(r.n + 64, 64);

	ctl.keysize = sizeof(SbqQueueKey);
	ctl.entrysize = sizeof(SbqCountsSeen);
	ctl.hcxt = TopMemoryContext;
	seen = hash_create("sbqueue counts seen", Max(r.n, 64), &ctl,
					   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	for (i = 0; i < r.n; i++)
	{
		SbqCountsSeen *c;

		c = (SbqCountsSeen *) hash_search(seen, &r.sums[i].key, HASH_ENTER, NULL);
		memcpy(c->sum, r.sums[i].sum, sizeof(c->sum));
	}
	pfree(r.entries);
	pfree(r.sums);
	sbq_counts_seen_hash = seen;
	sbq_counts_seen_key = key;
	return true;
}

/*
 * sbq_queue_table_sql
 *		sbq_queue_table() (0.15): how full the table of queues is, for
 *		monitoring, as sbq_lock_table() says it of the table of locks.
 *		capacity is sbqueue.max_queues; in_use the entries of the whole
 *		server (NULL but for roles with the privileges of pg_read_all_stats:
 *		other tenants' activity is their own); database_share the most
 *		entries this database's queues and topics may have; database_in_use
 *		its entries (its own one, and those of earlier incarnations of the
 *		extension not yet freed, included); database_deleted those of its
 *		entries whose queue or topic maintenance found gone, which are freed
 *		once no transaction that began before is left. A queue without an
 *		entry works, more slowly (the file header). Without the preload there
 *		is no table: all 0.
 */
Datum
sbq_queue_table_sql(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[5];
	bool		nulls[5] = {false, false, false, false, false};
	int64		in_use = 0;
	int32		db_in_use = 0;
	int32		db_deleted = 0;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	if (sbq_qstate_hash != NULL)
	{
		HASH_SEQ_STATUS status;
		SbqQueueState *entry;
		SbqQstateShare *share;

		/* at most sbqueue.max_queues entries, read under the shared lock */
		LWLockAcquire(sbq_qstate_lock, LW_SHARED);
		in_use = (int64) hash_get_num_entries(sbq_qstate_hash);
		share = hash_search(sbq_qstate_shares, &MyDatabaseId, HASH_FIND, NULL);
		if (share != NULL)
			db_in_use = share->count;
		hash_seq_init(&status, sbq_qstate_hash);
		while ((entry = (SbqQueueState *) hash_seq_search(&status)) != NULL)
			if (entry->key.dbid == MyDatabaseId && entry->gone_since != 0)
				db_deleted++;
		LWLockRelease(sbq_qstate_lock);
	}
	values[0] = Int32GetDatum(sbq_qstate_hash != NULL ? sbq_qstate_max : 0);
	values[1] = Int64GetDatum(in_use);
	nulls[1] = !has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
	values[2] = Int32GetDatum(sbq_qstate_hash != NULL ? sbq_qstate_db_limit() : 0);
	values[3] = Int32GetDatum(db_in_use);
	values[4] = Int32GetDatum(db_deleted);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * sbq.pending_counts(epoch, queue_id): the counts gathered for the queue and
 * not stored yet, as read for the active snapshot (sbq_counts_seen), with
 * those of the current transaction, as an array in the column order of
 * sbq.queue_counters.
 */
Datum
sbq_pending_counts_sql(PG_FUNCTION_ARGS)
{
	Oid			epoch = PG_GETARG_OID(0);
	int32		queue_id = PG_GETARG_INT32(1);
	int64		sum[SBQ_NUM_COUNTERS];
	Datum		d[SBQ_NUM_COUNTERS];
	SbqQueueKey key;
	SbqQueueState *entry;
	int			i;

	memset(sum, 0, sizeof(sum));
	sbq_qstate_key(&key, epoch, queue_id);
	if (sbq_counts_seen())
	{
		SbqCountsSeen *c = hash_search(sbq_counts_seen_hash, &key, HASH_FIND, NULL);

		if (c != NULL)
			memcpy(sum, c->sum, sizeof(sum));
	}
	else if ((entry = sbq_qstate_entry(epoch, queue_id, false)) != NULL)
		sbq_entry_counts(entry, GetTransactionSnapshot(), sum);
	for (i = 0; i < sbq_undo_count(&sbq_qstate_log); i++)
	{
		const SbqQstateRecord *r = sbq_undo_entry(&sbq_qstate_log, i);

		if (r->kind == SBQ_QS_ADD && memcmp(&r->key, &key, sizeof(key)) == 0)
			sbq_counts_add(sum, &r->counts, 1);
	}
	for (i = 0; i < SBQ_NUM_COUNTERS; i++)
		d[i] = Int64GetDatum(sum[i]);
	PG_RETURN_ARRAYTYPE_P(construct_array(d, SBQ_NUM_COUNTERS, INT8OID, sizeof(int64),
										  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/* ------------------------------------------------------ scheduled messages */

/*
 * sbq_qstate_due
 *		Whether a receive should look for due scheduled messages of the queue
 *		now; *gen is what to hand to sbq_qstate_set_due after looking. True
 *		when nothing is known (no entry, after a restart) or this transaction
 *		scheduled one itself.
 */
bool
sbq_qstate_due(Oid epoch, int32 queue_id, TimestampTz now, uint64 *gen)
{
	SbqQueueKey key;
	SbqQueueState *entry;
	bool		due;
	int			i;

	*gen = 0;
	sbq_qstate_key(&key, epoch, queue_id);
	entry = sbq_qstate_entry(epoch, queue_id, true);
	if (entry == NULL)
		return true;
	SpinLockAcquire(&entry->mutex);
	*gen = entry->due_gen;
	due = !entry->due_known || entry->next_due <= now || entry->due_prepared > 0;
	SpinLockRelease(&entry->mutex);
	for (i = 0; sbq_qstate_nscheduled > 0 && i < sbq_undo_count(&sbq_qstate_log) && !due; i++)
	{
		const SbqQstateRecord *r = sbq_undo_entry(&sbq_qstate_log, i);

		if (r->kind == SBQ_QS_SCHEDULED && memcmp(&r->key, &key, sizeof(key)) == 0)
			due = true;
	}
	return due;
}

/*
 * sbq_qstate_set_due
 *		After a look-up with a fresh snapshot: the queue's next scheduled
 *		message is due at next (any), or there is none. Ignored when a
 *		scheduled send committed since *gen was read.
 *
 *		The look saw what this transaction itself did to the scheduled
 *		messages (activated, cancelled, sent them) as if committed. When the
 *		transaction has written anything, a record says so: should it (or
 *		the subtransaction that looked) roll back, the time is unknown again,
 *		and should it be prepared, every receive looks until it is resolved.
 */
void
sbq_qstate_set_due(Oid epoch, int32 queue_id, uint64 gen, bool any, TimestampTz next)
{
	SbqQueueState *entry;

	entry = sbq_qstate_entry(epoch, queue_id, false);
	if (entry == NULL)
		return;
	(void) sbq_qstate_writer_record(SBQ_QS_LOOKED, epoch, queue_id);
	SpinLockAcquire(&entry->mutex);
	if (entry->due_gen == gen)
	{
		entry->due_known = true;
		entry->next_due = any ? next : DT_NOEND;
	}
	SpinLockRelease(&entry->mutex);
}

/*
 * A scheduled message for the queue, due at when: the hint learns it at
 * commit. Recorded also when the queue has no entry now (no room): one may
 * be made before this transaction ends, and a receive's look, which cannot
 * see this message yet, may then store "none" there; the commit must lower
 * it, as for a queue that had an entry all along.
 */
void
sbq_qstate_scheduled(Oid epoch, int32 queue_id, TimestampTz when)
{
	SbqQueueKey key;
	SbqQstateRecord *r;

	if (sbq_qstate_hash == NULL || !OidIsValid(epoch))
		return;
	sbq_qstate_key(&key, epoch, queue_id);
	(void) sbq_qstate_entry(epoch, queue_id, true);
	(void) sbq_qstate_entry(epoch, 0, true);	/* for a PREPARE's count */
	r = sbq_qstate_record(SBQ_QS_SCHEDULED, &key);
	sbq_qstate_nscheduled++;
	r->when = when;
}

/* ------------------------------------------------------- the head of a queue */

static SbqSendSlot *
sbq_my_slot(void)
{
	int			procno = SBQ_MY_PROC_NUMBER();

	if (sbq_send_slots == NULL || procno < 0 || procno >= MaxBackends)
		return NULL;
	return &sbq_send_slots[procno];
}

/*
 * sbq_qstate_send_begin
 *		Before a statement that takes sequence numbers for active messages of
 *		the queue: announce it (see the file header), until the end of the
 *		transaction.
 */
void
sbq_qstate_send_begin(Oid epoch, int32 queue_id)
{
	SbqSendSlot *slot = sbq_my_slot();
	SbqQueueState *db;
	int64		floor = 1;

	if (slot == NULL || !OidIsValid(epoch))
		return;
	sbq_qstate_callbacks_on();
	db = sbq_qstate_entry(epoch, 0, true);
	if (db != NULL)
	{
		SpinLockAcquire(&db->mutex);
		floor = db->max_seq + 1;
		SpinLockRelease(&db->mutex);
	}
	SpinLockAcquire(&slot->mutex);
	if (sbq_my_slot_active && slot->active)
	{
		if (slot->queue_id != queue_id || slot->epoch != epoch)
			slot->queue_id = 0;
		/* the floor it has is lower, and still holds */
	}
	else
	{
		slot->dbid = MyDatabaseId;
		slot->epoch = epoch;
		slot->queue_id = queue_id;
		slot->floor = floor;
		slot->active = true;
	}
	SpinLockRelease(&slot->mutex);
	sbq_my_slot_active = true;
}

/* After such a statement: the highest sequence number it took. */
void
sbq_qstate_send_done(Oid epoch, int64 max_seq)
{
	SbqQueueState *db;

	db = sbq_qstate_entry(epoch, 0, false);
	if (db == NULL)
		return;
	SpinLockAcquire(&db->mutex);
	if (max_seq > db->max_seq)
		db->max_seq = max_seq;
	SpinLockRelease(&db->mutex);
}

static void
sbq_qstate_slot_clear(void)
{
	SbqSendSlot *slot = sbq_my_slot();

	if (slot != NULL)
	{
		SpinLockAcquire(&slot->mutex);
		slot->active = false;
		SpinLockRelease(&slot->mutex);
	}
	sbq_my_slot_active = false;
}

/* A transaction that announced itself is being prepared: leave its floor behind. */
static void
sbq_qstate_slot_prepared(void)
{
	SbqSendSlot *slot = sbq_my_slot();
	SbqQueueKey key;
	SbqQueueState *db;
	int64		floor;

	if (slot == NULL)
		return;
	SpinLockAcquire(&slot->mutex);
	floor = slot->active ? slot->floor : PG_INT64_MAX;
	key.epoch = slot->epoch;
	SpinLockRelease(&slot->mutex);
	/* a callback that cannot fail: the entry is there since the slot was taken */
	db = sbq_qstate_entry(key.epoch, 0, false);
	if (db == NULL || floor == PG_INT64_MAX)
		return;
	SpinLockAcquire(&db->mutex);
	if (floor < db->prepared_floor)
		db->prepared_floor = floor;
	db->prepares++;
	SpinLockRelease(&db->mutex);
}

/*
 * The bound of a queue (db: its database's entry): no sequence number of its
 * main queue still to appear is below it. To be read before the snapshot of
 * the scan it bounds.
 */
static int64
sbq_qstate_bound(SbqQueueState *db, int32 queue_id)
{
	int64		b;
	int			i;

	SpinLockAcquire(&db->mutex);
	b = db->max_seq + 1;
	SpinLockRelease(&db->mutex);

	/*
	 * Not this backend's own slot: what its transaction sent and still holds
	 * is in its own scan's snapshot, and seen there; what it sent and took
	 * out is gone at commit, and its rollback takes the sends too. With its
	 * slot, a transaction that sends and receives in a loop could not move
	 * the hint past its first send, and each receive walked every message
	 * it had settled since.
	 */
	for (i = 0; i < MaxBackends; i++)
	{
		SbqSendSlot *slot = &sbq_send_slots[i];

		if (i == SBQ_MY_PROC_NUMBER())
			continue;
		SpinLockAcquire(&slot->mutex);
		if (slot->active && slot->dbid == MyDatabaseId &&
			(slot->queue_id == queue_id || slot->queue_id == 0) && slot->floor < b)
			b = slot->floor;
		SpinLockRelease(&slot->mutex);
	}

	/*
	 * The floors prepared transactions left, after the slots: PREPARE leaves
	 * its floor here before it clears its slot, so one of the two is seen.
	 */
	SpinLockAcquire(&db->mutex);
	if (db->prepared_floor < b)
		b = db->prepared_floor;
	SpinLockRelease(&db->mutex);
	return b;
}

/*
 * The entries of a queue and of its database (made if need be) for a reader
 * of where a scan may start: false when either is missing, or there are no
 * send slots (then no bound can be given).
 */
static bool
sbq_qstate_entries(Oid epoch, int32 queue_id, SbqQueueState **entry, SbqQueueState **db)
{
	*entry = sbq_qstate_entry(epoch, queue_id, true);
	*db = sbq_qstate_entry(epoch, 0, true);
	return *entry != NULL && *db != NULL && sbq_send_slots != NULL;
}

/*
 * sbq_qstate_head
 *		Where a leasing receive of the queue may start its scan (head->hint,
 *		or head->free until head->free_until), and the most it may then
 *		advance either hint to (head->bound): no message that appears later
 *		can be below the bound. The generations go back to
 *		sbq_qstate_advance and sbq_qstate_free_advance. To be called before
 *		the scan's snapshot is taken. False: no hint here (scan from the
 *		start).
 */
bool
sbq_qstate_head(Oid epoch, int32 queue_id, SbqHead *head)
{
	SbqQueueState *entry;
	SbqQueueState *db;

	if (!sbq_qstate_entries(epoch, queue_id, &entry, &db))
		return false;

	SpinLockAcquire(&entry->mutex);
	head->hint = entry->head_hint;
	head->gen = entry->hint_gen;
	head->free = entry->free_hint;
	head->free_until = entry->free_until;
	head->free_gen = entry->free_gen;
	SpinLockRelease(&entry->mutex);

	head->bound = sbq_qstate_bound(db, queue_id);
	return true;
}

/*
 * sbq_qstate_line
 *		Where accept-next's walk of the queue's line may start (line->floor:
 *		no entry of the line below it is there for any snapshot to come),
 *		and what sbq_qstate_line_raise needs: the floor's generation and,
 *		when the walk before found the floor could rise, the bound. To be
 *		called before the walk's first snapshot is taken. False: nothing
 *		kept here (walk from the start).
 */
bool
sbq_qstate_line(Oid epoch, int32 queue_id, SbqLine *line)
{
	SbqQueueState *entry;
	SbqQueueState *db;

	if (!sbq_qstate_entries(epoch, queue_id, &entry, &db))
		return false;
	SpinLockAcquire(&entry->mutex);
	line->floor = entry->line_floor;
	line->gen = entry->line_gen;
	line->have_bound = entry->line_want;
	SpinLockRelease(&entry->mutex);
	/* (read only when a raise is wanted: it reads every backend's send slot) */
	line->bound = line->have_bound ? sbq_qstate_bound(db, queue_id) : PG_INT64_MIN;
	return true;
}

/*
 * sbq_qstate_line_raise
 *		A walk that began with line (sbq_qstate_line) found every entry below
 *		candidate gone for good: raise the floor to it, or to the bound if
 *		that is lower (a mark may still appear there). Not when the floor was
 *		lowered since the walk read it: a mark may have been written where
 *		the walk had passed. A walk that did not read the bound only asks
 *		the next one to.
 */
void
sbq_qstate_line_raise(Oid epoch, int32 queue_id, const SbqLine *line, int64 candidate)
{
	SbqQueueState *entry = sbq_qstate_entry(epoch, queue_id, false);

	if (entry == NULL)
		return;
	SpinLockAcquire(&entry->mutex);
	if (!line->have_bound)
		entry->line_want |= candidate > line->floor;
	else if (entry->line_gen == line->gen && Min(candidate, line->bound) > entry->line_floor)
	{
		entry->line_floor = Min(candidate, line->bound);
		entry->line_want = false;
	}
	SpinLockRelease(&entry->mutex);
}

/* accept-next's hand for a queue without an entry: this backend's own */
static Oid	sbq_resume_epoch = InvalidOid;
static int32 sbq_resume_queue = 0;
static int64 sbq_resume_mark = PG_INT64_MIN;

/*
 * sbq_qstate_line_lower
 *		This transaction wrote a ready mark (mark) into the queue's line that
 *		is not a sequence number it took (see the file header). Called after
 *		the write. Never fails.
 */
void
sbq_qstate_line_lower(Oid epoch, int32 queue_id, int64 mark)
{
	SbqQueueState *entry = sbq_qstate_entry(epoch, queue_id, false);

	if (entry == NULL)
		return;
	SpinLockAcquire(&entry->mutex);
	if (mark < entry->line_floor)
		entry->line_floor = mark;
	entry->line_gen++;
	SpinLockRelease(&entry->mutex);
	sbq_qstate_accept_back(epoch, queue_id, mark);
}

/*
 * sbq_qstate_accept_back
 *		A session whose mark is mark is free again (released): accept-next's
 *		hand comes back to it, if it has gone past. Never fails.
 */
void
sbq_qstate_accept_back(Oid epoch, int32 queue_id, int64 mark)
{
	SbqQueueState *entry = sbq_qstate_entry(epoch, queue_id, false);

	if (entry == NULL)
	{
		if (sbq_resume_epoch == epoch && sbq_resume_queue == queue_id &&
			sbq_resume_mark != PG_INT64_MIN && mark <= sbq_resume_mark)
			sbq_resume_mark = mark - 1;
		return;
	}
	SpinLockAcquire(&entry->mutex);
	if (entry->accept_resume != PG_INT64_MIN && mark <= entry->accept_resume)
		entry->accept_resume = mark - 1;
	SpinLockRelease(&entry->mutex);
}

/*
 * sbq_qstate_accept_resume
 *		Where in the queue's line the last accept-next that ran out of looks
 *		stopped (a mark), for the next to go on from; PG_INT64_MIN: from the
 *		front. Only a hint: whoever reads it walks round to the front.
 */
int64
sbq_qstate_accept_resume(Oid epoch, int32 queue_id)
{
	SbqQueueState *entry = sbq_qstate_entry(epoch, queue_id, false);
	int64		mark;

	if (entry == NULL)
		return sbq_resume_epoch == epoch && sbq_resume_queue == queue_id ?
			sbq_resume_mark : PG_INT64_MIN;
	SpinLockAcquire(&entry->mutex);
	mark = entry->accept_resume;
	SpinLockRelease(&entry->mutex);
	return mark;
}

/* sbq_qstate_set_accept_resume: see sbq_qstate_accept_resume. Never fails. */
void
sbq_qstate_set_accept_resume(Oid epoch, int32 queue_id, int64 mark)
{
	SbqQueueState *entry = sbq_qstate_entry(epoch, queue_id, false);

	if (entry == NULL)
	{
		sbq_resume_epoch = epoch;
		sbq_resume_queue = queue_id;
		sbq_resume_mark = mark;
		return;
	}
	SpinLockAcquire(&entry->mutex);
	entry->accept_resume = mark;
	SpinLockRelease(&entry->mutex);
}

/*
 * sbq_qstate_advance
 *		Move the queue's head hint up to candidate (never down).
 *
 *		The scan did not see the rows this transaction itself took out of the
 *		queue (completed, dead-lettered, deferred, received and deleted), nor
 *		count them as its first: a rollback would bring them back below the
 *		new hint, where no receive looks. So a transaction that has written
 *		keeps a record of the hint before, which its abort (or its PREPARE)
 *		lowers the hint back to. Rows taken out by others were seen.
 *
 *		Nor does it move when the hint was lowered since sbq_qstate_head read
 *		gen: the scan started above a row that is back, and did not see it.
 */
void
sbq_qstate_advance(Oid epoch, int32 queue_id, int64 candidate, uint64 gen)
{
	SbqQueueState *entry;
	SbqQstateRecord *r;
	bool		moves;

	entry = sbq_qstate_entry(epoch, queue_id, false);
	if (entry == NULL)
		return;
	SpinLockAcquire(&entry->mutex);
	moves = candidate > entry->head_hint && entry->hint_gen == gen;
	SpinLockRelease(&entry->mutex);
	if (!moves)
		return;
	r = sbq_qstate_writer_record(SBQ_QS_ADVANCED, epoch, queue_id);
	SpinLockAcquire(&entry->mutex);
	if (candidate > entry->head_hint && entry->hint_gen == gen)
	{
		if (r != NULL && entry->head_hint < r->old_hint)
			r->old_hint = entry->head_hint;
		entry->head_hint = candidate;
	}
	SpinLockRelease(&entry->mutex);
}

/*
 * sbq_qstate_free_advance
 *		Move the queue's free hint to candidate, valid until until: a
 *		leasing receive that scanned from head found every row below
 *		candidate locked until then at least, or taken by itself.
 *
 *		It moves up only; it moves down (to a region found afresh) only when
 *		the one it replaces has expired. Not when either hint was lowered (or
 *		asked to be) since sbq_qstate_head read the generations: a lock may
 *		have ended early, or a message come back, where the scan had passed. A transaction that has
 *		written keeps the same record as sbq_qstate_advance, whose abort
 *		takes the free hint down too: its scan did not see the rows it took
 *		out itself, which come back at the abort.
 */
void
sbq_qstate_free_advance(Oid epoch, int32 queue_id, const SbqHead *head, int64 candidate,
						TimestampTz until, TimestampTz now)
{
	SbqQueueState *entry;
	SbqQstateRecord *r;
	bool		moves;

	if (candidate > head->bound)
		candidate = head->bound;
	if (candidate <= head->hint || until <= now)
		return;
	entry = sbq_qstate_entry(epoch, queue_id, false);
	if (entry == NULL)
		return;
	SpinLockAcquire(&entry->mutex);
	moves = entry->free_gen == head->free_gen && entry->hint_gen == head->gen &&
		(candidate > entry->free_hint || entry->free_until <= now);
	SpinLockRelease(&entry->mutex);
	if (!moves)
		return;
	r = sbq_qstate_writer_record(SBQ_QS_ADVANCED, epoch, queue_id);
	SpinLockAcquire(&entry->mutex);
	if (entry->free_gen == head->free_gen && entry->hint_gen == head->gen &&
		(candidate > entry->free_hint || entry->free_until <= now))
	{
		if (r != NULL && entry->head_hint < r->old_hint)
			r->old_hint = entry->head_hint;
		entry->free_hint = candidate;
		entry->free_until = until;
	}
	SpinLockRelease(&entry->mutex);
}

/*
 * sbq_qstate_free_lower
 *		A lock on message seq of the queue's main queue ended before its
 *		expiry (lease.c, at commit or abort), after the change is visible:
 *		no receive may start above it. Never fails.
 */
void
sbq_qstate_free_lower(Oid epoch, int32 queue_id, int64 seq)
{
	sbq_qstate_lower_to(epoch, queue_id, seq, false);
}

/*
 * sbq_qstate_prepares
 *		For maintenance, before it asks whether the database has a prepared
 *		transaction: the count sbq_qstate_refresh takes (-1: none here).
 */
int64
sbq_qstate_prepares(Oid epoch)
{
	SbqQueueState *db = sbq_qstate_entry(epoch, 0, false);
	int64		count;

	if (db == NULL)
		return -1;
	SpinLockAcquire(&db->mutex);
	count = db->prepares;
	SpinLockRelease(&db->mutex);
	return count;
}

/*
 * sbq_qstate_refresh
 *		For maintenance: whether the queue's head hint is due for its check
 *		(a minute since the last), and then the hint to check below (*hint).
 *		prepares >= 0: the database had no prepared transaction when asked
 *		after sbq_qstate_prepares() returned it; then what PREPAREs counted
 *		up to it left behind goes: the database's floor, and the queue's
 *		mark that makes every receive look for due scheduled messages.
 */
bool
sbq_qstate_refresh(Oid epoch, int32 queue_id, TimestampTz now, int64 prepares,
				   int64 *hint)
{
	SbqQueueState *entry;
	bool		due = false;

	entry = sbq_qstate_entry(epoch, queue_id, false);
	if (entry != NULL)
	{
		SpinLockAcquire(&entry->mutex);
		if (now - entry->hint_set_at >= SBQ_HINT_CHECK_USECS)
		{
			*hint = entry->head_hint;
			due = *hint > 0;
			entry->hint_set_at = now;
			/* and the line's floor, for marks no announced path wrote */
			entry->line_floor = PG_INT64_MIN;
			entry->line_gen++;
			entry->line_want = true;
			/* and accept-next's hand, so the front of the line comes up */
			entry->accept_resume = PG_INT64_MIN;
		}
		if (entry->due_prepared > 0 && entry->due_prepared <= prepares)
		{
			/* what was prepared is committed or gone: look once more */
			entry->due_prepared = 0;
			entry->due_known = false;
			entry->due_gen++;
		}
		SpinLockRelease(&entry->mutex);
	}
	if (prepares >= 0)
	{
		entry = sbq_qstate_entry(epoch, 0, false);
		if (entry != NULL)
		{
			SpinLockAcquire(&entry->mutex);
			/* a floor is left with a bump of the count, under this lock */
			if (entry->prepares == prepares)
				entry->prepared_floor = PG_INT64_MAX;
			SpinLockRelease(&entry->mutex);
		}
	}
	return due;
}

/*
 * sbq_qstate_maintain_floor
 *		For maintenance: where its looks for a queue's active messages may
 *		start, as a receive's scan starts at the head hint: no active message
 *		is below it. 0 (from the start) when the queue has no entry, or when
 *		the hint's check is due at now: that check looks below the hint for
 *		what a path that does not announce its sends stored there, and runs
 *		only while the queue is known to have messages.
 */
int64
sbq_qstate_maintain_floor(Oid epoch, int32 queue_id, TimestampTz now)
{
	SbqQueueState *entry = sbq_qstate_entry(epoch, queue_id, false);
	int64		floor = 0;

	if (entry == NULL)
		return 0;
	SpinLockAcquire(&entry->mutex);
	if (now - entry->hint_set_at < SBQ_HINT_CHECK_USECS)
		floor = entry->head_hint;
	SpinLockRelease(&entry->mutex);
	return floor;
}

/* Move the queue's head hint down to seq, where maintenance found a message. */
void
sbq_qstate_lower(Oid epoch, int32 queue_id, int64 seq)
{
	sbq_qstate_lower_to(epoch, queue_id, seq, true);
}

/*
 * Whether a look that found no lock in a row still holds (entry's spinlock
 * held): the mark was not cleared since it began (gen), the head hint is
 * not below where it started (floor), and every writer of such a lock had
 * ended before its snapshot (xmin).
 */
static bool
sbq_row_look_holds(const SbqQueueState *entry, uint64 gen, int64 floor, FullTransactionId xmin)
{
	return entry->row_lock_gen == gen && entry->head_hint >= floor &&
		FullTransactionIdPrecedes(entry->row_lock_xid, xmin);
}

/*
 * sbq_qstate_row_lock
 *		This transaction has written a lock into a row of the queue's main
 *		queue (a receive that locks rows, a deferred message received by its
 *		number, an abandon's delay, a renew): maintenance must look for such
 *		locks again (sbq_qstate_row_locks_look). Called after the write,
 *		before the transaction ends: the write gave it its transaction id,
 *		which a look that would set the mark compares with its snapshot.
 */
void
sbq_qstate_row_lock(Oid epoch, int32 queue_id)
{
	SbqQueueState *entry;
	FullTransactionId xid;

	if (sbq_qstate_hash == NULL)
		return;
	xid = GetTopFullTransactionId();
	entry = sbq_qstate_entry(epoch, queue_id, false);
	if (entry == NULL)
		return;
	SpinLockAcquire(&entry->mutex);
	entry->no_row_locks = false;
	entry->row_lock_gen++;
	if (FullTransactionIdFollows(xid, entry->row_lock_xid))
		entry->row_lock_xid = xid;
	SpinLockRelease(&entry->mutex);
}

/*
 * sbq_qstate_row_locks_look
 *		For maintenance: whether to look for expired locks stored in the
 *		queue's rows. Yes unless a look found none and no writer of one has
 *		come since; and then too once a minute, for rows no announced path
 *		wrote (a restore, a shard moved in). *gen: how many times the mark
 *		was cleared, for sbq_qstate_no_row_locks.
 */
bool
sbq_qstate_row_locks_look(Oid epoch, int32 queue_id, TimestampTz now, uint64 *gen)
{
	SbqQueueState *entry = sbq_qstate_entry(epoch, queue_id, false);
	bool		look = true;

	*gen = 0;
	if (entry == NULL)
		return true;
	SpinLockAcquire(&entry->mutex);
	if (entry->no_row_locks && now - entry->row_look_at < SBQ_HINT_CHECK_USECS)
		look = false;
	else
		entry->row_look_at = now;
	*gen = entry->row_lock_gen;
	SpinLockRelease(&entry->mutex);
	return look;
}

/*
 * sbq_qstate_no_row_locks
 *		For maintenance, after a look: none (true) or some (false) of the
 *		rows of the queue's main queue that may store a lock do. Some clears
 *		the mark. None, from a look whose snapshot's xmin was xmin (or
 *		later) and that read them all from floor, sets it, unless the mark
 *		was cleared since sbq_qstate_row_locks_look returned gen, the head
 *		hint went below floor (a rollback brought back messages there), or
 *		a writer of such a lock had not ended before that snapshot (its row
 *		may not have been seen). A look in a transaction that has written may have seen its
 *		own change (a lock it ended), which a rollback would undo: the mark
 *		is then set at its commit, on the same conditions.
 */
void
sbq_qstate_no_row_locks(Oid epoch, int32 queue_id, bool none, TransactionId xmin,
						uint64 gen, int64 floor)
{
	SbqQueueState *entry = sbq_qstate_entry(epoch, queue_id, false);
	FullTransactionId next;
	FullTransactionId full;

	if (entry == NULL)
		return;
	if (!none || !TransactionIdIsNormal(xmin))
	{
		SpinLockAcquire(&entry->mutex);
		entry->no_row_locks = false;
		entry->row_lock_gen++;
		SpinLockRelease(&entry->mutex);
		return;
	}
	/* xmin is at most 2^31 behind the next transaction id */
	next = ReadNextFullTransactionId();
	full = FullTransactionIdFromU64(U64FromFullTransactionId(next) -
									(uint32) (XidFromFullTransactionId(next) - xmin));
	if (TransactionIdIsValid(GetTopTransactionIdIfAny()))
	{
		SbqQueueKey key;
		SbqQstateRecord *r;
		int			i;

		/* one record a queue for a loop of passes: the last look's */
		sbq_qstate_key(&key, epoch, queue_id);
		r = NULL;
		for (i = sbq_undo_count(&sbq_qstate_log) - 1; i >= 0 && r == NULL; i--)
		{
			SbqQstateRecord *e = sbq_undo_entry(&sbq_qstate_log, i);

			if (e->hdr.level != GetCurrentTransactionNestLevel())
				break;
			if (e->kind == SBQ_QS_NO_ROW_LOCKS && memcmp(&e->key, &key, sizeof(key)) == 0)
				r = e;
		}
		if (r == NULL)
			r = sbq_qstate_record(SBQ_QS_NO_ROW_LOCKS, &key);
		r->xmin = full;
		r->gen = gen;
		r->floor = floor;
		return;
	}
	SpinLockAcquire(&entry->mutex);
	if (sbq_row_look_holds(entry, gen, floor, full))
		entry->no_row_locks = true;
	SpinLockRelease(&entry->mutex);
}
