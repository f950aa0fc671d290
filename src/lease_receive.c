/*-------------------------------------------------------------------------
 *
 * lease_receive.c
 *	  The peek-lock receive that locks in shared memory (lease.c), also
 *	  under a session lock (session_mem.c).
 *
 * A leasing receive writes nothing for a plain delivery. In named phases:
 *	1. scan the head: read the first available messages of the queue from
 *	   its head hint on, or from its free hint past the messages held under
 *	   leases (qstate.c), locking nothing;
 *	2. claim rows: claim each message in the lease table, then check with a
 *	   snapshot taken now that the row version the scan read is still the
 *	   latest and that no other transaction has started to change it (the
 *	   claim-then-look half of the protocol in lease.c's header);
 *	3. decide each row's fate: hand it out, or first store the delivery
 *	   count of an expired lease or row lock, or dead-letter it (its last
 *	   allowed delivery expired, or its time to live passed), or drop it;
 *	4. write the fates, each only to the row version the scan read (a claim
 *	   whose row changed meanwhile is given back);
 *	5. hand out the rest with new leases, in sequence order;
 *	6. move the free hint past what the scan found held and what it took.
 * A transaction that has taken SBQ_MAX_CLEARED messages off its queues reads
 * on from after its last pass instead, past expired messages, and gives back
 * the claims it would not hand out, unwritten (hints unused). A receive stops
 * once half the lock of the first message it handed out has passed.
 * When this database's share of the lease table (or the table) is full, the
 * rest of the receive locks in the message rows (receive.c).
 *
 * Under a session lock the scan reads the session's messages instead, in
 * sequence order, passes over those the session lock already holds, and
 * stops at the first it cannot take (order comes first); its leases carry the
 * session's key and end with the session lock. A pass takes every expired
 * message it reads up to the ones it hands out, within the same
 * SBQ_MAX_CLEARED (past that it reads past them: none is ever handed out, so
 * order holds), and the receive stops once half of what was left of the
 * session lock at its start has passed. The statements that write
 * fates, and the sweep of expired leases, are in lease_sweep.c.
 *
 * Length: over 1,000 lines on purpose. The six phases of a pass, and the
 * session's way through them, read and write one receive's private state
 * (its passes, hints, claims and counts); split across files, each would
 * have to see that layout and the rules that keep it consistent.
 *
 * Owns: nothing shared (the lease table is lease.c's). Locks: row locks of
 * its statements; lease.c's partition locks through its calls.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/lease_receive.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/itemptr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "lease.h"
#include "session_mem.h"
#include "storage_core.h"
#include "wait.h"

/* How many times a receive rescans when others keep taking what it finds */
#define SBQ_MAX_BUSY_ROUNDS		64

/*
 * How long a free hint holds at most (qstate.c). A receive that starts there
 * does not move the head hint, which only a scan from the head can move; so
 * at least this often one starts at the head and moves it past the messages
 * settled meanwhile, which maintenance's looks from the head would otherwise
 * walk (and the receives, whenever the free hint lapses).
 */
#define SBQ_FREE_HINT_USECS		(100 * 1000)


/*
 * The head of the queue for a leasing receive: active messages that no lock
 * holds, in sequence order, skipping rows that another transaction is
 * changing or holds locked (as SKIP LOCKED would). Nothing is locked here;
 * the caller claims each in shared memory and then checks that the row
 * version it read is still the latest.
 * $1 queue, $2 subqueue, $3 now, $4 limit, $5 where the head is (qstate.c)
 */
#define LEASE_CANDIDATES(extra) \
	"SELECT " MSG_COLS("NULL::uuid", "NULL::timestamptz", "m.delivery_count") "," \
	"       m.ctid, m.locked_until IS NOT NULL, m.expires_at" \
	"  FROM " SUBQUEUE_TABLE " m" \
	" WHERE m.queue_id = $1 AND m.subqueue = $2 AND m.state = 0" \
	"   AND m.sequence_number >= $5" extra \
	"   AND sbq.lease_free(m.sequence_number, $3, m.xmax, m.locked_until)" \
	" ORDER BY m.queue_id, m.subqueue, m.state, m.sequence_number" \
	" LIMIT $4"
static SbqStatement stmt_lease_candidates = {"lease candidates", 5, {INT4OID, INT2OID,
		TIMESTAMPTZOID, INT4OID, INT8OID}, LEASE_CANDIDATES("")
};

/*
 * The same past the messages whose time to live has passed: what a
 * transaction reads once it took SBQ_MAX_CLEARED messages off its queues.
 */
static SbqStatement stmt_lease_candidates_live = {"lease candidates, live", 5, {INT4OID,
		INT2OID, TIMESTAMPTZOID, INT4OID, INT8OID},
	LEASE_CANDIDATES("   AND (m.expires_at IS NULL OR m.expires_at > $3)")
};

/*
 * The head of a session for a leasing receive under its lock: its active
 * messages in sequence order after $5, locked or not (a receive passes over
 * its own leases, and stops at anything else: order comes first). The
 * "locked" column is whether a lock is stored in the row.
 * $1 queue, $2 session key, $3 now (unused here), $4 limit, $5 after
 */
#define SESSION_OF_KEY "(SELECT s.session_id FROM sbq.sessions s WHERE s.session_key = $2)"
#define SESSION_CANDIDATES(extra) \
	"SELECT " MSG_COLS("NULL::uuid", "NULL::timestamptz", "m.delivery_count") "," \
	"       m.ctid, m.lock_token IS NOT NULL, m.expires_at" \
	"  FROM sbq.messages m" \
	" WHERE m.queue_id = $1 AND m.session_id = " SESSION_OF_KEY " AND m.state = 0" \
	"   AND m.sequence_number > $5 AND " extra \
	" ORDER BY m.queue_id, m.session_id, m.state, m.sequence_number" \
	" LIMIT $4"
static SbqStatement stmt_session_candidates = {"session lease candidates", 5, {INT4OID,
		INT8OID, TIMESTAMPTZOID, INT4OID, INT8OID},
	SESSION_CANDIDATES("$3 IS NOT NULL")
};

/* The same past the messages whose time to live has passed at $3. */
static SbqStatement stmt_session_candidates_live = {"session lease candidates, live", 5,
	{INT4OID, INT8OID, TIMESTAMPTZOID, INT4OID, INT8OID},
	SESSION_CANDIDATES("(m.expires_at IS NULL OR m.expires_at > $3)")
};

/*
 * The deferred messages $5 of a session ($1 queue, $2 session key), not
 * locked in rows, whose time to live has not passed at $3 (as without
 * sessions, one that has is not found).
 */
static SbqStatement stmt_session_deferred = {"session deferred lease candidates", 5,
	{INT4OID, INT8OID, TIMESTAMPTZOID, INT4OID, INT8ARRAYOID},
	"SELECT " MSG_COLS("NULL::uuid", "NULL::timestamptz", "m.delivery_count") ","
	"       m.ctid, false, m.expires_at"
	"  FROM sbq.messages m"
	" WHERE m.sequence_number = ANY($5) AND m.queue_id = $1"
	"   AND m.session_id = " SESSION_OF_KEY
	"   AND m.state = 1 AND m.lock_token IS NULL"
	"   AND (m.expires_at IS NULL OR m.expires_at > $3)"
	" ORDER BY m.sequence_number LIMIT $4",
	.by_key = true
};

/* the columns of a candidate after sbq_message's */
#define CANDIDATE_CTID		(SBQ_MESSAGE_NATTS + 1)
#define CANDIDATE_LOCKED	(SBQ_MESSAGE_NATTS + 2)
#define CANDIDATE_EXPIRES	(SBQ_MESSAGE_NATTS + 3)

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
	bool		off;			/* under a session lock: to take off, not hand out */
	SbqFate		fate;
} SbqClaimed;


static SbqReceiveResult sbq_receive_leased_in(const SbqQueue *queue, int16 subqueue,
											  SbqLeaseSession *session,
											  int max_messages, TimestampTz now,
											  Tuplestorestate *tupstore, TupleDesc tupdesc);

/* One receive's state across its passes. */
typedef struct SbqLeaseReceive
{
	const SbqQueue *queue;
	int16		subqueue;
	Oid			epoch;
	TimestampTz now;			/* when the current pass's locks start */
	TimestampTz until;			/* and end */
	char		description[128];	/* of a dead letter over the delivery limit */
	SbqReceiveResult result;
	SbqCounts	counts;
	SbqOutRow  *outs;			/* what it hands out, result.delivered of them */
	bool		rows_instead;	/* no room for leases: lock the rest in rows */
	int			busy_rounds;
	SbqLeaseSession *session;	/* under a session lock, or NULL */
	int64		after;			/* a session's scan goes on after this */
	int			window;			/* and reads this many */
	int			want;			/* how many this pass may claim */
	bool		stop;			/* a session's next message is not ours to take */
	bool		use_hint;		/* the pass's scan started at a hint (head) */
	bool		from_free;		/* at the free hint */
	bool		passing;		/* past SBQ_MAX_CLEARED: leave what is not for us */
	int64		pass_from;		/* and scan from here, hints unused */
	TimestampTz first_now;		/* when the first lease handed out started, */
	TimestampTz first_until;	/* and when it ends (0: none yet) */
	SbqHead		head;			/* the hints, as read before the scan */
} SbqLeaseReceive;

/* One pass: what its scan read and what it claimed of that. */
typedef struct SbqLeasePass
{
	SPITupleTable *fetched;
	uint64		nfetched;
	SbqClaimed *claims;
	int			nclaims;
	int64		scan_last;		/* what the scan passed (sbq_lease_scan) */
	int64		scan_open;
	TimestampTz scan_until;
} SbqLeasePass;

/* The sequence number of row i of what a pass's scan read. */
static int64
sbq_lease_fetched_seq(const SbqLeasePass *pass, uint64 i)
{
	bool		isnull;

	return DatumGetInt64(SPI_getbinval(pass->fetched->vals[i], pass->fetched->tupdesc, 1,
									   &isnull));
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

/*
 * sbq_check_claims
 *		Check with a snapshot taken now that each claimed row version is still
 *		the message's latest and that no other transaction has started to
 *		change it; a claim that fails is given back (c->row = -1). Under
 *		REPEATABLE READ or SERIALIZABLE a changed row is a serialization
 *		failure instead, as a row lock on it would be.
 */
static void
sbq_check_claims(SbqClaimed *claims, int nclaims, const SbqQueue *queue, int16 subqueue)
{
	Relation	rel = table_open(sbq_subqueue_table_oid(subqueue), AccessShareLock);
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
 * sbq_lease_scan_session
 *		Phase 1 under a session lock: the session's next messages after
 *		r->after (or the deferred ones asked for). Their locks end with the
 *		session lock's.
 */
static uint64
sbq_lease_scan_session(SbqLeaseReceive *r, int want, SbqLeasePass *pass)
{
	Datum		values[5];
	bool		deferred = r->session->seqs != NULL;

	/* a first look at a session that has nothing: no statement (session_probe.c) */
	if (!deferred && r->window == 0 &&
		sbq_session_surely_empty(r->queue->queue_id, r->session->key))
	{
		pass->nfetched = 0;
		pass->fetched = NULL;
		return 0;
	}
	values[0] = Int32GetDatum(r->queue->queue_id);
	values[1] = Int64GetDatum(r->session->key);
	values[2] = TimestampTzGetDatum(r->now);
	/* passing over its own leases: a wider window each time */
	r->window = r->window == 0 ? want : Min(r->window * 2, want + SBQ_SESSION_WINDOW);
	values[3] = Int32GetDatum(deferred ? r->session->nseqs : r->window);
	values[4] = deferred ? sbq_int8_array(r->session->seqs, r->session->nseqs) :
		Int64GetDatum(r->after);
	pass->nfetched = sbq_exec(deferred ? &stmt_session_deferred :
							  r->passing ? &stmt_session_candidates_live :
							  &stmt_session_candidates, values, NULL);
	pass->fetched = SPI_tuptable;
	r->now = GetCurrentTimestamp();
	r->until = r->session->locked_until;
	return pass->nfetched;
}

/*
 * sbq_lease_scan_head
 *		Phase 1: read up to want messages from the head of the queue into
 *		pass->fetched, locking nothing. Returns how many it read.
 *
 * The scan starts at the head hint (qstate.c), or further on at the free
 * hint while that holds: the hints and their bound are read before the
 * scan's snapshot is taken, and the head hint moves to the first row a scan
 * from it saw. A transaction snapshot may miss messages that committed since
 * it was taken: then the hints are only used, not moved.
 */
static uint64
sbq_lease_scan_head(SbqLeaseReceive *r, int want, SbqLeasePass *pass)
{
	Datum		values[5];
	int64		start = 0;

	if (r->session != NULL)
		return sbq_lease_scan_session(r, want, pass);
	values[0] = Int32GetDatum(r->queue->queue_id);
	values[1] = Int16GetDatum(r->subqueue);
	values[2] = TimestampTzGetDatum(r->now);
	values[3] = Int32GetDatum(want);
	r->use_hint = r->subqueue == SBQ_SUBQUEUE_MAIN && !r->passing &&
		sbq_qstate_head(r->epoch, r->queue->queue_id, &r->head);
	r->from_free = r->use_hint && r->head.free > r->head.hint &&
		r->head.free_until > r->now && !sbq_lease_freed_here();
	if (r->use_hint)
		start = r->from_free ? r->head.free : r->head.hint;
	if (r->passing)
		start = r->pass_from;
	values[4] = Int64GetDatum(start);
	sbq_lease_scan_start();
	pass->nfetched = sbq_exec_in(r->passing ? &stmt_lease_candidates_live : &stmt_lease_candidates,
								 r->subqueue, values, NULL);
	pass->fetched = SPI_tuptable;
	pass->nclaims = 0;
	sbq_lease_scan(&pass->scan_last, &pass->scan_open, &pass->scan_until);

	/*
	 * The locks granted below start now, not when the statement began: the
	 * scan saw changes that committed up to its snapshot, and a lock on a
	 * message another session abandoned meanwhile must not claim a start
	 * before that abandon (locked_until orders the deliveries of a message
	 * for whoever reads them).
	 */
	r->now = GetCurrentTimestamp();
	r->until = sbq_add_interval(r->now, &r->queue->lock_duration);
	if (r->use_hint && !r->from_free && !IsolationUsesXactSnapshot())
	{
		int64		first = sbq_lease_scan_first();

		sbq_qstate_advance(r->epoch, r->queue->queue_id,
						   first >= 0 && first < r->head.bound ? first : r->head.bound,
						   r->head.gen);
	}
	return pass->nfetched;
}

/*
 * sbq_lease_free_advance
 *		After a pass from a hint: move the free hint (qstate.c) past the rows
 *		its scan refused for a lease and those it took itself, up to the
 *		first row that may be receivable at any moment (refused for another
 *		reason, or read and not taken). It holds until the first of those
 *		leases, and of the ones the pass granted, expires; a lease that ends
 *		sooner lowers it (lease.c).
 */
static void
sbq_lease_free_advance(SbqLeaseReceive *r, SbqLeasePass *pass)
{
	int64		candidate;
	TimestampTz until = pass->scan_until;
	uint64		i;
	int			k = 0;

	if (!r->use_hint || pass->scan_last < 0 || IsolationUsesXactSnapshot())
		return;
	candidate = pass->scan_last + 1;
	if (pass->scan_open >= 0 && pass->scan_open < candidate)
		candidate = pass->scan_open;
	for (i = 0; i < pass->nfetched; i++)
	{
		int64		seq = sbq_lease_fetched_seq(pass, i);

		if (seq >= candidate)
			break;
		while (k < pass->nclaims && pass->claims[k].seq < seq)
			k++;
		if (k >= pass->nclaims || pass->claims[k].seq != seq || pass->claims[k].row < 0 ||
			pass->claims[k].fate == SBQ_FATE_GONE)
		{
			candidate = seq;
			break;
		}
	}
	if (r->from_free && r->head.free_until < until)
		until = r->head.free_until;
	/*
	 * Never longer than a lock: those this pass granted (the rows it took
	 * end at r->until, or leave the queue), and rows passed for other
	 * reasons. Nor than a while after the last scan from the head.
	 */
	if (r->until < until)
		until = r->until;
	if (!r->from_free && r->now + SBQ_FREE_HINT_USECS < until)
		until = r->now + SBQ_FREE_HINT_USECS;
	sbq_qstate_free_advance(r->epoch, r->queue->queue_id, &r->head, candidate, until,
							r->now);
}

/* No room for a lease under a session lock: it has no row-stored fallback. */
static void
sbq_lease_full_error(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_OUT_OF_MEMORY),
			 errmsg("out of shared memory for sbqueue locks"),
			 errdetail("The locks of a session's messages live in shared memory, and this database's share of it, or all of it, is full."),
			 errhint("Settle or release what is locked, or raise \"sbqueue.max_locks\" or \"sbqueue.max_locks_per_database\".")));
}

/* The first of the deferred messages asked for that the scan did not read. */
static int64
sbq_lease_first_unread(const SbqLeaseSession *session, SbqLeasePass *pass)
{
	int			i;
	uint64		j;

	for (i = 0; i < session->nseqs; i++)
	{
		bool		found = false;

		for (j = 0; j < pass->nfetched && !found; j++)
			found = sbq_lease_fetched_seq(pass, j) == session->seqs[i];
		if (!found)
			return session->seqs[i];
	}
	return session->seqs[0];
}

/*
 * sbq_lease_keep_order
 *		Under a session lock: a claim whose row changed since the scan stops
 *		the receive there, and the claims after it are given back (a message
 *		is never handed out before one of its session that comes first),
 *		unless the message's time to live had passed (it is never handed out:
 *		maintenance taking it off meanwhile passes it). The deferred messages
 *		asked for are all taken or none.
 */
static void
sbq_lease_keep_order(SbqLeaseReceive *r, SbqLeasePass *pass)
{
	int			k;
	int			first = -1;

	/* an expired message changed meanwhile (another took it off) is passed */
	for (k = 0; k < pass->nclaims && first < 0; k++)
		if (pass->claims[k].row < 0 && !pass->claims[k].off)
		{
			first = k;
			r->session->missing = pass->claims[k].seq;
		}
	if (r->session->seqs != NULL && (r->stop || pass->nfetched != (uint64) r->session->nseqs))
	{
		first = 0;
		if (pass->nfetched != (uint64) r->session->nseqs)
			r->session->missing = sbq_lease_first_unread(r->session, pass);
	}
	if (first < 0)
		return;
	r->stop = true;
	for (k = first; k < pass->nclaims; k++)
		if (pass->claims[k].row >= 0)
		{
			sbq_lease_unclaim(pass->claims[k].seq);
			pass->claims[k].row = -1;
		}
}

/* What a session's receive does with a row its scan read. */
typedef enum SbqRowStep
{
	SBQ_ROW_TAKE,				/* claim it (before), keep the claim (after) */
	SBQ_ROW_PASS,				/* read past it */
	SBQ_ROW_STOP				/* stop claiming: order comes first */
} SbqRowStep;

/*
 * sbq_lease_session_row
 *		Under a session lock, before the claim of row tup: read on after it,
 *		and set *expired when its time to live has passed. Such a message is
 *		read past once nexpired more would reach SBQ_MAX_CLEARED in the
 *		transaction, or the lock table would be three quarters full with the
 *		entries of the nlive it has and those it still wants (left for
 *		maintenance). A lock stored in the row is not this session
 *		lock's: the receive stops there.
 */
static SbqRowStep
sbq_lease_session_row(SbqLeaseReceive *r, HeapTuple tup, TupleDesc td, int64 seq,
					  int nlive, int nexpired, bool *expired)
{
	bool		isnull;
	Datum		exp = SPI_getbinval(tup, td, CANDIDATE_EXPIRES, &isnull);

	r->after = seq;
	*expired = r->session->seqs == NULL && !isnull && DatumGetTimestampTz(exp) <= r->now;
	if (*expired && (r->passing || sbq_cleared_in_xact() + nexpired >= SBQ_MAX_CLEARED ||
					 !sbq_lease_room_to_clear(r->want - nlive)))
	{
		r->passing = true;
		return SBQ_ROW_PASS;
	}
	if (DatumGetBool(SPI_getbinval(tup, td, CANDIDATE_LOCKED, &isnull)))
	{
		r->stop = true;
		return SBQ_ROW_STOP;
	}
	return SBQ_ROW_TAKE;
}

/*
 * sbq_lease_session_over
 *		Under a session lock, after the claim c of row tup: a message whose
 *		expired lease was its last allowed delivery is taken off as the
 *		expired are (*expired set), within the same SBQ_MAX_CLEARED (past
 *		that it is given back and read past); a deferred message asked for
 *		in that state is not found, as without sessions.
 */
static SbqRowStep
sbq_lease_session_over(SbqLeaseReceive *r, HeapTuple tup, TupleDesc td, SbqClaimed *c,
					   int64 seq, int nexpired, bool *expired)
{
	bool		isnull;

	if (c->prev_lease == 0 ||
		Max(DatumGetInt32(SPI_getbinval(tup, td, 5, &isnull)), c->prev_lease) <
		r->queue->max_delivery_count)
		return SBQ_ROW_TAKE;
	if (r->session->seqs != NULL)
	{
		sbq_lease_unclaim(seq);
		r->stop = true;
		r->session->missing = seq;
		return SBQ_ROW_STOP;
	}
	if (!*expired && sbq_cleared_in_xact() + nexpired >= SBQ_MAX_CLEARED)
	{
		sbq_lease_unclaim(seq);
		return SBQ_ROW_PASS;
	}
	*expired = true;
	return SBQ_ROW_TAKE;
}

/*
 * sbq_lease_session_full
 *		Under a session lock, no room for the lease of seq, a message to hand
 *		out: give back the claims of this pass's messages to take off (not
 *		written yet; read past, left for maintenance) and claim it again.
 *		Still no room: the receive returns what it has, and fails only when it
 *		has nothing (or was asked for deferred messages, all or none).
 */
static SbqClaimResult
sbq_lease_session_full(SbqLeaseReceive *r, SbqLeasePass *pass, int64 seq, int nlive,
					   int *nexpired)
{
	SbqClaimResult cr = SBQ_CLAIM_FULL;
	int			kept = 0;
	int			k;

	if (*nexpired > 0)
	{
		for (k = 0; k < pass->nclaims; k++)
		{
			if (pass->claims[k].off)
				sbq_lease_unclaim(pass->claims[k].seq);
			else
				pass->claims[kept++] = pass->claims[k];
		}
		pass->nclaims = kept;
		*nexpired = 0;
		r->passing = true;
		cr = sbq_lease_claim(seq, r->queue->queue_id, r->subqueue, r->now,
							 &pass->claims[kept].prev_lease);
	}
	if (cr != SBQ_CLAIM_FULL)
		return cr;
	if (r->session->seqs != NULL || (nlive == 0 && r->result.delivered == 0))
		sbq_lease_full_error();
	r->stop = true;
	return cr;
}

/*
 * sbq_lease_claim_rows
 *		Phase 2: claim each message the scan read, then check each claim
 *		against the latest row version (sbq_check_claims). A message that
 *		another receiver holds is skipped; when the lease table has no room,
 *		r->rows_instead is set and claiming stops. Returns how many it
 *		claimed (some of which the check may have given back).
 */
static int
sbq_lease_claim_rows(SbqLeaseReceive *r, SbqLeasePass *pass)
{
	uint64		i;
	int			nlive = 0;
	int			nexpired = 0;

	pass->claims = palloc(sizeof(SbqClaimed) * pass->nfetched);
	pass->nclaims = 0;
	for (i = 0; i < pass->nfetched; i++)
	{
		HeapTuple	tup = pass->fetched->vals[i];
		TupleDesc	td = pass->fetched->tupdesc;
		bool		isnull;
		int64		seq = DatumGetInt64(SPI_getbinval(tup, td, 1, &isnull));
		SbqClaimed *c = &pass->claims[pass->nclaims];
		SbqClaimResult cr;
		bool		expired = false;
		SbqRowStep	step = SBQ_ROW_TAKE;

		/* a session's expired messages do not count against what it wants */
		if (r->session != NULL && nlive >= r->want)
			break;
		if (r->session != NULL)
			step = sbq_lease_session_row(r, tup, td, seq, nlive, nexpired, &expired);
		if (step == SBQ_ROW_PASS)
			continue;
		if (step == SBQ_ROW_STOP)
			break;
		cr = sbq_lease_claim(seq, r->queue->queue_id, r->subqueue, r->now, &c->prev_lease);
		if (cr == SBQ_CLAIM_FULL && expired)
		{
			r->passing = true;
			continue;
		}
		if (cr == SBQ_CLAIM_FULL && r->session != NULL)
		{
			cr = sbq_lease_session_full(r, pass, seq, nlive, &nexpired);
			c = &pass->claims[pass->nclaims];
			if (cr == SBQ_CLAIM_FULL)
				break;
		}
		if (cr == SBQ_CLAIM_FULL)
		{
			r->rows_instead = true;
			break;
		}
		/* an expired message another is taking off: never handed out, passed */
		if (cr == SBQ_CLAIM_BUSY && expired)
			continue;
		if (cr == SBQ_CLAIM_BUSY && r->session != NULL &&
			(r->session->seqs != NULL || !sbq_lease_in_session(seq, r->session->key, r->now)))
		{
			/* another's, or being settled: the session waits for it */
			r->stop = true;
			r->session->missing = seq;
			break;
		}
		if (cr == SBQ_CLAIM_BUSY)
			continue;
		if (r->session != NULL)
			step = sbq_lease_session_over(r, tup, td, c, seq, nexpired, &expired);
		if (step == SBQ_ROW_PASS)
			continue;
		if (step == SBQ_ROW_STOP)
			break;
		if (expired)
			nexpired++;
		else
			nlive++;
		c->seq = seq;
		ItemPointerCopy((ItemPointer) DatumGetPointer(SPI_getbinval(tup, td, CANDIDATE_CTID,
																	&isnull)), &c->ctid);
		c->row = (int) i;
		c->off = expired;
		c->fate = SBQ_FATE_GONE;
		pass->nclaims++;
	}
	if (pass->nclaims == 0)
		return 0;

	/*
	 * Is the row version the scan read still the latest? A settlement that
	 * committed after the scan's snapshot released its lease before our
	 * claim, so a check with a snapshot taken now sees it.
	 */
	sbq_check_claims(pass->claims, pass->nclaims, r->queue, r->subqueue);
	if (r->session != NULL)
		sbq_lease_keep_order(r, pass);
	return pass->nclaims;
}

/*
 * sbq_lease_decide_fates
 *		Phase 3: what becomes of each claimed message, from the row the scan
 *		read and the expired lease the claim took over (if any). A message
 *		that is not handed out gets a marker in place of its lease.
 */
static void
sbq_lease_decide_fates(SbqLeaseReceive *r, SbqLeasePass *pass)
{
	TupleDesc	td = pass->fetched->tupdesc;
	bool		main = r->subqueue == SBQ_SUBQUEUE_MAIN;
	int			k;

	for (k = 0; k < pass->nclaims; k++)
	{
		SbqClaimed *c = &pass->claims[k];
		HeapTuple	tup;
		bool		isnull;
		int32		row_count;
		bool		row_locked;
		Datum		exp;
		int32		prev;
		bool		had;

		if (c->row < 0)
			continue;
		tup = pass->fetched->vals[c->row];
		row_count = DatumGetInt32(SPI_getbinval(tup, td, 5, &isnull));
		row_locked = DatumGetBool(SPI_getbinval(tup, td, CANDIDATE_LOCKED, &isnull));
		exp = SPI_getbinval(tup, td, CANDIDATE_EXPIRES, &isnull);
		prev = Max(row_count, c->prev_lease);
		had = row_locked || c->prev_lease > 0;

		if (r->session != NULL && r->session->seqs != NULL)
			c->fate = had ? SBQ_FATE_STORE : SBQ_FATE_HAND;
		else if (main && had && prev >= r->queue->max_delivery_count)
			c->fate = SBQ_FATE_OVER;
		else if (main && !isnull && DatumGetTimestampTz(exp) <= r->now)
			c->fate = r->queue->dlq_on_expiration ? SBQ_FATE_EXPIRED : SBQ_FATE_DROP;
		else
			c->fate = had ? SBQ_FATE_STORE : SBQ_FATE_HAND;
		c->count = c->fate == SBQ_FATE_STORE || c->fate == SBQ_FATE_HAND ? prev + 1 : prev;
		if (c->fate == SBQ_FATE_STORE || c->fate == SBQ_FATE_HAND)
			continue;
		if (r->passing && r->session == NULL)
		{
			/* left as it was (an expired lease too) for whoever comes next */
			sbq_lease_unclaim(c->seq);
			c->fate = SBQ_FATE_GONE;
		}
		else
			sbq_lease_make_marker(c->seq);
	}
}

/* Arrays of the claims of one fate, as the lease statements take them. */
typedef struct SbqFateRows
{
	int64	   *seqs;
	int32	   *counts;
	ItemPointerData *tids;
	bool	   *done;
	int			n;
} SbqFateRows;

/*
 * sbq_write_fate
 *		Write what one fate needs to the rows of its claims (only to the row
 *		versions the scan read); a claim whose row was not written is given
 *		back. Returns how many rows were written; sets *wrote if any was to
 *		be.
 */
static int
sbq_write_fate(SbqLeaseReceive *r, SbqLeasePass *pass, SbqFate fate, SbqFateRows *f,
			   bool *wrote)
{
	const SbqQueue *queue = r->queue;
	Datum		extra[1];
	int			written = 0;
	int			k;

	f->n = 0;
	for (k = 0; k < pass->nclaims; k++)
	{
		SbqClaimed *c = &pass->claims[k];

		if (c->fate != fate)
			continue;
		f->seqs[f->n] = c->seq;
		f->tids[f->n] = c->ctid;
		/* a message handed out after the store: the count before this delivery */
		f->counts[f->n++] = fate == SBQ_FATE_STORE ? c->count - 1 : c->count;
	}
	if (f->n == 0)
		return 0;
	*wrote = true;

	extra[0] = Int32GetDatum(queue->queue_id);
	if (fate == SBQ_FATE_OVER)
		written = sbq_lease_deadletter_rows(queue, f->seqs, f->counts, f->tids, f->n,
											SBQ_DLQ_REASON_MAX_DELIVERY, r->description,
											f->done);
	else if (fate == SBQ_FATE_EXPIRED)
		written = sbq_lease_deadletter_rows(queue, f->seqs, f->counts, f->tids, f->n,
											SBQ_DLQ_REASON_EXPIRED,
											SBQ_DLQ_DESCRIPTION_EXPIRED, f->done);
	else if (fate == SBQ_FATE_DROP)
		written = sbq_lease_rows(&sbq_stmt_lease_drop, SBQ_SUBQUEUE_MAIN, f->seqs, f->counts, f->tids, f->n,
								 extra, 1, f->done);
	else if (fate == SBQ_FATE_STORE)
		written = sbq_lease_rows(&sbq_stmt_lease_store, r->subqueue, f->seqs, f->counts, f->tids, f->n,
								 extra, 1, f->done);
	else
		elog(ERROR, "leasing receive: nothing to write for fate %d", (int) fate);
	sbq_give_back(pass->claims, pass->nclaims, fate, f->n, f->done);
	return written;
}

/*
 * sbq_lease_write_fates
 *		Phase 4: dead letters, dropped messages, delivery counts. Returns
 *		whether it wrote anything (it may have waited for row locks then).
 */
static bool
sbq_lease_write_fates(SbqLeaseReceive *r, SbqLeasePass *pass)
{
	SbqFateRows f;
	bool		wrote = false;
	int			k;
	int			over;
	int			expired;
	int			dropped;

	f.seqs = palloc(sizeof(int64) * pass->nclaims);
	f.counts = palloc(sizeof(int32) * pass->nclaims);
	f.tids = palloc(sizeof(ItemPointerData) * pass->nclaims);
	f.done = palloc(sizeof(bool) * pass->nclaims);

	over = sbq_write_fate(r, pass, SBQ_FATE_OVER, &f, &wrote);
	expired = sbq_write_fate(r, pass, SBQ_FATE_EXPIRED, &f, &wrote);
	dropped = sbq_write_fate(r, pass, SBQ_FATE_DROP, &f, &wrote);
	(void) sbq_write_fate(r, pass, SBQ_FATE_STORE, &f, &wrote);
	r->result.dead_lettered += over;
	r->result.expired_dead_lettered += expired;
	r->result.expired_dropped += dropped;
	sbq_cleared_add(over + expired + dropped);

	/* an expired lease taken over: its delivery is over, count it now */
	for (k = 0; k < pass->nclaims; k++)
		if (pass->claims[k].fate != SBQ_FATE_GONE && pass->claims[k].prev_lease > 0)
			r->counts.received++;
	return wrote;
}

/*
 * sbq_lease_hand_out
 *		Phase 5: grant a lease on each message to hand out and form its row
 *		(with the lease's token, expiry and delivery count) into r->outs.
 */
static void
sbq_lease_hand_out(SbqLeaseReceive *r, SbqLeasePass *pass, TupleDesc tupdesc)
{
	int			k;

	for (k = 0; k < pass->nclaims; k++)
	{
		SbqClaimed *c = &pass->claims[k];
		Datum		out[SBQ_MESSAGE_NATTS];
		bool		nulls[SBQ_MESSAGE_NATTS];
		pg_uuid_t  *token;

		if (c->fate != SBQ_FATE_HAND && c->fate != SBQ_FATE_STORE)
			continue;
		(void) sbq_message_row(pass->fetched, c->row, out, nulls);
		token = palloc(sizeof(pg_uuid_t));
		sbq_make_lock_token(c->seq, token);
		sbq_lease_grant(c->seq, token, r->until, c->count,
						r->session != NULL ? r->session->key : 0);
		out[2] = UUIDPGetDatum(token);
		nulls[2] = false;
		out[3] = TimestampTzGetDatum(r->until);
		nulls[3] = false;
		out[4] = Int32GetDatum(c->count);
		nulls[4] = false;
		if (r->session != NULL)
		{
			r->session->lo = r->session->lo == 0 ? c->seq : Min(r->session->lo, c->seq);
			r->session->hi = Max(r->session->hi, c->seq);
		}
		if (r->first_until == 0)
		{
			r->first_now = r->now;
			r->first_until = r->until;
		}
		r->outs[r->result.delivered].seq = c->seq;
		r->outs[r->result.delivered++].tuple = heap_form_tuple(tupdesc, out, nulls);
	}
}

/*
 * sbq_lease_rows_instead
 *		This database's share of the lease table, or the table, is full: lock
 *		the rest in the message rows, as with sbqueue.memory_locks off.
 */
static void
sbq_lease_rows_instead(SbqLeaseReceive *r, int max_messages, TupleDesc tupdesc)
{
	SbqReceiveResult rr = {0};

	sbq_receive_rows(r->queue, r->subqueue, max_messages - r->result.delivered,
					 SBQ_PEEK_LOCK, GetCurrentTimestamp(), &rr, NULL, tupdesc,
					 r->outs + r->result.delivered);
	r->result.delivered += rr.delivered;
	r->result.dead_lettered += rr.dead_lettered;
	r->result.expired_dead_lettered += rr.expired_dead_lettered;
	r->result.expired_dropped += rr.expired_dropped;
	r->counts.received += rr.delivered;
}

/*
 * sbq_receive_leased
 *		A peek-lock receive that locks in shared memory (see this file's
 *		header for its phases). Only messages whose earlier delivery has to
 *		be recorded (an expired lease or row lock), or that expire or reach
 *		their delivery limit, cause a write; a plain receive writes nothing.
 *
 * Under REPEATABLE READ or SERIALIZABLE a claimed message that changed after
 * the transaction's snapshot is a serialization failure, as a row lock on it
 * would be.
 */
SbqReceiveResult
sbq_receive_leased(const SbqQueue *queue, int16 subqueue, int max_messages,
				   TimestampTz now, Tuplestorestate *tupstore, TupleDesc tupdesc)
{
	return sbq_receive_leased_in(queue, subqueue, NULL, max_messages, now, tupstore, tupdesc);
}

/*
 * sbq_receive_leased_session
 *		The messages of a session, under its lock (held by the caller, who
 *		keeps it from ending meanwhile): the next max_messages in sequence
 *		order, or the deferred session->seqs (all or none), with leases that
 *		end with the session lock.
 */
SbqReceiveResult
sbq_receive_leased_session(const SbqQueue *queue, SbqLeaseSession *session,
						   int max_messages, Tuplestorestate *tupstore, TupleDesc tupdesc)
{
	return sbq_receive_leased_in(queue, SBQ_SUBQUEUE_MAIN, session, max_messages,
								 GetCurrentTimestamp(), tupstore, tupdesc);
}

/* What a receive has handed out or taken off the queue so far. */
static int64
sbq_lease_done(const SbqLeaseReceive *r)
{
	return (int64) r->result.delivered + r->result.dead_lettered +
		r->result.expired_dead_lettered + r->result.expired_dropped;
}

/* The pass itself (sbq_lease_pass); false when the receive is over. */
static bool
sbq_lease_pass_in(SbqLeaseReceive *r, int max_messages, TupleDesc tupdesc, SbqLeasePass *pass)
{
	int			want = max_messages - r->result.delivered;
	int			delivered_before = r->result.delivered;
	int64		done_before = sbq_lease_done(r);
	uint64		n;

	/*
	 * What it handed out first must not be at the end of its lock when it
	 * returns; under a session lock (whose end every lease shares), half of
	 * what was left of it at the start. Deferred messages: all or none.
	 */
	if ((r->session == NULL || r->session->seqs == NULL) &&
		sbq_lock_half_gone(r->first_now, r->first_until, GetCurrentTimestamp()))
		return false;
	r->want = want;
	n = sbq_lease_scan_head(r, want, pass);
	if (n == 0)
	{
		if (r->session == NULL)
			sbq_lease_free_advance(r, pass);
		return false;
	}
	/* past SBQ_MAX_CLEARED the next pass reads on after this one's rows */
	if (r->passing)
		r->pass_from = sbq_lease_fetched_seq(pass, n - 1) + 1;
	if (sbq_lease_claim_rows(r, pass) == 0)
	{
		/* a session's own leases passed over: read on (r->after moved) */
		if (r->session != NULL)
			return r->session->seqs == NULL && !r->stop && n >= (uint64) r->window;
		/* other receivers took them between our scan and our claims */
		if (r->passing)
			return !r->rows_instead && n >= (uint64) want;
		return !r->rows_instead && ++r->busy_rounds <= SBQ_MAX_BUSY_ROUNDS;
	}
	sbq_lease_decide_fates(r, pass);

	/* the writes may have waited for row locks: no lock is handed out expired */
	if (sbq_lease_write_fates(r, pass))
	{
		r->now = GetCurrentTimestamp();
		r->until = r->session != NULL ? r->session->locked_until :
			sbq_add_interval(r->now, &r->queue->lock_duration);
	}
	sbq_lease_hand_out(r, pass, tupdesc);

	if (r->session != NULL)
		return !r->stop && r->session->seqs == NULL &&
			(n >= (uint64) r->window || pass->nclaims >= want);
	sbq_lease_free_advance(r, pass);
	/* the scan came back short: the head has nothing more */
	if (n < (uint64) want || r->rows_instead)
		return false;
	/* each pass reads on from the last: it ends at the end of the queue */
	if (r->passing)
		return true;
	/*
	 * Others keep taking or changing what we find: give up after a while. A
	 * pass that handed out messages made way; so did one that dropped or
	 * dead-lettered them (the free hint carries the next pass past them), up
	 * to SBQ_MAX_CLEARED of those: then the receive reads on past such
	 * messages, from after this pass's rows.
	 */
	if (r->result.delivered > delivered_before)
		return true;
	if (sbq_lease_done(r) > done_before && sbq_cleared_in_xact() < SBQ_MAX_CLEARED)
		return true;
	if (sbq_lease_done(r) > done_before && r->subqueue == SBQ_SUBQUEUE_MAIN)
	{
		r->passing = true;
		r->pass_from = sbq_lease_fetched_seq(pass, n - 1) + 1;
		return true;
	}
	return ++r->busy_rounds <= SBQ_MAX_BUSY_ROUNDS;
}

/*
 * One pass of a leasing receive; false when it is over. What its scan read
 * goes when it ends (a receive behind 10,000 messages it only takes off the
 * queue makes as many passes: a result of each kept until the call returned
 * held about 8 kB each).
 */
static bool
sbq_lease_pass(SbqLeaseReceive *r, int max_messages, TupleDesc tupdesc)
{
	SbqLeasePass pass = {0};
	bool		more = sbq_lease_pass_in(r, max_messages, tupdesc, &pass);

	if (pass.fetched != NULL)
		SPI_freetuptable(pass.fetched);
	return more;
}

static SbqReceiveResult
sbq_receive_leased_in(const SbqQueue *queue, int16 subqueue, SbqLeaseSession *session,
					  int max_messages, TimestampTz now, Tuplestorestate *tupstore,
					  TupleDesc tupdesc)
{
	SbqLeaseReceive r = {0};
	int			o;

	sbq_check_message_desc(tupdesc);
	r.queue = queue;
	r.subqueue = subqueue;
	r.session = session;
	r.epoch = sbq_storage_epoch();
	r.now = now;
	r.until = session != NULL ? session->locked_until :
		sbq_add_interval(now, &queue->lock_duration);
	r.outs = palloc(sizeof(SbqOutRow) * max_messages);
	sbq_max_delivery_description(queue, r.description, sizeof(r.description));
	/* this transaction took enough off already: read past the rest from the start */
	r.passing = subqueue == SBQ_SUBQUEUE_MAIN && sbq_cleared_in_xact() >= SBQ_MAX_CLEARED;
	if (session != NULL)
	{
		r.first_now = now;
		r.first_until = session->locked_until;
	}
	r.pass_from = PG_INT64_MIN;

	while (r.result.delivered < max_messages && sbq_lease_pass(&r, max_messages, tupdesc))
		CHECK_FOR_INTERRUPTS();
	if (r.rows_instead && r.result.delivered < max_messages)
		sbq_lease_rows_instead(&r, max_messages, tupdesc);

	/*
	 * A later pass can find a message before those of an earlier one (one
	 * abandoned meanwhile): hand them out in sequence order.
	 */
	qsort(r.outs, r.result.delivered, sizeof(SbqOutRow), sbq_cmp_out_row);
	for (o = 0; o < r.result.delivered; o++)
		tuplestore_puttuple(tupstore, r.outs[o].tuple);

	r.counts.dead_lettered = r.result.dead_lettered + r.result.expired_dead_lettered;
	r.counts.expired = r.result.expired_dead_lettered + r.result.expired_dropped;
	if (r.counts.received + r.counts.dead_lettered + r.counts.expired > 0)
		sbq_add_counts(queue->queue_id, &r.counts);
	if (r.counts.dead_lettered > 0)
		sbq_wait_wake_at_commit(queue->queue_id);
	return r.result;
}
