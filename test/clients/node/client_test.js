// client_test.js: what a new user does with sbqueue from Node.js and node-postgres (pg).
//
// Connection settings come from PGHOST, PGPORT, PGUSER, PGDATABASE (pg reads them).
// Run: cd test/clients/node && npm install --no-audit --no-fund && node --test client_test.js
//
// Notes for users, checked below: pg sends every parameter untyped, so a Buffer body
// needs `$2::bytea` and an object body `$2::jsonb` (an untyped value picks the text
// overload); bigint columns such as sequence_number come back as strings, bytea as a
// Buffer, jsonb as a parsed object, uuid as a string.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const { Client } = require('pg');

const client = new Client({ statement_timeout: 30000, connectionTimeoutMillis: 10000 });
const q = 'node-client-' + crypto.randomBytes(4).toString('hex');
const dlq = q + '/$deadletterqueue';

const textBody = 'Grüße aus Köln: 1 € ✓';
const binBody = Buffer.from([0, 1, 2, 0xff, 0xfe, 0x80, 0, 0x62, 0x69, 0x6e, 0]);
const jsonBody = { order: 42, items: ['tea', 'milk'], ok: true, price: 3.5, note: null };
const propsIn = { tenant: 'acme', attempt: 1, tags: ['a', 'b'], nested: { x: null } };

const seq = {};     // kind -> sequence number (string)
const msg = {};     // kind -> received row
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function one(sql, params) {
    const res = await client.query(sql, params);
    return res.rows[0];
}

async function all(sql, params) {
    return (await client.query(sql, params)).rows;
}

// Rejects with a pg error whose SQLSTATE (err.code) is `code`.
async function rejectsWith(code, promise) {
    await assert.rejects(promise, (err) => {
        assert.equal(err.code, code, `expected SQLSTATE ${code}, got ${err.code}: ${err.message}`);
        return true;
    });
}

async function stats() {
    return one('SELECT * FROM sbq_queue_stats WHERE queue = $1', [q]);
}

before(async () => {
    await client.connect();
});

after(async () => {
    // Leave nothing behind even when a test failed.
    try {
        await client.query('SELECT sbq_delete_queue($1)', [q]);
    } catch (e) {
        if (e.code !== 'SB001') throw e;
    }
    await client.end();
});

test('create a queue', async () => {
    const p = await one(
        "SELECT * FROM sbq_create_queue($1, lock_duration => '5 seconds', max_delivery_count => 2)",
        [q]);
    assert.equal(p.queue, q);
    assert.equal(p.max_delivery_count, 2);
    const g = await one('SELECT * FROM sbq_get_queue($1)', [q.toUpperCase()]);
    assert.equal(g.queue, q, 'queue names compare case-insensitively');
    const n = await one('SELECT count(*)::int AS n FROM sbq_queues WHERE queue = $1', [q]);
    assert.equal(n.n, 1);
    await rejectsWith('SB006', client.query('SELECT sbq_create_queue($1)', [q]));
});

test('send a string, a Buffer and an object', async () => {
    seq.text = (await one('SELECT sbq_send($1, $2, application_properties => $3::jsonb) AS s',
        [q, textBody, JSON.stringify(propsIn)])).s;
    seq.bin = (await one("SELECT sbq_send($1, $2::bytea, message_id => 'bin-1', subject => 'binary') AS s",
        [q, binBody])).s;
    seq.json = (await one("SELECT sbq_send($1, $2::jsonb, correlation_id => 'corr-7') AS s",
        [q, JSON.stringify(jsonBody)])).s;
    for (const s of Object.values(seq)) assert.match(s, /^\d+$/, 'bigint comes back as a string');
    assert.ok(BigInt(seq.text) < BigInt(seq.bin) && BigInt(seq.bin) < BigInt(seq.json),
        `sequence numbers increase: ${JSON.stringify(seq)}`);
    const st = await stats();
    assert.equal(Number(st.active_count), 3);
    assert.equal(Number(st.sent), 3);
});

test('peek shows the messages without locking them', async () => {
    const rows = await all('SELECT * FROM sbq_peek($1, 10)', [q]);
    assert.deepEqual(rows.map((r) => r.sequence_number), [seq.text, seq.bin, seq.json]);
    assert.ok(rows.every((r) => r.lock_token === null));
});

test('receive them', async () => {
    const t0 = Date.now();
    const rows = await all('SELECT * FROM sbq_receive($1, max_messages => 10)', [q]);
    assert.deepEqual(rows.map((r) => r.sequence_number), [seq.text, seq.bin, seq.json],
        'all three, lowest sequence number first');
    [msg.text, msg.bin, msg.json] = rows;

    assert.ok(Buffer.isBuffer(msg.bin.body), 'bytea comes back as a Buffer');
    assert.ok(msg.bin.body.equals(binBody), `bytea body byte for byte: ${msg.bin.body.toString('hex')}`);
    assert.equal(msg.text.body.toString('utf8'), textBody, 'text body is its UTF-8 bytes');
    assert.ok(msg.text.body.equals(Buffer.from(textBody, 'utf8')));
    const jsonText = (await one('SELECT $1::jsonb::text AS t', [JSON.stringify(jsonBody)])).t;
    assert.equal(msg.json.body.toString('utf8'), jsonText, 'jsonb body is the jsonb text');
    assert.deepEqual(JSON.parse(msg.json.body.toString('utf8')), jsonBody);

    assert.equal(msg.text.content_type, 'text/plain; charset=utf-8');
    assert.equal(msg.bin.content_type, null);
    assert.equal(msg.json.content_type, 'application/json');
    assert.deepEqual(msg.text.application_properties, propsIn, 'application_properties as an object');
    assert.equal(msg.bin.application_properties, null);
    assert.equal(msg.bin.message_id, 'bin-1');
    assert.equal(msg.bin.subject, 'binary');
    assert.equal(msg.json.correlation_id, 'corr-7');
    assert.match(msg.text.message_id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i,
        'default message_id is a UUID');
    assert.deepEqual(rows.map((r) => r.delivery_count), [1, 1, 1]);
    assert.deepEqual(rows.map((r) => r.state), ['active', 'active', 'active']);
    assert.equal(new Set(rows.map((r) => r.lock_token)).size, 3, 'distinct lock tokens');
    for (const r of rows) {
        assert.match(r.lock_token, /^[0-9a-f-]{36}$/);
        assert.ok(r.locked_until instanceof Date);
        const secs = (r.locked_until.getTime() - t0) / 1000;
        assert.ok(secs > 3 && secs < 7, `locked_until is now + 5 s, got +${secs}`);
    }
    assert.equal((await all('SELECT * FROM sbq_receive($1, 10)', [q])).length, 0,
        'locked messages are not handed out again');
    const st = await stats();
    assert.equal(Number(st.locked_count), 3);
    assert.equal(Number(st.active_count), 0);
});

test('renew and complete', async () => {
    const r = await one('SELECT sbq_renew($1, $2) AS lu', [q, msg.text.lock_token]);
    assert.ok(r.lu instanceof Date && r.lu >= msg.text.locked_until, 'renew returns a later locked_until');
    await client.query('SELECT sbq_complete($1, $2::uuid)', [q, msg.text.lock_token]);
    const n = await one('SELECT sbq_complete($1, $2::uuid[]) AS n', [q, [msg.bin.lock_token]]);
    assert.equal(n.n, 1, 'complete(uuid[]) returns the count');
});

test('a bad lock token raises SB002', async () => {
    await rejectsWith('SB002', client.query('SELECT sbq_complete($1, $2::uuid)', [q, msg.text.lock_token]));
    await rejectsWith('SB002', client.query('SELECT sbq_complete($1, $2::uuid)', [q, crypto.randomUUID()]));
    await rejectsWith('SB002', client.query('SELECT sbq_complete($1, $2::uuid[])', [q, [crypto.randomUUID()]]));
    await rejectsWith('SB002', client.query('SELECT sbq_abandon($1, $2::uuid)', [q, crypto.randomUUID()]));
    await rejectsWith('SB002', client.query('SELECT sbq_renew($1, $2::uuid)', [q, crypto.randomUUID()]));
});

test('abandon until dead-lettered, then read the dead-letter queue', async () => {
    await client.query('SELECT sbq_abandon($1, $2::uuid, $3::jsonb)',
        [q, msg.json.lock_token, JSON.stringify({ retry: 'yes', tenant: null })]);
    const second = await all('SELECT * FROM sbq_receive($1)', [q]);
    assert.deepEqual(second.map((r) => r.sequence_number), [seq.json], 'received again after abandon');
    assert.equal(second[0].delivery_count, 2);
    assert.deepEqual(second[0].application_properties, { retry: 'yes', tenant: null },
        'properties_to_modify merged');
    await rejectsWith('SB002', client.query('SELECT sbq_complete($1, $2::uuid)', [q, msg.json.lock_token]));
    await client.query('SELECT sbq_abandon($1, $2::uuid)', [q, second[0].lock_token]);

    assert.equal((await all('SELECT * FROM sbq_receive($1, 10)', [q])).length, 0);
    assert.equal((await all('SELECT * FROM sbq_peek($1, 10)', [q])).length, 0);
    const st = await stats();
    assert.equal(Number(st.dead_letter_count), 1);
    assert.equal(Number(st.dead_lettered), 1);

    const dead = await all('SELECT * FROM sbq_receive($1, 10)', [dlq]);
    assert.deepEqual(dead.map((r) => r.sequence_number), [seq.json]);
    const d = dead[0];
    assert.equal(d.dead_letter_reason, 'MaxDeliveryCountExceeded');
    assert.deepEqual(JSON.parse(d.body.toString('utf8')), jsonBody);
    assert.equal(d.content_type, 'application/json');
    assert.ok(d.lock_token);
    await rejectsWith('SB002', client.query('SELECT sbq_complete($1, $2::uuid)', [q, d.lock_token]));
    await client.query('SELECT sbq_complete($1, $2::uuid)', [dlq, d.lock_token]);
    assert.equal((await all('SELECT * FROM sbq_peek($1, 10)', [dlq])).length, 0);
});

test('an expired lock token raises SB002', async () => {
    await client.query('SELECT sbq_send($1, $2)', [q, 'short-lived lock']);
    const m = await one('SELECT * FROM sbq_receive($1)', [q]);
    assert.ok(m, 'a message to lock');
    assert.equal(m.content_type, 'text/plain; charset=utf-8', 'an untyped string picks the text overload');
    await sleep(5600);
    await rejectsWith('SB002', client.query('SELECT sbq_complete($1, $2::uuid)', [q, m.lock_token]));
    const m2 = await one('SELECT * FROM sbq_receive($1)', [q]);
    assert.ok(m2, 'received again after the lock expired');
    assert.equal(m2.sequence_number, m.sequence_number);
    assert.equal(m2.delivery_count, 2);
    await client.query('SELECT sbq_complete($1, $2::uuid)', [q, m2.lock_token]);
});

test('errors a user meets', async () => {
    await rejectsWith('SB001', client.query('SELECT sbq_send($1, $2)', ['no-such-' + q, 'x']));
    await rejectsWith('22023', client.query('SELECT sbq_create_queue($1)', ['bad name!']));
    await rejectsWith('22004', client.query('SELECT sbq_send($1, NULL::text)', [q]));
});

test('delete the queue', async () => {
    await client.query('SELECT sbq_delete_queue($1)', [q]);
    await rejectsWith('SB001', client.query('SELECT * FROM sbq_get_queue($1)', [q]));
});
