/* sql/sbqueue--0.1--0.2.sql: from 0.1 to 0.2 (defer, dead-letter, resubmit, scheduled
 * messages, duplicate detection, maintenance) */

\echo Use "ALTER EXTENSION sbqueue UPDATE TO '0.2'" to load this file. \quit

/*
 * Time to live: expiring messages are found through this index, which lock
 * changes never touch (expires_at and subqueue stay as they are).
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
SELECT pg_catalog.pg_extension_config_dump('sbq.duplicate_ids', '');

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

CREATE FUNCTION sbq_resubmit(queue text, sequence_numbers bigint[] DEFAULT NULL)
    RETURNS integer
    AS 'MODULE_PATHNAME', 'sbq_resubmit'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

/* One maintenance pass over this database; for the worker, pg_cron or an admin. */
CREATE FUNCTION sbq_maintain() RETURNS jsonb
    AS 'MODULE_PATHNAME', 'sbq_maintain'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION sbq_maintain() FROM PUBLIC;
