/*-------------------------------------------------------------------------
 *
 * undo.h
 *	  Undo logs (undo.c): a module's backend-local record of what the current
 *	  transaction changed in its shared memory, applied at commit and undone
 *	  at abort, subtransactions included. lease.c and qstate.c keep one each.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/undo.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SBQ_UNDO_H
#define SBQ_UNDO_H

#include "postgres.h"

#include "access/xact.h"

/* The start of every entry: undo.c's part of it. */
typedef struct SbqUndoHeader
{
	int			level;			/* transaction nest level of the change */
} SbqUndoHeader;

/* What to do with one entry at commit, or at abort. Must not fail. */
typedef void (*SbqUndoFn) (const void *entry);

/*
 * An undo log. The owner's entry type starts with an SbqUndoHeader; the
 * owner sets the first four fields (SBQ_UNDO_LOG), undo.c the rest.
 */
typedef struct SbqUndoLog
{
	Size		entry_size;		/* of the owner's entry type */
	int			first_max;		/* entries of the first allocation */
	SbqUndoFn	apply;			/* at commit, oldest first */
	SbqUndoFn	undo;			/* at abort, newest first */
	char	   *entries;		/* in TopMemoryContext */
	int			n;
	int			max;
} SbqUndoLog;

#define SBQ_UNDO_LOG(type, first_max, apply, undo) \
	{sizeof(type), (first_max), (apply), (undo), NULL, 0, 0}

/* recording: make room (can fail), then add entries (cannot) */
extern void sbq_undo_reserve(SbqUndoLog *log, int n);
extern void *sbq_undo_add(SbqUndoLog *log);
extern void sbq_undo_forget_last(SbqUndoLog *log);

/* this transaction's entries, oldest first */
extern int	sbq_undo_count(const SbqUndoLog *log);
extern void *sbq_undo_entry(const SbqUndoLog *log, int i);
extern void sbq_undo_undo_now(SbqUndoLog *log, int i);

/* the end of a transaction or subtransaction (the owner's callbacks call these) */
extern void sbq_undo_commit(SbqUndoLog *log);
extern void sbq_undo_abort(SbqUndoLog *log);
extern void sbq_undo_subxact(SbqUndoLog *log, SubXactEvent event);

#endif							/* SBQ_UNDO_H */
