/*-------------------------------------------------------------------------
 *
 * filter_parse.c
 *	  The recursive-descent parser of the SQL filter and rule-action
 *	  language (filter.h): tokens (filter_lex.c) in, a tree of
 *	  SbqFilterNode out, or an error with its character position.
 *
 * The lexer checks the text first (valid UTF-8, at most 1,024
 * characters) and cuts it into tokens. Precedence, loosest first: OR, AND, NOT,
 * the predicates (comparisons, IS [NOT] NULL, [NOT] IN, [NOT] LIKE,
 * EXISTS), + and -, * / and %, unary + and -. Comparisons do not chain
 * ("a = b = c" is a syntax error). Recursion is bounded by
 * SBQ_FILTER_MAX_DEPTH; every loop advances through the tokens, so the
 * work is linear in the text.
 *
 * Uses no global mutable state and allocates only through the caller's
 * allocator.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/filter_parse.c
 *
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include "filter_int.h"

static SbqFilterNode *parse_or(SbqFilterParser *p);
static SbqFilterNode *parse_additive(SbqFilterParser *p);

static SbqFilterToken *
peek(SbqFilterParser *p)
{
	return &p->toks[p->cur];
}

static SbqFilterToken *
peek2(SbqFilterParser *p)
{
	return p->cur + 1 < p->ntoks ? &p->toks[p->cur + 1] : &p->toks[p->cur];
}

static SbqFilterToken *
advance(SbqFilterParser *p)
{
	SbqFilterToken	   *t = &p->toks[p->cur];

	if (t->kind != SBQ_FT_EOF)
		p->cur++;
	return t;
}

/* a syntax error at the current token */
static void *
unexpected(SbqFilterParser *p)
{
	SbqFilterToken	   *t = peek(p);

	if (t->kind == SBQ_FT_EOF)
		return sbq_filter_perror(p, t->pos, "syntax error at end of input");
	return sbq_filter_perror(p, t->pos, "syntax error at or near \"%.*s\"",
				   (int) (t->rawlen > 40 ? 40 : t->rawlen), t->raw);
}

static bool
expect(SbqFilterParser *p, SbqFilterTokKind kind)
{
	if (peek(p)->kind != kind)
	{
		unexpected(p);
		return false;
	}
	advance(p);
	return true;
}

/* enter one nesting level; false (and the error) past the limit */
static bool
enter(SbqFilterParser *p)
{
	if (++p->depth > SBQ_FILTER_MAX_DEPTH)
	{
		sbq_filter_perror(p, peek(p)->pos, "nested too deeply (more than %d levels)",
				SBQ_FILTER_MAX_DEPTH);
		return false;
	}
	return true;
}

static SbqFilterNode *
new_node(SbqFilterParser *p, SbqFilterNodeKind kind)
{
	SbqFilterNode *n = sbq_filter_palloc(p, sizeof(SbqFilterNode));

	if (n != NULL)
		n->kind = kind;
	return n;
}

/*
 * A property reference: [sys. | user.] name, where name is a regular
 * identifier, a "quoted" or a [delimited] name. Fills scope, sys and name
 * of n.
 */
static bool
parse_property_ref(SbqFilterParser *p, SbqFilterNode *n)
{
	SbqFilterToken	   *t = peek(p);

	n->scope = SBQ_FSCOPE_USER;
	if (t->kind == SBQ_FT_IDENT && peek2(p)->kind == SBQ_FT_DOT)
	{
		if (sbq_filter_ascii_ieq(t->s, t->len, "sys"))
			n->scope = SBQ_FSCOPE_SYS;
		else if (!sbq_filter_ascii_ieq(t->s, t->len, "user"))
		{
			sbq_filter_perror(p, t->pos, "unknown scope \"%.*s\"",
					(int) (t->len > 40 ? 40 : t->len), t->s);
			return false;
		}
		advance(p);
		advance(p);
		t = peek(p);
	}
	if (t->kind != SBQ_FT_IDENT && t->kind != SBQ_FT_QNAME)
	{
		if (t->kind == SBQ_FT_EOF)
			sbq_filter_perror(p, t->pos, "property name expected at end of input");
		else
			sbq_filter_perror(p, t->pos, "property name expected at or near \"%.*s\"",
					(int) (t->rawlen > 40 ? 40 : t->rawlen), t->raw);
		return false;
	}
	advance(p);
	n->name = t->s;
	n->name_len = t->len;
	if (n->scope == SBQ_FSCOPE_SYS)
		n->sys = sbq_filter_sys_from_name(t->s, t->len);
	return true;
}

/*
 * A function call: newid() or property(expr) / p(expr); the name token is
 * current and a "(" follows it.
 */
static SbqFilterNode *
parse_function(SbqFilterParser *p)
{
	SbqFilterToken	   *t = peek(p);
	SbqFilterNode *n;

	if (sbq_filter_ascii_ieq(t->s, t->len, "newid"))
	{
		advance(p);
		advance(p);				/* the "(" */
		n = new_node(p, SBQ_FN_NEWID);
		if (n == NULL || !expect(p, SBQ_FT_RPAREN))
			return NULL;
		return n;
	}
	if (!sbq_filter_ascii_ieq(t->s, t->len, "property") && !sbq_filter_ascii_ieq(t->s, t->len, "p"))
		return sbq_filter_perror(p, t->pos, "unknown function \"%.*s\"",
					   (int) (t->len > 40 ? 40 : t->len), t->s);
	n = new_node(p, SBQ_FN_PROPFUNC);
	if (n == NULL || !enter(p))
		return NULL;
	advance(p);
	advance(p);					/* the "(" */
	n->left = parse_additive(p);
	p->depth--;
	if (n->left == NULL || !expect(p, SBQ_FT_RPAREN))
		return NULL;
	return n;
}

/* a constant token made into a node */
static SbqFilterNode *
const_node(SbqFilterParser *p, SbqFilterToken *t)
{
	SbqFilterNode *n = new_node(p, SBQ_FN_CONST);

	if (n == NULL)
		return NULL;
	switch (t->kind)
	{
		case SBQ_FT_INT:
			n->value.kind = SBQ_FV_INT;
			n->value.i = t->i;
			break;
		case SBQ_FT_DOUBLE:
			n->value.kind = SBQ_FV_DOUBLE;
			n->value.d = t->d;
			break;
		case SBQ_FT_STRING:
			n->value.kind = SBQ_FV_STRING;
			n->value.s = t->s;
			n->value.len = t->len;
			break;
		case SBQ_FT_TRUE:
		case SBQ_FT_FALSE:
			n->value.kind = SBQ_FV_BOOL;
			n->value.b = t->kind == SBQ_FT_TRUE;
			break;
		default:
			n->value.kind = SBQ_FV_NULL;
			break;
	}
	return n;
}

/*
 * A primary: a constant, a parenthesized expression (which may be a
 * predicate), a function call or a property.
 */
static SbqFilterNode *
parse_primary(SbqFilterParser *p)
{
	SbqFilterToken	   *t = peek(p);
	SbqFilterNode *n;

	switch (t->kind)
	{
		case SBQ_FT_INT:
		case SBQ_FT_DOUBLE:
		case SBQ_FT_STRING:
		case SBQ_FT_TRUE:
		case SBQ_FT_FALSE:
		case SBQ_FT_NULL:
			return const_node(p, advance(p));
		case SBQ_FT_BIGINT:
			return sbq_filter_perror(p, t->pos, "integer constant out of range");
		case SBQ_FT_LPAREN:
			if (!enter(p))
				return NULL;
			advance(p);
			n = parse_or(p);
			p->depth--;
			if (n == NULL || !expect(p, SBQ_FT_RPAREN))
				return NULL;
			return n;
		case SBQ_FT_IDENT:
			if (peek2(p)->kind == SBQ_FT_LPAREN)
				return parse_function(p);
			/* FALLTHROUGH */
		case SBQ_FT_QNAME:
			n = new_node(p, SBQ_FN_PROP);
			if (n == NULL || !parse_property_ref(p, n))
				return NULL;
			return n;
		default:
			return unexpected(p);
	}
}

/*
 * Unary + and -. A minus directly before 9223372036854775808 makes the
 * smallest int64, the one integer constant that is out of range unsigned.
 */
static SbqFilterNode *
parse_unary(SbqFilterParser *p)
{
	SbqFilterToken	   *t = peek(p);
	SbqFilterNode *n;

	if (t->kind != SBQ_FT_PLUS && t->kind != SBQ_FT_MINUS)
		return parse_primary(p);
	if (!enter(p))
		return NULL;
	advance(p);
	if (t->kind == SBQ_FT_MINUS && peek(p)->kind == SBQ_FT_BIGINT)
	{
		n = new_node(p, SBQ_FN_CONST);
		if (n == NULL)
			return NULL;
		advance(p);
		p->depth--;
		n->value.kind = SBQ_FV_INT;
		n->value.i = INT64_MIN;
		return n;
	}
	n = new_node(p, t->kind == SBQ_FT_MINUS ? SBQ_FN_NEG : SBQ_FN_POS);
	if (n == NULL)
		return NULL;
	n->left = parse_unary(p);
	p->depth--;
	return n->left != NULL ? n : NULL;
}

/* a binary node of kind and op over left and right */
static SbqFilterNode *
binary(SbqFilterParser *p, SbqFilterNodeKind kind, SbqFilterOp op,
	   SbqFilterNode *left, SbqFilterNode *right)
{
	SbqFilterNode *n;

	if (left == NULL || right == NULL)
		return NULL;
	n = new_node(p, kind);
	if (n == NULL)
		return NULL;
	n->op = op;
	n->left = left;
	n->right = right;
	return n;
}

/* * / and %, left-associative */
static SbqFilterNode *
parse_multiplicative(SbqFilterParser *p)
{
	SbqFilterNode *n = parse_unary(p);

	while (n != NULL)
	{
		SbqFilterTokKind		k = peek(p)->kind;
		SbqFilterOp op;

		if (k == SBQ_FT_STAR)
			op = SBQ_FOP_MUL;
		else if (k == SBQ_FT_SLASH)
			op = SBQ_FOP_DIV;
		else if (k == SBQ_FT_PERCENT)
			op = SBQ_FOP_MOD;
		else
			break;
		advance(p);
		n = binary(p, SBQ_FN_ARITH, op, n, parse_unary(p));
	}
	return n;
}

/* + and -, left-associative */
static SbqFilterNode *
parse_additive(SbqFilterParser *p)
{
	SbqFilterNode *n = parse_multiplicative(p);

	while (n != NULL)
	{
		SbqFilterTokKind		k = peek(p)->kind;

		if (k != SBQ_FT_PLUS && k != SBQ_FT_MINUS)
			break;
		advance(p);
		n = binary(p, SBQ_FN_ARITH, k == SBQ_FT_PLUS ? SBQ_FOP_ADD : SBQ_FOP_SUB,
				   n, parse_multiplicative(p));
	}
	return n;
}

/* the comparison operator a token stands for, or SBQ_FOP_NONE */
static SbqFilterOp
comparison_op(SbqFilterTokKind k)
{
	switch (k)
	{
		case SBQ_FT_EQ: return SBQ_FOP_EQ;
		case SBQ_FT_NE: return SBQ_FOP_NE;
		case SBQ_FT_LT: return SBQ_FOP_LT;
		case SBQ_FT_LE: return SBQ_FOP_LE;
		case SBQ_FT_GT: return SBQ_FOP_GT;
		case SBQ_FT_GE: return SBQ_FOP_GE;
		default: return SBQ_FOP_NONE;
	}
}

/*
 * The rest of "x [NOT] IN (a, b, ...)" after the IN: the parenthesized,
 * non-empty list.
 */
static SbqFilterNode *
parse_in_list(SbqFilterParser *p, SbqFilterNode *n)
{
	int			cap = 0;
	int			i;

	if (peek(p)->kind != SBQ_FT_LPAREN)
		return unexpected(p);
	if (!enter(p))
		return NULL;
	advance(p);
	/* count the items at this level first: commas bound them */
	for (i = p->cur; i < p->ntoks && p->toks[i].kind != SBQ_FT_EOF; i++)
		cap++;
	n->items = sbq_filter_palloc(p, (size_t) (cap + 1) * sizeof(SbqFilterNode *));
	if (n->items == NULL)
		return NULL;
	for (;;)
	{
		SbqFilterNode *item = parse_additive(p);

		if (item == NULL)
			return NULL;
		n->items[n->nitems++] = item;
		if (peek(p)->kind != SBQ_FT_COMMA)
			break;
		advance(p);
	}
	p->depth--;
	if (!expect(p, SBQ_FT_RPAREN))
		return NULL;
	return n;
}

/*
 * The rest of "x [NOT] LIKE pattern [ESCAPE c]" after the LIKE. A constant
 * escape must be a one-character string: anything else is a parse error
 * at the escape.
 */
static SbqFilterNode *
parse_like_rest(SbqFilterParser *p, SbqFilterNode *n)
{
	n->right = parse_additive(p);
	if (n->right == NULL)
		return NULL;
	if (peek(p)->kind == SBQ_FT_ESCAPE)
	{
		SbqFilterToken	   *t;
		const SbqFilterValue *v;

		advance(p);
		t = peek(p);
		n->escape = parse_additive(p);
		if (n->escape == NULL)
			return NULL;
		v = &n->escape->value;
		if (n->escape->kind == SBQ_FN_CONST && v->kind != SBQ_FV_NULL &&
			(v->kind != SBQ_FV_STRING || v->len == 0 ||
			 sbq_filter_utf8_len((const unsigned char *) v->s, v->len) != v->len))
			return sbq_filter_perror(p, t->pos, "ESCAPE must be a single character");
	}
	return n;
}

/*
 * A predicate: EXISTS(property), or an additive expression optionally
 * followed by one comparison, IS [NOT] NULL, [NOT] IN or [NOT] LIKE.
 */
static SbqFilterNode *
parse_predicate(SbqFilterParser *p)
{
	SbqFilterNode *left;
	SbqFilterNode *n;
	SbqFilterOp op;
	bool		negated = false;
	SbqFilterTokKind		k;

	if (peek(p)->kind == SBQ_FT_EXISTS)
	{
		advance(p);
		n = new_node(p, SBQ_FN_EXISTS);
		if (n == NULL || !expect(p, SBQ_FT_LPAREN))
			return NULL;
		n->left = new_node(p, SBQ_FN_PROP);
		if (n->left == NULL || !parse_property_ref(p, n->left) ||
			!expect(p, SBQ_FT_RPAREN))
			return NULL;
		return n;
	}
	left = parse_additive(p);
	if (left == NULL)
		return NULL;
	k = peek(p)->kind;
	op = comparison_op(k);
	if (op != SBQ_FOP_NONE)
	{
		advance(p);
		return binary(p, SBQ_FN_CMP, op, left, parse_additive(p));
	}
	if (k == SBQ_FT_IS)
	{
		advance(p);
		if (peek(p)->kind == SBQ_FT_NOT)
			negated = advance(p) != NULL;
		if (!expect(p, SBQ_FT_NULL))
			return NULL;
		n = new_node(p, SBQ_FN_ISNULL);
		if (n == NULL)
			return NULL;
		n->negated = negated;
		n->left = left;
		return n;
	}
	if (k == SBQ_FT_NOT && (peek2(p)->kind == SBQ_FT_IN || peek2(p)->kind == SBQ_FT_LIKE))
	{
		advance(p);
		negated = true;
		k = peek(p)->kind;
	}
	if (k != SBQ_FT_IN && k != SBQ_FT_LIKE)
		return left;
	advance(p);
	n = new_node(p, k == SBQ_FT_IN ? SBQ_FN_IN : SBQ_FN_LIKE);
	if (n == NULL)
		return NULL;
	n->negated = negated;
	n->left = left;
	return k == SBQ_FT_IN ? parse_in_list(p, n) : parse_like_rest(p, n);
}

/* NOT, right-associative, binding tighter than AND */
static SbqFilterNode *
parse_not(SbqFilterParser *p)
{
	SbqFilterNode *n;

	if (peek(p)->kind != SBQ_FT_NOT)
		return parse_predicate(p);
	if (!enter(p))
		return NULL;
	advance(p);
	n = new_node(p, SBQ_FN_NOT);
	if (n == NULL)
		return NULL;
	n->left = parse_not(p);
	p->depth--;
	return n->left != NULL ? n : NULL;
}

static SbqFilterNode *
parse_and(SbqFilterParser *p)
{
	SbqFilterNode *n = parse_not(p);

	while (n != NULL && peek(p)->kind == SBQ_FT_AND)
	{
		advance(p);
		n = binary(p, SBQ_FN_AND, SBQ_FOP_NONE, n, parse_not(p));
	}
	return n;
}

static SbqFilterNode *
parse_or(SbqFilterParser *p)
{
	SbqFilterNode *n = parse_and(p);

	while (n != NULL && peek(p)->kind == SBQ_FT_OR)
	{
		advance(p);
		n = binary(p, SBQ_FN_OR, SBQ_FOP_NONE, n, parse_and(p));
	}
	return n;
}

/* set up a parser over text and tokenize it */
static bool
parser_init(SbqFilterParser *p, const char *text, size_t len, SbqFilterAlloc alloc,
			void *alloc_arg, SbqFilterError *err)
{
	memset(p, 0, sizeof(*p));
	p->text = text;
	p->len = len;
	p->alloc = alloc;
	p->alloc_arg = alloc_arg;
	p->err = err;
	err->type = NULL;
	err->message = NULL;
	err->position = 0;
	if (text == NULL && len > 0)
		return sbq_filter_perror(p, 1, "no text") != NULL;
	return sbq_filter_lex(p);
}

/*
 * Parse a filter. The whole text must be one expression; an empty text is
 * an error.
 */
bool
sbq_filter_parse(const char *text, size_t len, SbqFilterAlloc alloc,
				 void *alloc_arg, SbqFilterExpr **out, SbqFilterError *err)
{
	SbqFilterParser		p;
	SbqFilterExpr *f;

	*out = NULL;
	if (!parser_init(&p, text, len, alloc, alloc_arg, err))
		return false;
	if (peek(&p)->kind == SBQ_FT_EOF)
		return sbq_filter_perror(&p, peek(&p)->pos, "empty filter") != NULL;
	f = sbq_filter_palloc(&p, sizeof(SbqFilterExpr));
	if (f == NULL)
		return false;
	f->root = parse_or(&p);
	if (f->root == NULL)
		return false;
	if (peek(&p)->kind != SBQ_FT_EOF)
		return unexpected(&p) != NULL;
	*out = f;
	return true;
}

/*
 * One action statement: SET property = expression, or REMOVE property.
 * The keywords are recognised here only, so filters may still use
 * properties named "set" or "remove".
 */
static bool
parse_statement(SbqFilterParser *p, SbqFilterStmt *st)
{
	SbqFilterToken	   *t = peek(p);
	SbqFilterNode ref;

	if (t->kind != SBQ_FT_IDENT ||
		(!sbq_filter_ascii_ieq(t->s, t->len, "set") && !sbq_filter_ascii_ieq(t->s, t->len, "remove")))
	{
		if (t->kind == SBQ_FT_EOF)
			sbq_filter_perror(p, t->pos, "SET or REMOVE expected at end of input");
		else
			sbq_filter_perror(p, t->pos, "SET or REMOVE expected at or near \"%.*s\"",
					(int) (t->rawlen > 40 ? 40 : t->rawlen), t->raw);
		return false;
	}
	advance(p);
	st->remove = sbq_filter_ascii_ieq(t->s, t->len, "remove");
	memset(&ref, 0, sizeof(ref));
	if (!parse_property_ref(p, &ref))
		return false;
	st->scope = ref.scope;
	st->sys = ref.sys;
	st->name = ref.name;
	st->name_len = ref.name_len;
	if (st->remove)
		return true;
	if (!expect(p, SBQ_FT_EQ))
		return false;
	st->expr = parse_additive(p);
	return st->expr != NULL;
}

/*
 * Parse an action: statements separated by ",", each optionally ended by
 * ";" (so "SET a = 1; SET b = 2" and "SET a = 1, SET b = 2;" both work),
 * at most SBQ_FILTER_MAX_STATEMENTS of them.
 */
bool
sbq_action_parse(const char *text, size_t len, SbqFilterAlloc alloc,
				 void *alloc_arg, SbqFilterAction **out, SbqFilterError *err)
{
	SbqFilterParser		p;
	SbqFilterAction *a;

	*out = NULL;
	if (!parser_init(&p, text, len, alloc, alloc_arg, err))
		return false;
	if (peek(&p)->kind == SBQ_FT_EOF)
		return sbq_filter_perror(&p, peek(&p)->pos, "empty action") != NULL;
	a = sbq_filter_palloc(&p, sizeof(SbqFilterAction));
	if (a == NULL)
		return false;
	a->stmts = sbq_filter_palloc(&p, SBQ_FILTER_MAX_STATEMENTS * sizeof(SbqFilterStmt));
	if (a->stmts == NULL)
		return false;
	for (;;)
	{
		bool		ended = false;

		if (a->nstmts == SBQ_FILTER_MAX_STATEMENTS)
			return sbq_filter_perror(&p, peek(&p)->pos, "more than %d statements",
						   SBQ_FILTER_MAX_STATEMENTS) != NULL;
		if (!parse_statement(&p, &a->stmts[a->nstmts]))
			return false;
		a->nstmts++;
		if (peek(&p)->kind == SBQ_FT_SEMI)
			ended = advance(&p) != NULL;
		if (peek(&p)->kind == SBQ_FT_COMMA)
		{
			advance(&p);
			continue;
		}
		if (peek(&p)->kind == SBQ_FT_EOF)
			break;
		if (!ended)
			return unexpected(&p) != NULL;
	}
	*out = a;
	return true;
}
