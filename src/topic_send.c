/*-------------------------------------------------------------------------
 *
 * topic_send.c
 *	  A send to a topic: a copy of each message in every subscription whose
 *	  rules match it, in the sender's transaction.
 *
 * The topic's own checks come first (the caller has checked its send right
 * and the size against the topic): its duplicate detection, under the
 * topic's id, and the time to live capped to the topic's default. Then each
 * subscription, in the order they were made, gets what its rules say (R10.5
 * of the Service Bus rules): one copy when any rule without an action
 * matches, and a copy of its own for each matching rule with an action,
 * which carries the rule's name as application property RuleName. Each copy
 * is sent to its subscription as a send to a queue is (its own time to live
 * cap, sessions, scheduling, counters and wake-ups). A message no
 * subscription takes is dropped, and counted as such on the topic.
 *
 * The number a send returns is the topic's: a sequence number of its own.
 * A scheduled message's copies are tied to it in sbq.topic_scheduled, for
 * sbq_cancel_scheduled on the topic.
 *
 * Owns: nothing beyond its statements. Locks: those of the sends to the
 * subscriptions.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/topic_send.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "storage_core.h"
#include "topics.h"

static SbqStatement stmt_topic_sequence = {"topic sequence number", 0, {InvalidOid},
	"SELECT " NEXT_SEQUENCE
};

/* the rules of a topic's subscriptions, by subscription and name */
static SbqStatement stmt_topic_rules = {"rules of a topic", 1, {INT4OID},
	"SELECT r.queue_id, r.name, r.sql_filter, r.correlation_filter, r.action"
	" FROM sbq.rules r JOIN sbq.subscriptions s ON s.queue_id = r.queue_id"
	" WHERE s.topic_id = $1 ORDER BY r.queue_id, r.name_key"
};

static SbqStatement stmt_topic_dropped = {"count a dropped message", 3, {INT4OID, INT4OID,
		INT8OID},
	"INSERT INTO sbq.queue_counters AS qc (queue_id, shard, dropped) VALUES ($1, $2, $3)"
	" ON CONFLICT (queue_id, shard) DO UPDATE SET dropped = qc.dropped + excluded.dropped"
};

static SbqStatement stmt_topic_scheduled = {"tie scheduled copies", 3, {INT4OID, INT8OID,
		INT8ARRAYOID},
	"INSERT INTO sbq.topic_scheduled (topic_id, topic_sequence_number, sequence_number)"
	" SELECT $1, $2, c FROM pg_catalog.unnest($3::bigint[]) c"
};

static SbqStatement stmt_topic_cancel = {"cancel scheduled copies", 2, {INT4OID, INT8OID},
	"WITH t AS (DELETE FROM sbq.topic_scheduled"
	"            WHERE topic_id = $1 AND topic_sequence_number = $2"
	"            RETURNING sequence_number)"
	" DELETE FROM sbq.messages m USING t"
	" WHERE m.sequence_number = t.sequence_number AND m.subqueue = 0 AND m.state = 2"
	" RETURNING m.queue_id"
};

/* A subscription of the topic, with its rules. */
typedef struct SbqSubscriber
{
	SbqQueue	queue;
	bool		dlq_on_errors;
	int			nrules;
	SbqRule    *rules;
} SbqSubscriber;

/*
 * sbq_topic_subscribers
 *		The subscriptions of a topic with their rules, into *subs; returns
 *		how many.
 */
static int
sbq_topic_subscribers(const SbqQueue *topic, SbqSubscriber **subs)
{
	SbqQueue   *queues;
	bool	   *dlq;
	int			n = sbq_storage_topic_queues(topic->queue_id, &queues, &dlq);
	Datum		arg = Int32GetDatum(topic->queue_id);
	uint64		nrules;
	uint64		r;
	int			i;
	MemoryContext old;

	*subs = palloc0(sizeof(SbqSubscriber) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		(*subs)[i].queue = queues[i];
		(*subs)[i].dlq_on_errors = dlq[i];
		(*subs)[i].rules = palloc0(sizeof(SbqRule) * 4);
	}
	nrules = sbq_exec(&stmt_topic_rules, &arg, NULL);
	old = MemoryContextSwitchTo(sbq_storage_caller_context());
	for (r = 0, i = 0; r < nrules && i < n; r++)
	{
		bool		isnull;
		int32		queue_id = DatumGetInt32(sbq_col(r, 1, &isnull));
		SbqSubscriber *s;
		SbqRule    *rule;
		Datum		d;

		while (i < n && (*subs)[i].queue.queue_id < queue_id)
			i++;
		if (i == n || (*subs)[i].queue.queue_id != queue_id)
			continue;
		s = &(*subs)[i];
		if (s->nrules >= 4 && (s->nrules & (s->nrules - 1)) == 0)
			s->rules = repalloc(s->rules, sizeof(SbqRule) * s->nrules * 2);
		rule = &s->rules[s->nrules++];
		rule->name = sbq_spi_strdup(sbq_col(r, 2, &isnull), false);
		d = sbq_col(r, 3, &isnull);
		rule->sql_filter = sbq_spi_strdup(d, isnull);
		d = sbq_col(r, 4, &isnull);
		rule->correlation_filter = isnull ? NULL : DatumGetJsonbPCopy(d);
		d = sbq_col(r, 5, &isnull);
		rule->action = sbq_spi_strdup(d, isnull);
	}
	MemoryContextSwitchTo(old);
	return n;
}

/*
 * sbq_rule_matches
 *		Whether a rule's filter matches a message: the true filter always, a
 *		correlation filter when every property it names is equal.
 */
static bool
sbq_rule_matches(const SbqRule *rule, const SbqSendProps *props, const char *default_ct)
{
	if (rule->correlation_filter != NULL)
		return sbq_correlation_matches(rule->correlation_filter, props, default_ct);
	if (rule->sql_filter != NULL)
		elog(ERROR, "SQL filters are not supported yet");
	return true;
}

/*
 * sbq_topic_send_one
 *		The copies of one message: into each subscription whose rules match.
 *		Returns how many copies were stored; their sequence numbers, for a
 *		scheduled message, go into *copies.
 */
static int
sbq_topic_send_one(SbqSubscriber *subs, int nsubs, const SbqSendProps *props, Datum body,
				   const char *default_ct, int64 *copies)
{
	int			ncopies = 0;
	int			i;

	for (i = 0; i < nsubs; i++)
	{
		SbqSubscriber *s = &subs[i];
		bool		plain = false;
		int			r;

		CHECK_FOR_INTERRUPTS();
		for (r = 0; r < s->nrules && !plain; r++)
			plain = s->rules[r].action == NULL &&
				sbq_rule_matches(&s->rules[r], props, default_ct);
		if (!plain)
			continue;
		if (s->queue.requires_session &&
			(props->session_id == NULL || VARSIZE_ANY_EXHDR(props->session_id) == 0))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the SessionId was not set on a message, and it cannot be sent to subscription \"%s\"",
							s->queue.name),
					 errdetail("Entities that have session support enabled can only receive messages that have the SessionId set to a valid value.")));
		(void) sbq_storage_send(&s->queue, props, &body, 1, default_ct, &copies[ncopies]);
		ncopies++;
	}
	return ncopies;
}

/*
 * sbq_topic_send
 *		Send nbodies messages with the same properties to a topic; seqs gets
 *		the topic's sequence number of each (a duplicate's: its first
 *		message's). Returns nbodies.
 */
int
sbq_topic_send(const SbqQueue *topic, const SbqSendProps *props, Datum *bodies, int nbodies,
			   const char *default_content_type, int64 *seqs)
{
	SbqSubscriber *subs;
	int			nsubs = sbq_topic_subscribers(topic, &subs);
	SbqSendProps p = *props;
	TimestampTz now = GetCurrentTimestamp();
	bool		scheduled = props->has_scheduled && props->scheduled > now;
	int64	   *copies = palloc(sizeof(int64) * Max(nsubs, 1));
	SbqCounts	counts = {0};
	int64		dropped = 0;
	int			i;

	/* the topic's default time to live caps the message's, as a queue's does */
	if (topic->has_default_ttl &&
		(!p.has_ttl || sbq_interval_usecs(&p.ttl) > sbq_interval_usecs(&topic->default_ttl)))
	{
		p.has_ttl = true;
		p.ttl = topic->default_ttl;
	}
	for (i = 0; i < nbodies; i++)
	{
		bool		isnull;
		int			n;

		CHECK_FOR_INTERRUPTS();
		(void) sbq_exec(&stmt_topic_sequence, NULL, NULL);
		seqs[i] = DatumGetInt64(sbq_col(0, 1, &isnull));
		if (topic->has_dup_window && props->message_id != NULL &&
			!sbq_storage_claim_message_id(topic, props->message_id, now, &seqs[i]))
			continue;
		counts.sent++;
		n = sbq_topic_send_one(subs, nsubs, &p, bodies[i], default_content_type, copies);
		if (n == 0)
			dropped++;
		else if (scheduled)
		{
			Datum		values[3];

			values[0] = Int32GetDatum(topic->queue_id);
			values[1] = Int64GetDatum(seqs[i]);
			values[2] = sbq_int8_array(copies, n);
			(void) sbq_exec(&stmt_topic_scheduled, values, NULL);
		}
	}
	if (counts.sent > 0)
		sbq_add_counts(topic->queue_id, &counts);
	if (dropped > 0)
	{
		Datum		values[3];

		values[0] = Int32GetDatum(topic->queue_id);
		values[1] = Int32GetDatum(SBQ_MY_PROC_NUMBER());
		values[2] = Int64GetDatum(dropped);
		(void) sbq_exec(&stmt_topic_dropped, values, NULL);
	}
	return nbodies;
}

/*
 * sbq_topic_cancel_scheduled
 *		Delete the scheduled copies of a message sent to a topic; false when
 *		seq names none that is still scheduled.
 */
bool
sbq_topic_cancel_scheduled(const SbqQueue *topic, int64 seq)
{
	Datum		values[2];

	values[0] = Int32GetDatum(topic->queue_id);
	values[1] = Int64GetDatum(seq);
	return sbq_exec(&stmt_topic_cancel, values, NULL) > 0;
}
