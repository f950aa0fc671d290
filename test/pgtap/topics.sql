-- sbqueue pgTAP: topics, subscriptions and rules, their management (0.10).
-- Topic CRUD (sbq_create_topic, sbq_update_topic, sbq_get_topic, sbq_delete_topic) with
-- default_message_ttl, duplicate_detection_window and max_message_size; names shared
-- with queues (SB006 either way, any letter case) and the reserved segment
-- "/subscriptions/" (22023, for queues and topics); subscription CRUD (every queue
-- property but max_message_size, dead_lettering_on_filter_evaluation_exceptions,
-- requires_session fixed at creation); rules (R10.4 $Default with the true filter on
-- each new subscription, sbq_add_rule with a correlation filter or none, the filter's
-- checks, sbq_remove_rule, $Default too, names case-insensitive); SB008 for a missing
-- topic, subscription or rule, SB010 for a receive from a topic or a send to a
-- subscription; rights (manage on the topic to create subscriptions, manage on the
-- subscription to change it and its rules, send on the topic, listen on the
-- subscription); what the views sbq_topics, sbq_subscriptions, sbq_rules,
-- sbq_topic_stats and sbq_rights show to whom; and what sbq_delete_topic /
-- sbq_delete_subscription take with them (subscriptions, messages, dead letters, rules,
-- rights, counters). Sends and fan-out: topics_send.sql.
--
-- Failures are asserted with their SQLSTATE and message (throws_ok, or pg_temp.try()
-- for a call made as another role). Roles are created in this transaction (tp_*) and
-- go with its ROLLBACK.
BEGIN;
SELECT plan(114);

\ir bad_input_setup.psql

-- Run sql as role r: 'ok', or 'SQLSTATE: message' of the error it raised.
CREATE FUNCTION pg_temp.try(r name, sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        EXECUTE format('SET LOCAL ROLE %I', r);
        EXECUTE sql;
        RESET ROLE;
        RETURN 'ok';
    EXCEPTION WHEN OTHERS THEN
        RESET ROLE;
        RETURN SQLSTATE || ': ' || SQLERRM;
    END;
END $$;

-- Run sql: 'SQLSTATE: message / detail' of the error it raises, or 'ok'.
CREATE FUNCTION pg_temp.bad_detail(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    st text;
    msg text;
    det text;
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
    RETURN st || ': ' || msg || CASE WHEN det <> '' THEN ' / ' || det ELSE '' END;
END $$;

-- Run a query as role r: its rows' first column, sorted, as text[] (or the error).
CREATE FUNCTION pg_temp.rows_as(r name, sql text) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    v text[];
BEGIN
    BEGIN
        EXECUTE format('SET LOCAL ROLE %I', r);
        EXECUTE format('SELECT coalesce(array_agg(x ORDER BY x), ''{}'') FROM (%s) s(x)', sql) INTO v;
        RESET ROLE;
        RETURN v;
    EXCEPTION WHEN OTHERS THEN
        RESET ROLE;
        RETURN ARRAY['ERROR ' || SQLSTATE || ': ' || SQLERRM];
    END;
END $$;

CREATE ROLE tp_mgr;     -- manage on the topic tp_r
CREATE ROLE tp_lis;     -- listen on tp_r/subscriptions/s1
CREATE ROLE tp_snd;     -- send on tp_r
CREATE ROLE tp_none;    -- nothing

-- ============================================================ topics
SELECT is(
    (SELECT ROW(topic, default_message_ttl, duplicate_detection_window, max_message_size)::text
       FROM sbq_create_topic('Tp_A', default_message_ttl => '1 hour',
                             duplicate_detection_window => '2 minutes', max_message_size => 4096)),
    '(Tp_A,01:00:00,00:02:00,4096)',
    'create_topic returns the name as written and the properties given');
SELECT is(
    (SELECT ROW(topic, default_message_ttl, duplicate_detection_window, max_message_size)::text
       FROM sbq_create_topic('tp_def')),
    '(tp_def,,,1048576)',
    'create_topic defaults: no TTL, no duplicate detection, 1 MiB');
SELECT is((SELECT created_at = updated_at FROM sbq_get_topic('tp_def')), true,
    'a new topic has updated_at = created_at');
SELECT is((SELECT topic FROM sbq_get_topic('TP_a')), 'Tp_A',
    'get_topic finds a topic by any letter case and returns its name as written');
SELECT is(
    (SELECT ROW(topic, default_message_ttl, duplicate_detection_window, max_message_size)::text
       FROM sbq_update_topic('tp_a', max_message_size => 8192)),
    '(Tp_A,01:00:00,00:02:00,8192)',
    'update_topic changes what is given and leaves the NULL arguments as they were');
SELECT is(
    (SELECT ROW(default_message_ttl, duplicate_detection_window)::text
       FROM sbq_update_topic('tp_a', default_message_ttl => '30 minutes', duplicate_detection_window => '5 minutes')),
    '(00:30:00,00:05:00)',
    'update_topic changes the TTL and the duplicate detection window');
SELECT is((SELECT ROW(default_message_ttl, max_message_size)::text FROM sbq_topics WHERE topic = 'Tp_A'),
    '(00:30:00,8192)', 'sbq_topics shows the updated properties');

SELECT throws_ok($$SELECT sbq_create_topic('TP_A')$$, 'SB006', 'topic "Tp_A" already exists',
    'create_topic of an existing topic name (other letter case): SB006');
DO $$ BEGIN PERFORM sbq_create_queue('tp_q'); END $$;
SELECT throws_ok($$SELECT sbq_create_topic('TP_Q')$$, 'SB006', 'queue "tp_q" already exists',
    'names: a topic cannot take a queue''s name (SB006)');
SELECT throws_ok($$SELECT sbq_create_queue('tp_a')$$, 'SB006', 'topic "Tp_A" already exists',
    'names: a queue cannot take a topic''s name (SB006)');
SELECT throws_ok($$SELECT sbq_create_topic('x/subscriptions/y')$$, '22023',
    'invalid queue name "x/subscriptions/y"',
    'names: a topic name with the segment /subscriptions/ is refused (22023)');
SELECT throws_ok($$SELECT sbq_create_queue('x/SubScriptions/y')$$, '22023',
    'invalid queue name "x/SubScriptions/y"',
    'names: a queue name with the segment /subscriptions/ (any case) is refused (22023)');
SELECT lives_ok($$SELECT sbq_create_topic('tp_x/subscription/y')$$,
    'names: a topic name with "/subscription/" (singular) is an ordinary name');
-- failing-by-bug (see report): the argument is named topic, as sbq_get_topic(NULL) says
SELECT throws_ok($$SELECT sbq_create_topic(NULL)$$, '22004', 'topic must not be null',
    'create_topic(NULL): 22004');
SELECT throws_ok($$SELECT sbq_create_topic('tp_bad', max_message_size => 0)$$, '22023',
    'max_message_size 0 is out of range', 'create_topic with max_message_size 0: 22023');
SELECT throws_ok($$SELECT sbq_update_topic('tp_a', max_message_size => -1)$$, '22023',
    'max_message_size -1 is out of range', 'update_topic with max_message_size -1: 22023');
SELECT is((SELECT max_message_size FROM sbq_get_topic('tp_a')), 8192,
    'a refused update_topic changed nothing');
SELECT throws_ok($$SELECT sbq_get_topic('tp_nope')$$, 'SB008', 'topic "tp_nope" does not exist',
    'get_topic of a missing topic: SB008');
SELECT throws_ok($$SELECT sbq_update_topic('tp_nope', max_message_size => 10)$$, 'SB008',
    'topic "tp_nope" does not exist', 'update_topic of a missing topic: SB008');
SELECT throws_ok($$SELECT sbq_delete_topic('tp_nope')$$, 'SB008',
    'topic "tp_nope" does not exist', 'delete_topic of a missing topic: SB008');
SELECT throws_ok($$SELECT sbq_get_topic('tp_q')$$, 'SB008', 'topic "tp_q" does not exist',
    'get_topic on a queue''s name: SB008 (a queue is no topic)');
SELECT throws_ok($$SELECT sbq_get_queue('tp_a')$$, 'SB010', '"Tp_A" is a topic, not a queue',
    'get_queue on a topic''s name: SB010 naming the topic');
SELECT throws_ok($$SELECT sbq_receive('tp_a')$$, 'SB010', '"Tp_A" is a topic, not a queue',
    'receive from a topic: SB010');
SELECT throws_ok($$SELECT sbq_peek('tp_a')$$, 'SB010', '"Tp_A" is a topic, not a queue',
    'peek at a topic: SB010');

-- ============================================================ subscriptions
SELECT is(
    (SELECT ROW(topic, subscription, lock_duration, max_delivery_count, default_message_ttl,
                dead_lettering_on_message_expiration, duplicate_detection_window, requires_session,
                dead_lettering_on_filter_evaluation_exceptions)::text
       FROM sbq_create_subscription('tp_a', 'Sub1')),
    '(Tp_A,Sub1,00:00:30,10,,f,,f,t)',
    'create_subscription: queue defaults, dead_lettering_on_filter_evaluation_exceptions true');
SELECT is(
    (SELECT ROW(lock_duration, max_delivery_count, default_message_ttl, dead_lettering_on_message_expiration,
                duplicate_detection_window, requires_session, dead_lettering_on_filter_evaluation_exceptions,
                dead_letter_ttl, retry_delay, retry_backoff, max_retry_delay)::text
       FROM sbq_create_subscription('tp_a', 'sub2', lock_duration => '1 minute', max_delivery_count => 3,
                default_message_ttl => '10 minutes', dead_lettering_on_message_expiration => true,
                requires_session => true,
                dead_lettering_on_filter_evaluation_exceptions => false, dead_letter_ttl => '1 day')),
    '(00:01:00,3,00:10:00,t,,t,f,24:00:00,,f,)',
    'create_subscription takes every property it has');
SELECT throws_ok($$SELECT sbq_create_subscription('tp_a', 'sub3', duplicate_detection_window => '1 minute')$$,
    '22023', 'a subscription has no duplicate_detection_window',
    'a subscription has no duplicate detection of its own: the topic''s applies, once, and its copies share their id');
SELECT is((SELECT array_agg(queue ORDER BY queue) FROM sbq_queues WHERE queue LIKE 'Tp_A/%'),
    ARRAY['Tp_A/subscriptions/Sub1', 'Tp_A/subscriptions/sub2'],
    'a subscription is a queue named <topic>/subscriptions/<name>');
SELECT is((SELECT subscription FROM sbq_get_subscription('TP_A', 'SUB1')), 'Sub1',
    'get_subscription finds it by any letter case');
SELECT is(
    (SELECT ROW(max_delivery_count, lock_duration, dead_lettering_on_filter_evaluation_exceptions)::text
       FROM sbq_update_subscription('tp_a', 'sub1', max_delivery_count => 5,
                                    dead_lettering_on_filter_evaluation_exceptions => false)),
    '(5,00:00:30,f)', 'update_subscription changes what is given, leaves the rest');
SELECT is((SELECT max_delivery_count FROM sbq_get_queue('tp_a/subscriptions/sub1')), 5,
    'update_subscription changes the subscription''s queue');
SELECT is((SELECT ROW(max_delivery_count, dead_lettering_on_filter_evaluation_exceptions)::text
             FROM sbq_subscriptions WHERE subscription = 'Sub1'),
    '(5,f)', 'sbq_subscriptions shows the update');
SELECT throws_ok($$SELECT sbq_update_subscription('tp_a', 'sub2', requires_session => false)$$, '22023',
    'requires_session of subscription "Tp_A/subscriptions/sub2" cannot be changed',
    'requires_session is fixed at creation (22023)');
SELECT lives_ok($$SELECT sbq_update_subscription('tp_a', 'sub2', requires_session => true)$$,
    'update_subscription with the same requires_session is accepted');
SELECT throws_ok($$SELECT sbq_update_subscription('tp_a', 'sub1', max_delivery_count => 0)$$, '22023',
    NULL, 'update_subscription with max_delivery_count 0: 22023');
SELECT throws_ok($$SELECT sbq_create_subscription('tp_a', 'SUB1')$$, 'SB006',
    'subscription "SUB1" of topic "Tp_A" already exists', 'create_subscription of an existing name (other case): SB006');
SELECT throws_ok($$SELECT sbq_create_subscription('tp_nope', 's')$$, 'SB008',
    'topic "tp_nope" does not exist', 'create_subscription on a missing topic: SB008');
SELECT throws_ok($$SELECT sbq_create_subscription('tp_q', 's')$$, 'SB008',
    'topic "tp_q" does not exist', 'create_subscription on a queue: SB008');
SELECT throws_ok($$SELECT sbq_create_subscription('tp_a', '-s')$$, '22023',
    'invalid subscription name "-s"', 'subscription name starting with "-": 22023');
SELECT throws_ok($$SELECT sbq_create_subscription('tp_a', 'a/b')$$, '22023',
    'invalid subscription name "a/b"', 'subscription name with "/": 22023');
SELECT throws_ok(format('SELECT sbq_create_subscription(%L, %L)', 'tp_a', repeat('s', 51)), '22023',
    format('invalid subscription name "%s"', repeat('s', 51)), 'subscription name of 51 characters: 22023');
SELECT lives_ok(format('SELECT sbq_create_subscription(%L, %L)', 'tp_a', repeat('s', 50)),
    'subscription name of 50 characters is accepted');
SELECT throws_ok($$SELECT sbq_create_subscription('tp_a', NULL)$$, '22004',
    'subscription must not be null', 'create_subscription(topic, NULL): 22004');
SELECT throws_ok($$SELECT sbq_create_subscription('tp_a', 'nullbackoff', retry_backoff => NULL)$$, '22004',
    'retry_backoff must not be null', 'create_subscription(retry_backoff => NULL): 22004 (it was taken as false)');
SELECT is((SELECT count(*) FROM sbq_subscriptions WHERE subscription = 'nullbackoff'), 0::bigint,
    '... and no subscription was made');
SELECT throws_ok($$SELECT sbq_get_subscription('tp_a', 'nope')$$, 'SB008',
    'subscription "nope" of topic "Tp_A" does not exist', 'get_subscription of a missing one: SB008');
SELECT throws_ok($$SELECT sbq_update_subscription('tp_a', 'nope', max_delivery_count => 2)$$, 'SB008',
    'subscription "nope" of topic "Tp_A" does not exist', 'update_subscription of a missing one: SB008');
SELECT throws_ok($$SELECT sbq_delete_subscription('tp_a', 'nope')$$, 'SB008',
    'subscription "nope" of topic "Tp_A" does not exist', 'delete_subscription of a missing one: SB008');
SELECT throws_ok($$SELECT sbq_get_subscription('tp_def', 'sub1')$$, 'SB008',
    'subscription "sub1" of topic "tp_def" does not exist',
    'a subscription belongs to its topic: another topic has no subscription of that name (SB008)');
SELECT throws_ok($$SELECT sbq_send('tp_a/subscriptions/sub1', 'x'::text)$$, 'SB010',
    'cannot send to subscription "Tp_A/subscriptions/Sub1"', 'send to a subscription: SB010');
SELECT throws_ok($$SELECT sbq_send_batch('tp_a/subscriptions/sub1', ARRAY['x']::text[])$$, 'SB010',
    'cannot send to subscription "Tp_A/subscriptions/Sub1"', 'send_batch to a subscription: SB010');
SELECT throws_ok($$SELECT sbq_delete_queue('tp_a')$$, 'SB010', '"Tp_A" is a topic, not a queue',
    'delete_queue on a topic''s name: SB010, the topic stays');

-- ============================================================ rules
SELECT is(
    (SELECT ROW(retry_delay, retry_backoff, max_retry_delay)::text
       FROM sbq_create_subscription('tp_a', 'sub3', retry_delay => '1 second', retry_backoff => true,
                                    max_retry_delay => '1 minute')),
    '(00:00:01,t,00:01:00)', 'create_subscription takes the retry properties');
SELECT is(
    (SELECT array_agg(ROW(subscription, rule, filter_type, filter, action)::text ORDER BY subscription)
       FROM sbq_rules WHERE topic = 'Tp_A' AND subscription IN ('Sub1', 'sub2')),
    ARRAY['(Sub1,$Default,true,1=1,)', '(sub2,$Default,true,1=1,)'],
    'R10.4: each new subscription has the rule $Default with the true filter and no action');
SELECT lives_ok($$SELECT sbq_add_rule('tp_a', 'sub1', 'Red',
        correlation_filter => '{"subject": "red", "properties": {"n": 1, "ok": true}}')$$,
    'add_rule with a correlation filter of system and application properties');
SELECT lives_ok($$SELECT sbq_add_rule('tp_a', 'sub1', 'all')$$,
    'add_rule with neither filter: the true filter');
SELECT is(
    (SELECT array_agg(ROW(rule, filter_type, CASE filter_type WHEN 'correlation' THEN filter::jsonb::text ELSE filter END)::text ORDER BY rule COLLATE "C")
       FROM sbq_rules WHERE topic = 'Tp_A' AND subscription = 'Sub1'),
    ARRAY['($Default,true,1=1)',
          '(Red,correlation,"{""subject"": ""red"", ""properties"": {""n"": 1, ""ok"": true}}")',
          '(all,true,1=1)'],
    'sbq_rules lists the rules with their filter type and filter');
SELECT throws_ok($$SELECT sbq_add_rule('tp_a', 'sub1', 'RED')$$, 'SB006',
    'rule "RED" of subscription "Tp_A/subscriptions/Sub1" already exists',
    'add_rule with an existing name (other case): SB006');
SELECT throws_ok($$SELECT sbq_add_rule('tp_a', 'sub1', 'two', sql_filter => '1=1', correlation_filter => '{}')$$,
    '22023', 'a rule has one filter at most', 'add_rule with both filters: 22023');
SELECT throws_ok($$SELECT sbq_add_rule('tp_a', 'sub1', 'c1', correlation_filter => '["subject"]')$$,
    '22023', 'invalid correlation filter', 'a correlation filter that is not an object: 22023');
SELECT is(pg_temp.bad_detail($$SELECT sbq_add_rule('tp_a', 'sub1', 'c2', correlation_filter => '{"Subject": "x"}')$$),
    '22023: invalid correlation filter / "Subject" is not a property a correlation filter matches on.',
    'a correlation filter naming an unknown property (keys are case-sensitive): 22023');
SELECT is(pg_temp.bad_detail($$SELECT sbq_add_rule('tp_a', 'sub1', 'c3', correlation_filter => '{"correlation_id": 7}')$$),
    '22023: invalid correlation filter / The value of "correlation_id" must be a string.',
    'a correlation filter with a number for a system property: 22023');
SELECT is(pg_temp.bad_detail($$SELECT sbq_add_rule('tp_a', 'sub1', 'c4', correlation_filter => '{"properties": ["a"]}')$$),
    '22023: invalid correlation filter / The value of "properties" must be an object.',
    'a correlation filter whose properties is not an object: 22023');
SELECT is(pg_temp.bad_detail($$SELECT sbq_add_rule('tp_a', 'sub1', 'c5', correlation_filter => '{"properties": {"a": {"b": 1}}}')$$),
    '22023: invalid correlation filter / The value of "a" must be a string, number, boolean or null.',
    'a correlation filter with an object as an application property value: 22023');
-- SQL filters and actions: not tested here (they land separately, with their own file).
SELECT throws_ok($$SELECT sbq_add_rule('tp_a', 'sub1', '$Other')$$, '22023', 'invalid rule name "$Other"',
    'a rule name with "$" other than $Default: 22023');
SELECT throws_ok($$SELECT sbq_add_rule('tp_a', 'sub1', NULL)$$, '22004', 'rule must not be null',
    'add_rule with a NULL name: 22004');
SELECT throws_ok($$SELECT sbq_add_rule('tp_a', 'nope', 'r')$$, 'SB008',
    'subscription "nope" of topic "Tp_A" does not exist', 'add_rule on a missing subscription: SB008');
SELECT throws_ok($$SELECT sbq_remove_rule('tp_a', 'sub1', 'nope')$$, 'SB008',
    'rule "nope" of subscription "Tp_A/subscriptions/Sub1" does not exist', 'remove_rule of a missing rule: SB008');
SELECT lives_ok($$SELECT sbq_remove_rule('tp_a', 'sub1', 'red')$$, 'remove_rule by another letter case');
SELECT lives_ok($$SELECT sbq_remove_rule('tp_a', 'sub1', '$default')$$, 'remove_rule removes $Default too');
SELECT is((SELECT array_agg(rule ORDER BY rule) FROM sbq_rules WHERE topic = 'Tp_A' AND subscription = 'Sub1'),
    ARRAY['all'], 'sbq_rules no longer lists the removed rules');
SELECT throws_ok($$SELECT sbq_remove_rule('tp_a', 'sub1', '$Default')$$, 'SB008',
    'rule "$Default" of subscription "Tp_A/subscriptions/Sub1" does not exist', 'removing $Default twice: SB008');
SELECT lives_ok($$SELECT sbq_add_rule('tp_a', 'sub1', '$Default')$$, '$Default can be added back');

SELECT throws_ok(format($$SELECT sbq_add_rule('tp_a', 'sub1', 'huge', correlation_filter => %L)$$,
                        (SELECT jsonb_build_object('properties', jsonb_object_agg('p' || i, i))
                           FROM generate_series(1, 1000) i)::text),
    '22023', 'invalid correlation filter',
    'a correlation filter of more than 4,096 bytes of JSON is refused: every send compares it');

-- ============================================================ rights
DO $$ BEGIN
    PERFORM sbq_create_topic('tp_r');
    PERFORM sbq_create_subscription('tp_r', 's1');
    PERFORM sbq_grant('tp_r', 'tp_mgr', ARRAY['manage']);
    PERFORM sbq_grant('tp_r/subscriptions/s1', 'tp_lis', ARRAY['listen']);
    PERFORM sbq_grant('tp_r', 'tp_snd', ARRAY['send']);
END $$;

SELECT is(pg_temp.try('tp_mgr', $$SELECT sbq_create_topic('tp_mine')$$),
    '42501: permission denied for function sbq_create_topic',
    'rights: creating a topic needs EXECUTE on sbq_create_topic, which PUBLIC does not have');
SELECT is(pg_temp.try('tp_mgr', $$SELECT sbq_create_subscription('tp_r', 's2')$$), 'ok',
    'rights: manage on the topic lets a role create a subscription');
SELECT is(pg_temp.try('tp_mgr', $$SELECT sbq_add_rule('tp_r', 's2', 'r', correlation_filter => '{"to": "x"}')$$), 'ok',
    'rights: the creator of a subscription holds manage on it (adds a rule)');
SELECT is(pg_temp.try('tp_mgr', $$SELECT sbq_update_subscription('tp_r', 's1', max_delivery_count => 2)$$),
    'ok', 'rights: manage on the topic covers a subscription another role made (update_subscription)');
SELECT is(pg_temp.try('tp_mgr', $$SELECT sbq_add_rule('tp_r', 's1', 'r')$$),
    'ok', 'rights: manage on the topic covers the rules of its subscriptions (add_rule)');
SELECT is(pg_temp.try('tp_snd', $$SELECT sbq_create_subscription('tp_r', 's3')$$),
    '42501: permission denied for topic "tp_r"',
    'rights: send on the topic does not let a role create subscriptions');
SELECT is(pg_temp.try('tp_snd', $$SELECT sbq_update_topic('tp_r', max_message_size => 100)$$),
    '42501: permission denied for topic "tp_r"', 'rights: update_topic needs manage on the topic');
SELECT is(pg_temp.try('tp_snd', $$SELECT sbq_delete_topic('tp_r')$$),
    '42501: permission denied for topic "tp_r"', 'rights: delete_topic needs manage on the topic');
SELECT is(pg_temp.try('tp_snd', $$SELECT sbq_send('tp_r', 'x'::text)$$), 'ok',
    'rights: send on the topic lets a role send to it');
SELECT is(pg_temp.try('tp_lis', $$SELECT sbq_send('tp_r', 'x'::text)$$),
    '42501: permission denied for topic "tp_r"', 'rights: listen on a subscription does not let a role send to the topic');
SELECT is(pg_temp.try('tp_snd', $$SELECT sbq_peek('tp_r/subscriptions/s1')$$),
    '42501: permission denied for queue "tp_r/subscriptions/s1"', 'rights: send on the topic does not let a role peek at a subscription');
SELECT is(pg_temp.try('tp_lis', $$SELECT sbq_receive('tp_r/subscriptions/s1', 5)$$), 'ok',
    'rights: listen on the subscription lets a role receive from it');
SELECT is(pg_temp.try('tp_lis', $$SELECT sbq_peek('tp_r/subscriptions/s2')$$),
    '42501: permission denied for queue "tp_r/subscriptions/s2"', 'rights: listen on one subscription does not cover another');
SELECT matches(pg_temp.try('tp_lis', $$SELECT sbq_remove_rule('tp_r', 's1', '$Default')$$),
    '^42501: permission denied for (topic "tp_r"|queue "tp_r/subscriptions/s1")$', 'rights: listen does not let a role remove a rule');
-- any right on the subscription does for get_subscription, as any right on a queue
-- does for sbq_get_queue and as sbq_subscriptions shows it
SELECT is(pg_temp.try('tp_lis', $$SELECT sbq_get_subscription('tp_r', 's1')$$), 'ok',
    'rights: listen on the subscription lets a role read its properties (get_subscription)');
SELECT is(pg_temp.try('tp_none', $$SELECT sbq_get_topic('tp_r')$$),
    '42501: permission denied for topic "tp_r"', 'rights: get_topic needs a right on the topic');

-- the views, per role
SELECT is(pg_temp.rows_as('tp_none', $$SELECT topic FROM sbq_topics WHERE topic LIKE 'tp%'$$), '{}'::text[],
    'views: sbq_topics shows nothing to a role without rights');
SELECT is(pg_temp.rows_as('tp_snd', $$SELECT topic FROM sbq_topics$$), ARRAY['tp_r'],
    'views: sbq_topics shows the topic a role holds send on');
SELECT is(pg_temp.rows_as('tp_lis', $$SELECT topic FROM sbq_topics$$), '{}'::text[],
    'views: listen on a subscription does not show its topic in sbq_topics');
SELECT is(pg_temp.rows_as('tp_lis', $$SELECT subscription FROM sbq_subscriptions$$), ARRAY['s1'],
    'views: sbq_subscriptions shows the subscription a role holds listen on, not the others');
SELECT is(pg_temp.rows_as('tp_lis', $$SELECT subscription || ':' || rule FROM sbq_rules$$), ARRAY['s1:$Default', 's1:r'],
    'views: sbq_rules shows the rules of that subscription only');
SELECT is(pg_temp.rows_as('tp_mgr', $$SELECT subscription FROM sbq_subscriptions$$), ARRAY['s1', 's2'],
    'views: manage on the topic shows all its subscriptions');
SELECT is(pg_temp.rows_as('tp_snd', $$SELECT subscription FROM sbq_subscriptions$$), '{}'::text[],
    'views: send on the topic does not show who subscribes to it');
SELECT is(pg_temp.rows_as('tp_snd', $$SELECT rule FROM sbq_rules$$), '{}'::text[],
    'views: nor their rules');
SELECT is(pg_temp.try('tp_mgr', $$SELECT sbq_peek('tp_r/subscriptions/s1')$$), 'ok',
    'rights: manage on the topic is manage on its subscriptions as queues too (peek)');
SELECT is(pg_temp.try('tp_mgr', $$SELECT sbq_grant('tp_r/subscriptions/s1', 'tp_none', ARRAY['listen'])$$), 'ok',
    'rights: ... and grants on them');
SELECT is(pg_temp.try('tp_mgr', $$SELECT sbq_update_queue('tp_r/subscriptions/s1', max_message_size => 1)$$),
    'SB010: "tp_r/subscriptions/s1" is subscription "s1" of topic "tp_r"',
    'sbq_update_queue on a subscription is SB010: its topic ties it (a subscription has no max_message_size)');
SELECT is(pg_temp.try('tp_mgr', $$SELECT sbq_delete_queue('tp_r/subscriptions/s1')$$),
    'SB010: "tp_r/subscriptions/s1" is subscription "s1" of topic "tp_r"',
    'sbq_delete_queue on a subscription is SB010: sbq_delete_subscription keeps topic and rules in step');
SELECT is(pg_temp.rows_as('tp_none', $$SELECT topic FROM sbq_topic_stats WHERE topic LIKE 'tp%'$$), '{}'::text[],
    'views: sbq_topic_stats shows nothing to a role without rights');
SELECT is(pg_temp.rows_as('tp_lis', $$SELECT entity || ':' || role FROM sbq_rights$$),
    ARRAY['tp_r/subscriptions/s1:tp_lis'], 'views: sbq_rights shows a role its own rights');

-- ============================================================ delete cascades
DO $$ BEGIN
    PERFORM sbq_send('tp_r', 'one'::text, to_address => 'x');
    PERFORM sbq_deadletter('tp_r/subscriptions/s2', (SELECT lock_token FROM sbq_receive('tp_r/subscriptions/s2', 1)), 'why');
END $$;
SELECT is((SELECT ROW(subscription_count, sent)::text FROM sbq_topic_stats WHERE topic = 'tp_r'), '(2,2)',
    'sbq_topic_stats: the topic''s subscriptions and sends before the delete');
SELECT is(pg_temp.try('tp_mgr', $$SELECT sbq_delete_subscription('tp_r', 's2')$$), 'ok',
    'rights: the creator of a subscription deletes it');
SELECT is((SELECT count(*)::int FROM sbq_queues WHERE queue = 'tp_r/subscriptions/s2'), 0,
    'delete_subscription drops its queue');
SELECT is((SELECT count(*)::int FROM sbq.rules r WHERE NOT EXISTS (SELECT FROM sbq.subscriptions s WHERE s.queue_id = r.queue_id)), 0,
    'delete_subscription leaves no orphan rule');
SELECT is((SELECT count(*)::int FROM sbq_rights WHERE entity = 'tp_r/subscriptions/s2'), 0,
    'delete_subscription drops the rights on it');
DO $$ BEGIN PERFORM sbq_delete_topic('tp_r'); END $$;
SELECT is((SELECT count(*)::int FROM sbq_queues WHERE queue LIKE 'tp_r/%'), 0,
    'delete_topic drops its subscriptions'' queues');
SELECT is((SELECT count(*)::int FROM sbq.subscriptions s WHERE NOT EXISTS (SELECT FROM sbq.topics t WHERE t.topic_id = s.topic_id))
         + (SELECT count(*)::int FROM sbq.rules r WHERE NOT EXISTS (SELECT FROM sbq.subscriptions s WHERE s.queue_id = r.queue_id))
         + (SELECT count(*)::int FROM sbq.messages m WHERE NOT EXISTS (SELECT FROM sbq.queues q WHERE q.queue_id = m.queue_id))
         + (SELECT count(*)::int FROM sbq.dead_letters m WHERE NOT EXISTS (SELECT FROM sbq.queues q WHERE q.queue_id = m.queue_id))
         + (SELECT count(*)::int FROM sbq.rights r WHERE NOT EXISTS (SELECT FROM sbq.queues q WHERE q.queue_id = r.queue_id)
                                                   AND NOT EXISTS (SELECT FROM sbq.topics t WHERE t.topic_id = r.queue_id))
         + (SELECT count(*)::int FROM sbq.queue_counters c WHERE NOT EXISTS (SELECT FROM sbq.queues q WHERE q.queue_id = c.queue_id)
                                                   AND NOT EXISTS (SELECT FROM sbq.topics t WHERE t.topic_id = c.queue_id)),
    0, 'delete_topic leaves no subscription, rule, message, dead letter, right or counter behind');
SELECT is(pg_temp.try('tp_mgr', $$SELECT sbq_get_topic('tp_r')$$), 'SB008: topic "tp_r" does not exist',
    'after delete_topic the topic is gone (SB008)');
SELECT throws_ok($$SELECT sbq_receive('tp_r/subscriptions/s1')$$, 'SB001',
    'queue "tp_r/subscriptions/s1" does not exist', 'a deleted subscription''s address is no queue (SB001)');
SELECT lives_ok($$SELECT sbq_create_queue('tp_r')$$, 'a deleted topic''s name is free for a queue');

SELECT * FROM finish();
ROLLBACK;
