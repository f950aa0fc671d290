/*-------------------------------------------------------------------------
 *
 * forward.c
 *	  Auto-forwarding: a send to a queue or subscription with forward_to
 *	  stores the message in its destination instead, in the sender's
 *	  transaction.
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
 * Owns: the count of hops of the send in progress (reset by every storage
 * section). Locks: the destinations' name locks, shared.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/forward.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/lockdefs.h"
#include "utils/builtins.h"

#include "storage_core.h"
#include "topics.h"

/* how many times the message being sent has been forwarded so far */
static int	sbq_forward_hops = 0;

/* sbq_forward_reset: a storage section begins: no send in progress. */
void
sbq_forward_reset(void)
{
	sbq_forward_hops = 0;
}

/* The address of a forwarding entity's destination, its name lock taken. */
static void
sbq_forward_address(const SbqQueue *source, SbqAddress *addr)
{
	addr->name = source->forward_to;
	addr->key = sbq_name_key(CurrentMemoryContext, source->forward_to);
	addr->subqueue = SBQ_SUBQUEUE_MAIN;
	sbq_lock_queue_name(addr->key, AccessShareLock);
}

/*
 * sbq_forward_problem
 *		Why a message cannot be forwarded from source to *dest (looked up
 *		here), as a dead-letter reason and description; NULL when it can.
 */
static const char *
sbq_forward_problem(const SbqQueue *source, const SbqSendProps *props, Datum *bodies,
					int nbodies, SbqQueue *dest, char **description)
{
	SbqAddress	addr;
	int64		psize;
	int			i;

	if (sbq_forward_hops >= SBQ_MAX_FORWARD_HOPS)
	{
		*description = psprintf("The message was forwarded %d times and would be forwarded again, to \"%s\".",
								sbq_forward_hops, source->forward_to);
		return "MaxTransferHopCountExceeded";
	}
	sbq_forward_address(source, &addr);
	if (!sbq_storage_find_to_forward(&addr, dest))
	{
		*description = psprintf("\"%s\" forwards to \"%s\", which does not exist.",
								source->name, source->forward_to);
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
	reason = sbq_forward_problem(source, &p, bodies, nbodies, &dest, &description);
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
				sbq_forward_refused(source, &p, bodies[i], default_content_type, reason,
									description, &seqs[i]);
			else
				(void) sbq_storage_send(&dest, &p, &bodies[i], 1, default_content_type, &seqs[i]);
		}
	}
	sbq_forward_hops--;
	return nbodies;
}
