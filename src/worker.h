/*-------------------------------------------------------------------------
 *
 * worker.h
 *	  The maintenance launcher, the per-database maintenance workers, and the
 *	  DDL hook that keeps them out of the way of DROP DATABASE and friends.
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

/* settings (sbqueue.c) */
extern bool sbq_enable_maintenance_worker;
extern int	sbq_maintenance_interval;
extern int	sbq_vacuum_threshold;

/* _PG_init, while shared_preload_libraries is processed: launcher and hook */
extern void sbq_worker_init(void);

/* background worker entry points (bgw_function_name) */
extern PGDLLEXPORT void sbq_launcher_main(Datum main_arg);
extern PGDLLEXPORT void sbq_worker_main(Datum main_arg);

#endif							/* SBQ_WORKER_H */
