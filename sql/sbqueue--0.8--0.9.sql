/* sql/sbqueue--0.8--0.9.sql: from 0.8 to 0.9 (settlements in every form, batches of messages) */

\echo Use "ALTER EXTENSION sbqueue UPDATE TO '0.9'" to load this file. \quit

/*
 * An abandon takes a delay. A function cannot gain an argument in place: the
 * old one goes and the new one comes, with PUBLIC's EXECUTE as before (a role
 * granted EXECUTE on the old one must be granted it again).
 */
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
