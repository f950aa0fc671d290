/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  A worker for an sbqueue queue in C over libpq: receives batches, handles
 *	  each message, renews the batch's locks while the handling runs long, and
 *	  completes the batch in one call.
 *
 *	  worker [-d conninfo] [-q queue] [-b batch] [-w max_wait_s] [-n stop_after]
 *	         [-s work_ms_per_batch] [-v]
 *
 * It stops when it has completed stop_after messages (0: never), or when a
 * receive that waited max_wait seconds got nothing. Prints one line per batch,
 * and at the end "completed N renewed R lost L". The lock tokens go to the
 * server as text and are cast there, so no overload is ambiguous.
 *
 * A message whose lock was lost before the batch completed (SB002 for the
 * batch, which is all or nothing) is counted as lost and the rest are
 * completed one by one; such a message comes again to some receiver.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  examples/c/worker.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#define MAX_BATCH 5000

typedef struct Batch
{
	int			n;
	char	   *tokens[MAX_BATCH];
	double		locked_until[MAX_BATCH];	/* seconds since the epoch */
	double		span;			/* of the first lock, as received */
} Batch;

static int	verbose = 0;

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A result that is not what was expected: print it; the SQLSTATE, or "". */
static const char *
failed(PGresult *res, const char *what)
{
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	fprintf(stderr, "worker: %s: %s", what, PQresultErrorMessage(res));
	return state ? state : "";
}

/* The Postgres array literal of the batch's tokens: {t1,t2,...} (malloc'd). */
static char *
token_array(const Batch *b, int from, int count)
{
	size_t		len = 3 + (size_t) count * 37;
	char	   *s = malloc(len);
	char	   *p = s;
	int			i;

	*p++ = '{';
	for (i = from; i < from + count; i++)
		p += sprintf(p, "%s%s", i > from ? "," : "", b->tokens[i]);
	*p++ = '}';
	*p = '\0';
	return s;
}

/* Receives up to size messages, waiting up to max_wait seconds. */
static int
receive(PGconn *conn, const char *queue, int size, int max_wait, Batch *b)
{
	char		size_s[16];
	char		wait_s[32];
	const char *params[3] = {queue, size_s, wait_s};
	PGresult   *res;
	int			i;

	snprintf(size_s, sizeof(size_s), "%d", size);
	snprintf(wait_s, sizeof(wait_s), "%d seconds", max_wait);
	res = PQexecParams(conn,
					   "SELECT sequence_number, lock_token::text,"
					   "       extract(epoch FROM locked_until), length(body),"
					   "       extract(epoch FROM locked_until - now())"
					   "  FROM sbq_receive($1::text, $2::int, $3::interval)",
					   3, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		failed(res, "receive");
		PQclear(res);
		return -1;
	}
	b->n = PQntuples(res);
	for (i = 0; i < b->n; i++)
	{
		b->tokens[i] = strdup(PQgetvalue(res, i, 1));
		b->locked_until[i] = atof(PQgetvalue(res, i, 2));
		if (i == 0)
			b->span = atof(PQgetvalue(res, i, 4));
		if (verbose)
			printf("  message %s (%s bytes)\n", PQgetvalue(res, i, 0), PQgetvalue(res, i, 3));
	}
	PQclear(res);
	return b->n;
}

/* Renews each lock of the batch that is past half its span; how many. */
static int
renew_due(PGconn *conn, const char *queue, Batch *b, int *lost)
{
	int			renewed = 0;
	int			i;

	for (i = 0; i < b->n; i++)
	{
		const char *params[2] = {queue, b->tokens[i]};
		PGresult   *res;

		if (b->tokens[i][0] == '\0' || b->locked_until[i] - now_s() > b->span / 2)
			continue;
		res = PQexecParams(conn, "SELECT extract(epoch FROM sbq_renew($1::text, $2::uuid))",
						   2, NULL, params, NULL, NULL, 0);
		if (PQresultStatus(res) == PGRES_TUPLES_OK)
		{
			b->locked_until[i] = atof(PQgetvalue(res, 0, 0));
			renewed++;
		}
		else if (strcmp(failed(res, "renew"), "SB002") == 0)
		{
			b->tokens[i][0] = '\0';	/* lost: not completed below */
			(*lost)++;
		}
		PQclear(res);
	}
	return renewed;
}

/* Completes the batch in one call; on SB002, one by one. How many. */
static int
complete(PGconn *conn, const char *queue, Batch *b, int *lost)
{
	int			kept = 0;
	int			done = 0;
	int			i;
	char	   *arr;
	const char *params[2];
	PGresult   *res;

	for (i = 0; i < b->n; i++)
	{
		if (b->tokens[i][0] != '\0')
			b->tokens[kept++] = b->tokens[i];
		else
			free(b->tokens[i]);
	}
	b->n = kept;
	if (kept == 0)
		return 0;
	arr = token_array(b, 0, kept);
	params[0] = queue;
	params[1] = arr;
	res = PQexecParams(conn, "SELECT sbq_complete($1::text, $2::uuid[])",
					   2, NULL, params, NULL, NULL, 0);
	free(arr);
	if (PQresultStatus(res) == PGRES_TUPLES_OK)
	{
		done = atoi(PQgetvalue(res, 0, 0));
		PQclear(res);
		return done;
	}
	if (strcmp(failed(res, "complete"), "SB002") != 0)
	{
		PQclear(res);
		return -1;
	}
	PQclear(res);
	for (i = 0; i < kept; i++)
	{
		params[1] = b->tokens[i];
		res = PQexecParams(conn, "SELECT sbq_complete($1::text, $2::uuid)",
						   2, NULL, params, NULL, NULL, 0);
		if (PQresultStatus(res) == PGRES_TUPLES_OK)
			done++;
		else
			(*lost)++;
		PQclear(res);
	}
	return done;
}

int
main(int argc, char **argv)
{
	const char *conninfo = "";
	const char *queue = "orders";
	int			size = 10;
	int			max_wait = 5;
	long		stop_after = 0;
	int			work_ms = 0;
	long		completed = 0;
	int			renewed = 0;
	int			lost = 0;
	int			opt;
	PGconn	   *conn;
	Batch	   *b = calloc(1, sizeof(Batch));

	while ((opt = getopt(argc, argv, "d:q:b:w:n:s:v")) != -1)
	{
		switch (opt)
		{
			case 'd': conninfo = optarg; break;
			case 'q': queue = optarg; break;
			case 'b': size = atoi(optarg); break;
			case 'w': max_wait = atoi(optarg); break;
			case 'n': stop_after = atol(optarg); break;
			case 's': work_ms = atoi(optarg); break;
			case 'v': verbose = 1; break;
			default:
				fprintf(stderr, "usage: %s [-d conninfo] [-q queue] [-b batch] [-w max_wait_s] "
						"[-n stop_after] [-s work_ms_per_batch] [-v]\n", argv[0]);
				return 2;
		}
	}
	if (size < 1 || size > MAX_BATCH)
	{
		fprintf(stderr, "worker: the batch size must be 1 .. %d\n", MAX_BATCH);
		return 2;
	}
	conn = PQconnectdb(conninfo);
	if (PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "worker: %s", PQerrorMessage(conn));
		return 1;
	}
	while (stop_after == 0 || completed < stop_after)
	{
		int			got = receive(conn, queue, size, max_wait, b);
		double		until;
		int			done;
		int			i;

		if (got < 0)
			break;
		if (got == 0)
		{
			printf("nothing came within %d s\n", max_wait);
			break;
		}
		/* the handling: work_ms of it, renewing the locks meanwhile */
		until = now_s() + work_ms / 1000.0;
		while (now_s() < until)
		{
			usleep(100 * 1000);
			renewed += renew_due(conn, queue, b, &lost);
		}
		done = complete(conn, queue, b, &lost);
		for (i = 0; i < b->n; i++)
			free(b->tokens[i]);
		if (done < 0)
			break;
		completed += done;
		printf("batch of %d: %d completed\n", got, done);
		fflush(stdout);
	}
	printf("completed %ld renewed %d lost %d\n", completed, renewed, lost);
	PQfinish(conn);
	free(b);
	return 0;
}
