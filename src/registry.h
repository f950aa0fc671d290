/*-------------------------------------------------------------------------
 *
 * registry.h
 *	  The database registry (registry.c): the launcher's latch, the recheck
 *	  generation, and a slot per database that says whether a worker runs
 *	  there and whether DDL holds it. It exists only when sbqueue is
 *	  preloaded.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/registry.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SBQ_REGISTRY_H
#define SBQ_REGISTRY_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "storage/latch.h"

/* What a database slot of the registry says about that database's worker. */
typedef struct SbqDbSlotState
{
	Oid			dbid;			/* InvalidOid: the slot is free */
	pid_t		pid;			/* its running worker, 0 if none */
	Latch	   *latch;			/* that worker's latch, NULL if none */
	bool		no_extension;	/* its worker exited: sbqueue is not installed */
	uint64		no_extension_gen;	/* the recheck generation it saw before looking */
	bool		warned_no_function; /* the missing-sbq_maintain WARNING was logged */
	TimestampTz hold_until;		/* no worker before this (DDL needs the database) */
} SbqDbSlotState;

/* shared memory (shmem.c calls these) */
extern Size sbq_registry_shmem_size(void);
extern void sbq_registry_shmem_request(void);
extern void sbq_registry_shmem_startup(void);

/* the launcher */
extern void sbq_registry_set_launcher(Latch *latch);
extern void sbq_registry_wake_launcher(void);
extern uint64 sbq_registry_recheck_generation(void);
extern void sbq_registry_request_recheck(void);

/* the database slots */
extern bool sbq_dbslot_ensure(Oid dbid);
extern bool sbq_dbslot_get(Oid dbid, SbqDbSlotState *state);
extern bool sbq_dbslot_register_worker(Oid dbid, pid_t pid, Latch *latch);
extern void sbq_dbslot_unregister_worker(Oid dbid, pid_t pid, bool no_extension,
										 uint64 no_extension_gen);
extern bool sbq_dbslot_take_no_extension(Oid dbid, uint64 *gen);
extern bool sbq_dbslot_warn_once(Oid dbid);
extern pid_t sbq_dbslot_hold(Oid dbid, TimestampTz until);
extern void sbq_dbslot_release_hold(Oid dbid);
extern int	sbq_dbslot_list(Oid *dbids, int max);
extern void sbq_dbslot_free_if_idle(Oid dbid);
extern int	sbq_dbslot_count(void);

#endif							/* SBQ_REGISTRY_H */
