/* sql/sbqueue--0.9--0.10.sql: from 0.9 to 0.10 (topics, subscriptions and rules) */

\echo Use "ALTER EXTENSION sbqueue UPDATE TO '0.10'" to load this file. \quit

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

/* what a topic dropped: the messages no subscription took */
ALTER TABLE sbq.queue_counters ADD COLUMN dropped bigint NOT NULL DEFAULT 0;

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

/*
 * Creating topics is for the extension's owner and the roles it grants
 * EXECUTE on sbq_create_topic, as for queues; a role with manage on a topic
 * creates its subscriptions and rules.
 */
REVOKE ALL ON FUNCTION sbq_create_topic(text, interval, interval, integer) FROM PUBLIC;

/*
 * Who holds which rights on which queue: the rows of the queues the caller
 * manages, and the caller's own (those of the roles whose privileges it
 * has, PUBLIC's included); every row for the extension's owner.
 */
CREATE OR REPLACE VIEW sbq_rights WITH (security_barrier) AS
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
      JOIN (SELECT queues.queue_id, queues.name FROM sbq.queues
            UNION ALL
            SELECT topics.topic_id, topics.name FROM sbq.topics) q
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

/*
 * Topics, subscriptions and rules, as the queues: each caller sees those it
 * holds a right on (a subscription and its rules also with manage on its
 * topic: a sender to a topic does not see who subscribes), the extension's
 * owner all of them.
 */
CREATE VIEW sbq_topics WITH (security_barrier) AS
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

CREATE VIEW sbq_subscriptions WITH (security_barrier) AS
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

/* filter: the SQL filter, the correlation filter's JSON, or 1=1 (the true filter) */
CREATE VIEW sbq_rules WITH (security_barrier) AS
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

/*
 * Per topic: its subscriptions, the messages sent to it (duplicates not
 * counted) and those no subscription took (dropped).
 */
CREATE VIEW sbq_topic_stats WITH (security_barrier) AS
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

GRANT SELECT ON sbq_topics, sbq_subscriptions, sbq_rules, sbq_topic_stats TO PUBLIC;

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
        SELECT c.oid::pg_catalog.regclass AS rel
          FROM pg_catalog.pg_depend d
          JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) d.objid
         WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
           AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
           AND d.refobjid OPERATOR(pg_catalog.=)
               (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname OPERATOR(pg_catalog.=) 'sbqueue')
           AND d.deptype OPERATOR(pg_catalog.=) 'e' AND c.relkind OPERATOR(pg_catalog.=) 'v'
    LOOP
        -- every role's privileges on it go (with what was granted on from them), then
        -- PUBLIC may read it
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
        EXECUTE pg_catalog.format('GRANT SELECT ON TABLE %s TO PUBLIC', q.rel);
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
                'sbq.lease_slot', 'sbq.lease_free')
           OR q.fn::pg_catalog.text LIKE '%.sbq_create_queue(%'
           OR q.fn::pg_catalog.text LIKE '%.sbq_create_topic(%'
           OR q.fn::pg_catalog.text LIKE '%.sbq_maintain(%' THEN
            EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', q.fn);
        ELSE
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO PUBLIC', q.fn);
        END IF;
    END LOOP;
END
$$;
