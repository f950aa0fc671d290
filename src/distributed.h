/*-------------------------------------------------------------------------
 *
 * distributed.h
 *	  sbqueue on a Citus cluster (docs/scale-out.md): the entity key, the
 *	  shard group a call works on, and the routing of a call to the node
 *	  that holds its entity.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/distributed.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SBQ_DISTRIBUTED_H
#define SBQ_DISTRIBUTED_H

#include "fmgr.h"

/* the entity key of an address: a fixed hash of its canonical base name */
extern int32 sbq_entity_key(const char *address, size_t len);

/* whether sbqueue's tables are distributed in this database (cached) */
extern bool sbq_dist_active(void);
extern bool sbq_dist_call_active(void);

/*
 * At the top of every SQL-callable function whose argument 0 is an entity's
 * address: with the tables distributed, the call runs on the node of the
 * entity's shard group, here (the group becomes the call's) or there
 * (routed, and its result returned from here).
 */
extern bool sbq_dist_route(FunctionCallInfo fcinfo, Datum *result);
#define SBQ_ROUTE(fcinfo) \
	do { \
		Datum		routed_result_; \
		if (sbq_dist_call_active() && sbq_dist_route((fcinfo), &routed_result_)) \
			return routed_result_; \
	} while (0)

/* the shard group the storage statements work on (none: InvalidOid / NULL) */
extern bool sbq_dist_in_group(void);
extern bool sbq_dist_current_key(int32 *key);
extern int64 sbq_dist_group_id(void);
extern bool sbq_dist_key_elsewhere(const char *name);
extern Oid	sbq_dist_relid(const char *table);
extern const char *sbq_dist_sql(const char *sql);
extern void sbq_dist_leave(void);
extern int64 sbq_dist_push_key(const char *name);
extern void sbq_dist_pop_key(int64 saved);

/* what a node logs of a routed call (_PG_init) */
extern void sbq_dist_log_hook_install(void);

/* whether a lease epoch may be another live shard group's (lease.c) */
extern bool sbq_dist_epoch_live(Oid epoch);

/* sbq_maintain() with the tables distributed: this node's groups, or every group */
struct SbqMaintainResult;
extern void sbq_dist_maintain(struct SbqMaintainResult *acc, bool all_nodes);

/* every local shard group, one after another (maintenance) */
extern int	sbq_dist_local_groups(int64 **ids);
extern bool sbq_dist_enter_group(int64 id);

#endif							/* SBQ_DISTRIBUTED_H */
