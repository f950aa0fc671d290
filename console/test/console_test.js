// console/test/console_test.js: the web console end to end. Sets up queues in
// the database of the PG* environment (a superuser, sbqueue installed), starts
// console/server.js as a child process, and drives Debian's Chromium (headless,
// through playwright-core) over the page: counts, peek in text/JSON/hex, a
// hostile body shown as text, read-only mode, resubmit and purge with
// --allow-changes, a role without manage, the token, Host and Origin checks,
// and the sparkline. Screenshots go to SBQ_SCREENSHOT_DIR (default
// console/test/screenshots/). Run with `bash console/test/run.sh`.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const net = require('node:net');
const path = require('node:path');
const pg = require('pg');
const { chromium } = require('playwright-core');

const CONSOLE_DIR = path.join(__dirname, '..');
const SHOTS = process.env.SBQ_SCREENSHOT_DIR || path.join(__dirname, 'screenshots');
const CHROMIUM = process.env.SBQ_CHROMIUM || '/usr/bin/chromium';
const LISTENER = 'sbq_console_listener';

const Q_BODIES = 'console/bodies';
const Q_DEAD = 'console/dead';
const Q_SECRET = 'console/secret';
const Q_SPARK = 'console/spark';
const TOPIC = 'console/topic';
const Q_HOSTILE = 'console/hostile';
const Q_STALE = 'console/stale';
const Q_EXACT = 'console/exact';
// names an object has from its prototype
const Q_PROTO = ['constructor', 'toString'];

const TEXT_BODY = 'Hello, console! ünïcödé';
const JSON_BODY = { name: 'widget', tags: ['a', 'b'], n: 42 };
const BINARY_BODY = Buffer.from([0x00, 0x01, 0x02, 0xff, 0xfe, 0x41, 0x42, 0x43, 0x0a, 0x7f,
    0x80, 0x10, 0x20, 0x7e, 0x44, 0x45, 0x46, 0x47, 0x99]);
const XSS_BODY = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">';
const XSS_SUBJECT = '<img src=x onerror="window.__xss = 3">';
const LARGE_SIZE = 70000;

let admin;              // pg.Client as the PG* role (a superuser)
let schema;             // where sbqueue is installed
let browser;
const children = new Set();
const seq = {};         // name -> sequence number (text)

const fn = (name) => `"${schema.replace(/"/g, '""')}".${name}`;
const sql = (text, params) => admin.query(text, params);

async function stats(queue) {
    const r = await sql(`SELECT active_count::int AS active, locked_count::int AS locked,
            deferred_count::int AS deferred, scheduled_count::int AS scheduled,
            dead_letter_count::int AS dead FROM ${fn('sbq_queue_stats')} WHERE queue = $1`, [queue]);
    return r.rows[0];
}

async function deadLetter(queue, n, reason) {
    const r = await sql(`SELECT sequence_number::text AS s, lock_token FROM ${fn('sbq_receive')}($1, $2)`, [queue, n]);
    for (const [i, m] of r.rows.entries()) {
        await sql(`SELECT ${fn('sbq_deadletter')}($1, $2::uuid, $3, $4)`, [queue, m.lock_token, reason, `bad payload ${i + 1}`]);
    }
    return r.rows.map((m) => m.s);
}

// --- the console as a child process ----------------------------------------

function startConsole(args = [], env = {}) {
    return new Promise((resolve, reject) => {
        const child = spawn(process.execPath,
            [path.join(CONSOLE_DIR, 'server.js'), '--port', '0', '--sample-seconds', '1', ...args],
            { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
        children.add(child);
        let out = '';
        let err = '';
        const timer = setTimeout(() => reject(new Error(`console did not start: ${err}`)), 10000);
        child.stdout.on('data', (d) => {
            out += d;
            const m = out.match(/listening on http:\/\/127\.0\.0\.1:(\d+)\//);
            if (m) {
                clearTimeout(timer);
                child.port = Number(m[1]);
                child.url = `http://127.0.0.1:${child.port}/`;
                resolve(child);
            }
        });
        child.stderr.on('data', (d) => { err += d; if (process.env.SBQ_CONSOLE_LOG) process.stderr.write(d); });
        child.on('exit', (code) => {
            children.delete(child);
            clearTimeout(timer);
            reject(new Error(`console exited with ${code}: ${err}`));
        });
    });
}

function stopConsole(child) {
    if (!child || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
    return new Promise((resolve) => {
        const kill = setTimeout(() => child.kill('SIGKILL'), 3000);
        child.once('exit', () => { clearTimeout(kill); children.delete(child); resolve(); });
        child.kill('SIGTERM');
    });
}

// one HTTP request with the headers given as they are (Host included)
function request(port, method, urlPath, { headers = {}, body } = {}) {
    return new Promise((resolve, reject) => {
        const data = body === undefined ? null : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
        const h = { Host: `127.0.0.1:${port}`, ...headers };
        if (data) h['Content-Length'] = data.length;
        const req = http.request({ host: '127.0.0.1', port, method, path: urlPath, headers: h }, (res) => {
            const chunks = [];
            res.on('data', (c) => chunks.push(c));
            res.on('end', () => {
                const text = Buffer.concat(chunks).toString();
                let json = null;
                try { json = JSON.parse(text); } catch (e) { /* not JSON */ }
                resolve({ status: res.statusCode, headers: res.headers, json, text });
            });
        });
        req.on('error', reject);
        if (data) req.write(data);
        req.end();
    });
}

// bytes as they are, for what http.request will not send; the answer's status
// line, or the socket error
function rawRequest(port, text) {
    return new Promise((resolve) => {
        const s = net.connect(port, '127.0.0.1', () => s.write(text));
        let out = '';
        s.on('data', (d) => { out += d; });
        s.on('close', () => resolve(out.split('\r\n')[0]));
        s.on('error', (e) => resolve(`error ${e.code}`));
    });
}

// A TCP forwarder to the test's server: closing it is the database going away
// (its connections cut, new ones refused), listening again on the same port is
// the database back
function pgProxy(port = 0) {
    const pgHost = process.env.PGHOST || '/var/run/postgresql';
    const pgPort = Number(process.env.PGPORT || 5432);
    const target = pgHost.startsWith('/') ? { path: `${pgHost}/.s.PGSQL.${pgPort}` } : { host: pgHost, port: pgPort };
    const sockets = new Set();
    const server = net.createServer((c) => {
        const u = net.connect(target);
        for (const [a, b] of [[c, u], [u, c]]) {
            sockets.add(a);
            a.pipe(b);
            a.on('error', () => b.destroy());
            a.on('close', () => { b.destroy(); sockets.delete(a); });
        }
    });
    return new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve({
        port: server.address().port,
        close: () => new Promise((r) => { for (const s of sockets) s.destroy(); server.close(r); }),
    })));
}

// --- the page ----------------------------------------------------------------

async function openPage(child) {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on('dialog', (d) => d.accept());
    page.on('pageerror', (e) => { page.errors = (page.errors || []).concat(e.message); });
    await page.goto(child.url);
    await page.waitForSelector('body[data-ready="1"]', { timeout: 10000 });
    return page;
}

async function waitFor(what, check, timeout = 10000) {
    const end = Date.now() + timeout;
    let last;
    for (;;) {
        last = await check();
        if (last === true) return;
        if (Date.now() > end) assert.fail(`${what}: still ${JSON.stringify(last)} after ${timeout} ms`);
        await new Promise((r) => setTimeout(r, 150));
    }
}

const row = (queue) => `#queues tr[data-queue="${queue}"]`;

async function pageCounts(page, queue) {
    return page.evaluate((sel) => {
        const tr = document.querySelector(sel);
        if (!tr) return null;
        const n = (c) => Number(tr.querySelector(`td.${c}`).textContent);
        return { active: n('active'), locked: n('locked'), deferred: n('deferred'), scheduled: n('scheduled'), dead: n('deadLetters') };
    }, row(queue));
}

async function waitCounts(page, queue, want) {
    await waitFor(`counts of ${queue} on the page`, async () => {
        const got = await pageCounts(page, queue);
        if (!got) return 'not listed';
        for (const k of Object.keys(want)) if (got[k] !== want[k]) return got;
        return true;
    });
}

async function shot(page, name) {
    fs.mkdirSync(SHOTS, { recursive: true });
    await page.screenshot({ path: path.join(SHOTS, name), fullPage: true });
}

async function openMessage(page, s) {
    await page.click(`#messages tr[data-seq="${s}"]`);
    await page.waitForSelector('#message-detail:not([hidden])');
    await waitFor(`detail of ${s}`, async () => (await page.textContent('#detail-seq')) === s || 'other');
}

const bodyText = (page) => page.textContent('#body');

async function view(page, name) {
    await page.click(`#body-views button[data-view="${name}"]`);
    await waitFor(`body view ${name}`, async () => (await page.getAttribute('#body', 'data-view')) === name);
}

async function openDeadLetters(page, queue) {
    await page.click(`${row(queue)} button.dead-letters`);
    await page.waitForSelector(`#peek-section[data-entity="${queue}/$deadletterqueue"]`);
}

async function peekRows(page) {
    return page.$$eval('#messages tbody tr.message', (trs) => trs.map((tr) => tr.getAttribute('data-seq')));
}

// --- setup ---------------------------------------------------------------------

before(async () => {
    admin = new pg.Client();
    await admin.connect();
    const r = await sql(`SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
                          WHERE e.extname = 'sbqueue'`);
    assert.equal(r.rows.length, 1, 'sbqueue is installed in the test database');
    schema = r.rows[0].nspname;
    await sql('SET client_min_messages = warning');
    // a run before in the same database: start again
    for (const q of [Q_BODIES, Q_DEAD, Q_SECRET, Q_SPARK, Q_HOSTILE, Q_STALE, ...Q_PROTO]) {
        await sql(`SELECT ${fn('sbq_delete_queue')}(queue) FROM ${fn('sbq_queues')} WHERE queue = $1`, [q]);
    }
    await sql(`SELECT ${fn('sbq_delete_topic')}(topic) FROM ${fn('sbq_topics')} WHERE topic = $1`, [TOPIC]);
    await sql(`DO $$ BEGIN
                 IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '${LISTENER}') THEN
                     CREATE ROLE ${LISTENER} LOGIN;
                 END IF;
               END $$`);
    await sql(`GRANT USAGE ON SCHEMA "${schema}" TO ${LISTENER}`);

    for (const q of [Q_BODIES, Q_DEAD, Q_SECRET, Q_SPARK]) await sql(`SELECT ${fn('sbq_create_queue')}($1)`, [q]);
    const send = async (name, q, body, type, extra = '') => {
        const s = await sql(`SELECT ${fn('sbq_send')}($1, $2::${type}${extra})::text AS s`, [q, body]);
        seq[name] = s.rows[0].s;
    };
    await send('text', Q_BODIES, TEXT_BODY, 'text');
    await send('json', Q_BODIES, JSON.stringify(JSON_BODY), 'jsonb');
    await send('binary', Q_BODIES, BINARY_BODY, 'bytea');
    await send('xss', Q_BODIES, XSS_BODY, 'text', `, subject => '${XSS_SUBJECT.replace(/'/g, "''")}'`);
    await send('large', Q_BODIES, 'A'.repeat(LARGE_SIZE), 'text');
    await send('scheduled', Q_BODIES, 'later', 'text', ", scheduled_enqueue_time => now() + interval '1 hour'");
    for (let i = 1; i <= 4; i++) await sql(`SELECT ${fn('sbq_send')}($1, $2::text)`, [Q_DEAD, `dl-${i}`]);
    seq.dead = await deadLetter(Q_DEAD, 3, 'ConsoleTest');
    await sql(`SELECT ${fn('sbq_send')}($1, 'secret'::text)`, [Q_SECRET]);
    await sql(`SELECT ${fn('sbq_create_topic')}($1)`, [TOPIC]);
    await sql(`SELECT ${fn('sbq_create_subscription')}($1, 'all')`, [TOPIC]);
    await sql(`SELECT ${fn('sbq_send')}($1, 'to the topic'::text)`, [TOPIC]);
    await sql(`SELECT ${fn('sbq_grant')}($1, '${LISTENER}', ARRAY['listen'])`, [Q_BODIES]);
    await sql(`SELECT ${fn('sbq_grant')}($1, '${LISTENER}', ARRAY['listen'])`, [Q_DEAD]);

    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true });
});

after(async () => {
    await Promise.all([...children].map(stopConsole));
    if (browser) await browser.close().catch(() => {});
    if (admin) {
        // the role holds rights here; without them it can go (when no other
        // database still has some)
        await sql(`SELECT ${fn('sbq_revoke')}(entity, role, rights) FROM ${fn('sbq_rights')} WHERE role = $1`, [LISTENER])
            .catch(() => {});
        await sql(`REVOKE USAGE ON SCHEMA "${schema}" FROM ${LISTENER}`).catch(() => {});
        await sql(`DROP ROLE IF EXISTS ${LISTENER}`).catch(() => {});
        await admin.end();
    }
});

// a failed check must not leave a console running
process.on('exit', () => { for (const c of children) c.kill('SIGKILL'); });

// --- read-only ---------------------------------------------------------------

test('read-only: queue list, peek in text/JSON/hex, hostile bodies, dead letters, no changes', async () => {
    const srv = await startConsole();
    try {
        const page = await openPage(srv);
        assert.equal(await page.textContent('#mode'), 'read-only');

        // counts as sbq_queue_stats has them, and as set up
        await waitCounts(page, Q_BODIES, { active: 5, locked: 0, deferred: 0, scheduled: 1, dead: 0 });
        await waitCounts(page, Q_DEAD, { active: 1, locked: 0, deferred: 0, scheduled: 0, dead: 3 });
        for (const q of [Q_BODIES, Q_DEAD, Q_SECRET]) {
            const s = await stats(q);
            assert.deepEqual(await pageCounts(page, q), { active: s.active, locked: s.locked, deferred: s.deferred,
                scheduled: s.scheduled, dead: s.dead }, `${q}: the page shows what sbq_queue_stats says`);
        }
        assert.equal(await page.textContent(`#topics tr[data-topic="${TOPIC}"] td.subscriptions`), '1');
        assert.equal(await page.textContent(`#topics tr[data-topic="${TOPIC}"] td.sent`), '1');
        await waitFor('three samples drawn', async () => (await page.$eval(`${row(Q_BODIES)} svg.sparkline`,
            (e) => Number(e.getAttribute('data-points')))) >= 3);
        await shot(page, 'queues.png');

        // peek: every message of the queue, the scheduled one too
        await page.click(`${row(Q_BODIES)} button.peek`);
        await page.waitForSelector('#messages tbody tr.message');
        assert.deepEqual(await peekRows(page),
            [seq.text, seq.json, seq.binary, seq.xss, seq.large, seq.scheduled]);
        assert.equal(await page.textContent(`#messages tr[data-seq="${seq.scheduled}"] td.state`), 'scheduled');

        // text
        await openMessage(page, seq.text);
        assert.equal(await page.getAttribute('#body', 'data-view'), 'text');
        assert.equal(await bodyText(page), TEXT_BODY);
        assert.equal(await page.textContent('#detail-props tr[data-prop="content_type"] td'), 'text/plain; charset=utf-8');
        assert.equal(await page.textContent('#detail-props tr[data-prop="message_id"] td'),
            (await sql(`SELECT message_id FROM ${fn('sbq_peek')}($1, 1, $2::bigint)`, [Q_BODIES, seq.text])).rows[0].message_id);
        await view(page, 'hex');
        assert.match(await bodyText(page), /^00000000 {2}48 65 6c 6c 6f 2c 20 63 {2}6f 6e 73 6f 6c 65 21 20 {2}\|Hello, console! \|/);

        // JSON, pretty
        await openMessage(page, seq.json);
        assert.equal(await page.getAttribute('#body', 'data-view'), 'json');
        assert.equal(await bodyText(page), JSON.stringify({ n: 42, name: 'widget', tags: ['a', 'b'] }, null, 2));
        await view(page, 'text');
        assert.equal(await bodyText(page), '{"n": 42, "name": "widget", "tags": ["a", "b"]}', 'jsonb as PostgreSQL prints it');
        await view(page, 'json');
        await shot(page, 'peek.png');

        // binary: hex by default
        await openMessage(page, seq.binary);
        assert.equal(await page.getAttribute('#body', 'data-view'), 'hex');
        assert.equal(await bodyText(page),
            '00000000  00 01 02 ff fe 41 42 43  0a 7f 80 10 20 7e 44 45  |.....ABC.... ~DE|\n' +
            '00000010  46 47 99                                          |FG.|');
        assert.equal(await page.textContent('#body-size'), `${BINARY_BODY.length} bytes`);

        // a body (and a subject) with markup: shown as text, nothing runs
        await openMessage(page, seq.xss);
        assert.equal(await page.getAttribute('#body', 'data-view'), 'text');
        assert.equal(await bodyText(page), XSS_BODY);
        assert.equal(await page.$eval('#body', (e) => e.childElementCount), 0, 'no element made from the body');
        assert.equal(await page.textContent(`#messages tr[data-seq="${seq.xss}"] td.subject`), XSS_SUBJECT);
        assert.equal(await page.$$eval('main img, main script', (l) => l.length), 0, 'no <img> or <script> in the page');
        await new Promise((r) => setTimeout(r, 300));
        assert.equal(await page.evaluate(() => window.__xss), undefined, 'nothing of the body ran');

        // a large body: cut at 64 KiB, and the page says so
        await openMessage(page, seq.large);
        assert.equal(await page.isVisible('#body-cut'), true);
        assert.match(await page.textContent('#body-cut'), new RegExp(`cut: ${LARGE_SIZE} bytes, the first 65536 shown`));
        assert.equal((await bodyText(page)).length, 65536);
        await openMessage(page, seq.text);
        assert.equal(await page.isVisible('#body-cut'), false);

        // paging by sequence number
        await page.fill('#peek-from', seq.binary);
        await page.click('#peek-go');
        await waitFor('peek from a sequence number', async () => (await peekRows(page))[0] === seq.binary || await peekRows(page));
        assert.deepEqual(await peekRows(page), [seq.binary, seq.xss, seq.large, seq.scheduled]);

        // dead letters: reason, description, source; no change buttons
        await openDeadLetters(page, Q_DEAD);
        await waitFor('dead letters listed', async () => (await peekRows(page)).length === 3 || await peekRows(page));
        assert.deepEqual(await peekRows(page), seq.dead);
        const first = `#messages tr[data-seq="${seq.dead[0]}"]`;
        assert.equal(await page.textContent(`${first} td.reason`), 'ConsoleTest');
        assert.equal(await page.textContent(`${first} td.description`), 'bad payload 1');
        assert.equal(await page.textContent(`${first} td.source`), Q_DEAD);
        assert.equal(await page.$$eval('#dl-actions button, #messages input', (l) => l.length), 0, 'read-only: no change buttons');
        assert.equal(await page.isVisible('#dl-actions'), false);
        assert.equal(await page.$$eval('button', (l) => l.filter((b) => /resubmit|purge/i.test(b.textContent)).length), 0);
        await shot(page, 'dead-letters-read-only.png');

        // a direct POST, even from the page itself: 403, nothing changes
        for (const [p, body] of [['/api/resubmit', { queue: Q_DEAD, sequenceNumbers: null }],
            ['/api/purge-dead-letters', { queue: Q_DEAD }]]) {
            const r = await request(srv.port, 'POST', p, { headers: { 'Content-Type': 'application/json' }, body });
            assert.equal(r.status, 403, `${p} read-only`);
            assert.equal(r.json.code, 'read-only');
        }
        const fromPage = await page.evaluate(async (q) => {
            const r = await fetch('/api/purge-dead-letters', { method: 'POST', headers: { 'Content-Type': 'application/json' },
                body: JSON.stringify({ queue: q }) });
            return r.status;
        }, Q_DEAD);
        assert.equal(fromPage, 403);
        assert.equal((await request(srv.port, 'GET', '/api/config')).headers['x-sbq-console-token'], undefined,
            'read-only: no token handed out');
        assert.equal((await stats(Q_DEAD)).dead, 3, 'nothing resubmitted or purged');
        assert.deepEqual(page.errors || [], [], 'no error in the page');
        await page.close();
    } finally {
        await stopConsole(srv);
    }
});

test('the sparkline gets a point per sample and follows the depth', async () => {
    const srv = await startConsole();
    try {
        const page = await openPage(srv);
        const points = () => page.$eval(`${row(Q_SPARK)} svg.sparkline`, (s) => Number(s.getAttribute('data-points')));
        await waitFor('two samples', async () => (await points()) >= 2 || await points());
        const n0 = await points();
        assert.equal(await page.$eval(`${row(Q_SPARK)} polyline.depth`, (p) => p.getAttribute('points').split(' ').length), n0);
        for (let i = 0; i < 12; i++) await sql(`SELECT ${fn('sbq_send')}($1, $2::text)`, [Q_SPARK, `spark-${i}`]);
        await waitFor('a sample with the new depth', async () => {
            const t = await page.textContent(`${row(Q_SPARK)} svg.sparkline title`);
            return /^depth 12 /.test(t) || t;
        });
        assert.ok((await points()) > n0, 'more points than before');
        // the line rises: the last point is higher (a smaller y) than the first
        const ys = await page.$eval(`${row(Q_SPARK)} polyline.depth`,
            (p) => p.getAttribute('points').split(' ').map((xy) => Number(xy.split(',')[1])));
        assert.ok(ys[ys.length - 1] < ys[0], `the line rises: ${ys.join(' ')}`);

        // paging forward by the last sequence number seen
        await page.click(`${row(Q_SPARK)} button.peek`);
        await page.selectOption('#peek-max', '10');
        await waitFor('a page of 10', async () => (await peekRows(page)).length === 10 || await peekRows(page));
        const firstPage = await peekRows(page);
        await page.click('#peek-next');
        await waitFor('the next page', async () => (await peekRows(page)).length === 2 || await peekRows(page));
        const all = (await sql(`SELECT sequence_number::text AS s FROM ${fn('sbq_peek')}($1, 100)`, [Q_SPARK])).rows.map((r) => r.s);
        assert.deepEqual([...firstPage, ...await peekRows(page)], all);
        assert.equal(await page.isDisabled('#peek-next'), true);
        await page.close();
    } finally {
        await stopConsole(srv);
    }
});

// --- with --allow-changes ----------------------------------------------------------

test('--allow-changes: resubmit from the page, refused requests, purge', async () => {
    const srv = await startConsole(['--allow-changes']);
    try {
        const page = await openPage(srv);
        assert.equal(await page.textContent('#mode'), 'changes allowed');
        await waitCounts(page, Q_DEAD, { active: 1, dead: 3 });
        await openDeadLetters(page, Q_DEAD);
        await waitFor('dead letters listed', async () => (await peekRows(page)).length === 3 || await peekRows(page));
        await shot(page, 'dead-letters-before.png');

        // resubmit the first one
        await page.check(`#messages input.select[data-seq="${seq.dead[0]}"]`);
        await page.click('#dl-resubmit-selected');
        await waitFor('notice', async () => /Resubmitted 1 of 1/.test(await page.textContent('#notice')) || await page.textContent('#notice'));
        await waitCounts(page, Q_DEAD, { active: 2, dead: 2 });
        await waitFor('the resubmitted one gone from the list',
            async () => (await peekRows(page)).join() === seq.dead.slice(1).join() || await peekRows(page));
        const s = await stats(Q_DEAD);
        assert.equal(s.dead, 2, 'one dead letter less in SQL');
        assert.equal(s.active, 2, 'one active message more in SQL');
        assert.equal(await page.isVisible('#error'), false);
        await shot(page, 'dead-letters-after.png');

        // refused: no token, a wrong one, another Host, another Origin, not JSON
        const cfg = await request(srv.port, 'GET', '/api/config');
        const token = cfg.headers['x-sbq-console-token'];
        assert.match(token, /^[0-9a-f]{64}$/);
        const purge = { queue: Q_DEAD };
        const json = { 'Content-Type': 'application/json' };
        const refused = [
            ['no token', { ...json }, 403],
            ['a wrong token', { ...json, 'x-sbq-console-token': 'f'.repeat(64) }, 403],
            ['a foreign Host', { ...json, 'x-sbq-console-token': token, Host: `console.example.com:${srv.port}` }, 403],
            ['a foreign port in Host', { ...json, 'x-sbq-console-token': token, Host: `127.0.0.1:${srv.port + 1}` }, 403],
            ['a foreign Origin', { ...json, 'x-sbq-console-token': token, Origin: 'http://console.example.com' }, 403],
            ['a foreign Origin port', { ...json, 'x-sbq-console-token': token, Origin: `http://127.0.0.1:${srv.port + 1}` }, 403],
            ['a form post', { 'Content-Type': 'text/plain', 'x-sbq-console-token': token }, 415],
        ];
        for (const [what, headers, status] of refused) {
            const r = await request(srv.port, 'POST', '/api/purge-dead-letters', { headers, body: purge });
            assert.equal(r.status, status, `a POST with ${what} is refused: ${r.text}`);
        }
        // a sequence number JSON cannot hold exactly would name another message
        const inexact = await request(srv.port, 'POST', '/api/resubmit', { headers: { ...json, 'x-sbq-console-token': token },
            body: `{"queue": "${Q_DEAD}", "sequenceNumbers": [9007199254740993]}` });
        assert.equal(inexact.status, 400, inexact.text);
        const rebound = await request(srv.port, 'GET', '/api/peek?queue=console/dead',
            { headers: { Host: `console.example.com:${srv.port}` } });
        assert.equal(rebound.status, 403, 'a read through another host name (DNS rebinding) is refused');
        assert.equal((await stats(Q_DEAD)).dead, 2, 'the refused requests changed nothing');

        // the same request, right: accepted (the refusals were the checks)
        const ok = await request(srv.port, 'POST', '/api/resubmit', {
            headers: { ...json, 'x-sbq-console-token': token, Origin: `http://127.0.0.1:${srv.port}` },
            body: { queue: Q_DEAD, sequenceNumbers: [seq.dead[1]] },
        });
        assert.equal(ok.status, 200, ok.text);
        assert.equal(ok.json.resubmitted, 1);
        assert.equal((await stats(Q_DEAD)).dead, 1);

        // a body past the limit is 413, not a reset connection; 5,000 sequence numbers fit
        const big = await request(srv.port, 'POST', '/api/resubmit', {
            headers: { ...json, 'x-sbq-console-token': token },
            body: { queue: Q_DEAD, sequenceNumbers: Array(30000).fill('9223372036854775807') },
        });
        assert.equal(big.status, 413, big.text);
        const most = await request(srv.port, 'POST', '/api/resubmit', {
            headers: { ...json, 'x-sbq-console-token': token },
            body: { queue: Q_DEAD, sequenceNumbers: Array(5000).fill('9223372036854775807') },
        });
        assert.equal(most.json.sqlstate, 'SB003', `read and passed to sbq_resubmit: ${most.text}`);

        // purge from the page (the confirmation is accepted)
        await page.click('#peek-first');
        await waitFor('one dead letter left', async () => (await peekRows(page)).length === 1 || await peekRows(page));
        await page.click('#dl-purge');
        await waitFor('notice', async () => /Purged 1 dead letters/.test(await page.textContent('#notice')) || await page.textContent('#notice'));
        await waitCounts(page, Q_DEAD, { active: 3, dead: 0 });
        assert.deepEqual(await peekRows(page), []);
        assert.equal((await stats(Q_DEAD)).dead, 0, 'purged in SQL');
        assert.deepEqual(page.errors || [], [], 'no error in the page');
        await page.close();
    } finally {
        await stopConsole(srv);
    }
});

// --- a role without manage ---------------------------------------------------------------

test('a role with listen only: sees its queues, resubmit and purge fail with 42501', async () => {
    const dead = await deadLetter(Q_DEAD, 2, 'ListenerTest');
    assert.equal(dead.length, 2);
    const srv = await startConsole(['--allow-changes', '--samples', '3'], { PGUSER: LISTENER });
    try {
        const page = await openPage(srv);
        assert.match(await page.textContent('#conn'), new RegExp(` as ${LISTENER} `));
        await waitCounts(page, Q_DEAD, { active: 1, dead: 2 });
        const listed = await page.$$eval('#queues tbody tr', (trs) => trs.map((tr) => tr.getAttribute('data-queue')));
        assert.deepEqual(listed.sort(), [Q_BODIES, Q_DEAD].sort(), 'only the queues it holds a right on');
        assert.equal(await page.isVisible('#topics-section'), false, 'no topic it holds a right on');

        await openDeadLetters(page, Q_DEAD);
        await waitFor('dead letters listed', async () => (await peekRows(page)).length === 2 || await peekRows(page));
        await page.check(`#messages input.select[data-seq="${dead[0]}"]`);
        await page.click('#dl-resubmit-selected');
        await waitFor('the error', async () => (await page.isVisible('#error')) || 'no error shown');
        const err = await page.textContent('#error');
        assert.match(err, /42501/);
        assert.match(err, /permission denied for queue "console\/dead"/);
        await shot(page, 'listener-denied.png');
        await page.click('#dl-purge');
        await waitFor('the purge error', async () => /^purge: 42501/.test(await page.textContent('#error')) || await page.textContent('#error'));
        const s = await stats(Q_DEAD);
        assert.equal(s.dead, 2, 'nothing resubmitted or purged');
        assert.equal(s.active, 1);

        // its samples: at most --samples of them
        await new Promise((r) => setTimeout(r, 3500));
        const points = await page.$eval(`${row(Q_DEAD)} svg.sparkline`, (e) => Number(e.getAttribute('data-points')));
        assert.equal(points, 3, 'the ring keeps the last 3 samples');
        await page.close();
    } finally {
        await stopConsole(srv);
    }
});

test('GET /metrics: sbq_metrics_text() in Prometheus\'s format, as the console\'s role', async () => {
    const srv = await startConsole([], { PGUSER: LISTENER });
    try {
        const r = await request(srv.port, 'GET', '/metrics');
        assert.equal(r.status, 200, r.text);
        assert.match(r.headers['content-type'], /^text\/plain; version=0\.0\.4/);
        const db = (await sql('SELECT current_database() AS d')).rows[0].d;
        const s = await stats(Q_DEAD);
        assert.ok(r.text.includes(`\nsbq_messages{database="${db}",queue="${Q_DEAD}",state="dead_letter"} ${s.dead}\n`), r.text.slice(0, 600));
        assert.ok(r.text.includes('# TYPE sbq_sent_total counter\n'));
        assert.ok(!r.text.includes(`queue="${Q_SPARK}"`), 'a queue the role holds no right on is not there');
        assert.equal((await request(srv.port, 'GET', '/metrics', { headers: { Host: `evil.example:${srv.port}` } })).status, 403);
    } finally {
        await stopConsole(srv);
    }
});

test('--public-origin: the address a proxy or tunnel shows the browser is answered too, no other', async () => {
    await assert.rejects(startConsole(['--public-origin', 'http://localhost:9000/console']), /exited with 2/);
    const srv = await startConsole(['--public-origin', 'https://Console.Example:8443']);
    try {
        const via = { Host: 'console.example:8443', Origin: 'https://console.example:8443' };
        assert.equal((await request(srv.port, 'GET', '/api/config', { headers: via })).status, 200);
        assert.equal((await request(srv.port, 'GET', '/api/config', { headers: { Origin: 'https://console.example:8443' } })).status, 200,
            'the page on its own address, opened from the public one');
        assert.equal((await request(srv.port, 'GET', '/api/config', { headers: { Host: 'console.example:8444' } })).status, 403);
        assert.equal((await request(srv.port, 'GET', '/api/config', { headers: { ...via, Origin: 'http://console.example:8443' } })).status, 403,
            'another scheme is another origin');
        assert.equal((await request(srv.port, 'GET', '/api/config', { headers: { Host: 'evil.example:8443' } })).status, 403);
        // what another page's <img> or no-cors fetch sends: refused before any query
        for (const site of ['cross-site', 'same-site']) {
            assert.equal((await request(srv.port, 'GET', '/api/peek?queue=x', { headers: { 'Sec-Fetch-Site': site } })).status, 403, site);
        }
        assert.equal((await request(srv.port, 'GET', '/api/config', { headers: { 'Sec-Fetch-Site': 'same-origin' } })).status, 200);
    } finally {
        await stopConsole(srv);
    }
});

test('--database takes a keyword/value string; a database without sbqueue is refused', async () => {
    const db = admin.database;
    const srv = await startConsole(['--database', `dbname='${db.replace(/[\\']/g, '\\$&')}' application_name=console_test`],
        { PGDATABASE: 'postgres' });
    try {
        const r = await request(srv.port, 'GET', '/api/config', { headers: { Host: `localhost:${srv.port}` } });
        assert.equal(r.status, 200);
        assert.equal(r.json.database, db);
        assert.equal(r.json.schema, schema);
        const page = await request(srv.port, 'GET', '/');
        assert.match(page.headers['content-security-policy'], /script-src 'self'/);
        assert.match(page.text, /<script src="\/app.js" defer><\/script>/);
    } finally {
        await stopConsole(srv);
    }
    await assert.rejects(startConsole([], { PGDATABASE: 'postgres' }), /sbqueue is not installed/);
    // every address: no browser's Host header would name it, so nothing would be answered
    for (const h of ['0.0.0.0', '::']) await assert.rejects(startConsole(['--host', h]), /is every address/);
});

test('a request target that is no URL is answered 400, and the console goes on', async () => {
    const srv = await startConsole();
    try {
        const status = await rawRequest(srv.port,
            `GET //[ HTTP/1.1\r\nHost: 127.0.0.1:${srv.port}\r\nConnection: close\r\n\r\n`);
        assert.match(status, /^HTTP\/1\.1 400 /);
        assert.equal(srv.exitCode, null, 'the console still runs');
        assert.equal((await request(srv.port, 'GET', '/api/config')).status, 200);
    } finally {
        await stopConsole(srv);
    }
});

test('a queue named like a property of every object ("constructor") is listed like any other', async () => {
    const srv = await startConsole();
    try {
        const page = await openPage(srv);
        await waitFor('two samples', async () => (await page.$eval(`${row(Q_SPARK)} svg.sparkline`,
            (e) => Number(e.getAttribute('data-points')))) >= 2);
        // made after the first samples, so that those do not hold it
        for (const q of Q_PROTO) await sql(`SELECT ${fn('sbq_create_queue')}($1)`, [q]);
        for (const q of Q_PROTO) await waitCounts(page, q, { active: 0, dead: 0 });
        assert.equal(await page.isVisible('#error'), false, await page.textContent('#error'));
        const r = await request(srv.port, 'GET', '/api/queues');
        assert.equal(r.status, 200, r.text);
        assert.ok(r.json.queues.find((q) => q.queue === 'constructor').history.length >= 1);

        // ?since: only the samples after that time, so a page gets one per refresh, not the ring
        const spark = r.json.queues.find((q) => q.queue === Q_SPARK).history;
        assert.ok(spark.length >= 2, `samples: ${spark.length}`);
        const since = spark[spark.length - 2][0];
        const r2 = await request(srv.port, 'GET', `/api/queues?since=${since}`);
        assert.deepEqual(r2.json.queues.find((q) => q.queue === Q_SPARK).history.map((x) => x[0]).slice(0, 1),
            [spark[spark.length - 1][0]], 'the samples after since, from the next one on');
        const r3 = await request(srv.port, 'GET', `/api/queues?since=${Date.now() + 3600000}`);
        assert.ok(r3.json.queues.every((q) => q.history.length === 0), 'none after a time to come');
        assert.equal((await request(srv.port, 'GET', '/api/queues?since=soon')).status, 400);
        // and the page, which asks with since, still draws more points as samples come
        const before = await page.$eval(`${row(Q_SPARK)} svg.sparkline`, (e) => Number(e.getAttribute('data-points')));
        await waitFor('a point more', async () => (await page.$eval(`${row(Q_SPARK)} svg.sparkline`,
            (e) => Number(e.getAttribute('data-points')))) > before);
        await page.close();
    } finally {
        await stopConsole(srv);
        for (const q of Q_PROTO) await sql(`SELECT ${fn('sbq_delete_queue')}($1)`, [q]);
    }
});

test('the database gone and back: 503 without a SQLSTATE while gone, the page recovers by itself', async () => {
    let proxy = await pgProxy();
    const conninfo = `host=127.0.0.1 port=${proxy.port} dbname='${admin.database.replace(/[\\']/g, '\\$&')}'`;
    const srv = await startConsole(['--database', conninfo]);
    try {
        const page = await openPage(srv);
        await waitCounts(page, Q_DEAD, { dead: (await stats(Q_DEAD)).dead });
        await proxy.close();
        const r = await request(srv.port, 'GET', '/api/queues');
        assert.equal(r.status, 503, r.text);
        assert.equal(r.json.sqlstate, null, 'a connection error has no SQLSTATE');
        assert.match(r.json.error, /^cannot reach the database: /);
        await waitFor('the error on the page', async () => {
            const t = await page.textContent('#error');
            return /^queue list: cannot reach the database: .* \(HTTP 503\)$/.test(t) || t;
        });
        proxy = await pgProxy(proxy.port);
        await waitFor('the page without its error', async () => (await page.isHidden('#error')) || await page.textContent('#error'));
        assert.equal((await request(srv.port, 'GET', '/api/queues')).status, 200);
        assert.equal(srv.exitCode, null, 'the console still runs');
        await page.close();
    } finally {
        await stopConsole(srv);
        await proxy.close();
    }
});

test('markup in properties, application_properties keys and values, dead-letter reasons is shown as text', async () => {
    const mark = (n) => `<img src=x onerror="window.__xss = ${n}"><script>window.__xss = ${n}</script>`;
    await sql(`SELECT ${fn('sbq_create_queue')}($1)`, [Q_HOSTILE]);
    const props = { [mark(1)]: mark(2), plain: mark(3) };
    await sql(`SELECT ${fn('sbq_send')}($1, $2::text, message_id => $3, correlation_id => $4, subject => $5,
                      content_type => 'text/html', reply_to => $6, session_id => NULL, application_properties => $7::jsonb)`,
    [Q_HOSTILE, `<html><body onload="window.__xss = 4">${mark(5)}</body></html>`, 'id-<b>x</b>', mark(6), mark(7), mark(8),
        JSON.stringify(props)]);
    const [s] = await deadLetter(Q_HOSTILE, 1, mark(9));
    const srv = await startConsole();
    try {
        const page = await openPage(srv);
        await waitCounts(page, Q_HOSTILE, { dead: 1 });
        await openDeadLetters(page, Q_HOSTILE);
        await waitFor('the dead letter listed', async () => (await peekRows(page)).join() === s || await peekRows(page));
        const cell = (c) => page.textContent(`#messages tr[data-seq="${s}"] td.${c}`);
        assert.equal(await cell('reason'), mark(9));
        assert.equal(await cell('description'), 'bad payload 1');
        assert.equal(await cell('message-id'), 'id-<b>x</b>');
        assert.equal(await cell('subject'), mark(7));
        await openMessage(page, s);
        const prop = (k) => page.textContent(`#detail-props tr[data-prop="${k}"] td`);
        assert.equal(await prop('correlation_id'), mark(6));
        assert.equal(await prop('reply_to'), mark(8));
        assert.equal(await prop('dead_letter_reason'), mark(9));
        assert.deepEqual(JSON.parse(await prop('application_properties')), props);
        assert.equal(await page.getAttribute('#body', 'data-view'), 'text');
        assert.match(await bodyText(page), /^<html><body onload=/);
        assert.equal(await page.$$eval('main img, main script, main b, main html, #messages svg, #message-detail svg',
            (l) => l.length), 0, 'no element made from what the message brings');
        await new Promise((r) => setTimeout(r, 300));
        assert.equal(await page.evaluate(() => window.__xss), undefined, 'nothing of the message ran');
        assert.deepEqual(page.errors || [], [], 'no error in the page');
        await page.close();
    } finally {
        await stopConsole(srv);
        await sql(`SELECT ${fn('sbq_delete_queue')}($1)`, [Q_HOSTILE]);
    }
});

test('numbers and times of a message are shown as PostgreSQL has them, not as JavaScript reads them', async () => {
    await sql(`SELECT ${fn('sbq_create_queue')}($1)`, [Q_EXACT]);
    const props = '{"f": 1.10, "big": 12345678901234567890, "huge": 1e400}';
    const body = '{"a": 1.50, "id": 12345678901234567890, "nested": {"e": [], "o": {}}}';
    const s = (await sql(`SELECT ${fn('sbq_send')}($1, $2::jsonb, application_properties => $3::jsonb,
                                  scheduled_enqueue_time => '290000-01-01 00:00:00.123456+00')::text AS s`,
    [Q_EXACT, body, props])).rows[0].s;
    const want = (await sql(`SELECT application_properties::text AS p, body AS b,
                                    pg_catalog.to_json(scheduled_enqueue_time) #>> '{}' AS t
                               FROM ${fn('sbq_peek')}($1, 1)`, [Q_EXACT])).rows[0];
    const srv = await startConsole();
    try {
        const page = await openPage(srv);
        await waitCounts(page, Q_EXACT, { scheduled: 1 });
        await page.click(`${row(Q_EXACT)} button.peek`);
        await page.waitForSelector('#messages tbody tr.message');
        await openMessage(page, s);
        const prop = (k) => page.textContent(`#detail-props tr[data-prop="${k}"] td`);
        // before: {"f":1.1,"big":12345678901234567000,"huge":null}, and no time at all
        assert.equal(await prop('application_properties'), want.p);
        assert.match(want.p, /12345678901234567890/);
        assert.equal(await prop('scheduled_enqueue_time'), want.t);
        assert.match(want.t, /^290000-01-01T00:00:00\.123456/);
        assert.equal(await page.getAttribute('#body', 'data-view'), 'json');
        assert.equal(await bodyText(page),
            '{\n  "a": 1.50,\n  "id": 12345678901234567890,\n  "nested": {\n    "e": [],\n    "o": {}\n  }\n}',
            'the JSON view lays the body out, every digit kept');
        const dl = await request(srv.port, 'GET', `/api/peek?queue=${encodeURIComponent(`${Q_EXACT}/$DeadLetterQueue`)}`);
        assert.equal(dl.status, 200, dl.text);
        assert.equal(dl.json.deadLetters, true, 'a dead-letter sub-queue named in the queue is one');
        assert.deepEqual(page.errors || [], [], 'no error in the page');
        await page.close();
    } finally {
        await stopConsole(srv);
        await sql(`SELECT ${fn('sbq_delete_queue')}($1)`, [Q_EXACT]);
    }
});

test('a sample that waits does not take every connection: the next ticks skip it, and a peek is answered', async () => {
    const srv = await startConsole(['--sample-seconds', '1', '--pool', '2', '--statement-timeout', '20000']);
    const locker = new pg.Client();
    await locker.connect();
    try {
        await locker.query('BEGIN');
        await locker.query('LOCK TABLE sbq.queue_counters IN ACCESS EXCLUSIVE MODE');
        await new Promise((r) => setTimeout(r, 4000));
        const t0 = Date.now();
        const r = await request(srv.port, 'GET', `/api/peek?queue=${encodeURIComponent(Q_BODIES)}&max=1`);
        // before: every connection of the pool held by a waiting sample, and 503 after 10 s
        assert.equal(r.status, 200, r.text);
        assert.ok(Date.now() - t0 < 3000, `answered in ${Date.now() - t0} ms`);
    } finally {
        await locker.query('ROLLBACK').catch(() => {});
        await locker.end();
        await stopConsole(srv);
    }
});

test('resubmitting a dead letter someone else resubmitted: SB003 shown, and the list loaded again', async () => {
    await sql(`SELECT ${fn('sbq_create_queue')}($1)`, [Q_STALE]);
    for (let i = 1; i <= 2; i++) await sql(`SELECT ${fn('sbq_send')}($1, $2::text)`, [Q_STALE, `stale-${i}`]);
    const dead = await deadLetter(Q_STALE, 2, 'StaleTest');
    const srv = await startConsole(['--allow-changes']);
    try {
        const page = await openPage(srv);
        await waitCounts(page, Q_STALE, { dead: 2 });
        await openDeadLetters(page, Q_STALE);
        await waitFor('dead letters listed', async () => (await peekRows(page)).join() === dead.join() || await peekRows(page));
        // behind the page's back
        await sql(`SELECT ${fn('sbq_resubmit')}($1, ARRAY[$2::bigint])`, [Q_STALE, dead[0]]);
        await page.check(`#messages input.select[data-seq="${dead[0]}"]`);
        await page.click('#dl-resubmit-selected');
        await waitFor('the error', async () => /^resubmit: SB003: /.test(await page.textContent('#error')) || await page.textContent('#error'));
        await waitFor('the list without it', async () => (await peekRows(page)).join() === dead[1] || await peekRows(page));
        const r = await request(srv.port, 'POST', '/api/resubmit', {
            headers: { 'Content-Type': 'application/json', 'x-sbq-console-token': (await request(srv.port, 'GET', '/api/config')).headers['x-sbq-console-token'] },
            body: { queue: Q_STALE, sequenceNumbers: [dead[0]] },
        });
        assert.equal(r.status, 404, r.text);
        assert.equal(r.json.sqlstate, 'SB003');
        assert.equal((await stats(Q_STALE)).dead, 1, 'the other dead letter is left');
        await page.close();
    } finally {
        await stopConsole(srv);
        await sql(`SELECT ${fn('sbq_delete_queue')}($1)`, [Q_STALE]);
    }
});

test('600 queues: a refresh moves no row and draws only the sparklines in view; the name filter', async () => {
    const N = 600;
    const name = (i) => `console/many/${String(i).padStart(4, '0')}`;
    const drop = () => sql(`SELECT ${fn('sbq_delete_queue')}(queue) FROM ${fn('sbq_queues')}
                             WHERE queue LIKE 'console/many/%'`);
    await drop();
    await sql(`SELECT ${fn('sbq_create_queue')}('console/many/' || lpad(i::text, 4, '0'))
                 FROM generate_series(0, $1::int - 1) i`, [N]);
    const srv = await startConsole(['--sample-seconds', '1']);
    try {
        const page = await openPage(srv);
        await page.waitForSelector(row(name(N - 1)));
        // two refreshes watched: rows moved, and sparklines drawn, and where
        const updated = () => page.textContent('#queues-updated');
        await page.evaluate(() => {
            window.__moves = 0;
            window.__drawn = [];
            const tbody = document.querySelector('#queues tbody');
            new MutationObserver((records) => {
                for (const r of records) {
                    if (r.target === tbody) window.__moves++;
                    else if (r.target.matches && r.target.matches('td.spark')) {
                        const box = r.target.getBoundingClientRect();
                        window.__drawn.push([r.target.parentNode.getAttribute('data-queue'), Math.round(box.top)]);
                    }
                }
            }).observe(tbody, { childList: true, subtree: true });
        });
        for (let i = 0; i < 2; i++) {
            const before = await updated();
            await waitFor('a refresh', async () => (await updated()) !== before);
        }
        const { moves, drawn } = await page.evaluate(() => ({ moves: window.__moves, drawn: window.__drawn }));
        // before: every row taken out and put back at each refresh (2 records a row),
        // and every one of the sparklines drawn again
        assert.equal(moves, 0, 'no row moved when the list is the same');
        assert.ok(drawn.length > 0, 'the sparklines in view are drawn');
        const far = drawn.filter(([, top]) => top < -1000 || top > 900 + 1000);
        assert.deepEqual(far, [], 'no sparkline far out of view drawn');

        // a row out of view gets its sparkline, with its samples, once it comes into view
        await page.$eval(row(name(580)), (tr) => tr.scrollIntoView());
        await waitFor('the far row drawn', async () => (await page.$eval(`${row(name(580))} td.spark`,
            (td) => Number(td.querySelector('svg.sparkline')?.getAttribute('data-points') || 0))) >= 2);

        // a queue made in the middle of the list and one deleted: the rows follow the server's order
        await sql(`SELECT ${fn('sbq_create_queue')}($1)`, [`${name(300)}a`]);
        await sql(`SELECT ${fn('sbq_delete_queue')}($1)`, [name(400)]);
        await page.waitForSelector(row(`${name(300)}a`));
        await waitFor('the deleted row gone', async () => (await page.$(row(name(400)))) === null);
        const order = await page.evaluate(async () => {
            const dom = Array.from(document.querySelectorAll('#queues tbody tr'), (tr) => tr.getAttribute('data-queue'));
            const api = (await (await fetch('/api/queues')).json()).queues.map((q) => q.queue);
            return { dom, api };
        });
        assert.deepEqual(order.dom, order.api, 'the rows in the order the server sent');

        // the filter: any letter case, the rest hidden, and the count shown
        await page.fill('#queue-filter', 'MANY/04');
        const shown = () => page.$$eval('#queues tbody tr:not([hidden])', (trs) => trs.map((tr) => tr.getAttribute('data-queue')));
        const want = Array.from({ length: 100 }, (_, i) => name(400 + i)).filter((q) => q !== name(400));
        assert.deepEqual(await shown(), want);
        assert.equal(await page.textContent('#queues-shown'), `99 of ${order.api.length} shown`);
        // the list refreshed keeps the filter
        const before = await updated();
        await waitFor('a refresh', async () => (await updated()) !== before);
        assert.deepEqual(await shown(), want);
        // a peek opened from far down the page is scrolled to
        await page.click(`${row(name(499))} button.peek`);
        await page.waitForSelector(`#peek-section[data-entity="${name(499)}"]`);
        await waitFor('the peek in view', async () => {
            const top = await page.$eval('#peek-section', (s) => s.getBoundingClientRect().top);
            return (top >= 0 && top < 900) || top;
        });
        await page.fill('#queue-filter', '');
        assert.equal((await shown()).length, order.api.length);
        assert.equal(await page.textContent('#queues-shown'), '');
        assert.deepEqual(page.errors || [], [], 'no error in the page');
        await page.close();
    } finally {
        await stopConsole(srv);
        await drop();
    }
});
