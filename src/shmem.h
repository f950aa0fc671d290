/*-------------------------------------------------------------------------
 *
 * shmem.h
 *	  The shared memory hooks (shmem.c), which ask for and set up the
 *	  structures of wait.c, registry.c, lease.c and qstate.c, and whether
 *	  this process has them (only when sbqueue is preloaded).
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

extern bool sbq_shmem_available(void);
extern TimestampTz sbq_shmem_boot(void);
extern void sbq_shmem_install_hooks(void);

#endif							/* SBQ_SHMEM_H */
