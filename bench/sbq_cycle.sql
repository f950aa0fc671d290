-- bench/sbq_cycle.sql: sbqueue, full cycle 1: send, receive, complete (three transactions)
SELECT sbq_send('bench', 'bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end'::text);
\set id 0
SELECT sequence_number AS id, lock_token AS tok FROM sbq_receive('bench') \aset
SELECT sbq_complete('bench', :tok::uuid) WHERE :id::bigint > 0;
