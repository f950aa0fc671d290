/*-------------------------------------------------------------------------
 *
 * wakeup.c
 *	  Wake-up latency of a blocking receive: the time from a sender's COMMIT
 *	  to the moment a receiver, asleep in sbq_receive(..., max_wait), has
 *	  the message in hand.
 *
 *	  wakeup [-n iterations] [-w warmup] [-q queue] [-p poll] [conninfo]
 *
 * Three connections: a receiver, a sender and a monitor. Each iteration:
 *	1. the receiver sends SELECT ... FROM sbq_receive(queue, 1, '10 s',
 *	   'receive_and_delete') without waiting for the answer;
 *	2. the monitor polls pg_stat_activity until the receiver is asleep in the
 *	   receive (wait_event_type 'Extension'), so every iteration measures a
 *	   real wake-up, never a receive that found the message at once;
 *	3. the sender runs BEGIN; SELECT sbq_send(queue, ...); then sends COMMIT;
 *	4. one poll() loop on both sockets timestamps (CLOCK_MONOTONIC) the
 *	   arrival of the sender's COMMIT reply and of the receiver's row.
 * Reported, with p50/p90/p99/max:
 *	commit->return: from sending COMMIT to having the row. An upper bound:
 *	  it includes the commit itself (WAL flush) and two network trips.
 *	ack->return: from the COMMIT reply to having the row. The commit is
 *	  visible before its reply leaves, so this is the wake-up and the
 *	  receiver's second look, as a client sees them (it can be negative).
 * The receiver sets sbqueue.receive_poll_interval to -p (default 60s) so
 * that only a wake-up can end its sleep; without the preload, pass the
 * default 100ms to measure the polling fallback. A receive that returns
 * nothing (10 s timeout) or an error aborts the run.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  bench/wakeup.c
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "libpq-fe.h"

static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

static void
die(PGconn *conn, const char *what)
{
	fprintf(stderr, "wakeup: %s: %s", what, conn ? PQerrorMessage(conn) : "\n");
	exit(1);
}

/* Run a command and check its status; returns the result (caller clears). */
static PGresult *
run(PGconn *conn, const char *sql, ExecStatusType expect)
{
	PGresult   *res = PQexec(conn, sql);

	if (PQresultStatus(res) != expect)
	{
		fprintf(stderr, "wakeup: %s: %s", sql, PQerrorMessage(conn));
		exit(1);
	}
	return res;
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a;
	double		y = *(const double *) b;

	return (x > y) - (x < y);
}

static double
pct(const double *sorted, int n, double p)
{
	int			i = (int) (p / 100.0 * n + 0.5) - 1;

	if (i < 0)
		i = 0;
	if (i >= n)
		i = n - 1;
	return sorted[i];
}

static void
report(const char *name, double *v, int n)
{
	double		sum = 0;
	int			i;

	qsort(v, n, sizeof(double), cmp_double);
	for (i = 0; i < n; i++)
		sum += v[i];
	printf("%-15s n=%d  mean=%.3f  p50=%.3f  p90=%.3f  p99=%.3f  max=%.3f  (ms)\n",
		   name, n, sum / n, pct(v, n, 50), pct(v, n, 90), pct(v, n, 99), v[n - 1]);
}

/*
 * Read what has arrived on conn; true once its whole answer is in (then the
 * result is checked and consumed).
 */
static bool
answer_done(PGconn *conn, ExecStatusType expect, int expect_rows)
{
	PGresult   *res;

	if (!PQconsumeInput(conn))
		die(conn, "PQconsumeInput");
	if (PQisBusy(conn))
		return false;
	while ((res = PQgetResult(conn)) != NULL)
	{
		if (PQresultStatus(res) != expect ||
			(expect_rows >= 0 && PQntuples(res) != expect_rows))
		{
			fprintf(stderr, "wakeup: unexpected answer: %s (%d rows) %s",
					PQresStatus(PQresultStatus(res)), PQntuples(res),
					PQerrorMessage(conn));
			exit(1);
		}
		PQclear(res);
	}
	return true;
}

int
main(int argc, char **argv)
{
	int			iterations = 1000;
	int			warmup = 50;
	const char *queue = "bench_wakeup";
	const char *conninfo = "";
	const char *poll_interval = "60s";
	PGconn	   *recv,
			   *send,
			   *mon;
	PGresult   *res;
	char		recv_sql[256];
	char		send_sql[256];
	char		mon_sql[256];
	double	   *commit_to_return;
	double	   *ack_to_return;
	int			c;
	int			i;
	int			n = 0;

	while ((c = getopt(argc, argv, "n:w:q:p:")) != -1)
	{
		switch (c)
		{
			case 'n':
				iterations = atoi(optarg);
				break;
			case 'w':
				warmup = atoi(optarg);
				break;
			case 'q':
				queue = optarg;
				break;
			case 'p':
				poll_interval = optarg;
				break;
			default:
				fprintf(stderr, "usage: wakeup [-n iterations] [-w warmup] [-q queue] [-p poll] [conninfo]\n");
				return 2;
		}
	}
	if (optind < argc)
		conninfo = argv[optind];
	if (iterations < 1 || warmup < 0)
	{
		fprintf(stderr, "wakeup: bad -n or -w\n");
		return 2;
	}

	recv = PQconnectdb(conninfo);
	send = PQconnectdb(conninfo);
	mon = PQconnectdb(conninfo);
	if (PQstatus(recv) != CONNECTION_OK)
		die(recv, "connect");
	if (PQstatus(send) != CONNECTION_OK)
		die(send, "connect");
	if (PQstatus(mon) != CONNECTION_OK)
		die(mon, "connect");

	/* a fresh, empty queue */
	snprintf(send_sql, sizeof(send_sql),
			 "SELECT sbq_create_queue('%s') WHERE NOT EXISTS "
			 "(SELECT FROM sbq_queues WHERE queue = '%s')", queue, queue);
	PQclear(run(send, send_sql, PGRES_TUPLES_OK));
	snprintf(send_sql, sizeof(send_sql), "SELECT sbq_purge_queue('%s')", queue);
	PQclear(run(send, send_sql, PGRES_TUPLES_OK));

	snprintf(recv_sql, sizeof(recv_sql), "SET sbqueue.receive_poll_interval = '%s'",
			 poll_interval);
	PQclear(run(recv, recv_sql, PGRES_COMMAND_OK));
	res = run(recv, "SHOW sbqueue.receive_poll_interval", PGRES_TUPLES_OK);
	printf("receiver: sbqueue.receive_poll_interval = %s\n",
		   PQgetvalue(res, 0, 0));
	PQclear(res);
	res = run(mon, "SELECT setting FROM pg_settings WHERE name = 'shared_preload_libraries'",
			  PGRES_TUPLES_OK);
	printf("server: shared_preload_libraries = '%s'\n", PQgetvalue(res, 0, 0));
	PQclear(res);

	snprintf(recv_sql, sizeof(recv_sql),
			 "SELECT sequence_number FROM sbq_receive('%s', 1, '10 s', 'receive_and_delete')",
			 queue);
	snprintf(send_sql, sizeof(send_sql), "SELECT sbq_send('%s', 'ping')", queue);
	snprintf(mon_sql, sizeof(mon_sql),
			 "SELECT 1 FROM pg_stat_activity WHERE pid = %d "
			 "AND state = 'active' AND wait_event_type = 'Extension'",
			 PQbackendPID(recv));

	commit_to_return = calloc(iterations, sizeof(double));
	ack_to_return = calloc(iterations, sizeof(double));

	for (i = 0; i < warmup + iterations; i++)
	{
		double		t_commit,
					t_ack = 0,
					t_row = 0;
		bool		ack_in = false,
					row_in = false;
		int			polls = 0;

		if (!PQsendQuery(recv, recv_sql))
			die(recv, "send receive");
		/* until the receiver sleeps in the receive */
		for (;;)
		{
			res = run(mon, mon_sql, PGRES_TUPLES_OK);
			if (PQntuples(res) == 1)
			{
				PQclear(res);
				break;
			}
			PQclear(res);
			if (++polls > 100000)
			{
				fprintf(stderr, "wakeup: the receiver never went to sleep\n");
				return 1;
			}
		}

		PQclear(run(send, "BEGIN", PGRES_COMMAND_OK));
		PQclear(run(send, send_sql, PGRES_TUPLES_OK));
		t_commit = now_ms();
		if (!PQsendQuery(send, "COMMIT"))
			die(send, "send COMMIT");

		while (!ack_in || !row_in)
		{
			struct pollfd fds[2];
			int			nfds = 0;
			int			k;

			if (!ack_in)
			{
				fds[nfds].fd = PQsocket(send);
				fds[nfds].events = POLLIN;
				nfds++;
			}
			if (!row_in)
			{
				fds[nfds].fd = PQsocket(recv);
				fds[nfds].events = POLLIN;
				nfds++;
			}
			if (poll(fds, nfds, 20000) <= 0)
			{
				fprintf(stderr, "wakeup: no answer within 20 s (%s)\n",
						errno ? strerror(errno) : "timeout");
				return 1;
			}
			for (k = 0; k < nfds; k++)
			{
				if (!(fds[k].revents & (POLLIN | POLLERR | POLLHUP)))
					continue;
				if (fds[k].fd == PQsocket(send) && !ack_in &&
					answer_done(send, PGRES_COMMAND_OK, -1))
				{
					t_ack = now_ms();
					ack_in = true;
				}
				else if (fds[k].fd == PQsocket(recv) && !row_in &&
						 answer_done(recv, PGRES_TUPLES_OK, 1))
				{
					t_row = now_ms();
					row_in = true;
				}
			}
		}
		if (i >= warmup)
		{
			commit_to_return[n] = t_row - t_commit;
			ack_to_return[n] = t_row - t_ack;
			n++;
		}
	}

	printf("wake-ups measured: %d (after %d warm-up)\n", n, warmup);
	report("commit->return", commit_to_return, n);
	report("ack->return", ack_to_return, n);

	PQfinish(recv);
	PQfinish(send);
	PQfinish(mon);
	return 0;
}
