/* sql/sbqueue--0.10--0.11.sql: from 0.10 to 0.11 (dead letters forwarded, hops counted across them) */

\echo Use "ALTER EXTENSION sbqueue UPDATE TO '0.11'" to load this file. \quit

/*
 * How many times a message has been forwarded, NULL for never (src/forward.c).
 * A column without a default: adding it rewrites nothing. The library of 0.11
 * forwards dead letters (forward_dead_lettered_messages_to) only once the
 * column is there; before this update it refuses the property, as 0.10 did.
 */
ALTER TABLE sbq.messages ADD COLUMN transfer_hops smallint;
ALTER TABLE sbq.dead_letters ADD COLUMN transfer_hops smallint;
