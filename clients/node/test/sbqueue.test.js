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
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function queue(prefix, options = {}) {
    const q = `${prefix}-${crypto.randomBytes(4).toString('hex')}`;
    await client.createQueue(q, options);
    queues.push(q);
    return q;
}

before(async () => { client = await sbq.Client.connect(); });

after(async () => {
    for (const q of queues) {
        try { await client.deleteQueue(q); } catch (e) { if (!(e instanceof sbq.QueueNotFound)) throw e; }
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
        const res = await client.query(
            'SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = $1', [app]);
        assert.equal(res.rows[0].n, 3, 'two loops and the renewer');
        await client.sender(q).sendBatch(['a', 'b', 'c']);
        const deadline = Date.now() + 15000;
        while (Date.now() < deadline && done.length < 3) await sleep(100);
    } finally {
        await p.stop();
    }
    assert.deepEqual(done.sort(), ['a', 'b', 'c']);
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
