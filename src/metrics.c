/*-------------------------------------------------------------------------
 *
 * metrics.c
 *	  sbq_metrics_text(): the rows of the view sbq_metrics in Prometheus's
 *	  text exposition format, for an HTTP endpoint that runs one query.
 *
 * The view does the work (sbqueue.sql): this file only reads it, as the
 * caller, so a role sees the metrics of the entities it holds a right on,
 * as it does in the view, and formats them: per family (metric) a HELP and
 * a TYPE line, then its samples, each labelled with the database, the queue
 * (or topic, for sbq_topic_*) and the state. Label values are escaped as the
 * format wants (backslash, double quote, newline).
 *
 * The read runs with jit off, whatever the caller's setting. The planner's
 * estimate for the view grows with the messages it counts (a correlated
 * count per queue), so with jit on as PostgreSQL ships it, past about 100,000
 * messages in the database every read would compile the view's expressions
 * to machine code first, and pay for it again on each scrape, since nothing
 * keeps the code between queries. Compiling paid for itself only at about ten
 * million messages, where the read takes seconds either way (BENCHMARKS.md,
 * "Reading the metrics without compiling them").
 *
 * Owns nothing; takes no locks of its own.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/metrics.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/transam.h"
#include "catalog/dependency.h"
#include "catalog/pg_class.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/plancache.h"

#include "compat.h"
#include "sbqueue.h"

PG_FUNCTION_INFO_V1(sbq_metrics_text_sql);

/* Append a label value, escaped as the exposition format wants. */
static void
sbq_append_label(StringInfo buf, const char *name, const char *value)
{
	const char *p;

	appendStringInfo(buf, "%s=\"", name);
	for (p = value; *p; p++)
	{
		if (*p == '\\')
			appendStringInfoString(buf, "\\\\");
		else if (*p == '"')
			appendStringInfoString(buf, "\\\"");
		else if (*p == '\n')
			appendStringInfoString(buf, "\\n");
		else
			appendStringInfoChar(buf, *p);
	}
	appendStringInfoChar(buf, '"');
}

/*
 * A sample's value, whatever extra_float_digits says: a whole number in full
 * (counters must not round), else to the microsecond (ages and durations in
 * seconds); infinities as +Inf / -Inf.
 */
static void
sbq_append_value(StringInfo buf, float8 v)
{
	if (isnan(v))
		appendStringInfoString(buf, "NaN");
	else if (isinf(v))
		appendStringInfoString(buf, v > 0 ? "+Inf" : "-Inf");
	else if (v == floor(v) && fabs(v) < 9.0e15)
		appendStringInfo(buf, INT64_FORMAT, (int64) v);
	else
		appendStringInfo(buf, "%.6f", v);
}

/*
 * sbq_metrics_plan
 *		The plan of the read of sbq_metrics, made sure to read sbqueue's own
 *		view: the query names it by schema and name, and the schema is the
 *		database owner's (public, say), who could rename it and put a view of
 *		their own in its place between the look-up of the name and the parse
 *		(a caller's cached name is what such a swap needs). So the view is
 *		found by its schema's OID and locked, and the parsed query must read
 *		only it and what is sbqueue's or the system's; anything else is an
 *		error before anything runs. Called connected to SPI.
 */
static SPIPlanPtr
sbq_metrics_plan(Oid schema)
{
	Oid			ext = get_extension_oid("sbqueue", false);
	Oid			view = get_relname_relid("sbq_metrics", schema);
	char	   *view_schema;
	StringInfoData query;
	SPIPlanPtr	plan;
	bool		found = false;
	ListCell   *lc;

	if (!OidIsValid(view) || getExtensionOfObject(RelationRelationId, view) != ext)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("sbq_metrics_text() finds no view sbq_metrics of sbqueue beside it")));
	LockRelationOid(view, AccessShareLock);
	view_schema = get_namespace_name(get_rel_namespace(view));
	if (view_schema == NULL)
		elog(ERROR, "sbq_metrics_text: the schema of sbq_metrics is gone");
	initStringInfo(&query);
	appendStringInfo(&query,
					 "SELECT metric, queue, state, value, type, help FROM %s.sbq_metrics "
					 "ORDER BY metric COLLATE pg_catalog.\"C\", queue COLLATE pg_catalog.\"C\", "
					 "state COLLATE pg_catalog.\"C\"",
					 quote_identifier(view_schema));
	plan = SPI_prepare(query.data, 0, NULL);
	if (plan == NULL)
		elog(ERROR, "sbq_metrics_text: preparing the read of sbq_metrics failed");
	foreach(lc, SPI_plan_get_plan_sources(plan))
	{
		CachedPlanSource *source = (CachedPlanSource *) lfirst(lc);
		ListCell   *rc;

		foreach(rc, source->relationOids)
		{
			Oid			rel = lfirst_oid(rc);

			if (rel == view)
				found = true;
			else if (rel >= FirstNormalObjectId &&
					 getExtensionOfObject(RelationRelationId, rel) != ext)
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("sbq_metrics_text() would read \"%s\", which is not sbqueue's",
								get_rel_name(rel) ? get_rel_name(rel) : "?"),
						 errdetail("A schema was renamed or an object put in its place while it ran.")));
		}
	}
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("sbq_metrics_text() would not read sbqueue's view sbq_metrics"),
				 errdetail("A schema was renamed or an object put in its place while it ran.")));
	return plan;
}

/*
 * sbq_metrics_text_sql
 *		sbq_metrics_text(): the view sbq_metrics (of the schema this function
 *		is in) as Prometheus text, families in name order.
 */
Datum
sbq_metrics_text_sql(PG_FUNCTION_ARGS)
{
	Oid			schema = get_func_namespace(fcinfo->flinfo->fn_oid);
	char	   *database = get_database_name(MyDatabaseId);
	StringInfoData out;
	char	   *family = NULL;
	uint64		i;
	text	   *result;
	int			level;

	if (database == NULL)
		elog(ERROR, "sbq_metrics_text: its database is gone");
	/* no compilation for one read (see the header); an error restores it too */
	level = NewGUCNestLevel();
	(void) set_config_option("jit", "off", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
	/* the text is made in the caller's context (a StringInfo grows where it began) */
	initStringInfo(&out);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_plan(sbq_metrics_plan(schema), NULL, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "sbq_metrics_text: reading sbq_metrics failed");
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *metric = SPI_getvalue(tup, desc, 1);
		char	   *queue = SPI_getvalue(tup, desc, 2);
		char	   *state = SPI_getvalue(tup, desc, 3);
		bool		isnull;
		Datum		value = SPI_getbinval(tup, desc, 4, &isnull);

		CHECK_FOR_INTERRUPTS();
		if (metric == NULL || isnull)
			continue;
		if (family == NULL || strcmp(family, metric) != 0)
		{
			char	   *type = SPI_getvalue(tup, desc, 5);
			char	   *help = SPI_getvalue(tup, desc, 6);

			appendStringInfo(&out, "# HELP %s %s\n# TYPE %s %s\n", metric,
							 help ? help : "", metric, type ? type : "untyped");
			family = metric;
		}
		appendStringInfo(&out, "%s{", metric);
		sbq_append_label(&out, "database", database);
		if (queue != NULL)
		{
			appendStringInfoChar(&out, ',');
			sbq_append_label(&out, strncmp(metric, "sbq_topic_", 10) == 0 ? "topic" : "queue",
							 queue);
		}
		if (state != NULL)
		{
			appendStringInfoChar(&out, ',');
			sbq_append_label(&out, "state", state);
		}
		appendStringInfoString(&out, "} ");
		sbq_append_value(&out, DatumGetFloat8(value));
		appendStringInfoChar(&out, '\n');
	}
	SPI_finish();
	AtEOXact_GUC(true, level);
	result = cstring_to_text_with_len(out.data, out.len);
	PG_RETURN_TEXT_P(result);
}
