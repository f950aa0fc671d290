/* sql/sbqueue--0.12--0.13.sql: from 0.12 to 0.13 (scale-out on Citus: entity keys, sbq_routed, sbq_distribute, sbq_undistribute) */

\echo Use "ALTER EXTENSION sbqueue UPDATE TO '0.13'" to load this file. \quit

/* ------------------------------------------------------------ scale-out on Citus (0.13) */

/*
 * The entity key of an address (src/distributed.c): a fixed 32-bit hash of
 * its canonical base name (lower case, without a dead-letter suffix or a
 * subscription part). With the tables distributed (sbq_distribute()) it is
 * every row's distribution column, so that an entity's rows live in one
 * shard group, on one node.
 */
CREATE FUNCTION sbq.entity_key(address text) RETURNS integer
    AS 'MODULE_PATHNAME', 'sbq_entity_key_sql'
    LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

/*
 * Once distributed: the default of every entity_key column (the key of the
 * entity the call writes for), and of the identities of queues, topics and
 * sessions (each node draws from its own sequences, raised past a shard
 * group that arrives; a default on the sequence itself Citus would take
 * over).
 */
CREATE FUNCTION sbq.current_entity_key() RETURNS integer
    AS 'MODULE_PATHNAME', 'sbq_current_entity_key'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION sbq.next_queue_id() RETURNS integer
    AS 'MODULE_PATHNAME', 'sbq_next_queue_id'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION sbq.next_session_key() RETURNS bigint
    AS 'MODULE_PATHNAME', 'sbq_next_session_key'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

/* this node's tables in the layout for distribution (true) or local (false) */
CREATE FUNCTION sbq.distributed_layout(distributed boolean) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_distributed_layout'
    LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

/*
 * A call routed to the node that holds its entity's shard group: Citus
 * delegates it there (sbq_distribute() distributes it with force_delegation).
 * It runs the function of sbqueue fn (regprocedure text) with the arguments
 * in their text forms, as the caller, and returns the result rows in theirs;
 * a node that does not hold the group refuses it (55000). Any role may call
 * it: it calls only sbqueue's functions, each checking the caller's rights.
 */
CREATE FUNCTION sbq_routed(key integer, fn text, args text[]) RETURNS SETOF text[]
    AS 'MODULE_PATHNAME', 'sbq_routed'
    LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

/*
 * On the coordinator of a Citus cluster whose nodes all have this version:
 * the distributed layout and back (docs/scale-out.md). Superusers only.
 */
CREATE FUNCTION sbq_distribute() RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_distribute'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION sbq_undistribute() RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_undistribute'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION sbq.current_entity_key(), sbq.next_queue_id(), sbq.next_session_key(),
    sbq.distributed_layout(boolean), sbq_distribute(), sbq_undistribute() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sbq.entity_key(text), sbq_routed(integer, text, text[]) TO PUBLIC;
