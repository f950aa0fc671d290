-- test_setup: the helpers the other pg_regress tests share, run first. Each test is
-- a session of its own, so they live in schema regress of the test database (made
-- again by every run), not in pg_temp. One test alone: REGRESS="test_setup defer".
CREATE SCHEMA regress;
GRANT USAGE ON SCHEMA regress TO PUBLIC;

-- The error a statement raises, as 'SQLSTATE: message', or 'no error'.
CREATE FUNCTION regress.err(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- Sequence numbers: one server numbers messages 1, 2, 3, ...; each node of a distributed
-- installation (sbq_distribute()) steps by 64 from a residue of its own. The tests count
-- in steps of the sequence: regress.step() is the step (1 on one server), and
-- regress.dist(seq, base) the distance of seq from base in steps, an error if it is not
-- a whole number of steps (a number that came from another node's sequence).
CREATE FUNCTION regress.step() RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT increment_by FROM pg_sequences WHERE schemaname = 'sbq' AND sequencename = 'message_seq'
$$;
CREATE FUNCTION regress.dist(seq bigint, base bigint) RETURNS bigint LANGUAGE plpgsql STABLE AS $$
DECLARE
    step bigint := regress.step();
BEGIN
    IF (seq - base) % step <> 0 THEN
        RAISE EXCEPTION 'sequence number % is not a whole number of steps of % from %', seq, step, base;
    END IF;
    RETURN (seq - base) / step;
END $$;

-- The same as regress.err with every lock token (random) shown as <token> and, when base
-- is given, the sequence number in the message shown as <first+N>, N its distance from
-- base in steps of step (by default regress.step()), or <first+D/step> when the
-- distance D is not a whole number of steps.
CREATE FUNCTION regress.errc(sql text, base bigint DEFAULT NULL, step bigint DEFAULT NULL)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    msg text := regexp_replace(regress.err(sql),
                               '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', '<token>', 'g');
    n text := substring(msg FROM 'sequence number ([0-9]+)');
    d bigint := n::bigint - base;
BEGIN
    IF base IS NOT NULL AND n IS NOT NULL THEN
        step := coalesce(step, regress.step());
        msg := replace(msg, 'sequence number ' || n, 'sequence number <first+' ||
                       CASE WHEN d % step = 0 THEN (d / step)::text ELSE d || '/' || step END || '>');
    END IF;
    RETURN msg;
END $$;

-- Set a message's state by hand, as a restore would write it (no call announces it);
-- returns the rows changed. With the tables distributed, the queue's entity key keeps
-- the UPDATE on its shard (an UPDATE of every shard commits with two-phase commit).
CREATE FUNCTION regress.set_state(queue text, seq bigint, new_state int) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'sbq.messages'::regclass
                  AND attname = 'entity_key' AND NOT attisdropped) THEN
        EXECUTE format('UPDATE sbq.messages SET state = %s WHERE entity_key = %s AND sequence_number = %s',
                       new_state, sbq.entity_key(queue), seq);
    ELSE
        UPDATE sbq.messages SET state = new_state WHERE sequence_number = seq;
    END IF;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;

-- the helpers answer as the tests expect
SELECT regress.err('SELECT 1');
SELECT regress.err('SELECT 1/0');
SELECT regress.errc('SELECT 1/0');
SELECT regress.errc('DO $$ BEGIN RAISE ''token 6f1c4e2a-0b3d-4c5e-8f70-9a2e1b3c4d5e, 9a2e1b3c-4d5e-4f70-8b3d-6f1c4e2a0b3d''
                     USING ERRCODE = ''SB002''; END $$');
SELECT regress.errc('DO $$ BEGIN RAISE ''sequence number 1042 on queue "q"'' USING ERRCODE = ''SB003''; END $$', 1000, 1);
SELECT regress.errc('DO $$ BEGIN RAISE ''sequence number 1042 on queue "q"'' USING ERRCODE = ''SB003''; END $$');
