/*-------------------------------------------------------------------------
 *
 * sbqueue.c
 *	  Module magic and _PG_init of sbqueue: every setting is registered here
 *	  (the variables of the lock table's three live in lease.c, the others
 *	  here), and with the preload the shared memory hooks, the launcher and
 *	  the utility hook are installed.
 *
 * Everything works without shared_preload_libraries: a plain LOAD (the first
 * call of an sbqueue function) only defines the settings and the lease
 * module's transaction callbacks, and blocking receives poll. With sbqueue in
 * shared_preload_libraries, _PG_init also installs the shared memory hooks
 * (shmem.c, which has each module set up what it owns), registers the
 * maintenance launcher (launcher.c) and installs the utility hook that keeps
 * the workers out of the way of DROP DATABASE (utility_hook.c). It owns no
 * shared state and takes no locks.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/sbqueue.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/executor.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "compat.h"
#include "distributed.h"
#include "filter.h"
#include "lease.h"
#include "qstate.h"
#include "sbqueue.h"
#include "shmem.h"
#include "storage_core.h"
#include "worker.h"

PG_MODULE_MAGIC;

static ExecutorStart_hook_type sbq_prev_executor_start = NULL;

/*
 * Every query that starts is another reading for the views' readers of
 * shared memory (sbq_snapshot_key): a function that polls the stats sees
 * what committed since its last statement, even when no transaction that
 * wrote has ended meanwhile.
 */
static void
sbq_executor_start(QueryDesc *queryDesc, int eflags)
{
	sbq_shared_change_gen++;
	if (sbq_prev_executor_start != NULL)
		sbq_prev_executor_start(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);
}

/* sbqueue.receive_poll_interval: how often a waiting receive looks again */
int			sbq_receive_poll_interval = 100;

/* sbqueue.enable_maintenance_worker: whether the launcher starts workers */
bool		sbq_enable_maintenance_worker = true;

/* sbqueue.maintenance_interval: time between two maintenance ticks, in ms */
int			sbq_maintenance_interval = 1000;

/* sbqueue.idle_maintenance_interval: the longest an idle database waits for a pass */
int			sbq_idle_maintenance_interval = 60000;

/* sbqueue.max_workers: how many maintenance workers run at once, at most */
int			sbq_max_workers = 2;

/* sbqueue.vacuum_threshold: dead message rows that make a worker vacuum them */
int			sbq_vacuum_threshold = 20000;

/*
 * sbq_define_worker_settings
 *		The settings of the launcher and its maintenance workers (all
 *		PGC_SIGHUP; they need the preload to have an effect).
 */
static void
sbq_define_worker_settings(void)
{
	DefineCustomBoolVariable("sbqueue.enable_maintenance_worker",
							 gettext_noop("Runs maintenance workers in the databases that have sbqueue."),
							 gettext_noop("Needs sbqueue in shared_preload_libraries."),
							 &sbq_enable_maintenance_worker,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("sbqueue.maintenance_interval",
							gettext_noop("Time between two maintenance passes of a maintenance worker."),
							NULL,
							&sbq_maintenance_interval,
							1000, 10, 86400000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("sbqueue.idle_maintenance_interval",
							gettext_noop("Longest time between two maintenance passes of an idle database."),
							gettext_noop("After a pass that finds nothing to do, a database's next pass comes "
										 "twice as late as the last, up to this; a lock or scheduled message "
										 "coming due, or a send, receive or settlement there, brings it back "
										 "to sbqueue.maintenance_interval."),
							&sbq_idle_maintenance_interval,
							60000, 10, 86400000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("sbqueue.max_workers",
							gettext_noop("Maximum number of maintenance workers running at once."),
							gettext_noop("They take turns among the databases that have sbqueue; each takes a "
										 "slot of max_worker_processes, and the launcher one more."),
							&sbq_max_workers,
							2, 1, 64,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("sbqueue.vacuum_threshold",
							gettext_noop("Dead message rows that make a maintenance worker vacuum the message table."),
							gettext_noop("The worker runs VACUUM (SKIP_LOCKED) on sbq.messages when pgstat counts "
										 "this many dead rows there and the oldest transaction has moved since "
										 "its last vacuum. 0 leaves the table to autovacuum."),
							&sbq_vacuum_threshold,
							20000, 0, INT_MAX,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);
}

void		_PG_init(void);

/* the filter engine's check, in its LIKE (filter.h) */
static void
sbq_filter_check_interrupts(void)
{
	CHECK_FOR_INTERRUPTS();
}

void
_PG_init(void)
{
	sbq_filter_interrupt_check = sbq_filter_check_interrupts;

	/* PGC_USERSET and PGC_SIGHUP settings first, for a plain LOAD too */
	DefineCustomIntVariable("sbqueue.receive_poll_interval",
							gettext_noop("How often a receive with max_wait looks for new messages while it waits."),
							gettext_noop("With sbqueue preloaded a commit wakes the receive at once; this bounds "
										 "the time to notice messages that no commit announces (an expired lock, "
										 "a scheduled time reached, a prepared transaction)."),
							&sbq_receive_poll_interval,
							100, 1, 60000,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	sbq_define_worker_settings();

	DefineCustomBoolVariable("sbqueue.memory_locks",
							 gettext_noop("Keeps the locks of peek-lock receives in shared memory."),
							 gettext_noop("A receive then writes nothing and commits without a WAL flush; a crash "
										  "loses the locks (the messages are delivered again). Needs sbqueue in "
										  "shared_preload_libraries. Off: locks are stored in the message rows."),
							 &sbq_memory_locks,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	/* shared memory, the launcher and the hook need the preload */
	if (process_shared_preload_libraries_in_progress && !IsBinaryUpgrade)
		DefineCustomIntVariable("sbqueue.max_locks",
								gettext_noop("How many messages can be locked in shared memory at once."),
								gettext_noop("A receive that finds no room locks in the message rows instead."),
								&sbq_max_locks,
								65536, 64, 16777216,
								PGC_POSTMASTER,
								0,
								NULL, NULL, NULL);

	DefineCustomIntVariable("sbqueue.max_locks_per_database",
							gettext_noop("How many messages one database can lock in shared memory at once."),
							gettext_noop("-1 means a quarter of sbqueue.max_locks. A receive in a database "
										 "that has used its share locks in the message rows instead."),
							&sbq_max_locks_per_database,
							-1, -1, 16777216,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	/* shared memory needs the preload */
	if (process_shared_preload_libraries_in_progress && !IsBinaryUpgrade)
		DefineCustomIntVariable("sbqueue.max_queues",
								gettext_noop("How many queues, topics and subscriptions of all databases have "
											 "an entry in shared memory."),
								gettext_noop("A queue without one stores its counters at each call and looks "
											 "for due scheduled messages at each receive."),
								&sbq_qstate_max,
								4096, 64, 1048576,
								PGC_POSTMASTER,
								0,
								NULL, NULL, NULL);

	DefineCustomIntVariable("sbqueue.max_queues_per_database",
							gettext_noop("How many queues, topics and subscriptions of one database have "
										 "an entry in shared memory."),
							gettext_noop("-1 means half of sbqueue.max_queues. The entries of deleted "
										 "queues count until maintenance frees them."),
							&sbq_qstate_max_per_database,
							-1, -1, 1048576,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved("sbqueue");

	sbq_lease_init(process_shared_preload_libraries_in_progress && !IsBinaryUpgrade);

	sbq_prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = sbq_executor_start;
	sbq_plan_key_init();
	sbq_dist_log_hook_install();

	/* shared memory, the launcher and the hook need the preload */
	if (!process_shared_preload_libraries_in_progress)
		return;

	/* pg_upgrade's server must not run workers that write into the database */
	if (IsBinaryUpgrade)
		return;

	sbq_shmem_install_hooks();
	sbq_launcher_register();
	sbq_utility_hook_install();
}
