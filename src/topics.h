/*-------------------------------------------------------------------------
 *
 * topics.h
 *	  Topics, subscriptions and rules in storage (topics.c).
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/topics.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SBQ_TOPICS_H
#define SBQ_TOPICS_H

#include "access/htup.h"
#include "access/tupdesc.h"
#include "utils/jsonb.h"

#include "filter.h"
#include "sbqueue.h"

/* the rule every new subscription gets: the true filter, no action */
#define SBQ_DEFAULT_RULE		"$Default"

/* the segment between a topic's name and a subscription's in its address */
#define SBQ_SUBSCRIPTIONS_SEGMENT	"/subscriptions/"

/* A subscription or rule name: 1-50 characters. */
#define SBQ_MAX_SUBSCRIPTION_NAME_LEN	50

/* What a topic may hold (Service Bus's limits) */
#define SBQ_MAX_SUBSCRIPTIONS_PER_TOPIC		2000
#define SBQ_MAX_SQL_FILTERS_PER_TOPIC		2000
#define SBQ_MAX_CORRELATION_FILTERS_PER_TOPIC	100000
/* the JSON text of one correlation filter, at most */
#define SBQ_MAX_CORRELATION_FILTER_SIZE			4096

/* A rule as stored. */
typedef struct SbqRule
{
	char	   *name;
	char	   *sql_filter;		/* NULL: none */
	Jsonb	   *correlation_filter; /* NULL: none */
	char	   *action;			/* NULL: none */
} SbqRule;

extern bool sbq_topics_installed(void);

/* topic_send.c: the topics this backend sends to, with their subscriptions and rules */
extern uint64 sbq_topic_cache_generation(void);
extern bool sbq_topic_cache_lookup(const char *key, SbqQueue *topic);
extern void sbq_topic_cache_remember(const char *key, const SbqQueue *topic, uint64 gen);

extern bool sbq_storage_find_topic(const char *key, bool share, SbqQueue *topic);
extern int32 sbq_storage_create_topic(const char *name, const char *key, const SbqQueue *props);
extern void sbq_storage_update_topic(const SbqQueue *props);
extern void sbq_storage_delete_topic(int32 topic_id);
extern void sbq_storage_topic_counts(int32 topic_id, int64 *subscriptions, int64 *sql_filters,
									 int64 *correlation_filters);
extern int	sbq_storage_topic_subscriptions(int32 topic_id, int32 **ids);
extern HeapTuple sbq_storage_topic_tuple(int32 topic_id, TupleDesc tupdesc, MemoryContext mcxt);
extern HeapTuple sbq_storage_subscription_tuple(int32 queue_id, TupleDesc tupdesc,
												MemoryContext mcxt);

/* A message as a rule sees it when it is sent to a topic (rules.c). */
typedef struct SbqRuleMessage
{
	const SbqSendProps *props;
	Jsonb	   *properties;		/* its application properties as they are now */
	const char *default_content_type;
	int64		sequence_number;	/* the topic's */
	int64		size;			/* of the body */
	TimestampTz enqueued_time;
} SbqRuleMessage;

/* rules.c: filters and actions */
extern void sbq_compile_rule(const char *sql_filter, const char *action,
							 SbqFilterExpr **filter, SbqFilterAction **compiled_action);
extern SbqFilterResult sbq_rule_eval_filter(const SbqFilterExpr *filter, SbqRuleMessage *m,
											SbqFilterError *err);
extern bool sbq_rule_apply_action(const SbqFilterAction *action, SbqRuleMessage *m,
								  SbqSendProps *props, SbqFilterError *err);
extern Jsonb *sbq_set_property(Jsonb *props, const char *key, size_t keylen,
							   const JsonbValue *value);
extern char *sbq_check_sql_filter(text *filter);
extern void sbq_check_correlation_filter(Jsonb *filter);
extern char *sbq_check_rule_action(text *action);

/* util.c */
extern void sbq_refuse_reserved_name(const SbqAddress *addr);

extern int	sbq_storage_topic_queues(int32 topic_id, SbqQueue **subs, bool **dlq_on_errors);
extern bool sbq_storage_queue_has_messages(int32 queue_id);
extern bool sbq_storage_find_to_forward(const SbqAddress *addr, SbqQueue *queue);

/* forward.c: auto-forwarding */
#define SBQ_MAX_FORWARD_HOPS	4
extern void sbq_forward_reset(void);
extern int	sbq_forward_hops_now(void);
extern uint64 sbq_storage_stored(void);
extern bool sbq_forward_dead_letters(const SbqQueue *source, TimestampTz now,
									 int64 *forwarded, int64 *kept);
extern int	sbq_forward_send(const SbqQueue *source, const SbqSendProps *props, Datum *bodies,
							 int nbodies, const char *default_content_type, int64 *seqs);
extern void sbq_dead_letter_copy(const SbqQueue *sub, int64 seq, const char *reason,
								 const char *description);
extern void sbq_refuse_subscription_send(const SbqAddress *addr, const SbqQueue *queue);
extern void sbq_storage_get_queue_or_topic(const SbqAddress *addr, SbqQueue *queue,
										   int16 rights);
extern int	sbq_topic_send(const SbqQueue *topic, const SbqSendProps *props, Datum *bodies,
						   int nbodies, const char *default_content_type, int64 *seqs);
extern bool sbq_topic_cancel_scheduled(const SbqQueue *topic, int64 seq);
extern bool sbq_storage_claim_message_id(const SbqQueue *queue, text *message_id,
										 TimestampTz now, int64 *seq);
extern bool sbq_correlation_anchor(Jsonb *filter, StringInfo key);
extern int	sbq_correlation_keys(const SbqSendProps *props, const char *default_ct,
								 char ***keys, int **lens);
extern bool sbq_correlation_matches(Jsonb *filter, const SbqSendProps *props,
									const char *default_content_type);

extern bool sbq_storage_find_subscription(int32 topic_id, const char *key, int32 *queue_id,
										  bool *dlq_on_filter_errors);
extern bool sbq_storage_subscription_of(int32 queue_id, char **topic, char **subscription);
extern int32 sbq_storage_create_subscription(int32 topic_id, const char *address,
											 const char *address_key, const char *name,
											 const char *key, const SbqQueue *props,
											 bool dlq_on_filter_errors);
extern void sbq_storage_update_subscription(const SbqQueue *props, bool dlq_on_filter_errors);
extern void sbq_storage_delete_subscription(int32 queue_id);

extern bool sbq_storage_add_rule(int32 queue_id, const char *name, const char *sql_filter,
								 Jsonb *correlation_filter, const char *action);
extern bool sbq_storage_remove_rule(int32 queue_id, const char *key);
extern int	sbq_storage_rules(int32 queue_id, SbqRule **rules);

#endif							/* SBQ_TOPICS_H */
