/*-------------------------------------------------------------------------
 *
 * worker.h
 *	  The background processes of sbqueue and the hook that keeps them out of
 *	  the way: what _PG_init calls, the bgw_function_name entry points, and
 *	  the settings they read.
 *
 *	  launcher.c            the launcher (shares the workers among databases)
 *	  maintenance_worker.c  a maintenance worker (one database at a time)
 *	  utility_hook.c        the ProcessUtility hook, in every backend
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/worker.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SBQ_WORKER_H
#define SBQ_WORKER_H

#include "postgres.h"

/* settings (defined and registered in sbqueue.c) */
extern bool sbq_enable_maintenance_worker;
extern int	sbq_maintenance_interval;
extern int	sbq_max_workers;
extern int	sbq_idle_maintenance_interval;
extern int	sbq_vacuum_threshold;

/* _PG_init, while shared_preload_libraries is processed */
extern void sbq_launcher_register(void);	/* launcher.c */
extern void sbq_utility_hook_install(void); /* utility_hook.c */

/*
 * Background worker entry points, found by bgw_function_name in the library
 * "sbqueue": registrations name them, so they keep these names.
 */
extern PGDLLEXPORT void sbq_launcher_main(Datum main_arg);	/* launcher.c */
extern PGDLLEXPORT void sbq_worker_main(Datum main_arg);	/* maintenance_worker.c */

#endif							/* SBQ_WORKER_H */
