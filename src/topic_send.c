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

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
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
	"INSERT INTO sbq.queue_counters AS qc (queue_id, shard, dropped" EK(", entity_key") ")"
	" VALUES ($1, $2, $3" EK(", " EK_OF_ID("$1")) ")"
	" ON CONFLICT (queue_id, shard" EK(", entity_key") ") DO UPDATE SET dropped = qc.dropped + excluded.dropped"
};

static SbqStatement stmt_topic_scheduled = {"tie scheduled copies", 3, {INT4OID, INT8OID,
		INT8ARRAYOID},
	"INSERT INTO sbq.topic_scheduled (topic_id, topic_sequence_number, sequence_number"
	EK(", entity_key") ") SELECT $1, $2, c" EK(", " EK_OF_ID("$1"))
	" FROM pg_catalog.unnest($3::bigint[]) c"
};

/*
 * The scheduled copies of a topic's message: its ties (the first level: that
 * topic's; below it, the ties of a topic a subscription forwarded the copy
 * to, whose number the tie holds), and the copies that are messages.
 * $1 the topic (0: any), $2 the numbers
 */
static SbqStatement stmt_topic_untie = {"untie scheduled copies", 2, {INT4OID, INT8ARRAYOID},
	"DELETE FROM sbq.topic_scheduled"
	" WHERE ($1 = 0 OR topic_id = $1) AND topic_sequence_number = ANY ($2)"
	" RETURNING sequence_number"
};

static SbqStatement stmt_topic_cancel = {"cancel scheduled copies", 1, {INT8ARRAYOID},
	"DELETE FROM sbq.messages"
	" WHERE sequence_number = ANY ($1) AND subqueue = 0 AND state = 2"
};

/*
 * A copy just stored, moved to its subscription's dead-letter sub-queue.
 * $1 its sequence number, $2 reason, $3 description, $4 source (where it is)
 */
static SbqStatement stmt_dead_letter_copy = {"dead-letter a copy", 4, {INT8OID, TEXTOID,
		TEXTOID, TEXTOID},
	"WITH d AS (DELETE FROM sbq.messages WHERE sequence_number = $1 RETURNING *)"
	" " DEAD_LETTER_INSERT("d", "d.delivery_count", "$2", "$3", "$4")
	, .old_sql =
	"UPDATE sbq.messages m SET subqueue = 1, state = 0, lock_token = NULL,"
	" locked_until = NULL, dead_letter_reason = $2,"
	" dead_letter_error_description = $3, dead_letter_source = $4"
	" WHERE m.sequence_number = $1"
};

/*
 * sbq_dead_letter_copy
 *		Move a message this send stored (a copy in a subscription, or one a
 *		queue could not forward) into the dead-letter sub-queue of where it
 *		is, with reason and description, and count it as dead-lettered.
 */
void
sbq_dead_letter_copy(const SbqQueue *sub, int64 seq, const char *reason,
					 const char *description)
{
	Datum		values[4];
	SbqCounts	counts = {0};

	values[0] = Int64GetDatum(seq);
	values[1] = CStringGetTextDatum(reason);
	values[2] = CStringGetTextDatum(description);
	values[3] = CStringGetTextDatum(sub->name);
	if (sbq_exec(&stmt_dead_letter_copy, values, NULL) != 1)
		elog(ERROR, "could not dead-letter message " INT64_FORMAT, seq);
	counts.dead_lettered = 1;
	sbq_add_counts(sub->queue_id, &counts);
}

/* A rule of a subscription, compiled. */
typedef struct SbqCompiledRule
{
	SbqRule		rule;
	SbqFilterExpr *filter;		/* NULL: a correlation filter or the true filter */
	SbqFilterAction *action;	/* NULL: none */
	int			ordinal;		/* its number among the topic's rules */
	bool		anchored;		/* a correlation filter in the topic's index */
} SbqCompiledRule;

/*
 * The correlation index of a topic: the anchor of each correlation filter
 * that has one (rules.c), sorted by hash and key. A send marks the rules
 * whose anchor one of its properties is; an anchored rule not marked does
 * not match, and is not compared.
 */
typedef struct SbqAnchor
{
	uint32		hash;
	int			len;
	char	   *key;
	int			ordinal;		/* of the rule */
} SbqAnchor;

typedef struct SbqRuleIndex
{
	int			nrules;			/* of the topic, numbered from 0 */
	int			nanchors;
	SbqAnchor  *anchors;
} SbqRuleIndex;

/* A subscription of the topic, with its rules. */
typedef struct SbqSubscriber
{
	SbqQueue	queue;
	bool		dlq_on_errors;
	int			nrules;
	int			maxrules;
	SbqCompiledRule *rules;
} SbqSubscriber;

/* The rule of row r of the current SPI result, into the subscription's list. */
static void
sbq_add_subscriber_rule(SbqSubscriber *s, uint64 r)
{
	SbqCompiledRule *c;
	bool		isnull;
	Datum		d;

	if (s->nrules == s->maxrules)
	{
		s->maxrules = Max(4, s->maxrules * 2);
		s->rules = s->rules == NULL ? palloc(sizeof(SbqCompiledRule) * s->maxrules) :
			repalloc(s->rules, sizeof(SbqCompiledRule) * s->maxrules);
	}
	c = &s->rules[s->nrules++];
	memset(c, 0, sizeof(*c));
	c->rule.name = pstrdup(TextDatumGetCString(sbq_col(r, 2, &isnull)));
	d = sbq_col(r, 3, &isnull);
	c->rule.sql_filter = isnull ? NULL : TextDatumGetCString(d);
	d = sbq_col(r, 4, &isnull);
	c->rule.correlation_filter = isnull ? NULL : DatumGetJsonbPCopy(d);
	d = sbq_col(r, 5, &isnull);
	c->rule.action = isnull ? NULL : TextDatumGetCString(d);
	sbq_compile_rule(c->rule.sql_filter, c->rule.action, &c->filter, &c->action);
}

/* by hash, then key */
static int
sbq_cmp_anchor(const void *a, const void *b)
{
	const SbqAnchor *x = a;
	const SbqAnchor *y = b;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return memcmp(x->key, y->key, x->len);
}

/*
 * sbq_index_rules
 *		Number the rules of a topic's subscriptions and index the anchors of
 *		their correlation filters, in the current memory context.
 */
static SbqRuleIndex *
sbq_index_rules(SbqSubscriber *subs, int nsubs)
{
	SbqRuleIndex *index = palloc0(sizeof(SbqRuleIndex));
	StringInfoData key;
	int			room = 0;
	int			i;
	int			r;

	initStringInfo(&key);
	for (i = 0; i < nsubs; i++)
		for (r = 0; r < subs[i].nrules; r++)
		{
			SbqCompiledRule *c = &subs[i].rules[r];
			SbqAnchor  *a;

			c->ordinal = index->nrules++;
			if (c->rule.correlation_filter == NULL ||
				!sbq_correlation_anchor(c->rule.correlation_filter, &key))
				continue;
			if (index->nanchors == room)
			{
				room = Max(16, room * 2);
				index->anchors = index->anchors == NULL ?
					palloc(sizeof(SbqAnchor) * room) :
					repalloc(index->anchors, sizeof(SbqAnchor) * room);
			}
			a = &index->anchors[index->nanchors++];
			a->key = pnstrdup(key.data, key.len);
			a->len = key.len;
			a->hash = hash_bytes((const unsigned char *) key.data, key.len);
			a->ordinal = c->ordinal;
			c->anchored = true;
		}
	if (index->nanchors > 1)
		qsort(index->anchors, index->nanchors, sizeof(SbqAnchor), sbq_cmp_anchor);
	pfree(key.data);
	return index;
}

/*
 * sbq_anchored_rules
 *		The rules of index whose anchor a message sent with props has, as a
 *		mark for each rule's ordinal (palloc'd); NULL when the topic has no
 *		anchored rule.
 */
static bool *
sbq_anchored_rules(const SbqRuleIndex *index, const SbqSendProps *props, const char *default_ct)
{
	bool	   *marks;
	char	  **keys;
	int		   *lens;
	int			n;
	int			i;

	if (index->nanchors == 0)
		return NULL;
	marks = palloc0(sizeof(bool) * index->nrules);
	n = sbq_correlation_keys(props, default_ct, &keys, &lens);
	for (i = 0; i < n; i++)
	{
		SbqAnchor	want;
		int			lo = 0;
		int			hi = index->nanchors;

		CHECK_FOR_INTERRUPTS();
		want.key = keys[i];
		want.len = lens[i];
		want.hash = hash_bytes((const unsigned char *) keys[i], lens[i]);
		/* the first anchor not below want, then every one equal to it */
		while (lo < hi)
		{
			int			mid = lo + (hi - lo) / 2;

			if (sbq_cmp_anchor(&index->anchors[mid], &want) < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
		for (; lo < index->nanchors && sbq_cmp_anchor(&index->anchors[lo], &want) == 0; lo++)
			marks[index->anchors[lo].ordinal] = true;
	}
	return marks;
}

/*
 * sbq_topic_subscribers
 *		The subscriptions of a topic with their rules, compiled, into *subs,
 *		and the index of their correlation filters into *index, all of it in
 *		cxt; returns how many.
 */
static int
sbq_topic_subscribers(const SbqQueue *topic, MemoryContext cxt, SbqSubscriber **subs,
					  SbqRuleIndex **index)
{
	SbqQueue   *queues;
	bool	   *dlq;
	int			n = sbq_storage_topic_queues(topic->queue_id, &queues, &dlq);
	Datum		arg = Int32GetDatum(topic->queue_id);
	uint64		nrules;
	uint64		r;
	int			i = 0;
	MemoryContext old;

	nrules = sbq_exec(&stmt_topic_rules, &arg, NULL);
	old = MemoryContextSwitchTo(cxt);
	*subs = palloc0(sizeof(SbqSubscriber) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		sbq_queue_copy(&(*subs)[i].queue, &queues[i], cxt);
		(*subs)[i].dlq_on_errors = dlq[i];
	}
	for (r = 0, i = 0; r < nrules && i < n; r++)
	{
		bool		isnull;
		int32		queue_id = DatumGetInt32(sbq_col(r, 1, &isnull));

		CHECK_FOR_INTERRUPTS();
		while (i < n && (*subs)[i].queue.queue_id < queue_id)
			i++;
		if (i < n && (*subs)[i].queue.queue_id == queue_id)
			sbq_add_subscriber_rule(&(*subs)[i], r);
	}
	*index = sbq_index_rules(*subs, n);
	MemoryContextSwitchTo(old);
	return n;
}

/* ------------------------------------------------------------- the cache */

/*
 * The topics this backend sends to: each topic's properties and rights, and,
 * once it has been sent to, its subscriptions with their rules compiled. A
 * change of a topic, of its subscriptions, rules or rights sends the same
 * relcache invalidation for sbq.queues at commit as a change of a queue does
 * (sbq_queue_cache_changed); its callback only marks the cache stale (an
 * entry may be in use by the send the invalidation arrived in), and the next
 * look-up drops it, unless a topic send is running: a copy it forwards to a
 * topic looks that topic up while the send still walks the subscriptions of
 * an entry, which dropping the cache would free under it (a crash, found with
 * subscriptions created and deleted beside such sends). Then look-ups read
 * the tables until the send ends. Whatever was read before an invalidation
 * arrived is not remembered (the generation says), nor what a transaction
 * snapshot read.
 */
typedef struct SbqTopicEntry
{
	char		key[SBQ_MAX_NAME_LEN + 1];
	MemoryContext cxt;			/* of this entry, a child of the cache's */
	SbqQueue	topic;
	bool		loaded;			/* subs is the topic's subscriptions */
	int			nsubs;
	SbqSubscriber *subs;
	SbqRuleIndex *index;		/* of their correlation filters */
} SbqTopicEntry;

static HTAB *sbq_topic_cache = NULL;
static MemoryContext sbq_topic_cache_cxt = NULL;
static Oid	sbq_topic_cache_relid = InvalidOid;
static bool sbq_topic_cache_stale = false;
static uint64 sbq_topic_cache_gen = 0;
static int	sbq_topic_cache_users = 0;	/* topic sends running (sbq_topic_send) */

static void
sbq_topic_cache_inval(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == sbq_topic_cache_relid)
	{
		sbq_topic_cache_gen++;
		sbq_topic_cache_stale = true;
		/* looked up again by the next reader: a DROP EXTENSION is one of these */
		sbq_topic_cache_relid = InvalidOid;
	}
}

/*
 * Watch sbq.queues (whose invalidations tell of topic changes too) from
 * before a read that may be kept, also before the cache is first made: an
 * invalidation the read takes in must count. The table is looked up only
 * after an invalidation.
 */
static void
sbq_topic_cache_watch(void)
{
	sbq_on_relcache_inval(sbq_topic_cache_inval);	/* once, whatever the calls */
	if (!OidIsValid(sbq_topic_cache_relid))
		sbq_topic_cache_relid = sbq_queues_table_oid();
}

/* sbq_topic_cache_generation: what a reader notes before it reads, for sbq_topic_cache_remember. */
uint64
sbq_topic_cache_generation(void)
{
	AcceptInvalidationMessages();
	sbq_topic_cache_watch();
	return sbq_topic_cache_gen;
}

/*
 * The cache, ready: the invalidations that came in taken, a stale cache
 * dropped. False when it is not to be used (a transaction snapshot).
 */
static bool
sbq_topic_cache_ready(void)
{
	HASHCTL		ctl;

	if (IsolationUsesXactSnapshot())
		return false;
	AcceptInvalidationMessages();
	/* a send running holds subscriptions of the cache: not dropped under it */
	if (sbq_topic_cache_stale && sbq_topic_cache_users > 0)
		return false;
	if (sbq_topic_cache_stale && sbq_topic_cache_cxt != NULL)
	{
		MemoryContextReset(sbq_topic_cache_cxt);
		sbq_topic_cache = NULL;
	}
	sbq_topic_cache_stale = false;
	if (sbq_topic_cache != NULL)
		return true;
	sbq_topic_cache_watch();
	if (sbq_topic_cache_cxt == NULL)
		sbq_topic_cache_cxt = AllocSetContextCreate(TopMemoryContext, "sbqueue topic cache",
													ALLOCSET_SMALL_SIZES);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = SBQ_MAX_NAME_LEN + 1;
	ctl.entrysize = sizeof(SbqTopicEntry);
	ctl.hcxt = sbq_topic_cache_cxt;
	sbq_topic_cache = hash_create("sbqueue topic cache", 16, &ctl,
								  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	return true;
}

/* the entry of a topic's name key, or NULL */
static SbqTopicEntry *
sbq_topic_cache_entry(const char *key)
{
	if (strlen(key) > SBQ_MAX_NAME_LEN || !sbq_topic_cache_ready())
		return NULL;
	return hash_search(sbq_topic_cache, key, HASH_FIND, NULL);
}

/*
 * sbq_topic_cache_lookup
 *		The topic of a name key, if this backend has it: its properties and
 *		rights copied into the caller's memory context.
 */
bool
sbq_topic_cache_lookup(const char *key, SbqQueue *topic)
{
	SbqTopicEntry *e;

	/* SQL older than 0.10 has no topics: a send to a queue looks for none */
	if (!sbq_topics_installed())
		return false;
	e = sbq_topic_cache_entry(key);
	if (e == NULL)
		return false;
	sbq_queue_copy(topic, &e->topic, sbq_storage_caller_context());
	return true;
}

/*
 * sbq_topic_cache_remember
 *		Keep a topic just read from sbq.topics, unless an invalidation came in
 *		since gen was noted.
 */
void
sbq_topic_cache_remember(const char *key, const SbqQueue *topic, uint64 gen)
{
	SbqTopicEntry *e;
	bool		found;

	if (strlen(key) > SBQ_MAX_NAME_LEN || !sbq_topic_cache_ready() ||
		gen != sbq_topic_cache_gen)
		return;
	e = hash_search(sbq_topic_cache, key, HASH_ENTER, &found);
	if (found)
		return;
	e->cxt = AllocSetContextCreate(sbq_topic_cache_cxt, "sbqueue topic", ALLOCSET_SMALL_SIZES);
	sbq_queue_copy(&e->topic, topic, e->cxt);
	e->loaded = false;
	e->nsubs = 0;
	e->subs = NULL;
	e->index = NULL;
}

/*
 * sbq_topic_subscribers_of
 *		The subscriptions of a topic about to be sent to: from the cache, or
 *		read (and kept, unless an invalidation came in meanwhile).
 */
static int
sbq_topic_subscribers_of(const SbqQueue *topic, SbqSubscriber **subs, SbqRuleIndex **index)
{
	char	   *key = sbq_name_key(CurrentMemoryContext, topic->name);
	SbqTopicEntry *e;
	MemoryContext cxt;
	uint64		gen = sbq_topic_cache_generation();
	int			n;

	e = sbq_topic_cache_entry(key);
	if (e != NULL && e->loaded)
	{
		*subs = e->subs;
		*index = e->index;
		return e->nsubs;
	}
	/*
	 * not kept: in the current memory context, which for a topic that a copy
	 * is forwarded to is the SPI level of the message (sbq_topic_send_each),
	 * freed after it; in the caller's context each message of a batch
	 * forwarded to a topic kept its own reading of that topic's rules
	 */
	cxt = e != NULL ? AllocSetContextCreate(e->cxt, "sbqueue topic subscriptions",
											ALLOCSET_DEFAULT_SIZES) :
		CurrentMemoryContext;
	n = sbq_topic_subscribers(topic, cxt, subs, index);
	if (e != NULL && gen == sbq_topic_cache_gen && !sbq_topic_cache_stale)
	{
		e->subs = *subs;
		e->index = *index;
		e->nsubs = n;
		e->loaded = true;
	}
	return n;
}

/*
 * sbq_rule_matches
 *		Whether a rule's filter matches a message: TRUE, FALSE or UNKNOWN (no
 *		match), or SBQ_FILTER_ERROR with *err.
 */
static SbqFilterResult
sbq_rule_matches(const SbqCompiledRule *c, SbqRuleMessage *m, const SbqSendProps *props,
				 const char *default_ct, const bool *anchored, SbqFilterError *err)
{
	/* a message without the anchor's property and value does not match */
	if (c->anchored && anchored != NULL && !anchored[c->ordinal])
		return SBQ_FILTER_FALSE;
	if (c->rule.correlation_filter != NULL)
		return sbq_correlation_matches(c->rule.correlation_filter, props, default_ct) ?
			SBQ_FILTER_TRUE : SBQ_FILTER_FALSE;
	return sbq_rule_eval_filter(c->filter, m, err);
}

/*
 * sbq_copy_fits
 *		Whether a copy can go into a subscription as it is: a session id
 *		when the subscription requires sessions (R9.2), and a size it takes
 *		(an action may have made it larger than what the topic took); else
 *		*err says why, for the dead-letter sub-queue.
 */
static bool
sbq_copy_fits(const SbqSubscriber *s, const SbqSendProps *props, Datum body,
			  SbqFilterError *err)
{
	SbqSendProps counted = *props;
	int64		psize;
	int64		bsize = VARSIZE_ANY_EXHDR(DatumGetPointer(body));

	if (s->queue.requires_session &&
		(props->session_id == NULL || VARSIZE_ANY_EXHDR(props->session_id) == 0))
	{
		err->type = "Session id is null.";
		err->message = psprintf("Subscription \"%s\" requires sessions, and the message has no session id.",
								s->queue.name);
		return false;
	}
	/* a message id sbqueue made up does not count, as at sbq_send */
	if (props->message_id != NULL &&
		sbq_made_up_message_id(VARDATA_ANY(props->message_id),
							   VARSIZE_ANY_EXHDR(props->message_id)))
		counted.message_id = NULL;
	psize = sbq_props_size(&counted);
	if (psize > SBQ_MAX_PROPERTIES_SIZE || bsize + psize > s->queue.max_message_size)
	{
		err->type = "RuleActionException";
		err->message = psprintf("The message has " INT64_FORMAT " bytes of body and " INT64_FORMAT
								" of properties: more than subscription \"%s\" takes.",
								bsize, psize, s->queue.name);
		return false;
	}
	return true;
}

/*
 * sbq_copy_to
 *		Store one copy of a message in a subscription, as a send to a queue
 *		would; or, with err or when it does not fit (sbq_copy_fits), straight
 *		into the subscription's dead-letter sub-queue, the error as its
 *		reason: one subscription's trouble never fails the send. The
 *		subscription's duplicate detection does not apply (the topic's did).
 *		The copy's sequence number goes into *seq, or 0 when it stored
 *		nothing: forwarded, it was a duplicate where it went, whose number
 *		came back (another sender's message, not this send's copy).
 */
static void
sbq_copy_to(SbqSubscriber *s, const SbqSendProps *props, Datum body, const char *default_ct,
			const SbqFilterError *err, int64 *seq)
{
	SbqQueue	q = s->queue;
	SbqFilterError why;
	uint64		stored = sbq_storage_stored();

	q.has_dup_window = false;
	if (err == NULL && !sbq_copy_fits(s, props, body, &why))
		err = &why;
	if (err != NULL)
	{
		/*
		 * a dead letter, of this subscription: no session of it hears of it,
		 * and it is not forwarded (it was, and the number that came back was
		 * the destination's, whose row the dead-lettering then missed)
		 */
		q.requires_session = false;
		q.forward_to = NULL;
	}
	(void) sbq_storage_send(&q, props, &body, 1, default_ct, seq);
	if (err != NULL)
		sbq_dead_letter_copy(&s->queue, *seq, err->type, err->message);
	else if (sbq_storage_stored() == stored)
		*seq = 0;
}

/*
 * sbq_topic_send_one
 *		The copies of one message into the subscriptions (R10.5): one when a
 *		rule without an action matches, one for each matching rule with an
 *		action (its edits applied, RuleName set). A filter or action that
 *		fails puts one copy into the subscription's dead-letter sub-queue
 *		(unless the subscription says not to) and ends that subscription's
 *		rules. Returns how many copies were stored (dead letters too); their
 *		sequence numbers go into *copies, which has room for them.
 */
static int
sbq_topic_send_one(SbqSubscriber *subs, int nsubs, SbqRuleMessage *m, Datum body,
				   const char *default_ct, const bool *anchored, int64 **copies, int *room)
{
	int			ncopies = 0;
	int			i;

	for (i = 0; i < nsubs; i++)
	{
		SbqSubscriber *s = &subs[i];
		bool		plain = false;
		SbqFilterError err;
		bool		failed = false;
		int			r;

		CHECK_FOR_INTERRUPTS();
		if (ncopies + s->nrules + 1 > *room)
		{
			*room = (ncopies + s->nrules + 1) * 2;
			*copies = repalloc(*copies, sizeof(int64) * *room);
		}
		for (r = 0; r < s->nrules && !failed; r++)
		{
			SbqCompiledRule *c = &s->rules[r];
			SbqSendProps p;
			JsonbValue	name;

			switch (sbq_rule_matches(c, m, m->props, default_ct, anchored, &err))
			{
				case SBQ_FILTER_ERROR:
					failed = true;
					continue;
				case SBQ_FILTER_TRUE:
					break;
				default:
					continue;
			}
			if (c->action == NULL)
			{
				plain = true;
				continue;
			}
			p = *m->props;
			if (!sbq_rule_apply_action(c->action, m, &p, &err))
			{
				failed = true;
				continue;
			}
			name.type = jbvString;
			name.val.string.val = c->rule.name;
			name.val.string.len = strlen(c->rule.name);
			p.application_properties = sbq_set_property(p.application_properties, "RuleName",
														strlen("RuleName"), &name);
			sbq_copy_to(s, &p, body, default_ct, NULL, &(*copies)[ncopies++]);
		}
		/*
		 * The one copy of the rules without an action that matched; a failure
		 * ended the rules, and the copies of those before it stay (this one
		 * too), and the message is dead-lettered there.
		 */
		if (plain)
			sbq_copy_to(s, m->props, body, default_ct, NULL, &(*copies)[ncopies++]);
		if (failed && s->dlq_on_errors)
			sbq_copy_to(s, m->props, body, default_ct, &err, &(*copies)[ncopies++]);
	}
	return ncopies;
}

/* two sequence numbers, for qsort */
static int
sbq_cmp_seq(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return (x > y) - (x < y);
}

/*
 * Tie the scheduled copies of a topic's message to its number: those the
 * send stored (not 0), each once (two copies forwarded to one destination
 * with duplicate detection came back with the same number).
 */
static void
sbq_tie_scheduled(const SbqQueue *topic, int64 seq, const int64 *copies, int n)
{
	Datum		values[3];
	int64	   *tied = palloc(sizeof(int64) * Max(n, 1));
	int			ntied = 0;
	int			i;

	for (i = 0; i < n; i++)
		if (copies[i] > 0)
			tied[ntied++] = copies[i];
	qsort(tied, ntied, sizeof(int64), sbq_cmp_seq);
	n = ntied;
	ntied = 0;
	for (i = 0; i < n; i++)
		if (ntied == 0 || tied[ntied - 1] != tied[i])
			tied[ntied++] = tied[i];
	if (ntied == 0)
		return;
	values[0] = Int32GetDatum(topic->queue_id);
	values[1] = Int64GetDatum(seq);
	values[2] = sbq_int8_array(tied, ntied);
	(void) sbq_exec(&stmt_topic_scheduled, values, NULL);
}

/* Count the messages no subscription took. */
static void
sbq_count_dropped(const SbqQueue *topic, int64 dropped)
{
	Datum		values[3];

	values[0] = Int32GetDatum(topic->queue_id);
	values[1] = Int32GetDatum(SBQ_MY_PROC_NUMBER());
	values[2] = Int64GetDatum(dropped);
	(void) sbq_exec(&stmt_topic_dropped, values, NULL);
}

/* What each message of a topic send shares (sbq_topic_send_each). */
typedef struct SbqTopicBatch
{
	const SbqQueue *topic;
	const SbqSendProps *props;
	SbqSubscriber *subs;
	int			nsubs;
	SbqRuleIndex *index;
	const char *default_content_type;
	TimestampTz now;
	bool		scheduled;
	SbqCounts	counts;			/* the messages sent */
	int64		dropped;		/* those no subscription took */
} SbqTopicBatch;

/*
 * sbq_topic_send_each
 *		The copies of each of nbodies messages, for sbq_topic_send; seqs gets
 *		their topic sequence numbers.
 */
static void
sbq_topic_send_each(SbqTopicBatch *b, Datum *bodies, int nbodies, int64 *seqs)
{
	SbqSendProps p = *b->props;
	bool	   *anchored;
	SbqRuleMessage m;
	int			room = Max(b->nsubs, 1) * 2;
	int64	   *copies = palloc(sizeof(int64) * room);
	int			i;

	/* the topic's default time to live caps the message's, as a queue's does */
	if (b->topic->has_default_ttl &&
		(!p.has_ttl || sbq_interval_usecs(&p.ttl) > sbq_interval_usecs(&b->topic->default_ttl)))
	{
		p.has_ttl = true;
		p.ttl = b->topic->default_ttl;
	}
	memset(&m, 0, sizeof(m));
	m.props = &p;
	m.properties = p.application_properties;
	m.default_content_type = b->default_content_type;
	m.enqueued_time = b->scheduled ? b->props->scheduled : b->now;
	/*
	 * Each message's copies are stored in an SPI level of their own, so that
	 * what they allocate (the filters' values, each copy's row, the actions'
	 * edits, the statements' results) is freed before the next message: SPI
	 * leaves the memory of each statement's caller in its level's context,
	 * and a batch of 5,000 to a topic whose 1,500 rules matched kept about
	 * 10 MB a message there until the call ended; the backend was killed for
	 * its memory.
	 */
	for (i = 0; i < nbodies; i++)
	{
		bool		isnull;
		int			n;

		CHECK_FOR_INTERRUPTS();
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		(void) sbq_exec(&stmt_topic_sequence, NULL, NULL);
		seqs[i] = DatumGetInt64(sbq_col(0, 1, &isnull));
		if (!b->topic->has_dup_window || b->props->message_id == NULL ||
			sbq_storage_claim_message_id(b->topic, b->props->message_id, b->now, &seqs[i]))
		{
			/* a message id made up here differs from body to body */
			if (b->props->message_id == NULL)
				p.message_id = cstring_to_text(sbq_new_message_id());
			b->counts.sent++;
			m.sequence_number = seqs[i];
			m.size = VARSIZE_ANY_EXHDR(DatumGetPointer(bodies[i]));
			anchored = sbq_anchored_rules(b->index, &p, b->default_content_type);
			n = sbq_topic_send_one(b->subs, b->nsubs, &m, bodies[i], b->default_content_type,
								   anchored, &copies, &room);
			if (n == 0)
				b->dropped++;
			else if (b->scheduled)
				sbq_tie_scheduled(b->topic, seqs[i], copies, n);
		}
		if (SPI_finish() != SPI_OK_FINISH)
			elog(ERROR, "SPI_finish failed");
	}
	pfree(copies);
}

/*
 * sbq_topic_send
 *		Send nbodies messages with the same properties to a topic; seqs gets
 *		the topic's sequence number of each (a duplicate's: its first
 *		message's). A message without an id gets one here, so that all its
 *		copies have the same. Returns nbodies.
 *
 *		The topic's subscriptions may be the cache's, and a copy forwarded to
 *		a topic looks that topic up in the cache: while the send runs, the
 *		cache is in use, and an invalidation that arrives meanwhile does not
 *		free it under the send (sbq_topic_cache_ready); the look-ups read the
 *		tables instead.
 */
int
sbq_topic_send(const SbqQueue *topic, const SbqSendProps *props, Datum *bodies, int nbodies,
			   const char *default_content_type, int64 *seqs)
{
	SbqTopicBatch b;
	int			i;

	memset(&b, 0, sizeof(b));
	b.topic = topic;
	b.props = props;
	b.default_content_type = default_content_type;
	b.now = GetCurrentTimestamp();
	b.scheduled = props->has_scheduled && props->scheduled > b.now;
	b.nsubs = sbq_topic_subscribers_of(topic, &b.subs, &b.index);
	sbq_topic_cache_users++;
	PG_TRY();
	{
		sbq_topic_send_each(&b, bodies, nbodies, seqs);
	}
	PG_FINALLY();
	{
		sbq_topic_cache_users--;
	}
	PG_END_TRY();
	if (b.counts.sent > 0)
		sbq_add_counts(topic->queue_id, &b.counts);
	if (b.dropped > 0)
		sbq_count_dropped(topic, b.dropped);
	/* a number no copy keeps (none matched) counts as given all the same */
	{
		int64		max_seq = 0;

		for (i = 0; i < nbodies; i++)
			max_seq = Max(max_seq, seqs[i]);
		sbq_sequence_mark(topic->name, max_seq);
	}
	return nbodies;
}

/*
 * sbq_topic_cancel_scheduled
 *		Delete the scheduled copies of a message sent to a topic, down the
 *		topics its subscriptions forwarded them to; false when seq names none
 *		that is still scheduled.
 */
bool
sbq_topic_cancel_scheduled(const SbqQueue *topic, int64 seq)
{
	int64	   *seqs = palloc(sizeof(int64));
	int			n = 1;
	int64		cancelled = 0;
	int			level;

	seqs[0] = seq;
	for (level = 0; level <= SBQ_MAX_FORWARD_HOPS && n > 0; level++)
	{
		Datum		values[2];
		uint64		ties;
		uint64		i;

		CHECK_FOR_INTERRUPTS();
		values[0] = Int32GetDatum(level == 0 ? topic->queue_id : 0);
		values[1] = sbq_int8_array(seqs, n);
		ties = sbq_exec(&stmt_topic_untie, values, NULL);
		seqs = palloc(sizeof(int64) * Max(ties, 1));
		for (i = 0; i < ties; i++)
		{
			bool		isnull;

			seqs[i] = DatumGetInt64(sbq_col(i, 1, &isnull));
		}
		n = (int) ties;
		if (n > 0)
		{
			values[0] = sbq_int8_array(seqs, n);
			cancelled += (int64) sbq_exec(&stmt_topic_cancel, values, NULL);
		}
	}
	return cancelled > 0;
}
