-- bench/deadletters_cycle.sql: bench/sbq_cycle.sql on the queue :q (bench/deadletters.sh):
-- send, receive, complete (three transactions). Run with -M prepared, -D q=QUEUE and
-- -D tok=00000000-0000-0000-0000-000000000000.
SELECT sbq_send(:q, 'bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end'::text);
\set id 0
SELECT sequence_number AS id, lock_token AS tok FROM sbq_receive(:q) \aset
SELECT sbq_complete(:q, :tok::uuid) WHERE :id::bigint > 0;
