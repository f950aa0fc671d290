-- sbqueue pgTAP: send_direct: a plain send stores its rows without the SQL executor
-- (src/send_direct.c). It stores what the INSERT it replaced stores (that INSERT still
-- runs when the table has a trigger: the fallback); every index holds its rows; a CHECK
-- constraint or a partial index added to sbq.messages later in the session is enforced
-- or filled by the next send; the settings a call pins for its statements are pinned
-- only when it runs one, and the caller's are as they were after it.
BEGIN;
SELECT plan(30);

CREATE EXTENSION IF NOT EXISTS amcheck;
SELECT sbq_create_queue('sd_q', default_message_ttl => '1 hour') IS NOT NULL AS created \gset
SELECT sbq_create_queue('sd_s', requires_session => true) IS NOT NULL AS created \gset

-- made-up message ids: version 4 UUIDs, each one different, whether a send
-- takes its random bytes from those its backend drew ahead (single sends and
-- small batches, past several refills) or draws them itself (a large batch); the
-- table is still sbqueue's own here, so these take the direct path
SELECT sbq_create_queue('sd_ids') IS NULL AS created \gset
DO $$ BEGIN FOR i IN 1..150 LOOP PERFORM sbq_send('sd_ids', 'one'::text); END LOOP; END $$;
SELECT count(*) FROM generate_series(1, 5) g, LATERAL sbq_send_batch('sd_ids', array_fill('few' || g, ARRAY[30])) s \gset
SELECT count(*) FROM sbq_send_batch('sd_ids', array_fill('many'::text, ARRAY[200])) \gset
SELECT results_eq(
    $$SELECT count(*), count(DISTINCT message_id),
             count(*) FILTER (WHERE message_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$')
        FROM sbq_peek('sd_ids', 1000)$$,
    $$VALUES (500::bigint, 500::bigint, 500::bigint)$$,
    'send_direct: 500 made-up message ids are version 4 UUIDs, all different');
SELECT sbq_delete_queue('sd_ids') IS NULL AS deleted \gset

-- one of every kind of send, tagged by the path it took (direct, or the INSERT)
CREATE FUNCTION sd_send_all(path text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM sbq_send('sd_q', 'plain ' || path);
    PERFORM sbq_send('sd_q', '\x00ff'::bytea, message_id => 'mid', correlation_id => 'c',
                     subject => 'sub', content_type => 'application/x-sd', reply_to => 'r',
                     reply_to_session_id => 'rs', to_address => 't',
                     application_properties => '{"k": [1, "2"], "path": "x"}',
                     time_to_live => '10 minutes');
    PERFORM sbq_send('sd_q', '{"a": 1}'::jsonb,
                     scheduled_enqueue_time => '2099-01-01 00:00:00+00');
    PERFORM sbq_send_batch('sd_q', ARRAY['b1', 'b2', 'b3']);
    PERFORM sbq_send('sd_s', 'in a session'::text, session_id => 'S1');
    PERFORM sbq_send('sd_q', repeat('x', 300000));
    PERFORM sbq_send('sd_q', ''::text, application_properties => '{}');
END $$;

-- what the two paths may differ in: the sequence number, the time, a made-up id
CREATE VIEW sd_rows AS
    SELECT m.queue_id, m.subqueue, m.state, m.delivery_count, m.lock_token, m.locked_until,
           m.scheduled_enqueue_time, m.expires_at - coalesce(m.scheduled_enqueue_time, m.enqueued_time) AS lives, m.time_to_live,
           CASE WHEN m.message_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$'
                THEN 'made up' ELSE m.message_id END AS message_id,
           m.session_id, m.correlation_id, m.subject, m.content_type, m.reply_to,
           m.reply_to_session_id, m.to_address, m.application_properties,
           m.dead_letter_reason, m.dead_letter_error_description, m.dead_letter_source,
           m.transfer_hops, replace(encode(m.body, 'escape'), 'direct', 'insert') AS body,
           pg_column_size(m.body) < octet_length(m.body) AS compressed,
           row_number() OVER (ORDER BY m.sequence_number) AS nth
      FROM sbq.messages m;

SELECT sd_send_all('direct');
CREATE TEMP TABLE sd_direct AS SELECT * FROM sd_rows;
SELECT sbq_purge_queue('sd_q') >= 0 AS purged \gset
SELECT sbq_purge_queue('sd_s') >= 0 AS purged \gset

-- a trigger on the table makes a send run the INSERT
CREATE FUNCTION sd_noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER sd_noop BEFORE INSERT ON sbq.messages FOR EACH ROW EXECUTE FUNCTION sd_noop();
SELECT sd_send_all('insert');
CREATE TEMP TABLE sd_insert AS SELECT * FROM sd_rows;
DROP TRIGGER sd_noop ON sbq.messages;

SELECT is((SELECT count(*) FROM sd_direct), 9::bigint,
    'send_direct: the direct sends stored 9 messages');
SELECT set_eq('SELECT * FROM sd_direct', 'SELECT * FROM sd_insert',
    'send_direct: every column of every message is what the INSERT stores');
SELECT is((SELECT count(DISTINCT m.message_id) FROM sbq.messages m
            WHERE m.message_id <> 'mid'), 8::bigint,
    'send_direct: each message sent without an id has an id of its own');

-- sequence numbers follow the bodies of a batch, and no number is used twice
SELECT sbq_purge_queue('sd_q') >= 0 AS purged \gset
SELECT sbq_purge_queue('sd_s') >= 0 AS purged \gset
CREATE TEMP TABLE sd_batch AS SELECT sbq_send_batch('sd_q', ARRAY['1', '2', '3', '4', '5']) AS seq;
SELECT results_eq(
    $$SELECT encode(body, 'escape') FROM sbq.messages ORDER BY sequence_number$$,
    $$SELECT b FROM unnest(ARRAY['1', '2', '3', '4', '5']) b$$,
    'send_direct: a batch''s sequence numbers follow its bodies');
SELECT set_eq('SELECT seq FROM sd_batch', 'SELECT sequence_number FROM sbq.messages',
    'send_direct: a batch returns the sequence numbers it stored');
CREATE TEMP TABLE sd_more AS SELECT sbq_send('sd_q', 'n'::text) AS seq FROM generate_series(1, 50);
SELECT is((SELECT count(*) FROM sd_more WHERE seq <= (SELECT max(seq) FROM sd_batch)), 0::bigint,
    'send_direct: a send''s sequence number is above every earlier one');

-- every index has every row (amcheck: each heap row that belongs is found)
SELECT sd_send_all('direct');
SELECT is((SELECT count(*) FROM (
            SELECT bt_index_check(i.indexrelid, true) FROM pg_index i
             WHERE i.indrelid = 'sbq.messages'::regclass) c), 5::bigint,
    'send_direct: amcheck finds the five indexes of sbq.messages complete');
SELECT is((SELECT count(*) FROM sbq.messages WHERE state = 2 AND queue_id =
            (SELECT queue_id FROM sbq.queues WHERE name = 'sd_q')), 1::bigint,
    'send_direct: the scheduled message is found through the scheduled-message index')
  FROM (SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true)) s;
RESET enable_seqscan;
RESET enable_bitmapscan;

-- a partial index made in the middle of the session gets the next send's row
CREATE INDEX sd_subject_idx ON sbq.messages (subject) WHERE subject = 'sd-indexed';
SELECT sbq_send('sd_q', 'indexed'::text, subject => 'sd-indexed') > 0 AS sent \gset
SELECT lives_ok($$SELECT bt_index_check('sbq.sd_subject_idx'::regclass, true)$$,
    'send_direct: amcheck finds a partial index made meanwhile complete');
SELECT is((SELECT count(*) FROM sbq.messages WHERE subject = 'sd-indexed'), 1::bigint,
    'send_direct: the partial index made meanwhile has the row')
  FROM (SELECT set_config('enable_seqscan', 'off', true)) s;
RESET enable_seqscan;
DROP INDEX sbq.sd_subject_idx;

-- a CHECK constraint added in the middle of the session holds for the next send
CREATE TEMP TABLE sd_count AS SELECT count(*) AS n FROM sbq.messages;
ALTER TABLE sbq.messages ADD CONSTRAINT sd_small CHECK (octet_length(body) < 1000) NOT VALID;
SELECT throws_ok($$SELECT sbq_send('sd_q', repeat('y', 2000))$$, '23514', NULL,
    'send_direct: a CHECK constraint added meanwhile refuses the next send (23514)');
SELECT throws_ok($$SELECT sbq_send_batch('sd_q', ARRAY['ok', repeat('y', 2000)])$$, '23514', NULL,
    'send_direct: ... and a batch with one message it refuses');
SELECT is((SELECT count(*) FROM sbq.messages), (SELECT n FROM sd_count),
    'send_direct: the refused sends stored nothing');
ALTER TABLE sbq.messages DROP CONSTRAINT sd_small;
SELECT lives_ok($$SELECT sbq_send('sd_q', repeat('y', 2000))$$,
    'send_direct: once dropped, the constraint no longer refuses');

-- a CHECK constraint on the whole row: evaluating it keeps state in the store's executor
-- state, so it is prepared for each store, not kept (kept, the next send read freed memory)
ALTER TABLE sbq.messages ADD CONSTRAINT sd_whole_row CHECK (NOT (messages IS NULL)) NOT VALID;
SELECT lives_ok($$SELECT sbq_send('sd_q', 'whole ' || g) FROM generate_series(1, 50) g;
                  SELECT sbq_send_batch('sd_q', ARRAY['whole a', 'whole b'])$$,
    'send_direct: a whole-row CHECK constraint holds over many stores');
SELECT is((SELECT count(*) FROM sbq.messages WHERE substring(body FROM 1 FOR 6) = 'whole '::bytea), 52::bigint,
    'send_direct: ... and every row is stored');
ALTER TABLE sbq.messages DROP CONSTRAINT sd_whole_row;

-- the settings of the caller: as they were, after a send (no statement) and a receive (some)
SET LOCAL search_path = public, pg_catalog;
SET LOCAL enable_seqscan = on;
SELECT sbq_send('sd_q', 'settings'::text) > 0 AS sent \gset
SELECT is(current_setting('search_path') || ' ' || current_setting('enable_seqscan'),
    'public, pg_catalog on', 'send_direct: a send leaves search_path and the planner settings as they were');
SELECT count(*) >= 0 AS received FROM sbq_receive('sd_q', 2) \gset
SELECT is(current_setting('search_path') || ' ' || current_setting('enable_seqscan'),
    'public, pg_catalog on', 'send_direct: so does a receive, which runs statements');

-- a send that fails in a subtransaction, then more calls in the transaction
SAVEPOINT sd_sp;
SELECT throws_ok($$SELECT sbq_send('sd_q', repeat('z', 2000000))$$, 'SB007', NULL,
    'send_direct: a message over the queue''s size is refused');
ROLLBACK TO SAVEPOINT sd_sp;
SELECT lives_ok($$SELECT sbq_send('sd_q', 'after'::text); SELECT sbq_peek('sd_q', 1)$$,
    'send_direct: sends and statements go on after a failed send');

-- A DBA's CHECK constraint that calls a function of theirs: it runs with the settings
-- pinned, as it ran in the INSERT, not under the search_path of a role that may only send
-- (the constraint runs as the owner of the tables), and as the function is now, not as
-- it was when first used.
CREATE TABLE sd_marks (who text);
CREATE TABLE sd_results (what text);
GRANT INSERT ON sd_results TO PUBLIC;
CREATE FUNCTION sd_subject_ok(s text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN RETURN upper(coalesce(s, '')) <> 'BAD'; END $$;
ALTER TABLE sbq.messages ADD CONSTRAINT sd_subject_chk CHECK (public.sd_subject_ok(subject));
CREATE ROLE sd_sender;
SELECT sbq_grant('sd_q', 'sd_sender', ARRAY['send']) IS NULL AS granted \gset
CREATE SCHEMA sd_evil AUTHORIZATION sd_sender;
GRANT USAGE ON SCHEMA public TO sd_sender;
SET LOCAL ROLE sd_sender;
CREATE FUNCTION sd_evil.upper(text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.sd_marks VALUES (current_user); RETURN 'x'; END $$;
SELECT public.sbq_send('sd_q', 'first'::text) > 0 AS sent \gset
SET LOCAL search_path = sd_evil, pg_catalog;
SELECT public.sbq_send('sd_q', 'second'::text) > 0 AS sent \gset
DO $$ BEGIN
    PERFORM public.sbq_send('sd_q', 'third'::text, subject => 'bad');
    INSERT INTO public.sd_results VALUES ('stored');
EXCEPTION WHEN check_violation THEN
    INSERT INTO public.sd_results VALUES ('refused');
END $$;
RESET ROLE;
RESET search_path;
SELECT is((SELECT count(*) FROM sd_marks), 0::bigint,
    'send_direct: a DBA''s constraint does not run a function of a sender''s search_path');
SELECT is((SELECT string_agg(what, ',') FROM sd_results), 'refused',
    'send_direct: ... and refuses the row it refuses under the INSERT (23514)');
SELECT lives_ok($$SELECT sbq_send('sd_q', 'fine'::text, subject => 'good')$$,
    'send_direct: a DBA''s constraint of a function lets a good row in');
CREATE OR REPLACE FUNCTION sd_subject_ok(s text) RETURNS boolean LANGUAGE sql AS
    $$SELECT coalesce(s, '') <> 'good'$$;
SELECT throws_ok($$SELECT sbq_send('sd_q', 'now bad'::text, subject => 'good')$$, '23514', NULL,
    'send_direct: ... and holds as the function is after CREATE OR REPLACE');
ALTER TABLE sbq.messages DROP CONSTRAINT sd_subject_chk;

-- (A DBA's partial index whose predicate calls a function of theirs: pg_regress's
-- send_direct, which needs the index made in a committed transaction.)

-- an identity column the send names is refused, as the INSERT refused it
SAVEPOINT sd_identity;
ALTER TABLE sbq.messages ALTER COLUMN delivery_count ADD GENERATED ALWAYS AS IDENTITY;
SELECT throws_ok($$SELECT sbq_send('sd_q', 'identity'::text)$$, '428C9', NULL,
    'send_direct: a column made GENERATED ALWAYS AS IDENTITY refuses the send, as the INSERT did');
ROLLBACK TO SAVEPOINT sd_identity;

-- a rule on the table is obeyed, as the INSERT obeyed it
CREATE TABLE sd_log (subject text);
CREATE RULE sd_also AS ON INSERT TO sbq.messages DO ALSO INSERT INTO public.sd_log VALUES (NEW.subject);
SELECT sbq_send('sd_q', 'logged'::text, subject => 'sd-rule') > 0 AS sent \gset
DROP RULE sd_also ON sbq.messages;
SELECT is((SELECT string_agg(subject, ',') FROM sd_log), 'sd-rule',
    'send_direct: a rule on sbq.messages is obeyed');

DROP VIEW sd_rows;
-- a column the INSERT names dropped meanwhile: the send fails as the INSERT does (42703)
-- and stores nothing, rather than store the message without it
CREATE TEMP TABLE sd_before_drop AS SELECT count(*) AS n FROM sbq.messages;
SAVEPOINT sd_drop;
ALTER TABLE sbq.messages DROP COLUMN subject;
SELECT throws_ok($$SELECT sbq_send('sd_q', 'no subject'::text, subject => 'lost')$$, '42703', NULL,
    'send_direct: a column dropped meanwhile fails the send (42703)');
SELECT is((SELECT count(*) FROM sbq.messages), (SELECT n FROM sd_before_drop),
    'send_direct: ... which stores nothing');
ROLLBACK TO SAVEPOINT sd_drop;

-- a column whose type has a modifier rounds what is stored, as the INSERT did
ALTER TABLE sbq.messages ALTER COLUMN expires_at TYPE timestamptz(0);
SELECT sbq_send('sd_q', 'rounded'::text, time_to_live => '1 minute 0.5 seconds') > 0 AS sent \gset
SELECT is((SELECT extract(microseconds FROM expires_at)::bigint % 1000000 FROM sbq.messages
            WHERE body = 'rounded'::bytea), 0::bigint,
    'send_direct: a column of timestamptz(0) gets whole seconds');

SELECT * FROM finish();
ROLLBACK;
