/*-------------------------------------------------------------------------
 *
 * dist_int.h
 *	  What the files of the distributed layout share (distributed.c,
 *	  dist_route.c, dist_log.c, dist_layout.c, dist_storage.c); everybody else calls
 *	  distributed.h.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/dist_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SBQ_DIST_INT_H
#define SBQ_DIST_INT_H

#include "fmgr.h"
#include "nodes/execnodes.h"
#include "utils/elog.h"

/* the distributed tables, sbq.queues first, all colocated with it */
#define SBQ_DIST_NTABLES 11
extern const char *const sbq_dist_tables[SBQ_DIST_NTABLES];

/*
 * The most nodes (Citus group ids 0 .. this - 1): each node's sequences step
 * by it from its group id, so that no two nodes give one number.
 */
#define SBQ_DIST_MAX_NODES		64
#define SBQ_DIST_MAX_NODES_SQL	"64"

/*
 * The highest numbers a raise of a sequence may reach, in SQL: bigint's and
 * integer's largest (queue ids) less room for a step of every node.
 */
#define SBQ_SEQ_TOP_SQL			"(9223372036854775807 - 128)"
#define SBQ_SEQ_TOP_INT_SQL		"(2147483647 - 128)"

/* n, in SQL, at most top less margin, so that adding margin stays below top (NULL stays) */
#define SBQ_SEQ_CAP(n, top, margin) \
	"(CASE WHEN " n " > " top " - " margin " THEN " top " - " margin " ELSE " n " END)"

/*
 * The rows of sbq.queue_counters that hold sequence marks (dist_storage.c,
 * sbq_sequence_mark): queue id -1, which no queue or topic has; shard the
 * node's Citus group id shifted left by SBQ_MARK_NODE_SHIFT, with the
 * backend's number below it; the mark in the column sent.
 */
#define SBQ_MARK_ROW			"-1"
#define SBQ_MARK_NODE_SHIFT		"24"

/* this backend's top-level statement runs sbq_routed (dist_log.c) */
extern void sbq_routed_note_running(Oid fnoid);

/* dist_layout.c: the sequences of this node, stepping from its group id */
extern bool sbq_dist_range_sequences(void);
extern void sbq_dist_lock_sequences(void);
extern void sbq_dist_unlock_sequences(void);

/* distributed.c */
extern int	sbq_dist_key_group(int32 key, int64 *id);
extern bool sbq_dist_enter(int64 id, int32 key, bool has_key);
extern int	sbq_dist_ngroups(void);
extern uint64 sbq_dist_groups_read(void);
extern bool sbq_dist_group_at(int i, int64 *id, bool *local, int32 *route_key);
extern void sbq_dist_set_route_key(int i, int32 key);
extern void sbq_dist_group_range(int i, int32 *min, int32 *max);
extern void sbq_dist_unlock_group(int64 id);
/*
 * Called by the read of the groups just after it: not static, so that a
 * debugger finds it in a stripped build (the Citus suite holds a backend
 * there while a move commits).
 */
extern void sbq_dist_note_live_epochs(void);

/* dist_route.c: what routing statements share */
extern int	sbq_dist_pin_formats(void);
extern char **sbq_dist_strings(Datum arr, int *n);
extern void sbq_dist_hide_route(ErrorData *edata);
extern void sbq_dist_check_width(int got, int want);
extern void sbq_dist_run_routing(const char *sql, MemoryContext cxt);
extern bool sbq_dist_local_run(void);
extern void sbq_dist_forget_shards(void);
extern void sbq_dist_refuse_key(int32 key) pg_attribute_noreturn();
extern void sbq_dist_put_text_rows(ReturnSetInfo *rsinfo);
extern char *sbq_dist_group_what(const char *what);
extern char *sbq_dist_group_settings(char *what, int *level);

/* dist_views.c: the views of the whole cluster, defined for the layout */
extern void sbq_dist_define_views(bool distributed);

#endif							/* SBQ_DIST_INT_H */
