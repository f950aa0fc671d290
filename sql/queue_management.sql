-- queue_management: create, update, get, purge, delete and the views
\set VERBOSITY sqlstate

-- defaults of API.md
SELECT queue, lock_duration, max_delivery_count, default_message_ttl,
       dead_lettering_on_message_expiration, duplicate_detection_window,
       requires_session, forward_to, forward_dead_lettered_messages_to, max_message_size,
       created_at = updated_at AS fresh
  FROM sbq_create_queue('orders');

-- every property given
SELECT queue, lock_duration, max_delivery_count, default_message_ttl,
       dead_lettering_on_message_expiration, max_message_size
  FROM sbq_create_queue('App/Orders.v1-eu_x', lock_duration => '5 minutes',
                        max_delivery_count => 1, default_message_ttl => '1 hour',
                        dead_lettering_on_message_expiration => true,
                        max_message_size => 1024);

-- names compare case-insensitively: SB006 on any spelling of an existing name
SELECT regress.err($$SELECT sbq_create_queue('ORDERS')$$);
SELECT regress.err($$SELECT sbq_create_queue('app/orders.V1-EU_X')$$);

-- bad names: 22023, and nothing created
SELECT n, regress.err(format('SELECT sbq_create_queue(%L)', n))
  FROM unnest(ARRAY['', repeat('a', 261), '/orders', 'orders/', '.orders', 'orders-',
                    'has#hash', 'has space', 'ünïcode', 'orders/$deadletterqueue',
                    'a@b', 'a?b', 'a*b']) AS n;
SELECT regress.err($$SELECT sbq_create_queue(repeat('a', 260))$$);
SELECT regress.err($$SELECT sbq_create_queue('a')$$);
SELECT regress.err($$SELECT sbq_create_queue('9')$$);
SELECT count(*) AS queues FROM sbq_queues;
SELECT sbq_delete_queue(repeat('A', 260)), sbq_delete_queue('A'), sbq_delete_queue('9');

-- bad properties: 22023 out of range, 22004 NULL
SELECT regress.err($$SELECT sbq_create_queue('p1', lock_duration => '4 seconds')$$);
SELECT regress.err($$SELECT sbq_create_queue('p1', lock_duration => '5 minutes 1 second')$$);
SELECT regress.err($$SELECT sbq_create_queue('p1', lock_duration => '-5 seconds')$$);
SELECT regress.err($$SELECT sbq_create_queue('p1', lock_duration => NULL)$$);
SELECT regress.err($$SELECT sbq_create_queue('p1', max_delivery_count => 0)$$);
SELECT regress.err($$SELECT sbq_create_queue('p1', max_delivery_count => NULL)$$);
SELECT regress.err($$SELECT sbq_create_queue('p1', default_message_ttl => '0')$$);
SELECT regress.err($$SELECT sbq_create_queue('p1', dead_lettering_on_message_expiration => NULL)$$);
SELECT regress.err($$SELECT sbq_create_queue('p1', duplicate_detection_window => '10 seconds')$$);
SELECT regress.err($$SELECT sbq_create_queue('p1', duplicate_detection_window => '8 days')$$);
SELECT queue, duplicate_detection_window FROM sbq_create_queue('dup', duplicate_detection_window => '10 minutes');
SELECT sbq_delete_queue('dup');
SELECT regress.err($$SELECT sbq_create_queue('p1', requires_session => true)$$);
-- requires_session is set at creation only
SELECT requires_session FROM sbq_get_queue('p1');
SELECT regress.err($$SELECT sbq_update_queue('p1', requires_session => false)$$);
SELECT regress.err($$SELECT sbq_update_queue('p1', requires_session => true)$$);
SELECT sbq_delete_queue('p1');
SELECT regress.err($$SELECT sbq_create_queue('p1', requires_session => NULL)$$);
-- retry_backoff too (it was taken as false)
SELECT regress.err($$SELECT sbq_create_queue('p1', retry_backoff => NULL)$$);
SELECT count(*) AS made FROM sbq_queues WHERE queue = 'p1';
-- forward_to names a queue or topic that exists, not the queue itself nor a subscription
SELECT regress.err($$SELECT sbq_create_queue('p1', forward_to => 'no_such_queue')$$);
SELECT regress.err($$SELECT sbq_create_queue('p1', forward_to => 'P1')$$);
SELECT regress.err($$SELECT sbq_create_queue('p1', forward_to => 't/subscriptions/s')$$);
SELECT regress.err($$SELECT sbq_create_queue('p1', forward_to => 'bad name')$$);
SELECT regress.err($$SELECT sbq_create_queue('p1', forward_to => 'orders', requires_session => true)$$);
SELECT regress.err($$SELECT sbq_create_queue('p1', forward_dead_lettered_messages_to => 'nowhere')$$);
SELECT regress.err($$SELECT sbq_create_queue('p1', forward_dead_lettered_messages_to => 'p1')$$);
SELECT regress.err($$SELECT sbq_create_queue('p1', max_message_size => 0)$$);
SELECT regress.err($$SELECT sbq_create_queue('p1', max_message_size => NULL)$$);
SELECT regress.err($$SELECT sbq_create_queue(NULL)$$);
SELECT count(*) AS queues FROM sbq_queues;

-- get: any letter case, the dead-letter path gives its queue, unknown is SB001
SELECT queue, lock_duration FROM sbq_get_queue('ORDERS');
SELECT queue FROM sbq_get_queue('orders/$DeadLetterQueue');
SELECT regress.err($$SELECT sbq_get_queue('missing')$$);
SELECT regress.err($$SELECT sbq_get_queue(NULL)$$);
SELECT regress.err($$SELECT sbq_get_queue('bad name')$$);

-- update: NULL leaves a property as it is
SELECT queue, lock_duration, max_delivery_count, max_message_size, updated_at > created_at AS updated
  FROM sbq_update_queue('Orders', max_delivery_count => 3);
SELECT queue, lock_duration, max_delivery_count, default_message_ttl
  FROM sbq_update_queue('orders', lock_duration => '1 minute', default_message_ttl => '1 day');
-- a bad value changes nothing
SELECT regress.err($$SELECT sbq_update_queue('orders', lock_duration => '1 second', max_delivery_count => 5)$$);
SELECT regress.err($$SELECT sbq_update_queue('orders', max_delivery_count => -1)$$);
SELECT lock_duration, max_delivery_count FROM sbq_get_queue('orders');
SELECT regress.err($$SELECT sbq_update_queue('missing', max_delivery_count => 5)$$);
SELECT regress.err($$SELECT sbq_update_queue('orders/$deadletterqueue', max_delivery_count => 5)$$);
SELECT regress.err($$SELECT sbq_update_queue(NULL)$$);

-- purge: deletes the messages, not the dead letters; returns the count
SELECT count(*) FROM sbq_send_batch('orders', ARRAY['a', 'b', 'c']);
SELECT sbq_purge_queue('orders');
SELECT count(*) AS left_after_purge FROM sbq_peek('orders', 10);
SELECT sbq_purge_queue('orders/$deadletterqueue');
SELECT regress.err($$SELECT sbq_purge_queue('missing')$$);
SELECT regress.err($$SELECT sbq_purge_queue(NULL)$$);

-- the views
SELECT queue, max_delivery_count FROM sbq_queues ORDER BY queue COLLATE "C";
SELECT queue, active_count, locked_count, deferred_count, scheduled_count, dead_letter_count,
       sent, received, completed FROM sbq_queue_stats ORDER BY queue COLLATE "C";

-- delete: drops the queue with its messages; the name is free again
SELECT sbq_send('app/orders.v1-eu_x', 'x') > 0 AS sent;
SELECT sbq_delete_queue('APP/ORDERS.V1-EU_X');
SELECT count(*) AS messages_left FROM sbq.messages m
 WHERE m.queue_id NOT IN (SELECT q.queue_id FROM sbq.queues q);
SELECT regress.err($$SELECT sbq_delete_queue('app/orders.v1-eu_x')$$);
SELECT regress.err($$SELECT sbq_delete_queue('orders/$deadletterqueue')$$);
SELECT regress.err($$SELECT sbq_delete_queue(NULL)$$);
SELECT queue FROM sbq_create_queue('app/orders.v1-eu_x');
SELECT count(*) AS fresh_queue_messages FROM sbq_peek('app/orders.v1-eu_x', 10);
SELECT sbq_delete_queue('app/orders.v1-eu_x');
SELECT sbq_delete_queue('orders');
SELECT count(*) AS queues FROM sbq_queues;

-- under REPEATABLE READ a queue and a topic are made and granted on: the creator's
-- right on the topic is stored, and the grant locks the topic's row (in sbq.topics,
-- not sbq.queues, where it found none and failed with 40001)
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT queue FROM sbq_create_queue('qm_rr_queue');
SELECT topic FROM sbq_create_topic('qm_rr_topic');
SELECT sbq_grant('qm_rr_queue', 'public', '{send}');
SELECT sbq_grant('qm_rr_topic', 'public', '{send}');
COMMIT;
SELECT entity, rights FROM sbq_rights WHERE entity LIKE 'qm_rr_%' AND role = 'public' ORDER BY entity;
SELECT sbq_delete_queue('qm_rr_queue');
SELECT sbq_delete_topic('qm_rr_topic');
