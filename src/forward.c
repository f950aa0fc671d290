/*-------------------------------------------------------------------------
 *
 * forward.c
 *	  Auto-forwarding: a send to a queue or subscription with forward_to
 *	  stores the message in its destination instead, in the sender's
 *	  transaction; the dead letters of one with
 *	  forward_dead_lettered_messages_to are moved to its destination by
 *	  maintenance.
 *
 * The destination is a queue or a topic (whose subscriptions may forward in
 * turn). A message is forwarded at most SBQ_MAX_FORWARD_HOPS times (R10.15);
 * one that would be forwarded again, or whose destination is gone (R10.16),
 * requires a session id it does not have (R10.17), or is larger than the
 * destination takes, is dead-lettered where it is, with the reason, so that
 * a forwarding chain never fails a send and never loses a message. The
 * destination's name lock is taken in share mode as a send takes it, so its
 * delete waits for the send. Forwarding is the entity's: the sender needs
 * the right to send to the first entity only (the one who set forward_to
 * needed it on the destination). The source's duplicate detection does not
 * apply; the destination's does.
 *
 * A message counts its hops across dead-letterings (transfer_hops, 0.11): a
 * message stored where it was forwarded to records how many it made, and a
 * dead letter forwarded on starts from there. So a chain through
 * dead-letter sub-queues ends after four hops too, also one that a filter
 * error or an expiry would otherwise turn into an endless loop.
 *
 * Dead letters are forwarded by each maintenance pass (sbq_forward_dead_letters),
 * not where they are made: a message is dead-lettered in a dozen places (a
 * settlement, a receive or maintenance finding a lock or a time to live run
 * out, a topic's filter error, a forward that failed), and one place that
 * moves them keeps each of those as cheap as it is. A forwarded dead letter
 * arrives as a new active message with its reason, description and source
 * (R10.20) under a new sequence number there (as a resubmitted one); the
 * active dead letters that no valid lock holds go, lowest number first. One that cannot go (its hops are
 * spent, its destination requires a session id it lacks, or it is too
 * large there) is deferred in the dead-letter sub-queue, where it stays for
 * an operator (sbq_peek shows it; sbq_resubmit moves it). While the
 * destination does not exist, the dead letters wait for it. A forward that
 * fails with an error is retried message by message in subtransactions, and
 * a message that still fails is deferred, so that one message cannot stop
 * maintenance. A pass waits for no name lock: an entity being changed, or a
 * destination being created or deleted, is left to a later pass.
 *
 * Owns: the count of hops of the send in progress (reset by every storage
 * section), whether a pass forwards now. Locks: the destinations' name
 * locks, shared (in a pass, only those free now); the row locks of the dead
 * letters it moves (SKIP LOCKED).
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/forward.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lockdefs.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "lease.h"
#include "storage_core.h"
#include "topics.h"

/* how many times the message being sent has been forwarded so far */
static int	sbq_forward_hops = 0;

/* a maintenance pass forwards dead letters: it takes no name lock it would wait for */
static bool sbq_forward_in_pass = false;

/* and found one held (the error it raised is for a later pass, not the pass's end) */
static bool sbq_forward_name_held = false;

/* The dead letters a pass forwards at most from one entity */
#define SBQ_FORWARD_DLQ_BATCH	SBQ_MAINTAIN_BATCH
/* and at most one by one, each in a subtransaction, after an error */
#define SBQ_FORWARD_DLQ_RETRIES	32

/*
 * The active dead letters of $1 that no valid lock holds ($2 now), $3 at
 * most, lowest sequence number first, locked: their numbers only (a body
 * may have hundreds of megabytes: each is read alone, stmt_dlq_row).
 */
static SbqStatement stmt_dlq_pick = {"dead letters to forward", 3, {INT4OID, TIMESTAMPTZOID,
		INT4OID},
	"SELECT m.sequence_number FROM sbq.dead_letters m"
	" WHERE m.queue_id = $1 AND m.subqueue = 1 AND m.state = 0"
	"   AND (m.locked_until IS NULL OR m.locked_until <= $2) AND " LEASE_SLOT
	" ORDER BY m.queue_id, m.subqueue, m.state, m.sequence_number LIMIT $3"
	" FOR UPDATE OF m SKIP LOCKED"
};

/* a picked dead letter, its columns as sbq_dlq_props reads them */
static SbqStatement stmt_dlq_row = {"a dead letter to forward", 1, {INT8OID},
	"SELECT m.sequence_number, m.message_id, m.session_id, m.correlation_id, m.subject,"
	"       m.content_type, m.reply_to, m.reply_to_session_id, m.to_address,"
	"       m.time_to_live, m.application_properties, m.body, m.dead_letter_reason,"
	"       m.dead_letter_error_description, m.dead_letter_source, m.transfer_hops"
	"  FROM sbq.dead_letters m WHERE m.sequence_number = $1 AND m.state = 0"
};

/* take a dead letter out (its row lock held): no lease came in between */
static SbqStatement stmt_dlq_take = {"take a dead letter to forward", 1, {INT8OID},
	"DELETE FROM sbq.dead_letters m WHERE m.sequence_number = $1 AND " LEASE_SLOT
};

/* defer a dead letter that cannot be forwarded, where it is */
static SbqStatement stmt_dlq_keep = {"keep a dead letter that cannot be forwarded", 1,
		{INT8OID},
	"UPDATE sbq.dead_letters m SET state = 1"
	" WHERE m.sequence_number = $1 AND m.state = 0 AND " LEASE_SLOT
};

/* sbq_forward_reset: a storage section begins: no send in progress. */
void
sbq_forward_reset(void)
{
	sbq_forward_hops = 0;
}

/* How many hops the message being stored has made (send.c stores it with them). */
int
sbq_forward_hops_now(void)
{
	return sbq_forward_hops;
}

/*
 * The address of a destination, its name lock taken; with nowait only when
 * no one creates or deletes it now (false, nothing taken).
 */
static bool
sbq_forward_address_if(const char *name, SbqAddress *addr, bool nowait)
{
	addr->name = pstrdup(name);
	addr->key = sbq_name_key(CurrentMemoryContext, name);
	addr->subqueue = SBQ_SUBQUEUE_MAIN;
	return sbq_lock_queue_name_if(addr->key, AccessShareLock, nowait);
}

/*
 * The address of a destination, its name lock taken. In a maintenance pass
 * the lock is not waited for: the error (55P03) leaves the dead letters to a
 * later pass (sbq_forward_dlq_sub).
 */
static void
sbq_forward_address(const char *name, SbqAddress *addr)
{
	if (!sbq_forward_address_if(name, addr, sbq_forward_in_pass))
	{
		sbq_forward_name_held = true;
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("\"%s\" is being created or deleted", name),
				 errdetail("Maintenance forwards dead letters there in a later pass.")));
	}
}

/*
 * sbq_forward_problem
 *		Why a message cannot be forwarded from source to to (*dest, looked up
 *		here), as a dead-letter reason and description; NULL when it can.
 */
static const char *
sbq_forward_problem(const SbqQueue *source, const char *to, const SbqSendProps *props,
					Datum *bodies, int nbodies, SbqQueue *dest, char **description)
{
	SbqAddress	addr;
	int64		psize;
	int			i;

	if (sbq_forward_hops >= SBQ_MAX_FORWARD_HOPS)
	{
		*description = psprintf("The message was forwarded %d times and would be forwarded again, to \"%s\".",
								sbq_forward_hops, to);
		return "MaxTransferHopCountExceeded";
	}
	sbq_forward_address(to, &addr);
	if (!sbq_storage_find_to_forward(&addr, dest))
	{
		*description = psprintf("\"%s\" forwards to \"%s\", which does not exist.",
								source->name, to);
		return "MessagingEntityNotFound";
	}
	if (dest->requires_session &&
		(props->session_id == NULL || VARSIZE_ANY_EXHDR(props->session_id) == 0))
	{
		*description = psprintf("\"%s\" requires sessions, and the message has no session id.",
								dest->name);
		return "Session id is null.";
	}
	psize = sbq_props_size(props);
	for (i = 0; i < nbodies; i++)
		if (psize > SBQ_MAX_PROPERTIES_SIZE ||
			(int64) VARSIZE_ANY_EXHDR(DatumGetPointer(bodies[i])) + psize > dest->max_message_size)
		{
			*description = psprintf("\"%s\" takes messages of at most %d bytes.",
									dest->name, dest->max_message_size);
			return "MessageSizeExceededException";
		}
	return NULL;
}

/* Store a message where it is and dead-letter it there at once, with the reason. */
static void
sbq_forward_refused(const SbqQueue *source, const SbqSendProps *props, Datum body,
					const char *default_content_type, const char *reason,
					const char *description, int64 *seq)
{
	SbqQueue	here = *source;

	here.forward_to = NULL;
	here.has_dup_window = false;
	(void) sbq_storage_send(&here, props, &body, 1, default_content_type, seq);
	sbq_dead_letter_copy(source, *seq, reason, description);
}

/*
 * sbq_forward_send
 *		A send to source, which forwards: into its destination, or, when a
 *		message cannot go there, into source's dead-letter sub-queue (see the
 *		file's header); a batch with a message too large for the destination
 *		forwards the others. The source's default time to live caps the
 *		messages', as a send to it would. seqs gets what the send where each
 *		message lands returns. Returns nbodies.
 */
int
sbq_forward_send(const SbqQueue *source, const SbqSendProps *props, Datum *bodies,
				 int nbodies, const char *default_content_type, int64 *seqs)
{
	SbqQueue	dest;
	SbqSendProps p = *props;
	char	   *description = NULL;
	const char *reason;
	int			i;

	CHECK_FOR_INTERRUPTS();
	if (source->has_default_ttl &&
		(!p.has_ttl || sbq_interval_usecs(&p.ttl) > sbq_interval_usecs(&source->default_ttl)))
	{
		p.has_ttl = true;
		p.ttl = source->default_ttl;
	}
	reason = sbq_forward_problem(source, source->forward_to, &p, bodies, nbodies, &dest,
								 &description);
	if (reason != NULL && strcmp(reason, "MessageSizeExceededException") != 0)
	{
		for (i = 0; i < nbodies; i++)
			sbq_forward_refused(source, &p, bodies[i], default_content_type, reason,
								description, &seqs[i]);
		return nbodies;
	}
	sbq_forward_hops++;
	if (reason == NULL)
		(void) sbq_storage_send(&dest, &p, bodies, nbodies, default_content_type, seqs);
	else
	{
		/* one by one: only those too large stay behind */
		int64		psize = sbq_props_size(&p);

		for (i = 0; i < nbodies; i++)
		{
			CHECK_FOR_INTERRUPTS();
			if (psize > SBQ_MAX_PROPERTIES_SIZE ||
				(int64) VARSIZE_ANY_EXHDR(DatumGetPointer(bodies[i])) + psize > dest.max_message_size)
			{
				/* it stays where it is: a hop it does not make */
				sbq_forward_hops--;
				sbq_forward_refused(source, &p, bodies[i], default_content_type, reason,
									description, &seqs[i]);
				sbq_forward_hops++;
			}
			else
				(void) sbq_storage_send(&dest, &p, &bodies[i], 1, default_content_type, &seqs[i]);
		}
	}
	sbq_forward_hops--;
	return nbodies;
}

/*
 * sbq_refuse_forwarding_receive
 *		SB010 for a receive from a queue or subscription that forwards its
 *		messages (R10.14): nothing stays there to receive; and from the
 *		dead-letter sub-queue of one that forwards its dead letters, which
 *		maintenance moves (forward.c).
 */
void
sbq_refuse_forwarding_receive(const SbqQueue *queue, const SbqAddress *addr)
{
	if (queue->forward_to != NULL && addr->subqueue == SBQ_SUBQUEUE_MAIN)
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_INVALID_OPERATION),
				 errmsg("cannot receive from \"%s\", which forwards its messages to \"%s\"",
						queue->name, queue->forward_to),
				 errdetail("A receiver cannot be created on an entity with auto-forwarding enabled."),
				 errhint("Receive from \"%s\".", queue->forward_to)));
	if (queue->forward_dlq_to != NULL && addr->subqueue == SBQ_SUBQUEUE_DLQ)
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_INVALID_OPERATION),
				 errmsg("cannot receive from the dead-letter sub-queue of \"%s\", which forwards its dead letters to \"%s\"",
						queue->name, queue->forward_dlq_to),
				 errdetail("A receiver cannot be created on an entity with auto-forwarding enabled."),
				 errhint("Receive from \"%s\"; sbq_peek shows the dead letters still here.",
						 queue->forward_dlq_to)));
}

/* ------------------------------------------------ dead letters, by maintenance */

/* A text column of the picked rows, copied, or NULL. */
static text *
sbq_dlq_text(SPITupleTable *rows, uint64 row, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(rows->vals[row], rows->tupdesc, col, &isnull);

	return isnull ? NULL : DatumGetTextPCopy(d);
}

/*
 * sbq_dlq_props
 *		The send properties of picked dead letter row, its body into *body
 *		and its hops into *hops: what it was sent with, and its dead-letter
 *		reason, description and source, as a forwarded dead letter keeps them.
 */
static void
sbq_dlq_props(SPITupleTable *rows, uint64 row, SbqSendProps *p, Datum *body, int *hops)
{
	bool		isnull;
	Datum		d;

	memset(p, 0, sizeof(*p));
	p->message_id = sbq_dlq_text(rows, row, 2);
	p->session_id = sbq_dlq_text(rows, row, 3);
	p->correlation_id = sbq_dlq_text(rows, row, 4);
	p->subject = sbq_dlq_text(rows, row, 5);
	p->content_type = sbq_dlq_text(rows, row, 6);
	p->reply_to = sbq_dlq_text(rows, row, 7);
	p->reply_to_session_id = sbq_dlq_text(rows, row, 8);
	p->to_address = sbq_dlq_text(rows, row, 9);
	d = SPI_getbinval(rows->vals[row], rows->tupdesc, 10, &isnull);
	if (!isnull)
	{
		p->has_ttl = true;
		p->ttl = *DatumGetIntervalP(d);
	}
	d = SPI_getbinval(rows->vals[row], rows->tupdesc, 11, &isnull);
	p->application_properties = isnull ? NULL : DatumGetJsonbPCopy(d);
	*body = PointerGetDatum(sbq_dlq_text(rows, row, 12));
	p->dead_letter_reason = sbq_dlq_text(rows, row, 13);
	p->dead_letter_description = sbq_dlq_text(rows, row, 14);
	p->dead_letter_source = sbq_dlq_text(rows, row, 15);
	d = SPI_getbinval(rows->vals[row], rows->tupdesc, 16, &isnull);
	*hops = isnull ? 0 : DatumGetInt16(d);
}

/* the memory of the dead letter being forwarded: one at a time */
static MemoryContext sbq_dlq_cxt = NULL;

/* set: the error raised is a dead letter its destination stored nowhere */
static bool sbq_dlq_nowhere = false;

/*
 * sbq_forward_one_dead_letter
 *		Forward the picked dead letter row of source (its number in rows), or
 *		defer it where it is when it cannot go; *forwarded or *kept counts
 *		it. False when it was neither (a lease came in between). What it
 *		reads goes into sbq_dlq_cxt, emptied first.
 */
static bool
sbq_forward_one_dead_letter(const SbqQueue *source, SPITupleTable *rows, uint64 row,
							int64 *forwarded, int64 *kept)
{
	SbqSendProps p;
	SbqQueue	dest;
	Datum		body;
	Datum		seqd;
	int64		seq;
	int			hops;
	bool		isnull;
	char	   *description = NULL;
	const char *reason;
	SPITupleTable *one;
	MemoryContext old;
	uint64		stored;

	CHECK_FOR_INTERRUPTS();
	MemoryContextReset(sbq_dlq_cxt);
	seq = DatumGetInt64(SPI_getbinval(rows->vals[row], rows->tupdesc, 1, &isnull));
	seqd = Int64GetDatum(seq);
	if (sbq_exec(&stmt_dlq_row, &seqd, NULL) != 1)
		return false;
	one = SPI_tuptable;
	old = MemoryContextSwitchTo(sbq_dlq_cxt);
	sbq_dlq_props(one, 0, &p, &body, &hops);
	SPI_freetuptable(one);
	sbq_forward_hops = hops;
	reason = sbq_forward_problem(source, source->forward_dlq_to, &p, &body, 1, &dest,
								 &description);
	MemoryContextSwitchTo(old);
	if (reason != NULL && strcmp(reason, "MessagingEntityNotFound") != 0)
	{
		sbq_forward_hops = 0;
		if (sbq_exec(&stmt_dlq_keep, &seqd, NULL) != 1)
			return false;
		(*kept)++;
		ereport(LOG,
				(errmsg("sbqueue: dead letter " INT64_FORMAT " of \"%s\" cannot be forwarded to \"%s\" and is deferred there",
						seq, source->name, source->forward_dlq_to),
				 errdetail("%s: %s", reason, description)));
		return true;
	}
	/* gone since the pick's look: the dead letters wait for it */
	if (reason != NULL || sbq_exec(&stmt_dlq_take, &seqd, NULL) != 1)
	{
		sbq_forward_hops = 0;
		return false;
	}
	old = MemoryContextSwitchTo(sbq_dlq_cxt);
	/* dead-lettered where the stored source says nothing: here */
	if (p.dead_letter_source == NULL)
		p.dead_letter_source = cstring_to_text(source->name);
	stored = sbq_storage_stored();
	sbq_forward_hops++;
	(void) sbq_storage_send(&dest, &p, &body, 1, NULL, &seq);
	sbq_forward_hops = 0;
	MemoryContextSwitchTo(old);
	/*
	 * A duplicate there, or a topic with no subscription for it: it stays. The
	 * error takes back its take; the caller defers it, as it defers the others
	 * that cannot go (at LOG, not as a failure).
	 */
	if (sbq_storage_stored() == stored)
	{
		sbq_dlq_nowhere = true;
		ereport(ERROR,
				(errcode(SBQ_ERRCODE_INVALID_OPERATION),
				 errmsg("\"%s\" stored nothing of dead letter " INT64_FORMAT, dest.name,
						DatumGetInt64(seqd)),
				 errdetail("A message with its id was sent there within the duplicate detection window, or no subscription of the topic takes it.")));
	}
	(*forwarded)++;
	return true;
}

/* Whether an error is one to leave to the pass (a cancel, a deadlock: it ends the pass). */
static bool
sbq_error_ends_pass(const ErrorData *edata)
{
	int			category = ERRCODE_TO_CATEGORY(edata->sqlerrcode);

	/* operator intervention, transaction rollback, resources, object state */
	return category == ERRCODE_TO_CATEGORY(ERRCODE_QUERY_CANCELED) ||
		category == ERRCODE_TO_CATEGORY(ERRCODE_T_R_SERIALIZATION_FAILURE) ||
		category == ERRCODE_TO_CATEGORY(ERRCODE_INSUFFICIENT_RESOURCES) ||
		category == ERRCODE_TO_CATEGORY(ERRCODE_LOCK_NOT_AVAILABLE) ||
		edata->elevel > ERROR;
}

/*
 * sbq_forward_dlq_sub
 *		Run the forward of rows first .. last-1 in a subtransaction: true when
 *		it committed; false when it failed with an error that leaves the pass
 *		going (logged; the subtransaction's work undone), *failed the row it
 *		was at.
 */
static bool
sbq_forward_dlq_sub(const SbqQueue *source, SPITupleTable *rows, uint64 first, uint64 last,
					int64 *forwarded, int64 *kept, uint64 *failed, bool *later)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	int64		counts[2] = {0, 0};	/* forwarded, kept: in memory, kept over a longjmp */
	volatile uint64 row = first;
	volatile bool ok = true;

	sbq_forward_name_held = false;
	sbq_dlq_nowhere = false;
	sbq_storage_subxact_begin();
	PG_TRY();
	{
		for (; row < last; row++)
			(void) sbq_forward_one_dead_letter(source, rows, row, &counts[0], &counts[1]);
		sbq_subxact_commit(cxt, owner);
	}
	PG_CATCH();
	{
		ErrorData  *edata = sbq_subxact_failed(cxt, owner);
		bool		isnull;

		sbq_forward_hops = 0;
		ok = false;
		/* a name lock not waited for: a later pass forwards (not a lock timeout) */
		if (sbq_forward_name_held && edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE)
			*later = true;
		else
		{
			if (sbq_error_ends_pass(edata) || row >= last)
				ReThrowError(edata);	/* (past the last row: the commit failed) */
			*failed = row;
			if (sbq_dlq_nowhere)
				ereport(LOG,
						(errmsg("sbqueue: dead letter " INT64_FORMAT " of \"%s\" cannot be forwarded to \"%s\" and is deferred there",
								DatumGetInt64(SPI_getbinval(rows->vals[row], rows->tupdesc, 1, &isnull)),
								source->name, source->forward_dlq_to),
						 errdetail("%s", edata->message)));
			else
				ereport(WARNING,
						(errmsg("sbqueue: forwarding dead letter " INT64_FORMAT " of \"%s\" to \"%s\" failed: %s",
								DatumGetInt64(SPI_getbinval(rows->vals[row], rows->tupdesc, 1, &isnull)),
								source->name, source->forward_dlq_to, edata->message),
						 errdetail("It is deferred in the dead-letter sub-queue.")));
		}
		FreeErrorData(edata);
	}
	PG_END_TRY();
	if (ok)
	{
		*forwarded += counts[0];
		*kept += counts[1];
	}
	return ok;
}

/*
 * sbq_forward_picked
 *		Forward the picked dead letters rows (n of them) of source, each
 *		subtransaction's name locks not waited for; true when there may be
 *		more.
 *
 *		All in one subtransaction; after an error, those before the failing
 *		one again (rolled back with it), the failing one deferred, and on
 *		from the next: a few subtransactions for each failure, and at most
 *		SBQ_FORWARD_DLQ_RETRIES failures a pass. A name lock held by another
 *		(a destination being created or deleted) ends the step: a later pass
 *		forwards what is left, nothing deferred for it.
 */
static bool
sbq_forward_picked(const SbqQueue *source, SPITupleTable *rows, uint64 n, int64 *forwarded,
				   int64 *kept)
{
	uint64		first = 0;
	uint64		failed = 0;
	int			failures = 0;
	bool		later = false;
	bool		nowhere;

	while (first < n)
	{
		Datum		seqd;
		bool		isnull;

		if (sbq_forward_dlq_sub(source, rows, first, n, forwarded, kept, &failed, &later))
			break;
		/* what failed was a dead letter stored nowhere (the flag of this run) */
		nowhere = sbq_dlq_nowhere;
		if (later)
			return false;		/* not "more": a later pass, not this one again */
		if (failed > first &&
			!sbq_forward_dlq_sub(source, rows, first, failed, forwarded, kept, &failed, &later))
		{
			/* what went through alone fails now: no more this pass */
			return true;
		}
		seqd = SPI_getbinval(rows->vals[failed], rows->tupdesc, 1, &isnull);
		if (sbq_exec(&stmt_dlq_keep, &seqd, NULL) == 1)
			(*kept)++;
		first = failed + 1;
		/* one stored nowhere is deferred as those that cannot go are: no failure */
		if (!nowhere && ++failures >= SBQ_FORWARD_DLQ_RETRIES)
			return true;
	}
	return n >= SBQ_FORWARD_DLQ_BATCH;
}

/*
 * sbq_forward_dead_letters
 *		One maintenance step for an entity with forward_dead_lettered_messages_to:
 *		forward its active dead letters that no valid lock holds, at most
 *		SBQ_FORWARD_DLQ_BATCH (see the file's header). Adds to *forwarded
 *		those forwarded and to *kept those deferred where they are; true
 *		when there may be more.
 *
 *		The entity's name is locked first, in share mode, and its properties
 *		read again under it: once an update that stops or moves forwarding
 *		has returned, no pass forwards by the old ones. The name lock comes
 *		before any row lock, as a delete takes them. A pass waits for no name
 *		lock: it has written rows of other entities by then (counts, expired
 *		locks), and a delete holding the name while it waits for those rows
 *		would deadlock with it. So while the entity's properties change, or
 *		a destination is created or deleted, the step is left to a later pass
 *		(false: "more" would run the pass again at once, while the name may
 *		stay held for long).
 */
bool
sbq_forward_dead_letters(const SbqQueue *queue, TimestampTz now, int64 *forwarded,
						 int64 *kept)
{
	Datum		values[3];
	SPITupleTable *rows;
	SbqAddress	self;
	SbqAddress	addr;
	SbqQueue	source;
	SbqQueue	dest;
	char	   *lock_key;
	uint64		n;
	volatile bool more = false;

	if (queue->forward_dlq_to == NULL || !sbq_hops_installed())
		return false;
	/* a subscription's properties change under its topic's name */
	self.name = queue->name;
	self.key = sbq_name_key(CurrentMemoryContext, queue->name);
	self.subqueue = SBQ_SUBQUEUE_MAIN;
	lock_key = pstrdup(self.key);
	(void) sbq_key_to_lock_key(lock_key);
	/* held: a later pass (not "more", which would run the pass again at once) */
	if (!sbq_lock_queue_name_if(lock_key, ShareLock, true))
		return false;
	if (!sbq_storage_find_queue(&self, &source) || source.queue_id != queue->queue_id ||
		source.forward_dlq_to == NULL)
		return false;
	/* while the destination does not exist, its dead letters wait */
	if (!sbq_forward_address_if(source.forward_dlq_to, &addr, true))
		return false;
	if (!sbq_storage_find_to_forward(&addr, &dest))
		return false;
	values[0] = Int32GetDatum(source.queue_id);
	values[1] = TimestampTzGetDatum(now);
	values[2] = Int32GetDatum(SBQ_FORWARD_DLQ_BATCH);
	n = sbq_exec(&stmt_dlq_pick, values, NULL);
	if (n == 0)
		return false;
	if (sbq_dlq_cxt == NULL)
		sbq_dlq_cxt = AllocSetContextCreate(TopMemoryContext, "sbqueue dead letter to forward",
											ALLOCSET_DEFAULT_SIZES);
	/* the later statements leave the picked rows as they are, until the section ends */
	rows = SPI_tuptable;
	sbq_forward_in_pass = true;
	PG_TRY();
	{
		more = sbq_forward_picked(&source, rows, n, forwarded, kept);
	}
	PG_FINALLY();
	{
		sbq_forward_in_pass = false;
	}
	PG_END_TRY();
	return more;
}
