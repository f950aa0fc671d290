-- bench/soak_setup.sql: the queue and the consumer step of the soak run.
-- soak_consume() receives one message and settles it the way a fleet of
-- workers would: 85 % complete, 10 % abandon, 5 % left for the lock to expire.
CREATE EXTENSION IF NOT EXISTS sbqueue;
SELECT sbq_create_queue('soak', lock_duration => '5 seconds', max_delivery_count => 5);

CREATE FUNCTION soak_consume() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    m sbq_message;
    p double precision := random();
BEGIN
    SELECT * INTO m FROM sbq_receive('soak');
    IF m.sequence_number IS NULL THEN
        RETURN 'empty';
    ELSIF p < 0.85 THEN
        PERFORM sbq_complete('soak', m.lock_token);
        RETURN 'complete';
    ELSIF p < 0.95 THEN
        PERFORM sbq_abandon('soak', m.lock_token);
        RETURN 'abandon';
    END IF;
    RETURN 'expire';
END $$;
