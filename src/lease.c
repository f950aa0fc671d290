/*-------------------------------------------------------------------------
 *
 * lease.c
 *	  Message locks in shared memory ("leases").
 *
 * A peek-lock receive needs to lock a message, not to store anything: a lock
 * that is lost behaves as if it had expired, and API.md allows a crash to lose
 * locks (and the count of the deliveries whose locks it lost). So with
 * sbqueue preloaded a receive keeps its locks here, in a shared hash table
 * keyed by (database, sequence number), and writes nothing to the message
 * table: the receive's transaction gets no transaction id, writes no WAL and
 * commits without a WAL flush, and the message row gets no new version. What
 * must survive a crash is still written with the settling transaction: a
 * complete deletes the row, an abandon or defer stores the delivery count,
 * and a lease that expires has its delivery count stored by whoever takes
 * the message next (a receive, or maintenance) before the message is handed
 * out again. That keeps "at most one lost delivery count per message per
 * crash".
 *
 * A lease is in one of three states:
 *	- CLAIMED: taken by a receive whose transaction is still open (owner);
 *	  at its commit it becomes HELD, at its abort it is gone (or the expired
 *	  lease it took over is back).
 *	- HELD: a committed lock, valid until locked_until, settled by anyone
 *	  who has the token.
 *	- SETTLING: the owner's open transaction settles or moves the message
 *	  (complete, abandon, a durable receive, maintenance); at its commit the
 *	  lease is gone, at its abort it is back as it was. A SETTLING entry
 *	  without a token is a bare "marker": a path that moves messages through
 *	  the table (receive-and-delete, maintenance, resubmit) holds one for each
 *	  message it moves, so a leasing receive never hands out a message that
 *	  such a transaction is about to change.
 * Whoever changes an entry holds it exclusively until its transaction ends,
 * so these states are the whole protocol between receivers and settlers; the
 * row lock of the message (taken by the DELETE or UPDATE of a settlement)
 * orders two settlers of the same token.
 *
 * An entry that the current transaction is settling is invisible to that
 * transaction itself: its own changes to the message row are visible to it,
 * so the row says everything (an abandoned message can be received again in
 * the same transaction, a deferred one counts as deferred).
 *
 * Every change a transaction makes here is recorded in a backend-local undo
 * log, with the entry as it was; transaction and subtransaction callbacks
 * apply or undo them. PREPARE TRANSACTION is refused for a transaction with
 * such changes: a prepared transaction would leave entries that no process
 * owns.
 *
 * Locking: SBQ_LEASE_PARTITIONS LWLocks of the tranche "sbqueue leases"
 * partition the table by hash code, as the lock manager does. One is held at
 * a time, except by the scans (expired leases, counts), which take all of
 * them in order. Nothing that can fail or sleep runs while one is held, and
 * no entry is ever added by the commit and abort callbacks (they only update
 * and remove), so they cannot fail.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/lease.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "lease.h"

PG_FUNCTION_INFO_V1(sbq_lease_free_sql);
PG_FUNCTION_INFO_V1(sbq_lease_slot_sql);
PG_FUNCTION_INFO_V1(sbq_lease_until_sql);
PG_FUNCTION_INFO_V1(sbq_lease_count_sql);
PG_FUNCTION_INFO_V1(sbq_lease_pending_sql);

#define SBQ_LEASE_PARTITIONS	16
#define SBQ_LEASE_TRANCHE		"sbqueue leases"

#define SBQ_LEASE_CLAIMED		1
#define SBQ_LEASE_HELD			2
#define SBQ_LEASE_SETTLING		3

bool		sbq_memory_locks = true;
int			sbq_max_locks = 65536;

typedef struct SbqLeaseKey
{
	Oid			dbid;
	int32		pad;			/* always 0: the key is hashed as bytes */
	int64		seq;
} SbqLeaseKey;

typedef struct SbqLease
{
	SbqLeaseKey key;
	int32		queue_id;
	int16		subqueue;
	int8		state;			/* SBQ_LEASE_* */
	bool		has_token;		/* false: a bare marker */
	int32		owner;			/* proc number owning a CLAIMED or SETTLING entry */
	int32		delivery_count; /* the delivery this lease is for */
	TimestampTz locked_until;
	pg_uuid_t	token;
} SbqLease;

/* One change of this transaction, with what the entry was before it. */
typedef struct SbqLeaseUndo
{
	int64		seq;
	int			level;			/* transaction nest level of the change */
	bool		existed;		/* false: the change created the entry */
	bool		renew;			/* a renew of a lease nobody owns */
	TimestampTz renewed_until;	/* for a renew: what it set */
	SbqLease	prev;
} SbqLeaseUndo;

static HTAB *sbq_lease_hash = NULL;
static LWLockPadded *sbq_lease_locks = NULL;

static SbqLeaseUndo *sbq_undo = NULL;
static int	sbq_nundo = 0;
static int	sbq_maxundo = 0;
static bool sbq_lease_callbacks_registered = false;

static void sbq_lease_xact_callback(XactEvent event, void *arg);
static void sbq_lease_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
									   SubTransactionId parentSubid, void *arg);

/* ---------------------------------------------------------- shared memory */

Size
sbq_lease_shmem_size(void)
{
	return hash_estimate_size(sbq_max_locks, sizeof(SbqLease));
}

void
sbq_lease_shmem_request(void)
{
	RequestNamedLWLockTranche(SBQ_LEASE_TRANCHE, SBQ_LEASE_PARTITIONS);
}

/*
 * sbq_lease_shmem_startup
 *		Attach to (or create) the lease table; the caller holds
 *		AddinShmemInitLock.
 */
void
sbq_lease_shmem_startup(void)
{
	HASHCTL		info;

	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(SbqLeaseKey);
	info.entrysize = sizeof(SbqLease);
	info.num_partitions = SBQ_LEASE_PARTITIONS;
	sbq_lease_hash = ShmemInitHash("sbqueue leases", sbq_max_locks, sbq_max_locks, &info,
								   HASH_ELEM | HASH_BLOBS | HASH_PARTITION | HASH_FIXED_SIZE);
	sbq_lease_locks = GetNamedLWLockTranche(SBQ_LEASE_TRANCHE);
}

/* Whether there is a lease table (sbqueue is preloaded). */
bool
sbq_lease_available(void)
{
	return sbq_lease_hash != NULL;
}

/* Whether receives in this session take leases. */
bool
sbq_lease_enabled(void)
{
	return sbq_lease_hash != NULL && sbq_memory_locks && !RecoveryInProgress();
}

static inline int32
sbq_my_proc(void)
{
	return (int32) SBQ_MY_PROC_NUMBER();
}

/* The key, hash code and partition lock of a message of this database. */
static LWLock *
sbq_lease_locate(int64 seq, SbqLeaseKey *key, uint32 *hash)
{
	memset(key, 0, sizeof(*key));
	key->dbid = MyDatabaseId;
	key->seq = seq;
	*hash = get_hash_value(sbq_lease_hash, key);
	return &sbq_lease_locks[*hash % SBQ_LEASE_PARTITIONS].lock;
}

static SbqLease *
sbq_lease_find(const SbqLeaseKey *key, uint32 hash)
{
	return (SbqLease *) hash_search_with_hash_value(sbq_lease_hash, key, hash,
													HASH_FIND, NULL);
}

/*
 * Whether an entry is a lease that has expired and may be taken over: a held
 * one, or one this transaction claimed (it can run out before we commit).
 */
static inline bool
sbq_lease_expired(const SbqLease *entry, TimestampTz now)
{
	return entry->has_token && entry->locked_until <= now &&
		(entry->state == SBQ_LEASE_HELD ||
		 (entry->state == SBQ_LEASE_CLAIMED && entry->owner == sbq_my_proc()));
}

/* Whether the current transaction is settling this entry (see the file header). */
static inline bool
sbq_lease_settled_by_me(const SbqLease *entry)
{
	return entry->state == SBQ_LEASE_SETTLING && entry->owner == sbq_my_proc();
}

/* ------------------------------------------------------------ the undo log */

/*
 * sbq_lease_reserve
 *		Make room for n more undo records, before a partition lock is taken:
 *		this is the only step that can fail.
 */
static void
sbq_lease_reserve(int n)
{
	if (!sbq_lease_callbacks_registered)
	{
		RegisterXactCallback(sbq_lease_xact_callback, NULL);
		RegisterSubXactCallback(sbq_lease_subxact_callback, NULL);
		sbq_lease_callbacks_registered = true;
	}
	if (sbq_nundo + n > sbq_maxundo)
	{
		int			newmax = Max(64, Max(sbq_maxundo * 2, sbq_nundo + n));

		if (sbq_undo == NULL)
			sbq_undo = MemoryContextAlloc(TopMemoryContext, sizeof(SbqLeaseUndo) * newmax);
		else
			sbq_undo = repalloc(sbq_undo, sizeof(SbqLeaseUndo) * newmax);
		sbq_maxundo = newmax;
	}
}

/* Record a change about to be made to entry (NULL: it is being created). */
static void
sbq_lease_record(int64 seq, const SbqLease *entry)
{
	SbqLeaseUndo *u = &sbq_undo[sbq_nundo++];

	Assert(sbq_nundo <= sbq_maxundo);
	u->seq = seq;
	u->level = GetCurrentTransactionNestLevel();
	u->existed = entry != NULL;
	u->renew = false;
	u->renewed_until = 0;
	if (entry != NULL)
		u->prev = *entry;
	else
		memset(&u->prev, 0, sizeof(SbqLease));
}

/* Undo one change. Never fails: it only updates or removes an entry. */
static void
sbq_lease_restore(const SbqLeaseUndo *u)
{
	SbqLeaseKey key;
	uint32		hash;
	LWLock	   *lock = sbq_lease_locate(u->seq, &key, &hash);
	SbqLease   *entry;

	LWLockAcquire(lock, LW_EXCLUSIVE);
	entry = sbq_lease_find(&key, hash);
	if (entry != NULL)
	{
		if (u->renew)
		{
			/* only if nobody changed the lease since */
			if (entry->state == SBQ_LEASE_HELD && entry->has_token &&
				memcmp(entry->token.data, u->prev.token.data, UUID_LEN) == 0 &&
				entry->locked_until == u->renewed_until)
				entry->locked_until = u->prev.locked_until;
		}
		else if (entry->owner == sbq_my_proc() && entry->state != SBQ_LEASE_HELD)
		{
			if (u->existed)
				*entry = u->prev;
			else
				(void) hash_search_with_hash_value(sbq_lease_hash, &key, hash,
												   HASH_REMOVE, NULL);
		}
	}
	LWLockRelease(lock);
}

/* Apply one change at commit: claims are held, settled leases are gone. */
static void
sbq_lease_apply(const SbqLeaseUndo *u)
{
	SbqLeaseKey key;
	uint32		hash;
	LWLock	   *lock;
	SbqLease   *entry;

	if (u->renew)
		return;
	lock = sbq_lease_locate(u->seq, &key, &hash);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	entry = sbq_lease_find(&key, hash);
	if (entry != NULL && entry->owner == sbq_my_proc() && entry->state != SBQ_LEASE_HELD)
	{
		if (entry->state == SBQ_LEASE_SETTLING)
			(void) hash_search_with_hash_value(sbq_lease_hash, &key, hash,
											   HASH_REMOVE, NULL);
		else
		{
			entry->state = SBQ_LEASE_HELD;
			entry->owner = -1;
		}
	}
	LWLockRelease(lock);
}

/*
 * sbq_lease_xact_callback
 *		At commit, claims become held locks and settled leases go; at abort
 *		every change is undone, newest first. Neither can fail (see the file
 *		header). A transaction with changes cannot be prepared.
 */
static void
sbq_lease_xact_callback(XactEvent event, void *arg)
{
	int			i;

	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (sbq_nundo > 0)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that has received or settled sbqueue messages"),
						 errhint("Receive and settle messages outside of prepared transactions, or set \"sbqueue.memory_locks\" to off.")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			for (i = 0; i < sbq_nundo; i++)
				sbq_lease_apply(&sbq_undo[i]);
			sbq_nundo = 0;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			for (i = sbq_nundo - 1; i >= 0; i--)
				sbq_lease_restore(&sbq_undo[i]);
			sbq_nundo = 0;
			break;
		default:
			break;
	}
}

/*
 * sbq_lease_subxact_callback
 *		A subtransaction that aborts undoes its changes; one that commits
 *		hands them to its parent.
 */
static void
sbq_lease_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						   SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	int			i;

	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		while (sbq_nundo > 0 && sbq_undo[sbq_nundo - 1].level >= level)
		{
			sbq_lease_restore(&sbq_undo[sbq_nundo - 1]);
			sbq_nundo--;
		}
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		for (i = sbq_nundo - 1; i >= 0 && sbq_undo[i].level >= level; i--)
			sbq_undo[i].level = level - 1;
	}
}

/* ------------------------------------------------------------------ receive */

/*
 * sbq_lease_claim
 *		Take a message for the current transaction: it must have no entry, or
 *		an expired lease (then *prev_count is that lease's
 *		delivery count, which the caller must store before handing the
 *		message out again; else 0). The caller then grants the lease
 *		(sbq_lease_grant), turns it into a marker, or gives it back
 *		(sbq_lease_unclaim).
 */
SbqClaimResult
sbq_lease_claim(int64 seq, int32 queue_id, int16 subqueue, TimestampTz now,
				int32 *prev_count)
{
	SbqLeaseKey key;
	uint32		hash;
	LWLock	   *lock;
	SbqLease   *entry;
	bool		found;

	sbq_lease_reserve(1);
	lock = sbq_lease_locate(seq, &key, &hash);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	entry = sbq_lease_find(&key, hash);
	if (entry != NULL && sbq_lease_settled_by_me(entry))
	{
		/* settled in this transaction: the row has what is to be kept */
		sbq_lease_record(seq, entry);
		*prev_count = 0;
	}
	else if (entry != NULL)
	{
		if (!sbq_lease_expired(entry, now))
		{
			LWLockRelease(lock);
			return SBQ_CLAIM_BUSY;
		}
		sbq_lease_record(seq, entry);
		*prev_count = entry->delivery_count;
	}
	else
	{
		entry = (SbqLease *) hash_search_with_hash_value(sbq_lease_hash, &key, hash,
														 HASH_ENTER_NULL, &found);
		if (entry == NULL)
		{
			LWLockRelease(lock);
			return SBQ_CLAIM_FULL;
		}
		sbq_lease_record(seq, NULL);
		*prev_count = 0;
	}
	entry->queue_id = queue_id;
	entry->subqueue = subqueue;
	entry->state = SBQ_LEASE_CLAIMED;
	entry->has_token = false;
	entry->owner = sbq_my_proc();
	entry->delivery_count = 0;
	entry->locked_until = 0;
	memset(&entry->token, 0, sizeof(pg_uuid_t));
	LWLockRelease(lock);
	return SBQ_CLAIM_OK;
}

/* This transaction's entry for seq, with its partition lock held exclusively. */
static SbqLease *
sbq_lease_mine(int64 seq, SbqLeaseKey *key, uint32 *hash, LWLock **lock)
{
	SbqLease   *entry;

	*lock = sbq_lease_locate(seq, key, hash);
	LWLockAcquire(*lock, LW_EXCLUSIVE);
	entry = sbq_lease_find(key, *hash);
	if (entry == NULL || entry->owner != sbq_my_proc() || entry->state == SBQ_LEASE_HELD)
		elog(ERROR, "sbqueue lease of message " INT64_FORMAT " is not this transaction's", seq);
	return entry;
}

/* Give a claim its lock: token, expiry and delivery count. */
void
sbq_lease_grant(int64 seq, const pg_uuid_t *token, TimestampTz until, int32 delivery_count)
{
	SbqLeaseKey key;
	uint32		hash;
	LWLock	   *lock;
	SbqLease   *entry = sbq_lease_mine(seq, &key, &hash, &lock);

	entry->token = *token;
	entry->has_token = true;
	entry->locked_until = until;
	entry->delivery_count = delivery_count;
	LWLockRelease(lock);
}

/* Turn a claim into a marker: the transaction moves the message instead. */
void
sbq_lease_make_marker(int64 seq)
{
	SbqLeaseKey key;
	uint32		hash;
	LWLock	   *lock;
	SbqLease   *entry = sbq_lease_mine(seq, &key, &hash, &lock);

	entry->state = SBQ_LEASE_SETTLING;
	entry->has_token = false;
	LWLockRelease(lock);
}

/* Give back the latest change this transaction made to seq's entry, now. */
void
sbq_lease_unclaim(int64 seq)
{
	int			i;

	for (i = sbq_nundo - 1; i >= 0; i--)
	{
		if (sbq_undo[i].seq == seq)
		{
			sbq_lease_restore(&sbq_undo[i]);
			memmove(&sbq_undo[i], &sbq_undo[i + 1],
					sizeof(SbqLeaseUndo) * (sbq_nundo - i - 1));
			sbq_nundo--;
			return;
		}
	}
}

/* -------------------------------------------------------- settle and renew */

/* Whether an entry is the valid lease of token in (queue_id, subqueue). */
static bool
sbq_lease_matches(const SbqLease *entry, const pg_uuid_t *token, int32 queue_id,
				  int16 subqueue, TimestampTz now)
{
	return entry->has_token &&
		memcmp(entry->token.data, token->data, UUID_LEN) == 0 &&
		entry->queue_id == queue_id && entry->subqueue == subqueue &&
		entry->locked_until > now;
}

/*
 * sbq_lease_holds
 *		Whether token is a lease of the message seq that is valid now and that
 *		this transaction has not settled already. A lease another transaction
 *		is settling counts: the caller's settlement waits for that one's row
 *		lock and then checks again (sbq_lease_settle). False means the lock, if
 *		any, is in the message row.
 */
bool
sbq_lease_holds(int64 seq, const pg_uuid_t *token, int32 queue_id, int16 subqueue,
				TimestampTz now)
{
	SbqLeaseKey key;
	uint32		hash;
	LWLock	   *lock;
	SbqLease   *entry;
	bool		holds = false;

	if (sbq_lease_hash == NULL)
		return false;
	lock = sbq_lease_locate(seq, &key, &hash);
	LWLockAcquire(lock, LW_SHARED);
	entry = sbq_lease_find(&key, hash);
	if (entry != NULL && sbq_lease_matches(entry, token, queue_id, subqueue, now))
	{
		if (entry->owner == sbq_my_proc())
			holds = entry->state == SBQ_LEASE_CLAIMED;
		else
			holds = entry->state != SBQ_LEASE_CLAIMED;
	}
	LWLockRelease(lock);
	return holds;
}

/*
 * sbq_lease_settle
 *		Start settling the lease of token: valid now, held (or claimed by this
 *		transaction). It becomes SETTLING and goes at commit. The caller holds
 *		the message's row lock, so no other settler is between its check and
 *		this. *delivery_count is the lease's delivery. False: not valid.
 */
bool
sbq_lease_settle(int64 seq, const pg_uuid_t *token, int32 queue_id, int16 subqueue,
				 TimestampTz now, int32 *delivery_count)
{
	SbqLeaseKey key;
	uint32		hash;
	LWLock	   *lock;
	SbqLease   *entry;
	bool		ok = false;

	sbq_lease_reserve(1);
	lock = sbq_lease_locate(seq, &key, &hash);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	entry = sbq_lease_find(&key, hash);
	if (entry != NULL && sbq_lease_matches(entry, token, queue_id, subqueue, now) &&
		(entry->state == SBQ_LEASE_HELD ||
		 (entry->state == SBQ_LEASE_CLAIMED && entry->owner == sbq_my_proc())))
	{
		sbq_lease_record(seq, entry);
		entry->state = SBQ_LEASE_SETTLING;
		entry->owner = sbq_my_proc();
		*delivery_count = entry->delivery_count;
		ok = true;
	}
	LWLockRelease(lock);
	return ok;
}

/*
 * sbq_lease_renew
 *		Move the expiry of a valid lease of token to until. Undone if the
 *		transaction aborts (unless the lease changed meanwhile). False: not
 *		valid.
 */
bool
sbq_lease_renew(int64 seq, const pg_uuid_t *token, int32 queue_id, int16 subqueue,
				TimestampTz now, TimestampTz until)
{
	SbqLeaseKey key;
	uint32		hash;
	LWLock	   *lock;
	SbqLease   *entry;
	bool		ok = false;

	sbq_lease_reserve(1);
	lock = sbq_lease_locate(seq, &key, &hash);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	entry = sbq_lease_find(&key, hash);
	if (entry != NULL && sbq_lease_matches(entry, token, queue_id, subqueue, now))
	{
		if (entry->state == SBQ_LEASE_HELD)
		{
			sbq_lease_record(seq, entry);
			sbq_undo[sbq_nundo - 1].renew = true;
			sbq_undo[sbq_nundo - 1].renewed_until = until;
			entry->locked_until = until;
			ok = true;
		}
		else if (entry->state == SBQ_LEASE_CLAIMED && entry->owner == sbq_my_proc())
		{
			sbq_lease_record(seq, entry);
			entry->locked_until = until;
			ok = true;
		}
	}
	LWLockRelease(lock);
	return ok;
}

/* ------------------------------------------------ durable paths, maintenance */

/*
 * sbq_lease_take_slot
 *		For a statement that moves a message through the table: hold a marker
 *		for it until the end of the transaction. False when a lease (valid or
 *		expired) or another transaction's entry is there: the message is not
 *		the statement's to move. True without a lease table.
 */
bool
sbq_lease_take_slot(int64 seq)
{
	SbqLeaseKey key;
	uint32		hash;
	LWLock	   *lock;
	SbqLease   *entry;
	bool		found;

	if (sbq_lease_hash == NULL)
		return true;
	sbq_lease_reserve(1);
	lock = sbq_lease_locate(seq, &key, &hash);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	entry = sbq_lease_find(&key, hash);
	if (entry != NULL)
	{
		bool		mine = entry->owner == sbq_my_proc() && entry->state == SBQ_LEASE_SETTLING;

		LWLockRelease(lock);
		return mine;
	}
	entry = (SbqLease *) hash_search_with_hash_value(sbq_lease_hash, &key, hash,
													 HASH_ENTER_NULL, &found);
	if (entry == NULL)
	{
		LWLockRelease(lock);
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("too many messages are locked at once"),
				 errhint("Increase \"sbqueue.max_locks\", or settle messages sooner.")));
	}
	sbq_lease_record(seq, NULL);
	memset(((char *) entry) + sizeof(SbqLeaseKey), 0, sizeof(SbqLease) - sizeof(SbqLeaseKey));
	entry->state = SBQ_LEASE_SETTLING;
	entry->owner = sbq_my_proc();
	LWLockRelease(lock);
	return true;
}

static void
sbq_lease_lock_all(LWLockMode mode)
{
	int			i;

	for (i = 0; i < SBQ_LEASE_PARTITIONS; i++)
		LWLockAcquire(&sbq_lease_locks[i].lock, mode);
}

static void
sbq_lease_unlock_all(void)
{
	int			i;

	for (i = SBQ_LEASE_PARTITIONS - 1; i >= 0; i--)
		LWLockRelease(&sbq_lease_locks[i].lock);
}

/*
 * sbq_lease_take_expired
 *		Take up to max expired leases of this database (of one queue, or
 *		of all when queue_id is 0) as markers of this transaction, into out.
 *		The caller stores their delivery counts (or dead-letters the messages)
 *		in the same transaction; at its commit the leases are gone.
 */
int
sbq_lease_take_expired(int32 queue_id, TimestampTz now, SbqExpiredLease *out, int max)
{
	HASH_SEQ_STATUS status;
	SbqLease   *entry;
	int			n = 0;

	if (sbq_lease_hash == NULL || max <= 0)
		return 0;
	/* an unlocked look first: no lease at all is the common case of these callers */
	if (hash_get_num_entries(sbq_lease_hash) == 0)
		return 0;
	sbq_lease_reserve(max);
	sbq_lease_lock_all(LW_EXCLUSIVE);
	hash_seq_init(&status, sbq_lease_hash);
	while ((entry = (SbqLease *) hash_seq_search(&status)) != NULL)
	{
		if (entry->key.dbid != MyDatabaseId || !sbq_lease_expired(entry, now) ||
			(queue_id != 0 && entry->queue_id != queue_id))
			continue;
		sbq_lease_record(entry->key.seq, entry);
		out[n].seq = entry->key.seq;
		out[n].queue_id = entry->queue_id;
		out[n].subqueue = entry->subqueue;
		out[n].delivery_count = entry->delivery_count;
		entry->state = SBQ_LEASE_SETTLING;
		entry->has_token = false;
		entry->owner = sbq_my_proc();
		if (++n >= max)
		{
			hash_seq_term(&status);
			break;
		}
	}
	sbq_lease_unlock_all();
	return n;
}

/* ---------------------------------------------------- SQL-callable helpers */

/*
 * sbq_row_busy
 *		Whether a row whose xmax is xmax is being changed or held locked by
 *		another transaction that is still running. (A row locked by several
 *		transactions has a multixact id there, which this does not resolve:
 *		such a row is not seen as busy.)
 */
bool
sbq_row_busy(TransactionId xmax)
{
	return TransactionIdIsNormal(xmax) && !TransactionIdIsCurrentTransactionId(xmax) &&
		TransactionIdIsInProgress(xmax);
}

/* The lowest sequence number the current scan passed to sbq.lease_free, or -1. */
static int64 sbq_scan_first = -1;

void
sbq_lease_scan_start(void)
{
	sbq_scan_first = -1;
}

int64
sbq_lease_scan_first(void)
{
	return sbq_scan_first;
}

/*
 * sbq.lease_free(seq, now, xmax, locked_until): whether a leasing receive
 * may try to claim the message: no lock stored in the row is valid, no other
 * transaction is changing the row (xmax), and it has no entry or an expired
 * lease. It is the only filter of its scan, so it sees every row the scan
 * passes, locked or not: the first one is where the queue's head is.
 */
Datum
sbq_lease_free_sql(PG_FUNCTION_ARGS)
{
	int64		seq;
	TimestampTz now;
	SbqLeaseKey key;
	uint32		hash;
	LWLock	   *lock;
	SbqLease   *entry;
	bool		free;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		PG_RETURN_BOOL(false);
	seq = PG_GETARG_INT64(0);
	now = PG_GETARG_TIMESTAMPTZ(1);
	if (sbq_scan_first < 0 || seq < sbq_scan_first)
		sbq_scan_first = seq;
	if (!PG_ARGISNULL(3) && PG_GETARG_TIMESTAMPTZ(3) > now)
		PG_RETURN_BOOL(false);
	if (sbq_row_busy(PG_GETARG_TRANSACTIONID(2)))
		PG_RETURN_BOOL(false);
	if (sbq_lease_hash == NULL)
		PG_RETURN_BOOL(true);
	lock = sbq_lease_locate(seq, &key, &hash);
	LWLockAcquire(lock, LW_SHARED);
	entry = sbq_lease_find(&key, hash);
	free = entry == NULL || sbq_lease_settled_by_me(entry) || sbq_lease_expired(entry, now);
	LWLockRelease(lock);
	PG_RETURN_BOOL(free);
}

/* sbq.lease_slot(seq): sbq_lease_take_slot, for the statements of durable paths */
Datum
sbq_lease_slot_sql(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(sbq_lease_take_slot(PG_GETARG_INT64(0)));
}

/* Copy the lease of seq, if it has a token. */
static bool
sbq_lease_show(int64 seq, SbqLease *copy)
{
	SbqLeaseKey key;
	uint32		hash;
	LWLock	   *lock;
	SbqLease   *entry;
	bool		found = false;

	if (sbq_lease_hash == NULL)
		return false;
	lock = sbq_lease_locate(seq, &key, &hash);
	LWLockAcquire(lock, LW_SHARED);
	entry = sbq_lease_find(&key, hash);
	if (entry != NULL && entry->has_token && !sbq_lease_settled_by_me(entry))
	{
		*copy = *entry;
		found = true;
	}
	LWLockRelease(lock);
	return found;
}

/*
 * sbq_lease_lookup
 *		The lock of the message seq if a lease holds it (valid or expired):
 *		its expiry and delivery count.
 */
bool
sbq_lease_lookup(int64 seq, TimestampTz *until, int32 *delivery_count)
{
	SbqLease	lease;

	if (!sbq_lease_show(seq, &lease))
		return false;
	*until = lease.locked_until;
	*delivery_count = lease.delivery_count;
	return true;
}

/* sbq.lease_until(seq): the expiry of the message's lease, NULL without one */
Datum
sbq_lease_until_sql(PG_FUNCTION_ARGS)
{
	SbqLease	lease;

	if (!sbq_lease_show(PG_GETARG_INT64(0), &lease))
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(lease.locked_until);
}

/* sbq.lease_count(seq): the delivery count of the message's lease, NULL without one */
Datum
sbq_lease_count_sql(PG_FUNCTION_ARGS)
{
	SbqLease	lease;

	if (!sbq_lease_show(PG_GETARG_INT64(0), &lease))
		PG_RETURN_NULL();
	PG_RETURN_INT32(lease.delivery_count);
}

/*
 * sbq.lease_pending_received(queue_id): deliveries of the queue under a lease
 * that the "received" counter does not have yet (it gets them when the lease
 * ends: settled, or taken over after it expired).
 */
Datum
sbq_lease_pending_sql(PG_FUNCTION_ARGS)
{
	int32		queue_id = PG_GETARG_INT32(0);
	HASH_SEQ_STATUS status;
	SbqLease   *entry;
	int64		n = 0;

	if (sbq_lease_hash == NULL)
		PG_RETURN_INT64(0);
	sbq_lease_lock_all(LW_SHARED);
	hash_seq_init(&status, sbq_lease_hash);
	while ((entry = (SbqLease *) hash_seq_search(&status)) != NULL)
	{
		if (entry->key.dbid == MyDatabaseId && entry->queue_id == queue_id &&
			entry->has_token && !sbq_lease_settled_by_me(entry))
			n++;
	}
	sbq_lease_unlock_all();
	PG_RETURN_INT64(n);
}
