/*-------------------------------------------------------------------------
 *
 * dist_route.c
 *	  The routing of a call to the node that holds its entity's shard group
 *	  (docs/scale-out.md, decision 3): SBQ_ROUTE's work (distributed.h), the
 *	  call sent as sbq_routed(key, function, arguments in their text forms),
 *	  which Citus delegates to that node inside the caller's transaction, and
 *	  sbq_routed itself, which runs the call there and returns its rows in
 *	  their text forms. Errors of a routed call name the node, not the
 *	  statements that carried it (they hold the arguments); what the node
 *	  logs of it is dist_log.c's.
 *
 * Owns: whether this backend is routing a call or running a routed one.
 * Locks: those of distributed.c, on the node that runs the call.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/dist_route.c
 *
 *-------------------------------------------------------------------------
 */

#include "postgres.h"

#include "miscadmin.h"
#include "access/htup_details.h"
#include "catalog/dependency.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/syscache.h"
#include "utils/tuplestore.h"

#include "compat.h"
#include "dist_int.h"
#include "distributed.h"
#include "storage.h"

PG_FUNCTION_INFO_V1(sbq_routed);

static bool sbq_in_routed = false;	/* inside sbq_routed: refuse, never route again */
static bool sbq_routing = false;	/* sending a call to sbq_routed: Citus delegates it */

/* Pin the text forms of values for another node: ISO dates, plain intervals. */
int
sbq_dist_pin_formats(void)
{
	int			level = NewGUCNestLevel();

	(void) set_config_option("datestyle", "ISO, MDY", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("intervalstyle", "postgres", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("bytea_output", "hex", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	return level;
}

static int	sbq_routed_settings(char **strs, int n);

/*
 * The caller's settings a routed call carries to the node that runs it, after
 * its arguments, as name and value: those that decide how long a call waits
 * for a lock, how it keeps its locks, and how its errors show values. Only
 * those the caller's session got beyond the server's own configuration (for
 * its database or role, from the client, or by SET): a server's
 * configuration is its own, and the node's holds on the node. The node sets
 * each for the call alone, where its own differs, with the caller's rights
 * (sbq_routed_settings).
 */
static const char *const sbq_carried[] = {
	"lock_timeout", "DateStyle", "IntervalStyle", "TimeZone",
	"sbqueue.memory_locks", "sbqueue.receive_poll_interval"
};

#define SBQ_NUM_CARRIED lengthof(sbq_carried)

/* their definitions, once looked up (a definition never moves) */
static struct config_generic *sbq_carried_defs[SBQ_NUM_CARRIED];

/* Whether this session's value of sbq_carried[i] is one a routed call carries. */
static bool
sbq_carried_here(int i)
{
	if (sbq_carried_defs[i] == NULL)
	{
		struct config_generic **vars;
		int			nvars;
		int			v;

		vars = sbq_guc_variables(&nvars);
		for (v = 0; v < nvars; v++)
			if (pg_strcasecmp(vars[v]->name, sbq_carried[i]) == 0 &&
				!(vars[v]->flags & GUC_CUSTOM_PLACEHOLDER))
				sbq_carried_defs[i] = vars[v];
		if (sbq_carried_defs[i] == NULL)
			return false;
	}
	return sbq_carried_defs[i]->source >= PGC_S_DATABASE;
}

/*
 * Add the names and values of the settings this session's routed calls carry
 * to elems after its first n (room for 2 * SBQ_NUM_CARRIED more): how many
 * there are then.
 */
static int
sbq_dist_add_carried(Datum *elems, int n)
{
	int			i;

	for (i = 0; i < (int) SBQ_NUM_CARRIED; i++)
	{
		const char *v;

		if (!sbq_carried_here(i) || (v = GetConfigOption(sbq_carried[i], true, false)) == NULL)
			continue;
		elems[n++] = CStringGetTextDatum(sbq_carried[i]);
		elems[n++] = CStringGetTextDatum(v);
	}
	return n;
}

/*
 * sbq_dist_group_what
 *		The "what" argument of sbq_routed_group() for a view read or a
 *		maintenance pass of this session on another node: the name of what it
 *		asks for, or, when the session has settings a routed call carries,
 *		the text form of a text[] of that name and the settings' names and
 *		values (no name starts with "{"; a node whose library predates this
 *		refuses it as an unknown view).
 */
char *
sbq_dist_group_what(const char *what)
{
	Datum		elems[1 + 2 * SBQ_NUM_CARRIED];
	int			n;
	Oid			out;
	bool		varlena;

	elems[0] = CStringGetTextDatum(what);
	n = sbq_dist_add_carried(elems, 1);
	if (n == 1)
		return pstrdup(what);
	getTypeOutputInfo(TEXTARRAYOID, &out, &varlena);
	return OidOutputFunctionCall(out, PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false,
																	  TYPALIGN_INT)));
}

/*
 * sbq_dist_group_settings
 *		On the node: the name of what a call of sbq_routed_group() asks for,
 *		from its "what" argument (sbq_dist_group_what), with the settings it
 *		carries set at a new GUC nest level (*level; 0 when it carries none),
 *		which the caller ends.
 */
char *
sbq_dist_group_settings(char *what, int *level)
{
	Oid			in;
	Oid			ioparam;
	char	  **strs;
	int			n;

	*level = 0;
	if (what[0] != '{')
		return what;
	getTypeInputInfo(TEXTARRAYOID, &in, &ioparam);
	strs = sbq_dist_strings(OidInputFunctionCall(in, what, ioparam, -1), &n);
	if (n < 1 || strs[0] == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a call of a shard group names what it asks for first")));
	*level = sbq_routed_settings(strs + 1, n - 1);
	return strs[0];
}

/*
 * The text forms of a call's arguments, then the settings it carries, as a
 * text[] (NULL elements for NULLs).
 */
static Datum
sbq_dist_args(FunctionCallInfo fcinfo, Form_pg_proc proc)
{
	int			nargs = fcinfo->nargs;
	int			nelems = nargs;
	Datum	   *elems = palloc0(sizeof(Datum) * (nargs + 2 * SBQ_NUM_CARRIED));
	bool	   *nulls = palloc0(sizeof(bool) * (nargs + 2 * SBQ_NUM_CARRIED));
	int			dims[1];
	int			lbs[1] = {1};
	int			level;
	int			i;

	/* the caller's settings, before the formats are pinned */
	nelems = sbq_dist_add_carried(elems, nelems);
	level = sbq_dist_pin_formats();

	for (i = 0; i < nargs; i++)
	{
		Oid			out;
		bool		varlena;

		if (fcinfo->args[i].isnull)
		{
			nulls[i] = true;
			continue;
		}
		getTypeOutputInfo(proc->proargtypes.values[i], &out, &varlena);
		elems[i] = CStringGetTextDatum(OidOutputFunctionCall(out, fcinfo->args[i].value));
	}
	AtEOXact_GUC(true, level);
	dims[0] = nelems;
	if (nelems == 0)
		return PointerGetDatum(construct_empty_array(TEXTOID));
	return PointerGetDatum(construct_md_array(elems, nulls, 1, dims, lbs, TEXTOID, -1,
											  false, TYPALIGN_INT));
}

/*
 * sbq_routed_settings
 *		On the node: set the settings a routed call carries (pairs of name
 *		and value in strs, n strings), each one the node's own value differs
 *		from, at a new GUC nest level, which the caller ends. Only those of
 *		sbq_carried, and each with the rights of the role that runs the call.
 */
static int
sbq_routed_settings(char **strs, int n)
{
	int			level = NewGUCNestLevel();
	int			i;

	if (n % 2 != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the settings of a routed call come in pairs of name and value")));
	for (i = 0; i < n; i += 2)
	{
		const char *cur;
		int			k;

		for (k = 0; k < (int) SBQ_NUM_CARRIED; k++)
			if (strs[i] != NULL && strcmp(strs[i], sbq_carried[k]) == 0)
				break;
		if (k == (int) SBQ_NUM_CARRIED)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("a routed call does not carry the setting \"%s\"",
							strs[i] != NULL ? strs[i] : "")));
		if (strs[i + 1] == NULL)
			continue;
		cur = GetConfigOption(sbq_carried[k], true, false);
		if (cur == NULL || strcmp(cur, strs[i + 1]) == 0)
			continue;
		(void) set_config_option(sbq_carried[k], strs[i + 1],
								 superuser() ? PGC_SUSET : PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	}
	return level;
}

/* A value of type typid from its text form, in the current memory context. */
static Datum
sbq_dist_input(Oid typid, char *str, int32 typmod)
{
	Oid			in;
	Oid			ioparam;

	getTypeInputInfo(typid, &in, &ioparam);
	return OidInputFunctionCall(in, str, ioparam, typmod);
}

/* The elements of a text[] as C strings (NULL for NULL), in the current context. */
char	  **
sbq_dist_strings(Datum arr, int *n)
{
	Datum	   *elems;
	bool	   *nulls;
	char	  **out;
	int			i;

	deconstruct_array(DatumGetArrayTypeP(arr), TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, n);
	out = palloc(sizeof(char *) * Max(*n, 1));
	for (i = 0; i < *n; i++)
		out[i] = nulls[i] ? NULL : TextDatumGetCString(elems[i]);
	return out;
}

/*
 * sbq_dist_hide_route
 *		An error of a routed call, rid of how it was routed: the statements
 *		that carried it (the arguments in their text forms, message bodies
 *		included) give way to the node it ran on. The lines of the call's own
 *		context, before them, stay.
 */
void
sbq_dist_hide_route(ErrorData *edata)
{
	StringInfoData buf;
	const char *ctx = edata->context;
	const char *ours;
	const char *node;

	edata->internalquery = NULL;
	edata->internalpos = 0;
	if (ctx == NULL)
		return;
	initStringInfo(&buf);
	ours = strstr(ctx, "SQL statement \"SELECT * FROM ");
	if (ours == NULL)
		ours = strstr(ctx, "SQL statement \"SELECT r FROM ");
	if (ours != NULL)
		appendBinaryStringInfo(&buf, ctx, ours - ctx);
	else
		appendStringInfoString(&buf, ctx);
	node = strstr(ctx, "while executing command on ");
	if (node != NULL)
	{
		const char *end = strchr(node, '\n');
		const char *host = node + strlen("while executing command on ");

		if (buf.len > 0 && buf.data[buf.len - 1] != '\n')
			appendStringInfoChar(&buf, '\n');
		appendStringInfoString(&buf, "sbqueue call routed to ");
		appendBinaryStringInfo(&buf, host, end != NULL ? end - host : (int) strlen(host));
	}
	while (buf.len > 0 && buf.data[buf.len - 1] == '\n')
		buf.data[--buf.len] = '\0';
	edata->context = buf.len > 0 ? buf.data : NULL;
}

/* A row from the node must have the columns of the result here (the same version). */
void
sbq_dist_check_width(int got, int want)
{
	if (got != want)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the node of the entity returned %d columns where %d were expected", got,
						want),
				 errhint("Every node must run the same version of sbqueue.")));
}

/* The refusal of a call for an entity key whose group this node does not hold. */
void
sbq_dist_refuse_key(int32 key)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("entity key %d is not on this node", key),
			 errhint("Make the call again: it goes where the shard is now.")));
}

/* the tries of a routing statement that Citus ran here instead of delegating it */
#define SBQ_ROUTE_TRIES 4

/* set by sbq_dist_local_run(): the routing statement ran here, not on the node */
static bool sbq_route_missed = false;

/* Run a routing statement once; an error comes back without its text. */
static void
sbq_dist_run_routing_once(const char *sql, MemoryContext cxt)
{
	sbq_route_missed = false;
	sbq_routing = true;
	PG_TRY();
	{
		if (SPI_execute(sql, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not route an sbqueue call");
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		sbq_routing = false;
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		sbq_dist_hide_route(edata);
		ReThrowError(edata);
	}
	PG_END_TRY();
	sbq_routing = false;
}

/*
 * sbq_dist_run_routing
 *		Run a routing statement (SPI connected), which Citus delegates to the
 *		node of its key; an error comes back without the statement and its
 *		arguments, in memory context cxt.
 *
 *		Citus may run it here instead (sbq_dist_local_run), which it then
 *		does with no effect: a backend whose cache of the tables' shards was
 *		built while a split committed holds the split shard with no placement
 *		("could not find any shard placements") and keeps that entry until
 *		an invalidation of the tables comes, which the split's own has come
 *		before. So the tables' relcache entries are invalidated (here now,
 *		in the other backends at commit), Citus builds its cache again, and
 *		the statement runs again, a few times; then the call is refused.
 */
void
sbq_dist_run_routing(const char *sql, MemoryContext cxt)
{
	int			tries = 0;

	for (;;)
	{
		sbq_dist_run_routing_once(sql, cxt);
		if (!sbq_route_missed)
			return;
		if (++tries >= SBQ_ROUTE_TRIES)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("Citus did not send the call to the node of its entity"),
					 errdetail("Citus does not delegate a function call made while it plans a "
							   "distributed query's subqueries, and a session where such planning "
							   "failed keeps that state."),
					 errhint("Make the call on a new connection, outside subqueries and CTEs of "
							 "queries on distributed tables.")));
		SPI_freetuptable(SPI_tuptable);
		sbq_dist_forget_shards();
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 10L * tries, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * sbq_dist_local_run
 *		In a function Citus runs for a routing statement: whether the
 *		statement was sent from this backend and Citus ran it here instead of
 *		delegating it; the function then returns no row and does nothing, and
 *		sbq_dist_run_routing() tries again.
 */
bool
sbq_dist_local_run(void)
{
	if (sbq_routing)
		sbq_route_missed = true;
	return sbq_routing;
}

/*
 * sbq_dist_call_remote
 *		Run the call on the node that holds the group of key: through
 *		sbq_routed(key, the function, its arguments), which Citus delegates
 *		there; the rows it returns are this call's result.
 */
static Datum
sbq_dist_call_remote(FunctionCallInfo fcinfo, int32 key)
{
	Oid			fnoid = fcinfo->flinfo->fn_oid;
	HeapTuple	proctup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fnoid));
	Form_pg_proc proc;
	MemoryContext callcxt = CurrentMemoryContext;
	StringInfoData sql;
	Datum		args;
	TupleDesc	tupdesc = NULL;
	Oid			rettype;
	TypeFuncClass cls;
	Datum		result = (Datum) 0;
	int			level;
	uint64		r;

	if (!HeapTupleIsValid(proctup))
		elog(ERROR, "cache lookup failed for function %u", fnoid);
	proc = (Form_pg_proc) GETSTRUCT(proctup);
	args = sbq_dist_args(fcinfo, proc);

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT r FROM %s.sbq_routed(%d, %s, %s::pg_catalog.text[]) r",
					 quote_identifier(get_namespace_name(proc->pronamespace)), key,
					 quote_literal_cstr(format_procedure_qualified(fnoid)),
					 quote_literal_cstr(OidOutputFunctionCall(F_ARRAY_OUT, args)));
	ReleaseSysCache(proctup);

	cls = get_call_result_type(fcinfo, &rettype, &tupdesc);
	if (fcinfo->flinfo->fn_retset)
		InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	sbq_dist_run_routing(sql.data, callcxt);

	/* the rows in the text forms the node pinned */
	level = sbq_dist_pin_formats();
	for (r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		Datum		row = SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull);
		MemoryContext old;
		char	  **values;
		int			n;

		if (isnull)
			continue;
		old = MemoryContextSwitchTo(callcxt);
		values = sbq_dist_strings(row, &n);
		if (fcinfo->flinfo->fn_retset)
		{
			ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
			AttInMetadata *meta = TupleDescGetAttInMetadata(rsinfo->setDesc);

			sbq_dist_check_width(n, rsinfo->setDesc->natts);
			tuplestore_puttuple(rsinfo->setResult, BuildTupleFromCStrings(meta, values));
		}
		else if (cls == TYPEFUNC_COMPOSITE)
		{
			sbq_dist_check_width(n, tupdesc->natts);
			result = HeapTupleGetDatum(BuildTupleFromCStrings(TupleDescGetAttInMetadata(tupdesc),
															  values));
		}
		else if (rettype != VOIDOID && n > 0 && values[0] != NULL)
			result = sbq_dist_input(rettype, values[0], -1);
		else if (rettype != VOIDOID)
			fcinfo->isnull = true;
		MemoryContextSwitchTo(old);
	}
	AtEOXact_GUC(true, level);
	if (!fcinfo->flinfo->fn_retset && SPI_processed == 0 && rettype != VOIDOID)
		fcinfo->isnull = true;
	SPI_finish();
	return result;
}

/*
 * sbq_dist_route
 *		SBQ_ROUTE's work: the group of the entity in argument 0 becomes the
 *		call's when this node holds it (false: run here); otherwise the call
 *		runs on the node that does, and *result is its result (true).
 */
bool
sbq_dist_route(FunctionCallInfo fcinfo, Datum *result)
{
	text	   *name;
	int32		key;
	int64		id;
	int			where;

	/* the group of a call running (this one from inside it) stays its own */
	sbq_storage_refuse_nested();
	sbq_dist_leave();
	/* a NULL address: the function's own check refuses it */
	if (fcinfo->nargs < 1 || fcinfo->args[0].isnull)
		return false;
	name = DatumGetTextPP(fcinfo->args[0].value);
	key = sbq_entity_key(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
	where = sbq_dist_key_group(key, &id);
	if (where < 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("no shard of sbq.queues holds entity key %d", key)));
	if (where > 0 && sbq_dist_enter(id, key, true))
		return false;
	if (sbq_in_routed)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the entity \"%s\" is not on this node", text_to_cstring(name)),
				 errdetail("Its shard moved while the call was on its way."),
				 errhint("Make the call again: it goes where the shard is now.")));
	*result = sbq_dist_call_remote(fcinfo, key);
	return true;
}

/*
 * The call a routed call names: fn, a function of sbqueue's (regprocedure
 * text), and its arguments' text forms: the SQL that runs it, and the
 * arguments as values, NULLs ('n') and types, for SPI.
 */
typedef struct SbqRoutedCall
{
	StringInfoData sql;
	int			nargs;
	Oid		   *argtypes;
	Datum	   *values;
	char	   *nulls;
	char	  **settings;		/* the caller's, as name and value */
	int			nsettings;
} SbqRoutedCall;

static void
sbq_routed_call(FunctionCallInfo fcinfo, const char *fn, SbqRoutedCall *call)
{
	Oid			fnoid = DatumGetObjectId(DirectFunctionCall1(regprocedurein, CStringGetDatum(fn)));
	HeapTuple	proctup;
	Form_pg_proc proc;
	char	  **strs;
	int			n = 0;
	int			level;
	int			i;

	if (getExtensionOfObject(ProcedureRelationId, fnoid) != get_extension_oid("sbqueue", false) ||
		fnoid == fcinfo->flinfo->fn_oid)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is not a function sbqueue routes", fn)));
	proctup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fnoid));
	if (!HeapTupleIsValid(proctup))
		elog(ERROR, "cache lookup failed for function %u", fnoid);
	proc = (Form_pg_proc) GETSTRUCT(proctup);

	strs = PG_ARGISNULL(2) ? NULL : sbq_dist_strings(PG_GETARG_DATUM(2), &n);
	if (strs == NULL || n < proc->pronargs)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s takes %d arguments", fn, proc->pronargs)));
	/* what follows the arguments: the caller's settings */
	call->settings = strs + proc->pronargs;
	call->nsettings = n - proc->pronargs;
	n = proc->pronargs;
	call->nargs = n;
	call->values = palloc0(sizeof(Datum) * Max(n, 1));
	call->nulls = palloc(n + 1);
	call->argtypes = palloc(sizeof(Oid) * Max(n, 1));
	initStringInfo(&call->sql);
	appendStringInfo(&call->sql, "SELECT * FROM %s.%s(",
					 quote_identifier(get_namespace_name(proc->pronamespace)),
					 quote_identifier(NameStr(proc->proname)));
	/* the arguments in the text forms the caller pinned */
	level = sbq_dist_pin_formats();
	for (i = 0; i < n; i++)
	{
		call->argtypes[i] = proc->proargtypes.values[i];
		call->nulls[i] = strs[i] == NULL ? 'n' : ' ';
		if (strs[i] != NULL)
			call->values[i] = sbq_dist_input(call->argtypes[i], strs[i], -1);
		appendStringInfo(&call->sql, "%s$%d", i > 0 ? ", " : "", i + 1);
	}
	AtEOXact_GUC(true, level);
	appendStringInfoChar(&call->sql, ')');
	call->nulls[n] = '\0';
	ReleaseSysCache(proctup);
}

/* The rows SPI holds, each as a text[] of its columns' text forms, into rsinfo. */
void
sbq_dist_put_text_rows(ReturnSetInfo *rsinfo)
{
	int			level = sbq_dist_pin_formats();
	uint64		r;

	for (r = 0; r < SPI_processed; r++)
	{
		int			ncols = SPI_tuptable->tupdesc->natts;
		Datum	   *cols = palloc0(sizeof(Datum) * Max(ncols, 1));
		bool	   *colnulls = palloc0(sizeof(bool) * Max(ncols, 1));
		int			dims[1];
		int			lbs[1] = {1};
		Datum		row;
		bool		rownull = false;
		int			c;

		/* a function returning void: no row */
		if (ncols == 1 && SPI_gettypeid(SPI_tuptable->tupdesc, 1) == VOIDOID)
			break;
		for (c = 0; c < ncols; c++)
		{
			char	   *v = SPI_getvalue(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, c + 1);

			colnulls[c] = v == NULL;
			if (v != NULL)
				cols[c] = CStringGetTextDatum(v);
		}
		dims[0] = ncols;
		row = PointerGetDatum(construct_md_array(cols, colnulls, 1, dims, lbs, TEXTOID, -1,
												 false, TYPALIGN_INT));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &row, &rownull);
	}
	AtEOXact_GUC(true, level);
}

/*
 * sbq_routed(key integer, fn text, args text[]) RETURNS SETOF text[]
 *		A routed call, on the node Citus sent it to: the function of sbqueue
 *		named by fn (with its argument types) called with the arguments in
 *		their text forms, under the caller's settings that follow them in
 *		args, and its result rows in their text forms. Refused (55000) when
 *		this node does not hold the key's group.
 */
Datum
sbq_routed(PG_FUNCTION_ARGS)
{
	int32		key;
	char	   *fn;
	SbqRoutedCall call;
	int64		id;
	int			level;
	bool		saved = sbq_in_routed;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("sbq_routed takes a key, a function and its arguments, none NULL")));
	key = PG_GETARG_INT32(0);
	fn = text_to_cstring(PG_GETARG_TEXT_PP(1));
	/* sent from this backend and not delegated: Citus ran it where it was made */
	if (sbq_dist_local_run())
	{
		InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
		return (Datum) 0;
	}
	sbq_routed_note_running(fcinfo->flinfo->fn_oid);
	/*
	 * The call first, which takes no lock: then whether this node holds the
	 * key's group, by what this backend knows. The routed function itself
	 * locks the group and looks again (SBQ_ROUTE), and refuses as this does
	 * if the group is not here; so the lock is only ever taken for a call
	 * the caller may make, on the group of its own entity.
	 */
	sbq_routed_call(fcinfo, fn, &call);
	if (call.nargs > 0 && call.argtypes[0] == TEXTOID && call.nulls[0] != 'n')
	{
		text	   *entity = DatumGetTextPP(call.values[0]);

		if (sbq_entity_key(VARDATA_ANY(entity), VARSIZE_ANY_EXHDR(entity)) != key)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("entity key %d is not the key of \"%s\"", key,
							text_to_cstring(entity))));
	}
	if (!sbq_dist_active() || sbq_dist_key_group(key, &id) <= 0)
		sbq_dist_refuse_key(key);
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* the call runs with the caller's settings; an error ends them with it */
	level = sbq_routed_settings(call.settings, call.nsettings);
	sbq_in_routed = true;
	PG_TRY();
	{
		if (SPI_execute_with_args(call.sql.data, call.nargs, call.argtypes, call.values,
								  call.nulls, false, 0) < 0)
			elog(ERROR, "could not run the routed call %s", fn);
	}
	PG_FINALLY();
	{
		sbq_in_routed = saved;
	}
	PG_END_TRY();
	sbq_dist_put_text_rows((ReturnSetInfo *) fcinfo->resultinfo);
	AtEOXact_GUC(true, level);
	SPI_finish();
	return (Datum) 0;
}
