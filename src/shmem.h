/*-------------------------------------------------------------------------
 *
 * shmem.h
 *	  sbqueue's shared memory: the wake-up condition variables of blocking
 *	  receives and the registry the launcher, the per-database workers and
 *	  the DDL hook share. It exists only when sbqueue is preloaded.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/shmem.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SBQ_SHMEM_H
#define SBQ_SHMEM_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"

/* The number of wake-up slots; a queue maps to one by hashing (database, queue id). */
#define SBQ_WAIT_SLOTS			1024

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

extern bool sbq_shmem_available(void);
extern void sbq_shmem_install_hooks(void);

/* wake-up condition variables */
extern int	sbq_shmem_wait_slot(int32 queue_id);
extern ConditionVariable *sbq_shmem_wait_cv(int slot);

/* the launcher */
extern void sbq_shmem_set_launcher(Latch *latch);
extern void sbq_shmem_wake_launcher(void);
extern uint64 sbq_shmem_recheck_generation(void);
extern void sbq_shmem_request_recheck(void);

/* the database registry */
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

#endif							/* SBQ_SHMEM_H */
