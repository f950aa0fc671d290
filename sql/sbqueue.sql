/* sql/sbqueue.sql: the install script of sbqueue (the build copies it to sbqueue--VERSION.sql) */

\echo Use "CREATE EXTENSION sbqueue" to load this file. \quit

/*
 * Internal state: the schema sbq and its tables. Users never touch them; every
 * SQL-callable function goes through the storage files of src/ (src/storage.h).
 * All tables are WAL-logged and registered with pg_extension_config_dump so
 * that pg_dump keeps the messages.
 */
CREATE SCHEMA sbq;
REVOKE ALL ON SCHEMA sbq FROM PUBLIC;

CREATE SEQUENCE sbq.queue_id_seq AS integer;

/*
 * One row per queue. name_key is the lower-case name (names compare
 * case-insensitively). dead_letter_ttl: how long a dead letter is kept (NULL:
 * until it is received or purged, as Service Bus keeps them). retry_delay,
 * retry_backoff, max_retry_delay: how long an abandoned message waits before
 * it may be received again (NULL: not at all, as in Service Bus).
 */
CREATE TABLE sbq.queues (
    queue_id integer NOT NULL DEFAULT pg_catalog.nextval('sbq.queue_id_seq'),
    name text NOT NULL,
    name_key text NOT NULL,
    lock_duration interval NOT NULL,
    max_delivery_count integer NOT NULL,
    default_message_ttl interval,
    dead_lettering_on_message_expiration boolean NOT NULL,
    duplicate_detection_window interval,
    requires_session boolean NOT NULL,
    forward_to text,
    forward_dead_lettered_messages_to text,
    max_message_size integer NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    dead_letter_ttl interval,
    retry_delay interval,
    retry_backoff boolean NOT NULL DEFAULT false,
    max_retry_delay interval,
    CONSTRAINT queues_pkey PRIMARY KEY (queue_id),
    CONSTRAINT queues_name_key_key UNIQUE (name_key)
);
ALTER SEQUENCE sbq.queue_id_seq OWNED BY sbq.queues.queue_id;

/*
 * Sequence numbers come from one sequence: unique and increasing for every
 * queue, never reused, and no per-queue counter row that serialises senders.
 */
CREATE SEQUENCE sbq.message_seq AS bigint;

/*
 * Every message of every queue that is not a dead letter; state 0 active,
 * 1 deferred, 2 scheduled. subqueue is 0 here and 1 in sbq.dead_letters:
 * the two tables share their leading columns, so one statement serves
 * either sub-queue, and the column fills what alignment would leave empty.
 *
 * Receive walks messages_receive_idx in sequence order. The lock columns
 * (lock_token, locked_until, delivery_count) are in no index, so taking,
 * renewing and releasing a lock are HOT updates; the lock token carries the
 * sequence number, so settling finds the row through the primary key.
 * Fixed-width columns come first to keep the tuple layout tight.
 */
CREATE TABLE sbq.messages (
    sequence_number bigint NOT NULL,
    queue_id integer NOT NULL,
    subqueue smallint NOT NULL,
    state smallint NOT NULL,
    delivery_count integer NOT NULL,
    lock_token uuid,
    locked_until timestamptz,
    enqueued_time timestamptz NOT NULL,
    scheduled_enqueue_time timestamptz,
    expires_at timestamptz,
    time_to_live interval,
    message_id text NOT NULL,
    session_id text,
    correlation_id text,
    subject text,
    content_type text,
    reply_to text,
    reply_to_session_id text,
    to_address text,
    application_properties jsonb,
    dead_letter_reason text,
    dead_letter_error_description text,
    dead_letter_source text,
    body bytea NOT NULL,
    CONSTRAINT messages_pkey PRIMARY KEY (sequence_number),
    CONSTRAINT messages_subqueue_check CHECK (subqueue = 0)
) WITH (fillfactor = 80);

CREATE INDEX messages_receive_idx
    ON sbq.messages (queue_id, subqueue, state, sequence_number);

/*
 * The dead-letter sub-queues of every queue: messages moved here, in the
 * transaction that dead-lettered them, with their reason, description,
 * source (the queue's name), delivery count and the time they arrived
 * (dead_lettered_at); sbq_resubmit moves them back. Apart from the hot
 * table, they neither pin its pages nor lengthen its indexes, and keep a
 * retention and vacuum policy of their own. The columns are those of
 * sbq.messages (subqueue always 1; state 0, or 1 once deferred here), and
 * when the message arrived.
 */
CREATE TABLE sbq.dead_letters (
    LIKE sbq.messages,
    dead_lettered_at timestamptz NOT NULL,
    CONSTRAINT dead_letters_pkey PRIMARY KEY (sequence_number),
    CONSTRAINT dead_letters_subqueue_check CHECK (subqueue = 1),
    CONSTRAINT dead_letters_state_check CHECK (state IN (0, 1))
) WITH (fillfactor = 80);

CREATE INDEX dead_letters_receive_idx
    ON sbq.dead_letters (queue_id, subqueue, state, sequence_number);
/* retention (dead_letter_ttl): the oldest dead letters of a queue first */
CREATE INDEX dead_letters_age_idx ON sbq.dead_letters (queue_id, dead_lettered_at);

/*
 * How many times a message has been forwarded (forward_to, or
 * forward_dead_lettered_messages_to), NULL for never: a message is forwarded
 * at most four times in all, across its dead-letterings (0.11 on, src/forward.c).
 * Added after both tables, as the update to 0.11 adds it, so that a fresh
 * install and an updated one have their columns in the same order.
 */
ALTER TABLE sbq.messages ADD COLUMN transfer_hops smallint;
ALTER TABLE sbq.dead_letters ADD COLUMN transfer_hops smallint;

/*
 * Counters since creation. Each backend adds to its own row (shard = its
 * PGPROC number), so counting never makes two sessions wait for each other.
 */
CREATE TABLE sbq.queue_counters (
    queue_id integer NOT NULL,
    shard integer NOT NULL,
    sent bigint NOT NULL DEFAULT 0,
    received bigint NOT NULL DEFAULT 0,
    completed bigint NOT NULL DEFAULT 0,
    abandoned bigint NOT NULL DEFAULT 0,
    deferred bigint NOT NULL DEFAULT 0,
    dead_lettered bigint NOT NULL DEFAULT 0,
    expired bigint NOT NULL DEFAULT 0,
    dropped bigint NOT NULL DEFAULT 0,
    CONSTRAINT queue_counters_pkey PRIMARY KEY (queue_id, shard)
);

SELECT pg_catalog.pg_extension_config_dump('sbq.queues', '');
SELECT pg_catalog.pg_extension_config_dump('sbq.queue_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('sbq.messages', '');
SELECT pg_catalog.pg_extension_config_dump('sbq.dead_letters', '');
SELECT pg_catalog.pg_extension_config_dump('sbq.message_seq', '');
SELECT pg_catalog.pg_extension_config_dump('sbq.queue_counters', '');

/*
 * Topics and subscriptions (0.10 on, src/topics.c). A topic holds no
 * messages: a send to it stores a copy in each subscription whose rules
 * match. Its id comes from the queues' sequence, so that the tables keyed by
 * queue_id (rights, duplicate ids, counters) serve topics as well. A
 * subscription is a queue (its row in sbq.queues is named
 * '<topic>/subscriptions/<subscription>') with a row here that ties it to
 * its topic.
 */
CREATE TABLE sbq.topics (
    topic_id integer NOT NULL DEFAULT pg_catalog.nextval('sbq.queue_id_seq'),
    name text NOT NULL,
    name_key text NOT NULL,
    default_message_ttl interval,
    duplicate_detection_window interval,
    max_message_size integer NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    CONSTRAINT topics_pkey PRIMARY KEY (topic_id),
    CONSTRAINT topics_name_key_key UNIQUE (name_key)
);

CREATE TABLE sbq.subscriptions (
    queue_id integer NOT NULL,
    topic_id integer NOT NULL,
    name text NOT NULL,
    name_key text NOT NULL,
    dead_lettering_on_filter_evaluation_exceptions boolean NOT NULL,
    CONSTRAINT subscriptions_pkey PRIMARY KEY (queue_id),
    CONSTRAINT subscriptions_topic_name_key UNIQUE (topic_id, name_key)
);

/*
 * The rules of a subscription: at most one of the two filters (neither: the
 * true filter), and an action or none. Stored as the caller wrote them;
 * each backend compiles them when it first sends to the topic.
 */
CREATE TABLE sbq.rules (
    queue_id integer NOT NULL,
    name text NOT NULL,
    name_key text NOT NULL,
    sql_filter text,
    correlation_filter jsonb,
    action text,
    created_at timestamptz NOT NULL,
    CONSTRAINT rules_pkey PRIMARY KEY (queue_id, name_key),
    CONSTRAINT rules_one_filter CHECK (sql_filter IS NULL OR correlation_filter IS NULL)
);

/*
 * A scheduled send to a topic returns the topic's sequence number; its
 * copies have their own. This maps the one to the others, for
 * sbq_cancel_scheduled on the topic.
 */
CREATE TABLE sbq.topic_scheduled (
    topic_id integer NOT NULL,
    topic_sequence_number bigint NOT NULL,
    sequence_number bigint NOT NULL,
    CONSTRAINT topic_scheduled_pkey PRIMARY KEY (topic_sequence_number, sequence_number)
);

SELECT pg_catalog.pg_extension_config_dump('sbq.topics', '');
SELECT pg_catalog.pg_extension_config_dump('sbq.subscriptions', '');
SELECT pg_catalog.pg_extension_config_dump('sbq.rules', '');
SELECT pg_catalog.pg_extension_config_dump('sbq.topic_scheduled', '');

/* A fresh lock token for a message: random bits plus the sequence number. */
CREATE FUNCTION sbq.new_lock_token(bigint) RETURNS uuid
    AS 'MODULE_PATHNAME', 'sbq_new_lock_token'
    LANGUAGE C VOLATILE STRICT PARALLEL SAFE;
REVOKE ALL ON FUNCTION sbq.new_lock_token(bigint) FROM PUBLIC;

/*
 * Message locks kept in shared memory ("leases", src/lease.c): with sbqueue
 * preloaded, a peek-lock receive locks its messages there and writes nothing
 * to sbq.messages. These functions let the statements of the storage files and
 * the views see them; without the preload there are no leases and they say
 * so (free, a slot always taken, no lock, nothing pending).
 */
CREATE FUNCTION sbq.lease_free(bigint, timestamptz, xid, timestamptz) RETURNS boolean
    AS 'MODULE_PATHNAME', 'sbq_lease_free_sql'
    LANGUAGE C VOLATILE PARALLEL UNSAFE COST 100;
CREATE FUNCTION sbq.lease_slot(bigint) RETURNS boolean
    AS 'MODULE_PATHNAME', 'sbq_lease_slot_sql'
    LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE COST 1000;
REVOKE ALL ON FUNCTION sbq.lease_slot(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION sbq.lease_free(bigint, timestamptz, xid, timestamptz) FROM PUBLIC;
CREATE FUNCTION sbq.lease_until(bigint) RETURNS timestamptz
    AS 'MODULE_PATHNAME', 'sbq_lease_until_sql'
    LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
CREATE FUNCTION sbq.lease_count(bigint) RETURNS integer
    AS 'MODULE_PATHNAME', 'sbq_lease_count_sql'
    LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
CREATE FUNCTION sbq.lease_pending_received(integer) RETURNS bigint
    AS 'MODULE_PATHNAME', 'sbq_lease_pending_sql'
    LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

/*
 * Counts gathered in shared memory and not stored in sbq.queue_counters yet
 * (src/qstate.c), for sbq_queue_stats: an array in the column order of
 * sbq.queue_counters. The first argument is the OID of sbq.queues.
 */
CREATE FUNCTION sbq.pending_counts(oid, integer) RETURNS bigint[]
    AS 'MODULE_PATHNAME', 'sbq_pending_counts_sql'
    LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

/*
 * Time to live: expiring messages are found through this index, which lock
 * changes never touch (expires_at stays as it is). Its "subqueue = 0" dates
 * from when dead letters shared the table; it now holds for every row.
 */
CREATE INDEX messages_expiry_idx ON sbq.messages (queue_id, expires_at)
    WHERE expires_at IS NOT NULL AND subqueue = 0;

/* Scheduled messages, by the time they become due. */
CREATE INDEX messages_scheduled_idx ON sbq.messages (queue_id, scheduled_enqueue_time)
    WHERE state = 2;

/*
 * Duplicate detection history: the message ids sent to a queue with a
 * duplicate_detection_window, with the sequence number of the first message
 * and when it was sent. sbq_maintain() forgets entries older than the window.
 */
CREATE TABLE sbq.duplicate_ids (
    queue_id integer NOT NULL,
    message_id text NOT NULL,
    sequence_number bigint NOT NULL,
    sent_at timestamptz NOT NULL,
    CONSTRAINT duplicate_ids_pkey PRIMARY KEY (queue_id, message_id)
);
CREATE INDEX duplicate_ids_sent_at_idx ON sbq.duplicate_ids (queue_id, sent_at);

/*
 * Rights on queues (sbq_grant, sbq_revoke; src/rights.c): one row per queue
 * and role, the rights as bits (1 send, 2 listen, 4 manage). Role 0 ('-') is
 * PUBLIC. The role is a regrole so that pg_dump writes its name and a
 * restore finds the role by name.
 */
CREATE TABLE sbq.rights (
    queue_id integer NOT NULL,
    role regrole NOT NULL,
    rights smallint NOT NULL CHECK (rights > 0 AND rights < 8),
    CONSTRAINT rights_pkey PRIMARY KEY (queue_id, role)
);
/* the rights a role holds, for what keeps it from being dropped (src/rights.c) */
CREATE INDEX rights_role_idx ON sbq.rights (role);

/*
 * What DROP ROLE names when a role still holds rights: each such role has a
 * privilege dependency of this empty view (src/rights.c). Nobody is meant to
 * grant anything on it; PUBLIC may read it (it shows nothing), so that DROP
 * OWNED by a role revokes nothing here instead of failing.
 */
CREATE VIEW sbq.queue_rights WITH (security_barrier) AS SELECT NULL::regrole AS role WHERE false;
/*
 * Owned by the bootstrap superuser, whom nobody can drop or take objects
 * from: PostgreSQL drops a role's privilege dependency on an object that
 * becomes the role's own, so ownership that moved (REASSIGN OWNED) to a role
 * with rights and away again would leave it droppable.
 */
DO $$
BEGIN
    EXECUTE pg_catalog.format('ALTER VIEW sbq.queue_rights OWNER TO %I',
        (SELECT r.rolname FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) 10));
END
$$;
SELECT pg_catalog.pg_extension_config_dump('sbq.rights', '');
SELECT pg_catalog.pg_extension_config_dump('sbq.duplicate_ids', '');

/* ---------------------------------------------------------------- types */

/*
 * Sessions of the queues that require them (src/session.c): one row per
 * session that has messages, state or a holder. session_key numbers the row;
 * a session token carries it (as a lock token carries its message's sequence
 * number). With sbqueue preloaded, a session's lock lives in shared memory
 * (src/session_mem.c) and its row only says who the session is. Without it,
 * a session is held while session_token is set, locked_until has not passed
 * and locked_boot is sbq.session_boot(), when the running server made its
 * shared memory (a crash or a restart loses every session lock); lock_min
 * and lock_max bound the sequence numbers the holder has locked, where a
 * release or an expiry looks for its message locks. ready_seq puts the
 * session in line for accept-next (sessions_ready_idx) while it may have
 * available messages. state is the session state the holder keeps (NULL:
 * none).
 */
CREATE SEQUENCE sbq.session_seq AS bigint;
CREATE TABLE sbq.sessions (
    session_key bigint NOT NULL DEFAULT pg_catalog.nextval('sbq.session_seq'),
    queue_id integer NOT NULL,
    ready_seq bigint,
    session_token uuid,
    locked_until timestamptz,
    locked_boot timestamptz,
    lock_min bigint,
    lock_max bigint,
    last_updated timestamptz NOT NULL,
    session_id text NOT NULL,
    state bytea,
    CONSTRAINT sessions_pkey PRIMARY KEY (session_key),
    CONSTRAINT sessions_queue_session_key UNIQUE (queue_id, session_id)
);
ALTER SEQUENCE sbq.session_seq OWNED BY sbq.sessions.session_key;
CREATE INDEX sessions_ready_idx ON sbq.sessions (queue_id, ready_seq)
    WHERE ready_seq IS NOT NULL;
/*
 * held sessions by the shared memory their lock was taken in, then by expiry:
 * maintenance and accept find those whose lock ran out or was lost
 */
CREATE INDEX sessions_held_idx ON sbq.sessions (queue_id, locked_boot, locked_until)
    WHERE session_token IS NOT NULL;
/* a session's messages in sequence order, by state */
CREATE INDEX messages_session_idx ON sbq.messages (queue_id, session_id, state, sequence_number)
    WHERE session_id IS NOT NULL;
SELECT pg_catalog.pg_extension_config_dump('sbq.sessions', '');
SELECT pg_catalog.pg_extension_config_dump('sbq.session_seq', '');
/*
 * When the shared memory that session locks are valid in was made (src/shmem.c):
 * what a session lock is stamped with, for sbq_queue_stats.
 */
CREATE FUNCTION sbq.session_boot() RETURNS timestamptz
    AS 'MODULE_PATHNAME', 'sbq_session_boot_sql'
    LANGUAGE C VOLATILE PARALLEL SAFE;
/*
 * The expiry of the lock of the session session_key when it is kept in shared
 * memory (src/session_mem.c, 0.8 on; NULL: none there), for sbq_queue_stats.
 */
CREATE FUNCTION sbq.session_until(bigint) RETURNS timestamptz
    AS 'MODULE_PATHNAME', 'sbq_session_until_sql'
    LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

CREATE TYPE sbq_queue_properties AS (
    queue text,
    lock_duration interval,
    max_delivery_count integer,
    default_message_ttl interval,
    dead_lettering_on_message_expiration boolean,
    duplicate_detection_window interval,
    requires_session boolean,
    forward_to text,
    forward_dead_lettered_messages_to text,
    max_message_size integer,
    created_at timestamptz,
    updated_at timestamptz,
    dead_letter_ttl interval,
    retry_delay interval,
    retry_backoff boolean,
    max_retry_delay interval
);

CREATE TYPE sbq_message AS (
    sequence_number bigint,
    message_id text,
    lock_token uuid,
    locked_until timestamptz,
    delivery_count integer,
    enqueued_time timestamptz,
    scheduled_enqueue_time timestamptz,
    expires_at timestamptz,
    time_to_live interval,
    state text,
    session_id text,
    correlation_id text,
    subject text,
    content_type text,
    reply_to text,
    reply_to_session_id text,
    to_address text,
    application_properties jsonb,
    body bytea,
    dead_letter_reason text,
    dead_letter_error_description text,
    dead_letter_source text
);

/* ---------------------------------------------------- queue management */

CREATE FUNCTION sbq_create_queue(
    queue text,
    lock_duration interval DEFAULT '30 seconds',
    max_delivery_count integer DEFAULT 10,
    default_message_ttl interval DEFAULT NULL,
    dead_lettering_on_message_expiration boolean DEFAULT false,
    duplicate_detection_window interval DEFAULT NULL,
    requires_session boolean DEFAULT false,
    forward_to text DEFAULT NULL,
    forward_dead_lettered_messages_to text DEFAULT NULL,
    max_message_size integer DEFAULT 1048576,
    dead_letter_ttl interval DEFAULT NULL,
    retry_delay interval DEFAULT NULL,
    retry_backoff boolean DEFAULT false,
    max_retry_delay interval DEFAULT NULL)
    RETURNS sbq_queue_properties
    AS 'MODULE_PATHNAME', 'sbq_create_queue'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_update_queue(
    queue text,
    lock_duration interval DEFAULT NULL,
    max_delivery_count integer DEFAULT NULL,
    default_message_ttl interval DEFAULT NULL,
    dead_lettering_on_message_expiration boolean DEFAULT NULL,
    duplicate_detection_window interval DEFAULT NULL,
    requires_session boolean DEFAULT NULL,
    forward_to text DEFAULT NULL,
    forward_dead_lettered_messages_to text DEFAULT NULL,
    max_message_size integer DEFAULT NULL,
    dead_letter_ttl interval DEFAULT NULL,
    retry_delay interval DEFAULT NULL,
    retry_backoff boolean DEFAULT NULL,
    max_retry_delay interval DEFAULT NULL)
    RETURNS sbq_queue_properties
    AS 'MODULE_PATHNAME', 'sbq_update_queue'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_delete_queue(queue text) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_delete_queue'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_purge_queue(queue text) RETURNS bigint
    AS 'MODULE_PATHNAME', 'sbq_purge_queue'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_get_queue(queue text) RETURNS sbq_queue_properties
    AS 'MODULE_PATHNAME', 'sbq_get_queue'
    LANGUAGE C STABLE PARALLEL SAFE;

/*
 * Creating queues is for the extension's owner and the roles it grants
 * EXECUTE on sbq_create_queue; the creator holds manage on the queue. Every
 * other function is PUBLIC's and checks the caller's rights on the queue.
 */
REVOKE ALL ON FUNCTION sbq_create_queue(text, interval, integer, interval, boolean, interval,
    boolean, text, text, integer, interval, interval, boolean, interval) FROM PUBLIC;
/* PUBLIC's by default; said here as the update from 0.4 says it, to the same effect */
GRANT EXECUTE ON FUNCTION sbq_update_queue(text, interval, integer, interval, boolean, interval,
    boolean, text, text, integer, interval, interval, boolean, interval) TO PUBLIC;
GRANT EXECUTE ON FUNCTION sbq_delete_queue(text) TO PUBLIC;
GRANT EXECUTE ON FUNCTION sbq_purge_queue(text) TO PUBLIC;

/* --------------------------------------------- topics and subscriptions */

CREATE TYPE sbq_topic_properties AS (
    topic text,
    default_message_ttl interval,
    duplicate_detection_window interval,
    max_message_size integer,
    created_at timestamptz,
    updated_at timestamptz
);

CREATE TYPE sbq_subscription_properties AS (
    topic text,
    subscription text,
    lock_duration interval,
    max_delivery_count integer,
    default_message_ttl interval,
    dead_lettering_on_message_expiration boolean,
    duplicate_detection_window interval,
    requires_session boolean,
    forward_to text,
    forward_dead_lettered_messages_to text,
    dead_lettering_on_filter_evaluation_exceptions boolean,
    created_at timestamptz,
    updated_at timestamptz,
    dead_letter_ttl interval,
    retry_delay interval,
    retry_backoff boolean,
    max_retry_delay interval
);

CREATE FUNCTION sbq_create_topic(
    topic text,
    default_message_ttl interval DEFAULT NULL,
    duplicate_detection_window interval DEFAULT NULL,
    max_message_size integer DEFAULT 1048576)
    RETURNS sbq_topic_properties
    AS 'MODULE_PATHNAME', 'sbq_create_topic'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_update_topic(
    topic text,
    default_message_ttl interval DEFAULT NULL,
    duplicate_detection_window interval DEFAULT NULL,
    max_message_size integer DEFAULT NULL)
    RETURNS sbq_topic_properties
    AS 'MODULE_PATHNAME', 'sbq_update_topic'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_delete_topic(topic text) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_delete_topic'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_get_topic(topic text) RETURNS sbq_topic_properties
    AS 'MODULE_PATHNAME', 'sbq_get_topic'
    LANGUAGE C STABLE PARALLEL SAFE;

CREATE FUNCTION sbq_create_subscription(
    topic text,
    subscription text,
    lock_duration interval DEFAULT '30 seconds',
    max_delivery_count integer DEFAULT 10,
    default_message_ttl interval DEFAULT NULL,
    dead_lettering_on_message_expiration boolean DEFAULT false,
    duplicate_detection_window interval DEFAULT NULL,
    requires_session boolean DEFAULT false,
    forward_to text DEFAULT NULL,
    forward_dead_lettered_messages_to text DEFAULT NULL,
    dead_lettering_on_filter_evaluation_exceptions boolean DEFAULT true,
    dead_letter_ttl interval DEFAULT NULL,
    retry_delay interval DEFAULT NULL,
    retry_backoff boolean DEFAULT false,
    max_retry_delay interval DEFAULT NULL)
    RETURNS sbq_subscription_properties
    AS 'MODULE_PATHNAME', 'sbq_create_subscription'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_update_subscription(
    topic text,
    subscription text,
    lock_duration interval DEFAULT NULL,
    max_delivery_count integer DEFAULT NULL,
    default_message_ttl interval DEFAULT NULL,
    dead_lettering_on_message_expiration boolean DEFAULT NULL,
    duplicate_detection_window interval DEFAULT NULL,
    requires_session boolean DEFAULT NULL,
    forward_to text DEFAULT NULL,
    forward_dead_lettered_messages_to text DEFAULT NULL,
    dead_lettering_on_filter_evaluation_exceptions boolean DEFAULT NULL,
    dead_letter_ttl interval DEFAULT NULL,
    retry_delay interval DEFAULT NULL,
    retry_backoff boolean DEFAULT NULL,
    max_retry_delay interval DEFAULT NULL)
    RETURNS sbq_subscription_properties
    AS 'MODULE_PATHNAME', 'sbq_update_subscription'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_delete_subscription(topic text, subscription text) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_delete_subscription'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_get_subscription(topic text, subscription text)
    RETURNS sbq_subscription_properties
    AS 'MODULE_PATHNAME', 'sbq_get_subscription'
    LANGUAGE C STABLE PARALLEL SAFE;

CREATE FUNCTION sbq_add_rule(
    topic text,
    subscription text,
    rule text,
    sql_filter text DEFAULT NULL,
    correlation_filter jsonb DEFAULT NULL,
    action text DEFAULT NULL)
    RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_add_rule'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_remove_rule(topic text, subscription text, rule text) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_remove_rule'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

/*
 * Creating topics is for the extension's owner and the roles it grants
 * EXECUTE on sbq_create_topic, as for queues; a role with manage on a topic
 * creates its subscriptions and rules.
 */
REVOKE ALL ON FUNCTION sbq_create_topic(text, interval, interval, integer) FROM PUBLIC;

/* ---------------------------------------------------------------- rights */

CREATE FUNCTION sbq_grant(entity text, role name, rights text[]) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_grant'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_revoke(entity text, role name, rights text[]) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_revoke'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

/* ------------------------------------------------------------- sending */

CREATE FUNCTION sbq_send(
    queue text,
    body text,
    message_id text DEFAULT NULL,
    session_id text DEFAULT NULL,
    correlation_id text DEFAULT NULL,
    subject text DEFAULT NULL,
    content_type text DEFAULT NULL,
    reply_to text DEFAULT NULL,
    reply_to_session_id text DEFAULT NULL,
    to_address text DEFAULT NULL,
    time_to_live interval DEFAULT NULL,
    scheduled_enqueue_time timestamptz DEFAULT NULL,
    application_properties jsonb DEFAULT NULL)
    RETURNS bigint
    AS 'MODULE_PATHNAME', 'sbq_send_text'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_send(
    queue text,
    body bytea,
    message_id text DEFAULT NULL,
    session_id text DEFAULT NULL,
    correlation_id text DEFAULT NULL,
    subject text DEFAULT NULL,
    content_type text DEFAULT NULL,
    reply_to text DEFAULT NULL,
    reply_to_session_id text DEFAULT NULL,
    to_address text DEFAULT NULL,
    time_to_live interval DEFAULT NULL,
    scheduled_enqueue_time timestamptz DEFAULT NULL,
    application_properties jsonb DEFAULT NULL)
    RETURNS bigint
    AS 'MODULE_PATHNAME', 'sbq_send_bytea'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_send(
    queue text,
    body jsonb,
    message_id text DEFAULT NULL,
    session_id text DEFAULT NULL,
    correlation_id text DEFAULT NULL,
    subject text DEFAULT NULL,
    content_type text DEFAULT NULL,
    reply_to text DEFAULT NULL,
    reply_to_session_id text DEFAULT NULL,
    to_address text DEFAULT NULL,
    time_to_live interval DEFAULT NULL,
    scheduled_enqueue_time timestamptz DEFAULT NULL,
    application_properties jsonb DEFAULT NULL)
    RETURNS bigint
    AS 'MODULE_PATHNAME', 'sbq_send_jsonb'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_send_batch(
    queue text,
    bodies text[],
    message_id text DEFAULT NULL,
    session_id text DEFAULT NULL,
    correlation_id text DEFAULT NULL,
    subject text DEFAULT NULL,
    content_type text DEFAULT NULL,
    reply_to text DEFAULT NULL,
    reply_to_session_id text DEFAULT NULL,
    to_address text DEFAULT NULL,
    time_to_live interval DEFAULT NULL,
    scheduled_enqueue_time timestamptz DEFAULT NULL,
    application_properties jsonb DEFAULT NULL)
    RETURNS SETOF bigint
    AS 'MODULE_PATHNAME', 'sbq_send_batch_text'
    LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

CREATE FUNCTION sbq_send_batch(
    queue text,
    bodies bytea[],
    message_id text DEFAULT NULL,
    session_id text DEFAULT NULL,
    correlation_id text DEFAULT NULL,
    subject text DEFAULT NULL,
    content_type text DEFAULT NULL,
    reply_to text DEFAULT NULL,
    reply_to_session_id text DEFAULT NULL,
    to_address text DEFAULT NULL,
    time_to_live interval DEFAULT NULL,
    scheduled_enqueue_time timestamptz DEFAULT NULL,
    application_properties jsonb DEFAULT NULL)
    RETURNS SETOF bigint
    AS 'MODULE_PATHNAME', 'sbq_send_batch_bytea'
    LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

CREATE FUNCTION sbq_send_batch(
    queue text,
    bodies jsonb[],
    message_id text DEFAULT NULL,
    session_id text DEFAULT NULL,
    correlation_id text DEFAULT NULL,
    subject text DEFAULT NULL,
    content_type text DEFAULT NULL,
    reply_to text DEFAULT NULL,
    reply_to_session_id text DEFAULT NULL,
    to_address text DEFAULT NULL,
    time_to_live interval DEFAULT NULL,
    scheduled_enqueue_time timestamptz DEFAULT NULL,
    application_properties jsonb DEFAULT NULL)
    RETURNS SETOF bigint
    AS 'MODULE_PATHNAME', 'sbq_send_batch_jsonb'
    LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

/*
 * A message to send in a batch with properties of its own. sbq_new_message()
 * makes one from a body of any of the three types, with sbq_send's defaults.
 */
CREATE TYPE sbq_new_message AS (
    body bytea,
    message_id text,
    session_id text,
    correlation_id text,
    subject text,
    content_type text,
    reply_to text,
    reply_to_session_id text,
    to_address text,
    time_to_live interval,
    scheduled_enqueue_time timestamptz,
    application_properties jsonb
);

CREATE FUNCTION sbq_new_message(
    body text,
    message_id text DEFAULT NULL,
    session_id text DEFAULT NULL,
    correlation_id text DEFAULT NULL,
    subject text DEFAULT NULL,
    content_type text DEFAULT NULL,
    reply_to text DEFAULT NULL,
    reply_to_session_id text DEFAULT NULL,
    to_address text DEFAULT NULL,
    time_to_live interval DEFAULT NULL,
    scheduled_enqueue_time timestamptz DEFAULT NULL,
    application_properties jsonb DEFAULT NULL)
    RETURNS sbq_new_message
    AS 'MODULE_PATHNAME', 'sbq_new_message_text'
    LANGUAGE C STABLE PARALLEL SAFE;

CREATE FUNCTION sbq_new_message(
    body bytea,
    message_id text DEFAULT NULL,
    session_id text DEFAULT NULL,
    correlation_id text DEFAULT NULL,
    subject text DEFAULT NULL,
    content_type text DEFAULT NULL,
    reply_to text DEFAULT NULL,
    reply_to_session_id text DEFAULT NULL,
    to_address text DEFAULT NULL,
    time_to_live interval DEFAULT NULL,
    scheduled_enqueue_time timestamptz DEFAULT NULL,
    application_properties jsonb DEFAULT NULL)
    RETURNS sbq_new_message
    AS 'MODULE_PATHNAME', 'sbq_new_message_bytea'
    LANGUAGE C STABLE PARALLEL SAFE;

CREATE FUNCTION sbq_new_message(
    body jsonb,
    message_id text DEFAULT NULL,
    session_id text DEFAULT NULL,
    correlation_id text DEFAULT NULL,
    subject text DEFAULT NULL,
    content_type text DEFAULT NULL,
    reply_to text DEFAULT NULL,
    reply_to_session_id text DEFAULT NULL,
    to_address text DEFAULT NULL,
    time_to_live interval DEFAULT NULL,
    scheduled_enqueue_time timestamptz DEFAULT NULL,
    application_properties jsonb DEFAULT NULL)
    RETURNS sbq_new_message
    AS 'MODULE_PATHNAME', 'sbq_new_message_jsonb'
    LANGUAGE C STABLE PARALLEL SAFE;

CREATE FUNCTION sbq_send_batch(queue text, messages sbq_new_message[])
    RETURNS SETOF bigint
    AS 'MODULE_PATHNAME', 'sbq_send_batch_messages'
    LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

/*
 * Trying a rule out on a message, as a send to a topic would apply it: the
 * filter's value (NULL: unknown, no match), the message after the action.
 * An error of the filter or action is raised (22023), with the reason a
 * subscription would dead-letter the message with. They touch no table.
 */
CREATE FUNCTION sbq_test_filter(sql_filter text, message sbq_new_message) RETURNS boolean
    AS 'MODULE_PATHNAME', 'sbq_test_filter'
    LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE FUNCTION sbq_test_action(action text, message sbq_new_message) RETURNS sbq_new_message
    AS 'MODULE_PATHNAME', 'sbq_test_action'
    LANGUAGE C VOLATILE PARALLEL SAFE;

/* ----------------------------------------------------------- receiving */

CREATE FUNCTION sbq_receive(
    queue text,
    max_messages integer DEFAULT 1,
    max_wait interval DEFAULT '0',
    receive_mode text DEFAULT 'peek_lock')
    RETURNS SETOF sbq_message
    AS 'MODULE_PATHNAME', 'sbq_receive'
    LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10;

CREATE FUNCTION sbq_peek(
    queue text,
    max_messages integer DEFAULT 1,
    from_sequence_number bigint DEFAULT NULL)
    RETURNS SETOF sbq_message
    AS 'MODULE_PATHNAME', 'sbq_peek'
    LANGUAGE C STABLE PARALLEL SAFE ROWS 10;

/* ------------------------------------------------------------ settling */

CREATE FUNCTION sbq_complete(queue text, lock_token uuid) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_complete'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

/* an untyped token (literal or driver parameter) resolves to this one */
CREATE FUNCTION sbq_complete(queue text, lock_token text) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_complete_text'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_complete(queue text, lock_tokens uuid[]) RETURNS integer
    AS 'MODULE_PATHNAME', 'sbq_complete_many'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_abandon(queue text, lock_token uuid,
    properties_to_modify jsonb DEFAULT NULL, delay interval DEFAULT NULL) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_abandon'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_renew(queue text, lock_token uuid) RETURNS timestamptz
    AS 'MODULE_PATHNAME', 'sbq_renew'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

/* ------------------------------------------ deferral, dead letters, maintenance */

CREATE FUNCTION sbq_cancel_scheduled(queue text, sequence_number bigint) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_cancel_scheduled'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_receive_deferred(queue text, sequence_numbers bigint[])
    RETURNS SETOF sbq_message
    AS 'MODULE_PATHNAME', 'sbq_receive_deferred'
    LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10;

CREATE FUNCTION sbq_defer(queue text, lock_token uuid,
    properties_to_modify jsonb DEFAULT NULL) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_defer'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_deadletter(queue text, lock_token uuid,
    reason text DEFAULT NULL,
    error_description text DEFAULT NULL,
    properties_to_modify jsonb DEFAULT NULL) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_deadletter'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

/*
 * Every settlement has three forms: one token (uuid), several settled all or
 * none (uuid[]), and a token as text, which PostgreSQL picks for an untyped
 * literal or driver parameter: one token, or several in array syntax.
 */
CREATE FUNCTION sbq_abandon(queue text, lock_token text,
    properties_to_modify jsonb DEFAULT NULL, delay interval DEFAULT NULL) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_abandon_text'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_abandon(queue text, lock_tokens uuid[],
    properties_to_modify jsonb DEFAULT NULL, delay interval DEFAULT NULL) RETURNS integer
    AS 'MODULE_PATHNAME', 'sbq_abandon_many'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_defer(queue text, lock_token text,
    properties_to_modify jsonb DEFAULT NULL) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_defer_text'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_defer(queue text, lock_tokens uuid[],
    properties_to_modify jsonb DEFAULT NULL) RETURNS integer
    AS 'MODULE_PATHNAME', 'sbq_defer_many'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_deadletter(queue text, lock_token text,
    reason text DEFAULT NULL,
    error_description text DEFAULT NULL,
    properties_to_modify jsonb DEFAULT NULL) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_deadletter_text'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_deadletter(queue text, lock_tokens uuid[],
    reason text DEFAULT NULL,
    error_description text DEFAULT NULL,
    properties_to_modify jsonb DEFAULT NULL) RETURNS integer
    AS 'MODULE_PATHNAME', 'sbq_deadletter_many'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_renew(queue text, lock_token text) RETURNS timestamptz
    AS 'MODULE_PATHNAME', 'sbq_renew_text'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

/* the earliest of the new expiries (NULL for no token) */
CREATE FUNCTION sbq_renew(queue text, lock_tokens uuid[]) RETURNS timestamptz
    AS 'MODULE_PATHNAME', 'sbq_renew_many'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

/*
 * Settle what can be settled of lock_tokens and say, per token in order, what
 * became of its message: completed, abandoned, deferred, dead_lettered,
 * expired, renewed, or lock_lost (nothing changed for it).
 */
CREATE FUNCTION sbq_settle(queue text, lock_tokens uuid[], disposition text,
    reason text DEFAULT NULL,
    error_description text DEFAULT NULL,
    properties_to_modify jsonb DEFAULT NULL,
    delay interval DEFAULT NULL)
    RETURNS TABLE(lock_token uuid, outcome text, locked_until timestamptz)
    AS 'MODULE_PATHNAME', 'sbq_settle'
    LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

CREATE FUNCTION sbq_resubmit(queue text, sequence_numbers bigint[] DEFAULT NULL)
    RETURNS integer
    AS 'MODULE_PATHNAME', 'sbq_resubmit'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

/* One maintenance pass over this database; for the worker, pg_cron or an admin. */
CREATE FUNCTION sbq_maintain() RETURNS jsonb
    AS 'MODULE_PATHNAME', 'sbq_maintain'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION sbq_maintain() FROM PUBLIC;

/*
 * The maintenance workers of the whole server (src/registry.c): a row per
 * database that has sbqueue, or that the launcher has yet to look at, with
 * the worker running there, its last pass, when the next is due, and when
 * shared memory saw a lock expire or a scheduled message come due there; of
 * the databases the caller may connect to (all of them for pg_read_all_stats).
 * No rows without sbqueue in shared_preload_libraries.
 */
CREATE FUNCTION sbq_maintenance_status(
    OUT database name, OUT database_id oid, OUT state text, OUT worker_pid integer,
    OUT last_pass_started timestamptz, OUT last_pass_duration interval,
    OUT last_pass_result text, OUT passes bigint, OUT next_pass_due timestamptz,
    OUT work_due timestamptz)
    RETURNS SETOF record
    AS 'MODULE_PATHNAME', 'sbq_maintenance_status_sql'
    LANGUAGE C VOLATILE PARALLEL RESTRICTED ROWS 10;

/* ------------------------------------------------------------ sessions */

CREATE FUNCTION sbq_accept_session(queue text, session_id text DEFAULT NULL,
    max_wait interval DEFAULT '0')
    RETURNS TABLE(session_id text, session_token uuid, locked_until timestamptz)
    AS 'MODULE_PATHNAME', 'sbq_accept_session'
    LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 1;

CREATE FUNCTION sbq_receive_session(queue text, session_token uuid,
    max_messages integer DEFAULT 1, max_wait interval DEFAULT '0')
    RETURNS SETOF sbq_message
    AS 'MODULE_PATHNAME', 'sbq_receive_session'
    LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10;

/* the deferred messages of a session, for its holder */
CREATE FUNCTION sbq_receive_deferred(queue text, sequence_numbers bigint[],
    session_token uuid)
    RETURNS SETOF sbq_message
    AS 'MODULE_PATHNAME', 'sbq_receive_deferred_session'
    LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10;

CREATE FUNCTION sbq_renew_session(queue text, session_token uuid) RETURNS timestamptz
    AS 'MODULE_PATHNAME', 'sbq_renew_session'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_get_session_state(queue text, session_token uuid) RETURNS bytea
    AS 'MODULE_PATHNAME', 'sbq_get_session_state'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_set_session_state(queue text, session_token uuid, state bytea)
    RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_set_session_state'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_release_session(queue text, session_token uuid) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_release_session'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION sbq_list_sessions(queue text)
    RETURNS TABLE(session_id text, has_state boolean, available_count bigint,
                  locked_until timestamptz, last_updated timestamptz)
    AS 'MODULE_PATHNAME', 'sbq_list_sessions'
    LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

/* --------------------------------------------------------------- views */

/*
 * The views show each caller the queues it holds a right on. They are security
 * barriers: a condition of the caller's query (which may call a function that
 * leaks what it sees) is applied only to the rows the view lets through.
 *
 * Each is defined as sbq.node_<name>, the rows of this node's tables, and
 * shown as sbq_<name>: on one server with the node view's definition
 * (sbq.define_views() below copies it over the view made here); with the tables
 * distributed on Citus (0.14), the node view of every shard group gathered
 * (sbq.cluster_view(), src/dist_views.c), which runs its definition with
 * each sbq.<table> named as the group's shard: every table in a node view
 * has an alias, by which its columns are named.
 */
CREATE VIEW sbq.node_queues WITH (security_barrier) AS
    SELECT q.name AS queue, q.lock_duration, q.max_delivery_count, q.default_message_ttl,
           q.dead_lettering_on_message_expiration, q.duplicate_detection_window,
           q.requires_session, q.forward_to, q.forward_dead_lettered_messages_to,
           q.max_message_size, q.created_at, q.updated_at, q.dead_letter_ttl,
           q.retry_delay, q.retry_backoff, q.max_retry_delay
      FROM sbq.queues q
     WHERE pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                    WHERE c.oid OPERATOR(pg_catalog.=) 'sbq.queues'::pg_catalog.regclass),
                                   'USAGE')
        OR EXISTS (SELECT FROM sbq.rights r
                    WHERE r.queue_id OPERATOR(pg_catalog.=) q.queue_id
                      AND (r.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                           OR pg_catalog.pg_has_role(r.role, 'USAGE')));
CREATE VIEW sbq_queues WITH (security_barrier) AS SELECT * FROM sbq.node_queues;

/*
 * The five counts split the messages without overlap, by where each row is
 * and what it holds, as sbq_peek shows them: the rows of sbq.messages are
 * scheduled (state 2, even when due: until it is activated), locked (a valid
 * lock in shared memory or in the row), deferred or active; the rows of
 * sbq.dead_letters are the dead letters. A message is counted as a dead
 * letter once it has moved, not before: one whose lock ran out on its last
 * delivery, or whose time to live has passed, is active (or deferred) until
 * a receive or maintenance moves it. Locks are judged at the start of the
 * statement (statement_timestamp()), as sbq_peek judges them, so that one
 * statement that reads both sees one instant; an uncommitted receive of
 * another session locks nothing yet. ("subqueue = 0" holds for every row
 * now; it keeps a snapshot older than the update from 0.3, which still sees
 * the dead letters there, from counting them as active.)
 */
CREATE VIEW sbq.node_queue_stats WITH (security_barrier) AS
    SELECT q.name AS queue,
           coalesce(s.active_count, 0) AS active_count,
           coalesce(s.locked_count, 0) AS locked_count,
           coalesce(s.deferred_count, 0) AS deferred_count,
           coalesce(s.scheduled_count, 0) AS scheduled_count,
           dl.n AS dead_letter_count,
           s.oldest_enqueued_time,
           (coalesce(c.sent, 0) OPERATOR(pg_catalog.+) pc.p[1])::bigint AS sent,
           (coalesce(c.received, 0) OPERATOR(pg_catalog.+) pc.p[2] OPERATOR(pg_catalog.+)
               sbq.lease_pending_received(q.queue_id))::bigint AS received,
           (coalesce(c.completed, 0) OPERATOR(pg_catalog.+) pc.p[3])::bigint AS completed,
           (coalesce(c.abandoned, 0) OPERATOR(pg_catalog.+) pc.p[4])::bigint AS abandoned,
           (coalesce(c.deferred, 0) OPERATOR(pg_catalog.+) pc.p[5])::bigint AS deferred,
           (coalesce(c.dead_lettered, 0) OPERATOR(pg_catalog.+) pc.p[6])::bigint AS dead_lettered,
           (coalesce(c.expired, 0) OPERATOR(pg_catalog.+) pc.p[7])::bigint AS expired,
           ss.session_count,
           ss.locked_session_count
      FROM sbq.queues q
     CROSS JOIN (SELECT pg_catalog.statement_timestamp() AS t) clk
      LEFT JOIN LATERAL (
           SELECT pg_catalog.count(*) FILTER (WHERE k.kind OPERATOR(pg_catalog.=) 'active') AS active_count,
                  pg_catalog.count(*) FILTER (WHERE k.kind OPERATOR(pg_catalog.=) 'locked') AS locked_count,
                  pg_catalog.count(*) FILTER (WHERE k.kind OPERATOR(pg_catalog.=) 'deferred') AS deferred_count,
                  pg_catalog.count(*) FILTER (WHERE k.kind OPERATOR(pg_catalog.=) 'scheduled') AS scheduled_count,
                  pg_catalog.min(k.enqueued_time) AS oldest_enqueued_time
             FROM (SELECT m.enqueued_time,
                          CASE
                            WHEN m.state OPERATOR(pg_catalog.=) 2 THEN 'scheduled'
                            -- in a session: locked by the session's lock (src/session.c).
                            -- A CASE of its own, not "= 'infinity' AND EXISTS": with
                            -- locked_until NULL (never received) the AND would still
                            -- run the EXISTS, for every such message
                            WHEN m.locked_until OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz THEN
                                CASE
                                  WHEN EXISTS (SELECT FROM sbq.sessions se
                                                WHERE se.queue_id OPERATOR(pg_catalog.=) m.queue_id
                                                  AND se.session_id OPERATOR(pg_catalog.=) m.session_id
                                                  AND se.session_token IS NOT NULL
                                                  AND se.locked_until OPERATOR(pg_catalog.>) clk.t
                                                  AND se.locked_boot OPERATOR(pg_catalog.=) sbq.session_boot())
                                       THEN 'locked'
                                  WHEN m.state OPERATOR(pg_catalog.=) 1 THEN 'deferred'
                                  ELSE 'active'
                                END
                            WHEN coalesce(sbq.lease_until(m.sequence_number), m.locked_until)
                                 OPERATOR(pg_catalog.>) clk.t THEN 'locked'
                            WHEN m.state OPERATOR(pg_catalog.=) 1 THEN 'deferred'
                            ELSE 'active'
                          END AS kind
                     FROM sbq.messages m
                    WHERE m.queue_id OPERATOR(pg_catalog.=) q.queue_id
                      AND m.subqueue OPERATOR(pg_catalog.=) 0) k
           ) s ON true
     CROSS JOIN LATERAL (
           SELECT pg_catalog.count(*) AS n FROM sbq.dead_letters d
            WHERE d.queue_id OPERATOR(pg_catalog.=) q.queue_id
           ) dl
      LEFT JOIN LATERAL (
           SELECT pg_catalog.sum(qc.sent)::bigint AS sent,
                  pg_catalog.sum(qc.received)::bigint AS received,
                  pg_catalog.sum(qc.completed)::bigint AS completed,
                  pg_catalog.sum(qc.abandoned)::bigint AS abandoned,
                  pg_catalog.sum(qc.deferred)::bigint AS deferred,
                  pg_catalog.sum(qc.dead_lettered)::bigint AS dead_lettered,
                  pg_catalog.sum(qc.expired)::bigint AS expired
             FROM sbq.queue_counters qc
            WHERE qc.queue_id OPERATOR(pg_catalog.=) q.queue_id
           ) c ON true
     CROSS JOIN LATERAL (
           SELECT sbq.pending_counts('sbq.queues'::pg_catalog.regclass, q.queue_id) AS p
           ) pc
     CROSS JOIN LATERAL (
           SELECT pg_catalog.count(*) AS session_count,
                  pg_catalog.count(*) FILTER (
                      WHERE (se.session_token IS NOT NULL
                             AND se.locked_until OPERATOR(pg_catalog.>) clk.t
                             AND se.locked_boot OPERATOR(pg_catalog.=) sbq.session_boot())
                         OR sbq.session_until(se.session_key) OPERATOR(pg_catalog.>) clk.t
                  ) AS locked_session_count
             FROM sbq.sessions se
            WHERE se.queue_id OPERATOR(pg_catalog.=) q.queue_id
           ) ss
     WHERE pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                    WHERE c.oid OPERATOR(pg_catalog.=) 'sbq.queues'::pg_catalog.regclass),
                                   'USAGE')
        OR EXISTS (SELECT FROM sbq.rights r
                    WHERE r.queue_id OPERATOR(pg_catalog.=) q.queue_id
                      AND (r.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                           OR pg_catalog.pg_has_role(r.role, 'USAGE')));
CREATE VIEW sbq_queue_stats WITH (security_barrier) AS SELECT * FROM sbq.node_queue_stats;

/*
 * Who holds which rights on which queue: the rows of the queues the caller
 * manages, and the caller's own (those of the roles whose privileges it
 * has, PUBLIC's included); every row for the extension's owner.
 */
CREATE VIEW sbq.node_rights WITH (security_barrier) AS
    SELECT q.name AS entity,
           CASE WHEN r.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                THEN 'public'::pg_catalog.name
                ELSE coalesce((SELECT a.rolname FROM pg_catalog.pg_roles a
                                WHERE a.oid OPERATOR(pg_catalog.=) r.role::pg_catalog.oid),
                              r.role::pg_catalog.text::pg_catalog.name)
           END AS role,
           ARRAY(SELECT v.name FROM (VALUES (1, 'send'::pg_catalog.text), (2, 'listen'),
                                            (4, 'manage')) v(bit, name)
                  WHERE (r.rights OPERATOR(pg_catalog.&) v.bit::pg_catalog.int2)
                        OPERATOR(pg_catalog.<>) 0::pg_catalog.int2
                  ORDER BY v.bit) AS rights
      FROM sbq.rights r
      JOIN (SELECT qq.queue_id, qq.name FROM sbq.queues qq
            UNION ALL
            SELECT tt.topic_id, tt.name FROM sbq.topics tt) q
        ON q.queue_id OPERATOR(pg_catalog.=) r.queue_id
     WHERE pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                    WHERE c.oid OPERATOR(pg_catalog.=) 'sbq.queues'::pg_catalog.regclass),
                                   'USAGE')
        OR r.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
        OR pg_catalog.pg_has_role(r.role, 'USAGE')
        OR EXISTS (SELECT FROM sbq.rights m
                    WHERE m.queue_id OPERATOR(pg_catalog.=) r.queue_id
                      AND (m.rights OPERATOR(pg_catalog.&) 4::pg_catalog.int2)
                          OPERATOR(pg_catalog.<>) 0::pg_catalog.int2
                      AND (m.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                           OR pg_catalog.pg_has_role(m.role, 'USAGE')));
CREATE VIEW sbq_rights WITH (security_barrier) AS SELECT * FROM sbq.node_rights;

/*
 * Topics, subscriptions and rules, as the queues: each caller sees those it
 * holds a right on (a subscription and its rules also with manage on its
 * topic: a sender to a topic does not see who subscribes), the extension's
 * owner all of them.
 */
CREATE VIEW sbq.node_topics WITH (security_barrier) AS
    SELECT t.name AS topic, t.default_message_ttl, t.duplicate_detection_window,
           t.max_message_size, t.created_at, t.updated_at
      FROM sbq.topics t
     WHERE pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                    WHERE c.oid OPERATOR(pg_catalog.=) 'sbq.queues'::pg_catalog.regclass),
                                   'USAGE')
        OR EXISTS (SELECT FROM sbq.rights r
                    WHERE r.queue_id OPERATOR(pg_catalog.=) t.topic_id
                      AND (r.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                           OR pg_catalog.pg_has_role(r.role, 'USAGE')));
CREATE VIEW sbq_topics WITH (security_barrier) AS SELECT * FROM sbq.node_topics;

CREATE VIEW sbq.node_subscriptions WITH (security_barrier) AS
    SELECT t.name AS topic, s.name AS subscription, q.lock_duration, q.max_delivery_count,
           q.default_message_ttl, q.dead_lettering_on_message_expiration,
           q.duplicate_detection_window, q.requires_session, q.forward_to,
           q.forward_dead_lettered_messages_to,
           s.dead_lettering_on_filter_evaluation_exceptions, q.created_at, q.updated_at,
           q.dead_letter_ttl, q.retry_delay, q.retry_backoff, q.max_retry_delay
      FROM sbq.subscriptions s
      JOIN sbq.queues q ON q.queue_id OPERATOR(pg_catalog.=) s.queue_id
      JOIN sbq.topics t ON t.topic_id OPERATOR(pg_catalog.=) s.topic_id
     WHERE pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                    WHERE c.oid OPERATOR(pg_catalog.=) 'sbq.queues'::pg_catalog.regclass),
                                   'USAGE')
        OR EXISTS (SELECT FROM sbq.rights r
                    WHERE (r.queue_id OPERATOR(pg_catalog.=) s.queue_id
                           OR (r.queue_id OPERATOR(pg_catalog.=) s.topic_id
                               AND (r.rights OPERATOR(pg_catalog.&) 4::pg_catalog.int2)
                                   OPERATOR(pg_catalog.<>) 0::pg_catalog.int2))
                      AND (r.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                           OR pg_catalog.pg_has_role(r.role, 'USAGE')));
CREATE VIEW sbq_subscriptions WITH (security_barrier) AS SELECT * FROM sbq.node_subscriptions;

/* filter: the SQL filter, the correlation filter's JSON, or 1=1 (the true filter) */
CREATE VIEW sbq.node_rules WITH (security_barrier) AS
    SELECT t.name AS topic, s.name AS subscription, u.name AS rule,
           CASE WHEN u.sql_filter IS NOT NULL THEN 'sql'::pg_catalog.text
                WHEN u.correlation_filter IS NOT NULL THEN 'correlation'::pg_catalog.text
                ELSE 'true'::pg_catalog.text END AS filter_type,
           coalesce(u.sql_filter, u.correlation_filter::pg_catalog.text, '1=1') AS filter,
           u.action, u.created_at
      FROM sbq.rules u
      JOIN sbq.subscriptions s ON s.queue_id OPERATOR(pg_catalog.=) u.queue_id
      JOIN sbq.topics t ON t.topic_id OPERATOR(pg_catalog.=) s.topic_id
     WHERE pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                    WHERE c.oid OPERATOR(pg_catalog.=) 'sbq.queues'::pg_catalog.regclass),
                                   'USAGE')
        OR EXISTS (SELECT FROM sbq.rights r
                    WHERE (r.queue_id OPERATOR(pg_catalog.=) s.queue_id
                           OR (r.queue_id OPERATOR(pg_catalog.=) s.topic_id
                               AND (r.rights OPERATOR(pg_catalog.&) 4::pg_catalog.int2)
                                   OPERATOR(pg_catalog.<>) 0::pg_catalog.int2))
                      AND (r.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                           OR pg_catalog.pg_has_role(r.role, 'USAGE')));
CREATE VIEW sbq_rules WITH (security_barrier) AS SELECT * FROM sbq.node_rules;

/*
 * Per topic: its subscriptions, the messages sent to it (duplicates not
 * counted) and those no subscription took (dropped).
 */
CREATE VIEW sbq.node_topic_stats WITH (security_barrier) AS
    SELECT t.name AS topic,
           (SELECT pg_catalog.count(*) FROM sbq.subscriptions s
             WHERE s.topic_id OPERATOR(pg_catalog.=) t.topic_id) AS subscription_count,
           (coalesce(c.sent, 0) OPERATOR(pg_catalog.+) pc.p[1])::bigint AS sent,
           coalesce(c.dropped, 0)::bigint AS dropped
      FROM sbq.topics t
      LEFT JOIN LATERAL (
           SELECT pg_catalog.sum(k.sent) AS sent, pg_catalog.sum(k.dropped) AS dropped
             FROM sbq.queue_counters k
            WHERE k.queue_id OPERATOR(pg_catalog.=) t.topic_id) c ON true
     CROSS JOIN LATERAL (
           SELECT sbq.pending_counts('sbq.queues'::pg_catalog.regclass, t.topic_id) AS p) pc
     WHERE pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                                    WHERE c.oid OPERATOR(pg_catalog.=) 'sbq.queues'::pg_catalog.regclass),
                                   'USAGE')
        OR EXISTS (SELECT FROM sbq.rights r
                    WHERE r.queue_id OPERATOR(pg_catalog.=) t.topic_id
                      AND (r.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                           OR pg_catalog.pg_has_role(r.role, 'USAGE')));
CREATE VIEW sbq_topic_stats WITH (security_barrier) AS SELECT * FROM sbq.node_topic_stats;

/* the maintenance workers: of the databases the caller may connect to (src/registry.c) */
CREATE VIEW sbq_maintenance_status WITH (security_barrier) AS SELECT * FROM sbq_maintenance_status();

/* ------------------------------------------------------------ metrics (0.12) */

/*
 * How full the table of locks in shared memory is (src/lease.c): its
 * capacity (sbqueue.max_locks), the entries of the whole server (NULL but for
 * pg_read_all_stats), this database's share and what it holds. All 0 without
 * the preload.
 */
CREATE FUNCTION sbq_lock_table(
    OUT capacity integer, OUT in_use bigint, OUT database_share integer,
    OUT database_in_use integer)
    RETURNS record
    AS 'MODULE_PATHNAME', 'sbq_lock_table_sql'
    LANGUAGE C VOLATILE PARALLEL RESTRICTED;

/*
 * How full the table of queues in shared memory is (src/qstate.c, 0.15): its
 * capacity (sbqueue.max_queues), the entries of the whole server (NULL but
 * for pg_read_all_stats), this database's share, its entries, and those of
 * them whose queue or topic is deleted, not freed yet. A queue without an
 * entry works, more slowly. All 0 without the preload.
 */
CREATE FUNCTION sbq_queue_table(
    OUT capacity integer, OUT in_use bigint, OUT database_share integer,
    OUT database_in_use integer, OUT database_deleted integer)
    RETURNS record
    AS 'MODULE_PATHNAME', 'sbq_queue_table_sql'
    LANGUAGE C VOLATILE PARALLEL RESTRICTED;

/*
 * Everything a monitoring system scrapes, a sample a row, in the shape of
 * Prometheus's metrics: metric is the family's name (counters end in
 * _total), queue the queue, subscription or (for sbq_topic_*) topic the
 * sample is of, or NULL for the database's own; state the message state of
 * sbq_messages. The queue and topic rows are those of sbq_queue_stats and
 * sbq_topic_stats, so a role sees the entities it holds a right on; the lock
 * table's, the table of queues' (0.15) and the maintenance worker's rows are
 * this database's (no worker rows without the preload). Times are seconds.
 */
CREATE VIEW sbq_metrics WITH (security_barrier) AS
    SELECT m.metric, s.queue, m.state, m.value, m.type, m.help
      FROM sbq_queue_stats s
     CROSS JOIN LATERAL (VALUES
        ('sbq_messages', 'active', s.active_count::pg_catalog.float8, 'gauge',
         'Messages by state: available (active), under a lock, deferred, scheduled, in the dead-letter sub-queue'),
        ('sbq_messages', 'locked', s.locked_count::pg_catalog.float8, 'gauge', NULL),
        ('sbq_messages', 'deferred', s.deferred_count::pg_catalog.float8, 'gauge', NULL),
        ('sbq_messages', 'scheduled', s.scheduled_count::pg_catalog.float8, 'gauge', NULL),
        ('sbq_messages', 'dead_letter', s.dead_letter_count::pg_catalog.float8, 'gauge', NULL),
        ('sbq_oldest_message_age_seconds', NULL,
         coalesce(pg_catalog.date_part('epoch', pg_catalog.statement_timestamp()
                                                OPERATOR(pg_catalog.-) s.oldest_enqueued_time), 0),
         'gauge', 'Age of the oldest message (0 when there is none)'),
        ('sbq_sessions', NULL, s.session_count::pg_catalog.float8, 'gauge',
         'Sessions with messages or state'),
        ('sbq_sessions_locked', NULL, s.locked_session_count::pg_catalog.float8, 'gauge',
         'Sessions held by a receiver'),
        ('sbq_sent_total', NULL, s.sent::pg_catalog.float8, 'counter', 'Messages sent'),
        ('sbq_received_total', NULL, s.received::pg_catalog.float8, 'counter', 'Deliveries'),
        ('sbq_completed_total', NULL, s.completed::pg_catalog.float8, 'counter', 'Messages completed'),
        ('sbq_abandoned_total', NULL, s.abandoned::pg_catalog.float8, 'counter', 'Messages abandoned'),
        ('sbq_deferred_total', NULL, s.deferred::pg_catalog.float8, 'counter', 'Messages deferred'),
        ('sbq_dead_lettered_total', NULL, s.dead_lettered::pg_catalog.float8, 'counter',
         'Messages dead-lettered'),
        ('sbq_expired_total', NULL, s.expired::pg_catalog.float8, 'counter',
         'Messages whose time to live ran out')
     ) m(metric, state, value, type, help)
    UNION ALL
    SELECT m.metric, t.topic, NULL, m.value, m.type, m.help
      FROM sbq_topic_stats t
     CROSS JOIN LATERAL (VALUES
        ('sbq_topic_subscriptions', t.subscription_count::pg_catalog.float8, 'gauge',
         'Subscriptions of the topic'),
        ('sbq_topic_sent_total', t.sent::pg_catalog.float8, 'counter',
         'Messages sent to the topic (duplicates not counted)'),
        ('sbq_topic_dropped_total', t.dropped::pg_catalog.float8, 'counter',
         'Messages no subscription took')
     ) m(metric, value, type, help)
    UNION ALL
    SELECT m.metric, NULL, NULL, m.value, 'gauge', m.help
      FROM sbq_lock_table() l
     CROSS JOIN LATERAL (VALUES
        ('sbq_lock_table_capacity', l.capacity::pg_catalog.float8,
         'Entries of the lock table in shared memory (sbqueue.max_locks; 0 without the preload)'),
        ('sbq_lock_table_in_use', l.in_use::pg_catalog.float8,
         'Entries in use in the whole server (shown to pg_read_all_stats only)'),
        ('sbq_lock_table_database_share', l.database_share::pg_catalog.float8,
         'Entries this database may hold'),
        ('sbq_lock_table_database_in_use', l.database_in_use::pg_catalog.float8,
         'Entries this database holds: message and session locks, markers of received messages')
     ) m(metric, value, help)
     WHERE m.value IS NOT NULL
    UNION ALL
    SELECT m.metric, NULL, NULL, m.value, 'gauge', m.help
      FROM sbq_queue_table() qt
     CROSS JOIN LATERAL (VALUES
        ('sbq_queue_table_capacity', qt.capacity::pg_catalog.float8,
         'Entries of the table of queues in shared memory (sbqueue.max_queues; 0 without the preload)'),
        ('sbq_queue_table_in_use', qt.in_use::pg_catalog.float8,
         'Entries in use in the whole server (shown to pg_read_all_stats only)'),
        ('sbq_queue_table_database_share', qt.database_share::pg_catalog.float8,
         'Entries this database''s queues and topics may have'),
        ('sbq_queue_table_database_in_use', qt.database_in_use::pg_catalog.float8,
         'Entries this database has; a queue past the share works without one, more slowly'),
        ('sbq_queue_table_database_deleted', qt.database_deleted::pg_catalog.float8,
         'Entries of deleted queues and topics of this database, freed once no older transaction is left')
     ) m(metric, value, help)
     WHERE m.value IS NOT NULL
    UNION ALL
    SELECT m.metric, NULL, NULL, m.value, m.type, m.help
      FROM sbq_maintenance_status() w
     CROSS JOIN LATERAL (VALUES
        ('sbq_worker_running', (w.worker_pid IS NOT NULL)::pg_catalog.int4::pg_catalog.float8, 'gauge',
         '1 while a maintenance worker is in the database'),
        ('sbq_worker_last_pass_age_seconds',
         coalesce(pg_catalog.date_part('epoch', pg_catalog.statement_timestamp()
                                                OPERATOR(pg_catalog.-) w.last_pass_started), -1),
         'gauge', 'Seconds since the last maintenance pass started (-1: none yet)'),
        ('sbq_worker_last_pass_duration_seconds',
         coalesce(pg_catalog.date_part('epoch', w.last_pass_duration), 0), 'gauge',
         'How long the last maintenance pass took'),
        ('sbq_worker_last_pass_ok', (w.last_pass_result IS NOT DISTINCT FROM 'ok')::pg_catalog.int4::pg_catalog.float8,
         'gauge', '1 when the last maintenance pass succeeded'),
        ('sbq_worker_passes_total', w.passes::pg_catalog.float8, 'counter',
         'Maintenance passes since the server started'),
        ('sbq_worker_pass_overdue_seconds',
         GREATEST(coalesce(pg_catalog.date_part('epoch', pg_catalog.statement_timestamp()
                                                           OPERATOR(pg_catalog.-) w.next_pass_due), 0), 0),
         'gauge', 'How far the next maintenance pass is past its due time')
     ) m(metric, value, type, help)
     WHERE w.database_id OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                                   WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database());

/*
 * sbq_metrics in Prometheus's text exposition format (src/metrics.c): a HELP
 * and TYPE line per family, then its samples, each labelled with the
 * database (and queue or topic, and state), read as the caller. Serve it from
 * any HTTP endpoint that runs a query.
 */
CREATE FUNCTION sbq_metrics_text() RETURNS text
    AS 'MODULE_PATHNAME', 'sbq_metrics_text_sql'
    LANGUAGE C STABLE PARALLEL RESTRICTED;

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

/* ------------------------------------------------------------ the cluster's views (0.14) */

/*
 * The rows of node view sbq.node_<name> of every shard group (of this node's
 * own tables when they are not distributed), as the caller sees them: what
 * the public views are once sbq_distribute() has run (src/dist_views.c).
 */
CREATE FUNCTION sbq.cluster_view(name text) RETURNS SETOF record
    AS 'MODULE_PATHNAME', 'sbq_cluster_view'
    LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

/*
 * What concerns one shard group rather than one entity, on the node Citus
 * delegates it to by a key of the group: node view "what" of the group, or
 * a maintenance pass over it ('maintain', for a role that may run
 * sbq_maintain()), the rows as text[]. Any role may call it, as sbq_routed.
 */
CREATE FUNCTION sbq_routed_group(key integer, what text) RETURNS SETOF text[]
    AS 'MODULE_PATHNAME', 'sbq_routed_group'
    LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

/* the public views as the layout wants them (NULL: as the tables are now) */
CREATE FUNCTION sbq.define_views(distributed boolean) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_define_views'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
SELECT sbq.define_views(false);

/* the views show each caller what its rights let it see */
GRANT SELECT ON sbq_metrics, sbq_queues, sbq_queue_stats, sbq_rights, sbq_maintenance_status,
    sbq_topics, sbq_subscriptions, sbq_rules, sbq_topic_stats TO PUBLIC;

/*
 * Nobody but the owner reaches the tables: not even through the default
 * privileges of the role that installs (ALTER DEFAULT PRIVILEGES ... GRANT).
 */
DO $$
DECLARE
    q record;
BEGIN
    /*
     * Every privilege on schema sbq and what is in it goes from every role
     * but the owner, PUBLIC included: those that default privileges of the
     * installing role gave its tables, sequences, functions and schema, and
     * the default privileges for objects made in it (but PUBLIC's EXECUTE on
     * functions, which the views' helpers need).
     */
    FOR q IN
        WITH who AS (
            SELECT o.oid, CASE WHEN o.oid OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                               ELSE pg_catalog.quote_ident(o.rolname) END AS name
              FROM (SELECT 0::pg_catalog.oid AS oid, NULL::pg_catalog.name AS rolname
                    UNION ALL SELECT rl.oid, rl.rolname FROM pg_catalog.pg_roles rl) o)
        SELECT DISTINCT pg_catalog.format('REVOKE ALL ON TABLE %s FROM %s CASCADE',
                                          c.oid::pg_catalog.regclass, w.name) AS cmd
          FROM pg_catalog.pg_class c
         CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
          JOIN who w ON w.oid OPERATOR(pg_catalog.=) a.grantee
         WHERE c.relnamespace OPERATOR(pg_catalog.=) 'sbq'::pg_catalog.regnamespace
           AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
        UNION
        SELECT pg_catalog.format('REVOKE ALL (%I) ON TABLE %s FROM %s CASCADE',
                                 t.attname, c.oid::pg_catalog.regclass, w.name)
          FROM pg_catalog.pg_class c
          JOIN pg_catalog.pg_attribute t ON t.attrelid OPERATOR(pg_catalog.=) c.oid
         CROSS JOIN LATERAL pg_catalog.aclexplode(t.attacl) a
          JOIN who w ON w.oid OPERATOR(pg_catalog.=) a.grantee
         WHERE c.relnamespace OPERATOR(pg_catalog.=) 'sbq'::pg_catalog.regnamespace
           AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
        UNION
        SELECT pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM %s CASCADE',
                                 p.oid::pg_catalog.regprocedure, w.name)
          FROM pg_catalog.pg_proc p
         CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
          JOIN who w ON w.oid OPERATOR(pg_catalog.=) a.grantee
         WHERE p.pronamespace OPERATOR(pg_catalog.=) 'sbq'::pg_catalog.regnamespace
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
           AND a.grantee OPERATOR(pg_catalog.<>) 0
        UNION
        SELECT pg_catalog.format('REVOKE ALL ON SCHEMA sbq FROM %s CASCADE', w.name)
          FROM pg_catalog.pg_namespace n
         CROSS JOIN LATERAL pg_catalog.aclexplode(n.nspacl) a
          JOIN who w ON w.oid OPERATOR(pg_catalog.=) a.grantee
         WHERE n.nspname OPERATOR(pg_catalog.=) 'sbq'
           AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner
        UNION
        SELECT pg_catalog.format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA sbq REVOKE ALL ON %s FROM %s CASCADE',
                                 g.rolname, CASE d.defaclobjtype WHEN 'r' THEN 'TABLES'
                                                 WHEN 'S' THEN 'SEQUENCES' WHEN 'f' THEN 'FUNCTIONS'
                                                 ELSE 'TYPES' END, w.name)
          FROM pg_catalog.pg_default_acl d
          JOIN pg_catalog.pg_roles g ON g.oid OPERATOR(pg_catalog.=) d.defaclrole
         CROSS JOIN LATERAL pg_catalog.aclexplode(d.defaclacl) a
          JOIN who w ON w.oid OPERATOR(pg_catalog.=) a.grantee
         WHERE d.defaclnamespace OPERATOR(pg_catalog.=) 'sbq'::pg_catalog.regnamespace
        UNION
        -- the functions outside schema sbq too (the views, in any schema, are
        -- done below)
        SELECT pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM %s CASCADE',
                                 p.oid::pg_catalog.regprocedure, w.name)
          FROM pg_catalog.pg_depend d
          JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) d.objid
         CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
          JOIN who w ON w.oid OPERATOR(pg_catalog.=) a.grantee
         WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
           AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
           AND d.deptype OPERATOR(pg_catalog.=) 'e'
           AND d.refobjid OPERATOR(pg_catalog.=)
               (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname OPERATOR(pg_catalog.=) 'sbqueue')
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
           AND a.grantee OPERATOR(pg_catalog.<>) 0
         ORDER BY 1
    LOOP
        EXECUTE q.cmd;
    END LOOP;
END
$$;

/*
 * What PUBLIC may use, said here whatever the default privileges of the role
 * that installs or updates: SELECT on the views (write access through a view
 * would reach its table as the view's owner), EXECUTE on every function but
 * sbq_create_queue, sbq_create_topic and sbq_maintain (the owner's to grant) and the internal
 * ones; each call checks the caller's rights itself.
 */
DO $$
DECLARE
    q record;
    g record;
BEGIN
    FOR q IN
        SELECT c.oid::pg_catalog.regclass AS rel,
               (c.relnamespace OPERATOR(pg_catalog.=) 'sbq'::pg_catalog.regnamespace
                AND c.relname OPERATOR(pg_catalog.~~) 'node\_%') AS node_view
          FROM pg_catalog.pg_depend d
          JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) d.objid
         WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
           AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
           AND d.refobjid OPERATOR(pg_catalog.=)
               (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname OPERATOR(pg_catalog.=) 'sbqueue')
           AND d.deptype OPERATOR(pg_catalog.=) 'e' AND c.relkind OPERATOR(pg_catalog.=) 'v'
    LOOP
        -- every role's privileges on it go (with what was granted on from them), then
        -- PUBLIC may read it (not the node views, which the public views read as
        -- their owner)
        FOR g IN
            SELECT DISTINCT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                                 ELSE pg_catalog.quote_ident(o.rolname) END AS name
              FROM pg_catalog.pg_class c
             CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
              LEFT JOIN pg_catalog.pg_roles o ON o.oid OPERATOR(pg_catalog.=) a.grantee
             WHERE c.oid OPERATOR(pg_catalog.=) q.rel AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
        LOOP
            EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %s FROM %s CASCADE', q.rel, g.name);
        END LOOP;
        IF NOT q.node_view THEN
            EXECUTE pg_catalog.format('GRANT SELECT ON TABLE %s TO PUBLIC', q.rel);
        END IF;
    END LOOP;
    FOR q IN
        SELECT p.oid::pg_catalog.regprocedure AS fn
          FROM pg_catalog.pg_depend d
          JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) d.objid
         WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
           AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
           AND d.refobjid OPERATOR(pg_catalog.=)
               (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname OPERATOR(pg_catalog.=) 'sbqueue')
           AND d.deptype OPERATOR(pg_catalog.=) 'e'
    LOOP
        IF pg_catalog.split_part(q.fn::pg_catalog.text, '(', 1) IN
               ('sbq_create_queue', 'sbq_create_topic', 'sbq_maintain', 'sbq.new_lock_token',
                'sbq.lease_slot', 'sbq.lease_free', 'sbq_distribute', 'sbq_undistribute',
                'sbq.distributed_layout', 'sbq.current_entity_key', 'sbq.next_queue_id',
                'sbq.next_session_key', 'sbq.define_views')
           OR q.fn::pg_catalog.text LIKE '%.sbq_create_queue(%'
           OR q.fn::pg_catalog.text LIKE '%.sbq_create_topic(%'
           OR q.fn::pg_catalog.text LIKE '%.sbq_maintain(%'
           OR q.fn::pg_catalog.text LIKE '%.sbq_distribute(%'
           OR q.fn::pg_catalog.text LIKE '%.sbq_undistribute(%' THEN
            EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', q.fn);
        ELSE
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO PUBLIC', q.fn);
        END IF;
    END LOOP;
END
$$;
