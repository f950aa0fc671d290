/* sql/sbqueue--0.8--0.9.sql: from 0.8 to 0.9 (settlements in every form, batches of messages) */

\echo Use "ALTER EXTENSION sbqueue UPDATE TO '0.9'" to load this file. \quit

/*
 * sbq_abandon, sbq_create_queue and sbq_update_queue gain arguments below. A
 * function cannot gain an argument in place: each is dropped and made again
 * with the privileges the install script gives it (EXECUTE for PUBLIC on all
 * but sbq_create_queue). What an administrator granted or revoked on the old
 * ones is not carried over (pg_dump would then take it for the extension's
 * own and leave it out); this update names in a warning each role that had
 * EXECUTE on them, and PUBLIC where it differs from a new install, to be
 * granted or revoked again.
 */
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT p.proname, pg_catalog.quote_ident(g.rolname) AS who
          FROM pg_catalog.pg_proc p
         CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
          JOIN pg_catalog.pg_roles g ON g.oid OPERATOR(pg_catalog.=) a.grantee
         WHERE p.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
                 'sbq_create_queue(text, interval, integer, interval, boolean, interval, boolean, text, text, integer, interval)'::pg_catalog.regprocedure,
                 'sbq_update_queue(text, interval, integer, interval, boolean, interval, boolean, text, text, integer, interval)'::pg_catalog.regprocedure,
                 'sbq_abandon(text, uuid, jsonb)'::pg_catalog.regprocedure])
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
    LOOP
        RAISE WARNING 'sbqueue 0.9 replaces %(): grant EXECUTE on it to % again', r.proname, r.who;
    END LOOP;
    FOR r IN
        SELECT p.proname,
               EXISTS (SELECT FROM pg_catalog.aclexplode(coalesce(p.proacl,
                                       pg_catalog.acldefault('f', p.proowner))) a
                        WHERE a.grantee OPERATOR(pg_catalog.=) 0) AS had,
               p.proname OPERATOR(pg_catalog.<>) 'sbq_create_queue' AS gets
          FROM pg_catalog.pg_proc p
         WHERE p.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
                 'sbq_create_queue(text, interval, integer, interval, boolean, interval, boolean, text, text, integer, interval)'::pg_catalog.regprocedure,
                 'sbq_update_queue(text, interval, integer, interval, boolean, interval, boolean, text, text, integer, interval)'::pg_catalog.regprocedure,
                 'sbq_abandon(text, uuid, jsonb)'::pg_catalog.regprocedure])
    LOOP
        IF r.had AND NOT r.gets THEN
            RAISE WARNING 'sbqueue 0.9 replaces %(): PUBLIC had EXECUTE on it and has not now; grant it again', r.proname;
        ELSIF r.gets AND NOT r.had THEN
            RAISE WARNING 'sbqueue 0.9 replaces %(): PUBLIC had no EXECUTE on it and has now; revoke it again', r.proname;
        END IF;
    END LOOP;
END
$$;

/* An abandon takes a delay. */
DROP FUNCTION sbq_abandon(text, uuid, jsonb);
CREATE FUNCTION sbq_abandon(queue text, lock_token uuid,
    properties_to_modify jsonb DEFAULT NULL, delay interval DEFAULT NULL) RETURNS void
    AS 'MODULE_PATHNAME', 'sbq_abandon'
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

/* as the install script grants them: every call checks the caller's rights itself */
GRANT EXECUTE ON FUNCTION sbq_abandon(text, uuid, jsonb, interval) TO PUBLIC;
GRANT EXECUTE ON FUNCTION sbq_abandon(text, text, jsonb, interval) TO PUBLIC;
GRANT EXECUTE ON FUNCTION sbq_abandon(text, uuid[], jsonb, interval) TO PUBLIC;
GRANT EXECUTE ON FUNCTION sbq_defer(text, text, jsonb) TO PUBLIC;
GRANT EXECUTE ON FUNCTION sbq_defer(text, uuid[], jsonb) TO PUBLIC;
GRANT EXECUTE ON FUNCTION sbq_deadletter(text, text, text, text, jsonb) TO PUBLIC;
GRANT EXECUTE ON FUNCTION sbq_deadletter(text, uuid[], text, text, jsonb) TO PUBLIC;
GRANT EXECUTE ON FUNCTION sbq_renew(text, text) TO PUBLIC;
GRANT EXECUTE ON FUNCTION sbq_renew(text, uuid[]) TO PUBLIC;
GRANT EXECUTE ON FUNCTION sbq_settle(text, uuid[], text, text, text, jsonb, interval) TO PUBLIC;
GRANT EXECUTE ON FUNCTION sbq_new_message(text, text, text, text, text, text, text, text, text,
    interval, timestamptz, jsonb) TO PUBLIC;
GRANT EXECUTE ON FUNCTION sbq_new_message(bytea, text, text, text, text, text, text, text, text,
    interval, timestamptz, jsonb) TO PUBLIC;
GRANT EXECUTE ON FUNCTION sbq_new_message(jsonb, text, text, text, text, text, text, text, text,
    interval, timestamptz, jsonb) TO PUBLIC;
GRANT EXECUTE ON FUNCTION sbq_send_batch(text, sbq_new_message[]) TO PUBLIC;

/*
 * A queue's retry back-off for abandoned messages (retry_delay, retry_backoff,
 * max_retry_delay): columns of sbq.queues and of sbq_queue_properties, and the
 * last arguments of sbq_create_queue and sbq_update_queue, which are made
 * again (the roles to grant EXECUTE again are named at the top).
 */
ALTER TABLE sbq.queues ADD COLUMN retry_delay interval;
ALTER TABLE sbq.queues ADD COLUMN retry_backoff boolean NOT NULL DEFAULT false;
ALTER TABLE sbq.queues ADD COLUMN max_retry_delay interval;
ALTER TYPE sbq_queue_properties ADD ATTRIBUTE retry_delay interval;
ALTER TYPE sbq_queue_properties ADD ATTRIBUTE retry_backoff boolean;
ALTER TYPE sbq_queue_properties ADD ATTRIBUTE max_retry_delay interval;


DROP FUNCTION sbq_create_queue(text, interval, integer, interval, boolean, interval, boolean,
    text, text, integer, interval);
DROP FUNCTION sbq_update_queue(text, interval, integer, interval, boolean, interval, boolean,
    text, text, integer, interval);

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

REVOKE ALL ON FUNCTION sbq_create_queue(text, interval, integer, interval, boolean, interval,
    boolean, text, text, integer, interval, interval, boolean, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sbq_update_queue(text, interval, integer, interval, boolean, interval,
    boolean, text, text, integer, interval, interval, boolean, interval) TO PUBLIC;

/* the view shows the new columns (at its end) */
CREATE OR REPLACE VIEW sbq_queues WITH (security_barrier) AS
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
