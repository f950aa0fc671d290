// The Node client against a real server (PGHOST, PGPORT, PGUSER, PGDATABASE; the
// database has sbqueue). Run: cd clients/node && npm install && node --test test/
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const path = require('node:path');
const { spawn } = require('node:child_process');
const sbq = require('..');

let client;
const queues = [];
const topics = [];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const uniq = (prefix) => `${prefix}-${crypto.randomBytes(4).toString('hex')}`;

async function queue(prefix, options = {}) {
    const q = uniq(prefix);
    await client.createQueue(q, options);
    queues.push(q);
    return q;
}

async function topic(prefix = 'nodet', options = {}) {
    const t = uniq(prefix);
    await client.createTopic(t, options);
    topics.push(t);
    return t;
}

before(async () => { client = await sbq.Client.connect(); });

after(async () => {
    for (const q of queues) {
        try { await client.deleteQueue(q); } catch (e) { if (!(e instanceof sbq.QueueNotFound)) throw e; }
    }
    for (const t of topics) {
        try { await client.deleteTopic(t); } catch (e) { if (!(e instanceof sbq.EntityNotFound)) throw e; }
    }
    await client.close();
});

test('the message fields are sbq_message columns, in order', async () => {
    const res = await client.query(
        "SELECT a.attname FROM pg_attribute a WHERE a.attrelid = (SELECT typrelid FROM pg_type WHERE typname = 'sbq_message')"
        + ' AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum');
    assert.deepEqual(res.rows.map((r) => r.attname), Object.keys(sbq.MESSAGE_FIELDS));
});

test('bodies round-trip byte for byte', async () => {
    const q = await queue('node');
    const s = client.sender(q);
    const r = client.receiver(q);
    const everyByte = Buffer.from(Array.from({ length: 1024 }, (_, i) => i % 256));
    const big = crypto.randomBytes(1024 * 1024);
    await s.send('Grüße ✓');
    await s.send(everyByte);
    await s.send({ a: [1, 2, { b: null }] });
    await s.send(big);
    const got = await r.receive({ maxMessages: 10 });
    assert.equal(got.length, 4);
    assert.equal(typeof got[0].sequenceNumber, 'bigint');
    assert.equal(got[0].bodyText(), 'Grüße ✓');
    assert.equal(got[0].contentType, 'text/plain; charset=utf-8');
    assert.ok(got[1].body.equals(everyByte));
    assert.deepEqual(got[2].bodyJson(), { a: [1, 2, { b: null }] });
    assert.equal(got[2].contentType, 'application/json');
    assert.ok(got[3].body.equals(big));
    // Both formats of the protocol: pg sends a Buffer parameter in binary format (the
    // sends above) and reads results in text format. It cannot read a binary result
    // byte for byte (its protocol parser decodes every value as UTF-8 text), so the
    // client never asks for one.
    assert.equal(await r.complete(got), 4);
    assert.deepEqual(await r.peek({ maxMessages: 10 }), []);
});

test('send options, batches, scheduling', async () => {
    const q = await queue('node');
    const s = client.sender(q);
    const r = client.receiver(q);
    const n = await s.send('x', { messageId: 'm1', correlationId: 'c', subject: 's', replyTo: 'rt',
                                  timeToLive: 60, applicationProperties: { k: 1 } });
    const ns = await s.sendBatch([Buffer.from('a'), Buffer.from('b')], { subject: 'batch' });
    assert.equal(ns.length, 2);
    assert.ok(ns[0] > n && ns[1] > ns[0]);
    const when = new Date(Date.now() + 3600 * 1000);
    const later = await s.schedule('later', when);
    const got = await r.receive({ maxMessages: 10 });
    assert.deepEqual(got.map((m) => m.sequenceNumber), [n, ...ns]);
    assert.deepEqual([got[0].messageId, got[0].correlationId, got[0].subject, got[0].replyTo],
                     ['m1', 'c', 's', 'rt']);
    assert.deepEqual(got[0].applicationProperties, { k: 1 });
    assert.equal(got[0].timeToLive, 60);
    await r.complete(got);
    assert.equal((await r.peek())[0].state, 'scheduled');
    await s.cancelScheduled(later);
    assert.deepEqual(await r.peek(), []);
    await assert.rejects(s.sendBatch(['a', Buffer.from('b')]), TypeError);
    await assert.rejects(s.send('x', { colour: 'red' }), TypeError);
});

test('settlements, with tokens as strings', async () => {
    const q = await queue('node', { max_delivery_count: 5 });
    const s = client.sender(q);
    const r = client.receiver(q);
    for (let i = 0; i < 5; i++) await s.send(`m${i}`);
    const m = await r.receive({ maxMessages: 5 });
    assert.equal(await r.complete(m[0].lockToken), 1);
    assert.equal(await r.complete([m[1].lockToken]), 1);
    await r.abandon(m[2].lockToken, { tried: 1 });
    await r.defer(m[3]);
    await r.deadLetter(m[4], { reason: 'bad', errorDescription: 'it was bad' });
    const again = await r.receive({ maxMessages: 5 });
    assert.deepEqual(again.map((x) => x.bodyText()), ['m2']);
    assert.equal(again[0].deliveryCount, 2);
    assert.deepEqual(again[0].applicationProperties, { tried: 1 });
    assert.ok((await r.renew(again[0])) >= again[0].lockedUntil);
    await r.complete(again);
    const deferred = await r.receiveDeferred([m[3].sequenceNumber]);
    assert.equal(deferred[0].bodyText(), 'm3');
    await r.complete(deferred);
    const dl = client.deadLetterReceiver(q);
    const d = await dl.receive();
    assert.deepEqual([d[0].deadLetterReason, d[0].deadLetterErrorDescription], ['bad', 'it was bad']);
    await dl.complete(d);
    // many together: all or nothing
    await s.sendBatch(['a', 'b']);
    const two = await r.receive({ maxMessages: 2 });
    await assert.rejects(r.abandon([two[0], crypto.randomUUID()]), sbq.MessageLockLost);
    assert.equal(await r.complete(two), 2);
});

test('settle reports each token; abandon with a delay; many at once', async () => {
    const q = await queue('node');
    const s = client.sender(q);
    const r = client.receiver(q);
    await s.sendBatch(['a', 'b', 'c']);
    const m = await r.receive({ maxMessages: 3 });
    await r.complete(m[1]);
    const got = await r.settle([m[0], m[1], crypto.randomUUID(), m[2], m[0]], 'complete');
    assert.deepEqual(got.map((x) => x.outcome), ['completed', 'lock_lost', 'lock_lost', 'completed', 'lock_lost']);
    assert.equal(got[0].lockToken, m[0].lockToken);
    assert.deepEqual(await r.peek({ maxMessages: 10 }), []);
    await s.sendBatch(['d', 'e']);
    const two = await r.receive({ maxMessages: 2 });
    await sleep(10);            // a Date has milliseconds: a renewal in the same one is not later
    const renewed = await r.settle(two, 'renew');
    assert.deepEqual(renewed.map((x) => x.outcome), ['renewed', 'renewed']);
    assert.ok(renewed[0].lockedUntil > two[0].lockedUntil);
    await assert.rejects(r.settle(two, 'complete', { reason: 'no' }), sbq.InvalidArgument);
    const t0 = Date.now();
    await r.abandon(two, null, { delay: 1.5 });
    assert.deepEqual(await r.receive({ maxMessages: 2 }), []);
    const again = await r.receive({ maxMessages: 2, maxWait: 5 });
    assert.ok(Date.now() - t0 >= 1400, 'not before the delay');
    assert.deepEqual(again.map((x) => x.bodyText()).sort(), ['d', 'e']);
    assert.ok((await r.renew(again)) >= again[0].lockedUntil);
    await r.defer(again);
    const deferred = await r.receiveDeferred(again.map((x) => x.sequenceNumber));
    await r.deadLetter(deferred, { reason: 'bad' });
    assert.equal((await client.deadLetterReceiver(q).peek({ maxMessages: 10 })).length, 2);
});

test("a queue's retry back-off holds an abandoned message back", async () => {
    const q = await queue('node', { retry_delay: 0.5 });
    const r = client.receiver(q);
    await client.sender(q).send('job');
    const t0 = Date.now();
    await r.abandon(await r.receive());
    assert.deepEqual(await r.receive(), []);
    const again = await r.receive({ maxWait: 5 });
    assert.equal(again.length, 1);
    assert.ok(Date.now() - t0 >= 450, 'not before retry_delay');
    await r.abandon(again, null, { delay: 0 });
    assert.equal((await r.receive()).length, 1, 'an explicit delay of 0 wins');
});

test('messages with properties of their own, in one batch', async () => {
    const q = await queue('node', { duplicate_detection_window: '1 minute' });
    const s = client.sender(q);
    const r = client.receiver(q);
    const seqs = await s.sendMessages([
        { body: 'text', messageId: 'm1', subject: 'one' },
        { body: Buffer.from([0, 255]), messageId: 'm2', timeToLive: 60, applicationProperties: { k: [1] } },
        { body: { n: 1 }, correlationId: 'c3' },
        { body: 'again', messageId: 'm1' },
    ]);
    assert.equal(seqs.length, 4);
    assert.equal(seqs[3], seqs[0]);
    const got = await r.peek({ maxMessages: 10 });
    assert.deepEqual(got.map((x) => x.sequenceNumber), seqs.slice(0, 3));
    assert.deepEqual([got[0].bodyText(), got[0].subject, got[0].contentType], ['text', 'one', 'text/plain; charset=utf-8']);
    assert.deepEqual([got[1].body, got[1].timeToLive, got[1].applicationProperties, got[1].contentType],
                     [Buffer.from([0, 255]), 60, { k: [1] }, null]);
    assert.deepEqual([got[2].bodyJson(), got[2].correlationId, got[2].contentType], [{ n: 1 }, 'c3', 'application/json']);
    await assert.rejects(s.sendBatch(['a', 'b'], { messageId: 'shared' }), sbq.InvalidArgument);
    await assert.rejects(s.sendMessages([{ body: 'ok' }, { body: 'bad', messageId: '' }]), sbq.InvalidArgument);
    assert.equal((await r.peek({ maxMessages: 10 })).length, 3);
    await assert.rejects(s.sendMessages([{ body: 'x', colour: 'red' }]), TypeError);
});

test('pg sends strings and arrays of strings untyped: the settlements need no cast', async () => {
    const q = await queue('node');
    await client.query('SELECT sbq_send_batch($1, $2::text[])', [q, ['a', 'b', 'c', 'd', 'e', 'f']]);
    const toks = (await client.query('SELECT lock_token FROM sbq_receive($1, 6)', [q])).rows.map((r) => r.lock_token);
    await client.query('SELECT sbq_complete($1, $2)', [q, toks[0]]);
    await client.query('SELECT sbq_complete($1, $2)', [q, toks.slice(1, 3)]);
    assert.ok((await client.query('SELECT sbq_renew($1, $2) AS u', [q, toks[3]])).rows[0].u instanceof Date);
    await client.query('SELECT sbq_abandon($1, $2)', [q, [toks[3]]]);
    await client.query('SELECT sbq_defer($1, $2)', [q, toks[4]]);
    await client.query('SELECT sbq_deadletter($1, $2, $3)', [q, toks[5], 'why']);
    const res = await client.query('SELECT outcome FROM sbq_settle($1, $2, $3)', [q, toks.slice(0, 2), 'complete']);
    assert.deepEqual(res.rows.map((r) => r.outcome), ['lock_lost', 'lock_lost']);
    const left = await client.query('SELECT state FROM sbq_peek($1, 10) ORDER BY sequence_number', [q]);
    assert.deepEqual(left.rows.map((r) => r.state), ['active', 'deferred']);
});

test('typed errors, one per SQLSTATE', async () => {
    const q = await queue('node', { max_message_size: 1024 });
    const s = client.sender(q);
    const r = client.receiver(q);
    await s.send('dl');
    await r.deadLetter(await r.receive());
    const dead = await client.deadLetterReceiver(q).receive();
    const cases = [
        [sbq.QueueNotFound, () => client.sender('no-such-' + q).send('x')],
        [sbq.MessageLockLost, () => r.complete(crypto.randomUUID())],
        [sbq.MessageNotFound, () => r.receiveDeferred([10n ** 12n])],
        [sbq.QueueAlreadyExists, () => client.createQueue(q)],
        [sbq.MessageTooLarge, () => s.send(Buffer.alloc(2000))],
        [sbq.InvalidOperation, () => client.deadLetterReceiver(q).deadLetter(dead)],
        [sbq.InvalidArgument, () => r.receive({ maxMessages: 0 })],
        [sbq.NullArgument, () => client.sender(null).send('x')],
    ];
    for (const [cls, fn] of cases) {
        await assert.rejects(fn(), (err) => {
            assert.ok(err instanceof cls, `${cls.name} expected, got ${err.name}: ${err.message}`);
            assert.ok(err instanceof sbq.SbqError);
            assert.equal(err.sqlstate, cls.sqlstate);
            assert.equal(err.cause.code, cls.sqlstate);
            return true;
        });
    }
});

test('a session worker', async () => {
    const q = await queue('node', { requires_session: true });
    const s = client.sender(q);
    for (let i = 0; i < 3; i++) for (const id of ['a', 'b']) await s.send(`${id}${i}`, { sessionId: id });
    await assert.rejects(s.send('none'), sbq.InvalidArgument);
    await assert.rejects(client.receiver(q).receive(), sbq.InvalidOperation);
    const seen = {};
    let last = null;
    for (;;) {
        const session = await client.acceptSession(q);
        if (!session) break;
        last = session;
        const other = await sbq.Client.connect();
        await assert.rejects(other.acceptSession(q, { sessionId: session.sessionId }), sbq.SessionCannotBeLocked);
        await other.close();
        assert.equal(await session.getState(), null);
        const msgs = await session.receive({ maxMessages: 10 });
        seen[session.sessionId] = msgs.map((m) => m.bodyText());
        await session.complete(msgs);
        await session.setState(Buffer.from('done'));
        assert.ok((await session.renewSession()) > new Date());
        await session.release();
    }
    assert.deepEqual(seen, { a: ['a0', 'a1', 'a2'], b: ['b0', 'b1', 'b2'] });
    await assert.rejects(last.release(), sbq.SessionLockLost);
    await s.send('a9', { sessionId: 'a' });
    await s.send('b9', { sessionId: 'b' });
    const kept = await client.acceptSession(q, { sessionId: 'a' });
    assert.deepEqual((await kept.peek({ maxMessages: 10 })).map((m) => m.bodyText()), ['a9'], 'a session peeks its own');
    assert.ok((await kept.getState()).equals(Buffer.from('done')));
    await kept.setState(null);
    await kept.release();
});

test("index.d.ts declares the Client's methods (tsc is not needed to run the tests)", () => {
    const fs = require('node:fs');
    const dts = fs.readFileSync(path.join(__dirname, '..', 'index.d.ts'), 'utf8');
    const body = dts.slice(dts.indexOf('export class Client {'));
    const declared = [...body.slice(0, body.indexOf('\n}')).matchAll(/^ {4}(?:static )?(\w+)[<(]/gm)]
        .map((m) => m[1]).filter((n) => n !== 'constructor' && n !== 'connect').sort();
    const internal = ['constructor', 'fn', 'waitQuery'];
    const methods = Object.getOwnPropertyNames(sbq.Client.prototype)
        .filter((n) => !n.startsWith('_') && !internal.includes(n)).sort();
    assert.deepEqual(declared, methods);
    for (const name of ['subscriptionAddress', 'QuotaExceeded', 'NotSupported']) {
        assert.match(dts, new RegExp(`export (function|class) ${name}\\b`));
        assert.ok(sbq[name], name);
    }
});

// (body, subject, RuleName) of each message, sorted: the copies, exactly
const copies = (msgs) => msgs.map((m) => [m.bodyText(), m.subject, (m.applicationProperties || {}).RuleName ?? null])
    .sort((a, b) => (JSON.stringify(a) < JSON.stringify(b) ? -1 : 1));

test('a topic fans out by SQL filters, correlation filters and actions', async () => {
    const t = await topic();
    await client.createSubscription(t, 'eu');
    await client.createSubscription(t, 'corr');
    await client.removeRule(t, 'eu', '$Default');
    await client.addRule(t, 'eu', 'big-eu', { sqlFilter: "region = 'eu' AND amount > 100" });
    await client.removeRule(t, 'corr', '$Default');
    await client.addRule(t, 'corr', 'by-corr', { correlationFilter: { correlationId: 'c1', applicationProperties: { kind: 'x' } } });
    await client.addRule(t, 'corr', 'marked', { sqlFilter: "kind = 'x'", action: "SET sys.Subject = 'x'" });
    const s = client.topicSender(t);
    assert.equal(s.queue, t);
    const n1 = await s.send('m1', { subject: 'orig', correlationId: 'c1', applicationProperties: { region: 'eu', amount: 250, kind: 'x' } });
    assert.equal(typeof n1, 'bigint');
    await s.send('m2', { applicationProperties: { region: 'eu', amount: 50 } });       // no one's
    await s.send('m3', { applicationProperties: { region: 'us', amount: 500, kind: 'x' } });
    await s.send('m4', { correlationId: 'c1', applicationProperties: { region: 'eu', amount: 101, kind: 'y' } });
    const eu = client.subscriptionReceiver(t, 'eu');
    assert.equal(eu.queue, `${t}/subscriptions/eu`);
    assert.equal(sbq.subscriptionAddress(t, 'eu'), eu.queue);
    const got = await eu.receive({ maxMessages: 10 });
    assert.deepEqual(copies(got), [['m1', 'orig', null], ['m4', null, null]]);
    assert.deepEqual(got.find((m) => m.bodyText() === 'm1').applicationProperties, { region: 'eu', amount: 250, kind: 'x' });
    const corr = client.subscriptionReceiver(t, 'corr', { receiveMode: 'receive_and_delete' });
    const taken = await corr.receive({ maxMessages: 10 });
    assert.deepEqual(copies(taken), [['m1', 'orig', null], ['m1', 'x', 'marked'], ['m3', 'x', 'marked']]);
    assert.deepEqual(taken.map((m) => m.lockToken), [null, null, null], 'received and deleted');
    assert.deepEqual(await corr.peek({ maxMessages: 10 }), []);
    assert.deepEqual(await client.topicStats(t), { topic: t, subscriptionCount: 2n, sent: 4n, dropped: 1n });
    const other = await topic();
    await client.sender(other).sendBatch(['x', 'y']);     // no subscription: both dropped
    assert.deepEqual(await client.topicStats(other), { topic: other, subscriptionCount: 0n, sent: 2n, dropped: 2n });
    assert.equal((await client.topicStats(t)).sent, 4n);
    // settle on a subscription; its dead-letter receiver
    const [m1, m4] = got.sort((a, b) => (a.bodyText() < b.bodyText() ? -1 : 1));
    assert.equal(await eu.complete(m1), 1);
    await eu.deadLetter(m4, { reason: 'bad', errorDescription: 'm4 was bad' });
    assert.deepEqual(await eu.peek({ maxMessages: 10 }), []);
    const stats = await client.queueStats(sbq.subscriptionAddress(t, 'eu'));
    assert.deepEqual([stats.sent, stats.completed, stats.dead_lettered, stats.dead_letter_count], [2n, 1n, 1n, 1n]);
    const dlq = client.subscriptionDeadLetterReceiver(t, 'eu');
    assert.equal(dlq.queue, `${t}/subscriptions/eu/$deadletterqueue`);
    const dead = await dlq.receive({ maxMessages: 10 });
    assert.deepEqual(dead.map((m) => [m.bodyText(), m.deadLetterReason, m.deadLetterErrorDescription]), [['m4', 'bad', 'm4 was bad']]);
    assert.equal(await dlq.complete(dead), 1);
    assert.deepEqual(await dlq.peek({ maxMessages: 10 }), []);
});

test("a filter that fails to evaluate dead-letters the subscription's copy", async () => {
    const t = await topic();
    await client.createSubscription(t, 'strict');
    await client.removeRule(t, 'strict', '$Default');
    await client.addRule(t, 'strict', 'div', { sqlFilter: 'amount / 0 > 1' });
    await client.sender(t).send('boom', { applicationProperties: { amount: 5 } });
    assert.deepEqual(await client.subscriptionReceiver(t, 'strict').peek({ maxMessages: 10 }), []);
    const dead = await client.subscriptionDeadLetterReceiver(t, 'strict').receive({ maxMessages: 10 });
    assert.deepEqual(dead.map((m) => [m.bodyText(), m.deadLetterReason]), [['boom', 'FilterException']]);
    assert.ok(dead[0].deadLetterErrorDescription);
});

test('topics, subscriptions and rules: get, update, list, delete', async () => {
    const t = uniq('nodet');
    topics.push(t);
    const created = await client.createTopic(t, { defaultMessageTtl: 3600, duplicate_detection_window: '1 minute', maxMessageSize: 2048 });
    assert.deepEqual([created.topic, created.defaultMessageTtl, created.duplicateDetectionWindow, created.maxMessageSize],
                     [t, 3600, 60, 2048]);
    assert.ok(created.createdAt instanceof Date);
    assert.deepEqual(await client.getTopic(t), created);
    assert.equal((await client.getTopic(t.toUpperCase())).topic, t, 'names in any letter case');
    const updated = await client.updateTopic(t, { maxMessageSize: 4096 });
    assert.deepEqual([updated.maxMessageSize, updated.defaultMessageTtl], [4096, 3600]);
    assert.deepEqual(await client.getTopic(t), updated);
    assert.deepEqual((await client.topics()).filter((x) => x.topic === t), [updated]);
    // seconds as the server counts them (it keeps an interval as a time: 1 mon is 30 days)
    const long = (await client.updateTopic(t, { defaultMessageTtl: '1 year 2 mons 3 days 04:05:06.5' })).defaultMessageTtl;
    const epoch = await client.query('SELECT extract(epoch FROM default_message_ttl)::float8 AS s FROM sbq_get_topic($1)', [t]);
    assert.deepEqual([long, epoch.rows[0].s], [36561906.5, 36561906.5]);
    let sub = await client.createSubscription(t, 's1', { lockDuration: 45, maxDeliveryCount: 3, deadLetteringOnFilterEvaluationExceptions: false });
    assert.deepEqual([sub.topic, sub.subscription, sub.lockDuration, sub.maxDeliveryCount, sub.deadLetteringOnFilterEvaluationExceptions],
                     [t, 's1', 45, 3, false]);
    assert.deepEqual(await client.getSubscription(t, 's1'), sub);
    sub = await client.updateSubscription(t, 's1', { max_delivery_count: 7, defaultMessageTtl: '1 day' });
    assert.deepEqual([sub.maxDeliveryCount, sub.defaultMessageTtl, sub.lockDuration], [7, 86400, 45]);
    assert.deepEqual(await client.getSubscription(t, 'S1'), sub);
    await client.createSubscription(t, 's2', { requiresSession: true });
    const other = await topic();                 // its subscription and rules are not t's
    await client.createSubscription(other, 's1');
    assert.deepEqual((await client.subscriptions(t)).map((x) => x.subscription), ['s1', 's2']);
    assert.deepEqual((await client.subscriptions(t))[0], sub);
    const q = await queue('node');
    assert.equal((await client.updateSubscription(t, 's1', { forwardTo: q })).forwardTo, q);
    assert.equal((await client.updateSubscription(t, 's1', { forwardTo: '' })).forwardTo, null);
    // rules
    const shape = (rs) => rs.map((r) => [r.topic, r.subscription, r.rule, r.filterType, r.filter, r.action]);
    assert.deepEqual(shape(await client.rules(t, 's1')), [[t, 's1', '$Default', 'true', '1=1', null]]);
    const corr = { subject: 'x', replyToSessionId: 'r', applicationProperties: { n: 1, some_key: 'v' } };
    await client.addRule(t, 's1', 'c', { correlationFilter: corr });
    await client.addRule(t, 's1', 'q', { sqlFilter: 'n > 1', action: "SET k = 'w'" });
    await client.addRule(t, 's1', 'a', { action: 'REMOVE k' });
    const stored = await client.query("SELECT filter::jsonb AS f FROM sbq_rules WHERE topic = $1 AND rule = 'c'", [t]);
    assert.deepEqual(stored.rows[0].f, { subject: 'x', reply_to_session_id: 'r', properties: { n: 1, some_key: 'v' } },
                     'sbqueue gets its own names');
    const rules = await client.rules(t.toUpperCase(), 'S1');
    assert.deepEqual(shape(rules), [
        [t, 's1', '$Default', 'true', '1=1', null],
        [t, 's1', 'c', 'correlation', corr, null],
        [t, 's1', 'q', 'sql', 'n > 1', "SET k = 'w'"],
        [t, 's1', 'a', 'true', '1=1', 'REMOVE k'],
    ]);
    assert.ok(rules[0].createdAt instanceof Date);
    await client.removeRule(t, 's1', '$Default');
    await client.removeRule(t, 's1', 'c');
    assert.deepEqual((await client.rules(t, 's1')).map((r) => r.rule), ['q', 'a']);
    await assert.rejects(client.removeRule(t, 's1', 'c'), sbq.EntityNotFound);
    await assert.rejects(client.rules(t, 'no-such'), sbq.EntityNotFound);
    await client.deleteSubscription(t, 's2');
    await assert.rejects(client.getSubscription(t, 's2'), sbq.EntityNotFound);
    assert.deepEqual((await client.subscriptions(t)).map((x) => x.subscription), ['s1']);
    await client.deleteTopic(t);
    for (const call of [() => client.getTopic(t), () => client.topicStats(t), () => client.subscriptions(t),
                        () => client.getSubscription(t, 's1'), () => client.deleteTopic(t)]) {
        await assert.rejects(call(), sbq.EntityNotFound);
    }
    assert.ok(!(await client.topics()).some((x) => x.topic === t));
});

test("duplicate detection is the topic's", async () => {
    const t = await topic('nodet', { duplicateDetectionWindow: 60 });
    await client.createSubscription(t, 'all');
    const s = client.topicSender(t);
    const n = await s.send('one', { messageId: 'm1' });
    assert.equal(await s.send('again', { messageId: 'm1' }), n);
    assert.deepEqual((await client.subscriptionReceiver(t, 'all').peek({ maxMessages: 10 })).map((m) => m.bodyText()), ['one']);
    assert.equal((await client.topicStats(t)).sent, 1n);
});

test('typed errors of topics', async () => {
    const t = await topic();
    await client.createSubscription(t, 's');
    await assert.rejects(client.addRule(t, 's', 'bad', { sqlFilter: 'region = = 1' }), (err) => {
        assert.ok(err instanceof sbq.InvalidArgument);
        assert.match(err.message, /invalid SQL filter/);
        assert.equal(err.detail, 'The error is at character 10 of the filter.');
        return true;
    });
    await assert.rejects(client.addRule(t, 's', 'bad', { action: 'SET' }), (err) => {
        assert.ok(err instanceof sbq.InvalidArgument);
        assert.match(err.message, /invalid rule action/);
        assert.equal(err.detail, 'The error is at character 4 of the action.');
        return true;
    });
    assert.deepEqual((await client.rules(t, 's')).map((r) => r.rule), ['$Default'], 'nothing added');
    // a limit: 2,000 SQL filters per topic (made in one statement, to be quick)
    await client.query("SELECT count(sbq_add_rule($1, 's', 'r' || i, sql_filter => 'n = ' || i)) FROM generate_series(1, 2000) i", [t]);
    const sub = sbq.subscriptionAddress(t, 's');
    const cases = [
        [sbq.InvalidOperation, () => client.receiver(t).receive()],              // a topic
        [sbq.InvalidOperation, () => client.receiver(t).peek()],
        [sbq.InvalidOperation, () => client.sender(sub).send('x')],
        [sbq.InvalidOperation, () => client.deleteQueue(sub)],
        [sbq.QueueNotFound, () => client.subscriptionReceiver(t, 'no-such').receive()],
        [sbq.EntityNotFound, () => client.createSubscription('no-such-' + t, 's')],
        [sbq.EntityNotFound, () => client.addRule(t, 'no-such', 'r')],
        [sbq.QueueAlreadyExists, () => client.createTopic(t)],
        [sbq.QueueAlreadyExists, () => client.createQueue(t)],
        [sbq.QueueAlreadyExists, () => client.createSubscription(t, 's')],
        [sbq.QueueAlreadyExists, () => client.addRule(t, 's', '$Default')],
        [sbq.InvalidArgument, () => client.addRule(t, 's', 'two', { sqlFilter: '1=1', correlationFilter: { subject: 'x' } })],
        [sbq.InvalidArgument, () => client.updateSubscription(t, 's', { duplicateDetectionWindow: 60 })],
        [sbq.InvalidArgument, () => client.createSubscription(t, 'f', { forwardDeadLetteredMessagesTo: t })],
        [sbq.QuotaExceeded, () => client.addRule(t, 's', 'one-more', { sqlFilter: 'n = 0' })],
    ];
    for (const [cls, fn] of cases) {
        await assert.rejects(fn(), (err) => {
            assert.ok(err instanceof cls, `${cls.name} expected, got ${err.name}: ${err.message}`);
            assert.equal(err.sqlstate, cls.sqlstate);
            assert.equal(err.cause.code, cls.sqlstate);
            return true;
        });
    }
    // 0A000 comes only from a database whose SQL is older than the call needs
    assert.equal(require('../errors').bySqlstate['0A000'], sbq.NotSupported);
});

test('trying rules out: testFilter, testAction', async () => {
    const bigEu = "region = 'eu' AND amount > 100";
    assert.equal(await client.testFilter(bigEu, 'x', { applicationProperties: { region: 'eu', amount: 250 } }), true);
    assert.equal(await client.testFilter(bigEu, 'x', { applicationProperties: { region: 'eu', amount: 50 } }), false);
    assert.equal(await client.testFilter(bigEu, 'x'), null, 'unknown: no such properties');
    assert.equal(await client.testFilter("sys.Label = 's' AND sys.ContentType = 'application/json'", { a: 1 }, { subject: 's' }), true);
    await assert.rejects(client.testFilter("amount > 'a'", 'x', { applicationProperties: { amount: 1 } }),
                         (err) => err instanceof sbq.InvalidArgument && /FilterException/.test(err.detail));
    await assert.rejects(client.testFilter('amount > = 1'),
                         (err) => err instanceof sbq.InvalidArgument && err.detail === 'The error is at character 10 of the filter.');
    const m = await client.testAction("SET sys.Subject = 'x'; SET n = n + 1; REMOVE k", 'hi',
                                      { applicationProperties: { n: 1, k: 2 }, timeToLive: 60 });
    assert.deepEqual(m, { body: Buffer.from('hi'), subject: 'x', contentType: 'text/plain; charset=utf-8',
                          timeToLive: 60, applicationProperties: { n: 2 } });
    await assert.rejects(client.testAction('SET', 'x'),
                         (err) => err instanceof sbq.InvalidArgument && err.detail === 'The error is at character 4 of the action.');
    const q = await queue('node');              // what it gives sends as it is
    await client.sender(q).sendMessages([m]);
    const got = (await client.receiver(q).peek())[0];
    assert.deepEqual([got.bodyText(), got.subject, got.applicationProperties], ['hi', 'x', { n: 2 }]);
});

test('sessions on a subscription', async () => {
    const t = await topic();
    await client.createSubscription(t, 'fifo', { requiresSession: true });
    const s = client.sender(t);
    for (let i = 0; i < 2; i++) for (const id of ['a', 'b']) await s.send(`${id}${i}`, { sessionId: id });
    await s.send('none');        // no session id: dead-lettered in the subscription
    await assert.rejects(client.subscriptionReceiver(t, 'fifo').receive(), sbq.InvalidOperation);
    const seen = {};
    const b = await client.acceptSubscriptionSession(t, 'fifo', { sessionId: 'b' });
    assert.equal(b.queue, sbq.subscriptionAddress(t, 'fifo'));
    let msgs = await b.receive({ maxMessages: 10 });
    seen.b = msgs.map((m) => m.bodyText());
    await b.complete(msgs);
    await b.setState(Buffer.from('done'));
    assert.ok((await b.getState()).equals(Buffer.from('done')));
    await b.release();
    const next = await client.acceptSubscriptionSession(t, 'fifo');
    msgs = await next.receive({ maxMessages: 10 });
    seen[next.sessionId] = msgs.map((m) => m.bodyText());
    await next.complete(msgs);
    await next.release();
    assert.deepEqual(seen, { a: ['a0', 'a1'], b: ['b0', 'b1'] });
    assert.equal(await client.acceptSubscriptionSession(t, 'fifo'), null);
    const dead = await client.subscriptionDeadLetterReceiver(t, 'fifo').peek({ maxMessages: 10 });
    assert.deepEqual(dead.map((m) => [m.bodyText(), m.deadLetterReason]), [['none', 'Session id is null.']]);
});

test('a processor over a subscription', async () => {
    const t = await topic();
    await client.createSubscription(t, 'work');
    const done = [];
    const p = new sbq.Processor({}, sbq.subscriptionAddress(t, 'work'), async (m) => { done.push(m.bodyText()); },
                                { concurrency: 2, maxWait: 0.5 });
    await p.start();
    try {
        await client.sender(t).sendBatch(['a', 'b', 'c']);
        const deadline = Date.now() + 10000;
        while (Date.now() < deadline && p.settled.complete < 3) await sleep(50);
    } finally {
        await p.stop();
    }
    assert.deepEqual(done.sort(), ['a', 'b', 'c']);
    assert.equal(p.settled.complete, 3);
    assert.deepEqual(await client.subscriptionReceiver(t, 'work').peek({ maxMessages: 10 }), []);
});

test('an aborted waiting receive returns nothing within 100 ms', async () => {
    const q = await queue('node');
    const c = await sbq.Client.connect();
    try {
        const r = c.receiver(q);
        const ac = new AbortController();
        const p = r.receive({ maxWait: 30, signal: ac.signal });
        await sleep(500);
        const asked = Date.now();
        ac.abort();
        assert.deepEqual(await p, []);
        assert.ok(Date.now() - asked < 100, `took ${Date.now() - asked} ms`);
        await c.sender(q).send('after');
        assert.equal((await r.receive())[0].bodyText(), 'after');
        // an async iterator ends with its signal
        const ac2 = new AbortController();
        const got = [];
        setTimeout(() => ac2.abort(), 300);
        await c.sender(q).send('one');
        for await (const m of r.messages({ maxWait: 10, signal: ac2.signal })) {
            got.push(m.bodyText());
            await r.complete(m);
        }
        assert.deepEqual(got, ['one']);
    } finally {
        await c.close();
    }
});

test('a cancelled wait inside a transaction rejects; a statement_timeout is no cancel', async () => {
    const q = await queue('node');
    const other = await queue('node');
    const c = await sbq.Client.connect();
    try {
        const ac = new AbortController();
        setTimeout(() => ac.abort(), 300);
        await assert.rejects(c.transaction(async () => {
            await c.sender(other).send('in the transaction');
            await c.receiver(q).receive({ maxWait: 30, signal: ac.signal });
        }), (err) => (err.cause || err).code === '57014');
        assert.deepEqual(await c.receiver(other).peek(), [], 'the send was rolled back, and said so');
        await c.query("SET statement_timeout = '300ms'");
        const ac2 = new AbortController();
        await assert.rejects(c.receiver(q).receive({ maxWait: 5, signal: ac2.signal }),
                             (err) => (err.cause || err).code === '57014');
        await c.query('RESET statement_timeout');
    } finally {
        await c.close();
    }
});

test('times and intervals read the same whatever DateStyle and IntervalStyle are', async () => {
    for (const [dateStyle, intervalStyle] of [['SQL,DMY', 'iso_8601'], ['German', 'sql_standard'],
                                              ['Postgres,MDY', 'postgres_verbose']]) {
        const options = `-c DateStyle=${dateStyle} -c IntervalStyle=${intervalStyle}`;
        const c = await sbq.Client.connect({ options });
        try {
            const q = await queue('node', { lock_duration: 30 });
            await client.sender(q).sendBatch(['a', 'b'], { timeToLive: 3600 });
            const expected = await client.receiver(q).peek({ maxMessages: 2 });
            const [got] = await c.receiver(q).receive();
            assert.equal(got.enqueuedTime.getTime(), expected[0].enqueuedTime.getTime(), options);
            assert.equal(got.expiresAt.getTime(), expected[0].expiresAt.getTime());
            assert.equal(got.timeToLive, 3600);
            assert.ok(got.lockedUntil > got.enqueuedTime);
            assert.ok((await c.receiver(q).renew(got)) instanceof Date);
            const t = uniq('nodet');
            topics.push(t);
            const created = await c.createTopic(t, { defaultMessageTtl: 90, duplicateDetectionWindow: 600 });
            assert.deepEqual([created.defaultMessageTtl, created.duplicateDetectionWindow], [90, 600]);
            assert.deepEqual(await c.getTopic(t), await client.getTopic(t));
            // a processor on such connections handles what comes
            const done = [];
            const errs = [];
            const p = new sbq.Processor({ options }, q, async (m) => { done.push(m.bodyText()); }, { maxWait: 1 });
            p.on('error', (e) => errs.push(e));
            await p.start();
            const deadline = Date.now() + 10000;
            while (Date.now() < deadline && done.length < 1) await sleep(50);
            await p.stop();
            assert.deepEqual([done, errs], [['b'], []]);
        } finally {
            await c.close();
        }
    }
});

test('a failing step of the processor is reported and the loop goes on', async () => {
    const q = await queue('node');
    const seen = [];
    const warnings = [];
    const p = new sbq.Processor({}, q, async (m) => {
        seen.push(m.bodyText());
        if (m.bodyText() === 'first') throw new Error('handler failed');
    }, { maxWait: 1, renewLocks: false });
    // listeners that fail in turn: nothing of it may end the loop
    p.on('error', () => { throw new Error('error listener failed'); });
    p.on('warning', (e) => { warnings.push(e.message); throw new Error('warning listener failed'); });
    await client.sender(q).send('first');
    await p.start();
    try {
        let deadline = Date.now() + 10000;
        while (Date.now() < deadline && seen.length < 1) await sleep(50);
        await client.sender(q).send('second');
        deadline = Date.now() + 10000;
        while (Date.now() < deadline && !seen.includes('second')) await sleep(50);
    } finally {
        await p.stop();
    }
    assert.deepEqual(seen.filter((b) => b === 'second'), ['second']);
    assert.ok(warnings.includes('error listener failed'), warnings.join('; '));
});

// connections of the role or application name, waiting a moment for them to close
async function connectionsOf(column, value) {
    let n;
    for (let i = 0; i < 50; i++) {
        const res = await client.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE ${column} = $1`, [value]);
        n = res.rows[0].n;
        if (n === 0) break;
        await sleep(100);
    }
    return n;
}

test('a processor whose start fails closes what it opened; stop() during start ends run()', async () => {
    const q = await queue('node');
    const role = 'sbq_node_' + crypto.randomBytes(4).toString('hex');
    await client.query(`CREATE ROLE ${role} LOGIN CONNECTION LIMIT 2`);
    try {
        const p = new sbq.Processor({ user: role }, q, async () => {}, { concurrency: 3, maxWait: 1 });
        p.on('warning', () => {});
        await assert.rejects(p.run(), /too many connections/);
        assert.equal(await connectionsOf('usename', role), 0, 'the failed start closed its connections');
    } finally {
        await client.query(`DROP ROLE ${role}`);
    }
    const app = uniq('sbq-node');
    const p = new sbq.Processor({ application_name: app }, q, async () => {}, { concurrency: 3, maxWait: 1 });
    const running = p.run();
    const stopped = p.stop();           // while it connects
    let timer;
    const late = new Promise((resolve, reject) => {
        timer = setTimeout(() => reject(new Error('run() did not resolve after stop()')), 10000);
    });
    try {
        await Promise.race([Promise.all([running, stopped]), late]);
    } finally {
        clearTimeout(timer);
    }
    assert.equal(await connectionsOf('application_name', app), 0);
});

test('queueStats finds a queue or subscription in any letter case', async () => {
    const q = uniq('Node-Case');
    await client.createQueue(q);
    queues.push(q);
    await client.sender(q.toLowerCase()).send('x');
    for (const name of [q, q.toUpperCase(), q.toLowerCase()]) {
        const st = await client.queueStats(name);
        assert.deepEqual([st && st.queue, st && st.active_count], [q, 1n], name);
    }
    const t = await topic();
    await client.createSubscription(t, 'Sub1');
    const st = await client.queueStats(sbq.subscriptionAddress(t.toUpperCase(), 'SUB1'));
    assert.equal(st && st.queue, sbq.subscriptionAddress(t, 'Sub1'));
    assert.equal(await client.queueStats('no-such-' + q), null);
});

// ends the connections of an application name; how many it ended
async function terminate(app) {
    const res = await client.query(
        'SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = $1', [app]);
    return res.rows[0].n;
}

test('stop() ends the waiting receives at once', async () => {
    const q = await queue('node');
    const p = new sbq.Processor({}, q, async () => {}, { concurrency: 3, maxWait: 30 });
    await p.start();
    await sleep(500);
    const t = Date.now();
    await p.stop();
    assert.ok(Date.now() - t < 2000, `stop took ${Date.now() - t} ms`);
});

test('a processor survives terminated connections', async () => {
    const q = await queue('node');
    const app = 'sbq-node-' + crypto.randomBytes(4).toString('hex');
    const done = [];
    const p = new sbq.Processor({ application_name: app }, q, async (m) => { done.push(m.bodyText()); },
                                { concurrency: 2, maxWait: 1 });
    p.on('warning', () => {});
    await p.start();
    try {
        await sleep(500);
        assert.equal(await terminate(app), 3, 'two loops and the renewer');
        await client.sender(q).sendBatch(['a', 'b', 'c']);
        const deadline = Date.now() + 15000;
        while (Date.now() < deadline && done.length < 3) await sleep(100);
    } finally {
        await p.stop();
    }
    assert.deepEqual(done.sort(), ['a', 'b', 'c']);
});

test('a warning listener that throws on every reconnect ends no loop and no renewal', async () => {
    const q = await queue('node', { lock_duration: 5 });
    const app = 'sbq-node-' + crypto.randomBytes(4).toString('hex');
    const done = [];
    let warnings = 0;
    const p = new sbq.Processor({ application_name: app }, q, async (m) => {
        // long enough for the renewer to need its connection back
        if (m.bodyText() === 'slow') await sleep(4000);
        done.push(m.bodyText());
    }, { concurrency: 2, maxWait: 1 });
    p.on('warning', () => { warnings++; throw new Error('warning listener failed'); });
    await p.start();
    try {
        await sleep(500);
        assert.equal(await terminate(app), 3, 'two loops and the renewer');
        await client.sender(q).sendBatch(['slow', 'a', 'b', 'c']);
        const deadline = Date.now() + 20000;
        while (Date.now() < deadline && done.length < 4) await sleep(100);
    } finally {
        await p.stop();
    }
    assert.deepEqual(done.sort(), ['a', 'b', 'c', 'slow']);
    assert.ok(warnings >= 2, `${warnings} warnings`);
    assert.ok(p.renewals >= 1, `${p.renewals} renewals`);
});

test('a processor whose handlers outlast the lock', async () => {
    const q = await queue('node', { lock_duration: 5 });
    const n = 4;
    await client.sender(q).sendBatch(Array.from({ length: n }, (_, i) => String(i)));
    const seen = [];
    const p = new sbq.Processor({}, q, async (m) => {
        await sleep(6000);
        seen.push([m.bodyText(), m.deliveryCount]);
    }, { concurrency: 4, maxWait: 1 });
    await p.start();
    const deadline = Date.now() + 40000;
    while (Date.now() < deadline && p.settled.complete < n) await sleep(100);
    await p.stop();
    assert.deepEqual(seen.map((x) => x[0]).sort(), Array.from({ length: n }, (_, i) => String(i)).sort());
    assert.deepEqual([...new Set(seen.map((x) => x[1]))], [1], 'each delivered once');
    assert.equal(p.settled.complete, n);
    assert.equal(p.settled.lost, 0);
    assert.ok(p.renewals > 0);
    assert.deepEqual(await client.receiver(q).peek({ maxMessages: 10 }), []);
});

test('a processor settles by result and by exception', async () => {
    const q = await queue('node', { max_delivery_count: 2 });
    await client.sender(q).sendBatch(['ok', 'fail', 'dl', 'defer']);
    const errs = [];
    const p = new sbq.Processor({}, q, async (m) => {
        const b = m.bodyText();
        if (b === 'fail') throw new Error('boom');
        if (b === 'dl') throw new sbq.DeadLetter('poison', 'it said dl');
        if (b === 'defer') return 'defer';
        return undefined;
    }, { concurrency: 2, maxWait: 0.5 });
    p.on('error', (e) => errs.push(e.message));
    await p.start();
    const deadline = Date.now() + 20000;
    const total = () => Object.values(p.settled).reduce((a, b) => a + b, 0);
    while (Date.now() < deadline && total() < 5) await sleep(100);
    await p.stop();
    assert.deepEqual([p.settled.complete, p.settled.abandon, p.settled.deadletter, p.settled.defer], [1, 2, 1, 1]);
    assert.deepEqual(errs, ['boom', 'boom']);
    const dls = Object.fromEntries((await client.deadLetterReceiver(q).peek({ maxMessages: 10 }))
        .map((m) => [m.bodyText(), m.deadLetterReason]));
    assert.deepEqual(dls, { fail: 'MaxDeliveryCountExceeded', dl: 'poison' });
    assert.deepEqual((await client.receiver(q).peek({ maxMessages: 10 })).map((m) => m.state), ['deferred']);
});

test('SIGTERM: in-flight messages finish and are settled, nothing is lost or handled twice', async () => {
    const q = await queue('node', { lock_duration: 5 });
    const n = 40;
    await client.sender(q).sendBatch(Array.from({ length: n }, (_, i) => String(i)));
    await client.query('CREATE TABLE IF NOT EXISTS sbq_node_done (queue text, body text)');
    const script = `
        const sbq = require(${JSON.stringify(path.join(__dirname, '..'))});
        const { Pool } = require('pg');
        const log = new Pool({ max: 4 });
        (async () => {
            const p = new sbq.Processor({}, ${JSON.stringify(q)}, async (m) => {
                await new Promise((r) => setTimeout(r, 200));
                await log.query('INSERT INTO sbq_node_done VALUES ($1, $2)', [${JSON.stringify(q)}, m.bodyText()]);
            }, { concurrency: 4, maxWait: 5 });
            console.log('ready');
            await p.run();
            await log.end();
            console.log('stopped');
        })().catch((e) => { console.error(e); process.exit(1); });`;
    const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'],
                                                            cwd: path.join(__dirname, '..') });
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    while (!out.includes('ready')) await sleep(20);
    await sleep(1000);
    child.kill('SIGTERM');
    const code = await new Promise((r) => child.on('exit', r));
    assert.equal(code, 0);
    assert.ok(out.includes('stopped'));
    const done = (await client.query('SELECT body FROM sbq_node_done WHERE queue = $1', [q])).rows.map((r) => r.body);
    const left = await client.receiver(q).peek({ maxMessages: 100 });
    assert.ok(done.length > 0 && done.length < n, `handled ${done.length}`);
    assert.equal(new Set(done).size, done.length, 'nothing handled twice');
    assert.deepEqual([...done, ...left.map((m) => m.bodyText())].map(Number).sort((a, b) => a - b),
                     Array.from({ length: n }, (_, i) => i), 'nothing lost');
    assert.deepEqual(left.filter((m) => m.lockedUntil && m.lockedUntil > new Date()), [], 'nothing left locked');
    assert.deepEqual(left.filter((m) => m.deliveryCount > 0).map((m) => m.bodyText()), [],
                     'the handlers in flight finished: nothing was abandoned');
});
