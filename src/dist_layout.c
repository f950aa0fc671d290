/*-------------------------------------------------------------------------
 *
 * dist_layout.c
 *	  The distributed layout of sbqueue's tables (docs/scale-out.md, decision
 *	  2): the column entity_key in every table, filled and defaulted, every
 *	  key and unique constraint with it, identities drawn by functions; and
 *	  sbq_distribute() / sbq_undistribute(), which turn an installation on a
 *	  Citus coordinator into that layout, its tables distributed and
 *	  colocated, and back.
 *
 * Owns nothing. Locks: those its DDL and Citus's functions take.
 *
 * Copyright (c) 2026, the sbqueue authors
 *
 * IDENTIFICATION
 *	  src/dist_layout.c
 *
 *-------------------------------------------------------------------------
 */

#include "postgres.h"

#include "miscadmin.h"
#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "commands/extension.h"
#include "commands/sequence.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "catalog/pg_sequence.h"
#include "storage/lock.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "dist_int.h"
#include "distributed.h"
#include "lease.h"
#include "sbqueue.h"
#include "storage_core.h"

static void sbq_layout_sql(const char *sql);

PG_FUNCTION_INFO_V1(sbq_next_queue_id);
PG_FUNCTION_INFO_V1(sbq_next_session_key);
PG_FUNCTION_INFO_V1(sbq_distributed_layout);
PG_FUNCTION_INFO_V1(sbq_distribute);
PG_FUNCTION_INFO_V1(sbq_undistribute);

/* The next value of sequence sbq.<name>, as the current user draws it. */
static int64
sbq_next_value(const char *name)
{
	Oid			relid = get_relname_relid(name, get_namespace_oid("sbq", false));

	if (!OidIsValid(relid))
		elog(ERROR, "sequence sbq.%s does not exist", name);
	return nextval_internal(relid, true);
}

/*
 * sbq.next_queue_id(), sbq.next_session_key(): the identities of queues and
 * topics, and of sessions, once the tables are distributed: drawn by a
 * function rather than by a column default on the sequence, which Citus
 * would take over; each node draws from its own sequence, raised past a
 * shard group that arrives (storage_core.c).
 */
Datum
sbq_next_queue_id(PG_FUNCTION_ARGS)
{
	int64		v = sbq_next_value("queue_id_seq");

	if (v > PG_INT32_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED),
				 errmsg("sbq.queue_id_seq has run out of integers")));
	PG_RETURN_INT32((int32) v);
}

/* sbq.next_session_key(): see sbq.next_queue_id() */
Datum
sbq_next_session_key(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(sbq_next_value("session_seq"));
}

/*
 * sbq_dist_lock_sequences
 *		The lock under which a backend of this node steps or raises its
 *		sequences (transaction-level; sbqueue's own advisory field).
 */
void
sbq_dist_lock_sequences(void)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0x53455153, 0, SBQ_LOCKTAG_FIELD4);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
}

/* Give back the lock of sbq_dist_lock_sequences() before the transaction ends. */
void
sbq_dist_unlock_sequences(void)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0x53455153, 0, SBQ_LOCKTAG_FIELD4);
	(void) LockRelease(&tag, ExclusiveLock, false);
}

/* The step of sequence sbq.<name>. */
static int64
sbq_sequence_step(const char *name)
{
	Oid			relid = get_relname_relid(name, get_namespace_oid("sbq", false));
	HeapTuple	tup = SearchSysCache1(SEQRELID, ObjectIdGetDatum(relid));
	int64		step;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "sequence sbq.%s does not exist", name);
	step = ((Form_pg_sequence) GETSTRUCT(tup))->seqincrement;
	ReleaseSysCache(tup);
	return step;
}

/*
 * sbq_dist_range_sequences
 *		This node's sequences (of messages, queues and topics, sessions) step
 *		by SBQ_DIST_MAX_NODES from its Citus group id, past every number
 *		they gave: no two nodes give one number, so the rows of every node
 *		can meet in one table again (sbq_undistribute(), a group that moved).
 *		Nothing when they step so already; true when it changed a step
 *		(transactional, unlike the setval() of a raise). SPI connected, as
 *		the owner.
 */
bool
sbq_dist_range_sequences(void)
{
	static const char *const seqs[] = {"message_seq", "queue_id_seq", "session_seq"};
	int			i;
	bool		altered = false;

	for (i = 0; i < (int) lengthof(seqs); i++)
	{
		if (sbq_sequence_step(seqs[i]) == SBQ_DIST_MAX_NODES)
			continue;
		sbq_layout_sql("SELECT 1 FROM pg_catalog.pg_dist_local_group"
					   " WHERE groupid >= " SBQ_DIST_MAX_NODES_SQL);
		if (SPI_processed > 0)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("sbqueue runs on Citus nodes of group id 0 to %d",
							SBQ_DIST_MAX_NODES - 1)));
		sbq_layout_sql(psprintf("ALTER SEQUENCE sbq.%s INCREMENT BY %d", seqs[i],
								SBQ_DIST_MAX_NODES));
		sbq_layout_sql(psprintf("SELECT pg_catalog.setval('sbq.%s',"
								" (s.last_value / %d + 1) * %d"
								" + (SELECT l.groupid FROM pg_catalog.pg_dist_local_group l), false)"
								" FROM sbq.%s s", seqs[i], SBQ_DIST_MAX_NODES,
								SBQ_DIST_MAX_NODES, seqs[i]));
		altered = true;
	}
	return altered;
}

/* Run one SQL command of the layout functions, any failure an error. */
static void
sbq_layout_sql(const char *sql)
{
	if (SPI_execute(sql, false, 0) < 0)
		elog(ERROR, "could not run: %s", sql);
}

/* Pin search_path for the layout functions' SQL; returns the level to restore. */
static int
sbq_layout_pin(void)
{
	int			level = NewGUCNestLevel();

	(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	return level;
}

/* Every primary key and unique constraint: table, name, kind, columns. */
static const char *const sbq_layout_keys[][4] = {
	{"queues", "queues_pkey", "PRIMARY KEY", "queue_id"},
	{"queues", "queues_name_key_key", "UNIQUE", "name_key"},
	{"messages", "messages_pkey", "PRIMARY KEY", "sequence_number"},
	{"dead_letters", "dead_letters_pkey", "PRIMARY KEY", "sequence_number"},
	{"queue_counters", "queue_counters_pkey", "PRIMARY KEY", "queue_id, shard"},
	{"topics", "topics_pkey", "PRIMARY KEY", "topic_id"},
	{"topics", "topics_name_key_key", "UNIQUE", "name_key"},
	{"subscriptions", "subscriptions_pkey", "PRIMARY KEY", "queue_id"},
	{"subscriptions", "subscriptions_topic_name_key", "UNIQUE", "topic_id, name_key"},
	{"rules", "rules_pkey", "PRIMARY KEY", "queue_id, name_key"},
	{"topic_scheduled", "topic_scheduled_pkey", "PRIMARY KEY",
	"topic_sequence_number, sequence_number"},
	{"duplicate_ids", "duplicate_ids_pkey", "PRIMARY KEY", "queue_id, message_id"},
	{"rights", "rights_pkey", "PRIMARY KEY", "queue_id, role"},
	{"sessions", "sessions_pkey", "PRIMARY KEY", "session_key"},
	{"sessions", "sessions_queue_session_key", "UNIQUE", "queue_id, session_id"},
};

/* How the rows of the other tables get their entity's key. */
#define SBQ_KEY_OF_QUEUE(tab) \
	"UPDATE sbq." tab " x SET entity_key = q.entity_key FROM sbq.queues q" \
	" WHERE q.queue_id = x.queue_id"
#define SBQ_KEY_OF_EITHER(tab) \
	"UPDATE sbq." tab " x SET entity_key = e.entity_key" \
	" FROM (SELECT queue_id AS id, entity_key FROM sbq.queues" \
	"       UNION ALL SELECT topic_id, entity_key FROM sbq.topics) e WHERE e.id = x.queue_id"
static const char *const sbq_layout_fill[] = {
	"UPDATE sbq.queues SET entity_key = sbq.entity_key(name)",
	"UPDATE sbq.topics SET entity_key = sbq.entity_key(name)",
	SBQ_KEY_OF_QUEUE("messages"),
	SBQ_KEY_OF_QUEUE("dead_letters"),
	SBQ_KEY_OF_QUEUE("subscriptions"),
	SBQ_KEY_OF_QUEUE("rules"),
	SBQ_KEY_OF_QUEUE("sessions"),
	"UPDATE sbq.topic_scheduled x SET entity_key = t.entity_key FROM sbq.topics t"
	" WHERE t.topic_id = x.topic_id",
	/* queues and topics share the identities: rows of either */
	SBQ_KEY_OF_EITHER("queue_counters"),
	SBQ_KEY_OF_EITHER("duplicate_ids"),
	SBQ_KEY_OF_EITHER("rights"),
};

/*
 * sbq_rights_add_names
 *		Give sbq.rights the column role_name, the name of each row's role
 *		(NULL for PUBLIC): a role's OID differs from node to node, and a
 *		shard moved to another node keeps the OIDs of the node it came from
 *		(docs/scale-out.md, decision 9). fill: name the rows there are (this
 *		node's own table, before it is distributed; an OID no role has is
 *		named as pg_get_userbyid says, "unknown (OID=n)", which is nobody's).
 *		Tables distributed by a library before this one get the column only:
 *		Citus takes no function of a row's column that is not immutable in an
 *		UPDATE of its tables, so their rows keep going by OID (role_name NULL)
 *		until granted again.
 */
static void
sbq_rights_add_names(bool fill)
{
	sbq_layout_sql("ALTER TABLE sbq.rights ADD COLUMN IF NOT EXISTS role_name name");
	if (fill)
		sbq_layout_sql("UPDATE sbq.rights SET role_name = pg_catalog.pg_get_userbyid(role)"
					   " WHERE role_name IS NULL AND role::pg_catalog.oid OPERATOR(pg_catalog.<>) 0");
}

/*
 * sbq_layout
 *		This node's tables in the layout for distribution (true) or local
 *		(false): the column entity_key (filled from the names, defaulting to
 *		the writing call's key), every key and unique constraint with it (last,
 *		so that the look-ups by the other columns keep their index), and the
 *		identities drawn by sbq.next_queue_id() and sbq.next_session_key();
 *		the public views gathering the rows of every node (dist_views.c).
 *		Nothing when they are so already.
 */
static void
sbq_layout(bool distributed)
{
	Oid			queues = get_relname_relid("queues", get_namespace_oid("sbq", false));
	bool		has = get_attnum(queues, "entity_key") != InvalidAttrNumber;
	int			i;

	sbq_dist_define_views(distributed);
	if (has == distributed)
		return;

	/*
	 * The messages of this node's own tables leave for the shards, or come
	 * back from them under their numbers: the locks held here on them end
	 * at commit, as at a DROP of the tables. (A lock of before the way out
	 * would otherwise be good again after the way back, on a message
	 * delivered and settled meanwhile on its node.)
	 */
	sbq_lease_forget_incarnation(queues);
	for (i = 0; i < (int) lengthof(sbq_layout_keys); i++)
		sbq_layout_sql(psprintf("ALTER TABLE sbq.%s DROP CONSTRAINT %s",
								sbq_layout_keys[i][0], sbq_layout_keys[i][1]));
	if (distributed)
	{
		for (i = 0; i < SBQ_DIST_NTABLES; i++)
			sbq_layout_sql(psprintf("ALTER TABLE sbq.%s ADD COLUMN entity_key integer",
									sbq_dist_tables[i]));
		for (i = 0; i < (int) lengthof(sbq_layout_fill); i++)
			sbq_layout_sql(sbq_layout_fill[i]);
		sbq_rights_add_names(true);
		/* a row of no entity (there should be none) could not be placed */
		for (i = 0; i < SBQ_DIST_NTABLES; i++)
			sbq_layout_sql(psprintf("DELETE FROM sbq.%s WHERE entity_key IS NULL",
									sbq_dist_tables[i]));
		for (i = 0; i < SBQ_DIST_NTABLES; i++)
			sbq_layout_sql(psprintf("ALTER TABLE sbq.%s ALTER COLUMN entity_key SET NOT NULL,"
									" ALTER COLUMN entity_key SET DEFAULT sbq.current_entity_key()",
									sbq_dist_tables[i]));
		sbq_layout_sql("ALTER TABLE sbq.queues ALTER COLUMN queue_id SET DEFAULT sbq.next_queue_id()");
		sbq_layout_sql("ALTER TABLE sbq.topics ALTER COLUMN topic_id SET DEFAULT sbq.next_queue_id()");
		sbq_layout_sql("ALTER TABLE sbq.sessions ALTER COLUMN session_key"
					   " SET DEFAULT sbq.next_session_key()");
		sbq_dist_range_sequences();
	}
	else
	{
		for (i = 0; i < SBQ_DIST_NTABLES; i++)
			sbq_layout_sql(psprintf("ALTER TABLE sbq.%s DROP COLUMN entity_key",
									sbq_dist_tables[i]));
		sbq_layout_sql("ALTER TABLE sbq.rights DROP COLUMN IF EXISTS role_name");
		sbq_layout_sql("ALTER TABLE sbq.queues ALTER COLUMN queue_id"
					   " SET DEFAULT pg_catalog.nextval('sbq.queue_id_seq')");
		sbq_layout_sql("ALTER TABLE sbq.topics ALTER COLUMN topic_id"
					   " SET DEFAULT pg_catalog.nextval('sbq.queue_id_seq')");
		sbq_layout_sql("ALTER TABLE sbq.sessions ALTER COLUMN session_key"
					   " SET DEFAULT pg_catalog.nextval('sbq.session_seq')");
		sbq_layout_sql("ALTER SEQUENCE sbq.message_seq INCREMENT BY 1");
		sbq_layout_sql("ALTER SEQUENCE sbq.queue_id_seq INCREMENT BY 1");
		sbq_layout_sql("ALTER SEQUENCE sbq.session_seq INCREMENT BY 1");
	}
	for (i = 0; i < (int) lengthof(sbq_layout_keys); i++)
		sbq_layout_sql(psprintf("ALTER TABLE sbq.%s ADD CONSTRAINT %s %s (%s%s)",
								sbq_layout_keys[i][0], sbq_layout_keys[i][1],
								sbq_layout_keys[i][2], sbq_layout_keys[i][3],
								distributed ? ", entity_key" : ""));
}

/* sbq.distributed_layout(distributed boolean): sbq_layout on this node (run on the workers) */
Datum
sbq_distributed_layout(PG_FUNCTION_ARGS)
{
	int			level = sbq_layout_pin();

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	sbq_layout(PG_GETARG_BOOL(0));
	SPI_finish();
	AtEOXact_GUC(true, level);
	PG_RETURN_VOID();
}

/* Refuse unless this is the coordinator of a Citus cluster (SPI connected). */
static void
sbq_require_coordinator(const char *fn)
{
	bool		isnull;

	if (!OidIsValid(get_extension_oid("citus", true)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s needs the extension citus in this database", fn)));
	sbq_layout_sql("SELECT groupid FROM pg_catalog.pg_dist_local_group");
	if (SPI_processed != 1 ||
		DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s runs on the coordinator", fn)));
}

/*
 * Run a command on every worker (in their own transactions); an error
 * unless it succeeded everywhere, and then every result must be "expect"
 * (NULL: anything).
 */
static void
sbq_on_workers(const char *command, const char *expect, const char *what)
{
	uint64		r;

	sbq_layout_sql(psprintf("SELECT nodename, nodeport, success, result"
							" FROM pg_catalog.run_command_on_workers(%s)",
							quote_literal_cstr(command)));
	for (r = 0; r < SPI_processed; r++)
	{
		HeapTuple	tup = SPI_tuptable->vals[r];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *node = psprintf("%s:%s", SPI_getvalue(tup, desc, 1), SPI_getvalue(tup, desc, 2));
		char	   *success = SPI_getvalue(tup, desc, 3);
		char	   *result = SPI_getvalue(tup, desc, 4);

		if (success == NULL || strcmp(success, "t") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("%s failed on worker %s: %s", what, node, result ? result : "")));
		if (expect != NULL && (result == NULL || strcmp(result, expect) != 0))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("%s: worker %s has \"%s\"", what, node, result ? result : ""),
					 errdetail("Every worker must have sbqueue at the coordinator's version "
							   "(ALTER EXTENSION sbqueue UPDATE with Citus's DDL propagation on), "
							   "with no queue of its own.")));
	}
}

/* the functions Citus delegates by their first argument, an entity key */
static const char *const sbq_routing_functions[] = {
	"sbq_routed(integer, text, text[])", "sbq_routed_group(integer, text)"
};

/*
 * sbq_distribute(): on the coordinator of a Citus cluster whose every node
 * has sbqueue at this version, the distributed layout (docs/scale-out.md):
 * every table distributed by entity_key and colocated with sbq.queues, the
 * coordinator's rows moved into the shards, sbq_routed delegated by its
 * key. The workers' own tables must be empty; their layout changes in
 * their own transactions first, so after a failure call it again (it goes
 * on where it stopped) or call sbq_undistribute(). Called again once
 * distributed (after ALTER EXTENSION ... UPDATE), it adds what the new
 * version routes and shows.
 */
Datum
sbq_distribute(PG_FUNCTION_ARGS)
{
	int			level = sbq_layout_pin();
	Oid			fnoid = fcinfo->flinfo->fn_oid;
	char	   *nsp = get_namespace_name(get_func_namespace(fnoid));
	int			i;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	sbq_require_coordinator("sbq_distribute()");
	sbq_layout_sql("SELECT 1 FROM pg_catalog.pg_dist_partition"
				   " WHERE logicalrelid = 'sbq.queues'::pg_catalog.regclass");
	if (SPI_processed > 0)
	{
		/* distributed by an older version: what this one adds (an update) */
		sbq_layout_sql("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'sbqueue'");
		sbq_on_workers("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'sbqueue'",
					   SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1),
					   "the version of sbqueue");
		sbq_on_workers("SELECT sbq.define_views(true)", NULL, "the views of the cluster");
		sbq_dist_define_views(true);
		sbq_rights_add_names(false);
	}
	else
	{
		sbq_on_workers("SELECT pg_catalog.count(*) FROM sbq.queues WHERE queue_id IS NOT NULL",
					   "0", "looking for the queues of the workers");
		/*
		 * A maintenance pass first, while the tables are this node's: it
		 * stores the counts that shared memory holds, which the change of
		 * layout forgets (sbq_layout).
		 */
		sbq_layout_sql(psprintf("SELECT %s.sbq_maintain()", quote_identifier(nsp)));
		sbq_on_workers("SELECT sbq.distributed_layout(true)", NULL, "the distributed layout");
		sbq_layout(true);

		/*
		 * Every entity's numbers so far came from this node's sequence: a
		 * sequence mark of this node (dist_storage.c) for each key says so,
		 * so that a worker gives a queue already emptied higher ones still.
		 */
		sbq_layout_sql("INSERT INTO sbq.queue_counters AS qc (queue_id, shard, sent, entity_key)"
					   " SELECT " SBQ_MARK_ROW ", l.groupid << " SBQ_MARK_NODE_SHIFT ","
					   "        s.last_value, k.entity_key"
					   "   FROM (SELECT entity_key FROM sbq.queues"
					   "         UNION SELECT entity_key FROM sbq.topics) k,"
					   "        sbq.message_seq s, pg_catalog.pg_dist_local_group l"
					   " ON CONFLICT DO NOTHING");
		for (i = 0; i < SBQ_DIST_NTABLES; i++)
		{
			sbq_layout_sql(psprintf("SELECT pg_catalog.create_distributed_table("
									"'sbq.%s'::pg_catalog.regclass, 'entity_key', colocate_with => %s)",
									sbq_dist_tables[i], i == 0 ? "'none'" : "'sbq.queues'"));
			sbq_layout_sql(psprintf("SELECT pg_catalog.truncate_local_data_after_distributing_table("
									"'sbq.%s'::pg_catalog.regclass)", sbq_dist_tables[i]));
		}
	}
	/* the routing functions, delegated by their key to the node of its group */
	for (i = 0; i < (int) lengthof(sbq_routing_functions); i++)
		sbq_layout_sql(psprintf("SELECT pg_catalog.create_distributed_function(f, '$1',"
								" colocate_with => 'sbq.queues', force_delegation => true)"
								" FROM (SELECT pg_catalog.to_regprocedure(%s) AS f) x"
								" WHERE f IS NOT NULL",	/* an older SQL has fewer */
								quote_literal_cstr(psprintf("%s.%s", quote_identifier(nsp),
															sbq_routing_functions[i]))));
	SPI_finish();
	AtEOXact_GUC(true, level);
	PG_RETURN_VOID();
}

/*
 * sbq_back_rights_by_name
 *		sbq_undistribute(): the rights' roles by their names (decision 9): the
 *		OIDs that came back are those of the node each row was on (a role's
 *		OID differs from node to node); two rows of one role (one moved in,
 *		one granted on its new node) become one.
 */
static void
sbq_back_rights_by_name(void)
{
	sbq_layout_sql("SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = 'pg_temp.sbq_back_rights'::pg_catalog.regclass"
				   " AND attname = 'role_name' AND NOT attisdropped");
	if (SPI_processed > 0)
	{
		sbq_layout_sql("CREATE TEMP TABLE sbq_back_named ON COMMIT DROP AS SELECT * FROM pg_temp.sbq_back_rights");
		sbq_layout_sql("TRUNCATE pg_temp.sbq_back_rights");
		sbq_layout_sql("INSERT INTO pg_temp.sbq_back_rights (queue_id, role, rights, entity_key)"
					   " SELECT x.queue_id, x.role, pg_catalog.bit_or(x.rights), pg_catalog.min(x.entity_key)"
					   "   FROM (SELECT r.queue_id, " SBQ_RIGHTS_ROLE_OF("r") "::pg_catalog.regrole AS role,"
					   "                r.rights, r.entity_key FROM pg_temp.sbq_back_named r) x"
					   "  WHERE x.role IS NOT NULL GROUP BY x.queue_id, x.role");
		sbq_layout_sql("ALTER TABLE pg_temp.sbq_back_rights DROP COLUMN role_name");
	}
}

/*
 * sbq_undistribute(): back to one server: the rows of every shard into the
 * coordinator's own tables, the tables no longer distributed (their shards
 * dropped; Citus's undistribute_table would drop the tables, which belong
 * to the extension), the coordinator's layout local, and its sequences past
 * the numbers that came back. The workers' own tables keep the layout for
 * distribution (changing them here would wait for this transaction's own
 * locks on them): a later sbq_distribute() finds them ready, and
 * sbq.distributed_layout(false) on a worker makes them local again.
 */
Datum
sbq_undistribute(PG_FUNCTION_ARGS)
{
	int			level = sbq_layout_pin();
	int			i;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	sbq_require_coordinator("sbq_undistribute()");
	sbq_layout_sql("SELECT 1 FROM pg_catalog.pg_dist_partition"
				   " WHERE logicalrelid = 'sbq.queues'::pg_catalog.regclass");
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("sbqueue is not distributed")));
	/*
	 * Every call and maintenance pass holds sbq.queues on the node it starts
	 * on, and on the node it is routed to, to its end (sbq_dist_call_active);
	 * Citus takes a lock on a distributed table on every node, if the
	 * session lets it propagate DDL and sync metadata. So first wait for
	 * those running, stop new ones, and only then read the rows: a send that
	 * committed after the copy would be dropped with its shard, and a pass
	 * that began meanwhile would wait for a shard dropped here while holding
	 * another.
	 */
	(void) set_config_option("citus.enable_ddl_propagation", "on", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("citus.enable_metadata_sync", "on", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	sbq_layout_sql("LOCK TABLE sbq.queues IN ACCESS EXCLUSIVE MODE");
	/* the rows, kept aside; then the tables local, and the shards gone */
	for (i = 0; i < SBQ_DIST_NTABLES; i++)
	{
		sbq_layout_sql(psprintf("LOCK TABLE sbq.%s IN EXCLUSIVE MODE", sbq_dist_tables[i]));
		sbq_layout_sql(psprintf("CREATE TEMP TABLE sbq_back_%s ON COMMIT DROP AS SELECT * FROM sbq.%s",
								sbq_dist_tables[i], sbq_dist_tables[i]));
	}
	for (i = SBQ_DIST_NTABLES - 1; i >= 0; i--)
	{
		const char *t = sbq_dist_tables[i];

		sbq_layout_sql(psprintf("SELECT pg_catalog.citus_drop_all_shards('sbq.%s'::pg_catalog.regclass,"
								" 'sbq', '%s')", t, t));
		sbq_layout_sql(psprintf("SELECT pg_catalog.master_remove_distributed_table_metadata_from_workers("
								"'sbq.%s'::pg_catalog.regclass, 'sbq', '%s')", t, t));
		sbq_layout_sql(psprintf("SELECT pg_catalog.master_remove_partition_metadata("
								"'sbq.%s'::pg_catalog.regclass, 'sbq', '%s')", t, t));
	}
	sbq_layout(false);

	/*
	 * The sequence marks (dist_storage.c) stay behind: one server needs
	 * none, and those of several keys would meet in one primary key. The
	 * highest of them still counts below: a queue emptied on a worker holds
	 * no number to raise the sequence past.
	 */
	sbq_layout_sql("CREATE TEMP TABLE sbq_back_marks ON COMMIT DROP AS"
				   " SELECT pg_catalog.max(sent) AS n FROM pg_temp.sbq_back_queue_counters"
				   " WHERE queue_id = " SBQ_MARK_ROW);
	sbq_layout_sql("DELETE FROM pg_temp.sbq_back_queue_counters WHERE queue_id = " SBQ_MARK_ROW);
	sbq_back_rights_by_name();
	for (i = 0; i < SBQ_DIST_NTABLES; i++)
	{
		sbq_layout_sql(psprintf("ALTER TABLE pg_temp.sbq_back_%s DROP COLUMN entity_key",
								sbq_dist_tables[i]));
		sbq_layout_sql(psprintf("INSERT INTO sbq.%s SELECT * FROM pg_temp.sbq_back_%s",
								sbq_dist_tables[i], sbq_dist_tables[i]));
	}
	sbq_layout_sql("SELECT pg_catalog.setval('sbq.message_seq', " SBQ_SEQ_CAP("m.n", SBQ_SEQ_TOP_SQL, "1048576") " + 1048576)"
				   "  FROM (SELECT pg_catalog.max(x) AS n FROM ("
				   "        SELECT pg_catalog.max(sequence_number) AS x FROM sbq.messages"
				   "        UNION ALL SELECT pg_catalog.max(sequence_number) FROM sbq.dead_letters"
				   "        UNION ALL SELECT pg_catalog.max(topic_sequence_number) FROM sbq.topic_scheduled"
				   "        UNION ALL SELECT k.n FROM pg_temp.sbq_back_marks k) u) m,"
				   "       sbq.message_seq s"
				   " WHERE " SBQ_SEQ_CAP("m.n", SBQ_SEQ_TOP_SQL, "1048576") " >= s.last_value");
	sbq_layout_sql("SELECT pg_catalog.setval('sbq.queue_id_seq', " SBQ_SEQ_CAP("m.n", SBQ_SEQ_TOP_INT_SQL, "1024") " + 1024)"
				   "  FROM (SELECT pg_catalog.max(x) AS n FROM ("
				   "        SELECT pg_catalog.max(queue_id) AS x FROM sbq.queues"
				   "        UNION ALL SELECT pg_catalog.max(topic_id) FROM sbq.topics) u) m,"
				   "       sbq.queue_id_seq s"
				   " WHERE " SBQ_SEQ_CAP("m.n", SBQ_SEQ_TOP_INT_SQL, "1024") " >= s.last_value");
	sbq_layout_sql("SELECT pg_catalog.setval('sbq.session_seq', " SBQ_SEQ_CAP("m.n", SBQ_SEQ_TOP_SQL, "1048576") " + 1048576)"
				   "  FROM (SELECT pg_catalog.max(session_key) AS n FROM sbq.sessions) m,"
				   "       sbq.session_seq s"
				   " WHERE " SBQ_SEQ_CAP("m.n", SBQ_SEQ_TOP_SQL, "1048576") " >= s.last_value");
	SPI_finish();
	AtEOXact_GUC(true, level);
	PG_RETURN_VOID();
}
