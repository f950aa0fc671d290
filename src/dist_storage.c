/*-------------------------------------------------------------------------
 *
 * dist_storage.c
 *	  The storage statements of a shard group, with the tables distributed
 *	  (distributed.c): each statement prepared and kept per group, naming the
 *	  group's shards; and the sequences of the node raised past the numbers
 *	  of a group that arrived (docs/scale-out.md, decision 5).
 *
 * Owns: backend-local state only (the plans per group, the groups whose
 * numbers this backend has raised the sequences past). Locks: none.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/dist_storage.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "executor/spi.h"
#include "utils/hsearch.h"

#include "dist_int.h"
#include "distributed.h"
#include "storage_core.h"

/*
 * The kept plans of the statements for the shard groups of distributed
 * tables (distributed.c), by statement, sub-queue and group: each names
 * the group's shards.
 */
typedef struct SbqGroupPlanKey
{
	SbqStatement *st;
	int64		group;
	int			which;
} SbqGroupPlanKey;

typedef struct SbqGroupPlan
{
	SbqGroupPlanKey key;
	SPIPlanPtr	plan;
	int			flavour;
} SbqGroupPlan;

static HTAB *sbq_group_plans = NULL;

SPIPlanPtr
sbq_group_plan(SbqStatement *st, int which, int flavour)
{
	SbqGroupPlanKey key;
	SbqGroupPlan *e;
	bool		found;

	if (!sbq_dist_in_group())
		elog(ERROR, "sbqueue statement \"%s\" outside a shard group", st->name);
	if (sbq_group_plans == NULL)
	{
		HASHCTL		ctl;

		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(SbqGroupPlanKey);
		ctl.entrysize = sizeof(SbqGroupPlan);
		sbq_group_plans = hash_create("sbqueue plans of shard groups", 64, &ctl,
									  HASH_ELEM | HASH_BLOBS);
	}
	memset(&key, 0, sizeof(key));
	key.st = st;
	key.group = sbq_dist_group_id();
	key.which = which;
	e = hash_search(sbq_group_plans, &key, HASH_ENTER, &found);
	if (found && e->flavour != flavour && e->plan != NULL)
	{
		SPI_freeplan(e->plan);
		e->plan = NULL;
	}
	if (!found || e->plan == NULL)
	{
		e->plan = NULL;
		e->plan = sbq_prepare_kept(st, sbq_dist_sql(sbq_statement_sql(st, which, flavour)));
		e->flavour = flavour;
	}
	return e->plan;
}

/*
 * Raise this node's sequences past the numbers of a shard group the first
 * time a backend works on it where it is now (its queues shard, "epoch"):
 * a group that arrived from another node brings the numbers that node gave,
 * and the numbers of a queue, its sessions and its entities must keep
 * increasing and never meet (docs/scale-out.md, decision 5). Each node's
 * sequences step by SBQ_DIST_MAX_NODES from the node's group id
 * (dist_layout.c), so no two nodes ever give one number; a raise keeps that
 * residue, and goes well past the group's numbers. Only when the group holds
 * a number the sequence could still give: its highest above the last given,
 * or equal to a first value not given yet.
 */
#define SBQ_FLOOR(seq, cte, margin) \
	"(SELECT pg_catalog.setval('sbq." seq "', " \
	"  (" cte ".n + " margin ") - ((" cte ".n + " margin ") % " SBQ_DIST_MAX_NODES_SQL ")" \
	"  + (SELECT l.groupid FROM pg_catalog.pg_dist_local_group l))" \
	" FROM " cte ", sbq." seq " s" \
	" WHERE " cte ".n > s.last_value OR (" cte ".n = s.last_value AND NOT s.is_called))"
static SbqStatement stmt_sequence_floor = {"raise the sequences past a shard group", 0,
	{InvalidOid},
	"WITH m AS (SELECT pg_catalog.max(x) AS n FROM ("
	"  SELECT pg_catalog.max(sequence_number) AS x FROM sbq.messages"
	"  UNION ALL SELECT pg_catalog.max(sequence_number) FROM sbq.dead_letters"
	"  UNION ALL SELECT pg_catalog.max(topic_sequence_number) FROM sbq.topic_scheduled) u),"
	" i AS (SELECT pg_catalog.max(x) AS n FROM ("
	"  SELECT pg_catalog.max(queue_id) AS x FROM sbq.queues"
	"  UNION ALL SELECT pg_catalog.max(topic_id) FROM sbq.topics) u),"
	" k AS (SELECT pg_catalog.max(session_key) AS n FROM sbq.sessions)"
	" SELECT " SBQ_FLOOR("message_seq", "m", "1048576") ", "
	SBQ_FLOOR("queue_id_seq", "i", "1024") ", "
	SBQ_FLOOR("session_seq", "k", "1048576")
};

/* the groups whose numbers this backend has raised the sequences past */
#define SBQ_FLOORS_KEPT 64
static Oid	sbq_floors[SBQ_FLOORS_KEPT];
static int	sbq_nfloors = 0;

void
sbq_sequence_floor(Oid epoch)
{
	int			i;
	bool		stepped;

	for (i = 0; i < sbq_nfloors; i++)
		if (sbq_floors[i] == epoch)
			return;
	/* a read changes nothing (and may not: a read-only transaction, a standby) */
	if (XactReadOnly || RecoveryInProgress())
		return;
	/*
	 * One backend at a time on this node: a second one then sees the first
	 * one's raise and does not repeat it, which would give again the numbers
	 * drawn in between. A raise is a setval(), seen by every backend at once
	 * and kept whatever the transaction does, so the lock is given back
	 * straight after it: held to the end of the transaction, a transaction
	 * left open after its first call here (a receive in BEGIN, its work not
	 * done) would stop the first call of every other backend of this node.
	 * Only a change of the sequences' step, transactional, keeps it.
	 */
	sbq_dist_lock_sequences();
	stepped = sbq_dist_range_sequences();
	(void) sbq_exec(&stmt_sequence_floor, NULL, NULL);
	if (!stepped)
		sbq_dist_unlock_sequences();
	if (sbq_nfloors == SBQ_FLOORS_KEPT)
		sbq_nfloors = 0;		/* start over: looking again costs little */
	sbq_floors[sbq_nfloors++] = epoch;
}
