/*-------------------------------------------------------------------------
 *
 * dist_int.h
 *	  What the files of the distributed layout share (distributed.c,
 *	  dist_route.c, dist_layout.c, dist_storage.c); everybody else calls
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

/* the distributed tables, sbq.queues first, all colocated with it */
#define SBQ_DIST_NTABLES 11
extern const char *const sbq_dist_tables[SBQ_DIST_NTABLES];

/*
 * The most nodes (Citus group ids 0 .. this - 1): each node's sequences step
 * by it from its group id, so that no two nodes give one number.
 */
#define SBQ_DIST_MAX_NODES		64
#define SBQ_DIST_MAX_NODES_SQL	"64"

/* dist_layout.c: the sequences of this node, stepping from its group id */
extern void sbq_dist_range_sequences(void);
extern void sbq_dist_lock_sequences(void);

/* distributed.c */
extern int	sbq_dist_key_group(int32 key, int64 *id);
extern bool sbq_dist_enter(int64 id, int32 key, bool has_key);

#endif							/* SBQ_DIST_INT_H */
