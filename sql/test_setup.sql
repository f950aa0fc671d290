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

-- The same with every lock token (random) shown as <token> and, when base is given,
-- the sequence number in the message shown as <first+N>, N its distance from base.
CREATE FUNCTION regress.errc(sql text, base bigint DEFAULT NULL) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    msg text := regexp_replace(regress.err(sql),
                               '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', '<token>', 'g');
    n text := substring(msg FROM 'sequence number ([0-9]+)');
BEGIN
    IF base IS NOT NULL AND n IS NOT NULL THEN
        msg := replace(msg, 'sequence number ' || n, 'sequence number <first+' || (n::bigint - base) || '>');
    END IF;
    RETURN msg;
END $$;

-- the helpers answer as the tests expect
SELECT regress.err('SELECT 1');
SELECT regress.err('SELECT 1/0');
SELECT regress.errc('SELECT 1/0');
SELECT regress.errc('DO $$ BEGIN RAISE ''token 6f1c4e2a-0b3d-4c5e-8f70-9a2e1b3c4d5e, 9a2e1b3c-4d5e-4f70-8b3d-6f1c4e2a0b3d''
                     USING ERRCODE = ''SB002''; END $$');
SELECT regress.errc('DO $$ BEGIN RAISE ''sequence number 1042 on queue "q"'' USING ERRCODE = ''SB003''; END $$', 1000);
SELECT regress.errc('DO $$ BEGIN RAISE ''sequence number 1042 on queue "q"'' USING ERRCODE = ''SB003''; END $$');
