/*-------------------------------------------------------------------------
 *
 * filter_eval.c
 *	  Evaluation of a parsed filter (filter.h) against one message: property
 *	  lookups through the caller's callbacks, C#-style operators over
 *	  int64, double, string and bool, SQL's three-valued logic, LIKE.
 *
 * "Unknown" (a missing user property) and NULL are one value here,
 * SBQ_FV_NULL; only EXISTS asks whether a property is there at all.
 * Every error returns through sbq_filter_fail, which records the message
 * and the exception type of the evaluation (filters: FilterException).
 *
 * The recursion follows the tree the parser built, whose depth the text's
 * length and the parser's nesting limit bound. LIKE runs in time
 * proportional to the product of the lengths of string and pattern (one
 * backtrack point, the last "%"), never exponential. New strings
 * (concatenation, newid()) draw on a per-evaluation byte budget.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/filter_eval.c
 *
 *-------------------------------------------------------------------------
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "filter_int.h"

void		(*sbq_filter_interrupt_check) (void) = NULL;

/* the spelling of an operator in error messages */
static const char *
op_name(SbqFilterOp op)
{
	static const char *const names[] = {
		"?", "+", "-", "*", "/", "%", "=", "<>", "<", "<=", ">", ">="
	};

	return names[op];
}

/*
 * The type name of a value kind, for error messages.
 */
const char *
sbq_filter_kind_name(SbqFilterValueKind kind)
{
	switch (kind)
	{
		case SBQ_FV_NULL:
			return "NULL";
		case SBQ_FV_BOOL:
			return "boolean";
		case SBQ_FV_INT:
			return "integer";
		case SBQ_FV_DOUBLE:
			return "double";
		case SBQ_FV_STRING:
			return "string";
		default:
			return "unsupported value";
	}
}

/*
 * Record an evaluation error: the message is formatted into allocator
 * memory (a fixed text when that fails), the type is the evaluation's
 * exception name. Always returns false.
 */
bool
sbq_filter_fail(SbqFilterEvalCtx *cx, const char *fmt,...)
{
	va_list		ap;
	char		buf[512];
	char	   *m;
	size_t		n;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	n = strlen(buf);
	m = cx->alloc(cx->alloc_arg, n + 1);
	if (m != NULL)
		memcpy(m, buf, n + 1);
	cx->err->type = cx->errtype;
	cx->err->message = m != NULL ? m : "out of memory";
	cx->err->position = 0;
	return false;
}

/*
 * How many bytes of a name an error message shows: at most
 * SBQ_FILTER_ERR_NAME, cut at a character boundary.
 */
static int
clip(const char *s, size_t len)
{
	if (len <= SBQ_FILTER_ERR_NAME)
		return (int) len;
	len = SBQ_FILTER_ERR_NAME;
	while (len > 0 && ((unsigned char) s[len] & 0xC0) == 0x80)
		len--;
	return (int) len;
}

/*
 * Whether two property names are equal, ASCII case-insensitively (the
 * comparison action statements use to find their own earlier edits).
 */
bool
sbq_filter_name_eq(const char *a, size_t alen, const char *b, size_t blen)
{
	size_t		i;

	if (alen != blen)
		return false;
	for (i = 0; i < alen; i++)
	{
		unsigned char x = (unsigned char) a[i];
		unsigned char y = (unsigned char) b[i];

		if (x >= 'A' && x <= 'Z')
			x += 'a' - 'A';
		if (y >= 'A' && y <= 'Z')
			y += 'a' - 'A';
		if (x != y)
			return false;
	}
	return true;
}

/*
 * Look a property up: first in the edits of earlier action statements
 * (the last one wins), then through the message's callbacks. A user
 * property may be absent (*found false); a sys property must be known and
 * available, else the evaluation fails.
 */
bool
sbq_filter_lookup(SbqFilterEvalCtx *cx, SbqFilterScope scope,
				  SbqFilterSysProp sys, const char *name, size_t len,
				  bool *found, SbqFilterValue *v)
{
	int			i;

	memset(v, 0, sizeof(*v));
	*found = false;
	if (scope == SBQ_FSCOPE_SYS && sys == SBQ_FSYS_UNKNOWN)
		return sbq_filter_fail(cx, "sys property \"%.*s\" does not exist",
							   clip(name, len), name);
	for (i = cx->nedits - 1; i >= 0; i--)
	{
		const SbqFilterEdit *e = &cx->edits[i];

		if (e->scope != scope ||
			(scope == SBQ_FSCOPE_SYS ? e->sys != sys :
			 !sbq_filter_name_eq(e->name, e->name_len, name, len)))
			continue;
		*found = !e->remove;
		if (*found)
			*v = e->value;
		return true;
	}
	if (scope == SBQ_FSCOPE_USER)
	{
		if (cx->msg->user_lookup != NULL)
			*found = cx->msg->user_lookup(cx->msg->arg, name, len, v);
		if (!*found)
			memset(v, 0, sizeof(*v));
		return true;
	}
	if (cx->msg->sys_lookup == NULL || !cx->msg->sys_lookup(cx->msg->arg, sys, v))
		return sbq_filter_fail(cx, "sys property \"%s\" is not available",
							   sbq_filter_sys_name(sys));
	*found = true;
	return true;
}

/*
 * The property a string names, for property()/p(): a leading "sys." or
 * "user." (any case) picks the scope. Fills *scope, *sys, *name, *len.
 */
static void
split_scope(const SbqFilterValue *s, SbqFilterScope *scope,
			SbqFilterSysProp *sys, const char **name, size_t *len)
{
	*scope = SBQ_FSCOPE_USER;
	*sys = SBQ_FSYS_UNKNOWN;
	*name = s->s;
	*len = s->len;
	if (s->len >= 4 && sbq_filter_name_eq(s->s, 4, "sys.", 4))
	{
		*scope = SBQ_FSCOPE_SYS;
		*name = s->s + 4;
		*len = s->len - 4;
		*sys = sbq_filter_sys_from_name(*name, *len);
	}
	else if (s->len >= 5 && sbq_filter_name_eq(s->s, 5, "user.", 5))
	{
		*name = s->s + 5;
		*len = s->len - 5;
	}
}

/*
 * Evaluate a property reference (SBQ_FN_PROP or SBQ_FN_PROPFUNC) into
 * *out, with *found telling whether it exists. A value the language
 * cannot hold is an error unless allow_unsupported (IS NULL, EXISTS).
 */
static bool
eval_property(SbqFilterEvalCtx *cx, const SbqFilterNode *n, bool *found,
			  SbqFilterValue *out, bool allow_unsupported)
{
	SbqFilterScope scope = n->scope;
	SbqFilterSysProp sys = n->sys;
	const char *name = n->name;
	size_t		len = n->name_len;

	if (n->kind == SBQ_FN_PROPFUNC)
	{
		SbqFilterValue arg;

		if (!sbq_filter_eval_node(cx, n->left, &arg))
			return false;
		*found = false;
		memset(out, 0, sizeof(*out));
		if (arg.kind == SBQ_FV_NULL)
			return true;
		if (arg.kind != SBQ_FV_STRING)
			return sbq_filter_fail(cx, "property() needs a string, not %s",
								   sbq_filter_kind_name(arg.kind));
		split_scope(&arg, &scope, &sys, &name, &len);
	}
	if (!sbq_filter_lookup(cx, scope, sys, name, len, found, out))
		return false;
	if (out->kind == SBQ_FV_UNSUPPORTED && !allow_unsupported)
		return sbq_filter_fail(cx, "property \"%.*s\" has a value the filter language cannot use",
							   clip(name, len), name);
	return true;
}

/*
 * newid(): 16 random bytes from the caller, made a version-4 GUID and
 * written as 36 lowercase characters.
 */
static bool
eval_newid(SbqFilterEvalCtx *cx, SbqFilterValue *out)
{
	unsigned char b[16];
	char	   *s;
	int			i;
	int			k = 0;

	if (cx->msg->new_guid == NULL || !cx->msg->new_guid(cx->msg->arg, b))
		return sbq_filter_fail(cx, "newid() is not available");
	if (cx->budget < 37 || (s = cx->alloc(cx->alloc_arg, 37)) == NULL)
		return sbq_filter_fail(cx, "out of memory in newid()");
	cx->budget -= 37;
	b[6] = (unsigned char) ((b[6] & 0x0F) | 0x40);
	b[8] = (unsigned char) ((b[8] & 0x3F) | 0x80);
	for (i = 0; i < 16; i++)
	{
		if (i == 4 || i == 6 || i == 8 || i == 10)
			s[k++] = '-';
		s[k++] = "0123456789abcdef"[b[i] >> 4];
		s[k++] = "0123456789abcdef"[b[i] & 0x0F];
	}
	s[k] = '\0';
	out->kind = SBQ_FV_STRING;
	out->s = s;
	out->len = 36;
	return true;
}

/* unary + and -: numbers only; -INT64_MIN overflows */
static bool
eval_sign(SbqFilterEvalCtx *cx, const SbqFilterNode *n, SbqFilterValue *out)
{
	const char *op = n->kind == SBQ_FN_NEG ? "-" : "+";

	if (!sbq_filter_eval_node(cx, n->left, out))
		return false;
	if (out->kind == SBQ_FV_NULL)
		return true;
	if (out->kind == SBQ_FV_INT)
	{
		if (n->kind == SBQ_FN_NEG && out->i == INT64_MIN)
			return sbq_filter_fail(cx, "integer overflow in unary \"-\"");
		if (n->kind == SBQ_FN_NEG)
			out->i = -out->i;
		return true;
	}
	if (out->kind == SBQ_FV_DOUBLE)
	{
		if (n->kind == SBQ_FN_NEG)
			out->d = -out->d;
		return true;
	}
	return sbq_filter_fail(cx, "cannot apply unary \"%s\" to %s", op,
						   sbq_filter_kind_name(out->kind));
}

/* integer arithmetic, overflow and division by zero being errors */
static bool
arith_int(SbqFilterEvalCtx *cx, SbqFilterOp op, int64_t a, int64_t b,
		  SbqFilterValue *out)
{
	bool		overflow = false;

	out->kind = SBQ_FV_INT;
	switch (op)
	{
		case SBQ_FOP_ADD:
			overflow = __builtin_add_overflow(a, b, &out->i);
			break;
		case SBQ_FOP_SUB:
			overflow = __builtin_sub_overflow(a, b, &out->i);
			break;
		case SBQ_FOP_MUL:
			overflow = __builtin_mul_overflow(a, b, &out->i);
			break;
		default:
			if (b == 0)
				return sbq_filter_fail(cx, "division by zero in \"%s\"",
									   op_name(op));
			if (a == INT64_MIN && b == -1)
			{
				/* the quotient overflows; the remainder is 0 */
				overflow = op == SBQ_FOP_DIV;
				out->i = 0;
			}
			else
				out->i = op == SBQ_FOP_DIV ? a / b : a % b;
			break;
	}
	if (overflow)
		return sbq_filter_fail(cx, "integer overflow in \"%s\"", op_name(op));
	return true;
}

/* string + string: a new string, drawn on the evaluation's budget */
static bool
concat(SbqFilterEvalCtx *cx, const SbqFilterValue *a, const SbqFilterValue *b,
	   SbqFilterValue *out)
{
	size_t		n = a->len + b->len;
	char	   *s;

	if (n + 1 > cx->budget)
		return sbq_filter_fail(cx, "strings of this evaluation exceed %d bytes",
							   SBQ_FILTER_STRING_BUDGET);
	s = cx->alloc(cx->alloc_arg, n + 1);
	if (s == NULL)
		return sbq_filter_fail(cx, "out of memory in \"+\"");
	cx->budget -= n + 1;
	if (a->len > 0)
		memcpy(s, a->s, a->len);
	if (b->len > 0)
		memcpy(s + a->len, b->s, b->len);
	s[n] = '\0';
	out->kind = SBQ_FV_STRING;
	out->s = s;
	out->len = n;
	return true;
}

/*
 * + - * / % over two values: int64 with int64 stays int64, any double
 * makes both double (IEEE: x / 0.0 is infinite, % is fmod), string +
 * string concatenates, unknown gives unknown; anything else is an error.
 */
static bool
eval_arith(SbqFilterEvalCtx *cx, const SbqFilterNode *n, SbqFilterValue *out)
{
	SbqFilterValue a;
	SbqFilterValue b;
	bool		anum;
	bool		bnum;

	if (!sbq_filter_eval_node(cx, n->left, &a) ||
		!sbq_filter_eval_node(cx, n->right, &b))
		return false;
	memset(out, 0, sizeof(*out));
	if (a.kind == SBQ_FV_NULL || b.kind == SBQ_FV_NULL)
		return true;
	if (a.kind == SBQ_FV_INT && b.kind == SBQ_FV_INT)
		return arith_int(cx, n->op, a.i, b.i, out);
	anum = a.kind == SBQ_FV_INT || a.kind == SBQ_FV_DOUBLE;
	bnum = b.kind == SBQ_FV_INT || b.kind == SBQ_FV_DOUBLE;
	if (anum && bnum)
	{
		double		x = a.kind == SBQ_FV_INT ? (double) a.i : a.d;
		double		y = b.kind == SBQ_FV_INT ? (double) b.i : b.d;

		out->kind = SBQ_FV_DOUBLE;
		switch (n->op)
		{
			case SBQ_FOP_ADD: out->d = x + y; break;
			case SBQ_FOP_SUB: out->d = x - y; break;
			case SBQ_FOP_MUL: out->d = x * y; break;
			case SBQ_FOP_DIV: out->d = x / y; break;
			default: out->d = fmod(x, y); break;
		}
		return true;
	}
	if (n->op == SBQ_FOP_ADD && a.kind == SBQ_FV_STRING && b.kind == SBQ_FV_STRING)
		return concat(cx, &a, &b, out);
	return sbq_filter_fail(cx, "cannot apply \"%s\" to %s and %s", op_name(n->op),
						   sbq_filter_kind_name(a.kind),
						   sbq_filter_kind_name(b.kind));
}

/* the outcome of op given the sign of a comparison (<0, 0, >0) */
static bool
cmp_outcome(SbqFilterOp op, int c)
{
	switch (op)
	{
		case SBQ_FOP_EQ: return c == 0;
		case SBQ_FOP_NE: return c != 0;
		case SBQ_FOP_LT: return c < 0;
		case SBQ_FOP_LE: return c <= 0;
		case SBQ_FOP_GT: return c > 0;
		default: return c >= 0;
	}
}

/* op over two doubles, IEEE-style: NaN is unequal and unordered */
static bool
cmp_double(SbqFilterOp op, double x, double y)
{
	switch (op)
	{
		case SBQ_FOP_EQ: return x == y;
		case SBQ_FOP_NE: return x != y;
		case SBQ_FOP_LT: return x < y;
		case SBQ_FOP_LE: return x <= y;
		case SBQ_FOP_GT: return x > y;
		default: return x >= y;
	}
}

/*
 * Compare two non-NULL values with op into *res. Numbers compare as
 * numbers (int64 with double as double), strings ordinally, booleans
 * with = and <> only; other pairs are errors.
 */
static bool
compare_values(SbqFilterEvalCtx *cx, SbqFilterOp op, const SbqFilterValue *a,
			   const SbqFilterValue *b, bool *res)
{
	bool		anum = a->kind == SBQ_FV_INT || a->kind == SBQ_FV_DOUBLE;
	bool		bnum = b->kind == SBQ_FV_INT || b->kind == SBQ_FV_DOUBLE;

	if (a->kind == SBQ_FV_INT && b->kind == SBQ_FV_INT)
		*res = cmp_outcome(op, (a->i > b->i) - (a->i < b->i));
	else if (anum && bnum)
		*res = cmp_double(op, a->kind == SBQ_FV_INT ? (double) a->i : a->d,
						  b->kind == SBQ_FV_INT ? (double) b->i : b->d);
	else if (a->kind == SBQ_FV_STRING && b->kind == SBQ_FV_STRING)
	{
		size_t		m = a->len < b->len ? a->len : b->len;
		int			c = m > 0 ? memcmp(a->s, b->s, m) : 0;

		if (c == 0)
			c = (a->len > b->len) - (a->len < b->len);
		*res = cmp_outcome(op, c);
	}
	else if (a->kind == SBQ_FV_BOOL && b->kind == SBQ_FV_BOOL &&
			 (op == SBQ_FOP_EQ || op == SBQ_FOP_NE))
		*res = cmp_outcome(op, a->b != b->b);
	else if (a->kind == SBQ_FV_BOOL && b->kind == SBQ_FV_BOOL)
		return sbq_filter_fail(cx, "cannot compare boolean values with \"%s\"",
							   op_name(op));
	else
		return sbq_filter_fail(cx, "cannot compare %s with %s in \"%s\"",
							   sbq_filter_kind_name(a->kind),
							   sbq_filter_kind_name(b->kind), op_name(op));
	return true;
}

static void
set_bool(SbqFilterValue *out, bool b)
{
	memset(out, 0, sizeof(*out));
	out->kind = SBQ_FV_BOOL;
	out->b = b;
}

/* a comparison: unknown on either side gives unknown */
static bool
eval_cmp(SbqFilterEvalCtx *cx, const SbqFilterNode *n, SbqFilterValue *out)
{
	SbqFilterValue a;
	SbqFilterValue b;
	bool		res;

	if (!sbq_filter_eval_node(cx, n->left, &a) ||
		!sbq_filter_eval_node(cx, n->right, &b))
		return false;
	memset(out, 0, sizeof(*out));
	if (a.kind == SBQ_FV_NULL || b.kind == SBQ_FV_NULL)
		return true;
	if (!compare_values(cx, n->op, &a, &b, &res))
		return false;
	set_bool(out, res);
	return true;
}

/*
 * AND, OR, NOT in three-valued logic. AND stops at a FALSE left side and
 * OR at a TRUE one (the right side cannot change the result, so its errors
 * do not count). Operands must be boolean or unknown.
 */
static bool
eval_logic(SbqFilterEvalCtx *cx, const SbqFilterNode *n, SbqFilterValue *out)
{
	SbqFilterValue a;
	SbqFilterValue b;
	const char *what = n->kind == SBQ_FN_AND ? "AND" :
		n->kind == SBQ_FN_OR ? "OR" : "NOT";

	if (!sbq_filter_eval_node(cx, n->left, &a))
		return false;
	if (a.kind != SBQ_FV_NULL && a.kind != SBQ_FV_BOOL)
		return sbq_filter_fail(cx, "%s needs boolean operands, not %s", what,
							   sbq_filter_kind_name(a.kind));
	if (n->kind == SBQ_FN_NOT)
	{
		*out = a;
		out->b = !a.b;
		return true;
	}
	if (a.kind == SBQ_FV_BOOL && a.b == (n->kind == SBQ_FN_OR))
	{
		*out = a;
		return true;
	}
	if (!sbq_filter_eval_node(cx, n->right, &b))
		return false;
	if (b.kind != SBQ_FV_NULL && b.kind != SBQ_FV_BOOL)
		return sbq_filter_fail(cx, "%s needs boolean operands, not %s", what,
							   sbq_filter_kind_name(b.kind));
	if (b.kind == SBQ_FV_BOOL && b.b == (n->kind == SBQ_FN_OR))
		*out = b;
	else if (a.kind == SBQ_FV_NULL || b.kind == SBQ_FV_NULL)
		memset(out, 0, sizeof(*out));
	else
		*out = b;
	return true;
}

/* x IS [NOT] NULL: absent, NULL and unknown are all NULL */
static bool
eval_isnull(SbqFilterEvalCtx *cx, const SbqFilterNode *n, SbqFilterValue *out)
{
	SbqFilterValue v;
	bool		found;

	if (n->left->kind == SBQ_FN_PROP || n->left->kind == SBQ_FN_PROPFUNC)
	{
		if (!eval_property(cx, n->left, &found, &v, true))
			return false;
	}
	else if (!sbq_filter_eval_node(cx, n->left, &v))
		return false;
	set_bool(out, (v.kind == SBQ_FV_NULL) != n->negated);
	return true;
}

/* EXISTS(property): TRUE when the property is there, even if NULL */
static bool
eval_exists(SbqFilterEvalCtx *cx, const SbqFilterNode *n, SbqFilterValue *out)
{
	SbqFilterValue v;
	bool		found;

	if (!eval_property(cx, n->left, &found, &v, true))
		return false;
	set_bool(out, found);
	return true;
}

/*
 * x [NOT] IN (items): unknown x gives unknown; else TRUE at the first
 * equal item, else unknown if some item was unknown, else FALSE.
 */
static bool
eval_in(SbqFilterEvalCtx *cx, const SbqFilterNode *n, SbqFilterValue *out)
{
	SbqFilterValue x;
	bool		saw_null = false;
	int			i;

	if (!sbq_filter_eval_node(cx, n->left, &x))
		return false;
	memset(out, 0, sizeof(*out));
	if (x.kind == SBQ_FV_NULL)
		return true;
	for (i = 0; i < n->nitems; i++)
	{
		SbqFilterValue y;
		bool		eq;

		if (!sbq_filter_eval_node(cx, n->items[i], &y))
			return false;
		if (y.kind == SBQ_FV_NULL)
		{
			saw_null = true;
			continue;
		}
		if (!compare_values(cx, SBQ_FOP_EQ, &x, &y, &eq))
			return false;
		if (eq)
		{
			set_bool(out, !n->negated);
			return true;
		}
	}
	if (!saw_null)
		set_bool(out, n->negated);
	return true;
}

/* the byte length of the character at s, 1 for a malformed byte */
static size_t
char_len(const char *s, size_t avail)
{
	size_t		n = sbq_filter_utf8_len((const unsigned char *) s, avail);

	return n == 0 ? 1 : n;
}

/* one element of a LIKE pattern */
typedef struct LikeTok
{
	int			kind;			/* '%', '_', or 'c' for a literal */
	const char *lit;
	size_t		litlen;
	size_t		next;			/* offset of the element after it */
} LikeTok;

/* the pattern element at offset pi (esclen 0: no escape character) */
static void
like_tok(const char *p, size_t plen, size_t pi, const char *esc,
		 size_t esclen, LikeTok *t)
{
	size_t		n = char_len(p + pi, plen - pi);

	if (esclen > 0 && n == esclen && memcmp(p + pi, esc, esclen) == 0 &&
		pi + n < plen)
	{
		t->kind = 'c';
		t->lit = p + pi + n;
		t->litlen = char_len(t->lit, plen - pi - n);
		t->next = pi + n + t->litlen;
		return;
	}
	t->kind = p[pi] == '%' ? '%' : p[pi] == '_' ? '_' : 'c';
	t->lit = p + pi;
	t->litlen = n;
	t->next = pi + n;
}

/*
 * Whether s matches the LIKE pattern p. Greedy with one backtrack point,
 * the last "%": when a literal fails, that "%" swallows one more
 * character and matching resumes after it. O(len(s) * len(p)).
 */
static bool
like_match(const char *s, size_t slen, const char *p, size_t plen,
		   const char *esc, size_t esclen)
{
	size_t		si = 0;
	size_t		pi = 0;
	size_t		star_pi = 0;
	size_t		star_si = 0;
	bool		star = false;
	uint32_t	steps = 0;
	LikeTok		t;

	while (si < slen)
	{
		size_t		n = char_len(s + si, slen - si);

		/* a long string against a long pattern takes seconds: cancellable */
		if ((++steps & 0xFFFF) == 0 && sbq_filter_interrupt_check != NULL)
			sbq_filter_interrupt_check();

		if (pi < plen)
		{
			like_tok(p, plen, pi, esc, esclen, &t);
			if (t.kind == '%')
			{
				star = true;
				star_pi = pi = t.next;
				star_si = si;
				continue;
			}
			if (t.kind == '_' ||
				(t.litlen == n && memcmp(t.lit, s + si, n) == 0))
			{
				si += n;
				pi = t.next;
				continue;
			}
		}
		if (!star)
			return false;
		star_si += char_len(s + star_si, slen - star_si);
		si = star_si;
		pi = star_pi;
	}
	for (; pi < plen; pi = t.next)
	{
		like_tok(p, plen, pi, esc, esclen, &t);
		if (t.kind != '%')
			return false;
	}
	return true;
}

/*
 * Check the operands of LIKE: strings, a one-character escape, a pattern
 * that does not end in a lone escape character.
 */
static bool
like_check(SbqFilterEvalCtx *cx, const SbqFilterValue *x,
		   const SbqFilterValue *pat, const SbqFilterValue *esc)
{
	size_t		pi;

	if (x->kind != SBQ_FV_STRING || pat->kind != SBQ_FV_STRING)
		return sbq_filter_fail(cx, "LIKE needs strings, not %s",
							   sbq_filter_kind_name(x->kind != SBQ_FV_STRING ?
													x->kind : pat->kind));
	if (esc->kind == SBQ_FV_NULL)
		return true;			/* no ESCAPE clause */
	if (esc->kind != SBQ_FV_STRING || esc->len == 0 ||
		char_len(esc->s, esc->len) != esc->len)
		return sbq_filter_fail(cx, "ESCAPE must be a single character");
	for (pi = 0; pi < pat->len;)
	{
		size_t		n = char_len(pat->s + pi, pat->len - pi);

		if (n == esc->len && memcmp(pat->s + pi, esc->s, n) == 0)
		{
			if (pi + n >= pat->len)
				return sbq_filter_fail(cx, "LIKE pattern ends with the escape character");
			pi += n;
			n = char_len(pat->s + pi, pat->len - pi);
		}
		pi += n;
	}
	return true;
}

/* x [NOT] LIKE pattern [ESCAPE c]: unknown anywhere gives unknown */
static bool
eval_like(SbqFilterEvalCtx *cx, const SbqFilterNode *n, SbqFilterValue *out)
{
	SbqFilterValue x;
	SbqFilterValue pat;
	SbqFilterValue esc;

	memset(&esc, 0, sizeof(esc));
	if (!sbq_filter_eval_node(cx, n->left, &x) ||
		!sbq_filter_eval_node(cx, n->right, &pat) ||
		(n->escape != NULL && !sbq_filter_eval_node(cx, n->escape, &esc)))
		return false;
	memset(out, 0, sizeof(*out));
	if (x.kind == SBQ_FV_NULL || pat.kind == SBQ_FV_NULL ||
		(n->escape != NULL && esc.kind == SBQ_FV_NULL))
		return true;
	if (!like_check(cx, &x, &pat, &esc))
		return false;
	set_bool(out, like_match(x.s, x.len, pat.s, pat.len,
							 esc.kind == SBQ_FV_STRING ? esc.s : NULL,
							 esc.kind == SBQ_FV_STRING ? esc.len : 0) != n->negated);
	return true;
}

/*
 * Evaluate one node into *out (SBQ_FV_NULL for unknown). False: an error,
 * recorded in cx->err.
 */
bool
sbq_filter_eval_node(SbqFilterEvalCtx *cx, const SbqFilterNode *n,
					 SbqFilterValue *out)
{
	bool		found;

	switch (n->kind)
	{
		case SBQ_FN_CONST:
			*out = n->value;
			return true;
		case SBQ_FN_PROP:
		case SBQ_FN_PROPFUNC:
			return eval_property(cx, n, &found, out, false);
		case SBQ_FN_NEWID:
			return eval_newid(cx, out);
		case SBQ_FN_NEG:
		case SBQ_FN_POS:
			return eval_sign(cx, n, out);
		case SBQ_FN_NOT:
		case SBQ_FN_AND:
		case SBQ_FN_OR:
			return eval_logic(cx, n, out);
		case SBQ_FN_ARITH:
			return eval_arith(cx, n, out);
		case SBQ_FN_CMP:
			return eval_cmp(cx, n, out);
		case SBQ_FN_ISNULL:
			return eval_isnull(cx, n, out);
		case SBQ_FN_IN:
			return eval_in(cx, n, out);
		case SBQ_FN_LIKE:
			return eval_like(cx, n, out);
		case SBQ_FN_EXISTS:
			return eval_exists(cx, n, out);
	}
	return sbq_filter_fail(cx, "unknown node kind %d", (int) n->kind);
}

/*
 * Evaluate a filter against a message: TRUE, FALSE, UNKNOWN (does not
 * match), or ERROR with *err filled (type "FilterException"). A filter
 * whose value is not a boolean is an error.
 */
SbqFilterResult
sbq_filter_eval(const SbqFilterExpr *f, const SbqFilterMessage *m,
				SbqFilterAlloc alloc, void *alloc_arg, SbqFilterError *err)
{
	SbqFilterEvalCtx cx;
	SbqFilterValue v;

	memset(&cx, 0, sizeof(cx));
	cx.msg = m;
	cx.alloc = alloc;
	cx.alloc_arg = alloc_arg;
	cx.err = err;
	cx.errtype = "FilterException";
	cx.budget = SBQ_FILTER_STRING_BUDGET;
	err->type = NULL;
	err->message = NULL;
	err->position = 0;
	if (f == NULL || f->root == NULL)
	{
		sbq_filter_fail(&cx, "no filter");
		return SBQ_FILTER_ERROR;
	}
	if (!sbq_filter_eval_node(&cx, f->root, &v))
		return SBQ_FILTER_ERROR;
	if (v.kind == SBQ_FV_NULL)
		return SBQ_FILTER_UNKNOWN;
	if (v.kind != SBQ_FV_BOOL)
	{
		sbq_filter_fail(&cx, "filter gives %s, not boolean",
						sbq_filter_kind_name(v.kind));
		return SBQ_FILTER_ERROR;
	}
	return v.b ? SBQ_FILTER_TRUE : SBQ_FILTER_FALSE;
}
