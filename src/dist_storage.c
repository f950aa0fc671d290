/*-------------------------------------------------------------------------
 *
 * dist_storage.c
 *	  The storage statements of a shard group, with the tables distributed
 *	  (distributed.c): each statement prepared and kept per group, naming the
 *	  group's shards; and the sequences of the node raised past the numbers
 *	  of a group that arrived (docs/scale-out.md, decision 5).
 *
 * Owns: backend-local state only (the plans per group, the groups whose
 * numbers this backend has raised the sequences past). Locks: none.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/dist_storage.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "executor/spi.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "compat.h"
#include "dist_int.h"
#include "distributed.h"
#include "storage.h"
#include "storage_core.h"

/*
 * The kept plans of the statements for the shard groups of distributed
 * tables (distributed.c), by statement, sub-queue and group: each names
 * the group's shards.
 */
typedef struct SbqGroupPlanKey
{
	SbqStatement *st;
	int64		group;
	int			which;
} SbqGroupPlanKey;

typedef struct SbqGroupPlan
{
	SbqGroupPlanKey key;
	SPIPlanPtr	plan;
	int			flavour;
} SbqGroupPlan;

static HTAB *sbq_group_plans = NULL;

SPIPlanPtr
sbq_group_plan(SbqStatement *st, int which, int flavour)
{
	SbqGroupPlanKey key;
	SbqGroupPlan *e;
	bool		found;

	if (!sbq_dist_in_group())
		elog(ERROR, "sbqueue statement \"%s\" outside a shard group", st->name);
	if (sbq_group_plans == NULL)
	{
		HASHCTL		ctl;

		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(SbqGroupPlanKey);
		ctl.entrysize = sizeof(SbqGroupPlan);
		sbq_group_plans = hash_create("sbqueue plans of shard groups", 64, &ctl,
									  HASH_ELEM | HASH_BLOBS);
	}
	memset(&key, 0, sizeof(key));
	key.st = st;
	key.group = sbq_dist_group_id();
	key.which = which;
	e = hash_search(sbq_group_plans, &key, HASH_ENTER, &found);
	if (found && e->flavour != flavour && e->plan != NULL)
	{
		SPI_freeplan(e->plan);
		e->plan = NULL;
	}
	if (!found || e->plan == NULL)
	{
		e->plan = NULL;
		e->plan = sbq_prepare_kept(st, sbq_dist_sql(sbq_statement_sql(st, which, flavour)));
		e->flavour = flavour;
	}
	return e->plan;
}

/*
 * Raise this node's sequences past the numbers of a shard group the first
 * time a backend works on it where it is now (its queues shard, "epoch"):
 * a group that arrived from another node brings the numbers that node gave,
 * and the numbers of a queue, its sessions and its entities must keep
 * increasing and never meet (docs/scale-out.md, decision 5). Each node's
 * sequences step by SBQ_DIST_MAX_NODES from the node's group id
 * (dist_layout.c), so no two nodes ever give one number; a raise keeps that
 * residue, and goes well past the group's numbers. Only when the group holds
 * a number the sequence could still give: its highest above the last given,
 * or equal to a first value not given yet. A number near the end of bigint
 * (a mark saturates there) counts as the sequence's top less the margin:
 * the raise must not overflow, and the numbers given there run out anyway.
 */
#define SBQ_FLOOR_N(cte, margin, top) SBQ_SEQ_CAP(cte ".n", top, margin)
#define SBQ_FLOOR(seq, cte, margin, top) \
	"(SELECT pg_catalog.setval('sbq." seq "', " \
	"  (" SBQ_FLOOR_N(cte, margin, top) " + " margin ")" \
	"  - ((" SBQ_FLOOR_N(cte, margin, top) " + " margin ") % " SBQ_DIST_MAX_NODES_SQL ")" \
	"  + (SELECT l.groupid FROM pg_catalog.pg_dist_local_group l))" \
	" FROM " cte ", sbq." seq " s" \
	" WHERE " SBQ_FLOOR_N(cte, margin, top) " > s.last_value" \
	"    OR (" SBQ_FLOOR_N(cte, margin, top) " = s.last_value AND NOT s.is_called))"
static SbqStatement stmt_sequence_floor = {"raise the sequences past a shard group", 0,
	{InvalidOid},
	"WITH m AS (SELECT pg_catalog.max(x) AS n FROM ("
	"  SELECT pg_catalog.max(sequence_number) AS x FROM sbq.messages"
	"  UNION ALL SELECT pg_catalog.max(sequence_number) FROM sbq.dead_letters"
	"  UNION ALL SELECT pg_catalog.max(topic_sequence_number) FROM sbq.topic_scheduled"
	/* the marks other nodes left (see sbq_sequence_mark) */
	"  UNION ALL SELECT pg_catalog.max(c.sent) FROM sbq.queue_counters c"
	"   WHERE c.queue_id = " SBQ_MARK_ROW " AND (c.shard >> " SBQ_MARK_NODE_SHIFT ") <>"
	"         (SELECT l.groupid FROM pg_catalog.pg_dist_local_group l)) u),"
	" i AS (SELECT pg_catalog.max(x) AS n FROM ("
	"  SELECT pg_catalog.max(queue_id) AS x FROM sbq.queues"
	"  UNION ALL SELECT pg_catalog.max(topic_id) FROM sbq.topics) u),"
	" k AS (SELECT pg_catalog.max(session_key) AS n FROM sbq.sessions)"
	" SELECT " SBQ_FLOOR("message_seq", "m", "1048576", SBQ_SEQ_TOP_SQL) ", "
	SBQ_FLOOR("queue_id_seq", "i", "1024", SBQ_SEQ_TOP_INT_SQL) ", "
	SBQ_FLOOR("session_seq", "k", "1048576", SBQ_SEQ_TOP_SQL)
};

/* the groups whose numbers this backend has raised the sequences past */
#define SBQ_FLOORS_KEPT 64
static Oid	sbq_floors[SBQ_FLOORS_KEPT];
static int	sbq_nfloors = 0;

void
sbq_sequence_floor(Oid epoch)
{
	int			i;
	bool		stepped;

	for (i = 0; i < sbq_nfloors; i++)
		if (sbq_floors[i] == epoch)
			return;
	/* a read changes nothing (and may not: a read-only transaction, a standby) */
	if (XactReadOnly || RecoveryInProgress())
		return;
	/*
	 * One backend at a time on this node: a second one then sees the first
	 * one's raise and does not repeat it, which would give again the numbers
	 * drawn in between. A raise is a setval(), seen by every backend at once
	 * and kept whatever the transaction does, so the lock is given back
	 * straight after it: held to the end of the transaction, a transaction
	 * left open after its first call here (a receive in BEGIN, its work not
	 * done) would stop the first call of every other backend of this node.
	 * Only a change of the sequences' step, transactional, keeps it.
	 */
	sbq_dist_lock_sequences();
	stepped = sbq_dist_range_sequences();
	/* a snapshot older than the group's arrival would see it empty */
	(void) sbq_exec_latest(&stmt_sequence_floor, NULL, NULL);
	if (!stepped)
		sbq_dist_unlock_sequences();
	if (sbq_nfloors == SBQ_FLOORS_KEPT)
		sbq_nfloors = 0;		/* start over: looking again costs little */
	sbq_floors[sbq_nfloors++] = epoch;
}

/*
 * Sequence marks. The floor above raises a node's sequence past the numbers
 * a group holds when it arrives; a queue whose messages were all settled
 * (deleted) before its group moved holds none, and the node it lands on
 * would give it numbers lower than those it gave before. So every number a
 * node gives to the messages of an entity key is first covered by a mark
 * of that node for that key, stored with the messages, in the same
 * transaction: a row of sbq.queue_counters (SBQ_MARK_ROW) whose counter
 * "sent" holds a number at least as high. A mark reaches SBQ_MARK_AHEAD
 * past the number that made it (2^20 draws of the node's sequence, which
 * steps by SBQ_DIST_MAX_NODES), so a key takes one write per that many
 * draws, in a row of the backend's own (no wait behind another backend's
 * open transaction; a prepared one of an earlier backend of the same
 * number, as for the counters, is waited for). The marks move with their key's
 * rows; the floor of the node they arrive at raises its sequence past the
 * marks of every other node (its own cover numbers its sequence has given
 * already). A node that gets a group back later skips its own old marks:
 * what it gave then is below its sequence, and what the other nodes gave
 * meanwhile is under their marks.
 *
 * Only the distributed layout has them (its counters rows have entity_key):
 * on one server the sequence alone keeps the numbers rising.
 */
#define SBQ_MARK_AHEAD			((INT64CONST(1) << 20) * SBQ_DIST_MAX_NODES)

/* The highest mark this node left for key $1 (the shards of the node's range). */
static SbqStatement stmt_mark_read = {"read a sequence mark", 1, {INT4OID},
	"SELECT pg_catalog.max(c.sent) FROM sbq.queue_counters c,"
	"       (SELECT l.groupid << " SBQ_MARK_NODE_SHIFT " AS lo FROM pg_catalog.pg_dist_local_group l) g"
	" WHERE c.queue_id = " SBQ_MARK_ROW " AND c.shard >= g.lo"
	"   AND c.shard < g.lo + (1 << " SBQ_MARK_NODE_SHIFT ") AND c.entity_key = $1"
};

/* Raise to $3 the mark of key $1 in the row of this node and backend number $2. */
static SbqStatement stmt_mark_write = {"write a sequence mark", 3, {INT4OID, INT4OID, INT8OID},
	"INSERT INTO sbq.queue_counters AS qc (queue_id, shard, sent, entity_key)"
	" SELECT " SBQ_MARK_ROW ", (l.groupid << " SBQ_MARK_NODE_SHIFT ") | $2, $3, $1"
	"   FROM pg_catalog.pg_dist_local_group l"
	" ON CONFLICT (queue_id, shard, entity_key)"
	" DO UPDATE SET sent = GREATEST(qc.sent, excluded.sent)"
};

/*
 * The marks this backend knows of, by group (epoch) and key: committed, and
 * written or read by the current transaction (pending, valid while none of
 * its subtransactions rolls back; committed with it).
 */
typedef struct SbqMarkKey
{
	Oid			epoch;
	int32		key;
} SbqMarkKey;

typedef struct SbqMark
{
	SbqMarkKey	key;
	int64		mark;			/* committed */
	int64		pending;		/* this transaction's, 0 when none */
	LocalTransactionId pending_lxid;
} SbqMark;

#define SBQ_MARKS_KEPT 1024
static HTAB *sbq_marks = NULL;
static bool sbq_marks_callbacks = false;
/* the transaction that wrote a mark: what it reads may be its own */
static LocalTransactionId sbq_mark_wrote_lxid = InvalidLocalTransactionId;

/* Forget the pending marks of transaction lxid; commit: they are committed now. */
static void
sbq_marks_settle(LocalTransactionId lxid, bool commit)
{
	HASH_SEQ_STATUS hs;
	SbqMark    *e;

	if (sbq_marks == NULL)
		return;
	hash_seq_init(&hs, sbq_marks);
	while ((e = hash_seq_search(&hs)) != NULL)
	{
		if (e->pending_lxid != lxid)
			continue;
		if (commit)
			e->mark = Max(e->mark, e->pending);
		e->pending = 0;
		e->pending_lxid = InvalidLocalTransactionId;
	}
}

/* Only a transaction that wrote a mark has pending ones (MyProc's lxid is gone at its end). */
static void
sbq_marks_xact(XactEvent event, void *arg)
{
	if (sbq_mark_wrote_lxid == InvalidLocalTransactionId)
		return;
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			/* a prepared transaction's marks are read again once it has committed */
			sbq_marks_settle(sbq_mark_wrote_lxid,
							 event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT);
			sbq_mark_wrote_lxid = InvalidLocalTransactionId;
			break;
		default:
			break;
	}
}

static void
sbq_marks_subxact(SubXactEvent event, SubTransactionId mySubid,
				  SubTransactionId parentSubid, void *arg)
{
	/* what it wrote is gone, and perhaps what was read after it: all pending goes */
	if (event == SUBXACT_EVENT_ABORT_SUB && sbq_mark_wrote_lxid != InvalidLocalTransactionId)
		sbq_marks_settle(sbq_mark_wrote_lxid, false);
}

/* The entry of k, made when missing. */
static SbqMark *
sbq_mark_entry(const SbqMarkKey *k)
{
	SbqMark    *e;
	bool		found;

	if (!sbq_marks_callbacks)
	{
		RegisterXactCallback(sbq_marks_xact, NULL);
		RegisterSubXactCallback(sbq_marks_subxact, NULL);
		sbq_marks_callbacks = true;
	}
	if (sbq_marks == NULL || hash_get_num_entries(sbq_marks) >= SBQ_MARKS_KEPT)
	{
		HASHCTL		ctl;

		if (sbq_marks != NULL)
			hash_destroy(sbq_marks);
		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(SbqMarkKey);
		ctl.entrysize = sizeof(SbqMark);
		sbq_marks = hash_create("sbqueue sequence marks", 64, &ctl, HASH_ELEM | HASH_BLOBS);
	}
	e = hash_search(sbq_marks, k, HASH_ENTER, &found);
	if (!found)
	{
		e->mark = 0;
		e->pending = 0;
		e->pending_lxid = InvalidLocalTransactionId;
	}
	return e;
}

/*
 * The rows a backend may write its marks in: its number, then the same with
 * a try number above it (SBQ_MARK_TRY_SHIFT bits up, below the node's).
 * A row stays locked by a prepared transaction that wrote it until that
 * ends, and a backend that ended after preparing gives its number to the
 * next one that starts: so a write that would wait for a row tries the
 * next, each for a moment (SBQ_MARK_TRY_WAIT_MS), and only the last waits as
 * any write does (a lock held on the whole table, say by a move, is waited
 * for there; so is a lock_timeout of the caller's shorter than a try's).
 * Each try is a subtransaction with an id of its own: a transaction takes
 * at most SBQ_MARK_SUBXACTS of them for marks, and then writes as any write
 * does, so a transaction that marks many keys does not fill its backend's
 * cache of subtransaction ids (past 64 every snapshot of the node would
 * look further).
 */
#define SBQ_MARK_TRIES			8
#define SBQ_MARK_TRY_SHIFT		18
#define SBQ_MARK_TRY_WAIT_MS	10
#define SBQ_MARK_SUBXACTS		16

/* the subtransactions mark writes took in the transaction of sbq_mark_subxacts_lxid */
static LocalTransactionId sbq_mark_subxacts_lxid = InvalidLocalTransactionId;
static int	sbq_mark_subxacts = 0;

/*
 * The try whose row this backend's last mark write went into: the next
 * starts there, and a write past the subtransactions' limit (or with a short
 * lock_timeout of the caller's) goes there, not into a row it found held.
 */
static int	sbq_mark_try_ok = 0;

StaticAssertDecl(SBQ_MARK_TRIES <= (1 << (24 - SBQ_MARK_TRY_SHIFT)),
				 "the tries of a mark write fit below the node's bits");

/*
 * Write the mark: values[0] the key, values[2] the mark; values[1] is set to
 * the row's number. In a storage section.
 */
static void
sbq_mark_write(Datum *values)
{
	int			procno = SBQ_MY_PROC_NUMBER();
	volatile int try;

	Assert(procno < (1 << SBQ_MARK_TRY_SHIFT));
	if (sbq_mark_subxacts_lxid != SBQ_MY_LXID())
	{
		sbq_mark_subxacts_lxid = SBQ_MY_LXID();
		sbq_mark_subxacts = 0;
	}
	for (try = sbq_mark_try_ok; try < SBQ_MARK_TRIES - 1 && sbq_mark_subxacts < SBQ_MARK_SUBXACTS &&
		 (LockTimeout == 0 || LockTimeout > SBQ_MARK_TRY_WAIT_MS); try++)
	{
		MemoryContext cxt = CurrentMemoryContext;
		ResourceOwner owner = CurrentResourceOwner;
		volatile bool done = false;

		sbq_mark_subxacts++;

		values[1] = Int32GetDatum(procno | (try << SBQ_MARK_TRY_SHIFT));
		sbq_storage_subxact_begin();
		PG_TRY();
		{
			int			level = NewGUCNestLevel();

			(void) set_config_option("lock_timeout", CppAsString2(SBQ_MARK_TRY_WAIT_MS),
									 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
			(void) sbq_exec(&stmt_mark_write, values, NULL);
			AtEOXact_GUC(true, level);
			sbq_subxact_commit(cxt, owner);
			done = true;
		}
		PG_CATCH();
		{
			ErrorData  *edata = sbq_subxact_failed(cxt, owner);

			if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
				ReThrowError(edata);
			FreeErrorData(edata);
		}
		PG_END_TRY();
		if (done)
		{
			sbq_mark_try_ok = try;
			return;
		}
	}
	values[1] = Int32GetDatum(procno | (try << SBQ_MARK_TRY_SHIFT));
	(void) sbq_exec(&stmt_mark_write, values, NULL);
	sbq_mark_try_ok = try;
}

/*
 * sbq_sequence_mark
 *		The messages of "entity" (its key's) have been given numbers up to
 *		max_seq in this transaction: make sure a mark of this node covers
 *		them when it commits. Distributed only, in a storage section.
 */
void
sbq_sequence_mark(const char *entity, int64 max_seq)
{
	SbqMarkKey	k;
	SbqMark    *e;
	Datum		values[3];
	bool		isnull;
	int64		mark;
	LocalTransactionId lxid = SBQ_MY_LXID();

	if (!sbq_dist_active() || !sbq_dist_in_group() || max_seq <= 0)
		return;
	memset(&k, 0, sizeof(k));
	k.epoch = sbq_storage_epoch();
	k.key = sbq_entity_key(entity, strlen(entity));
	if (sbq_marks != NULL)
	{
		e = hash_search(sbq_marks, &k, HASH_FIND, NULL);
		if (e != NULL && (e->mark >= max_seq ||
						  (e->pending_lxid == lxid && e->pending >= max_seq)))
			return;
	}

	values[0] = Int32GetDatum(k.key);
	(void) sbq_exec(&stmt_mark_read, values, NULL);
	mark = DatumGetInt64(sbq_col(0, 1, &isnull));
	if (isnull || mark < max_seq)
	{
		/* (saturating: numbers that near the end of bigint run out there anyway) */
		mark = max_seq <= PG_INT64_MAX - SBQ_MARK_AHEAD ? max_seq + SBQ_MARK_AHEAD : PG_INT64_MAX;
		values[2] = Int64GetDatum(mark);
		sbq_mark_write(values);
		sbq_mark_wrote_lxid = lxid;
	}
	e = sbq_mark_entry(&k);
	/* once this transaction wrote a mark, what it reads may be its own */
	if (sbq_mark_wrote_lxid == lxid)
	{
		e->pending = Max(e->pending_lxid == lxid ? e->pending : 0, mark);
		e->pending_lxid = lxid;
	}
	else
		e->mark = Max(e->mark, mark);
}
