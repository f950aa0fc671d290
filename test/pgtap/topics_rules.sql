-- sbqueue pgTAP: SQL filters and rule actions on sends to a topic (0.10).
-- A rule's SQL filter is checked when it is added (22023 with the character position;
-- at most 1,024 characters, R10.3) and evaluated against every message sent to the
-- topic: user properties are the application properties (names in any letter case),
-- missing ones are unknown and unknown does not match (R10.8, R10.9; J.77, J.78);
-- TRUE and FALSE filters (R10.6, J.76); rules without actions make one copy, each rule
-- with an action its own, with the action's edits and RuleName (R10.5, R10.10, J.80);
-- an action's change of the scheduled time is ignored (R10.12); a filter or action that
-- fails dead-letters one copy in its subscription with the error's type as reason and
-- its message as description, unless dead_lettering_on_filter_evaluation_exceptions is
-- off (R10.11, J.81); all copies of a message sent without an id share one made up for
-- it; a topic holds at most 2,000 SQL filters (54000).
BEGIN;
SELECT plan(44);

\ir bad_input_setup.psql

-- The detail of the error a statement raises.
CREATE FUNCTION pg_temp.err_detail(_sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    d text;
BEGIN
    EXECUTE _sql;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS d = PG_EXCEPTION_DETAIL;
    RETURN d;
END $$;

-- The copies in subscription s of topic t: 'body' or 'body rule' (its RuleName), sorted.
CREATE FUNCTION pg_temp.copies(_t text, _s text) RETURNS text[] LANGUAGE sql AS $$
    SELECT coalesce(array_agg(convert_from(p.body, 'UTF8')
                              || coalesce(' ' || (p.application_properties ->> 'RuleName'), '')
                              ORDER BY convert_from(p.body, 'UTF8') COLLATE "C",
                                       p.application_properties ->> 'RuleName' COLLATE "C" NULLS FIRST), '{}')
      FROM sbq_peek(_t || '/subscriptions/' || _s, 1000) p
$$;

-- ------------------------------------------------------------ fixtures
DO $$ BEGIN
    PERFORM sbq_create_topic('tr');
    -- red: color = 'red' AND quantity > 5 (J.77)
    PERFORM sbq_create_subscription('tr', 'red');
    PERFORM sbq_remove_rule('tr', 'red', '$Default');
    PERFORM sbq_add_rule('tr', 'red', 'big-red', sql_filter => 'color = ''red'' AND quantity > 5');
    -- none: the false filter only (J.76)
    PERFORM sbq_create_subscription('tr', 'none');
    PERFORM sbq_remove_rule('tr', 'none', '$Default');
    PERFORM sbq_add_rule('tr', 'none', 'never', sql_filter => '1 = 0');
    -- grammar: one rule each of J.78
    PERFORM sbq_create_subscription('tr', 'like');
    PERFORM sbq_remove_rule('tr', 'like', '$Default');
    PERFORM sbq_add_rule('tr', 'like', 'bus', sql_filter => 'sys.Label LIKE ''%bus%''');
    PERFORM sbq_create_subscription('tr', 'in');
    PERFORM sbq_remove_rule('tr', 'in', '$Default');
    PERFORM sbq_add_rule('tr', 'in', 'stores', sql_filter => 'StoreId IN (''s1'', ''s2'')');
    PERFORM sbq_create_subscription('tr', 'exists');
    PERFORM sbq_remove_rule('tr', 'exists', '$Default');
    PERFORM sbq_add_rule('tr', 'exists', 'x', sql_filter => 'EXISTS(x)');
    PERFORM sbq_create_subscription('tr', 'isnull');
    PERFORM sbq_remove_rule('tr', 'isnull', '$Default');
    PERFORM sbq_add_rule('tr', 'isnull', 'x', sql_filter => 'x IS NULL');
END $$;

-- ============================================================ checked when added
SELECT throws_ok($$SELECT sbq_add_rule('tr', 'red', 'bad', sql_filter => 'color = = 1')$$, '22023',
    'invalid SQL filter: syntax error at or near "="', 'a filter that does not parse is refused: 22023');
SELECT is(pg_temp.err_detail($$SELECT sbq_add_rule('tr', 'red', 'bad', sql_filter => 'color = = 1')$$),
    'The error is at character 9 of the filter.', '... and the detail gives the position');
SELECT throws_ok($$SELECT sbq_add_rule('tr', 'red', 'bad', action => 'SET = 1')$$, '22023',
    'invalid rule action: property name expected at or near "="', 'an action that does not parse is refused: 22023');
SELECT throws_ok(format($$SELECT sbq_add_rule('tr', 'red', 'long', sql_filter => %L)$$,
                        'a = ''' || repeat('x', 1019) || ''''), '22023',
    'invalid SQL filter: text longer than 1024 characters', 'R10.3: a filter of 1,025 characters is refused (J.82)');
SELECT lives_ok(format($$SELECT sbq_add_rule('tr', 'none', 'long', sql_filter => %L)$$,
                       'a = ''' || repeat('x', 1018) || ''''), 'R10.3: one of 1,024 characters is taken');
SELECT throws_ok($$SELECT sbq_add_rule('tr', 'red', 'both', sql_filter => '1=1', correlation_filter => '{}')$$,
    '22023', 'a rule has one filter at most', 'a rule with both filters is refused');
SELECT is((SELECT array_agg(rule ORDER BY rule) FROM sbq_rules WHERE topic = 'tr' AND subscription = 'red'),
    ARRAY['big-red'], 'nothing refused was stored');
SELECT is((SELECT filter_type || ' ' || filter FROM sbq_rules WHERE topic = 'tr' AND rule = 'big-red'),
    'sql color = ''red'' AND quantity > 5', 'sbq_rules shows a SQL filter as written');

-- ============================================================ matching (R10.8, R10.9)
SELECT lives_ok($$SELECT sbq_send('tr', 'm1', application_properties => '{"color": "red", "quantity": 10}'),
                         sbq_send('tr', 'm2', application_properties => '{"color": "red", "quantity": 1}'),
                         sbq_send('tr', 'm3', application_properties => '{"quantity": 10}'),
                         sbq_send('tr', 'm4', application_properties => '{"COLOR": "red", "Quantity": 6.5}')$$,
    'four sends to the topic');
SELECT is(pg_temp.copies('tr', 'red'), ARRAY['m1', 'm4'],
    'R10.9: color = ''red'' AND quantity > 5 selects m1 and m4 (names in any letter case, 6.5 > 5), not m2 (1) nor m3 (no color: unknown) (J.77)');
SELECT is(pg_temp.copies('tr', 'none'), '{}'::text[], 'R10.6: the false filter selects nothing (J.76)');
SELECT is((SELECT dropped FROM sbq_topic_stats WHERE topic = 'tr'), 0::bigint,
    'nothing was dropped: isnull takes every message without x');
SELECT lives_ok($$SELECT sbq_send('tr', 'l1', subject => 'the bus stop'),
                         sbq_send('tr', 'l2', subject => 'the Bus stop'),
                         sbq_send('tr', 'i1', application_properties => '{"storeid": "s2"}'),
                         sbq_send('tr', 'i2', application_properties => '{"StoreId": "s3"}'),
                         sbq_send('tr', 'e1', application_properties => '{"x": null}'),
                         sbq_send('tr', 'e2', application_properties => '{"x": 1}')$$,
    'sends for the grammar of J.78');
SELECT is(pg_temp.copies('tr', 'like'), ARRAY['l1'], 'R10.8: sys.Label LIKE ''%bus%'' is case-sensitive (J.78)');
SELECT is(pg_temp.copies('tr', 'in'), ARRAY['i1'], 'R10.8: StoreId IN (''s1'', ''s2'') (J.78)');
SELECT is(pg_temp.copies('tr', 'exists'), ARRAY['e1', 'e2'], 'R10.8: EXISTS(x) is true for a null x too (J.78)');
SELECT ok(NOT ('e2' = ANY (pg_temp.copies('tr', 'isnull'))) AND 'e1' = ANY (pg_temp.copies('tr', 'isnull'))
          AND 'm1' = ANY (pg_temp.copies('tr', 'isnull')),
    'R10.9: x IS NULL is true when x is null or absent, false when set (J.78)');

-- ============================================================ actions (R10.5, R10.10, R10.12)
DO $$ BEGIN
    PERFORM sbq_create_topic('ta');
    PERFORM sbq_create_subscription('ta', 's');
    PERFORM sbq_add_rule('ta', 's', 'plain2', sql_filter => '1 = 1');
    PERFORM sbq_add_rule('ta', 's', 'plain3');
    PERFORM sbq_add_rule('ta', 's', 'act1', sql_filter => 'n > 0',
                         action => 'SET n = n * 10; SET sys.Label = ''set by act1''');
    PERFORM sbq_add_rule('ta', 's', 'act2', action => 'REMOVE n; SET sys.ScheduledEnqueueTimeUtc = ''x''');
    PERFORM sbq_create_subscription('ta', 'other');
END $$;
SELECT lives_ok($$SELECT sbq_send('ta', 'five', application_properties => '{"n": 1}', subject => 'orig')$$,
    'a send that all five rules of s match');
SELECT is(pg_temp.copies('ta', 's'), ARRAY['five', 'five act1', 'five act2'],
    'R10.5: 5 rules, 2 with actions, all match: 3 copies, the action copies with RuleName (J.80)');
SELECT is((SELECT application_properties || jsonb_build_object('subject', subject) FROM sbq_peek('ta/subscriptions/s', 10)
            WHERE application_properties ->> 'RuleName' = 'act1'),
    '{"n": 10, "RuleName": "act1", "subject": "set by act1"}'::jsonb, 'R10.10: act1''s copy carries its SET changes');
SELECT is((SELECT application_properties FROM sbq_peek('ta/subscriptions/s', 10)
            WHERE application_properties ->> 'RuleName' = 'act2'),
    '{"RuleName": "act2"}'::jsonb, 'R10.10: act2''s copy has n removed');
SELECT is((SELECT application_properties || jsonb_build_object('subject', subject) FROM sbq_peek('ta/subscriptions/s', 10)
            WHERE application_properties ->> 'RuleName' IS NULL),
    '{"n": 1, "subject": "orig"}'::jsonb, 'R10.10: the plain copy is as sent: an action changes its own copy only');
SELECT is((SELECT count(*) FROM sbq_peek('ta/subscriptions/s', 10) WHERE state = 'active'), 3::bigint,
    'R10.12: an action setting the scheduled time leaves its copy active');
SELECT is((SELECT application_properties FROM sbq_peek('ta/subscriptions/other', 10)), '{"n": 1}'::jsonb,
    'another subscription''s copy is untouched by s''s actions');
SELECT is((SELECT count(DISTINCT message_id) || ' ' || count(*) FROM (
              SELECT message_id FROM sbq_peek('ta/subscriptions/s', 10)
              UNION ALL SELECT message_id FROM sbq_peek('ta/subscriptions/other', 10)) x),
    '1 4', 'the four copies of a message sent without an id share the id made up for it');

-- ============================================================ evaluation errors (R10.11)
DO $$ BEGIN
    PERFORM sbq_create_topic('te');
    PERFORM sbq_create_subscription('te', 'dl');
    PERFORM sbq_remove_rule('te', 'dl', '$Default');
    PERFORM sbq_add_rule('te', 'dl', 'nope', sql_filter => 'sys.Nope = 1');
    PERFORM sbq_create_subscription('te', 'quiet', dead_lettering_on_filter_evaluation_exceptions => false);
    PERFORM sbq_remove_rule('te', 'quiet', '$Default');
    PERFORM sbq_add_rule('te', 'quiet', 'nope', sql_filter => 'sys.Nope = 1');
    PERFORM sbq_create_subscription('te', 'types');
    PERFORM sbq_remove_rule('te', 'types', '$Default');
    PERFORM sbq_add_rule('te', 'types', 'cmp', sql_filter => 'q > 5');
    PERFORM sbq_create_subscription('te', 'act');
    PERFORM sbq_remove_rule('te', 'act', '$Default');
    PERFORM sbq_add_rule('te', 'act', 'div', action => 'SET r = 1 / z');
    PERFORM sbq_create_subscription('te', 'mixed');
    PERFORM sbq_add_rule('te', 'mixed', 'a1', action => 'SET x = 1');
    PERFORM sbq_add_rule('te', 'mixed', 'b2', action => 'SET y = 1 / z');
END $$;
SELECT lives_ok($$SELECT sbq_send('te', 'bad', application_properties => '{"q": "ten", "z": 0}')$$,
    'a send whose filters and action fail does not fail');
SELECT is((SELECT dead_letter_reason || ': ' || dead_letter_error_description
             FROM sbq_peek('te/subscriptions/dl/$deadletterqueue', 10)),
    'FilterException: sys property "Nope" does not exist',
    'R10.11: a missing system property dead-letters the copy with the exception''s type and message (J.81)');
SELECT is((SELECT count(*) FROM sbq_peek('te/subscriptions/dl', 10)), 0::bigint, '... and nothing is active there');
SELECT is((SELECT count(*) FROM sbq_peek('te/subscriptions/quiet', 10)) +
          (SELECT count(*) FROM sbq_peek('te/subscriptions/quiet/$deadletterqueue', 10)), 0::bigint,
    'R10.11: with dead_lettering_on_filter_evaluation_exceptions off the subscription gets nothing');
SELECT is((SELECT dead_letter_reason || ': ' || dead_letter_error_description
             FROM sbq_peek('te/subscriptions/types/$deadletterqueue', 10)),
    'FilterException: cannot compare string with integer in ">"',
    'R10.9: a string compared with a number is an evaluation error');
SELECT is((SELECT dead_letter_reason || ': ' || dead_letter_error_description
             FROM sbq_peek('te/subscriptions/act/$deadletterqueue', 10)),
    'RuleActionException: division by zero in "/"', 'R10.11: an action that fails dead-letters the copy too');
SELECT is((SELECT dead_lettered FROM sbq_queue_stats WHERE queue = 'te/subscriptions/act'), 1::bigint,
    'the copy counts as dead-lettered in its subscription');
-- rules in name order: $Default (no action) and a1 matched before b2 failed. The
-- copy of $Default was left out, while a1's stayed
SELECT is((SELECT string_agg(coalesce(application_properties->>'RuleName', '-') || ' ' ||
                             coalesce(dead_letter_reason, 'active'), ', ' ORDER BY sequence_number)
             FROM (SELECT * FROM sbq_peek('te/subscriptions/mixed', 10)
                   UNION ALL SELECT * FROM sbq_peek('te/subscriptions/mixed/$deadletterqueue', 10)) m),
    'a1 active, - active, - RuleActionException',
    'a failing action keeps the copies of the rules before it, the one of those without an action too');
-- a subscription that forwards: a copy whose filter fails is a dead letter of the
-- subscription, not forwarded (it was, and the dead-lettering then missed it: an
-- internal error for a topic, a dead letter in the destination's sub-queue for a queue)
DO $$ BEGIN
    PERFORM sbq_create_topic('tef_to');
    PERFORM sbq_create_subscription('tef_to', 'all');
    PERFORM sbq_create_queue('tef_q');
    PERFORM sbq_create_topic('tef');
    PERFORM sbq_create_subscription('tef', 'fwt', forward_to => 'tef_to');
    PERFORM sbq_remove_rule('tef', 'fwt', '$Default');
    PERFORM sbq_add_rule('tef', 'fwt', 'div', sql_filter => '10 / z = 1');
    PERFORM sbq_create_subscription('tef', 'fwq', forward_to => 'tef_q');
    PERFORM sbq_remove_rule('tef', 'fwq', '$Default');
    PERFORM sbq_add_rule('tef', 'fwq', 'div', sql_filter => '10 / z = 1');
END $$;
SELECT lives_ok($$SELECT sbq_send('tef', 'bad', application_properties => '{"z": 0}')$$,
    'a send whose filter fails in subscriptions that forward does not fail');
SELECT is((SELECT string_agg(dead_letter_reason || ' ' || dead_letter_source, ', ' ORDER BY dead_letter_source)
             FROM (SELECT * FROM sbq_peek('tef/subscriptions/fwt/$deadletterqueue', 10)
                   UNION ALL SELECT * FROM sbq_peek('tef/subscriptions/fwq/$deadletterqueue', 10)) d),
    'FilterException tef/subscriptions/fwq, FilterException tef/subscriptions/fwt',
    'R10.11: each copy is a dead letter of its subscription');
SELECT is((SELECT count(*) FROM sbq_peek('tef_q/$deadletterqueue', 10)) +
          (SELECT count(*) FROM sbq_peek('tef_q', 10)) +
          (SELECT count(*) FROM sbq_peek('tef_to/subscriptions/all', 10)) +
          (SELECT count(*) FROM sbq_peek('tef_to/subscriptions/all/$deadletterqueue', 10)), 0::bigint,
    '... and nothing of it reached where they forward');
SELECT is((SELECT string_agg(queue || ' ' || dead_lettered, ', ' ORDER BY queue) FROM sbq_queue_stats
            WHERE queue IN ('tef/subscriptions/fwt', 'tef/subscriptions/fwq', 'tef_q')),
    'tef/subscriptions/fwq 1, tef/subscriptions/fwt 1, tef_q 0', '... and each counts where it is');
DO $$ BEGIN
    PERFORM sbq_create_subscription('te', 'noid');
    PERFORM sbq_remove_rule('te', 'noid', '$Default');
    PERFORM sbq_add_rule('te', 'noid', 'clear', sql_filter => 'q = ''clear''', action => 'SET sys.MessageId = ''''');
    PERFORM sbq_create_subscription('te', 'grow');
    PERFORM sbq_remove_rule('te', 'grow', '$Default');
    PERFORM sbq_add_rule('te', 'grow', 'grow', sql_filter => 'q = ''clear''',
                         action => 'SET s = ''xxxxxxxxxxxxxxxx'', SET s = s + s, SET s = s + s, SET s = s + s, SET s = s + s,'
                                   ' SET s = s + s, SET s = s + s, SET s = s + s, SET s = s + s, SET s = s + s,'
                                   ' SET s = s + s, SET s = s + s, SET s = s + s, SET t = s + s');
END $$;
SELECT lives_ok($$SELECT sbq_send('te', 'cleared', application_properties => '{"q": "clear"}')$$,
    'a send whose actions leave an empty message id and 128 KiB of properties does not fail');
SELECT is((SELECT dead_letter_reason || ': ' || dead_letter_error_description
             FROM sbq_peek('te/subscriptions/noid/$deadletterqueue', 10) WHERE convert_from(body, 'UTF8') = 'cleared'),
    'RuleActionException: the action leaves the message without a MessageId',
    'an action may not leave a message without its id: the copy is dead-lettered');
SELECT is((SELECT dead_letter_reason FROM sbq_peek('te/subscriptions/grow/$deadletterqueue', 10)
            WHERE convert_from(body, 'UTF8') = 'cleared'),
    'RuleActionException', 'an action that makes a copy larger than its subscription takes dead-letters it');
SELECT lives_ok($$SELECT sbq_send('te', 'good', application_properties => '{"q": 10, "z": 2}')$$,
    'a send whose filters and action work');
SELECT is(pg_temp.copies('te', 'types') || pg_temp.copies('te', 'act') || pg_temp.copies('te', 'noid'),
    ARRAY['good', 'cleared div', 'good div'], 'it is delivered where the rules say (1 / missing z is unknown: no error)');

-- ============================================================ limits (R10.3)
DO $$
DECLARE
    i int;
BEGIN
    PERFORM sbq_create_topic('tl');
    PERFORM sbq_create_subscription('tl', 's');
    FOR i IN 1 .. 2000 LOOP
        PERFORM sbq_add_rule('tl', 's', 'r' || i, sql_filter => 'n = ' || i);
    END LOOP;
END $$;
SELECT throws_ok($$SELECT sbq_add_rule('tl', 's', 'one-more', sql_filter => 'n = 0')$$, '54000',
    'topic "tl" has 2000 SQL filters', 'R10.3: a topic holds at most 2,000 SQL filters');
SELECT lives_ok($$SELECT sbq_add_rule('tl', 's', 'corr', correlation_filter => '{"subject": "x"}')$$,
    'R10.3: correlation filters count apart');

SELECT * FROM finish();
ROLLBACK;
