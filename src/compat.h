/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  Every PG_VERSION_NUM difference sbqueue cares about, in one place.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/compat.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SBQ_COMPAT_H
#define SBQ_COMPAT_H

#include "postgres.h"
#include "funcapi.h"
#include "storage/proc.h"

/* The PGPROC slot number of this backend: dense and unique among live backends. */
#if PG_VERSION_NUM >= 170000
#define SBQ_MY_PROC_NUMBER() ((int) MyProcNumber)
#else
#define SBQ_MY_PROC_NUMBER() (MyProc->pgprocno)
#endif

/* The wait event a blocking receive reports (named wait events come with 17). */
#define SBQ_WAIT_EVENT_RECEIVE PG_WAIT_EXTENSION

#endif							/* SBQ_COMPAT_H */
