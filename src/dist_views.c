/*-------------------------------------------------------------------------
 *
 * dist_views.c
 *	  What concerns every shard group rather than one entity, on a Citus
 *	  cluster (docs/scale-out.md, decision 7): the views and sbq_maintain().
 *
 *	  Each view of sbqueue (sbq_queues, sbq_queue_stats, ...) is defined as
 *	  the node view sbq.node_<name> is, on one server. Once the tables are distributed,
 *	  the public view gathers instead: sbq.cluster_view(name) runs the node
 *	  view against the shards of every shard group, here for the groups this
 *	  node holds, and through sbq_routed_group(key, name) on the node of each
 *	  other one (Citus delegates it by a key of the group's range, in the
 *	  caller's transaction and as the caller). sbq_maintain() called by a
 *	  client makes a pass over every group the same way; a maintenance
 *	  worker's pass stays on its own node's groups.
 *
 *	  A node view runs from its definition, with every sbq.<table> named as
 *	  the group's shard, as the owner of the tables (the caller may not read
 *	  the shards; through the view it reads them as the view's owner), and
 *	  with the caller's role in every pg_has_role(): each role sees what its
 *	  rights let it see, as on one server.
 *
 * Owns nothing. Locks: those of entering a group and of a storage section.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/dist_views.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "parser/parse_func.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/tuplestore.h"

#include "compat.h"
#include "dist_int.h"
#include "distributed.h"
#include "sbqueue.h"
#include "storage.h"
#include "storage_core.h"

PG_FUNCTION_INFO_V1(sbq_cluster_view);
PG_FUNCTION_INFO_V1(sbq_routed_group);
PG_FUNCTION_INFO_V1(sbq_define_views);

/* The schema of the extension (its public functions and views). */
static Oid
sbq_ext_schema(void)
{
	Oid			extoid;
	Oid			owner;
	Oid			nsp;

	if (!sbq_find_extension(&extoid, &owner, &nsp))
		elog(ERROR, "sbqueue is not installed in this database");
	return nsp;
}

/* The views that gather: sbq_<name> is sbq.node_<name> of every group. */
static const char *const sbq_view_names[] = {
	"queues", "queue_stats", "rights", "topics", "subscriptions", "rules", "topic_stats"
};

/* what sbq_routed_group() runs for sbq_maintain() */
#define SBQ_GROUP_MAINTAIN "maintain"
#define SBQ_MAINTAIN_FIELDS 13

static bool
sbq_view_known(const char *what)
{
	int			i;

	for (i = 0; i < (int) lengthof(sbq_view_names); i++)
		if (strcmp(what, sbq_view_names[i]) == 0)
			return true;
	return false;
}

static Oid
sbq_node_view(const char *what, bool missing_ok)
{
	char		name[NAMEDATALEN];
	Oid			view;

	snprintf(name, sizeof(name), "node_%s", what);
	view = get_relname_relid(name, get_namespace_oid("sbq", false));
	if (!OidIsValid(view) && !missing_ok)
		elog(ERROR, "sbqueue: view sbq.%s does not exist", name);
	return view;
}

static bool
sbq_view_ident_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		c == '_' || c == '$' || c == '.';
}

/*
 * Print and read the node views' definitions with every name outside
 * pg_catalog qualified and none quoted, whatever the session's settings (in
 * the caller's GUC nest level).
 */
static void
sbq_view_pin_names(void)
{
	(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("quote_all_identifiers", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
}

/*
 * sbq_view_named_rights
 *		The SQL of a node view for a group whose rights keep their roles by
 *		name (rights.c): each shard of sbq.rights read as its rows with the
 *		role of that name on this node, without those whose role has none.
 */
static const char *
sbq_view_named_rights(const char *sql)
{
	StringInfoData buf;
	const char *p = sql;

	initStringInfo(&buf);
	while (*p)
	{
		size_t		digits;

		if (strncmp(p, "sbq.rights_", 11) == 0 && (p == sql || !sbq_view_ident_char(p[-1])) &&
			(digits = strspn(p + 11, "0123456789")) > 0 && !sbq_view_ident_char(p[11 + digits]))
		{
			appendStringInfo(&buf, "(SELECT n.queue_id, x.role, n.rights FROM %.*s n"
							 " CROSS JOIN LATERAL (SELECT " SBQ_RIGHTS_ROLE_OF("n")
							 "::pg_catalog.regrole AS role) x WHERE x.role IS NOT NULL)",
							 (int) (11 + digits), p);
			p += 11 + digits;
		}
		else
			appendStringInfoChar(&buf, *p++);
	}
	return buf.data;
}

/*
 * sbq_view_exec
 *		Run node view "what" for the current group (or this node's own
 *		tables when none), as its caller would see it through the view: in a
 *		storage section, whose SPI_tuptable holds the rows afterwards.
 */
static void
sbq_view_exec(const char *what)
{
	int			level = NewGUCNestLevel();
	char	   *def;
	const char *sql;
	const char *p;
	StringInfoData buf;
	int			replaced = 0;

	/* the shards visible to its catalog reads (Citus hides them from a client's) */
	sbq_view_pin_names();
	(void) set_config_option("citus.override_table_visibility", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	def = TextDatumGetCString(DirectFunctionCall1(pg_get_viewdef,
												  ObjectIdGetDatum(sbq_node_view(what, false))));
	sql = sbq_dist_in_group() ? sbq_dist_sql(def) : def;
	if (sbq_rights_by_name())
		sql = sbq_view_named_rights(sql);

	/* the caller's rights, not those of the owner the section runs as */
	initStringInfo(&buf);
	p = sql;
	while (*p)
	{
		if (strncmp(p, "pg_has_role(", 12) == 0 && (p == sql || !sbq_view_ident_char(p[-1])))
		{
			appendStringInfo(&buf, "pg_has_role(%u::pg_catalog.oid, ", sbq_storage_caller());
			p += 12;
			replaced++;
		}
		else
			appendStringInfoChar(&buf, *p++);
	}
	/* every node view judges rights: without them it would show all, refuse */
	if (replaced == 0)
		elog(ERROR, "sbqueue: the definition of view sbq.node_%s has no rights check", what);
	if (SPI_execute(buf.data, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "sbqueue: could not read view sbq.node_%s", what);
	AtEOXact_GUC(true, level);
}

/* The rows SPI holds (of node view "what") into rsinfo, which has its columns. */
static void
sbq_view_put_rows(ReturnSetInfo *rsinfo)
{
	TupleDesc	got = SPI_tuptable->tupdesc;
	TupleDesc	want = rsinfo->setDesc;
	uint64		r;
	int			i;

	for (i = 0; i < Max(want->natts, got->natts); i++)
		if (i >= want->natts || i >= got->natts ||
			TupleDescAttr(got, i)->atttypid != TupleDescAttr(want, i)->atttypid)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("the columns asked for are not those of the node view"),
					 errdetail("Column %d differs.", i + 1)));
	for (r = 0; r < SPI_processed; r++)
		tuplestore_puttuple(rsinfo->setResult, SPI_tuptable->vals[r]);
}

/* What a maintenance pass did, as text forms, and back (sbq_routed_group's row). */
static Datum
sbq_maintain_row(const SbqMaintainResult *r)
{
	int64		v[SBQ_MAINTAIN_FIELDS - 2] = {
		r->queues, r->activated, r->released, r->dead_lettered, r->expired_dead,
		r->expired_dropped, r->forgotten, r->dead_letters_removed, r->dead_letters_forwarded,
		r->dead_letters_kept, r->sessions_expired
	};
	Datum		elems[SBQ_MAINTAIN_FIELDS];
	int			i;

	for (i = 0; i < SBQ_MAINTAIN_FIELDS - 2; i++)
		elems[i] = CStringGetTextDatum(psprintf(INT64_FORMAT, v[i]));
	elems[i++] = CStringGetTextDatum(r->more ? "t" : "f");
	elems[i] = CStringGetTextDatum(r->skipped ? "t" : "f");
	return PointerGetDatum(construct_array(elems, SBQ_MAINTAIN_FIELDS, TEXTOID, -1, false,
										   TYPALIGN_INT));
}

static void
sbq_maintain_add_row(char **s, int n, SbqMaintainResult *acc)
{
	int64	   *v[SBQ_MAINTAIN_FIELDS - 2] = {
		&acc->queues, &acc->activated, &acc->released, &acc->dead_lettered, &acc->expired_dead,
		&acc->expired_dropped, &acc->forgotten, &acc->dead_letters_removed,
		&acc->dead_letters_forwarded, &acc->dead_letters_kept, &acc->sessions_expired
	};
	int			i;

	sbq_dist_check_width(n, SBQ_MAINTAIN_FIELDS);
	for (i = 0; i < SBQ_MAINTAIN_FIELDS - 2; i++)
		*v[i] += s[i] != NULL ? pg_strtoint64(s[i]) : 0;
	acc->more |= s[i] != NULL && s[i][0] == 't';
	i++;
	acc->skipped |= s[i] != NULL && s[i][0] == 't';
}

/*
 * sbq_group_run
 *		Node view "what" for group id (0: this node's own tables), or a
 *		maintenance pass over it (acc): the rows into rsinfo, as they are or
 *		(as_text) as the text[] of a routed call. False when this node does
 *		not hold the group (any more).
 */
static bool
sbq_group_run(int64 id, const char *what, ReturnSetInfo *rsinfo, bool as_text,
			  SbqMaintainResult *acc)
{
	if (id != 0 && !sbq_dist_enter_group(id))
		return false;
	sbq_storage_begin();
	if (acc != NULL)
		sbq_storage_maintain(acc);
	else
	{
		sbq_view_exec(what);
		if (as_text)
			sbq_dist_put_text_rows(rsinfo);
		else
			sbq_view_put_rows(rsinfo);
	}
	sbq_storage_end();
	sbq_dist_leave();
	/* a view is read: a shard move need not wait for this transaction */
	if (id != 0 && acc == NULL)
		sbq_dist_unlock_group(id);
	return true;
}

/* Whether the caller may read sbq.queues, as a group's call sent as a read does. */
static bool
sbq_group_read_allowed(void)
{
	Oid			rel = sbq_queues_table_oid();

	return OidIsValid(rel) &&
		sbq_namespace_aclcheck(get_rel_namespace(rel), GetUserId(), ACL_USAGE) == ACLCHECK_OK &&
		pg_class_aclcheck(rel, GetUserId(), ACL_SELECT) == ACLCHECK_OK;
}

/*
 * sbq_group_remote
 *		"what" for the group of route key "key" on the node that holds it:
 *		its rows into rsinfo (a view), or added to acc (maintenance).
 *
 *		Outside a transaction block it runs there in a transaction of its own:
 *		Citus takes a call made from inside a function as part of a
 *		transaction block (citus.function_opens_transaction_block) and a
 *		delegated call there as a write, so a view read on two nodes was
 *		committed with PREPARE and COMMIT PREPARED on each. In a block it
 *		stays in the caller's transaction, which sees its own work there, and
 *		is sent as a read: a query of one shard (the group's sbq.queues,
 *		joined so that it adds no row) with the call in its FROM list, which
 *		Citus sends whole to the group's node as a read. A delegated call in
 *		a block is a write to Citus, and a block that reached two nodes so
 *		was committed with two-phase commit, which a node refuses for a
 *		transaction that received or released a lock in shared memory
 *		(docs/scale-out.md, decision 8): a receive followed by a view read or
 *		sbq_maintain() was refused at COMMIT, and so was a pass that ended a
 *		lock. As a read, a node that only the call reached is committed
 *		without PREPARE, whatever the call changed there: what a pass or a
 *		view does on one node needs no other node's outcome. The query reads
 *		sbq.queues as the caller, so a caller who may not (any role but its
 *		owner's, unless granted) is sent the delegated call, as before; so is
 *		a call from a DO block or procedure outside a block, which Citus takes
 *		as a block too (not seen from here).
 */
static void
sbq_group_remote(int32 key, const char *what, ReturnSetInfo *rsinfo, SbqMaintainResult *acc)
{
	MemoryContext cxt = CurrentMemoryContext;
	Oid			nsp = sbq_ext_schema();
	bool		block = IsTransactionBlock() && sbq_group_read_allowed();
	char	   *sql = psprintf("SELECT r FROM %s.sbq_routed_group(%d, %s) r%s",
							   quote_identifier(get_namespace_name(nsp)), key,
							   quote_literal_cstr(sbq_dist_group_what(what)),
							   block ? psprintf(" LEFT JOIN (SELECT 1 FROM sbq.queues t"
												" WHERE t.entity_key OPERATOR(pg_catalog.=) %d"
												" LIMIT 1) x ON true", key) : "");
	AttInMetadata *meta = rsinfo != NULL ? TupleDescGetAttInMetadata(rsinfo->setDesc) : NULL;
	int			level;
	uint64		r;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	level = NewGUCNestLevel();
	if (!block)
		(void) set_config_option("citus.function_opens_transaction_block", "off",
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	else
		/* the read joins the caller's transaction there, whatever the session set */
		(void) set_config_option("citus.select_opens_transaction_block", "on",
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	sbq_dist_run_routing(sql, cxt);
	AtEOXact_GUC(true, level);
	level = sbq_dist_pin_formats();
	for (r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		Datum		row = SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull);
		char	  **values;
		int			n;

		if (isnull)
			continue;
		values = sbq_dist_strings(row, &n);
		if (acc != NULL)
			sbq_maintain_add_row(values, n, acc);
		else
		{
			sbq_dist_check_width(n, rsinfo->setDesc->natts);
			tuplestore_puttuple(rsinfo->setResult, BuildTupleFromCStrings(meta, values));
		}
	}
	AtEOXact_GUC(true, level);
	SPI_finish();
}

/*
 * A key of group i's range from its rows (a narrow range, where none of the
 * keys tried hashes): false when it has no queue or topic.
 */
static bool
sbq_dist_key_from_rows(int i, int32 *key)
{
	static const char *const tables[] = {"queues", "topics"};
	Oid			argtypes[2] = {INT4OID, INT4OID};
	Datum		values[2];
	int32		min;
	int32		max;
	bool		found = false;
	int			t;

	sbq_dist_group_range(i, &min, &max);
	values[0] = Int32GetDatum(min);
	values[1] = Int32GetDatum(max);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	for (t = 0; t < (int) lengthof(tables) && !found; t++)
	{
		bool		isnull;

		if (SPI_execute_with_args(psprintf("SELECT entity_key FROM sbq.%s"
										   " WHERE pg_catalog.hashint4(entity_key) BETWEEN $1 AND $2"
										   " LIMIT 1", tables[t]),
								  2, argtypes, values, NULL, true, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not look for an entity of shard group %d", i);
		if (SPI_processed > 0)
		{
			*key = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
											   &isnull));
			found = !isnull;
		}
	}
	SPI_finish();
	if (found)
		sbq_dist_set_route_key(i, *key);
	return found;
}

/*
 * Whether sbq_routed_group() is delegated: an update to 0.14 of a
 * distributed installation defines it, sbq_distribute() distributes it.
 */
static bool
sbq_group_routing_ready(void)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	bool		delegated;

	values[0] = CStringGetTextDatum(psprintf("%s.sbq_routed_group(integer, text)",
											 quote_identifier(get_namespace_name(sbq_ext_schema()))));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args("SELECT 1 FROM pg_catalog.pg_dist_object"
							  " WHERE classid = 'pg_catalog.pg_proc'::pg_catalog.regclass"
							  "   AND objid = pg_catalog.to_regprocedure($1)"
							  "   AND distribution_argument_index IS NOT NULL",
							  1, argtypes, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read Citus's distributed objects");
	delegated = SPI_processed > 0;
	SPI_finish();
	return delegated;
}

/* Refuse to route what concerns a group before sbq_routed_group() is delegated. */
static void
sbq_require_group_routing(void)
{
	if (!sbq_group_routing_ready())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("sbqueue cannot reach the other nodes' shard groups yet"),
				 errdetail("sbq_routed_group() is not distributed."),
				 errhint("Run SELECT sbq_distribute() on the coordinator once after ALTER EXTENSION sbqueue UPDATE.")));
}

/* the times a gather over the groups starts again when they changed under it */
#define SBQ_GATHER_TRIES 3

/*
 * sbq_dist_groups_changed
 *		Whether this backend has read other groups since "reads" (a routed
 *		call that Citus ran here has the tables' caches built again, after a
 *		split, and sbqueue's groups with them).
 */
static bool
sbq_dist_groups_changed(uint64 reads)
{
	(void) sbq_dist_active();	/* the groups as they are now */
	return sbq_dist_groups_read() != reads;
}

/*
 * sbq_dist_gather
 *		"what" over every shard group: here for those this node holds, on
 *		their nodes for the others (checked: sbq_routed_group() is known to
 *		be delegated).
 *
 *		The groups are visited by their index in this backend's list; when
 *		the list is read again meanwhile and differs (a split), the indexes
 *		no longer name the groups not yet visited: going on would leave some
 *		out or visit one twice, and say nothing. The gather then starts
 *		again, its rows and counts so far dropped, a few times; then the call
 *		is refused.
 */
static void
sbq_dist_gather(const char *what, ReturnSetInfo *rsinfo, SbqMaintainResult *acc, bool checked)
{
	SbqMaintainResult start = {0};
	int			tries;

	if (acc != NULL)
		start = *acc;
	for (tries = 1;; tries++)
	{
		uint64		reads;
		bool		changed = false;
		int			i;

		(void) sbq_dist_active();
		reads = sbq_dist_groups_read();
		for (i = 0; i < sbq_dist_ngroups() && !changed; i++)
		{
			int64		id;
			bool		local;
			bool		has_key;
			int32		key;

			CHECK_FOR_INTERRUPTS();
			has_key = sbq_dist_group_at(i, &id, &local, &key);
			if (local && sbq_group_run(id, what, rsinfo, false, acc))
				;
			else if (!has_key && !sbq_dist_key_from_rows(i, &key))
				;				/* a group without an entity has no rows to show */
			else
			{
				if (!checked)
					sbq_require_group_routing();
				checked = true;
				sbq_group_remote(key, what, rsinfo, acc);
			}
			changed = sbq_dist_groups_changed(reads);
		}
		if (!changed)
			return;
		if (tries >= SBQ_GATHER_TRIES)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the shard groups changed while sbqueue went over them"),
					 errhint("Make the call again.")));
		if (rsinfo != NULL)
			tuplestore_clear(rsinfo->setResult);
		if (acc != NULL)
			*acc = start;
	}
}

/* Whether the SQL installed has sbq_routed_group() (0.14 on; an older one has not). */
static bool
sbq_group_routing_installed(void)
{
	Oid			argtypes[2] = {INT4OID, TEXTOID};
	List	   *name = list_make2(makeString(get_namespace_name(sbq_ext_schema())),
								  makeString("sbq_routed_group"));

	return OidIsValid(LookupFuncName(name, 2, argtypes, true));
}

/*
 * sbq_dist_maintain
 *		sbq_maintain() with the tables distributed: a pass over each group
 *		this node holds, and (all_nodes) over every other through its node
 *		(not before ALTER EXTENSION ... UPDATE has brought sbq_routed_group).
 */
void
sbq_dist_maintain(SbqMaintainResult *acc, bool all_nodes)
{
	int64	   *groups;
	int			n;
	int			i;

	if (all_nodes && sbq_group_routing_installed())
	{
		if (sbq_group_routing_ready())
		{
			sbq_dist_gather(SBQ_GROUP_MAINTAIN, NULL, acc, true);
			return;
		}
		ereport(WARNING,
				(errmsg("sbq_maintain() keeps to this node's shard groups"),
				 errdetail("sbq_routed_group() is not distributed."),
				 errhint("Run SELECT sbq_distribute() on the coordinator once after ALTER EXTENSION sbqueue UPDATE.")));
	}
	n = sbq_dist_local_groups(&groups);
	for (i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		(void) sbq_group_run(groups[i], SBQ_GROUP_MAINTAIN, NULL, false, acc);
	}
}

/*
 * sbq.cluster_view(name text) RETURNS SETOF record
 *		The rows of node view sbq.node_<name> of every shard group (of this
 *		node's own tables when they are not distributed), as the caller sees
 *		them: what the public views are once distributed.
 */
Datum
sbq_cluster_view(PG_FUNCTION_ARGS)
{
	char	   *what = text_to_cstring(PG_GETARG_TEXT_PP(0));
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	if (!sbq_view_known(what))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"%.*s\" is not a view of sbqueue", NAMEDATALEN, what)));
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	sbq_dist_leave();
	if (!sbq_dist_call_active())
		(void) sbq_group_run(0, what, rsinfo, false, NULL);
	else
		sbq_dist_gather(what, rsinfo, NULL, false);
	return (Datum) 0;
}

/*
 * sbq_routed_group(key integer, what text) RETURNS SETOF text[]
 *		On the node Citus sent it to: node view "what" for the shard group of
 *		key, or a maintenance pass over it ('maintain', for a role that may
 *		run sbq_maintain()), its rows as text[]. Refused (55000) when this
 *		node does not hold the group.
 */
Datum
sbq_routed_group(PG_FUNCTION_ARGS)
{
	int32		key = PG_GETARG_INT32(0);
	int			level;
	char	   *what = sbq_dist_group_settings(text_to_cstring(PG_GETARG_TEXT_PP(1)), &level);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		maintain = strcmp(what, SBQ_GROUP_MAINTAIN) == 0;
	int64		id;

	if (sbq_dist_local_run())
	{
		InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
		if (level != 0)
			AtEOXact_GUC(true, level);
		return (Datum) 0;
	}
	sbq_dist_leave();
	AcceptInvalidationMessages();	/* where the groups are now */
	if (!maintain && !sbq_view_known(what))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"%.*s\" is not a view of sbqueue", NAMEDATALEN, what)));
	if (maintain)
	{
		Oid			nsp = get_func_namespace(fcinfo->flinfo->fn_oid);
		List	   *name = list_make2(makeString(get_namespace_name(nsp)),
									  makeString("sbq_maintain"));
		Oid			fn = LookupFuncName(name, 0, NULL, false);

		if (sbq_proc_aclcheck(fn, GetUserId(), ACL_EXECUTE) != ACLCHECK_OK)
			aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_FUNCTION, "sbq_maintain");
	}
	if (!sbq_dist_active() || sbq_dist_key_group(key, &id) <= 0)
		sbq_dist_refuse_key(key);
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	if (maintain)
	{
		SbqMaintainResult res = {0};
		Datum		row;
		bool		isnull = false;

		if (!sbq_group_run(id, SBQ_GROUP_MAINTAIN, NULL, false, &res))
			sbq_dist_refuse_key(key);
		row = sbq_maintain_row(&res);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &row, &isnull);
	}
	else if (!sbq_group_run(id, what, rsinfo, true, NULL))
		sbq_dist_refuse_key(key);
	if (level != 0)
		AtEOXact_GUC(true, level);
	return (Datum) 0;
}

/*
 * sbq_dist_define_views
 *		The public views as the layout wants them: each gathering every
 *		shard group's rows (distributed), or defined as its node view is
 *		(SPI connected).
 *		Nothing with an older SQL that has no node views.
 */
void
sbq_dist_define_views(bool distributed)
{
	Oid			nsp = sbq_ext_schema();
	int			level = NewGUCNestLevel();
	int			i;

	/* each node defines its own: Citus does not send these on */
	(void) set_config_option("citus.enable_ddl_propagation", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	sbq_view_pin_names();
	for (i = 0; i < (int) lengthof(sbq_view_names); i++)
	{
		const char *what = sbq_view_names[i];
		Oid			view = sbq_node_view(what, true);
		StringInfoData sql;

		if (!OidIsValid(view))
			break;
		initStringInfo(&sql);
		appendStringInfo(&sql, "CREATE OR REPLACE VIEW %s.sbq_%s WITH (security_barrier) AS ",
						 quote_identifier(get_namespace_name(nsp)), what);
		if (distributed)
		{
			Relation	rel = relation_open(view, AccessShareLock);
			TupleDesc	desc = RelationGetDescr(rel);
			int			a;

			appendStringInfo(&sql, "SELECT * FROM sbq.cluster_view('%s') AS v(", what);
			for (a = 0; a < desc->natts; a++)
			{
				Form_pg_attribute att = TupleDescAttr(desc, a);

				appendStringInfo(&sql, "%s%s %s", a > 0 ? ", " : "",
								 quote_identifier(NameStr(att->attname)),
								 format_type_with_typemod(att->atttypid, att->atttypmod));
			}
			appendStringInfoChar(&sql, ')');
			relation_close(rel, AccessShareLock);
		}
		else
		{
			/*
			 * the node view's definition itself: a view over it would cost
			 * every read a level of rewriting (about 0.3 ms of 3 for the
			 * stats of 100 shallow queues)
			 */
			char	   *def = TextDatumGetCString(DirectFunctionCall1(pg_get_viewdef,
																	  ObjectIdGetDatum(view)));
			size_t		len = strlen(def);

			while (len > 0 && (def[len - 1] == ';' || def[len - 1] == '\n' || def[len - 1] == ' '))
				def[--len] = '\0';
			appendStringInfoString(&sql, def);
		}
		if (SPI_execute(sql.data, false, 0) != SPI_OK_UTILITY)
			elog(ERROR, "could not define view sbq_%s", what);
	}
	AtEOXact_GUC(true, level);
}

/*
 * sbq.define_views(distributed boolean): sbq_dist_define_views(), by
 * whether the tables are distributed when NULL (an update runs it).
 */
Datum
sbq_define_views(PG_FUNCTION_ARGS)
{
	bool		distributed = PG_ARGISNULL(0) ? sbq_dist_active() : PG_GETARG_BOOL(0);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	sbq_dist_define_views(distributed);
	SPI_finish();
	PG_RETURN_VOID();
}
