-- filter: the SQL filter and rule-action language as a subscription applies it, through
-- sbq_test_filter and sbq_test_action on an sbq_new_message. Each case shows the
-- filter's value: t, f, unknown (NULL: no match), or the error a subscription
-- dead-letters the copy with. The engine's own suite (test/filter) covers the
-- language case by case; this one covers what PostgreSQL gives it: JSON values as
-- typed values, missing and null properties, names in any letter case, the system
-- properties of a send, errors and their positions.
\set VERBOSITY sqlstate

-- the value of a filter on a message with application properties p (and subject s);
-- an error as 'SQLSTATE: message (detail)'
CREATE FUNCTION regress.f(filter text, p jsonb DEFAULT NULL, s text DEFAULT NULL)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    r boolean;
    d text;
BEGIN
    r := sbq_test_filter(filter, sbq_new_message('body', subject => s, application_properties => p));
    RETURN coalesce(r::text, 'unknown');
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS d = PG_EXCEPTION_DETAIL;
    RETURN SQLSTATE || ': ' || SQLERRM || ' (' || d || ')';
END $$;

-- the same for a statement: its error as 'SQLSTATE: message (detail)', or 'no error'
CREATE FUNCTION regress.fe(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    d text;
BEGIN
    EXECUTE sql;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS d = PG_EXCEPTION_DETAIL;
    RETURN SQLSTATE || ': ' || SQLERRM || ' (' || d || ')';
END $$;

-- comparisons of each JSON type with constants
SELECT filter, regress.f(filter, '{"i": 5, "d": 2.5, "s": "red", "b": true, "n": null, "o": {"x": 1}, "a": [1]}')
  FROM (VALUES ('i = 5'), ('i = 5.0'), ('i > 4'), ('i <> 5'), ('i != 6'), ('i >= 5'), ('i <= 4'),
               ('d = 2.5'), ('d > 2'), ('d < i'), ('i + d = 7.5'), ('i * 2 = 10'), ('i / 2 = 2'),
               ('i % 3 = 2'), ('-i = -5'), ('+d = 2.5'), ('i / 2.0 = 2.5'),
               ('s = ''red'''), ('s = ''RED'''), ('s > ''blue'''), ('s + ''!'' = ''red!'''),
               ('b = TRUE'), ('b <> FALSE'), ('b'), ('NOT b'),
               ('i = ''5'''), ('s = 5'), ('b = 1'), ('b > FALSE'), ('s + 1 = ''red1'''),
               ('o = 1'), ('a = 1'), ('EXISTS(o)'), ('o IS NULL'), ('o IS NOT NULL')) v(filter);

-- missing and null properties: unknown through the operators, three-valued logic
SELECT filter, regress.f(filter, '{"i": 5, "n": null}')
  FROM (VALUES ('m = 1'), ('n = 1'), ('m IS NULL'), ('n IS NULL'), ('i IS NULL'), ('m IS NOT NULL'),
               ('EXISTS(m)'), ('EXISTS(n)'), ('EXISTS(i)'), ('NOT EXISTS(m)'),
               ('m = 1 AND i = 5'), ('m = 1 AND i = 6'), ('m = 1 OR i = 5'), ('m = 1 OR i = 6'),
               ('NOT (m = 1)'), ('m + 1 = 2'), ('m = 1 AND 1/0 = 1'), ('i = 6 AND 1/0 = 1'),
               ('i = 5 OR 1/0 = 1'), ('i IN (1, 5)'), ('i IN (1, NULL)'), ('i NOT IN (1, 2)'),
               ('m IN (1, 2)'), ('i NOT IN (5, NULL)')) v(filter);

-- names: any letter case, delimited, quoted, scopes, property()
SELECT filter, regress.f(filter, '{"Color": "red", "my key": 1, "x]y": 2, "user": 3}')
  FROM (VALUES ('color = ''red'''), ('COLOR = ''red'''), ('user.color = ''red'''),
               ('[my key] = 1'), ('"my key" = 1'), ('[x]]y] = 2'), ('p(''color'') = ''red'''),
               ('property(''user.COLOR'') = ''red'''), ('[user] = 3'), ('user.[user] = 3')) v(filter);

-- LIKE, with and without an escape
SELECT filter, regress.f(filter, '{"s": "50%_off", "t": "abc"}')
  FROM (VALUES ('s LIKE ''50%'''), ('s LIKE ''5_\%\_off'' ESCAPE ''\'''), ('s LIKE ''%!%!_%'' ESCAPE ''!'''),
               ('t LIKE ''a_c'''), ('t LIKE ''A%'''), ('t NOT LIKE ''%b%'''), ('t LIKE ''ab'''),
               ('m LIKE ''a%'''), ('t LIKE 1'), ('t LIKE ''a'' ESCAPE ''xy''')) v(filter);

-- the system properties of a send
SELECT filter, sbq_test_filter(filter, sbq_new_message('four', message_id => 'M1', correlation_id => 'C',
         subject => 'S', reply_to => 'R', session_id => 'Z', to_address => 'T', reply_to_session_id => 'RS'))
  FROM (VALUES ('sys.MessageId = ''M1'''), ('sys.CorrelationId = ''C'''), ('sys.Label = ''S'''),
               ('sys.Subject = ''S'''), ('sys.label = ''S'''), ('sys.ReplyTo = ''R'''),
               ('sys.SessionId = ''Z'''), ('sys.To = ''T'''), ('sys.ReplyToSessionId = ''RS'''),
               ('sys.ContentType = ''text/plain; charset=utf-8'''), ('sys.Size = 4'),
               ('sys.DeliveryCount = 0'), ('sys.SequenceNumber = 0'), ('EXISTS(sys.LockToken)'),
               ('sys.LockToken IS NULL'), ('sys.ScheduledEnqueueTimeUtc IS NULL'),
               ('sys.EnqueuedTimeUtc IS NOT NULL')) v(filter);
SELECT sbq_test_filter('sys.ContentType = ''application/json''', sbq_new_message('{}'::jsonb));
SELECT sbq_test_filter('sys.ContentType IS NULL', sbq_new_message('\x00'::bytea));
SELECT sbq_test_filter('sys.CorrelationId IS NULL', sbq_new_message('x'));
-- times in UTC, ISO 8601, whatever the session's time zone
SET timezone = 'Asia/Tokyo';
SELECT sbq_test_filter('sys.EnqueuedTimeUtc LIKE ''____-__-__T__:__:__.______Z''', sbq_new_message('x'));
SELECT sbq_test_filter('sys.ScheduledEnqueueTimeUtc = ''2030-01-01T00:00:00.000000Z''',
                       sbq_new_message('x', scheduled_enqueue_time => '2030-01-01 09:00+09'));
RESET timezone;
SELECT regress.f('sys.Nope = 1');
SELECT regress.f('sys.color = ''red''', '{"color": "red"}');

-- constants and arithmetic errors
SELECT filter, regress.f(filter)
  FROM (VALUES ('9223372036854775807 > 0'), ('-9223372036854775808 < 0'), ('9223372036854775807 + 1 > 0'),
               ('1.5e3 = 1500'), ('1 / 0 = 1'), ('1.0 / 0 > 1'), ('5 % 0 = 1'), ('TRUE'), ('FALSE'),
               ('NULL IS NULL'), ('1 = 1'), ('1 = 0'), ('''it''''s'' = ''it''''s'''),
               ('newid() IS NOT NULL'), ('newid() <> newid()'), ('1'), ('''x''')) v(filter);

-- malformed filters: 22023 at add time, with the character position
SELECT filter, regress.f(filter)
  FROM (VALUES (''), ('a ='), ('a = = 1'), ('(a = 1'), ('a = 1)'), ('a IN ()'), ('a LIKE'),
               ('''unterminated'), ('[unterminated'), ('a = 1 AND'), ('EXISTS(1)'),
               ('99999999999999999999 = 1'), ('a @ 1'), ('sys. = 1')) v(filter);
SELECT regress.f(repeat('(', 129) || '1=1' || repeat(')', 129));
SELECT regress.f('a = ''' || repeat('x', 1030) || '''');
SELECT length('a = ''' || repeat('x', 1017) || ''''), regress.f('a = ''' || repeat('x', 1017) || '''');

-- actions: the message a subscription's copy gets
SELECT application_properties, subject, correlation_id, message_id
  FROM sbq_test_action('SET a = a + 1; SET B = ''b''; REMOVE c; SET sys.Label = ''new''',
                       sbq_new_message('x', subject => 'old', application_properties => '{"a": 1, "C": 2, "d": 3}'));
SELECT application_properties FROM sbq_test_action('SET d = d * 2, SET e = d', sbq_new_message('x', application_properties => '{"d": 1.5}'));
-- a double keeps every digit it has: 0.30000000000000004 is not 0.3
SELECT application_properties FROM sbq_test_action('SET b = a; SET c = a * 3', sbq_new_message('x', application_properties => '{"a": 0.30000000000000004}'));
SELECT application_properties FROM sbq_test_action('SET n = missing', sbq_new_message('x'));
SELECT application_properties, correlation_id FROM sbq_test_action('SET sys.CorrelationId = NULL', sbq_new_message('x', correlation_id => 'c'));
SELECT regress.fe($$SELECT sbq_test_action('SET sys.SequenceNumber = 1', sbq_new_message('x'))$$);
SELECT regress.fe($$SELECT sbq_test_action('REMOVE sys.Label', sbq_new_message('x'))$$);
SELECT regress.fe($$SELECT sbq_test_action('SET a = 1 / 0', sbq_new_message('x'))$$);
SELECT regress.fe($$SELECT sbq_test_action('SET sys.Label = 1', sbq_new_message('x'))$$);
SELECT regress.fe($$SELECT sbq_test_action('SET a = 1.0 / 0', sbq_new_message('x'))$$);
SELECT regress.fe($$SELECT sbq_test_action('SET', sbq_new_message('x'))$$);
SELECT regress.fe($$SELECT sbq_test_action(repeat('SET a = 1, ', 32) || 'SET a = 1', sbq_new_message('x'))$$);
SELECT application_properties FROM sbq_test_action('SET sys.ScheduledEnqueueTimeUtc = ''x''', sbq_new_message('x', application_properties => '{"k": 1}'));

-- NULL where a value is required
SELECT regress.err($$SELECT sbq_test_filter(NULL, sbq_new_message('x'))$$);
SELECT regress.err($$SELECT sbq_test_filter('1=1', NULL)$$);
SELECT regress.fe($$SELECT sbq_test_action(NULL, sbq_new_message('x'))$$);
DROP FUNCTION regress.f(text, jsonb, text);
DROP FUNCTION regress.fe(text);
