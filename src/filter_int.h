/*-------------------------------------------------------------------------
 *
 * filter_int.h
 *	  The compiled form of filters and actions (the tree the parser builds
 *	  and the evaluators walk), and helpers the engine's files share. Not
 *	  for callers of the engine: they see filter.h only.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/filter_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SBQ_FILTER_INT_H
#define SBQ_FILTER_INT_H

#include "filter.h"

/* printf-style format checking where the compiler has it */
#if defined(__GNUC__)
#define SBQ_FILTER_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define SBQ_FILTER_PRINTF(f, a)
#endif

typedef enum SbqFilterNodeKind
{
	SBQ_FN_CONST,				/* value */
	SBQ_FN_PROP,				/* scope, sys, name */
	SBQ_FN_PROPFUNC,			/* property(left) */
	SBQ_FN_NEWID,
	SBQ_FN_NEG,					/* -left */
	SBQ_FN_POS,					/* +left */
	SBQ_FN_NOT,					/* NOT left */
	SBQ_FN_AND,
	SBQ_FN_OR,
	SBQ_FN_ARITH,				/* left op right */
	SBQ_FN_CMP,					/* left op right */
	SBQ_FN_ISNULL,				/* left IS [NOT] NULL */
	SBQ_FN_IN,					/* left [NOT] IN (items) */
	SBQ_FN_LIKE,				/* left [NOT] LIKE right [ESCAPE escape] */
	SBQ_FN_EXISTS				/* EXISTS(left), left a property */
} SbqFilterNodeKind;

typedef enum SbqFilterOp
{
	SBQ_FOP_NONE,
	SBQ_FOP_ADD,
	SBQ_FOP_SUB,
	SBQ_FOP_MUL,
	SBQ_FOP_DIV,
	SBQ_FOP_MOD,
	SBQ_FOP_EQ,
	SBQ_FOP_NE,
	SBQ_FOP_LT,
	SBQ_FOP_LE,
	SBQ_FOP_GT,
	SBQ_FOP_GE
} SbqFilterOp;

typedef struct SbqFilterNode SbqFilterNode;

struct SbqFilterNode
{
	SbqFilterNodeKind kind;
	SbqFilterOp op;
	bool		negated;		/* NOT IN, NOT LIKE, IS NOT NULL */
	SbqFilterValue value;		/* SBQ_FN_CONST */
	SbqFilterScope scope;		/* SBQ_FN_PROP */
	SbqFilterSysProp sys;
	const char *name;
	size_t		name_len;
	SbqFilterNode *left;
	SbqFilterNode *right;
	SbqFilterNode *escape;
	SbqFilterNode **items;		/* SBQ_FN_IN */
	int			nitems;
};

struct SbqFilterExpr
{
	SbqFilterNode *root;
};

/* one SET or REMOVE */
typedef struct SbqFilterStmt
{
	bool		remove;
	SbqFilterScope scope;
	SbqFilterSysProp sys;
	const char *name;
	size_t		name_len;
	SbqFilterNode *expr;		/* SET only */
} SbqFilterStmt;

struct SbqFilterAction
{
	SbqFilterStmt *stmts;
	int			nstmts;
};

/*
 * What an evaluation carries: the message, the allocator, where errors
 * go and which exception type they name, the edits of the action's
 * earlier statements (NULL for filters) and the string budget left.
 */
typedef struct SbqFilterEvalCtx
{
	const SbqFilterMessage *msg;
	SbqFilterAlloc alloc;
	void	   *alloc_arg;
	SbqFilterError *err;
	const char *errtype;
	const SbqFilterEdit *edits;
	int			nedits;
	size_t		budget;
} SbqFilterEvalCtx;

/* filter_eval.c, shared with filter_action.c */
extern bool sbq_filter_eval_node(SbqFilterEvalCtx *cx, const SbqFilterNode *n,
								 SbqFilterValue *out);
extern bool sbq_filter_fail(SbqFilterEvalCtx *cx, const char *fmt,...) SBQ_FILTER_PRINTF(2, 3);
extern bool sbq_filter_name_eq(const char *a, size_t alen,
							   const char *b, size_t blen);
extern const char *sbq_filter_kind_name(SbqFilterValueKind kind);
extern bool sbq_filter_lookup(SbqFilterEvalCtx *cx, SbqFilterScope scope,
							  SbqFilterSysProp sys, const char *name,
							  size_t len, bool *found, SbqFilterValue *v);

/* the tokens of the language (filter_lex.c) */
typedef enum SbqFilterTokKind
{
	SBQ_FT_EOF,
	SBQ_FT_IDENT,					/* regular identifier, not a keyword */
	SBQ_FT_QNAME,					/* "quoted" or [delimited] name, decoded */
	SBQ_FT_INT,
	SBQ_FT_BIGINT,					/* 9223372036854775808: only after a minus */
	SBQ_FT_DOUBLE,
	SBQ_FT_STRING,					/* decoded */
	SBQ_FT_LPAREN,
	SBQ_FT_RPAREN,
	SBQ_FT_COMMA,
	SBQ_FT_DOT,
	SBQ_FT_SEMI,
	SBQ_FT_EQ,
	SBQ_FT_NE,
	SBQ_FT_LT,
	SBQ_FT_LE,
	SBQ_FT_GT,
	SBQ_FT_GE,
	SBQ_FT_PLUS,
	SBQ_FT_MINUS,
	SBQ_FT_STAR,
	SBQ_FT_SLASH,
	SBQ_FT_PERCENT,
	SBQ_FT_AND,
	SBQ_FT_OR,
	SBQ_FT_NOT,
	SBQ_FT_IS,
	SBQ_FT_NULL,
	SBQ_FT_IN,
	SBQ_FT_LIKE,
	SBQ_FT_ESCAPE,
	SBQ_FT_EXISTS,
	SBQ_FT_TRUE,
	SBQ_FT_FALSE
} SbqFilterTokKind;

/* one token: where it is, and its decoded value */
typedef struct SbqFilterToken
{
	SbqFilterTokKind		kind;
	int			pos;			/* 1-based character position */
	const char *raw;			/* the token in the text */
	size_t		rawlen;
	const char *s;				/* names and strings, delimiters removed */
	size_t		len;
	int64_t		i;
	double		d;
} SbqFilterToken;

/* the state of one parse: the text, its tokens, the nesting depth */
typedef struct SbqFilterParser
{
	const char *text;
	size_t		len;
	SbqFilterAlloc alloc;
	void	   *alloc_arg;
	SbqFilterError *err;
	SbqFilterToken	   *toks;
	int			ntoks;
	int			cur;
	int			depth;
	/* position bookkeeping of the lexer: byte offset -> character */
	size_t		pos_off;
	int			pos_chars;
} SbqFilterParser;

/* filter_lex.c */
extern bool sbq_filter_lex(SbqFilterParser *p);
extern size_t sbq_filter_utf8_len(const unsigned char *s, size_t avail);
extern bool sbq_filter_ascii_ieq(const char *s, size_t len, const char *word);
extern void *sbq_filter_palloc(SbqFilterParser *p, size_t size);
extern void *sbq_filter_perror(SbqFilterParser *p, int pos, const char *fmt,...) SBQ_FILTER_PRINTF(3, 4);

/* the most bytes of a name an error message quotes */
#define SBQ_FILTER_ERR_NAME		100

#endif							/* SBQ_FILTER_INT_H */
