-- bench/sbq_consume.sql: sbqueue, receive 1 (peek-lock, one transaction) + sbq_complete (another).
-- Run with -D tok=00000000-0000-0000-0000-000000000000; id 0 settles nothing when the receive got nothing.
\set id 0
SELECT sequence_number AS id, lock_token AS tok FROM sbq_receive('bench') \aset
SELECT sbq_complete('bench', :tok::uuid) WHERE :id::bigint > 0;
