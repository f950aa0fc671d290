/*-------------------------------------------------------------------------
 *
 * sbqueue.c
 *	  Module magic, settings and _PG_init of sbqueue.
 *
 * Everything works without shared_preload_libraries: this file only defines
 * the settings that a plain LOAD needs.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/sbqueue.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/guc.h"

#include "compat.h"
#include "sbqueue.h"

PG_MODULE_MAGIC;

/* sbqueue.receive_poll_interval: how often a waiting receive looks again */
int			sbq_receive_poll_interval = 100;

void		_PG_init(void);

void
_PG_init(void)
{
	DefineCustomIntVariable("sbqueue.receive_poll_interval",
							gettext_noop("How often a receive with max_wait looks for new messages while it waits."),
							NULL,
							&sbq_receive_poll_interval,
							100, 1, 60000,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved("sbqueue");
}
