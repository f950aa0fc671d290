/*-------------------------------------------------------------------------
 *
 * filter.h
 *	  The SQL filter and rule-action language of topic subscriptions: a
 *	  parser and an evaluator that depend on nothing but the C library, so
 *	  the same sources build into the extension and into a standalone test
 *	  and fuzz program (test/filter).
 *
 * Memory: every byte the engine uses comes from the SbqFilterAlloc the
 * caller passes (a memory context, a test arena); nothing is freed piece
 * by piece, the caller drops the whole region. The allocator may return
 * NULL: the call then fails with the message "out of memory". No global
 * mutable state: every function is re-entrant.
 *
 * Errors are returned, never thrown: false (or SBQ_FILTER_ERROR) and an
 * SbqFilterError whose message comes from the allocator. Parse errors
 * carry the 1-based character (code point) position of the offending
 * token and the type "ParseError"; evaluation errors carry position 0 and
 * the Service Bus exception name to record as the dead-letter reason:
 * "FilterException" for filters, "RuleActionException" for actions.
 *
 * Limits the parser enforces: text of at most 1,024 characters (longer:
 * an error at position 1025), at most 32 statements in an action, at most
 * 128 levels of nesting (parentheses, NOT, unary signs, function
 * arguments). One evaluation creates at most SBQ_FILTER_STRING_BUDGET
 * bytes of new strings (concatenation), so a hostile action cannot make
 * memory grow without bound.
 *
 * Semantics, where the language description leaves a choice open:
 *	- Names: keywords, function names, scopes and sys names compare
 *	  case-insensitively; user names too, but that is the user_lookup
 *	  callback's job (edits of earlier action statements compare ASCII
 *	  case-insensitively). [name] doubles "]" to escape it, "name" doubles
 *	  "\"". An empty name is a parse error. Letters in regular identifiers
 *	  are ASCII letters and any non-ASCII character.
 *	- Types: NULL, bool, int64, double, string. A missing user property
 *	  and a NULL value are both "unknown" to the operators; only EXISTS
 *	  tells them apart. The operators follow C#'s implicit conversions:
 *	  int64 meets double as double; strings, booleans and numbers do not
 *	  convert into one another. Comparing or combining values of types that
 *	  do not convert (string with number, bool with number, bool < bool) is
 *	  an evaluation error, not FALSE. Strings compare ordinally (byte order
 *	  of UTF-8, i.e. code point order), case-sensitively; all six
 *	  comparisons work on strings, only = and <> (!=) on booleans.
 *	- Arithmetic: int64 results that overflow and integer division or
 *	  modulo by zero are evaluation errors; double arithmetic follows IEEE
 *	  (1.0 / 0 is infinity, as in C#); / on two integers truncates, % takes
 *	  the sign of the dividend. + on two strings concatenates; + of a
 *	  string and a number is an error.
 *	- Logic: SQL's three-valued AND, OR and NOT; AND, OR, NOT and the
 *	  filter's result accept only booleans or unknown (a filter whose
 *	  value is, say, an integer is an evaluation error). AND stops at a
 *	  FALSE left side and OR at a TRUE one, so an error on the right side
 *	  (say, an unknown sys property) does not count then. A filter matches
 *	  only when it evaluates to TRUE.
 *	- x IS [NOT] NULL accepts any expression, not only a property.
 *	- IN: unknown on the left gives unknown; otherwise TRUE if an item
 *	  equals, else unknown if an item is unknown, else FALSE.
 *	- LIKE: case-sensitive, on strings only (a number on either side is an
 *	  error); "_" is one character (code point); the escape is an
 *	  expression that must give a one-character string (a constant that
 *	  does not is a parse error); a pattern that ends in the escape
 *	  character is an evaluation error.
 *	- EXISTS(sys.X) is TRUE for every known system property the message
 *	  can report, even when its value is NULL; an unknown sys name is an
 *	  error, as in any other use.
 *	- property(expr) / p(expr): expr must give a string (unknown gives
 *	  unknown); a leading "sys." or "user." in it selects the scope, as in
 *	  the filter text.
 *	- newid() gives a new version-4 GUID as a lowercase string
 *	  ("xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx"), from the random bytes the
 *	  caller's new_guid callback supplies.
 *	- Actions: statements run in order and each sees the edits of the
 *	  statements before it (as the broker applies them to the message one
 *	  by one). SET of an unknown value sets the property to NULL. SET of a
 *	  user property whose current value is a double converts an int64 to
 *	  double (the only implicit conversion that applies); otherwise the new
 *	  value replaces the old with its own type. SET works on the string
 *	  system properties MessageId, CorrelationId, ContentType,
 *	  Label/Subject, ReplyTo, ReplyToSessionId, SessionId and To (the value
 *	  must be a string or NULL); SET sys.ScheduledEnqueueTimeUtc is
 *	  accepted and ignored (a subscription ignores it); every other sys
 *	  property is an error, as is REMOVE of any sys property.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/filter.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SBQ_FILTER_H
#define SBQ_FILTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* longest filter or action text, in characters */
#define SBQ_FILTER_MAX_CHARS		1024
/* most statements in one action */
#define SBQ_FILTER_MAX_STATEMENTS	32
/* deepest nesting of parentheses, NOT, signs and function arguments */
#define SBQ_FILTER_MAX_DEPTH		128
/* most bytes of new strings one evaluation may create */
#define SBQ_FILTER_STRING_BUDGET	(1024 * 1024)

/* the caller's allocator: never frees piecemeal; may return NULL */
typedef void *(*SbqFilterAlloc) (void *arg, size_t size);

typedef enum SbqFilterValueKind
{
	SBQ_FV_NULL,				/* NULL, or unknown (a missing property) */
	SBQ_FV_BOOL,
	SBQ_FV_INT,
	SBQ_FV_DOUBLE,
	SBQ_FV_STRING,
	SBQ_FV_UNSUPPORTED			/* e.g. a JSON object: EXISTS, IS NULL only */
} SbqFilterValueKind;

typedef struct SbqFilterValue
{
	SbqFilterValueKind kind;
	bool		b;
	int64_t		i;
	double		d;
	const char *s;				/* SBQ_FV_STRING: UTF-8, len bytes, maybe no NUL */
	size_t		len;
} SbqFilterValue;

typedef enum SbqFilterScope
{
	SBQ_FSCOPE_USER,
	SBQ_FSCOPE_SYS
} SbqFilterScope;

/* the system properties the language knows, after "sys." */
typedef enum SbqFilterSysProp
{
	SBQ_FSYS_UNKNOWN = 0,		/* a name the language does not know */
	SBQ_FSYS_MESSAGE_ID,
	SBQ_FSYS_CORRELATION_ID,
	SBQ_FSYS_CONTENT_TYPE,
	SBQ_FSYS_LABEL,				/* also spelled Subject */
	SBQ_FSYS_REPLY_TO,
	SBQ_FSYS_REPLY_TO_SESSION_ID,
	SBQ_FSYS_SESSION_ID,
	SBQ_FSYS_TO,
	SBQ_FSYS_SEQUENCE_NUMBER,
	SBQ_FSYS_DELIVERY_COUNT,
	SBQ_FSYS_SIZE,
	SBQ_FSYS_ENQUEUED_TIME_UTC,
	SBQ_FSYS_SCHEDULED_ENQUEUE_TIME_UTC,
	SBQ_FSYS_EXPIRES_AT_UTC,
	SBQ_FSYS_TIME_TO_LIVE,
	SBQ_FSYS_LOCK_TOKEN,
	SBQ_FSYS_ENQUEUED_SEQUENCE_NUMBER,
	SBQ_FSYS_DEAD_LETTER_SOURCE
} SbqFilterSysProp;

#define SBQ_FSYS_COUNT	(SBQ_FSYS_DEAD_LETTER_SOURCE + 1)

/*
 * The message as the engine sees it. user_lookup: true and *v filled when
 * the user property exists (its value may be NULL); name is as written,
 * delimiters removed, not NUL-terminated; the callback compares names
 * case-insensitively. sys_lookup: true and *v filled when the message can
 * report that system property (a known property that is unset is NULL);
 * false makes the evaluation fail. new_guid: 16 random bytes for newid();
 * NULL makes newid() fail. The value strings must outlive the evaluation.
 */
typedef struct SbqFilterMessage
{
	void	   *arg;
	bool		(*user_lookup) (void *arg, const char *name, size_t len,
								SbqFilterValue *v);
	bool		(*sys_lookup) (void *arg, SbqFilterSysProp prop,
							   SbqFilterValue *v);
	bool		(*new_guid) (void *arg, unsigned char out[16]);
} SbqFilterMessage;

typedef struct SbqFilterExpr SbqFilterExpr;		/* a compiled filter */
typedef struct SbqFilterAction SbqFilterAction; /* a compiled action */

typedef struct SbqFilterError
{
	const char *type;			/* "ParseError", "FilterException",
								 * "RuleActionException" */
	const char *message;
	int			position;		/* 1-based, parse errors only; else 0 */
} SbqFilterError;

typedef enum SbqFilterResult
{
	SBQ_FILTER_FALSE,
	SBQ_FILTER_TRUE,
	SBQ_FILTER_UNKNOWN,
	SBQ_FILTER_ERROR
} SbqFilterResult;

/*
 * One edit of an action, for the caller to apply in order. remove: delete
 * the user property name (REMOVE); else set it (scope user: name; scope
 * sys: the property sys) to value, which may be NULL (unset it). The
 * strings point into the action or into allocator memory.
 */
typedef struct SbqFilterEdit
{
	bool		remove;
	SbqFilterScope scope;
	SbqFilterSysProp sys;
	const char *name;
	size_t		name_len;
	SbqFilterValue value;
} SbqFilterEdit;

/* parse a filter (filter_parse.c); true and *out, or false and *err */
extern bool sbq_filter_parse(const char *text, size_t len,
							 SbqFilterAlloc alloc, void *alloc_arg,
							 SbqFilterExpr **out, SbqFilterError *err);

/* parse an action (filter_parse.c); true and *out, or false and *err */
extern bool sbq_action_parse(const char *text, size_t len,
							 SbqFilterAlloc alloc, void *alloc_arg,
							 SbqFilterAction **out, SbqFilterError *err);

/* evaluate a filter against a message (filter_eval.c): TRUE matches */
extern SbqFilterResult sbq_filter_eval(const SbqFilterExpr *f,
									   const SbqFilterMessage *m,
									   SbqFilterAlloc alloc, void *alloc_arg,
									   SbqFilterError *err);

/*
 * evaluate an action against a message (filter_action.c): true and the
 * edits to apply in order, or false and *err (nothing to apply)
 */
extern bool sbq_action_eval(const SbqFilterAction *a,
							const SbqFilterMessage *m,
							SbqFilterAlloc alloc, void *alloc_arg,
							SbqFilterEdit **edits, int *nedits,
							SbqFilterError *err);

/*
 * Called every so many steps of the one operation whose work grows faster
 * than its operands (LIKE, string length times pattern length): the
 * server's check for a cancel, a timeout or a shutdown, which may leave the
 * evaluation by an error (the engine holds nothing but its allocator's
 * memory). NULL, the default: nothing is called (the unit tests).
 */
extern void (*sbq_filter_interrupt_check) (void);

/* the canonical name of a system property ("Label"), or NULL */
extern const char *sbq_filter_sys_name(SbqFilterSysProp prop);

/* the system property a name (without "sys.") means, case-insensitively */
extern SbqFilterSysProp sbq_filter_sys_from_name(const char *name, size_t len);

#endif							/* SBQ_FILTER_H */
