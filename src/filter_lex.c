/*-------------------------------------------------------------------------
 *
 * filter_lex.c
 *	  The lexer of the SQL filter and rule-action language (filter.h): the
 *	  text checked (valid UTF-8, no NUL, at most 1,024 characters) and cut
 *	  into tokens, each with its 1-based character position; the keyword
 *	  and system-property name tables; the parser's allocation and error
 *	  helpers.
 *
 * Names and strings are decoded here ('' in strings, "" in quoted names,
 * ]] in delimited names). Integer constants are checked for int64 range
 * (exactly 2^63 becomes SBQ_FT_BIGINT, which only a leading minus makes
 * valid); decimal and scientific constants become doubles through strtod,
 * which needs the "C" LC_NUMERIC a PostgreSQL backend always runs with.
 *
 * No global mutable state; memory only from the caller's allocator.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/filter_lex.c
 *
 *-------------------------------------------------------------------------
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "filter_int.h"

static const struct
{
	const char *word;
	SbqFilterTokKind		kind;
}			keywords[] =
{
	{"AND", SBQ_FT_AND}, {"OR", SBQ_FT_OR}, {"NOT", SBQ_FT_NOT}, {"IS", SBQ_FT_IS},
	{"NULL", SBQ_FT_NULL}, {"IN", SBQ_FT_IN}, {"LIKE", SBQ_FT_LIKE}, {"ESCAPE", SBQ_FT_ESCAPE},
	{"EXISTS", SBQ_FT_EXISTS}, {"TRUE", SBQ_FT_TRUE}, {"FALSE", SBQ_FT_FALSE}
};

static const struct
{
	const char *name;
	SbqFilterSysProp prop;
}			sys_names[] =
{
	{"MessageId", SBQ_FSYS_MESSAGE_ID},
	{"CorrelationId", SBQ_FSYS_CORRELATION_ID},
	{"ContentType", SBQ_FSYS_CONTENT_TYPE},
	{"Label", SBQ_FSYS_LABEL},
	{"ReplyTo", SBQ_FSYS_REPLY_TO},
	{"ReplyToSessionId", SBQ_FSYS_REPLY_TO_SESSION_ID},
	{"SessionId", SBQ_FSYS_SESSION_ID},
	{"To", SBQ_FSYS_TO},
	{"SequenceNumber", SBQ_FSYS_SEQUENCE_NUMBER},
	{"DeliveryCount", SBQ_FSYS_DELIVERY_COUNT},
	{"Size", SBQ_FSYS_SIZE},
	{"EnqueuedTimeUtc", SBQ_FSYS_ENQUEUED_TIME_UTC},
	{"ScheduledEnqueueTimeUtc", SBQ_FSYS_SCHEDULED_ENQUEUE_TIME_UTC},
	{"ExpiresAtUtc", SBQ_FSYS_EXPIRES_AT_UTC},
	{"TimeToLive", SBQ_FSYS_TIME_TO_LIVE},
	{"LockToken", SBQ_FSYS_LOCK_TOKEN},
	{"EnqueuedSequenceNumber", SBQ_FSYS_ENQUEUED_SEQUENCE_NUMBER},
	{"DeadLetterSource", SBQ_FSYS_DEAD_LETTER_SOURCE},
	{"Subject", SBQ_FSYS_LABEL}	/* an alias: after the canonical names */
};


/*
 * Compare a counted string with a NUL-terminated ASCII word, ignoring ASCII
 * case. Non-ASCII bytes compare exactly.
 */
bool
sbq_filter_ascii_ieq(const char *s, size_t len, const char *word)
{
	size_t		i;

	for (i = 0; i < len; i++)
	{
		unsigned char a = (unsigned char) s[i];
		unsigned char b = (unsigned char) word[i];

		if (b == '\0')
			return false;
		if (a >= 'A' && a <= 'Z')
			a += 'a' - 'A';
		if (b >= 'A' && b <= 'Z')
			b += 'a' - 'A';
		if (a != b)
			return false;
	}
	return word[len] == '\0';
}

/*
 * The system property a name means (case-insensitive), or
 * SBQ_FSYS_UNKNOWN: an unknown name is an evaluation error, not a parse
 * error, so the parser keeps it.
 */
SbqFilterSysProp
sbq_filter_sys_from_name(const char *name, size_t len)
{
	size_t		i;

	for (i = 0; i < sizeof(sys_names) / sizeof(sys_names[0]); i++)
		if (sbq_filter_ascii_ieq(name, len, sys_names[i].name))
			return sys_names[i].prop;
	return SBQ_FSYS_UNKNOWN;
}

/*
 * The canonical name of a system property, for messages and for the
 * caller's mapping; NULL for SBQ_FSYS_UNKNOWN or an out-of-range value.
 */
const char *
sbq_filter_sys_name(SbqFilterSysProp prop)
{
	size_t		i;

	for (i = 0; i < sizeof(sys_names) / sizeof(sys_names[0]); i++)
		if (sys_names[i].prop == prop)
			return sys_names[i].name;
	return NULL;
}

/*
 * The length of the well-formed UTF-8 sequence at s (at most avail bytes),
 * or 0 when it is malformed: overlong forms, surrogates and code points
 * past U+10FFFF are malformed.
 */
size_t
sbq_filter_utf8_len(const unsigned char *s, size_t avail)
{
	unsigned char c = s[0];
	size_t		n;
	size_t		k;
	uint32_t	cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		n = 2, cp = c & 0x1F;
	else if (c >= 0xE0 && c <= 0xEF)
		n = 3, cp = c & 0x0F;
	else if (c >= 0xF0 && c <= 0xF4)
		n = 4, cp = c & 0x07;
	else
		return 0;
	if (avail < n)
		return 0;
	for (k = 1; k < n; k++)
	{
		if ((s[k] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[k] & 0x3F);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
		(cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
		return 0;
	return n;
}

/*
 * Allocate zeroed memory; on failure record "out of memory" (a static
 * message: there is no memory to format one) and return NULL.
 */
void *
sbq_filter_palloc(SbqFilterParser *p, size_t size)
{
	void	   *m = p->alloc(p->alloc_arg, size);

	if (m == NULL)
	{
		p->err->type = "ParseError";
		p->err->message = "out of memory";
		p->err->position = 0;
		return NULL;
	}
	memset(m, 0, size);
	return m;
}

/*
 * Record a parse error at a character position. The message is formatted
 * into allocator memory (a fixed text if that fails). Returns NULL so that
 * callers can "return sbq_filter_perror(...)".
 */
void *
sbq_filter_perror(SbqFilterParser *p, int pos, const char *fmt,...)
{
	va_list		ap;
	char		buf[256];
	char	   *m;
	size_t		n;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	n = strlen(buf);
	m = p->alloc(p->alloc_arg, n + 1);
	if (m != NULL)
		memcpy(m, buf, n + 1);
	p->err->type = "ParseError";
	p->err->message = m != NULL ? m : "syntax error";
	p->err->position = pos;
	return NULL;
}

/*
 * The 1-based character position of a byte offset. Offsets come in
 * increasing order from the lexer, so counting resumes where it stopped.
 */
static int
char_pos(SbqFilterParser *p, size_t off)
{
	if (off < p->pos_off)
	{
		p->pos_off = 0;
		p->pos_chars = 0;
	}
	for (; p->pos_off < off; p->pos_off++)
		if (((unsigned char) p->text[p->pos_off] & 0xC0) != 0x80)
			p->pos_chars++;
	return p->pos_chars + 1;
}

/*
 * Check the whole text: valid UTF-8, no NUL byte, at most
 * SBQ_FILTER_MAX_CHARS characters. A longer text fails at the position
 * just past the limit.
 */
static bool
check_text(SbqFilterParser *p)
{
	size_t		off = 0;
	int			chars = 0;

	while (off < p->len)
	{
		size_t		n = sbq_filter_utf8_len((const unsigned char *) p->text + off,
											p->len - off);

		if (chars == SBQ_FILTER_MAX_CHARS)
		{
			sbq_filter_perror(p, chars + 1, "text longer than %d characters",
					SBQ_FILTER_MAX_CHARS);
			return false;
		}
		if (n == 0)
		{
			sbq_filter_perror(p, chars + 1, "invalid UTF-8 in text");
			return false;
		}
		if (p->text[off] == '\0')
		{
			sbq_filter_perror(p, chars + 1, "unexpected NUL character");
			return false;
		}
		off += n;
		chars++;
	}
	return true;
}

static bool
is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

/* a letter: ASCII, or any non-ASCII character (the text is valid UTF-8) */
static bool
is_letter(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}

/*
 * Lex a delimited token starting at off: 'string', "quoted name" or
 * [delimited name], where a doubled closing character stands for itself.
 * Fills t->s/len with the decoded text and returns the offset past the
 * closer, or 0 on error (unterminated, or an empty name).
 */
static size_t
lex_delimited(SbqFilterParser *p, size_t off, char close, SbqFilterToken *t)
{
	size_t		end = off + 1;
	size_t		i;
	size_t		n = 0;
	char	   *buf;

	/* find the closer first, so the buffer is as long as the token */
	while (end < p->len)
	{
		if (p->text[end] != close)
			end++;
		else if (end + 1 < p->len && p->text[end + 1] == close)
			end += 2;
		else
			break;
	}
	if (end >= p->len)
	{
		if (close == '\'')
			sbq_filter_perror(p, t->pos, "unterminated string constant");
		else
			sbq_filter_perror(p, t->pos, "unterminated %s name",
							  close == '"' ? "quoted" : "delimited");
		return 0;
	}
	if (end == off + 1 && close != '\'')
	{
		sbq_filter_perror(p, t->pos, "empty property name");
		return 0;
	}
	buf = sbq_filter_palloc(p, end - off);
	if (buf == NULL)
		return 0;
	for (i = off + 1; i < end; i++)
	{
		buf[n++] = p->text[i];
		if (p->text[i] == close)
			i++;				/* a doubled closer stands for one */
	}
	t->s = buf;
	t->len = n;
	return end + 1;
}

/*
 * Lex a number at off: digits, an optional fraction, an optional exponent.
 * Without fraction or exponent it is an int64 (or SBQ_FT_BIGINT for exactly
 * 2^63, which only a leading minus can make valid); else a double. Returns
 * the offset past it, or 0 on error.
 */
static size_t
lex_number(SbqFilterParser *p, size_t off, SbqFilterToken *t)
{
	size_t		i = off;
	bool		isdouble = false;
	uint64_t	v = 0;
	bool		big = false;
	const char *bad = NULL;

	for (; i < p->len && is_digit((unsigned char) p->text[i]); i++)
	{
		unsigned	dgt = (unsigned) (p->text[i] - '0');

		if (v > (UINT64_MAX - dgt) / 10)
			big = true;
		else
			v = v * 10 + dgt;
	}
	if (i < p->len && p->text[i] == '.')
	{
		isdouble = true;
		for (i++; i < p->len && is_digit((unsigned char) p->text[i]); i++)
			;
	}
	if (i < p->len && (p->text[i] == 'e' || p->text[i] == 'E'))
	{
		isdouble = true;
		i++;
		if (i < p->len && (p->text[i] == '+' || p->text[i] == '-'))
			i++;
		if (i >= p->len || !is_digit((unsigned char) p->text[i]))
			bad = "invalid numeric constant";
		for (; i < p->len && is_digit((unsigned char) p->text[i]); i++)
			;
	}
	if (i < p->len && (is_letter((unsigned char) p->text[i]) ||
					   p->text[i] == '_' || p->text[i] == '.'))
		bad = "invalid numeric constant";
	if (bad == NULL && isdouble)
	{
		char	   *copy = sbq_filter_palloc(p, i - off + 1);

		if (copy == NULL)
			return 0;
		memcpy(copy, p->text + off, i - off);
		t->kind = SBQ_FT_DOUBLE;
		t->d = strtod(copy, NULL);
		if (t->d == HUGE_VAL)
			bad = "numeric constant out of range";
	}
	else if (bad == NULL && (big || v > (uint64_t) INT64_MAX + 1))
		bad = "integer constant out of range";
	else if (bad == NULL)
	{
		t->kind = v == (uint64_t) INT64_MAX + 1 ? SBQ_FT_BIGINT : SBQ_FT_INT;
		t->i = v == (uint64_t) INT64_MAX + 1 ? INT64_MIN : (int64_t) v;
	}
	if (bad != NULL)
	{
		sbq_filter_perror(p, t->pos, "%s", bad);
		return 0;
	}
	return i;
}

/*
 * Lex a regular identifier at off (a letter, then letters, digits and
 * underscores); keywords become their own token kinds.
 */
static size_t
lex_word(SbqFilterParser *p, size_t off, SbqFilterToken *t)
{
	size_t		i = off;
	size_t		k;

	while (i < p->len)
	{
		unsigned char c = (unsigned char) p->text[i];

		if (c >= 0x80)
			i += sbq_filter_utf8_len((const unsigned char *) p->text + i,
									 p->len - i);
		else if (is_letter(c) || is_digit(c) || c == '_')
			i++;
		else
			break;
	}
	t->kind = SBQ_FT_IDENT;
	t->s = p->text + off;
	t->len = i - off;
	for (k = 0; k < sizeof(keywords) / sizeof(keywords[0]); k++)
		if (sbq_filter_ascii_ieq(t->s, t->len, keywords[k].word))
			t->kind = keywords[k].kind;
	return i;
}

/*
 * Lex an operator or punctuation mark at off. Returns the offset past it,
 * or 0 for a character the language does not use.
 */
static size_t
lex_punct(SbqFilterParser *p, size_t off, SbqFilterToken *t)
{
	char		c = p->text[off];
	char		d = off + 1 < p->len ? p->text[off + 1] : '\0';

	switch (c)
	{
		case '(': t->kind = SBQ_FT_LPAREN; return off + 1;
		case ')': t->kind = SBQ_FT_RPAREN; return off + 1;
		case ',': t->kind = SBQ_FT_COMMA; return off + 1;
		case '.': t->kind = SBQ_FT_DOT; return off + 1;
		case ';': t->kind = SBQ_FT_SEMI; return off + 1;
		case '=': t->kind = SBQ_FT_EQ; return off + 1;
		case '+': t->kind = SBQ_FT_PLUS; return off + 1;
		case '-': t->kind = SBQ_FT_MINUS; return off + 1;
		case '*': t->kind = SBQ_FT_STAR; return off + 1;
		case '/': t->kind = SBQ_FT_SLASH; return off + 1;
		case '%': t->kind = SBQ_FT_PERCENT; return off + 1;
		case '!':
			if (d != '=')
				break;
			t->kind = SBQ_FT_NE;
			return off + 2;
		case '<':
			t->kind = d == '=' ? SBQ_FT_LE : d == '>' ? SBQ_FT_NE : SBQ_FT_LT;
			return off + (t->kind == SBQ_FT_LT ? 1 : 2);
		case '>':
			t->kind = d == '=' ? SBQ_FT_GE : SBQ_FT_GT;
			return off + (t->kind == SBQ_FT_GT ? 1 : 2);
		default:
			break;
	}
	if ((unsigned char) c >= 0x20 && (unsigned char) c < 0x7F)
		sbq_filter_perror(p, t->pos, "unexpected character \"%c\"", c);
	else
		sbq_filter_perror(p, t->pos, "unexpected character");
	return 0;
}

/*
 * Cut the text into tokens (p->toks, ending with SBQ_FT_EOF). There are never
 * more tokens than bytes plus one.
 */
static bool
tokenize(SbqFilterParser *p)
{
	size_t		off = 0;

	p->toks = sbq_filter_palloc(p, (p->len + 1) * sizeof(SbqFilterToken));
	if (p->toks == NULL)
		return false;
	for (;;)
	{
		SbqFilterToken	   *t = &p->toks[p->ntoks];
		unsigned char c;
		size_t		next;

		while (off < p->len && strchr(" \t\r\n\f\v", p->text[off]) != NULL)
			off++;
		t->pos = char_pos(p, off);
		t->raw = p->text + off;
		if (off >= p->len)
		{
			t->kind = SBQ_FT_EOF;
			p->ntoks++;
			return true;
		}
		c = (unsigned char) p->text[off];
		if (c == '\'' || c == '"' || c == '[')
		{
			t->kind = c == '\'' ? SBQ_FT_STRING : SBQ_FT_QNAME;
			next = lex_delimited(p, off, c == '[' ? ']' : (char) c, t);
		}
		else if (is_digit(c) ||
				 (c == '.' && off + 1 < p->len &&
				  is_digit((unsigned char) p->text[off + 1])))
			next = lex_number(p, off, t);
		else if (is_letter(c))
			next = lex_word(p, off, t);
		else
			next = lex_punct(p, off, t);
		if (next == 0)
			return false;
		t->rawlen = next - off;
		off = next;
		p->ntoks++;
	}
}

/*
 * Check the text and cut it into tokens: false, with the error recorded,
 * when the text is not acceptable.
 */
bool
sbq_filter_lex(SbqFilterParser *p)
{
	return check_text(p) && tokenize(p);
}
