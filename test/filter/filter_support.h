/*-------------------------------------------------------------------------
 *
 * filter_support.h
 *	  What the filter engine's unit test and fuzz driver share: an arena
 *	  allocator with a cap (the engine's SbqFilterAlloc) and a message made
 *	  of a small list of user and system properties.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  test/filter/filter_support.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SBQ_FILTER_SUPPORT_H
#define SBQ_FILTER_SUPPORT_H

#include <stdlib.h>
#include <string.h>

#include "../../src/filter.h"

/* one malloc'd block of the arena */
typedef struct TArenaBlock
{
	struct TArenaBlock *next;
	size_t		size;
	size_t		used;
	/* the memory follows, aligned to max_align_t-ish 16 bytes */
} TArenaBlock;

typedef struct TArena
{
	TArenaBlock *head;
	size_t		total;			/* bytes handed out */
	size_t		cap;			/* 0: no cap */
	int			refused;		/* allocations refused for the cap */
} TArena;

/* the SbqFilterAlloc of the tests: NULL past the cap */
static inline void *
t_alloc(void *arg, size_t size)
{
	TArena	   *a = arg;
	TArenaBlock *b = a->head;
	size_t		need = (size + 15) & ~(size_t) 15;

	if (a->cap > 0 && a->total + need > a->cap)
	{
		a->refused++;
		return NULL;
	}
	if (b == NULL || b->size - b->used < need)
	{
		size_t		bsize = need > 65536 ? need : 65536;

		b = malloc(sizeof(TArenaBlock) + 16 + bsize);
		if (b == NULL)
			return NULL;
		b->size = bsize;
		b->used = 0;
		b->next = a->head;
		a->head = b;
	}
	a->total += need;
	b->used += need;
	return (char *) b + ((sizeof(TArenaBlock) + 15) & ~(size_t) 15) + b->used - need;
}

/* free the whole arena */
static inline void
t_arena_reset(TArena *a)
{
	while (a->head != NULL)
	{
		TArenaBlock *next = a->head->next;

		free(a->head);
		a->head = next;
	}
	a->total = 0;
	a->refused = 0;
}

/* a property of the test message */
typedef struct TProp
{
	const char *name;
	SbqFilterValue v;
} TProp;

/* a message: user properties, and system ones (avail false: not reported) */
typedef struct TMessage
{
	const TProp *props;
	int			nprops;
	SbqFilterValue sys[SBQ_FSYS_COUNT];
	int			sys_avail[SBQ_FSYS_COUNT];
	unsigned char guid_seed;
} TMessage;

static inline int
t_name_ieq(const char *a, size_t alen, const char *b)
{
	size_t		i;

	if (strlen(b) != alen)
		return 0;
	for (i = 0; i < alen; i++)
	{
		unsigned char x = (unsigned char) a[i];
		unsigned char y = (unsigned char) b[i];

		if (x >= 'A' && x <= 'Z')
			x += 32;
		if (y >= 'A' && y <= 'Z')
			y += 32;
		if (x != y)
			return 0;
	}
	return 1;
}

static inline bool
t_user_lookup(void *arg, const char *name, size_t len, SbqFilterValue *v)
{
	const TMessage *m = arg;
	int			i;

	for (i = 0; i < m->nprops; i++)
		if (t_name_ieq(name, len, m->props[i].name))
		{
			*v = m->props[i].v;
			return true;
		}
	return false;
}

static inline bool
t_sys_lookup(void *arg, SbqFilterSysProp prop, SbqFilterValue *v)
{
	const TMessage *m = arg;

	if (prop <= SBQ_FSYS_UNKNOWN || prop >= SBQ_FSYS_COUNT || !m->sys_avail[prop])
		return false;
	*v = m->sys[prop];
	return true;
}

/* a fixed "random" GUID: bytes seed, seed+1, ... */
static inline bool
t_new_guid(void *arg, unsigned char out[16])
{
	const TMessage *m = arg;
	int			i;

	for (i = 0; i < 16; i++)
		out[i] = (unsigned char) (m->guid_seed + i);
	return true;
}

static inline SbqFilterMessage
t_message(TMessage *m)
{
	SbqFilterMessage fm;

	fm.arg = m;
	fm.user_lookup = t_user_lookup;
	fm.sys_lookup = t_sys_lookup;
	fm.new_guid = t_new_guid;
	return fm;
}

static inline SbqFilterValue
t_null(void)
{
	SbqFilterValue v;

	memset(&v, 0, sizeof(v));
	return v;
}

static inline SbqFilterValue
t_int(int64_t i)
{
	SbqFilterValue v = t_null();

	v.kind = SBQ_FV_INT;
	v.i = i;
	return v;
}

static inline SbqFilterValue
t_dbl(double d)
{
	SbqFilterValue v = t_null();

	v.kind = SBQ_FV_DOUBLE;
	v.d = d;
	return v;
}

static inline SbqFilterValue
t_str(const char *s)
{
	SbqFilterValue v = t_null();

	v.kind = SBQ_FV_STRING;
	v.s = s;
	v.len = strlen(s);
	return v;
}

static inline SbqFilterValue
t_bool(bool b)
{
	SbqFilterValue v = t_null();

	v.kind = SBQ_FV_BOOL;
	v.b = b;
	return v;
}

static inline SbqFilterValue
t_unsupported(void)
{
	SbqFilterValue v = t_null();

	v.kind = SBQ_FV_UNSUPPORTED;
	return v;
}

#endif							/* SBQ_FILTER_SUPPORT_H */
