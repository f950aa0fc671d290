/*-------------------------------------------------------------------------
 *
 * undo.c
 *	  Undo logs: what a transaction changed in a module's shared memory,
 *	  applied when it commits and undone when it aborts.
 *
 * lease.c and qstate.c change shared memory inside a transaction that may
 * still roll back: a receive claims a lease, a send adds counts. Each keeps
 * an undo log of those changes, with what it needs to finish or reverse each
 * one, and this file is that log:
 *
 *	- recording: sbq_undo_reserve() makes room for n more entries, before the
 *	  caller takes its locks, and is the only step that can fail;
 *	  sbq_undo_add() then takes one (zeroed, at the current transaction nest
 *	  level) and cannot fail. sbq_undo_forget_last() drops the newest entry
 *	  unapplied (it turned out to record nothing), sbq_undo_undo_now() undoes
 *	  one entry at once and drops it.
 *	- commit: sbq_undo_commit() applies every entry, oldest first, and
 *	  empties the log. abort: sbq_undo_abort() undoes every entry, newest
 *	  first, and empties it.
 *	- subtransactions: at the commit of one, its entries become its
 *	  parent's; at its abort, its own entries are undone, newest first, and
 *	  dropped (sbq_undo_subxact).
 *
 * The owner registers its own transaction callbacks and calls these from
 * them: it decides what each event means for its log (lease.c refuses
 * PREPARE while its log is not empty, qstate.c applies its log at PREPARE as
 * at commit) and does what else it must at that point. The owner's apply and
 * undo functions run in commit and abort callbacks, where an error cannot be
 * raised: they must not fail (no allocation, no ereport(ERROR)); nothing here
 * allocates at commit or abort either.
 *
 * Owns: each log's entries, in backend-local memory (TopMemoryContext), kept
 * for the life of the backend and reused. Locks: none; the owner's apply and
 * undo functions take the owner's locks.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/undo.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/memutils.h"

#include "undo.h"

static inline SbqUndoHeader *
sbq_undo_header(const SbqUndoLog *log, int i)
{
	return (SbqUndoHeader *) (log->entries + (Size) i * log->entry_size);
}

/*
 * sbq_undo_reserve
 *		Make room for n more entries: the step that can fail, to be taken
 *		before any lock the recording is made under.
 */
void
sbq_undo_reserve(SbqUndoLog *log, int n)
{
	if (log->n + n > log->max)
	{
		int			newmax = Max(log->first_max, Max(log->max * 2, log->n + n));

		if (log->entries == NULL)
			log->entries = MemoryContextAlloc(TopMemoryContext, log->entry_size * newmax);
		else
			log->entries = repalloc(log->entries, log->entry_size * newmax);
		log->max = newmax;
	}
}

/*
 * sbq_undo_add
 *		A new entry, zeroed, for a change made at the current transaction nest
 *		level; room for it was reserved. Cannot fail.
 */
void *
sbq_undo_add(SbqUndoLog *log)
{
	SbqUndoHeader *h;

	Assert(log->n < log->max);
	h = sbq_undo_header(log, log->n++);
	memset(h, 0, log->entry_size);
	h->level = GetCurrentTransactionNestLevel();
	return h;
}

/* Drop the newest entry without applying or undoing it. */
void
sbq_undo_forget_last(SbqUndoLog *log)
{
	Assert(log->n > 0);
	log->n--;
}

/* How many entries the current transaction has. */
int
sbq_undo_count(const SbqUndoLog *log)
{
	return log->n;
}

/* Entry i, 0 being the oldest. */
void *
sbq_undo_entry(const SbqUndoLog *log, int i)
{
	Assert(i >= 0 && i < log->n);
	return sbq_undo_header(log, i);
}

/* Undo entry i now, and drop it; the later entries keep their order. */
void
sbq_undo_undo_now(SbqUndoLog *log, int i)
{
	Assert(i >= 0 && i < log->n);
	log->undo(sbq_undo_header(log, i));
	memmove(sbq_undo_header(log, i), sbq_undo_header(log, i + 1),
			log->entry_size * (log->n - i - 1));
	log->n--;
}

/* Commit: apply every entry, oldest first, and empty the log. Cannot fail. */
void
sbq_undo_commit(SbqUndoLog *log)
{
	int			i;

	for (i = 0; i < log->n; i++)
		log->apply(sbq_undo_header(log, i));
	log->n = 0;
}

/* Abort: undo every entry, newest first, and empty the log. Cannot fail. */
void
sbq_undo_abort(SbqUndoLog *log)
{
	int			i;

	for (i = log->n - 1; i >= 0; i--)
		log->undo(sbq_undo_header(log, i));
	log->n = 0;
}

/*
 * sbq_undo_subxact
 *		The end of a subtransaction: at its abort its own entries are undone,
 *		newest first, and dropped; at its commit they become its parent's.
 *		Cannot fail.
 */
void
sbq_undo_subxact(SbqUndoLog *log, SubXactEvent event)
{
	int			level = GetCurrentTransactionNestLevel();
	int			i;

	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		while (log->n > 0 && sbq_undo_header(log, log->n - 1)->level >= level)
		{
			log->undo(sbq_undo_header(log, log->n - 1));
			log->n--;
		}
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		for (i = log->n - 1; i >= 0 && sbq_undo_header(log, i)->level >= level; i--)
			sbq_undo_header(log, i)->level = level - 1;
	}
}
