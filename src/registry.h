/*-------------------------------------------------------------------------
 *
 * registry.h
 *	  The database registry (registry.c): the launcher's latch, the recheck
 *	  generation, how many databases wait for a worker, and a slot per
 *	  database that has (or may have) sbqueue: whether it has, the worker that
 *	  runs there, its passes, and whether DDL holds the database. It exists
 *	  only when sbqueue is preloaded.
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

/* the most databases the registry has slots for */
#define SBQ_REGISTRY_MAX_DBS	2048

/* Whether a database has sbqueue, as far as the registry knows. */
typedef enum SbqDbState
{
	SBQ_DB_UNKNOWN = 0,			/* nobody has looked yet: a worker must */
	SBQ_DB_INSTALLED,			/* it has: it gets maintenance passes */
	SBQ_DB_ABSENT				/* a look found none (the launcher then forgets the slot) */
} SbqDbState;

/* How a database's last maintenance pass ended. */
typedef enum SbqPassResult
{
	SBQ_RESULT_NONE = 0,		/* no pass yet */
	SBQ_RESULT_OK,
	SBQ_RESULT_ERROR,
	SBQ_RESULT_NO_FUNCTION		/* the installed version has no sbq_maintain() */
} SbqPassResult;

/* A database's slot of the registry. */
typedef struct SbqDbSlotState
{
	Oid			dbid;			/* the hash key */
	SbqDbState	state;
	uint64		state_gen;		/* bumped whenever a commit tells the state */
	bool		recheck;		/* absent, but a prepared transaction may change that */
	pid_t		pid;			/* its running worker, 0 if none */
	Latch	   *latch;			/* that worker's latch, NULL if none */
	bool		in_pass;		/* that worker is in a tick (not sleeping) */
	bool		leave;			/* the launcher asks that worker to go */
	bool		run_now;		/* the launcher asks it for a tick now */
	bool		warned_no_function; /* the missing-sbq_maintain WARNING was logged */
	TimestampTz hold_until;		/* no worker before this (DDL needs the database) */
	TimestampTz last_start;		/* its last tick: when it began, 0 if none */
	TimestampTz last_end;		/* ... and ended (0 while the first one runs) */
	SbqPassResult last_result;
	int64		passes;			/* ticks since the server started */
	int32		failures;		/* ticks in a row that failed */
	int32		idle_ticks;		/* ticks in a row that found nothing to do */
	TimestampTz next_due;		/* when its next tick is due */
	TimestampTz work_due;		/* the launcher: a lock or scheduled message due then, 0 none */
} SbqDbSlotState;

/* shared memory (shmem.c calls these) */
extern Size sbq_registry_shmem_size(void);
extern void sbq_registry_shmem_request(void);
extern void sbq_registry_shmem_startup(void);
extern bool sbq_registry_available(void);

/* the launcher */
extern void sbq_registry_set_launcher(Latch *latch);
extern void sbq_registry_wake_launcher(void);
extern uint64 sbq_registry_recheck_generation(void);
extern uint64 sbq_registry_catalog_generation(void);
extern void sbq_registry_request_recheck(void);
extern void sbq_registry_request_rescan(void);
extern void sbq_registry_set_waiting(int waiting);
extern int	sbq_registry_waiting(void);
extern uint64 sbq_registry_lost(void);

/* the database slots: commits that create or drop the extension */
extern void sbq_dbslot_publish(Oid dbid, bool installed);
extern uint64 sbq_dbslot_seen(Oid dbid, bool *known);
extern void sbq_dbslot_publish_if_changed(Oid dbid, bool installed, bool known, uint64 gen);
extern void sbq_dbslot_publish_prepared(Oid dbid);

/* the database slots: the launcher */
extern bool sbq_dbslot_ensure(Oid dbid, SbqDbSlotState *state);
extern bool sbq_dbslot_get(Oid dbid, SbqDbSlotState *state);
extern bool sbq_dbslot_take_absent(Oid dbid, bool *recheck);
extern void sbq_dbslot_ask(Oid dbid, bool leave, bool run_now);
extern void sbq_dbslot_set_work_due(Oid dbid, TimestampTz when);
extern void sbq_dbslot_free_if_idle(Oid dbid);
extern int	sbq_dbslot_list(Oid *dbids, int max);

/* the database slots: a worker */
extern bool sbq_dbslot_register_worker(Oid dbid, pid_t pid, Latch *latch, int32 *idle_ticks,
									   int32 *failures);
extern void sbq_dbslot_unregister_worker(Oid dbid, pid_t pid);
extern void sbq_dbslot_set_absent(Oid dbid, uint64 seen_gen, bool recheck);
extern uint64 sbq_dbslot_pass_begin(Oid dbid, TimestampTz now);
extern void sbq_dbslot_pass_end(Oid dbid, uint64 gen, TimestampTz now, SbqPassResult result,
								int32 failures, int32 idle_ticks, TimestampTz next_due);
extern void sbq_dbslot_poll(Oid dbid, bool *leave, bool *run_now);
extern bool sbq_dbslot_warn_once(Oid dbid);

/* the database slots: DDL that needs a database to itself */
extern pid_t sbq_dbslot_hold(Oid dbid, TimestampTz until);
extern void sbq_dbslot_release_hold(Oid dbid);

/* the database slots: the status function */
extern int	sbq_dbslot_snapshot(SbqDbSlotState *out, int max);

#endif							/* SBQ_REGISTRY_H */
