/*-------------------------------------------------------------------------
 *
 * filter_test.c
 *	  Table-driven unit tests of the SQL filter and rule-action engine
 *	  (src/filter.h), built and run without PostgreSQL: make -C test/filter
 *	  check. Exits non-zero when any case fails, naming each failure.
 *
 * Filter cases run against one message (user_props and the sys values in
 * build_message) and expect TRUE, FALSE, UNKNOWN, an evaluation error
 * (with a piece of its message) or a parse error (with its position).
 * Action cases expect the edits, written out as text, or an error.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  test/filter/filter_test.c
 *
 *-------------------------------------------------------------------------
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "filter_support.h"

/* expected outcomes */
#define T	'T'					/* TRUE */
#define F	'F'					/* FALSE */
#define U	'U'					/* UNKNOWN */
#define E	'E'					/* evaluation error */
#define P	'P'					/* parse error */

typedef struct FCase
{
	const char *text;
	char		expect;
	int			pos;			/* P: the error position (0: not checked) */
	const char *msg;			/* E, P: a piece of the message, or NULL */
} FCase;

static const FCase filter_cases[] = {
	/* constants and the simplest predicates */
	{"1=1", T}, {"1=0", F}, {"TRUE", T}, {"false", F}, {"NULL", U},
	{"1 <> 1", F}, {"1 != 2", T}, {"2 > 1", T}, {"2 >= 2", T}, {"1 < 2", T},
	{"2 <= 1", F}, {"(1 = 1)", T}, {"((((1 = 1))))", T},
	/* integer literals */
	{"9223372036854775807 = big", T},
	{"-9223372036854775808 = small", T},
	{"-9223372036854775807 - 1 = small", T},
	{"9223372036854775808 = 1", P, 1, "integer constant out of range"},
	{"a = 99999999999999999999", P, 5, "integer constant out of range"},
	{"small = - 9223372036854775808", T},	/* the minus may be apart */
	{"a = +9223372036854775808", P, 6, "out of range"},
	{"0 = 0", T}, {"007 = 7", T},
	/* decimals and scientific notation are doubles */
	{"2.5 = d", T}, {"d = 2.50", T}, {"2.0 = 2", T}, {".5 = 0.5", T},
	{"5. = 5", T}, {"101.5E5 = 10150000", T}, {"0.5e-2 = 0.005", T},
	{"1E3 = 1000", T}, {"1e+3 = 1000.0", T},
	{"a = 1e", P, 5, "invalid numeric constant"},
	{"a = 1e999", P, 5, "numeric constant out of range"},
	{"a = 12abc", P, 5, "invalid numeric constant"},
	{"a = 1.2.3", P, 5, "invalid numeric constant"},
	/* strings */
	{"s = 'hello'", T}, {"s = 'Hello'", F}, {"'it''s' = apos", T},
	{"'' = e", T}, {"u = 'h\xc3\xa9llo w\xc3\xb6rld'", T},
	{"'''' + 'x' = '''x'", T}, {"'a''' = 'a' + ''''", T},
	{"[a]]]]b] IS NULL", T}, {"a = 'abc''", P, 5, "unterminated string constant"},
	{"a = 'abc", P, 5, "unterminated string constant"},
	/* names: case, scopes, delimited and quoted */
	{"I = 5", T}, {"user.i = 5", T}, {"USER.I = 5", T}, {"[i] = 5", T},
	{"\"i\" = 5", T}, {"[Name With Space] = 'sp'", T},
	{"[br]]ack] = 'b'", T}, {"\"quo\"\"te\" = 'q'", T},
	{"user.[Name With Space] = 'sp'", T}, {"[sys].x = 1", P, 6, NULL},
	{"x_1 = 1", U}, {"caf\xc3\xa9 = 'latte'", T},
	{"[abc = 1", P, 1, "unterminated delimited name"},
	{"\"abc = 1", P, 1, "unterminated quoted name"},
	{"[] = 1", P, 1, "empty property name"},
	{"x.y = 1", P, 1, "unknown scope \"x\""},
	{"sys. = 1", P, 6, "property name expected"},
	{"user.null = 1", P, 6, "property name expected"},
	{"_a = 1", P, 1, "unexpected character \"_\""},
	{"set = 1", U}, {"remove IS NULL", T},
	/* missing user properties are unknown */
	{"missing = 1", U}, {"missing <> 1", U}, {"missing > 1", U},
	{"1 = missing", U}, {"n = 1", U}, {"n = NULL", U}, {"NULL = NULL", U},
	/* IS [NOT] NULL */
	{"missing IS NULL", T}, {"n IS NULL", T}, {"i IS NULL", F},
	{"missing IS NOT NULL", F}, {"n is not null", F}, {"i IS NOT NULL", T},
	{"obj IS NULL", F}, {"obj IS NOT NULL", T}, {"i + 1 IS NULL", F},
	{"missing + 1 IS NULL", T}, {"sys.CorrelationId IS NULL", T},
	{"sys.MessageId IS NOT NULL", T}, {"p('missing') IS NULL", T},
	{"a IS 1", P, 6, NULL}, {"a IS NOT 1", P, 10, NULL},
	/* EXISTS */
	{"EXISTS(i)", T}, {"EXISTS(missing)", F}, {"EXISTS(n)", T},
	{"EXISTS(obj)", T}, {"exists ( [Name With Space] )", T},
	{"EXISTS(user.i)", T}, {"NOT EXISTS(missing)", T},
	{"EXISTS(sys.CorrelationId)", T}, {"EXISTS(sys.MessageId)", T},
	{"EXISTS(sys.Foo)", E, 0, "sys property \"Foo\" does not exist"},
	{"EXISTS(1)", P, 8, "property name expected"},
	{"EXISTS a", P, 8, NULL},
	/* three-valued AND / OR / NOT */
	{"TRUE AND TRUE", T}, {"TRUE AND FALSE", F}, {"FALSE AND TRUE", F},
	{"TRUE AND missing = 1", U}, {"missing = 1 AND TRUE", U},
	{"FALSE AND missing = 1", F}, {"missing = 1 AND FALSE", F},
	{"missing = 1 AND missing = 2", U},
	{"TRUE OR FALSE", T}, {"FALSE OR FALSE", F}, {"FALSE OR missing = 1", U},
	{"missing = 1 OR TRUE", T}, {"TRUE OR missing = 1", T},
	{"missing = 1 OR FALSE", U}, {"missing = 1 OR missing = 2", U},
	{"NOT TRUE", F}, {"NOT FALSE", T}, {"NOT missing = 1", U},
	{"NOT NOT TRUE", T}, {"NOT NULL", U},
	{"b", T}, {"f", F}, {"b AND NOT f", T}, {"missing", U},
	/* precedence: OR < AND < NOT < comparison < + - < * / % < unary */
	{"TRUE OR TRUE AND FALSE", T}, {"(TRUE OR TRUE) AND FALSE", F},
	{"NOT FALSE AND FALSE", F}, {"NOT (FALSE AND FALSE)", T},
	{"NOT 1 = 2", T}, {"1 + 2 * 3 = 7", T}, {"(1 + 2) * 3 = 9", T},
	{"10 - 4 - 3 = 3", T}, {"2 * 3 % 4 = 2", T}, {"-2 * -3 = 6", T},
	{"- - 1 = 1", T}, {"+i = 5", T}, {"-i = -5", T}, {"1 - -1 = 2", T},
	{"1 + 1 = 2 AND 2 * 2 = 4 OR FALSE", T},
	/* arithmetic, int64 */
	{"i + 1 = 6", T}, {"i - 10 = -5", T}, {"i * j = -15", T},
	{"7 / 2 = 3", T}, {"-7 / 2 = -3", T}, {"7 % 3 = 1", T},
	{"-7 % 3 = -1", T}, {"7 % -3 = 1", T}, {"small % -1 = 0", T},
	{"big + 1 = 0", E, 0, "integer overflow in \"+\""},
	{"small - 1 = 0", E, 0, "integer overflow in \"-\""},
	{"big * 2 = 0", E, 0, "integer overflow in \"*\""},
	{"small / -1 = 0", E, 0, "integer overflow in \"/\""},
	{"-small = 0", E, 0, "integer overflow in unary \"-\""},
	{"i / 0 = 0", E, 0, "division by zero in \"/\""},
	{"i % zero = 0", E, 0, "division by zero in \"%\""},
	{"big + 0 = big", T}, {"big - big = 0", T},
	/* arithmetic, doubles and mixed */
	{"d * 2 = 5", T}, {"d + 1 = 3.5", T}, {"i + d = 7.5", T},
	{"i / 2.0 = 2.5", T}, {"d % 1 = 0.5", T}, {"-d = -2.5", T},
	{"1.0 / 0 > 1e308", T}, {"-1.0 / 0 < -1e308", T},
	{"0.0 / 0 = 0.0 / 0", F}, {"0.0 / 0 <> 0.0 / 0", T},
	{"0.0 / 0 < 1", F}, {"big + 0.0 = 9223372036854775807.0", T},
	{"missing + 1 = 1", U}, {"1 + missing = 1", U}, {"-missing = 1", U},
	{"n * 2 = 1", U},
	/* string concatenation */
	{"s + ' world' = 'hello world'", T}, {"'' + '' = e", T},
	{"s + 1 = 'hello1'", E, 0, "cannot apply \"+\" to string and integer"},
	{"s - 'h' = 'x'", E, 0, "cannot apply \"-\" to string and string"},
	{"s + missing = 'x'", U},
	/* the type pairs of comparisons */
	{"i = 5.0", T}, {"i < 5.5", T}, {"d > i", F}, {"d <> 2", T},
	{"big = 9.2233720368547758e18", T},
	{"s < 'help'", T}, {"s > 'hell'", T}, {"'a' < 'b'", T}, {"'B' < 'a'", T},
	{"'' < 'a'", T}, {"s >= 'hello'", T}, {"s <= 'hello'", T},
	{"b = TRUE", T}, {"b <> f", T}, {"b = f", F}, {"b != FALSE", T},
	{"b > f", E, 0, "cannot compare boolean values with \">\""},
	{"s = 5", E, 0, "cannot compare string with integer in \"=\""},
	{"num = 10", E, 0, "cannot compare string with integer"},
	{"5 = s", E, 0, "cannot compare integer with string"},
	{"d = 'x'", E, 0, "cannot compare double with string"},
	{"b = 1", E, 0, "cannot compare boolean with integer"},
	{"b = 'true'", E, 0, "cannot compare boolean with string"},
	{"obj = 1", E, 0, "property \"obj\" has a value the filter language cannot use"},
	{"obj + 1 IS NULL", E, 0, "cannot use"},
	{"i", E, 0, "filter gives integer, not boolean"},
	{"s", E, 0, "filter gives string"},
	{"i AND TRUE", E, 0, "AND needs boolean operands, not integer"},
	{"FALSE OR s", E, 0, "OR needs boolean operands, not string"},
	{"NOT i", E, 0, "NOT needs boolean operands"},
	{"FALSE AND i", F},			/* the right side is not evaluated */
	{"-s = 1", E, 0, "cannot apply unary \"-\" to string"},
	{"-b = 1", E, 0, "cannot apply unary \"-\" to boolean"},
	{"(1 = 1) + 1 = 2", E, 0, "cannot apply \"+\" to boolean and integer"},
	/* IN */
	{"i IN (1, 5, 7)", T}, {"i IN (1, 2)", F}, {"i NOT IN (1, 2)", T},
	{"i NOT IN (5)", F}, {"s IN ('a', 'hello')", T}, {"i IN (5.0)", T},
	{"i IN (1, NULL)", U}, {"i IN (5, NULL)", T}, {"i NOT IN (1, NULL)", U},
	{"i NOT IN (5, NULL)", F}, {"missing IN (1, 2)", U},
	{"missing NOT IN (1, 2)", U}, {"i IN (missing, 5)", T},
	{"i IN (i + 0)", T}, {"s IN ('x', 5)", E, 0, "cannot compare string with integer"},
	{"s IN ('hello', 5)", T},	/* stops at the first equal item */
	{"sys.To IN ('Store5', 'dest') OR StoreId = 'Store8'", T},
	{"a IN ()", P, 7, NULL}, {"a IN 1", P, 6, NULL},
	{"a IN (1,", P, 9, "syntax error at end of input"},
	/* LIKE */
	{"s LIKE 'hello'", T}, {"s LIKE 'h%'", T}, {"s LIKE '%o'", T},
	{"s LIKE '%ll%'", T}, {"s LIKE 'h_llo'", T}, {"s LIKE 'h_lo'", F},
	{"s LIKE '_____'", T}, {"s LIKE '______'", F}, {"s LIKE '%'", T},
	{"e LIKE '%'", T}, {"e LIKE '_'", F}, {"e LIKE ''", T},
	{"s LIKE 'HELLO'", F}, {"s NOT LIKE 'HELLO'", T}, {"s NOT LIKE 'h%'", F},
	{"s LIKE '%%%'", T}, {"s LIKE 'h%l%o'", T}, {"s LIKE 'h%x%o'", F},
	{"u LIKE 'h_llo w_rld'", T},	/* "_" is one character, not one byte */
	{"u LIKE 'h__llo%'", F},
	{"pct LIKE '50!%' ESCAPE '!'", T}, {"s LIKE 'hello!%' ESCAPE '!'", F},
	{"pct LIKE '%!%' ESCAPE '!'", T}, {"s LIKE '%!%' ESCAPE '!'", F},
	{"und LIKE 'a!_b' ESCAPE '!'", T}, {"'axb' LIKE 'a!_b' ESCAPE '!'", F},
	{"'a!b' LIKE 'a!!b' ESCAPE '!'", T}, {"'ABC%' LIKE 'ABC\\%' ESCAPE '\\'", T},
	{"'ABCD' LIKE 'ABC\\%' ESCAPE '\\'", F},
	{"'a%b' LIKE 'a%%b' ESCAPE '%'", T}, {"'axb' LIKE 'a%%b' ESCAPE '%'", F},
	{"s LIKE 'x' ESCAPE '\xc3\xa9'", F},
	{"s LIKE 'abc!' ESCAPE '!'", E, 0, "ends with the escape character"},
	{"s LIKE p('pct') ESCAPE s", E, 0, "ESCAPE must be a single character"},
	{"s LIKE 'x' ESCAPE 'ab'", P, 19, "ESCAPE must be a single character"},
	{"s LIKE 'x' ESCAPE ''", P, 19, "ESCAPE must be a single character"},
	{"s LIKE 'x' ESCAPE 1", P, 19, "ESCAPE must be a single character"},
	{"s LIKE 'x' ESCAPE NULL", U}, {"missing LIKE 'x'", U},
	{"s LIKE missing", U}, {"n NOT LIKE 'x'", U},
	{"i LIKE '5'", E, 0, "LIKE needs strings, not integer"},
	{"s LIKE 5", E, 0, "LIKE needs strings, not integer"},
	{"s LIKE 'he' + 'llo'", T},
	{"long LIKE '%a%a%a%a%a%a%a%a%b'", F}, {"long LIKE '%a%a%a%a%a%a%a%a%'", T},
	{"long LIKE '%_%_%_%_%_%_%_%_%_%_%_%_%b'", F},
	{"sys.CorrelationId like 'abc-%'", U},
	/* system properties */
	{"sys.MessageId = 'm1'", T}, {"SYS.messageid = 'm1'", T},
	{"sys.Label = 'red'", T}, {"sys.Subject = 'red'", T},
	{"sys.ContentType = 'application/json'", T}, {"sys.To = 'dest'", T},
	{"sys.ReplyTo = 'r'", T}, {"sys.SessionId = 's1'", T},
	{"sys.ReplyToSessionId IS NULL", T}, {"sys.CorrelationId = 'x'", U},
	{"sys.SequenceNumber = 42", T}, {"sys.DeliveryCount = 1", T},
	{"sys.Size > 10", T}, {"sys.EnqueuedSequenceNumber = 7", T},
	{"sys.EnqueuedTimeUtc > '2025'", T}, {"sys.ExpiresAtUtc IS NOT NULL", T},
	{"sys.ScheduledEnqueueTimeUtc IS NULL", T}, {"sys.TimeToLive = 60", T},
	{"sys.[Label] = 'red'", T}, {"sys.\"Label\" = 'red'", T},
	{"sys.Foo = 1", E, 0, "sys property \"Foo\" does not exist"},
	{"sys.Foo IS NULL", E, 0, "sys property \"Foo\" does not exist"},
	{"sys.LockToken = 'x'", E, 0, "sys property \"LockToken\" is not available"},
	{"sys.DeadLetterSource IS NULL", E, 0, "is not available"},
	{"FALSE AND sys.Foo = 1", F}, {"TRUE OR sys.Foo = 1", T},
	{"sys.Foo = 1 OR TRUE", E, 0, "does not exist"},
	/* property() and p() */
	{"property('i') = 5", T}, {"p('i') = 5", T}, {"P('I') = 5", T},
	{"p('Name With Space') = 'sp'", T}, {"p(pname) = 'Red'", T},
	{"p('co' + 'lor') = 'Red'", T}, {"p('missing') = 1", U},
	{"p(missing) = 1", U}, {"p(NULL) IS NULL", T},
	{"p('sys.Label') = 'red'", T}, {"p(sysname) = 'red'", T},
	{"p('user.i') = 5", T}, {"p('sys.Nope') = 1", E, 0, "sys property \"Nope\" does not exist"},
	{"p(5) = 1", E, 0, "property() needs a string, not integer"},
	{"p('obj') = 1", E, 0, "cannot use"}, {"p('obj') IS NOT NULL", T},
	{"EXISTS(p)", F}, {"p = 1", U},
	{"property() = 1", P, 10, NULL}, {"p('a', 'b') = 1", P, 6, NULL},
	/* newid() */
	{"newid() = '00010203-0405-4607-8809-0a0b0c0d0e0f'", T},
	{"NEWID() IS NOT NULL", T}, {"newid() LIKE '________-____-4___-____-____________'", T},
	{"newid() = 1", E, 0, "cannot compare string with integer"},
	{"newid(1) = 'x'", P, 7, NULL},
	{"foo(1) = 1", P, 1, "unknown function \"foo\""},
	/* malformed filters and their positions */
	{"", P, 1, "empty filter"}, {"   ", P, 4, "empty filter"},
	{"a =", P, 4, "syntax error at end of input"},
	{"a = = 1", P, 5, "syntax error at or near \"=\""},
	{"(a = 1", P, 7, "syntax error at end of input"},
	{"a = 1)", P, 6, "syntax error at or near \")\""},
	{"a = 1 AND", P, 10, "syntax error at end of input"},
	{"AND a = 1", P, 1, NULL}, {"a = 1 OR OR b = 1", P, 10, NULL},
	{"a = b = c", P, 7, "syntax error at or near \"=\""},
	{"a = 1 #", P, 7, "unexpected character \"#\""},
	{"a ! b", P, 3, "unexpected character \"!\""},
	{"a NOT = 1", P, 3, "syntax error at or near \"NOT\""},
	{"NOT", P, 4, "syntax error at end of input"},
	{"a = 1 b = 2", P, 7, NULL}, {"a == 1", P, 4, NULL},
	{"a = 'x' ESCAPE 'y'", P, 9, NULL}, {"()", P, 2, NULL},
	{"\xc3\xa9 = 1 AND \xc3\xa9\xc3\xa9 = = 2", P, 16, NULL},
	{"a = '\xff'", P, 6, "invalid UTF-8"},
	{"a = '\xc0\x80'", P, 6, "invalid UTF-8"},
	{"a = '\xed\xa0\x80'", P, 6, "invalid UTF-8"},
	{"a LIKE", P, 7, NULL}, {"a IS", P, 5, NULL}, {"a IN", P, 5, NULL},
	{"sys.", P, 5, "property name expected at end of input"},
	{"1 = 1;", P, 6, NULL}, {"SET a = 1", P, 5, NULL},
};

/* an action case: the edits written out (see edits_text), or an error */
typedef struct ACase
{
	const char *text;
	char		expect;			/* 'O' ok, 'E' evaluation error, 'P' parse */
	const char *edits;			/* O: the edits; E, P: a piece of the message */
	int			pos;			/* P: the error position */
} ACase;

static const ACase action_cases[] = {
	{"SET a = 1", 'O', "SET a=int:1;"},
	{"set A = 'x'", 'O', "SET A=str:x;"},
	{"SET a = 1; SET b = 2", 'O', "SET a=int:1;SET b=int:2;"},
	{"SET a = 1, SET b = 2", 'O', "SET a=int:1;SET b=int:2;"},
	{"SET a = 1; SET b = 2;", 'O', "SET a=int:1;SET b=int:2;"},
	{"SET a = 1;, SET b = 2;", 'O', "SET a=int:1;SET b=int:2;"},
	{"REMOVE a", 'O', "REMOVE a;"},
	{"remove [my prop]; REMOVE user.b", 'O', "REMOVE my prop;REMOVE b;"},
	{"SET [my prop] = 'v'", 'O', "SET my prop=str:v;"},
	{"SET a = i * 2 + 1", 'O', "SET a=int:11;"},
	{"SET a = 2.5", 'O', "SET a=dbl:2.5;"},
	{"SET a = TRUE", 'O', "SET a=bool:1;"},
	{"SET a = NULL", 'O', "SET a=null;"},
	{"SET a = missing", 'O', "SET a=null;"},
	{"SET a = missing + 1", 'O', "SET a=null;"},
	{"SET a = s + '!'", 'O', "SET a=str:hello!;"},
	/* statements see the edits before them */
	{"SET a = 'x'; SET b = a + 'y'", 'O', "SET a=str:x;SET b=str:xy;"},
	{"SET i = i + 1; SET i = i * 2", 'O', "SET i=int:6;SET i=int:12;"},
	{"REMOVE s; SET t = s", 'O', "REMOVE s;SET t=null;"},
	{"SET Color = 'x'; SET b = COLOR", 'O', "SET Color=str:x;SET b=str:x;"},
	{"SET t = EXISTS_x; REMOVE i; SET u = p('i')", 'O', "SET t=null;REMOVE i;SET u=null;"},
	/* implicit conversion into an existing double */
	{"SET d = 3", 'O', "SET d=dbl:3;"},
	{"SET i = 2.5", 'O', "SET i=dbl:2.5;"},
	{"SET s = 1", 'O', "SET s=int:1;"},
	/* system properties */
	{"SET sys.Label = 'blue'", 'O', "SET sys.Label=str:blue;"},
	{"SET sys.Subject = 'blue'", 'O', "SET sys.Label=str:blue;"},
	{"SET sys.Label = sys.Label + '-x'", 'O', "SET sys.Label=str:red-x;"},
	{"SET sys.Label = 'a'; SET b = sys.Label", 'O', "SET sys.Label=str:a;SET b=str:a;"},
	{"SET sys.CorrelationId = NULL", 'O', "SET sys.CorrelationId=null;"},
	{"SET sys.To = 'Entity', SET sys.ReplyTo = 'r2'", 'O',
	"SET sys.To=str:Entity;SET sys.ReplyTo=str:r2;"},
	{"SET sys.MessageId = newid()", 'O',
	"SET sys.MessageId=str:00010203-0405-4607-8809-0a0b0c0d0e0f;"},
	{"SET sys.ContentType = 'text/plain'; SET sys.SessionId = 's';"
	" SET sys.ReplyToSessionId = 'q'", 'O',
	"SET sys.ContentType=str:text/plain;SET sys.SessionId=str:s;SET sys.ReplyToSessionId=str:q;"},
	{"SET sys.ScheduledEnqueueTimeUtc = '2030-01-01'", 'O', ""},
	{"SET sys.ScheduledEnqueueTimeUtc = 'x'; SET a = 1", 'O', "SET a=int:1;"},
	{"SET sys.Label = 1", 'E', "cannot set sys property \"Label\" to integer"},
	{"SET sys.SequenceNumber = 1", 'E', "sys property \"SequenceNumber\" cannot be set"},
	{"SET sys.TimeToLive = 1", 'E', "cannot be set"},
	{"SET sys.Foo = 1", 'E', "sys property \"Foo\" does not exist"},
	{"REMOVE sys.Label", 'E', "sys property \"Label\" cannot be removed"},
	{"SET a = sys.LockToken", 'E', "sys property \"LockToken\" is not available"},
	{"SET a = sys.Nope", 'E', "sys property \"Nope\" does not exist"},
	{"SET a = big + 1", 'E', "integer overflow in \"+\""},
	{"SET a = obj", 'E', "cannot use"},
	{"SET a = 1; SET b = 1 / 0", 'E', "division by zero"},
	/* parse errors */
	{"", 'P', "empty action", 1},
	{"SET", 'P', "property name expected at end of input", 4},
	{"SET a", 'P', "syntax error at end of input", 6},
	{"SET a =", 'P', "syntax error at end of input", 8},
	{"SET a = 1 SET b = 2", 'P', "syntax error at or near \"SET\"", 11},
	{"SET a = 1,", 'P', "SET or REMOVE expected at end of input", 11},
	{"SET a = 1,,", 'P', "SET or REMOVE expected at or near \",\"", 11},
	{"SET a = 1;;", 'P', "SET or REMOVE expected at or near \";\"", 11},
	{"UPDATE a = 1", 'P', "SET or REMOVE expected at or near \"UPDATE\"", 1},
	{"SET a = b > 1", 'P', "syntax error at or near \">\"", 11},
	{"SET a = b AND c", 'P', "syntax error at or near \"AND\"", 11},
	{"REMOVE a = 1", 'P', "syntax error at or near \"=\"", 10},
	{"SET 1 = 1", 'P', "property name expected", 5},
	{"SET x.a = 1", 'P', "unknown scope \"x\"", 5},
	{"SET a = 'x", 'P', "unterminated string constant", 9},
	{"; SET a = 1", 'P', "SET or REMOVE expected", 1},
};

static int	failures = 0;
static int	cases_run = 0;
static char long_a[1001];
static char huge[2100];

static const TProp user_props_template[] = {
	{"i", {SBQ_FV_INT, false, 5, 0, NULL, 0}},
	{"j", {SBQ_FV_INT, false, -3, 0, NULL, 0}},
	{"zero", {SBQ_FV_INT, false, 0, 0, NULL, 0}},
	{"big", {SBQ_FV_INT, false, INT64_MAX, 0, NULL, 0}},
	{"small", {SBQ_FV_INT, false, INT64_MIN, 0, NULL, 0}},
	{"d", {SBQ_FV_DOUBLE, false, 0, 2.5, NULL, 0}},
	{"s", {SBQ_FV_STRING, false, 0, 0, "hello", 5}},
	{"e", {SBQ_FV_STRING, false, 0, 0, "", 0}},
	{"u", {SBQ_FV_STRING, false, 0, 0, "h\xc3\xa9llo w\xc3\xb6rld", 13}},
	{"pct", {SBQ_FV_STRING, false, 0, 0, "50%", 3}},
	{"und", {SBQ_FV_STRING, false, 0, 0, "a_b", 3}},
	{"num", {SBQ_FV_STRING, false, 0, 0, "10", 2}},
	{"apos", {SBQ_FV_STRING, false, 0, 0, "it's", 4}},
	{"color", {SBQ_FV_STRING, false, 0, 0, "Red", 3}},
	{"pname", {SBQ_FV_STRING, false, 0, 0, "COLOR", 5}},
	{"sysname", {SBQ_FV_STRING, false, 0, 0, "SYS.label", 9}},
	{"b", {SBQ_FV_BOOL, true, 0, 0, NULL, 0}},
	{"f", {SBQ_FV_BOOL, false, 0, 0, NULL, 0}},
	{"n", {SBQ_FV_NULL, false, 0, 0, NULL, 0}},
	{"obj", {SBQ_FV_UNSUPPORTED, false, 0, 0, NULL, 0}},
	{"Name With Space", {SBQ_FV_STRING, false, 0, 0, "sp", 2}},
	{"br]ack", {SBQ_FV_STRING, false, 0, 0, "b", 1}},
	{"quo\"te", {SBQ_FV_STRING, false, 0, 0, "q", 1}},
	{"caf\xc3\xa9", {SBQ_FV_STRING, false, 0, 0, "latte", 5}},
	{"\xc3\xa9", {SBQ_FV_INT, false, 1, 0, NULL, 0}},
	{"set", {SBQ_FV_NULL, false, 0, 0, NULL, 0}},
	{"long", {SBQ_FV_STRING, false, 0, 0, long_a, 1000}},
};

/* the test message: user_props_template and a set of system values */
static void
build_message(TMessage *m)
{
	static const SbqFilterSysProp unavailable[] = {
		SBQ_FSYS_LOCK_TOKEN, SBQ_FSYS_DEAD_LETTER_SOURCE
	};
	int			k;

	memset(long_a, 'a', 1000);
	memset(m, 0, sizeof(*m));
	m->props = user_props_template;
	m->nprops = (int) (sizeof(user_props_template) / sizeof(TProp));
	for (k = 1; k < SBQ_FSYS_COUNT; k++)
		m->sys_avail[k] = 1;
	for (k = 0; k < 2; k++)
		m->sys_avail[unavailable[k]] = 0;
	m->sys[SBQ_FSYS_MESSAGE_ID] = t_str("m1");
	m->sys[SBQ_FSYS_CONTENT_TYPE] = t_str("application/json");
	m->sys[SBQ_FSYS_LABEL] = t_str("red");
	m->sys[SBQ_FSYS_REPLY_TO] = t_str("r");
	m->sys[SBQ_FSYS_SESSION_ID] = t_str("s1");
	m->sys[SBQ_FSYS_TO] = t_str("dest");
	m->sys[SBQ_FSYS_SEQUENCE_NUMBER] = t_int(42);
	m->sys[SBQ_FSYS_DELIVERY_COUNT] = t_int(1);
	m->sys[SBQ_FSYS_SIZE] = t_int(100);
	m->sys[SBQ_FSYS_ENQUEUED_TIME_UTC] = t_str("2026-01-01T00:00:00Z");
	m->sys[SBQ_FSYS_EXPIRES_AT_UTC] = t_str("2026-01-02T00:00:00Z");
	m->sys[SBQ_FSYS_TIME_TO_LIVE] = t_int(60);
	m->sys[SBQ_FSYS_ENQUEUED_SEQUENCE_NUMBER] = t_int(7);
}

static void
fail(const char *what, const char *text, const char *fmt, const char *a,
	 const char *b)
{
	failures++;
	printf("FAIL %s [%s]: ", what, text);
	printf(fmt, a ? a : "(null)", b ? b : "(null)");
	printf("\n");
}

static const char *
result_name(SbqFilterResult r)
{
	switch (r)
	{
		case SBQ_FILTER_TRUE: return "TRUE";
		case SBQ_FILTER_FALSE: return "FALSE";
		case SBQ_FILTER_UNKNOWN: return "UNKNOWN";
		default: return "ERROR";
	}
}

/* check a parse error: position and a piece of the message */
static void
check_parse_error(const char *what, const char *text, const SbqFilterError *err,
				  int pos, const char *msg)
{
	char		buf[64];

	if (err->type == NULL || strcmp(err->type, "ParseError") != 0)
		fail(what, text, "error type %s, want %s", err->type, "ParseError");
	if (pos > 0 && err->position != pos)
	{
		snprintf(buf, sizeof(buf), "%d, want %d", err->position, pos);
		fail(what, text, "position %s (%s)", buf, err->message);
		return;
	}
	if (msg != NULL && (err->message == NULL || strstr(err->message, msg) == NULL))
		fail(what, text, "message \"%s\", want \"%s\"", err->message, msg);
}

/* run one filter case */
static void
run_filter_case(const FCase *c, TMessage *tm, TArena *arena)
{
	SbqFilterMessage m = t_message(tm);
	SbqFilterExpr *f;
	SbqFilterError err;
	SbqFilterResult r;
	char		want[2] = {c->expect, 0};

	cases_run++;
	if (!sbq_filter_parse(c->text, strlen(c->text), t_alloc, arena, &f, &err))
	{
		if (c->expect != P)
			fail("filter", c->text, "parse error \"%s\", want %s", err.message, want);
		else
			check_parse_error("filter", c->text, &err, c->pos, c->msg);
		return;
	}
	if (c->expect == P)
	{
		fail("filter", c->text, "parsed, want a parse error%s%s", "", "");
		return;
	}
	r = sbq_filter_eval(f, &m, t_alloc, arena, &err);
	if (r == SBQ_FILTER_ERROR && c->expect == E)
	{
		if (err.type == NULL || strcmp(err.type, "FilterException") != 0)
			fail("filter", c->text, "error type %s, want %s", err.type, "FilterException");
		if (c->msg != NULL && strstr(err.message, c->msg) == NULL)
			fail("filter", c->text, "message \"%s\", want \"%s\"", err.message, c->msg);
		return;
	}
	if ((r == SBQ_FILTER_TRUE && c->expect == T) ||
		(r == SBQ_FILTER_FALSE && c->expect == F) ||
		(r == SBQ_FILTER_UNKNOWN && c->expect == U))
		return;
	fail("filter", c->text, "%s, want %s", r == SBQ_FILTER_ERROR ? err.message :
		 result_name(r), want);
}

/* the edits of an action as text: "SET name=kind:value;REMOVE name;" */
static void
edits_text(const SbqFilterEdit *e, int n, char *buf, size_t size)
{
	size_t		used = 0;
	int			k;

	buf[0] = '\0';
	for (k = 0; k < n && used < size; k++)
	{
		char		name[128];
		char		val[200];

		if (e[k].scope == SBQ_FSCOPE_SYS)
			snprintf(name, sizeof(name), "sys.%s", sbq_filter_sys_name(e[k].sys));
		else
			snprintf(name, sizeof(name), "%.*s", (int) e[k].name_len, e[k].name);
		switch (e[k].value.kind)
		{
			case SBQ_FV_INT:
				snprintf(val, sizeof(val), "int:%lld", (long long) e[k].value.i);
				break;
			case SBQ_FV_DOUBLE:
				snprintf(val, sizeof(val), "dbl:%g", e[k].value.d);
				break;
			case SBQ_FV_STRING:
				snprintf(val, sizeof(val), "str:%.*s", (int) e[k].value.len,
						 e[k].value.s);
				break;
			case SBQ_FV_BOOL:
				snprintf(val, sizeof(val), "bool:%d", (int) e[k].value.b);
				break;
			default:
				snprintf(val, sizeof(val), "null");
				break;
		}
		if (e[k].remove)
			used += (size_t) snprintf(buf + used, size - used, "REMOVE %s;", name);
		else
			used += (size_t) snprintf(buf + used, size - used, "SET %s=%s;", name, val);
	}
}

/* run one action case */
static void
run_action_case(const ACase *c, TMessage *tm, TArena *arena)
{
	SbqFilterMessage m = t_message(tm);
	SbqFilterAction *a;
	SbqFilterError err;
	SbqFilterEdit *edits;
	int			n;
	char		got[1024];

	cases_run++;
	if (!sbq_action_parse(c->text, strlen(c->text), t_alloc, arena, &a, &err))
	{
		if (c->expect != 'P')
			fail("action", c->text, "parse error \"%s\"%s", err.message, "");
		else
			check_parse_error("action", c->text, &err, c->pos, c->edits);
		return;
	}
	if (c->expect == 'P')
	{
		fail("action", c->text, "parsed, want a parse error%s%s", "", "");
		return;
	}
	if (!sbq_action_eval(a, &m, t_alloc, arena, &edits, &n, &err))
	{
		if (c->expect != 'E')
			fail("action", c->text, "error \"%s\"%s", err.message, "");
		else if (strcmp(err.type, "RuleActionException") != 0 ||
				 strstr(err.message, c->edits) == NULL)
			fail("action", c->text, "error \"%s\", want \"%s\"", err.message, c->edits);
		if (n != 0 || edits != NULL)
			fail("action", c->text, "edits returned with an error%s%s", "", "");
		return;
	}
	if (c->expect != 'O')
	{
		fail("action", c->text, "succeeded, want %s%s", c->edits, "");
		return;
	}
	edits_text(edits, n, got, sizeof(got));
	if (strcmp(got, c->edits) != 0)
		fail("action", c->text, "edits \"%s\", want \"%s\"", got, c->edits);
}

/* a filter of exactly nchars characters: "a = '<x...>'" */
static void
check_length_limit(TMessage *tm, TArena *arena)
{
	static const char *const fill[] = {"x", "\xc3\xa9"};
	int			k;

	for (k = 0; k < 2; k++)
	{
		int			nchars;

		for (nchars = 1023; nchars <= 1026; nchars++)
		{
			size_t		used = 0;
			int			c;
			SbqFilterExpr *f;
			SbqFilterError err;
			bool		ok;

			used += (size_t) sprintf(huge, "a = '");
			for (c = 0; c < nchars - 6; c++)
				used += (size_t) sprintf(huge + used, "%s", fill[k]);
			used += (size_t) sprintf(huge + used, "'");
			cases_run++;
			ok = sbq_filter_parse(huge, used, t_alloc, arena, &f, &err);
			if (ok != (nchars <= SBQ_FILTER_MAX_CHARS) ||
				(!ok && (err.position != 1025 || strstr(err.message, "longer than 1024") == NULL)))
				fail("length", fill[k], "limit wrong at %s characters%s",
					 nchars == 1024 ? "1024" : "1023/1025/1026", "");
		}
	}
	(void) tm;
}

/* nesting: 128 levels parse, 129 fail at the 129th opener */
static void
check_nesting(TArena *arena)
{
	static const char *const openers[] = {"(", "NOT ", "-", "p("};
	static const char *const closers[] = {")", "", "", ")"};
	static const char *const cores[] = {"1=1", "TRUE", "1", "'x'"};
	int			k;

	for (k = 0; k < 4; k++)
	{
		int			depth;

		for (depth = 128; depth <= 129; depth++)
		{
			size_t		used = 0;
			int			d;
			SbqFilterExpr *f;
			SbqFilterError err;
			bool		ok;
			int			olen = (int) strlen(openers[k]);

			for (d = 0; d < depth; d++)
				used += (size_t) sprintf(huge + used, "%s", openers[k]);
			used += (size_t) sprintf(huge + used, "%s", cores[k]);
			for (d = 0; d < depth; d++)
				used += (size_t) sprintf(huge + used, "%s", closers[k]);
			if (k == 2)
				used += (size_t) sprintf(huge + used, " = 1");
			if (k == 3)
				used += (size_t) sprintf(huge + used, " IS NULL");
			cases_run++;
			ok = sbq_filter_parse(huge, used, t_alloc, arena, &f, &err);
			if (ok != (depth <= SBQ_FILTER_MAX_DEPTH) ||
				(!ok && (err.position != 128 * olen + 1 ||
						 strstr(err.message, "nested too deeply") == NULL)))
				fail("nesting", openers[k], "wrong at depth %s: %s",
					 depth == 128 ? "128" : "129", ok ? "parsed" : err.message);
		}
	}
}

/* 32 statements parse, 33 fail at the 33rd; doubling a string stops */
static void
check_action_limits(TMessage *tm, TArena *arena)
{
	SbqFilterMessage m = t_message(tm);
	SbqFilterAction *a;
	SbqFilterError err;
	SbqFilterEdit *edits;
	int			n;
	int			count;
	size_t		used;

	for (count = 32; count <= 33; count++)
	{
		int			k;
		bool		ok;

		used = 0;
		for (k = 0; k < count; k++)
			used += (size_t) sprintf(huge + used, "SET a = 1,");
		huge[--used] = '\0';
		cases_run++;
		ok = sbq_action_parse(huge, used, t_alloc, arena, &a, &err);
		if (ok != (count <= 32) ||
			(!ok && (err.position != 321 || strstr(err.message, "more than 32") == NULL)))
			fail("statements", count == 32 ? "32" : "33", "wrong: %s%s",
				 ok ? "parsed" : err.message, "");
	}
	used = (size_t) sprintf(huge, "SET a = long");
	for (count = 1; count < 32; count++)
		used += (size_t) sprintf(huge + used, "; SET a = a + a");
	cases_run++;
	if (!sbq_action_parse(huge, used, t_alloc, arena, &a, &err))
		fail("doubling", "", "parse error %s%s", err.message, "");
	else if (sbq_action_eval(a, &m, t_alloc, arena, &edits, &n, &err) ||
			 strstr(err.message, "exceed") == NULL)
		fail("doubling", "", "no budget error%s%s", "", "");
}

/* a pathological LIKE finishes fast */
static void
check_like_time(TMessage *tm, TArena *arena)
{
	SbqFilterMessage m = t_message(tm);
	const char *text = "long LIKE '%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%b'";
	SbqFilterExpr *f;
	SbqFilterError err;
	clock_t		start = clock();
	int			k;

	cases_run++;
	if (!sbq_filter_parse(text, strlen(text), t_alloc, arena, &f, &err))
	{
		fail("like time", text, "parse error %s%s", err.message, "");
		return;
	}
	for (k = 0; k < 10; k++)
		if (sbq_filter_eval(f, &m, t_alloc, arena, &err) != SBQ_FILTER_FALSE)
			fail("like time", text, "not FALSE%s%s", "", "");
	if ((double) (clock() - start) / CLOCKS_PER_SEC > 0.5)
		fail("like time", text, "ten runs took over 500 ms%s%s", "", "");
}

/*
 * Every allocation that fails must give a clean error: parse and evaluate
 * under every cap from 0 bytes up to what the whole run needs.
 */
static void
check_out_of_memory(TMessage *tm)
{
	static const char *const texts[] = {
		"s + 'x' LIKE 'h%' ESCAPE '!' AND i IN (1, 2, p('i')) OR newid() IS NULL",
		"sys.Foo = 1"
	};
	SbqFilterMessage m = t_message(tm);
	int			k;

	for (k = 0; k < 2; k++)
	{
		size_t		cap;

		for (cap = 16; cap < 8192; cap += 16)
		{
			TArena		arena = {NULL, 0, cap, 0};
			SbqFilterExpr *f;
			SbqFilterError err;

			cases_run++;
			if (!sbq_filter_parse(texts[k], strlen(texts[k]), t_alloc, &arena, &f, &err))
			{
				if (err.message == NULL || arena.refused == 0)
					fail("oom", texts[k], "parse failed without a refusal: %s%s",
						 err.message, "");
			}
			else if (sbq_filter_eval(f, &m, t_alloc, &arena, &err) == SBQ_FILTER_ERROR &&
					 err.message == NULL)
				fail("oom", texts[k], "error without a message%s%s", "", "");
			t_arena_reset(&arena);
		}
	}
}

/* the sys name mapping the caller uses */
static void
check_sys_names(void)
{
	int			k;

	for (k = 1; k < SBQ_FSYS_COUNT; k++)
	{
		const char *name = sbq_filter_sys_name((SbqFilterSysProp) k);

		cases_run++;
		if (name == NULL || (int) sbq_filter_sys_from_name(name, strlen(name)) != k)
			fail("sys names", name, "no round trip%s%s", "", "");
	}
	cases_run++;
	if (sbq_filter_sys_from_name("SUBJECT", 7) != SBQ_FSYS_LABEL ||
		sbq_filter_sys_from_name("Labels", 6) != SBQ_FSYS_UNKNOWN ||
		sbq_filter_sys_name(SBQ_FSYS_UNKNOWN) != NULL)
		fail("sys names", "Subject", "alias or unknown wrong%s%s", "", "");
}

int
main(void)
{
	TMessage	tm;
	TArena		arena = {NULL, 0, 0, 0};
	size_t		k;

	build_message(&tm);
	for (k = 0; k < sizeof(filter_cases) / sizeof(filter_cases[0]); k++)
	{
		run_filter_case(&filter_cases[k], &tm, &arena);
		t_arena_reset(&arena);
	}
	for (k = 0; k < sizeof(action_cases) / sizeof(action_cases[0]); k++)
	{
		run_action_case(&action_cases[k], &tm, &arena);
		t_arena_reset(&arena);
	}
	check_length_limit(&tm, &arena);
	check_nesting(&arena);
	check_action_limits(&tm, &arena);
	check_like_time(&tm, &arena);
	check_sys_names();
	t_arena_reset(&arena);
	check_out_of_memory(&tm);
	printf("filter_test: %d filter cases, %d action cases, %d checks in all, %d failed\n",
		   (int) (sizeof(filter_cases) / sizeof(filter_cases[0])),
		   (int) (sizeof(action_cases) / sizeof(action_cases[0])),
		   cases_run, failures);
	return failures == 0 ? 0 : 1;
}
