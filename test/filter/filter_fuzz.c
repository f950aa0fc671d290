/*-------------------------------------------------------------------------
 *
 * filter_fuzz.c
 *	  A fuzz driver for the filter engine (src/filter.h): random inputs,
 *	  each parsed as a filter and as an action and, when valid, evaluated
 *	  against random messages, under ASan and UBSan.
 *
 * Usage: filter_fuzz SECONDS [SEED]. The seed (random when absent) is
 * printed first; the same seed gives the same inputs in the same order, so
 * a failure at input N repeats with that seed. Inputs: token soups,
 * mutations of a seed corpus (byte flips, insertions, deletions,
 * truncations, splices), nesting to and past the limit, strings to and
 * past 1,024 characters, long operator chains.
 *
 * A failure is: a sanitizer report; an input taking over 50 ms of CPU
 * time twice in a row, or 2 s of wall time (alarm, for a hang); an input whose arena passes 64 MiB;
 * an error without a message or with a position out of range; a result
 * that differs when evaluated twice. Exits 1 on the first failure, after
 * printing the input in hex.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  test/filter/filter_fuzz.c
 *
 *-------------------------------------------------------------------------
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "filter_support.h"

#define MAX_INPUT		4096
#define ARENA_CAP		(64u * 1024 * 1024)
#define SLOW_MS			50.0

static uint64_t rng_state;
static char input[MAX_INPUT + 1];
static size_t input_len;
static unsigned long long input_no;
static unsigned long long seed;

/* what the inputs did: filters parsed, results by kind, actions parsed, edits */
static unsigned long long n_filters;
static unsigned long long n_results[4];
static unsigned long long n_actions;
static unsigned long long n_action_ok;

static const char *const corpus[] = {
	"sys.Label = 'red' AND color IN ('a', 'b', NULL)",
	"NOT (i + 1 > 5 OR d * 2.5e3 <= -7) AND EXISTS(user.[x y])",
	"s LIKE 'a!%b_%' ESCAPE '!' OR s NOT LIKE '%' + s",
	"p('sys.MessageId') IS NOT NULL AND property(s) = newid()",
	"\"quo\"\"ted\" <> 9223372036854775807 AND -9223372036854775808 < i",
	"sys.SequenceNumber % 3 = 1 AND sys.CorrelationId IS NULL",
	"(((a = 1))) OR b IS NULL AND NOT c != 'x''y'",
	"i / j = 0 AND i % j = 0 AND 1.0 / 0 > 1",
	"SET a = 1; SET sys.Label = s + 'x', REMOVE b;",
	"SET s = s + s; SET s = s + s; SET i = i * i * i",
	"SET [x y] = p('i') + 1, SET sys.To = newid(); REMOVE user.c",
	"SET sys.SequenceNumber = 1; SET sys.Foo = NULL",
};

static const char *const tokens[] = {
	"(", ")", ",", ".", ";", "=", "<>", "!=", "<", "<=", ">", ">=", "+", "-",
	"*", "/", "%", "AND", "OR", "NOT", "IS", "NULL", "IN", "LIKE", "ESCAPE",
	"EXISTS", "TRUE", "FALSE", "SET", "REMOVE", "sys.", "user.", "sys.Label",
	"sys.SequenceNumber", "sys.Foo", "sys.LockToken", "p(", "property(",
	"newid()", "a", "b", "i", "d", "s", "x", "[x y]", "\"q\"\"q\"", "0", "1",
	"-1", "9223372036854775807", "9223372036854775808", "2.5", "1e308",
	"1e-5", ".5", "'x'", "'%'", "'_'", "'!'", "''", "'\xc3\xa9'", "'a''b'",
	" ", " ", " ", "\t", "[", "]", "'", "\"", "\xff", "\xc3", "#", "_"
};

static const char *const names[] = {"a", "b", "i", "d", "s", "x", "x y", "c", "color"};

static uint64_t
rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ULL;
}

static unsigned
below(unsigned n)
{
	return (unsigned) (rnd() % n);
}

static void
append(const char *s, size_t len)
{
	if (input_len + len > MAX_INPUT)
		len = MAX_INPUT - input_len;
	memcpy(input + input_len, s, len);
	input_len += len;
}

static void
append_str(const char *s)
{
	append(s, strlen(s));
}

static void
gen_soup(void)
{
	unsigned	n = 1 + below(60);

	if (below(3) == 0)
		append_str(below(2) ? "SET a = " : "SET sys.Label = ");
	while (n-- > 0)
	{
		append_str(tokens[below(sizeof(tokens) / sizeof(tokens[0]))]);
		if (below(3) == 0)
			append_str(" ");
	}
}

static void
gen_mutation(void)
{
	unsigned	n = 1 + below(8);

	append_str(corpus[below(sizeof(corpus) / sizeof(corpus[0]))]);
	while (n-- > 0 && input_len > 0)
	{
		size_t		at = below((unsigned) input_len);
		const char *t;

		switch (below(6))
		{
			case 0:
				input[at] ^= (char) (1 << below(8));
				break;
			case 1:
				if (input_len < MAX_INPUT)
				{
					memmove(input + at + 1, input + at, input_len - at);
					input[at] = (char) below(256);
					input_len++;
				}
				break;
			case 2:
				memmove(input + at, input + at + 1, input_len - at - 1);
				input_len--;
				break;
			case 3:
				input_len = at;
				break;
			case 4:
				t = tokens[below(sizeof(tokens) / sizeof(tokens[0]))];
				if (input_len + strlen(t) <= MAX_INPUT)
				{
					memmove(input + at + strlen(t), input + at, input_len - at);
					memcpy(input + at, t, strlen(t));
					input_len += strlen(t);
				}
				break;
			default:
				/* duplicate the tail */
				append(input + at, input_len - at);
				break;
		}
	}
}

static void
gen_nesting(void)
{
	static const char *const open[] = {"(", "NOT ", "-", "p(", "+"};
	static const char *const close[] = {")", "", "", ")", ""};
	static const char *const core[] = {"a = 1", "TRUE", "i", "'i'", "d"};
	unsigned	k = below(5);
	unsigned	depth = 100 + below(60);
	unsigned	d;

	for (d = 0; d < depth; d++)
		append_str(open[k]);
	append_str(core[k]);
	for (d = 0; d < depth; d++)
		append_str(close[k]);
	if (k >= 2)
		append_str(" IS NULL");
}

static void
gen_long(void)
{
	unsigned	n = 990 + below(50);
	unsigned	k;
	bool		wide = below(2) == 0;

	switch (below(4))
	{
		case 0:
			append_str("s = '");
			for (k = 0; k < n; k++)
				append_str(wide ? "\xc3\xa9" : "x");
			append_str("'");
			break;
		case 1:
			append_str("SET s = '");
			for (k = 0; k < n; k++)
				append_str(k % 7 == 0 ? "''" : "y");
			append_str("'");
			break;
		case 2:
			append_str("s");
			while (input_len < n)
				append_str(below(2) ? " + s" : " || s");
			append_str(" = s");
			break;
		default:
			append_str("i IN (1");
			while (input_len < n)
				append_str(", 1");
			append_str(")");
			break;
	}
}

/* a random property value; strings point into static storage */
static SbqFilterValue
random_value(void)
{
	static const char *const strs[] = {"", "x", "red", "a%b", "hello", "\xc3\xa9t\xc3\xa9", "i", "sys.Label"};
	static char longs[3000];

	if (longs[0] == '\0')
		memset(longs, 'a', sizeof(longs) - 1);
	switch (below(12))
	{
		case 0: return t_null();
		case 1: return t_bool(below(2) == 0);
		case 2: return t_int((int64_t) rnd());
		case 3: return t_int(below(2) ? INT64_MAX : INT64_MIN);
		case 4: return t_int((int64_t) below(7) - 3);
		case 5: return t_dbl((double) (int64_t) rnd() / 1e6);
		case 6: return t_dbl(below(3) == 0 ? NAN : below(2) ? INFINITY : -0.0);
		case 7: return t_unsupported();
		case 8:
			{
				SbqFilterValue v = t_str(longs);

				v.len = below(sizeof(longs));
				return v;
			}
		default: return t_str(strs[below(sizeof(strs) / sizeof(strs[0]))]);
	}
}

static void
random_message(TMessage *m, TProp *props)
{
	int			k;

	memset(m, 0, sizeof(*m));
	m->nprops = 0;
	for (k = 0; k < (int) (sizeof(names) / sizeof(names[0])); k++)
		if (below(4) != 0)
		{
			props[m->nprops].name = names[k];
			props[m->nprops].v = random_value();
			m->nprops++;
		}
	m->props = props;
	for (k = 1; k < SBQ_FSYS_COUNT; k++)
	{
		m->sys_avail[k] = below(8) != 0;
		m->sys[k] = random_value();
	}
	m->guid_seed = (unsigned char) below(256);
}

static void
dump_input(void)
{
	size_t		k;

	fprintf(stderr, "seed %llu, input %llu, %zu bytes:\n", seed, input_no, input_len);
	for (k = 0; k < input_len; k++)
		fprintf(stderr, "%02x", (unsigned char) input[k]);
	fprintf(stderr, "\n");
}

static void
die(const char *why, const char *detail)
{
	fprintf(stderr, "FUZZ FAILURE: %s%s%s\n", why, detail ? ": " : "", detail ? detail : "");
	dump_input();
	exit(1);
}

static void
on_alarm(int sig)
{
	static const char msg[] = "FUZZ FAILURE: an input ran for 2 seconds (hang)\n";

	(void) sig;
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(2);
	_exit(1);
}

/* errors must have a message, parse errors a position within the text */
static void
check_error(const SbqFilterError *err, bool parse, const char *type)
{
	if (err->message == NULL || err->type == NULL)
		die("error without message or type", NULL);
	if (parse && (err->position < 0 || err->position > SBQ_FILTER_MAX_CHARS + 1 ||
				  (size_t) err->position > input_len + 1))
		die("parse error position out of range", err->message);
	if (!parse && (err->position != 0 || strcmp(err->type, type) != 0))
		die("evaluation error with a position or the wrong type", err->message);
}

/* parse and evaluate the current input both ways */
static void
run_input(TArena *arena)
{
	SbqFilterExpr *f;
	SbqFilterAction *a;
	SbqFilterError err;
	TMessage	tm;
	TProp		props[16];
	int			k;

	if (!sbq_filter_parse(input, input_len, t_alloc, arena, &f, &err))
		check_error(&err, true, NULL);
	else if (++n_filters > 0)
		for (k = 0; k < 3; k++)
		{
			SbqFilterMessage m;
			SbqFilterResult r1;
			SbqFilterResult r2;

			random_message(&tm, props);
			m = t_message(&tm);
			r1 = sbq_filter_eval(f, &m, t_alloc, arena, &err);
			n_results[(unsigned) r1 & 3]++;
			if (r1 == SBQ_FILTER_ERROR)
				check_error(&err, false, "FilterException");
			r2 = sbq_filter_eval(f, &m, t_alloc, arena, &err);
			if (r1 != r2 || (unsigned) r1 > SBQ_FILTER_ERROR)
				die("evaluation not repeatable", NULL);
		}
	if (!sbq_action_parse(input, input_len, t_alloc, arena, &a, &err))
		check_error(&err, true, NULL);
	else if (++n_actions > 0)
		for (k = 0; k < 3; k++)
		{
			SbqFilterMessage m;
			SbqFilterEdit *edits;
			int			n;

			random_message(&tm, props);
			m = t_message(&tm);
			if (!sbq_action_eval(a, &m, t_alloc, arena, &edits, &n, &err))
				check_error(&err, false, "RuleActionException");
			else if (++n_action_ok > 0 && (n < 0 || n > SBQ_FILTER_MAX_STATEMENTS || (n > 0 && edits == NULL)))
				die("bad edit list", NULL);
		}
}

static double
clock_ms(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

static double
now_ms(void)
{
	return clock_ms(CLOCK_MONOTONIC);
}

/*
 * Run the current input and return the CPU time it took (CPU time, so a
 * descheduled process is not blamed on the engine). An input over the
 * limit runs once more from the same random state, and fails only if it
 * is slow again.
 */
static double
timed_run(TArena *arena)
{
	uint64_t	saved = rng_state;
	double		t0;
	double		took;

	alarm(2);
	t0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
	run_input(arena);
	took = clock_ms(CLOCK_PROCESS_CPUTIME_ID) - t0;
	if (took > SLOW_MS)
	{
		t_arena_reset(arena);
		rng_state = saved;
		t0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
		run_input(arena);
		took = clock_ms(CLOCK_PROCESS_CPUTIME_ID) - t0;
	}
	alarm(0);
	return took;
}

int
main(int argc, char **argv)
{
	double		seconds = argc > 1 ? atof(argv[1]) : 60;
	double		start = now_ms();
	double		slowest = 0;
	TArena		arena = {NULL, 0, ARENA_CAP, 0};
	struct sigaction sa;

	seed = argc > 2 && argv[2][0] != '\0' ? strtoull(argv[2], NULL, 0) :
		(unsigned long long) time(NULL) ^ ((unsigned long long) getpid() << 32);
	rng_state = seed * 0x9E3779B97F4A7C15ULL + 1;
	printf("filter_fuzz: seed %llu, %.0f seconds\n", seed, seconds);
	fflush(stdout);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, NULL);
	while (now_ms() - start < seconds * 1000)
	{
		double		took;

		input_no++;
		input_len = 0;
		switch (below(10))
		{
			case 0: case 1: case 2: gen_soup(); break;
			case 3: case 4: case 5: case 6: gen_mutation(); break;
			case 7: gen_nesting(); break;
			default: gen_long(); break;
		}
		input[input_len] = '\0';
		took = timed_run(&arena);
		if (took > slowest)
			slowest = took;
		if (took > SLOW_MS)
			die("an input took over 50 ms", NULL);
		if (arena.refused > 0)
			die("an input reached the 64 MiB arena cap", NULL);
		t_arena_reset(&arena);
	}
	printf("filter_fuzz: seed %llu: %llu inputs in %.0f s (%.0f/s), slowest %.2f ms of CPU, no failure\n",
		   seed, input_no, (now_ms() - start) / 1000, input_no / ((now_ms() - start) / 1000),
		   slowest);
	printf("filter_fuzz: %llu valid filters (evaluations: %llu TRUE, %llu FALSE, %llu UNKNOWN, %llu errors), "
		   "%llu valid actions (%llu evaluations gave edits)\n",
		   n_filters, n_results[SBQ_FILTER_TRUE], n_results[SBQ_FILTER_FALSE],
		   n_results[SBQ_FILTER_UNKNOWN], n_results[SBQ_FILTER_ERROR], n_actions, n_action_ok);
	return 0;
}
