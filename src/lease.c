/*-------------------------------------------------------------------------
 *
 * lease.c
 *	  Message locks in shared memory ("leases").
 *
 * A peek-lock receive needs to lock a message, not to store anything: a lock
 * that is lost behaves as if it had expired, and API.md allows a crash to lose
 * locks (and the count of the deliveries whose locks it lost). So with
 * sbqueue preloaded a receive keeps its locks here, in a shared hash table,
 * and writes nothing to the message table: the receive's transaction gets no
 * transaction id, writes no WAL and commits without a WAL flush, and the
 * message row gets no new version. What must survive a crash is still written
 * with the settling transaction: a complete deletes the row, an abandon or
 * defer stores the delivery count, and a lease that expires has its delivery
 * count stored by whoever takes the message next (a receive, or maintenance)
 * before the message is handed out again. That keeps "at most one lost
 * delivery count per message per crash".
 *
 * A lease belongs to one incarnation of the extension in one database: the
 * key is (database, epoch, sequence number), the epoch being the OID of
 * sbq.queues, which DROP and CREATE EXTENSION change. A message of a new
 * incarnation never meets a lease of an old one. DROP EXTENSION and DROP
 * DATABASE free the leases of what they dropped at commit (an object access
 * hook notes the drop); leases of an older epoch that are left anyway (a
 * prepared DROP EXTENSION) are removed by the next sweep once expired.
 *
 * A lease is in one of three states:
 *	- CLAIMED: taken by a receive whose transaction is still open (owner);
 *	  at its commit it becomes HELD, at its abort it is gone (or the expired
 *	  lease it took over is back).
 *	- HELD: a committed lock, valid until locked_until, settled by anyone
 *	  who has the token.
 *	- SETTLING: the owner's open transaction settles or moves the message
 *	  (complete, abandon, a receive that dead-letters it, maintenance, a
 *	  purge); at its commit the lease is gone, at its abort it is back as it
 *	  was. A SETTLING entry without a token is a bare "marker".
 * Whoever changes an entry holds it exclusively until its transaction ends,
 * so these states are the whole protocol between receivers and settlers; the
 * row lock of the message (taken by the DELETE or UPDATE of a settlement)
 * orders two settlers of the same token.
 *
 * Deliveries not counted yet. A receive writes no count: the "received"
 * counter gets a delivery when its lease ends (a settlement, the sweep, a
 * receive that takes the expired lease over), in the ending transaction's
 * counts (qstate.c), and until then sbq_queue_stats adds the leases that are
 * such deliveries (sbq.lease_pending_received). Which they are is what was
 * committed, not what the open transaction that owns an entry has made of it:
 * each entry carries "delivered", set when a claim with a token commits as a
 * message's lease and kept through every change of an owner until its
 * commit (an abort restores the entry whole). So a lease that the sweep, a
 * settlement or a takeover is ending counts until that transaction's counts
 * have it, and a claim that its own transaction settles never counts for
 * others (it was never committed as a delivery). The owner's commit removes
 * the entry and then adds its counts, two steps that a reader must not see
 * apart: the commit marks its database's share ("publishing") while it has
 * removed a delivered entry and not yet added its counts, from under the
 * partition lock of the first such removal until this file's commit
 * callback, which runs after qstate.c's. A reader that counts (qstate.c,
 * sbq_counts_seen) holds every partition lock, so no commit can start to
 * remove one meanwhile, and reads only while no commit of its database is
 * marked; else it lets go and tries again.
 *
 * Only a leasing receive adds entries. The statements that move messages
 * through the table with row locks (row-lock receives, receive-and-delete,
 * maintenance, resubmit) add none: they lock the row first and then ask
 * whether an entry is there (sbq.lease_slot), while a leasing receive adds
 * its claim first and then looks whether another transaction has the row
 * locked (lease_receive.c, sbq_check_claims). Each writes its own mark before it
 * reads the other's, so at least one of the two sees the other and steps
 * back. So those paths work when the table is full, and a prepared
 * transaction can use them.
 *
 * Each database may hold at most sbqueue.max_locks_per_database entries (a
 * quarter of the table by default), so one database cannot starve the
 * others; a receive that finds no room locks in the message rows instead.
 *
 * An entry that the current transaction is settling is invisible to that
 * transaction itself: its own changes to the message row are visible to it,
 * so the row says everything (an abandoned message can be received again in
 * the same transaction, a deferred one counts as deferred).
 *
 * Every change a transaction makes here is recorded in a backend-local undo
 * log (undo.c), with the entry as it was; this file's transaction and
 * subtransaction callbacks have the log applied at commit and undone at
 * abort. PREPARE TRANSACTION is refused for a transaction with such changes:
 * a prepared transaction would leave entries that no process owns. A lease
 * that ends before its expiry while its message stays in the queue (an
 * abandon at commit; anything undone at abort) lowers the queue's free hint
 * (qstate.c) once the entry has changed, with no partition lock held.
 *
 * Owns: the lease table ("sbqueue leases") and the table of the databases'
 * shares ("sbqueue lease shares") in shared memory, which shmem.c has made;
 * per backend, the transaction's undo log and the drops it noted; the object
 * access hook (with the preload) and the transaction callbacks, registered
 * at load. The sbqueue.memory_locks, max_locks and max_locks_per_database
 * variables live here (sbqueue.c registers them).
 *
 * Locking: SBQ_LEASE_PARTITIONS LWLocks of the tranche "sbqueue leases"
 * partition the table by hash code, as the lock manager does. One is held at
 * a time, except by the scans (expired leases, a queue's leases, a dropped
 * database's), which take all of them in order. Each database's share entry
 * has a spinlock, taken alone or under partition locks; one more LWLock of
 * the tranche guards the table of shares, and is never taken while a
 * partition lock is held. After a drop, the commit callback takes qstate.c's
 * lock with none of these held. Nothing that can fail or sleep runs while
 * one is held, and no entry is ever added by the commit and abort callbacks
 * (they only update and remove), so they cannot fail.
 *
 * Length: over 1,000 lines on purpose. Everything that reads or changes an
 * entry is here, the SQL-callable probes of sbqueue's statements included,
 * so that the entry's layout, its three states and the locking rules above
 * stay private to one file and can be checked in one place.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/lease.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/multixact.h"
#include "access/transam.h"
#include "access/xact.h"
#include "access/htup_details.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_class.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/acl.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "distributed.h"
#include "lease.h"
#include "qstate.h"
#include "sbqueue.h"
#include "storage.h"
#include "undo.h"

PG_FUNCTION_INFO_V1(sbq_lease_free_sql);
PG_FUNCTION_INFO_V1(sbq_lease_slot_sql);
PG_FUNCTION_INFO_V1(sbq_lease_until_sql);
PG_FUNCTION_INFO_V1(sbq_lease_count_sql);
PG_FUNCTION_INFO_V1(sbq_lease_pending_sql);
PG_FUNCTION_INFO_V1(sbq_session_until_sql);
PG_FUNCTION_INFO_V1(sbq_lock_table_sql);

#define SBQ_LEASE_PARTITIONS	16
#define SBQ_LEASE_TRANCHE		"sbqueue leases"

/* how many databases the table of shares has room for */
#define SBQ_LEASE_MAX_DBS		1024

#define SBQ_LEASE_CLAIMED		1
#define SBQ_LEASE_HELD			2
#define SBQ_LEASE_SETTLING		3

/* no lease of a database expires before this (none at all) */
#define SBQ_NO_EXPIRY			PG_INT64_MAX

bool		sbq_memory_locks = true;
int			sbq_max_locks = 65536;
int			sbq_max_locks_per_database = -1;

typedef struct SbqLeaseKey
{
	Oid			dbid;
	Oid			epoch;			/* the OID of sbq.queues of the incarnation */
	int64		seq;
} SbqLeaseKey;

typedef struct SbqLease
{
	SbqLeaseKey key;
	int32		queue_id;
	int8		subqueue;		/* SBQ_SUBQUEUE_* (int8 keeps the entry at 88 bytes) */
	int8		state;			/* SBQ_LEASE_* */
	bool		has_token;		/* false: a bare marker */
	bool		row_goes;		/* SETTLING: the settlement takes the message out */
	bool		delivered;		/* committed as a delivery not counted yet (below) */
	int32		owner;			/* proc number owning a CLAIMED or SETTLING entry */
	int32		delivery_count; /* the delivery this lease is for */
	TimestampTz locked_until;
	pg_uuid_t	token;
	int64		session_key;	/* a message's lease under a session lock: its key */
	int64		lo;				/* a session lock (SBQ_SUBQUEUE_SESSION): the */
	int64		hi;				/* sequence numbers locked under it, or 0 and 0 */
} SbqLease;

/* A database's share of the table. */
typedef struct SbqLeaseShare
{
	Oid			dbid;			/* the hash key */
	slock_t		mutex;			/* protects the rest */
	int32		count;			/* entries of this database */
	TimestampTz min_until;		/* no lease of it expires before this */
	TimestampTz session_until;	/* no session lock of it expires before this */
	int32		publishing;		/* commits between their leases and counts (below) */
} SbqLeaseShare;

/* One change of this transaction, with what the entry was before it. */
typedef struct SbqLeaseUndo
{
	SbqUndoHeader hdr;			/* undo.c's */
	SbqLeaseKey key;
	bool		existed;		/* false: the change created the entry */
	bool		renew;			/* a renew of a lease nobody owns */
	TimestampTz renewed_until;	/* for a renew: what it set */
	SbqLease	prev;
} SbqLeaseUndo;

/* Something this transaction dropped whose leases go at its commit. */
typedef struct SbqLeaseDrop
{
	Oid			dbid;
	Oid			epoch;			/* InvalidOid: the whole database */
	int			level;
} SbqLeaseDrop;

static HTAB *sbq_lease_hash = NULL;
static HTAB *sbq_lease_shares = NULL;
static LWLockPadded *sbq_lease_locks = NULL;

/* this backend's database's share, once known */
static SbqLeaseShare *sbq_my_share = NULL;

/* the incarnation the current storage section works on (sbq_lease_enter) */
static Oid	sbq_lease_epoch = InvalidOid;

static void sbq_lease_apply(const void *entry);
static void sbq_lease_restore(const void *entry);
static inline bool sbq_lease_orphan(const SbqLease *entry, TimestampTz now);

/* this transaction's changes (undo.c) */
static SbqUndoLog sbq_lease_log = SBQ_UNDO_LOG(SbqLeaseUndo, 64, sbq_lease_apply,
											   sbq_lease_restore);

/*
 * This transaction settles a lease without taking its message out of the
 * queue (an abandon): the message is receivable again for it alone, below
 * where the free hint may be (sbq_lease_freed_here).
 */
static bool sbq_lease_freed = false;

/* sbq_lease_unclaim is undoing a claim (sbq_lease_restore) */
static bool sbq_lease_unclaiming = false;

/* this transaction's commit marked its share "publishing" (file header) */
static bool sbq_lease_publishing = false;

/* (a transaction that drops more leaves the rest to expire and be swept) */
static SbqLeaseDrop sbq_drops[8];
static int	sbq_ndrops = 0;

static object_access_hook_type sbq_prev_object_access = NULL;

static void sbq_lease_xact_callback(XactEvent event, void *arg);
static void sbq_lease_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
									   SubTransactionId parentSubid, void *arg);

/* ---------------------------------------------------------- shared memory */

Size
sbq_lease_shmem_size(void)
{
	return add_size(hash_estimate_size(sbq_max_locks, sizeof(SbqLease)),
					hash_estimate_size(SBQ_LEASE_MAX_DBS, sizeof(SbqLeaseShare)));
}

void
sbq_lease_shmem_request(void)
{
	/* the partitions, and one for the table of shares */
	RequestNamedLWLockTranche(SBQ_LEASE_TRANCHE, SBQ_LEASE_PARTITIONS + 1);
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
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(Oid);
	info.entrysize = sizeof(SbqLeaseShare);
	sbq_lease_shares = ShmemInitHash("sbqueue lease shares", SBQ_LEASE_MAX_DBS,
									 SBQ_LEASE_MAX_DBS, &info,
									 HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
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

static inline LWLock *
sbq_shares_lock(void)
{
	return &sbq_lease_locks[SBQ_LEASE_PARTITIONS].lock;
}

/* ------------------------------------------------------ storage sections */

/*
 * sbq_lease_enter
 *		A storage section starts: the leases it works on are those of the
 *		incarnation epoch. The internal SQL functions only answer inside one.
 */
void
sbq_lease_enter(Oid epoch)
{
	sbq_lease_epoch = epoch;
}

/* The storage section is over (also at any abort). */
void
sbq_lease_leave(void)
{
	sbq_lease_epoch = InvalidOid;
}

/*
 * Refuse a call of an internal function outside sbqueue's own statements
 * (outside a storage section), whatever EXECUTE grants say.
 */
void
sbq_lease_internal(const char *name)
{
	if (!OidIsValid(sbq_lease_epoch))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("%s is internal to sbqueue", name),
				 errdetail("Only sbqueue's own statements call it.")));
}

/* ------------------------------------------------------------ the shares */

/* The most entries one database may have. */
static int
sbq_lease_db_limit(void)
{
	if (sbq_max_locks_per_database < 0)
		return Max(sbq_max_locks / 4, 1);
	return Min(sbq_max_locks_per_database, sbq_max_locks);
}

/*
 * sbq_lease_share
 *		This database's share entry, made if need be; NULL when the table of
 *		shares is full. Never called with a partition lock held.
 */
static SbqLeaseShare *
sbq_lease_share(void)
{
	SbqLeaseShare *share;
	bool		found;

	if (sbq_my_share != NULL)
		return sbq_my_share;
	LWLockAcquire(sbq_shares_lock(), LW_EXCLUSIVE);
	share = (SbqLeaseShare *) hash_search(sbq_lease_shares, &MyDatabaseId,
										  HASH_ENTER_NULL, &found);
	if (share != NULL && !found)
	{
		SpinLockInit(&share->mutex);
		share->count = 0;
		share->min_until = SBQ_NO_EXPIRY;
		share->session_until = SBQ_NO_EXPIRY;
		share->publishing = 0;
	}
	LWLockRelease(sbq_shares_lock());
	sbq_my_share = share;
	return share;
}

/*
 * sbq_lease_room_to_clear
 *		Whether this database's share, and the whole table, would stay under
 *		three quarters full with reserve more entries. A session receive takes
 *		expired messages off its way (each holds an entry until the commit)
 *		only then, reserving what it still wants to hand out: the last quarter
 *		is kept for the messages receives hand out under a session lock, which
 *		have no other place to go (two receives behind 10,000 each filled a
 *		share of 16,384: 53200). The table's count is read without its locks:
 *		a judgement, not a promise.
 */
bool
sbq_lease_room_to_clear(int reserve)
{
	SbqLeaseShare *share = sbq_lease_share();
	int			count;

	if (share == NULL)
		return false;
	SpinLockAcquire(&share->mutex);
	count = share->count;
	SpinLockRelease(&share->mutex);
	if ((int64) count + reserve >= sbq_lease_db_limit() / 4 * 3)
		return false;
	return (int64) hash_get_num_entries(sbq_lease_hash) + reserve < sbq_max_locks / 4 * 3;
}

/* Lower this database's earliest expiry to until. */
static void
sbq_lease_note_until(TimestampTz until)
{
	SbqLeaseShare *share = sbq_my_share;

	if (share == NULL)
		return;
	SpinLockAcquire(&share->mutex);
	if (until < share->min_until)
		share->min_until = until;
	SpinLockRelease(&share->mutex);
}

/*
 * sbq_lease_publish_begin
 *		At commit, under the partition lock of a delivered lease about to be
 *		removed: mark this database's share until the transaction's counts
 *		are added (sbq_lease_publish_end). Once per transaction; without a
 *		share (its table full) readers are not held back. Never fails.
 */
static void
sbq_lease_publish_begin(void)
{
	SbqLeaseShare *share = sbq_my_share;

	if (sbq_lease_publishing || share == NULL)
		return;
	SpinLockAcquire(&share->mutex);
	share->publishing++;
	SpinLockRelease(&share->mutex);
	sbq_lease_publishing = true;
}

/* ---------------------------------------------------------------- entries */

/* The key, hash code and partition lock of a message of this incarnation. */
static LWLock *
sbq_lease_locate_key(const SbqLeaseKey *key, uint32 *hash)
{
	*hash = get_hash_value(sbq_lease_hash, key);
	return &sbq_lease_locks[*hash % SBQ_LEASE_PARTITIONS].lock;
}

static LWLock *
sbq_lease_locate_in(Oid epoch, int64 seq, SbqLeaseKey *key, uint32 *hash)
{
	memset(key, 0, sizeof(*key));
	key->dbid = MyDatabaseId;
	key->epoch = epoch;
	key->seq = seq;
	return sbq_lease_locate_key(key, hash);
}

static LWLock *
sbq_lease_locate(int64 seq, SbqLeaseKey *key, uint32 *hash)
{
	Assert(OidIsValid(sbq_lease_epoch));
	return sbq_lease_locate_in(sbq_lease_epoch, seq, key, hash);
}

static SbqLease *
sbq_lease_find(const SbqLeaseKey *key, uint32 hash)
{
	return (SbqLease *) hash_search_with_hash_value(sbq_lease_hash, key, hash,
													HASH_FIND, NULL);
}

/*
 * sbq_lease_insert
 *		Add an entry for key, within this database's share; NULL when the
 *		share or the table is full. The caller holds the partition lock and
 *		has looked up the share (sbq_lease_share).
 */
static SbqLease *
sbq_lease_insert(const SbqLeaseKey *key, uint32 hash)
{
	SbqLeaseShare *share = sbq_my_share;
	SbqLease   *entry;
	bool		found;
	bool		room;

	if (share == NULL)
		return NULL;
	SpinLockAcquire(&share->mutex);
	room = share->count < sbq_lease_db_limit();
	if (room)
		share->count++;
	SpinLockRelease(&share->mutex);
	if (!room)
		return NULL;
	entry = (SbqLease *) hash_search_with_hash_value(sbq_lease_hash, key, hash,
													 HASH_ENTER_NULL, &found);
	if (entry == NULL)
	{
		SpinLockAcquire(&share->mutex);
		share->count--;
		SpinLockRelease(&share->mutex);
	}
	return entry;
}

/* Remove an entry of this database; the caller holds its partition lock. */
static void
sbq_lease_remove(const SbqLeaseKey *key, uint32 hash)
{
	SbqLeaseShare *share = sbq_my_share;

	if (hash_search_with_hash_value(sbq_lease_hash, key, hash, HASH_REMOVE, NULL) != NULL &&
		share != NULL)
	{
		SpinLockAcquire(&share->mutex);
		share->count--;
		SpinLockRelease(&share->mutex);
	}
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
 *		Make room for n more undo records, and know this database's share,
 *		before a partition lock is taken: this is the only step that can fail.
 */
static void
sbq_lease_reserve(int n)
{
	(void) sbq_lease_share();
	sbq_undo_reserve(&sbq_lease_log, n);
}

/* Record a change about to be made to the entry of key (NULL: it is being created). */
static SbqLeaseUndo *
sbq_lease_record(const SbqLeaseKey *key, const SbqLease *entry)
{
	SbqLeaseUndo *u = sbq_undo_add(&sbq_lease_log);

	sbq_shared_change_gen++;
	u->key = *key;
	u->existed = entry != NULL;
	u->renew = false;
	u->renewed_until = 0;
	if (entry != NULL)
		u->prev = *entry;
	else
		memset(&u->prev, 0, sizeof(SbqLease));
	return u;
}

/*
 * sbq_lease_session_until
 *		For sbq_lease_restore: the expiry of the session lock (session key,
 *		of queue_id, in the incarnation of key) that a message's lease with
 *		expiry until lives under, when it was renewed past until; else 0.
 *		While until has not passed, that session lock is the lease's own: it
 *		can be taken over only once expired, and released only after the
 *		settlement being undone (whose row lock a release waits for). Never
 *		fails.
 */
static TimestampTz
sbq_lease_session_until(const SbqLeaseKey *key, int64 session_key, int32 queue_id,
						TimestampTz until)
{
	SbqLeaseKey skey = *key;
	uint32		hash;
	LWLock	   *lock;
	SbqLease   *entry;
	TimestampTz result = 0;

	if (until <= GetCurrentTimestamp())
		return 0;
	skey.seq = -session_key;
	lock = sbq_lease_locate_key(&skey, &hash);
	LWLockAcquire(lock, LW_SHARED);
	entry = sbq_lease_find(&skey, hash);
	if (entry != NULL && entry->subqueue == SBQ_SUBQUEUE_SESSION && entry->has_token &&
		entry->queue_id == queue_id && entry->state == SBQ_LEASE_HELD &&
		entry->locked_until > until)
		result = entry->locked_until;
	LWLockRelease(lock);
	return result;
}

/* Undo one change. Never fails: it only updates or removes an entry. */
static void
sbq_lease_restore(const void *undo_entry)
{
	const SbqLeaseUndo *u = undo_entry;
	uint32		hash;
	LWLock	   *lock = sbq_lease_locate_key(&u->key, &hash);
	SbqLease   *entry;
	TimestampTz session_until = 0;
	int32		queue_id = 0;

	/*
	 * A message's lease under a session lock comes back with its session's
	 * expiry, if the session was renewed meanwhile (a renew passes over a
	 * lease being settled). Read first, with no other partition lock held.
	 */
	if (u->existed && !u->renew && u->prev.session_key > 0 && u->prev.has_token &&
		u->prev.subqueue == SBQ_SUBQUEUE_MAIN)
		session_until = sbq_lease_session_until(&u->key, u->prev.session_key,
												u->prev.queue_id,
												u->prev.locked_until);

	LWLockAcquire(lock, LW_EXCLUSIVE);
	entry = sbq_lease_find(&u->key, hash);
	if (entry != NULL && entry->subqueue == SBQ_SUBQUEUE_MAIN && !sbq_lease_unclaiming)
		queue_id = entry->queue_id;
	if (entry != NULL)
	{
		if (u->renew)
		{
			/* only if nobody changed the lease since */
			if (entry->state == SBQ_LEASE_HELD && entry->has_token &&
				memcmp(entry->token.data, u->prev.token.data, UUID_LEN) == 0 &&
				entry->locked_until == u->renewed_until)
			{
				entry->locked_until = u->prev.locked_until;
				sbq_lease_note_until(entry->locked_until);
			}
		}
		else if (entry->owner == sbq_my_proc() && entry->state != SBQ_LEASE_HELD)
		{
			if (u->existed)
			{
				*entry = u->prev;
				if (session_until > entry->locked_until)
					entry->locked_until = session_until;
				if (entry->has_token)
					sbq_lease_note_until(entry->locked_until);
			}
			else
				sbq_lease_remove(&u->key, hash);
		}
	}
	LWLockRelease(lock);
	/* a lock that ends, or ends sooner, than a scan may have taken it to */
	if (queue_id != 0)
		sbq_qstate_free_lower(u->key.epoch, queue_id, u->key.seq);
}

/* Apply one change at commit: claims are held, settled leases are gone. */
static void
sbq_lease_apply(const void *undo_entry)
{
	const SbqLeaseUndo *u = undo_entry;
	uint32		hash;
	LWLock	   *lock;
	SbqLease   *entry;
	int32		queue_id = 0;

	if (u->renew)
		return;
	lock = sbq_lease_locate_key(&u->key, &hash);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	entry = sbq_lease_find(&u->key, hash);
	if (entry != NULL && entry->owner == sbq_my_proc() && entry->state != SBQ_LEASE_HELD)
	{
		if (entry->state == SBQ_LEASE_SETTLING)
		{
			if (!entry->row_goes && entry->subqueue == SBQ_SUBQUEUE_MAIN)
				queue_id = entry->queue_id;
			/* its delivery leaves the table before the counts have it */
			if (entry->delivered)
				sbq_lease_publish_begin();
			sbq_lease_remove(&u->key, hash);
		}
		else
		{
			entry->state = SBQ_LEASE_HELD;
			entry->owner = -1;
			entry->delivered = entry->has_token &&
				entry->subqueue != SBQ_SUBQUEUE_SESSION;
		}
	}
	LWLockRelease(lock);

	/*
	 * A lock ended before its expiry and the message may be receivable (an
	 * abandon, say): a receive's scan may have passed it while it was held.
	 * Now that the lock is gone (and the transaction's rows are visible), no
	 * receive may start above it.
	 */
	if (queue_id != 0)
		sbq_qstate_free_lower(u->key.epoch, queue_id, u->key.seq);
}

static void sbq_lease_free_dropped(void);
static void sbq_shown_forget(void);

/*
 * sbq_lease_publish_end
 *		This transaction's counts are added (qstate.c's commit callback ran
 *		before this file's): readers of counts may read again (file header).
 *		Never fails.
 */
static void
sbq_lease_publish_end(void)
{
	SbqLeaseShare *share = sbq_my_share;

	if (!sbq_lease_publishing)
		return;
	sbq_lease_publishing = false;
	SpinLockAcquire(&share->mutex);
	share->publishing--;
	SpinLockRelease(&share->mutex);
}

/*
 * sbq_lease_at_commit
 *		Apply this transaction's changes: claims are held, settled leases are
 *		gone. Called by the commit callback, and first by the wake-up
 *		callback (wait.c), so that a woken receiver never finds a lease that
 *		the waking transaction ended. Never fails.
 */
void
sbq_lease_at_commit(void)
{
	sbq_undo_commit(&sbq_lease_log);
}

/*
 * sbq_lease_xact_callback
 *		At commit, claims become held locks, settled leases go, and so do the
 *		leases of what the transaction dropped; at abort every change is
 *		undone, newest first. Neither can fail (see the file header). A
 *		transaction with changes cannot be prepared.
 */
static void
sbq_lease_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (sbq_undo_count(&sbq_lease_log) > 0)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that has received or settled sbqueue messages under locks in shared memory"),
						 errdetail("Its receives, settlements, maintenance, or a purge or delete of a queue whose messages are locked in shared memory, changed locks that no process would own once it is prepared."),
						 errhint("Receive and settle outside prepared transactions, or set \"sbqueue.memory_locks\" to off before the transaction receives: its receives then lock in the message rows, which a prepared transaction can keep (not under a session lock: those stay in shared memory).")));
			/* the leases of what it dropped expire and are swept instead */
			sbq_ndrops = 0;
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			sbq_shown_forget();
			sbq_lease_freed = false;
			sbq_lease_at_commit();
			/* after qstate.c's callback, which added the counts */
			sbq_lease_publish_end();
			sbq_lease_free_dropped();
			sbq_lease_epoch = InvalidOid;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			sbq_lease_publish_end();
			sbq_shown_forget();
			sbq_lease_freed = false;
			sbq_lease_unclaiming = false;
			sbq_undo_abort(&sbq_lease_log);
			sbq_ndrops = 0;
			sbq_lease_epoch = InvalidOid;
			break;
		case XACT_EVENT_PREPARE:
			sbq_shown_forget();
			sbq_lease_freed = false;
			sbq_lease_epoch = InvalidOid;
			break;
		default:
			break;
	}
}

/*
 * sbq_lease_subxact_callback
 *		A subtransaction that aborts undoes its changes and forgets its
 *		drops; one that commits hands them to its parent.
 */
static void
sbq_lease_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						   SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	int			i;

	/* what the views read from shared memory changes with what is undone */
	if (event == SUBXACT_EVENT_ABORT_SUB)
		sbq_shared_change_gen++;
	sbq_undo_subxact(&sbq_lease_log, event);
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		while (sbq_ndrops > 0 && sbq_drops[sbq_ndrops - 1].level >= level)
			sbq_ndrops--;
		/* the storage section ends if it was opened in it, not inside it */
		if (sbq_storage_subxact_aborted(mySubid))
			sbq_lease_epoch = InvalidOid;
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		for (i = sbq_ndrops - 1; i >= 0 && sbq_drops[i].level >= level; i--)
			sbq_drops[i].level = level - 1;
	}
}

/* ----------------------------------------------------------- dropped things */

static void
sbq_lease_note_drop(Oid dbid, Oid epoch)
{
	if (sbq_ndrops >= (int) lengthof(sbq_drops))
		return;
	/* its count must come down as its entries go (at commit) */
	if (dbid == MyDatabaseId)
		(void) sbq_lease_share();
	sbq_drops[sbq_ndrops].dbid = dbid;
	sbq_drops[sbq_ndrops].epoch = epoch;
	sbq_drops[sbq_ndrops].level = GetCurrentTransactionNestLevel();
	sbq_ndrops++;
}

/*
 * sbq_lease_forget_incarnation
 *		The tables of this database's incarnation epoch change layout
 *		(dist_layout.c): its leases, session locks and what shared memory
 *		knows of its queues go at commit, as after a DROP.
 */
void
sbq_lease_forget_incarnation(Oid epoch)
{
	if (sbq_lease_hash != NULL)
		sbq_lease_note_drop(MyDatabaseId, epoch);
}

/*
 * sbq_lease_object_access
 *		object_access_hook: note a DROP of a database, or of sbq.queues (so of
 *		the extension, or an incarnation of it), whose leases go at commit.
 */
static void
sbq_lease_object_access(ObjectAccessType access, Oid classId, Oid objectId,
						int subId, void *arg)
{
	if (sbq_prev_object_access)
		sbq_prev_object_access(access, classId, objectId, subId, arg);
	if (access != OAT_DROP || sbq_lease_hash == NULL)
		return;
	if (classId == DatabaseRelationId)
		sbq_lease_note_drop(objectId, InvalidOid);
	else if (classId == RelationRelationId && subId == 0)
	{
		Oid			nsp = get_rel_namespace(objectId);
		char	   *relname;

		if (!OidIsValid(nsp) || nsp != get_namespace_oid("sbq", true))
			return;
		relname = get_rel_name(objectId);
		/* or a shard of it, distributed (distributed.c): "queues_<shard id>" */
		if (relname != NULL &&
			(strcmp(relname, "queues") == 0 ||
			 (strncmp(relname, "queues_", 7) == 0 && relname[7] != '\0' &&
			  strspn(relname + 7, "0123456789") == strlen(relname + 7))))
			sbq_lease_note_drop(MyDatabaseId, objectId);
	}
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
 * sbq_lease_free_dropped
 *		At commit: remove every entry of the dropped databases and
 *		incarnations, and the dropped databases' shares. Never fails.
 */
static void
sbq_lease_free_dropped(void)
{
	HASH_SEQ_STATUS status;
	SbqLease   *entry;
	int			i;

	if (sbq_ndrops == 0 || sbq_lease_hash == NULL)
	{
		sbq_ndrops = 0;
		return;
	}
	sbq_lease_lock_all(LW_EXCLUSIVE);
	hash_seq_init(&status, sbq_lease_hash);
	while ((entry = (SbqLease *) hash_seq_search(&status)) != NULL)
	{
		for (i = 0; i < sbq_ndrops; i++)
		{
			if (entry->key.dbid == sbq_drops[i].dbid &&
				(!OidIsValid(sbq_drops[i].epoch) || entry->key.epoch == sbq_drops[i].epoch))
			{
				SbqLeaseKey key = entry->key;

				(void) hash_search(sbq_lease_hash, &key, HASH_REMOVE, NULL);
				if (key.dbid == MyDatabaseId && sbq_my_share != NULL)
				{
					SpinLockAcquire(&sbq_my_share->mutex);
					sbq_my_share->count--;
					SpinLockRelease(&sbq_my_share->mutex);
				}
				break;
			}
		}
	}
	sbq_lease_unlock_all();

	/* and what shared memory knows of their queues */
	for (i = 0; i < sbq_ndrops; i++)
		sbq_qstate_forget_all(sbq_drops[i].dbid, sbq_drops[i].epoch);

	LWLockAcquire(sbq_shares_lock(), LW_EXCLUSIVE);
	for (i = 0; i < sbq_ndrops; i++)
		if (!OidIsValid(sbq_drops[i].epoch) && sbq_drops[i].dbid != MyDatabaseId)
			(void) hash_search(sbq_lease_shares, &sbq_drops[i].dbid, HASH_REMOVE, NULL);
	LWLockRelease(sbq_shares_lock());
	sbq_ndrops = 0;
}

/*
 * sbq_lease_init
 *		Per backend, at load: the transaction callbacks; with the preload,
 *		also the object access hook.
 */
void
sbq_lease_init(bool preload)
{
	RegisterXactCallback(sbq_lease_xact_callback, NULL);
	RegisterSubXactCallback(sbq_lease_subxact_callback, NULL);
	if (preload)
	{
		sbq_prev_object_access = object_access_hook;
		object_access_hook = sbq_lease_object_access;
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
 *		(sbq_lease_unclaim). FULL: this database's share, or the table, has
 *		no room.
 */
SbqClaimResult
sbq_lease_claim(int64 seq, int32 queue_id, int16 subqueue, TimestampTz now,
				int32 *prev_count)
{
	SbqLeaseKey key;
	uint32		hash;
	LWLock	   *lock;
	SbqLease   *entry;

	sbq_lease_reserve(1);
	lock = sbq_lease_locate(seq, &key, &hash);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	entry = sbq_lease_find(&key, hash);
	if (entry != NULL && sbq_lease_settled_by_me(entry))
	{
		/* settled in this transaction: the row has what is to be kept */
		sbq_lease_record(&key, entry);
		*prev_count = 0;
	}
	else if (entry != NULL)
	{
		if (!sbq_lease_expired(entry, now))
		{
			LWLockRelease(lock);
			return SBQ_CLAIM_BUSY;
		}
		sbq_lease_record(&key, entry);
		*prev_count = entry->delivery_count;
	}
	else
	{
		entry = sbq_lease_insert(&key, hash);
		if (entry == NULL)
		{
			LWLockRelease(lock);
			return SBQ_CLAIM_FULL;
		}
		sbq_lease_record(&key, NULL);
		entry->delivered = false;
		*prev_count = 0;
	}
	entry->queue_id = queue_id;
	entry->subqueue = subqueue;
	entry->state = SBQ_LEASE_CLAIMED;
	entry->has_token = false;
	entry->row_goes = false;
	entry->owner = sbq_my_proc();
	entry->delivery_count = 0;
	entry->locked_until = 0;
	memset(&entry->token, 0, sizeof(pg_uuid_t));
	entry->session_key = 0;
	entry->lo = 0;
	entry->hi = 0;
	/* delivered stays: a lease taken over counts until this commits */
	LWLockRelease(lock);
	return SBQ_CLAIM_OK;
}

/*
 * This transaction's entry for seq, with its partition lock held
 * exclusively; the caller releases it. Errors only after releasing it.
 */
static SbqLease *
sbq_lease_mine(int64 seq, SbqLeaseKey *key, uint32 *hash, LWLock **lock)
{
	SbqLease   *entry;

	*lock = sbq_lease_locate(seq, key, hash);
	LWLockAcquire(*lock, LW_EXCLUSIVE);
	entry = sbq_lease_find(key, *hash);
	if (entry == NULL || entry->owner != sbq_my_proc() || entry->state == SBQ_LEASE_HELD)
	{
		LWLockRelease(*lock);
		elog(ERROR, "sbqueue lease of message " INT64_FORMAT " is not this transaction's", seq);
	}
	return entry;
}

/*
 * Give a claim its lock: token, expiry and delivery count; session_key is
 * the session whose lock a message's lease lives under (0: none).
 */
void
sbq_lease_grant(int64 seq, const pg_uuid_t *token, TimestampTz until, int32 delivery_count,
				int64 session_key)
{
	SbqLeaseKey key;
	uint32		hash;
	LWLock	   *lock;
	SbqLease   *entry = sbq_lease_mine(seq, &key, &hash, &lock);

	sbq_shared_change_gen++;
	entry->session_key = session_key;
	entry->token = *token;
	entry->has_token = true;
	entry->locked_until = until;
	entry->delivery_count = delivery_count;
	sbq_lease_note_until(until);
	if (entry->subqueue == SBQ_SUBQUEUE_SESSION && sbq_my_share != NULL)
	{
		SpinLockAcquire(&sbq_my_share->mutex);
		if (until < sbq_my_share->session_until)
			sbq_my_share->session_until = until;
		SpinLockRelease(&sbq_my_share->mutex);
	}
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

	sbq_shared_change_gen++;
	entry->state = SBQ_LEASE_SETTLING;
	entry->row_goes = false;
	entry->has_token = false;
	LWLockRelease(lock);
}

/* Give back the latest change this transaction made to seq's entry, now. */
void
sbq_lease_unclaim(int64 seq)
{
	int			i;

	for (i = sbq_undo_count(&sbq_lease_log) - 1; i >= 0; i--)
	{
		const SbqLeaseUndo *u = sbq_undo_entry(&sbq_lease_log, i);

		if (u->key.seq == seq && u->key.epoch == sbq_lease_epoch &&
			u->key.dbid == MyDatabaseId)
		{
			sbq_shared_change_gen++;
			/* a claim never granted: no receive passed it as held */
			sbq_lease_unclaiming = true;
			sbq_undo_undo_now(&sbq_lease_log, i);
			sbq_lease_unclaiming = false;
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
 *		row_goes: the settlement takes the message out of the queue (a
 *		complete); any other lets the free hint down at commit (qstate.c).
 */
bool
sbq_lease_settle(int64 seq, const pg_uuid_t *token, int32 queue_id, int16 subqueue,
				 TimestampTz now, bool row_goes, int32 *delivery_count)
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
		sbq_lease_record(&key, entry);
		if (!row_goes)
			sbq_lease_freed = true;
		/* on the entry, not the record: the commit may meet an older record first */
		entry->row_goes = row_goes;
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
	bool		shorter = false;

	sbq_lease_reserve(1);
	lock = sbq_lease_locate(seq, &key, &hash);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	entry = sbq_lease_find(&key, hash);
	if (entry != NULL && sbq_lease_matches(entry, token, queue_id, subqueue, now))
	{
		/* sooner (the queue's lock duration was cut): the sweep must know */
		shorter = until < entry->locked_until;
		if (shorter)
			sbq_lease_note_until(until);
		if (entry->state == SBQ_LEASE_HELD)
		{
			SbqLeaseUndo *u = sbq_lease_record(&key, entry);

			u->renew = true;
			u->renewed_until = until;
			entry->locked_until = until;
			ok = true;
		}
		else if (entry->state == SBQ_LEASE_CLAIMED && entry->owner == sbq_my_proc())
		{
			sbq_lease_record(&key, entry);
			entry->locked_until = until;
			ok = true;
		}
	}
	LWLockRelease(lock);
	/* and a receive may have passed it as held until the later time */
	if (ok && shorter && subqueue == SBQ_SUBQUEUE_MAIN)
		sbq_qstate_free_lower(key.epoch, queue_id, seq);
	return ok;
}

/* ---------------------------------------------------------------- sessions */

/*
 * A session lock is an entry of this table too (SBQ_SUBQUEUE_SESSION), keyed
 * by the negated key of its session's row, so that it never meets a
 * message's. It is taken (sbq_lease_claim, sbq_lease_grant), renewed and
 * ended (sbq_lease_settle) as a message's lease is; lo and hi are the range
 * of sequence numbers locked under it. The leases of its messages carry its
 * key (session_key) and the same expiry: renewing the session lock renews
 * them, and ending it ends them, in one transaction (session_mem.c), so a
 * session lock that expires lets its messages' leases expire with it and be
 * counted as deliveries, as a message lock's expiry is.
 */

/*
 * sbq_lease_session
 *		Whether the session lock of key (with token, when not NULL) is held
 *		now: committed, or taken by this transaction; one another transaction
 *		is ending counts until it commits. Its expiry and range into *out.
 */
bool
sbq_lease_session(int64 key, const pg_uuid_t *token, int32 queue_id, TimestampTz now,
				  SbqSessionLease *out)
{
	SbqLeaseKey lkey;
	uint32		hash;
	LWLock	   *lock;
	SbqLease   *entry;
	bool		held = false;

	if (sbq_lease_hash == NULL)
		return false;
	lock = sbq_lease_locate(-key, &lkey, &hash);
	LWLockAcquire(lock, LW_SHARED);
	entry = sbq_lease_find(&lkey, hash);
	if (entry != NULL && entry->has_token && entry->subqueue == SBQ_SUBQUEUE_SESSION &&
		entry->queue_id == queue_id && entry->locked_until > now &&
		(token == NULL || memcmp(entry->token.data, token->data, UUID_LEN) == 0))
	{
		if (entry->owner == sbq_my_proc())
			held = entry->state == SBQ_LEASE_CLAIMED;
		else
			held = entry->state != SBQ_LEASE_CLAIMED;
		if (held && out != NULL)
		{
			out->token = entry->token;
			out->locked_until = entry->locked_until;
			out->lo = entry->lo;
			out->hi = entry->hi;
		}
	}
	LWLockRelease(lock);
	return held;
}

/* Widen the range of sequence numbers locked under the session lock of key. */
void
sbq_lease_session_widen(int64 key, int64 lo, int64 hi)
{
	SbqLeaseKey lkey;
	uint32		hash;
	LWLock	   *lock = sbq_lease_locate(-key, &lkey, &hash);
	SbqLease   *entry;

	LWLockAcquire(lock, LW_EXCLUSIVE);
	entry = sbq_lease_find(&lkey, hash);
	if (entry != NULL && entry->subqueue == SBQ_SUBQUEUE_SESSION)
	{
		entry->lo = entry->lo == 0 ? lo : Min(entry->lo, lo);
		entry->hi = Max(entry->hi, hi);
	}
	LWLockRelease(lock);
}

/*
 * sbq_lease_session_of
 *		The session key of the valid lease of token on message seq (one this
 *		transaction has not settled): 0 when it lives under no session lock,
 *		-1 when there is no such lease.
 */
int64
sbq_lease_session_of(int64 seq, const pg_uuid_t *token, int32 queue_id, TimestampTz now)
{
	SbqLeaseKey key;
	uint32		hash;
	LWLock	   *lock;
	SbqLease   *entry;
	int64		session = -1;

	if (sbq_lease_hash == NULL)
		return -1;
	lock = sbq_lease_locate(seq, &key, &hash);
	LWLockAcquire(lock, LW_SHARED);
	entry = sbq_lease_find(&key, hash);
	if (entry != NULL && sbq_lease_matches(entry, token, queue_id, SBQ_SUBQUEUE_MAIN, now) &&
		(entry->owner == sbq_my_proc() ? entry->state == SBQ_LEASE_CLAIMED :
		 entry->state != SBQ_LEASE_CLAIMED))
		session = entry->session_key;
	LWLockRelease(lock);
	return session;
}

/*
 * sbq_lease_in_session
 *		Whether seq's entry is a valid lease under the session lock of key,
 *		committed or this transaction's (a receive passes over those).
 */
bool
sbq_lease_in_session(int64 seq, int64 key, TimestampTz now)
{
	SbqLeaseKey lkey;
	uint32		hash;
	LWLock	   *lock;
	SbqLease   *entry;
	bool		in = false;

	lock = sbq_lease_locate(seq, &lkey, &hash);
	LWLockAcquire(lock, LW_SHARED);
	entry = sbq_lease_find(&lkey, hash);
	if (entry != NULL && entry->has_token && entry->session_key == key &&
		entry->locked_until > now &&
		(entry->state == SBQ_LEASE_HELD ||
		 (entry->state == SBQ_LEASE_CLAIMED && entry->owner == sbq_my_proc())))
		in = true;
	LWLockRelease(lock);
	return in;
}

/*
 * sbq_lease_group
 *		End (until 0) or renew (to until) the valid lease of message seq under
 *		the session lock of key, for this transaction: an ended one goes at
 *		commit without its delivery being counted (the row keeps its count).
 *		SBQ_GROUP_WAIT: another transaction is settling or taking it (wait
 *		for it, then ask again).
 */
SbqGroupResult
sbq_lease_group(int64 seq, int64 key, TimestampTz now, TimestampTz until)
{
	SbqLeaseKey lkey;
	uint32		hash;
	LWLock	   *lock;
	SbqLease   *entry;
	SbqGroupResult r = SBQ_GROUP_NONE;

	sbq_lease_reserve(1);
	lock = sbq_lease_locate(seq, &lkey, &hash);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	entry = sbq_lease_find(&lkey, hash);
	if (entry == NULL || !entry->has_token || entry->session_key != key ||
		entry->subqueue != SBQ_SUBQUEUE_MAIN || entry->locked_until <= now)
		r = SBQ_GROUP_NONE;
	else if (entry->state != SBQ_LEASE_HELD && entry->owner != sbq_my_proc())
		r = SBQ_GROUP_WAIT;
	else if (entry->state == SBQ_LEASE_SETTLING)
		r = SBQ_GROUP_NONE;		/* this transaction settles it already */
	else
	{
		SbqLeaseUndo *u = sbq_lease_record(&lkey, entry);

		if (until == 0)
		{
			entry->state = SBQ_LEASE_SETTLING;
			entry->row_goes = false;
			entry->has_token = false;
			entry->owner = sbq_my_proc();
		}
		else if (entry->state == SBQ_LEASE_HELD)
		{
			u->renew = true;
			u->renewed_until = until;
			entry->locked_until = until;
		}
		else
			entry->locked_until = until;
		r = SBQ_GROUP_DONE;
	}
	LWLockRelease(lock);
	return r;
}

/*
 * sbq_lease_owner
 *		Whether another transaction owns seq's entry (claims it, or settles
 *		it): 1 with its *vxid, to wait for its end (VirtualXactLock); 2 when
 *		it is ending now (ask again shortly); 0 when none does. The vxid is
 *		read under the partition lock, which that transaction's commit needs
 *		before it lets the entry go, so it is that transaction's.
 */
int
sbq_lease_owner(int64 seq, VirtualTransactionId *vxid)
{
	SbqLeaseKey key;
	uint32		hash;
	LWLock	   *lock;
	SbqLease   *entry;
	int			r = 0;

	lock = sbq_lease_locate(seq, &key, &hash);
	LWLockAcquire(lock, LW_SHARED);
	entry = sbq_lease_find(&key, hash);
	if (entry != NULL && entry->state != SBQ_LEASE_HELD && entry->owner != sbq_my_proc() &&
		entry->owner >= 0 && entry->owner < (int32) ProcGlobal->allProcCount)
	{
		GET_VXID_FROM_PGPROC(*vxid, ProcGlobal->allProcs[entry->owner]);
		r = VirtualTransactionIdIsValid(*vxid) ? 1 : 2;
	}
	LWLockRelease(lock);
	return r;
}

/*
 * sbq_lease_take_sessions
 *		Take up to max session locks of queue_id (of every queue, those of
 *		queues deleted since included, when 0) that have expired as markers
 *		of this transaction, into out (seq: the session's key): they go at
 *		its commit (the leases of their messages expired with them, and the
 *		sweep ends those). Returns how many.
 */
int
sbq_lease_take_sessions(int32 queue_id, TimestampTz now, SbqExpiredLease *out, int max)
{
	HASH_SEQ_STATUS status;
	SbqLease   *entry;
	SbqLeaseShare *share;
	TimestampTz next = SBQ_NO_EXPIRY;
	int			n = 0;

	if (sbq_lease_hash == NULL || max <= 0)
		return 0;
	sbq_lease_reserve(max);
	share = sbq_my_share;
	if (share == NULL)
		return 0;
	/* nothing to scan for until a session lock of this database may have expired */
	SpinLockAcquire(&share->mutex);
	if (share->session_until > now)
	{
		SpinLockRelease(&share->mutex);
		return 0;
	}
	SpinLockRelease(&share->mutex);

	sbq_lease_lock_all(LW_EXCLUSIVE);
	hash_seq_init(&status, sbq_lease_hash);
	while ((entry = (SbqLease *) hash_seq_search(&status)) != NULL)
	{
		if (entry->key.dbid != MyDatabaseId ||
			entry->subqueue != SBQ_SUBQUEUE_SESSION || !entry->has_token)
			continue;
		/* a dropped incarnation's: no pass comes for it, the sweep frees it */
		if (sbq_lease_orphan(entry, now))
			continue;
		if (n >= max || entry->state != SBQ_LEASE_HELD || !sbq_lease_expired(entry, now) ||
			entry->key.epoch != sbq_lease_epoch ||
			(queue_id != 0 && entry->queue_id != queue_id))
		{
			/*
			 * It stays: an expiry to come back for (now: one left expired).
			 * Another incarnation's too: the mark is the database's, and on
			 * a node of several shard groups the pass over another group
			 * comes for it.
			 */
			next = Min(next, Max(entry->locked_until, now));
			continue;
		}
		sbq_lease_record(&entry->key, entry);
		out[n].seq = -entry->key.seq;	/* the session's key */
		out[n].queue_id = entry->queue_id;
		out[n].subqueue = entry->subqueue;
		out[n].delivery_count = 0;
		entry->state = SBQ_LEASE_SETTLING;
		entry->row_goes = false;
		entry->has_token = false;
		entry->owner = sbq_my_proc();
		n++;
	}
	/* what this transaction took comes back if it aborts: look again then */
	SpinLockAcquire(&share->mutex);
	share->session_until = n > 0 ? Min(next, now) : next;
	SpinLockRelease(&share->mutex);
	sbq_lease_unlock_all();
	return n;
}

/* ------------------------------------------------ durable paths, maintenance */

/*
 * sbq_lease_absent
 *		For a statement that moves a message through the table, after it has
 *		locked the message's row: whether no entry is there (or only this
 *		transaction's own settlement). A lease, valid or expired, or another
 *		transaction's claim, means the message is not the statement's to move.
 *		Adds nothing, so it never fails for want of room. True without a
 *		lease table.
 */
bool
sbq_lease_absent(int64 seq)
{
	SbqLeaseKey key;
	uint32		hash;
	LWLock	   *lock;
	SbqLease   *entry;
	bool		absent;

	if (sbq_lease_hash == NULL)
		return true;
	lock = sbq_lease_locate(seq, &key, &hash);
	LWLockAcquire(lock, LW_SHARED);
	entry = sbq_lease_find(&key, hash);
	absent = entry == NULL || sbq_lease_settled_by_me(entry);
	LWLockRelease(lock);
	return absent;
}

/* Whether an entry of another incarnation of this database can go now. */
static inline bool
sbq_lease_orphan(const SbqLease *entry, TimestampTz now)
{
	return entry->key.dbid == MyDatabaseId && entry->key.epoch != sbq_lease_epoch &&
		entry->state == SBQ_LEASE_HELD &&
		(!entry->has_token || entry->locked_until <= now) &&
		!sbq_dist_epoch_live(entry->key.epoch);
}

/*
 * sbq_lease_take_expired
 *		Take up to max expired leases of this incarnation (of one queue, or
 *		of all when queue_id is 0) as markers of this transaction, into out.
 *		The caller stores their delivery counts (or dead-letters the messages)
 *		in the same transaction; at its commit the leases are gone. Expired
 *		leases of older incarnations are taken too (not into out), and go at
 *		commit as well.
 *
 *		The scan is skipped while nothing of this database can have expired
 *		(its share keeps the earliest expiry), so it costs a look at one
 *		spinlock until a lease runs out.
 */
int
sbq_lease_take_expired(int32 queue_id, TimestampTz now, SbqExpiredLease *out, int max)
{
	HASH_SEQ_STATUS status;
	SbqLease   *entry;
	SbqLeaseShare *share;
	TimestampTz next = SBQ_NO_EXPIRY;
	bool		complete = true;
	int			n = 0;
	int			orphans = 0;

	if (sbq_lease_hash == NULL || max <= 0)
		return 0;
	sbq_lease_reserve(max);
	share = sbq_my_share;
	if (share == NULL)
		return 0;
	SpinLockAcquire(&share->mutex);
	if (share->min_until > now || share->count == 0)
	{
		SpinLockRelease(&share->mutex);
		return 0;
	}
	SpinLockRelease(&share->mutex);

	sbq_lease_lock_all(LW_EXCLUSIVE);
	hash_seq_init(&status, sbq_lease_hash);
	while ((entry = (SbqLease *) hash_seq_search(&status)) != NULL)
	{
		if (entry->key.dbid != MyDatabaseId)
			continue;
		if (sbq_lease_orphan(entry, now) && n + orphans < max)
		{
			/*
			 * Of a dropped incarnation (the caller holds the lock of the
			 * current one's sbq.queues, so no other is alive): it goes at
			 * this transaction's commit, with nothing to store.
			 */
			sbq_lease_record(&entry->key, entry);
			entry->state = SBQ_LEASE_SETTLING;
			entry->row_goes = false;
			entry->has_token = false;
			entry->owner = sbq_my_proc();
			orphans++;
			continue;
		}
		if (n + orphans >= max || !sbq_lease_expired(entry, now) ||
			entry->subqueue == SBQ_SUBQUEUE_SESSION ||
			entry->key.epoch != sbq_lease_epoch ||
			(queue_id != 0 && entry->queue_id != queue_id))
		{
			/*
			 * It stays: keep the earliest expiry of what stays. An expired
			 * session lock is not this scan's (sbq_lease_take_sessions).
			 */
			if (entry->subqueue == SBQ_SUBQUEUE_SESSION && sbq_lease_expired(entry, now))
				continue;
			if (entry->has_token && entry->locked_until < next)
				next = entry->locked_until;
			if (n + orphans >= max &&
				(sbq_lease_expired(entry, now) || sbq_lease_orphan(entry, now)))
				complete = false;
			continue;
		}
		sbq_lease_record(&entry->key, entry);
		out[n].seq = entry->key.seq;
		out[n].queue_id = entry->queue_id;
		out[n].subqueue = entry->subqueue;
		out[n].delivery_count = entry->delivery_count;
		entry->state = SBQ_LEASE_SETTLING;
		entry->row_goes = false;
		entry->has_token = false;
		entry->owner = sbq_my_proc();
		n++;
	}
	/*
	 * What this transaction took comes back if it aborts: its earliest
	 * expiry is noted again then (sbq_lease_restore).
	 */
	SpinLockAcquire(&share->mutex);
	share->min_until = complete ? next : 0;
	SpinLockRelease(&share->mutex);
	sbq_lease_unlock_all();
	return n;
}

/*
 * sbq_lease_due_all
 *		For the launcher: every database that holds leases, with the time
 *		before which none of them expires (0: one has, or a scan stopped
 *		short), up to max of them; returns how many.
 */
int
sbq_lease_due_all(Oid *dbids, TimestampTz *until, int max)
{
	HASH_SEQ_STATUS status;
	SbqLeaseShare *share;
	int			n = 0;

	if (sbq_lease_shares == NULL)
		return 0;
	LWLockAcquire(sbq_shares_lock(), LW_SHARED);
	hash_seq_init(&status, sbq_lease_shares);
	while ((share = (SbqLeaseShare *) hash_seq_search(&status)) != NULL)
	{
		int32		count;
		TimestampTz min_until;

		SpinLockAcquire(&share->mutex);
		count = share->count;
		min_until = Min(share->min_until, share->session_until);
		SpinLockRelease(&share->mutex);
		if (count <= 0 || min_until == SBQ_NO_EXPIRY)
			continue;
		if (n >= max)
		{
			hash_seq_term(&status);
			break;
		}
		dbids[n] = share->dbid;
		until[n] = min_until;
		n++;
	}
	LWLockRelease(sbq_shares_lock());
	return n;
}

/*
 * sbq_lease_take_queue
 *		For a purge or a delete of a queue: take the leases of its messages
 *		(of one sub-queue, or all when subqueue < 0), valid or expired, as
 *		this transaction's settlements, so that they go at its commit.
 *		Returns how many.
 */
int
sbq_lease_take_queue(int32 queue_id, int subqueue)
{
	HASH_SEQ_STATUS status;
	SbqLease   *entry;
	SbqLeaseShare *share;
	int			max;
	int			n = 0;

	if (sbq_lease_hash == NULL)
		return 0;
	sbq_lease_reserve(0);
	share = sbq_my_share;
	if (share == NULL)
		return 0;
	SpinLockAcquire(&share->mutex);
	max = share->count;
	SpinLockRelease(&share->mutex);
	if (max <= 0)
		return 0;
	/* more can come meanwhile: those expire, and a sweep takes them */
	sbq_lease_reserve(max);

	sbq_lease_lock_all(LW_EXCLUSIVE);
	hash_seq_init(&status, sbq_lease_hash);
	while ((entry = (SbqLease *) hash_seq_search(&status)) != NULL)
	{
		if (entry->key.dbid != MyDatabaseId || entry->key.epoch != sbq_lease_epoch ||
			entry->queue_id != queue_id || entry->state != SBQ_LEASE_HELD ||
			(subqueue >= 0 && entry->subqueue != subqueue))
			continue;
		sbq_lease_record(&entry->key, entry);
		entry->state = SBQ_LEASE_SETTLING;
		entry->row_goes = false;
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
 *		another transaction that is still running (for a multixact, by any
 *		of its members).
 */
bool
sbq_row_busy(TransactionId xmax)
{
	return TransactionIdIsNormal(xmax) && !TransactionIdIsCurrentTransactionId(xmax) &&
		TransactionIdIsInProgress(xmax);
}

bool
sbq_row_busy_infomask(TransactionId xmax, uint16 infomask)
{
	if (infomask & HEAP_XMAX_INVALID)
		return false;
	if (infomask & HEAP_XMAX_IS_MULTI)
	{
		MultiXactMember *members;
		int			n;
		int			i;
		bool		busy = false;

		/*
		 * A member that updates the row or holds it for update, and that is
		 * another transaction still running (not this one, nor one of its
		 * subtransactions). Share lockers alone cannot change the row.
		 */
		n = GetMultiXactIdMembers((MultiXactId) xmax, &members, false,
								  HEAP_XMAX_IS_LOCKED_ONLY(infomask));
		for (i = 0; i < n && !busy; i++)
			busy = members[i].status >= MultiXactStatusForNoKeyUpdate &&
				sbq_row_busy(members[i].xid);
		if (n > 0)
			pfree(members);
		return busy;
	}
	return sbq_row_busy(xmax);
}

/*
 * What the current scan passed to sbq.lease_free: the lowest and highest
 * sequence numbers (or -1), the first it refused for a reason that has no
 * end known in advance (or -1), and the earliest expiry of the locks it
 * refused for (see sbq_lease_scan).
 */
static int64 sbq_scan_first = -1;
static int64 sbq_scan_last = -1;
static int64 sbq_scan_open = -1;
static TimestampTz sbq_scan_until = DT_NOEND;

void
sbq_lease_scan_start(void)
{
	sbq_scan_first = -1;
	sbq_scan_last = -1;
	sbq_scan_open = -1;
	sbq_scan_until = DT_NOEND;
}

int64
sbq_lease_scan_first(void)
{
	return sbq_scan_first;
}

/*
 * sbq_lease_freed_here
 *		Whether this transaction has settled a lease and left its message in
 *		the queue: the free hint does not know of that until it commits, so
 *		its receives scan from the head hint.
 */
bool
sbq_lease_freed_here(void)
{
	return sbq_lease_freed;
}

/*
 * sbq_lease_scan
 *		For the free hint (qstate.c): the highest sequence number the current
 *		scan passed (*last), the first it refused that may become receivable
 *		at any moment (*open: a lock stored in the row, another receive's
 *		claim, a row another transaction changes with no lease on it; or -1),
 *		and the earliest expiry of the leases it refused (*until). A lease
 *		that ends before its expiry lowers the free hint (sbq_lease_apply,
 *		sbq_lease_restore), so below the first open row the rows refused stay
 *		unreceivable until *until unless the hint comes down.
 */
void
sbq_lease_scan(int64 *last, int64 *open, TimestampTz *until)
{
	*last = sbq_scan_last;
	*open = sbq_scan_open;
	*until = sbq_scan_until;
}

/* sbq.lease_free refuses seq: note it for sbq_lease_scan (until 0: open). */
static inline bool
sbq_scan_refuse(int64 seq, TimestampTz until)
{
	if (until == 0)
	{
		if (sbq_scan_open < 0 || seq < sbq_scan_open)
			sbq_scan_open = seq;
	}
	else if (until < sbq_scan_until)
		sbq_scan_until = until;
	return false;
}

/*
 * sbq.lease_free(seq, now, xmax, locked_until): whether a leasing receive
 * may try to claim the message: no lock stored in the row is valid, no other
 * transaction is changing the row (xmax), and it has no entry or an expired
 * lease. It is the only filter of its scan, so it sees every row the scan
 * passes, locked or not: the first one is where the queue's head is. It
 * notes why it refuses a row (sbq_lease_scan).
 * Internal: only sbqueue's own statements may call it.
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
	bool		busy;
	bool		free;
	TimestampTz until = 0;

	sbq_lease_internal("sbq.lease_free");
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		PG_RETURN_BOOL(false);
	seq = PG_GETARG_INT64(0);
	now = PG_GETARG_TIMESTAMPTZ(1);
	if (sbq_scan_first < 0 || seq < sbq_scan_first)
		sbq_scan_first = seq;
	if (seq > sbq_scan_last)
		sbq_scan_last = seq;
	if (!PG_ARGISNULL(3) && PG_GETARG_TIMESTAMPTZ(3) > now)
		PG_RETURN_BOOL(sbq_scan_refuse(seq, 0));
	busy = sbq_row_busy(PG_GETARG_TRANSACTIONID(2));
	if (sbq_lease_hash == NULL)
		PG_RETURN_BOOL(busy ? sbq_scan_refuse(seq, 0) : true);
	lock = sbq_lease_locate(seq, &key, &hash);
	LWLockAcquire(lock, LW_SHARED);
	entry = sbq_lease_find(&key, hash);
	free = entry == NULL || sbq_lease_settled_by_me(entry) || sbq_lease_expired(entry, now);

	/*
	 * A lease of a token held, being settled by another transaction, or
	 * granted by this one, ends at its expiry or when the lease goes; a
	 * claim of another receive, or a bare marker, may go at any moment.
	 */
	if (!free && entry->has_token &&
		(entry->state != SBQ_LEASE_CLAIMED || entry->owner == sbq_my_proc()))
		until = entry->locked_until;
	LWLockRelease(lock);
	if (!free)
		PG_RETURN_BOOL(sbq_scan_refuse(seq, until));
	PG_RETURN_BOOL(busy ? sbq_scan_refuse(seq, 0) : true);
}

/*
 * sbq.lease_slot(seq): sbq_lease_absent, for the statements of the durable
 * paths. Internal: only sbqueue's own statements may call it.
 */
Datum
sbq_lease_slot_sql(PG_FUNCTION_ARGS)
{
	sbq_lease_internal("sbq.lease_slot");
	PG_RETURN_BOOL(sbq_lease_absent(PG_GETARG_INT64(0)));
}

/* --------------------------------------------------- what a snapshot has seen */

/*
 * The leases shown to the judges of locks (peek, and the lease probes that
 * the views sbq_queue_stats and sbq_metrics call), per snapshot. They judge
 * locks at the start of the statement, so that a statement that peeks and
 * reads the stats sees one instant. The rows they read come from the
 * snapshot, but the lease table is not versioned: a settlement, a sweep or a
 * receive that dead-letters a message, committed while the statement runs,
 * takes the lease away while the snapshot still shows the row unchanged. So
 * a committed lease shown under a snapshot goes on being shown under the
 * same snapshot once the entry is gone (or is another session's uncommitted
 * claim): the transaction that ended it is not visible to that snapshot.
 * For peek, only to a message of the same queue and subqueue. A new lease is
 * shown as it is (only a receive that commits meanwhile makes one).
 *
 * "The same snapshot" is the active one, known by what it sees
 * (sbq_snapshot_key): under READ COMMITTED each statement has its own, under
 * REPEATABLE READ the transaction has one. Backend-local, bounded
 * by this database's share of the table, and dropped when the transaction
 * ends or another snapshot judges.
 */
typedef struct SbqShownLease
{
	SbqLeaseKey key;
	SbqLease	lease;
} SbqShownLease;

static HTAB *sbq_shown = NULL;
static SbqSnapshotKey sbq_shown_snap;

/* Drop the leases shown (never fails). */
static void
sbq_shown_forget(void)
{
	if (sbq_shown != NULL)
		hash_destroy(sbq_shown);
	sbq_shown = NULL;
}

/*
 * The leases shown under the active snapshot: NULL when none are (and
 * create is false), or when no snapshot is active.
 */
static HTAB *
sbq_shown_leases(bool create)
{
	SbqSnapshotKey now;

	if (!sbq_snapshot_key(&now))
		return NULL;
	/* the snapshot alone: not the query, nor this transaction's own changes */
	now.gen = 0;
	if (sbq_shown != NULL && memcmp(&now, &sbq_shown_snap, sizeof(now)) != 0)
		sbq_shown_forget();
	if (sbq_shown == NULL && create)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(SbqLeaseKey);
		ctl.entrysize = sizeof(SbqShownLease);
		ctl.hcxt = TopMemoryContext;
		sbq_shown = hash_create("sbqueue leases shown", 64, &ctl,
								HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		sbq_shown_snap = now;
	}
	return sbq_shown;
}

/* Remember that the active snapshot was shown this committed lease. */
static void
sbq_shown_note(const SbqLease *lease)
{
	HTAB	   *shown = sbq_shown_leases(true);
	SbqShownLease *s;

	if (shown == NULL ||
		(hash_get_num_entries(shown) >= sbq_lease_db_limit() &&
		 hash_search(shown, &lease->key, HASH_FIND, NULL) == NULL))
		return;
	s = (SbqShownLease *) hash_search(shown, &lease->key, HASH_ENTER, NULL);
	s->lease = *lease;
}

/* The lease shown under the active snapshot for key, if any. */
static bool
sbq_shown_find(const SbqLeaseKey *key, SbqLease *copy)
{
	HTAB	   *shown = sbq_shown_leases(false);
	SbqShownLease *s;

	if (shown == NULL)
		return false;
	s = (SbqShownLease *) hash_search(shown, key, HASH_FIND, NULL);
	if (s == NULL)
		return false;
	*copy = s->lease;
	return true;
}

/*
 * Copy the lease of seq, if it has a token and is a committed lock (or this
 * transaction's own claim): another session's claim that has not committed
 * is no lock yet, for peek and the counts. A judge of locks (judge: see
 * above) is also shown a committed lease that it was shown under the same
 * snapshot and that has ended since.
 */
static bool
sbq_lease_show(Oid epoch, int64 seq, SbqLease *copy, bool judge)
{
	SbqLeaseKey key;
	uint32		hash;
	LWLock	   *lock;
	SbqLease   *entry;
	bool		found = false;
	bool		mine = false;
	bool		committed = false;

	if (sbq_lease_hash == NULL || !OidIsValid(epoch))
		return false;
	lock = sbq_lease_locate_in(epoch, seq, &key, &hash);
	LWLockAcquire(lock, LW_SHARED);
	entry = sbq_lease_find(&key, hash);
	if (entry != NULL && sbq_lease_settled_by_me(entry))
		mine = true;
	else if (entry != NULL && entry->has_token &&
			 (entry->state != SBQ_LEASE_CLAIMED || entry->owner == sbq_my_proc()))
	{
		*copy = *entry;
		found = true;
		committed = entry->state != SBQ_LEASE_CLAIMED;
	}
	LWLockRelease(lock);
	if (!judge || mine)
		return found;
	/* outside the partition lock: these allocate, and may fail */
	if (committed)
		sbq_shown_note(copy);
	else if (!found)
		found = sbq_shown_find(&key, copy);
	return found;
}

/*
 * Whether a call of the SQL probes below judges locks for a statement: it
 * does outside sbqueue's own statements (from the views), not inside them.
 */
static inline bool
sbq_lease_judging(void)
{
	return !OidIsValid(sbq_lease_epoch);
}

/* The incarnation to show leases of: the section's, or the catalog's. */
static Oid
sbq_lease_show_epoch(void)
{
	if (OidIsValid(sbq_lease_epoch))
		return sbq_lease_epoch;
	return sbq_storage_epoch();
}

/*
 * sbq_lease_lookup
 *		The lock of the message seq if a lease holds it (valid or expired):
 *		its expiry and delivery count, for a message of the queue's
 *		subqueue. For peek, a judge of locks: a lease shown under the active
 *		snapshot stays shown once ended (sbq_lease_show).
 */
bool
sbq_lease_lookup(int64 seq, int32 queue_id, int16 subqueue, TimestampTz *until,
				 int32 *delivery_count)
{
	SbqLease	lease;

	if (!sbq_lease_show(sbq_lease_show_epoch(), seq, &lease, true))
		return false;
	/* a lease shown before, of a message that has moved since */
	if (lease.queue_id != queue_id || lease.subqueue != subqueue)
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

	if (!sbq_lease_show(sbq_lease_show_epoch(), PG_GETARG_INT64(0), &lease,
						sbq_lease_judging()))
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(lease.locked_until);
}

/* sbq.lease_count(seq): the delivery count of the message's lease, NULL without one */
Datum
sbq_lease_count_sql(PG_FUNCTION_ARGS)
{
	SbqLease	lease;

	if (!sbq_lease_show(sbq_lease_show_epoch(), PG_GETARG_INT64(0), &lease,
						sbq_lease_judging()))
		PG_RETURN_NULL();
	PG_RETURN_INT32(lease.delivery_count);
}

/*
 * sbq.session_until(session_key): the expiry of the session's lock in shared
 * memory (session_mem.c), NULL without one
 */
Datum
sbq_session_until_sql(PG_FUNCTION_ARGS)
{
	SbqLease	lease;
	int64		key = PG_GETARG_INT64(0);

	if (key <= 0 || !sbq_lease_show(sbq_lease_show_epoch(), -key, &lease, sbq_lease_judging()) ||
		lease.subqueue != SBQ_SUBQUEUE_SESSION)
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(lease.locked_until);
}

/*
 * Whether a lease is a delivery that the "received" counter does not have
 * yet (it gets it when the lease ends: settled, or taken over after it
 * expired), as this transaction sees it: another transaction's entry as it
 * was committed (delivered, see the file header); this one's own claims are
 * deliveries to it, and what it settles is in its own counts already.
 */
static inline bool
sbq_lease_pending(const SbqLease *entry, Oid epoch)
{
	if (entry->key.dbid != MyDatabaseId || entry->key.epoch != epoch)
		return false;
	if (entry->state != SBQ_LEASE_HELD && entry->owner == sbq_my_proc())
		return entry->state == SBQ_LEASE_CLAIMED && entry->has_token &&
			entry->subqueue != SBQ_SUBQUEUE_SESSION;
	return entry->delivered;
}

/*
 * The pending deliveries of every queue of this database, counted in one
 * scan of the table for the snapshot that qstate.c counts for
 * (sbq_counts_seen): a view that reads 100 queues scanned it 100 times.
 * NULL when not counted (then each call counts for itself).
 */
typedef struct SbqPendingSeen
{
	int32		queue_id;
	int64		n;
} SbqPendingSeen;

static HTAB *sbq_pending_seen = NULL;

/* How often a reader tries for an instant when no commit publishes (file header). */
#define SBQ_PUBLISH_TRIES		2000

/*
 * Take every partition lock, shared, at an instant when no commit of this
 * database is between removing delivered leases and adding their counts
 * (file header). After SBQ_PUBLISH_TRIES tries (a commit stuck there, which
 * nothing should make) it takes them anyway.
 */
static void
sbq_lease_lock_all_quiet(SbqLeaseShare *share)
{
	int			tries;

	for (tries = 0;; tries++)
	{
		bool		busy = false;

		sbq_lease_lock_all(LW_SHARED);
		if (share == NULL || tries >= SBQ_PUBLISH_TRIES)
			return;
		SpinLockAcquire(&share->mutex);
		busy = share->publishing > 0;
		SpinLockRelease(&share->mutex);
		if (!busy)
			return;
		/* the commit may need a partition lock to go on: let go, and wait */
		sbq_lease_unlock_all();
		CHECK_FOR_INTERRUPTS();
		pg_usleep(tries < 20 ? 10L : 100L);
	}
}

/*
 * sbq_lease_count_pending_all
 *		Count the pending deliveries of every queue, together with what
 *		read_counts(arg) reads (qstate.c's counts gathered in shared
 *		memory), at one instant for both: under every partition lock, while
 *		no commit of the database publishes (file header). read_counts runs
 *		under those locks and must not allocate; false from it (it had no
 *		room) is returned, and nothing is counted.
 */
bool
sbq_lease_count_pending_all(bool (*read_counts) (void *arg), void *arg)
{
	HASHCTL		ctl;
	HTAB	   *seen;
	HASH_SEQ_STATUS status;
	SbqLease   *entry;
	Oid			epoch;
	int32	   *ids;
	int			max;
	int			n = 0;
	bool		complete = true;
	int			i;

	if (sbq_pending_seen != NULL)
		hash_destroy(sbq_pending_seen);
	sbq_pending_seen = NULL;
	if (sbq_lease_hash == NULL)
		return read_counts(arg);

	/* room first: nothing is allocated under the partition locks */
	epoch = sbq_lease_show_epoch();
	max = Max(sbq_max_locks, sbq_lease_db_limit());
	ids = palloc(sizeof(int32) * Max(max, 1));
	sbq_lease_lock_all_quiet(sbq_lease_share());
	if (!read_counts(arg))
	{
		sbq_lease_unlock_all();
		pfree(ids);
		return false;
	}
	hash_seq_init(&status, sbq_lease_hash);
	while ((entry = (SbqLease *) hash_seq_search(&status)) != NULL)
	{
		if (!sbq_lease_pending(entry, epoch))
			continue;
		if (n >= max)
		{
			complete = false;
			hash_seq_term(&status);
			break;
		}
		ids[n++] = entry->queue_id;
	}
	sbq_lease_unlock_all();
	if (!complete)
	{
		pfree(ids);
		return true;
	}

	ctl.keysize = sizeof(int32);
	ctl.entrysize = sizeof(SbqPendingSeen);
	ctl.hcxt = TopMemoryContext;
	seen = hash_create("sbqueue pending deliveries seen", 64, &ctl,
					   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	for (i = 0; i < n; i++)
	{
		SbqPendingSeen *p;
		bool		found;

		p = (SbqPendingSeen *) hash_search(seen, &ids[i], HASH_ENTER, &found);
		p->n = found ? p->n + 1 : 1;
	}
	pfree(ids);
	sbq_pending_seen = seen;
	return true;
}

/*
 * sbq.lease_pending_received(queue_id): deliveries of the queue under a lease
 * that the "received" counter does not have yet, as counted for the active
 * snapshot together with the counts gathered in shared memory
 * (sbq_counts_seen); without an active snapshot, counted now.
 */
Datum
sbq_lease_pending_sql(PG_FUNCTION_ARGS)
{
	int32		queue_id = PG_GETARG_INT32(0);
	Oid			epoch;
	HASH_SEQ_STATUS status;
	SbqLease   *entry;
	int64		n = 0;

	if (sbq_lease_hash == NULL)
		PG_RETURN_INT64(0);
	if (sbq_counts_seen() && sbq_pending_seen != NULL)
	{
		SbqPendingSeen *s = hash_search(sbq_pending_seen, &queue_id, HASH_FIND, NULL);

		PG_RETURN_INT64(s != NULL ? s->n : 0);
	}
	epoch = sbq_lease_show_epoch();
	sbq_lease_lock_all(LW_SHARED);
	hash_seq_init(&status, sbq_lease_hash);
	while ((entry = (SbqLease *) hash_seq_search(&status)) != NULL)
	{
		if (entry->queue_id == queue_id && sbq_lease_pending(entry, epoch))
			n++;
	}
	sbq_lease_unlock_all();
	PG_RETURN_INT64(n);
}

/*
 * sbq_lock_table_sql
 *		sbq_lock_table(): how full the table of locks in shared memory is, for
 *		monitoring. capacity is sbqueue.max_locks, in_use the entries of the
 *		whole server (NULL but for roles with the privileges of
 *		pg_read_all_stats: other tenants' activity is their own),
 *		database_share the most entries this database may hold and
 *		database_in_use what it holds: message locks, session locks and the
 *		markers of messages that a committed receive took. Without the
 *		preload there is no table: capacity and the rest are 0.
 */
Datum
sbq_lock_table_sql(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};
	int64		in_use = 0;
	int32		db_in_use = 0;
	SbqLeaseShare *share;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	if (sbq_lease_hash != NULL)
	{
		in_use = (int64) hash_get_num_entries(sbq_lease_hash);
		LWLockAcquire(sbq_shares_lock(), LW_SHARED);
		share = (SbqLeaseShare *) hash_search(sbq_lease_shares, &MyDatabaseId, HASH_FIND, NULL);
		if (share != NULL)
		{
			SpinLockAcquire(&share->mutex);
			db_in_use = share->count;
			SpinLockRelease(&share->mutex);
		}
		LWLockRelease(sbq_shares_lock());
	}
	values[0] = Int32GetDatum(sbq_lease_hash != NULL ? sbq_max_locks : 0);
	values[1] = Int64GetDatum(in_use);
	nulls[1] = !has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
	values[2] = Int32GetDatum(sbq_lease_hash != NULL ? sbq_lease_db_limit() : 0);
	values[3] = Int32GetDatum(db_in_use);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
