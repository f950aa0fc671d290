#!/usr/bin/env node
// console/server.js: the sbqueue web console. One page (console/public/) and a
// small JSON API over sbqueue's SQL functions and views, as the connecting role,
// so sbqueue's queue rights decide what it sees and may do.
//
//   node console/server.js [--port 8470] [--host 127.0.0.1] [--allow-changes]
//                          [--database CONNINFO] [--schema NAME]
//                          [--sample-seconds 5] [--samples 120]
//                          [--statement-timeout 5000] [--pool 4]
//                          [--public-origin URL]
//
// Connection: the PG* environment variables (PGHOST, PGPORT, PGDATABASE, PGUSER,
// PGPASSWORD, ...), or --database with a postgres:// URL or a libpq keyword/value
// string ("host=/tmp port=5432 dbname=app").
//
// Safety: it listens on 127.0.0.1 unless --host names another address; it answers
// only requests whose Host header is that address (or localhost) with its port,
// and refuses a foreign Origin (DNS rebinding, other sites); --public-origin
// adds the one address a proxy or tunnel shows the browser. It is read-only
// unless started with --allow-changes; then each POST must carry the token the
// page gets from GET /api/config (header x-sbq-console-token), a random value
// made when the process starts.
'use strict';

const crypto = require('node:crypto');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const pg = require('pg');

const BODY_CAP = 64 * 1024;          // bytes of a body sent to the page
const PEEK_MAX = 100;                // messages per page at most
const POST_MAX = 256 * 1024;         // bytes of a request body: 5,000 sequence numbers fit
const TOKEN_HEADER = 'x-sbq-console-token';

function usage(msg) {
    if (msg) process.stderr.write(`console: ${msg}\n`);
    process.stderr.write('usage: node server.js [--port N] [--host ADDR] [--allow-changes] ' +
        '[--database CONNINFO] [--schema NAME] [--sample-seconds N] [--samples N] ' +
        '[--statement-timeout MS] [--pool N] [--public-origin URL]\n');
    process.exit(2);
}

function parseArgs(argv) {
    const opts = {
        port: 8470, host: null, allowChanges: false, database: null, schema: null, publicOrigin: null,
        sampleSeconds: 5, samples: 120, statementTimeout: 5000, pool: 4,
    };
    const ints = {
        '--port': ['port', 0, 65535], '--sample-seconds': ['sampleSeconds', 1, 3600],
        '--samples': ['samples', 2, 10000], '--statement-timeout': ['statementTimeout', 100, 600000],
        '--pool': ['pool', 1, 50],
    };
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        const [key, inline] = a.includes('=') ? [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)] : [a, null];
        const value = () => {
            if (inline !== null) return inline;
            if (i + 1 >= argv.length) usage(`${key} needs a value`);
            return argv[++i];
        };
        if (key === '--allow-changes') opts.allowChanges = true;
        else if (key === '--host') opts.host = value();
        else if (key === '--public-origin') {
            // scheme, host and port only: what a browser sends as Origin
            const v = value();
            let u = null;
            try { u = new URL(v); } catch (e) { u = null; }
            if (!u || !/^https?:$/.test(u.protocol) || u.username || u.password || u.search || u.hash ||
                (u.pathname !== '/' && u.pathname !== '')) {
                usage('--public-origin takes an origin: http(s)://host[:port], nothing after it');
            }
            opts.publicOrigin = u;
        }
        else if (key === '--database') opts.database = value();
        else if (key === '--schema') opts.schema = value();
        else if (key === '--help' || key === '-h') usage();
        else if (ints[key]) {
            const [name, min, max] = ints[key];
            const v = value();
            if (!/^\d+$/.test(v) || Number(v) < min || Number(v) > max) usage(`${key} takes a whole number from ${min} to ${max}`);
            opts[name] = Number(v);
        } else usage(`unknown argument ${a}`);
    }
    // every request must name the address in its Host header, and no browser
    // names 0.0.0.0 or ::, so a console on every address would refuse everything
    if (opts.host !== null && (opts.host === '' || opts.host === '0.0.0.0' || (opts.host.includes(':') && /^[0:]+$/.test(opts.host)))) {
        usage(`--host ${opts.host || '""'} is every address, but the console answers only requests that name ` +
            'the address it listens on: give the one address the browser will use');
    }
    return opts;
}

// A libpq keyword/value connection string, as pg takes only URLs
function parseConninfo(s) {
    if (/^postgres(ql)?:\/\//.test(s)) return { connectionString: s };
    const names = {
        host: 'host', hostaddr: 'host', port: 'port', dbname: 'database', user: 'user',
        password: 'password', application_name: 'application_name', sslmode: 'sslmode',
        connect_timeout: 'connectionTimeoutMillis',
    };
    const out = {};
    const re = /\s*([A-Za-z_]+)\s*=\s*('((?:[^'\\]|\\.)*)'|[^\s']*)/y;
    let m;
    let pos = 0;
    while (pos < s.length && !/^\s*$/.test(s.slice(pos))) {
        re.lastIndex = pos;
        m = re.exec(s);
        if (!m) throw new Error(`cannot read the connection string near "${s.slice(pos, pos + 20)}"`);
        pos = re.lastIndex;
        const key = m[1];
        const val = m[3] !== undefined ? m[3].replace(/\\(.)/g, '$1') : m[2];
        if (!names[key]) throw new Error(`connection keyword "${key}" is not supported here: use a postgres:// URL`);
        if (key === 'sslmode') {
            if (val !== 'disable') out.ssl = val === 'require' || val === 'prefer' ? { rejectUnauthorized: false } : true;
        } else if (key === 'connect_timeout') {
            out.connectionTimeoutMillis = Number(val) * 1000;
        } else {
            out[names[key]] = key === 'port' ? Number(val) : val;
        }
    }
    return out;
}

function ident(name) { return '"' + String(name).replace(/"/g, '""') + '"'; }

// Only the server's errors carry a SQLSTATE; a connection's error has a Node
// code (ENOENT, ECONNREFUSED) in the same field, which is not one
function sqlstateOf(e) { return e instanceof pg.DatabaseError ? e.code : null; }

// The database cannot be reached (down, restarting, no free connection in time)
function unreachable(e) {
    return !(e instanceof pg.DatabaseError) &&
        (e.syscall !== undefined || /^(Connection terminated|timeout exceeded when trying to connect)/.test(e.message));
}

// Errors become JSON with the SQLSTATE; the HTTP status follows it
function errorStatus(code) {
    if (!code) return 500;
    if (code === '42501') return 403;
    // SB003: a resubmit names a dead letter another session resubmitted or purged
    if (code === 'SB001' || code === 'SB003' || code === 'SB008') return 404;
    if (code.startsWith('22')) return 400;
    if (code === '57014') return 504;
    return 500;
}

class HttpError extends Error {
    constructor(status, message, code) { super(message); this.status = status; this.code = code; }
}

// Depth over time: one sample of every queue's counts each --sample-seconds, the
// last --samples of them kept in memory
class Sampler {
    constructor(size) { this.size = size; this.ring = []; this.lastError = null; }
    // a Map, not an object: a queue may be named "constructor" or "toString",
    // and an object would answer for it from its prototype in a sample taken
    // before the queue existed
    add(t, rows) {
        const counts = new Map();
        for (const r of rows) {
            counts.set(r.queue, [Number(r.active_count), Number(r.locked_count), Number(r.deferred_count),
                Number(r.scheduled_count), Number(r.dead_letter_count)]);
        }
        this.ring.push({ t, counts });
        if (this.ring.length > this.size) this.ring.splice(0, this.ring.length - this.size);
    }
    // per queue: [[t, active, locked, deferred, scheduled, dead letters], ...] oldest first
    // (since: only the samples taken after that time, in ms)
    series(queue, since = 0) {
        const out = [];
        for (const s of this.ring) if (s.t > since && s.counts.has(queue)) out.push([s.t, ...s.counts.get(queue)]);
        return out;
    }
}

const STATIC = {
    '/': ['index.html', 'text/html; charset=utf-8'],
    '/index.html': ['index.html', 'text/html; charset=utf-8'],
    '/app.js': ['app.js', 'text/javascript; charset=utf-8'],
    '/style.css': ['style.css', 'text/css; charset=utf-8'],
};

const SECURITY_HEADERS = {
    'Content-Security-Policy': "default-src 'none'; script-src 'self'; style-src 'self'; " +
        "img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    'X-Content-Type-Options': 'nosniff',
    'X-Frame-Options': 'DENY',
    'Referrer-Policy': 'no-referrer',
    'Cache-Control': 'no-store',
};

class Console {
    constructor(opts) {
        this.opts = opts;
        this.token = crypto.randomBytes(32).toString('hex');
        const conn = opts.database ? parseConninfo(opts.database) : {};
        this.pool = new pg.Pool({
            ...conn,
            max: opts.pool,
            statement_timeout: opts.statementTimeout,
            query_timeout: opts.statementTimeout + 2000,
            connectionTimeoutMillis: conn.connectionTimeoutMillis || 10000,
            idleTimeoutMillis: 30000,
            application_name: conn.application_name || 'sbqueue-console',
        });
        this.pool.on('error', (e) => log(`idle connection lost: ${e.message}`));
        this.sampler = new Sampler(opts.samples);
        this.schema = null;
        this.who = null;
    }

    fn(name) { return `${ident(this.schema)}.${name}`; }

    async init() {
        const r = await this.pool.query(
            `SELECT current_user AS role, current_database() AS database, n.nspname AS schema, e.extversion AS version
               FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
              WHERE e.extname OPERATOR(pg_catalog.=) 'sbqueue'`);
        if (r.rows.length === 0) throw new Error('the extension sbqueue is not installed in this database');
        this.schema = this.opts.schema || r.rows[0].schema;
        this.who = r.rows[0];
    }

    async stats() {
        const q = await this.pool.query(
            `SELECT queue, active_count, locked_count, deferred_count, scheduled_count, dead_letter_count,
                    oldest_enqueued_time, sent, received, completed, abandoned, deferred, dead_lettered, expired
               FROM ${this.fn('sbq_queue_stats')} ORDER BY queue`);
        let topics = [];
        try {
            const t = await this.pool.query(
                `SELECT topic, subscription_count, sent, dropped FROM ${this.fn('sbq_topic_stats')} ORDER BY topic`);
            topics = t.rows;
        } catch (e) {
            if (e.code !== '42P01') throw e;   // before 0.10 there are no topics
        }
        return { queues: q.rows, topics };
    }

    // one sample at a time: a tick while the last still runs (the stats view slow,
    // or waiting for a lock) is skipped, or the samples waiting would take every
    // connection of the pool and each request would wait for one in vain
    async sample() {
        if (this.sampling) return;
        this.sampling = true;
        try {
            const { queues } = await this.stats();
            this.sampler.add(Date.now(), queues);
            this.sampler.lastError = null;
        } catch (e) {
            this.sampler.lastError = { error: e.message, sqlstate: sqlstateOf(e) };
            log(`sample failed: ${e.message}`);
        } finally {
            this.sampling = false;
        }
    }

    startSampling() {
        this.sample();
        this.timer = setInterval(() => this.sample(), this.opts.sampleSeconds * 1000);
    }

    // ?since=T (ms): each queue's history holds only the samples taken after T,
    // so a page that has the rest gets one sample per queue, not the whole ring
    async apiQueues(params) {
        const sinceText = params.get('since') || '0';
        if (!/^\d{1,16}$/.test(sinceText)) throw new HttpError(400, 'since: a time in milliseconds', '22023');
        const since = Number(sinceText);
        const { queues, topics } = await this.stats();
        return {
            queues: queues.map((r) => ({
                queue: r.queue,
                active: Number(r.active_count), locked: Number(r.locked_count),
                deferred: Number(r.deferred_count), scheduled: Number(r.scheduled_count),
                deadLetters: Number(r.dead_letter_count),
                oldestEnqueued: r.oldest_enqueued_time,
                counters: {
                    sent: r.sent, received: r.received, completed: r.completed, abandoned: r.abandoned,
                    deferred: r.deferred, deadLettered: r.dead_lettered, expired: r.expired,
                },
                history: this.sampler.series(r.queue, since),
            })),
            topics: topics.map((t) => ({
                topic: t.topic, subscriptions: Number(t.subscription_count), sent: t.sent, dropped: t.dropped,
            })),
            sampleSeconds: this.opts.sampleSeconds,
            samplesKept: this.opts.samples,
            samplerError: this.sampler.lastError,
            now: Date.now(),
        };
    }

    async apiPeek(params) {
        const queue = params.get('queue');
        if (!queue) throw new HttpError(400, 'queue is required', '22004');
        const entity = params.get('deadletters') === '1' ? `${queue}/$deadletterqueue` : queue;
        const max = params.has('max') ? Number(params.get('max')) : 20;
        if (!Number.isInteger(max) || max < 1 || max > PEEK_MAX) throw new HttpError(400, `max is 1 .. ${PEEK_MAX}`, '22023');
        const from = params.get('from') || null;
        if (from !== null && !/^\d{1,19}$/.test(from)) throw new HttpError(400, 'from is a sequence number', '22023');
        const r = await this.pool.query(
            // times and properties as PostgreSQL writes them (ISO 8601 times): parsed
            // into JavaScript values, times lost their microseconds (and those past
            // the year 275760 became null), and numbers in the properties their digits
            `SELECT sequence_number::text AS sequence_number, message_id, delivery_count,
                    pg_catalog.to_json(enqueued_time) #>> '{}' AS enqueued_time,
                    pg_catalog.to_json(scheduled_enqueue_time) #>> '{}' AS scheduled_enqueue_time,
                    pg_catalog.to_json(expires_at) #>> '{}' AS expires_at,
                    time_to_live::text AS time_to_live, state, session_id,
                    correlation_id, subject, content_type, reply_to, reply_to_session_id, to_address,
                    application_properties::text AS application_properties,
                    dead_letter_reason, dead_letter_error_description, dead_letter_source,
                    pg_catalog.to_json(locked_until) #>> '{}' AS locked_until,
                    pg_catalog.octet_length(body) AS body_size,
                    pg_catalog.substring(body, 1, $4) AS body
               FROM ${this.fn('sbq_peek')}($1, $2, $3::bigint)`,
            [entity, max, from, BODY_CAP]);
        return {
            // a dead-letter sub-queue, whether asked for so or named (any letter case)
            queue, entity, deadLetters: /\/\$deadletterqueue$/i.test(entity), bodyCap: BODY_CAP,
            messages: r.rows.map((m) => {
                const body = m.body === null ? null : m.body.toString('base64');
                const size = m.body_size === null ? null : Number(m.body_size);
                delete m.body_size;
                return { ...m, body, bodySize: size, bodyTruncated: size !== null && size > BODY_CAP };
            }),
        };
    }

    async apiResubmit(body) {
        const queue = body.queue;
        if (typeof queue !== 'string' || queue === '') throw new HttpError(400, 'queue is required', '22004');
        let seqs = null;
        if (body.sequenceNumbers !== undefined && body.sequenceNumbers !== null) {
            if (!Array.isArray(body.sequenceNumbers) || body.sequenceNumbers.length === 0 ||
                body.sequenceNumbers.length > 5000 ||
                // strings of digits, or numbers JSON holds exactly: 9007199254740993
                // arrives as ...992, another message's number
                !body.sequenceNumbers.every((s) => (typeof s === 'string' && /^\d{1,19}$/.test(s)) ||
                    (Number.isSafeInteger(s) && s >= 0))) {
                throw new HttpError(400, 'sequenceNumbers: 1 .. 5000 sequence numbers, or null for all', '22023');
            }
            seqs = body.sequenceNumbers.map(String);
        }
        const r = await this.pool.query(`SELECT ${this.fn('sbq_resubmit')}($1, $2::bigint[]) AS n`, [queue, seqs]);
        return { queue, resubmitted: Number(r.rows[0].n) };
    }

    async apiPurgeDeadLetters(body) {
        const queue = body.queue;
        if (typeof queue !== 'string' || queue === '') throw new HttpError(400, 'queue is required', '22004');
        const r = await this.pool.query(`SELECT ${this.fn('sbq_purge_queue')}($1) AS n`, [`${queue}/$deadletterqueue`]);
        return { queue, purged: Number(r.rows[0].n) };
    }

    // Host must be the address the server listens on (or localhost) with its port,
    // and an Origin, when there is one, the same; anything else is another site
    allowedHosts() {
        const port = this.port;
        const hosts = new Set();
        const h = this.bindHost;
        hosts.add(h.includes(':') ? `[${h}]:${port}` : `${h}:${port}`);
        if (isLoopback(h)) {
            hosts.add(`localhost:${port}`);
            hosts.add(`127.0.0.1:${port}`);
        }
        return hosts;
    }

    // the Host headers and Origins this console answers: its own address, and the
    // one --public-origin names (a proxy that passes the browser's Host, a tunnel
    // to another local port)
    allowed() {
        const hosts = this.allowedHosts();
        const origins = new Set([...hosts].map((h) => `http://${h}`));
        const pub = this.opts.publicOrigin;
        if (pub) {
            hosts.add(pub.host.toLowerCase());
            origins.add(pub.origin.toLowerCase());
        }
        return { hosts, origins };
    }

    checkRequest(req) {
        const { hosts, origins } = this.allowed();
        const host = (req.headers.host || '').toLowerCase();
        if (!hosts.has(host)) throw new HttpError(403, `Host "${req.headers.host || ''}" is not this console's address`, 'host');
        const origin = req.headers.origin;
        if (origin !== undefined && !origins.has(origin.toLowerCase())) {
            throw new HttpError(403, `Origin "${origin}" is not this console`, 'origin');
        }
        // a request another page made (an <img>, a no-cors fetch: no Origin on a GET)
        // costs the database a query even if its answer cannot be read; browsers say
        // so. The console's own page is same-origin; a typed address is none
        const site = req.headers['sec-fetch-site'];
        if (site === 'cross-site' || site === 'same-site') {
            throw new HttpError(403, `a request from another site (${site}) is not this console's`, 'fetch-site');
        }
    }

    checkChange(req) {
        if (!this.opts.allowChanges) {
            throw new HttpError(403, 'read-only console: start it with --allow-changes to resubmit or purge', 'read-only');
        }
        const got = req.headers[TOKEN_HEADER];
        const a = Buffer.from(String(got || ''));
        const b = Buffer.from(this.token);
        if (a.length !== b.length || !crypto.timingSafeEqual(a, b)) {
            throw new HttpError(403, 'missing or wrong console token', 'token');
        }
        if (!/^application\/json\b/i.test(req.headers['content-type'] || '')) {
            throw new HttpError(415, 'a change is a JSON request (Content-Type: application/json)', 'content-type');
        }
    }

    async handle(req, res) {
        try {
            // inside the try: a request target URL cannot read (GET //[) is the
            // client's error, not a reason for the whole console to stop
            let url;
            try {
                url = new URL(req.url, 'http://console');
            } catch (e) {
                throw new HttpError(400, 'the request target is not a URL path', 'url');
            }
            this.checkRequest(req);
            if (req.method === 'GET' && STATIC[url.pathname]) return this.serveFile(res, ...STATIC[url.pathname]);
            if (req.method === 'GET' && url.pathname === '/api/config') {
                const headers = this.opts.allowChanges ? { [TOKEN_HEADER]: this.token } : {};
                return sendJson(res, 200, {
                    allowChanges: this.opts.allowChanges, database: this.who.database, role: this.who.role,
                    schema: this.schema, version: this.who.version, sampleSeconds: this.opts.sampleSeconds,
                    samples: this.opts.samples, bodyCap: BODY_CAP, peekMax: PEEK_MAX,
                }, headers);
            }
            if (req.method === 'GET' && url.pathname === '/api/queues') return sendJson(res, 200, await this.apiQueues(url.searchParams));
            if (req.method === 'GET' && url.pathname === '/api/peek') return sendJson(res, 200, await this.apiPeek(url.searchParams));
            if (req.method === 'GET' && url.pathname === '/metrics') return this.serveMetrics(res);
            const changes = { '/api/resubmit': 'apiResubmit', '/api/purge-dead-letters': 'apiPurgeDeadLetters' };
            if (changes[url.pathname]) {
                if (req.method !== 'POST') throw new HttpError(405, 'POST only', 'method');
                this.checkChange(req);
                const body = await readJson(req);
                const out = await this[changes[url.pathname]](body);
                log(`${url.pathname} ${JSON.stringify(body)} -> ${JSON.stringify(out)}`);
                return sendJson(res, 200, out);
            }
            throw new HttpError(404, 'not found', 'not-found');
        } catch (e) {
            if (e instanceof HttpError) {
                return sendJson(res, e.status, { error: e.message, code: e.code || null, sqlstate: null },
                    e.status === 413 ? { Connection: 'close' } : {});
            }
            const sqlstate = sqlstateOf(e);
            // the extension dropped and made again, maybe in another schema: look it up again
            if (!this.opts.schema && (sqlstate === '42P01' || sqlstate === '42883' || sqlstate === '3F000')) {
                this.init().catch((e2) => log(`looking sbqueue up again failed: ${e2.message}`));
            }
            if (!sqlstate && unreachable(e)) {
                return sendJson(res, 503, { error: `cannot reach the database: ${e.message}`, code: 'unreachable', sqlstate: null });
            }
            const status = errorStatus(sqlstate);
            if (!sqlstate) log(`error: ${e.stack || e.message}`);
            return sendJson(res, status, {
                error: e.message, sqlstate, detail: e.detail || null, hint: e.hint || null,
            });
        }
    }

    // Prometheus's text format from sbq_metrics_text() (sbqueue 0.12), as the
    // console's role: what it holds a right on, this database's lock table and worker
    async serveMetrics(res) {
        let r;
        try {
            r = await this.pool.query(`SELECT ${this.fn('sbq_metrics_text')}() AS t`);
        } catch (e) {
            if (sqlstateOf(e) === '42883') throw new HttpError(404, 'metrics need sbqueue 0.12 (ALTER EXTENSION sbqueue UPDATE)', 'no-metrics');
            throw e;
        }
        const data = Buffer.from(r.rows[0].t);
        res.writeHead(200, { ...SECURITY_HEADERS, 'Content-Type': 'text/plain; version=0.0.4; charset=utf-8',
            'Content-Length': data.length });
        res.end(data);
    }

    serveFile(res, file, type) {
        const data = fs.readFileSync(path.join(__dirname, 'public', file));
        res.writeHead(200, { ...SECURITY_HEADERS, 'Content-Type': type, 'Content-Length': data.length });
        res.end(data);
    }

    listen() {
        this.bindHost = this.opts.host || '127.0.0.1';
        this.server = http.createServer((req, res) => {
            // handle() answers every error itself; should answering fail too, one
            // request is lost, never the process (an unhandled rejection ends it)
            this.handle(req, res).catch((e) => { log(`request failed: ${e.stack || e.message}`); res.destroy(); });
        });
        this.server.headersTimeout = 10000;
        this.server.requestTimeout = 30000;
        return new Promise((resolve, reject) => {
            this.server.once('error', reject);
            this.server.listen(this.opts.port, this.bindHost, () => {
                this.port = this.server.address().port;
                resolve();
            });
        });
    }

    async close() {
        clearInterval(this.timer);
        if (this.server) await new Promise((r) => this.server.close(r));
        await this.pool.end();
    }
}

function isLoopback(h) { return h === 'localhost' || h === '::1' || /^127\./.test(h); }

function readJson(req) {
    return new Promise((resolve, reject) => {
        const chunks = [];
        let size = 0;
        let over = false;
        // too large: answered 413 (and the connection closed) once the body is
        // read past the limit, by its Content-Length when it says so
        const tooLarge = () => new HttpError(413, `the request body is over ${POST_MAX} bytes`, 'too-large');
        if (Number(req.headers['content-length']) > POST_MAX) { req.resume(); reject(tooLarge()); return; }
        req.on('data', (c) => {
            if (over) return;
            size += c.length;
            if (size > POST_MAX) { over = true; req.resume(); reject(tooLarge()); return; }
            chunks.push(c);
        });
        req.on('end', () => {
            try {
                const v = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}');
                if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new Error('not an object');
                resolve(v);
            } catch (e) {
                reject(new HttpError(400, 'the request body is not a JSON object', 'json'));
            }
        });
        req.on('error', reject);
    });
}

function sendJson(res, status, obj, headers = {}) {
    const data = Buffer.from(JSON.stringify(obj));
    res.writeHead(status, {
        ...SECURITY_HEADERS, ...headers, 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': data.length,
    });
    res.end(data);
}

function log(msg) { process.stderr.write(`console: ${msg}\n`); }

async function main() {
    const opts = parseArgs(process.argv.slice(2));
    if (opts.host !== null && !isLoopback(opts.host)) {
        log(`WARNING: listening on ${opts.host}, not on the loopback address: anyone who reaches it ` +
            `sees the messages this role may peek${opts.allowChanges ? ' and may resubmit or purge with the token the page gets' : ''}`);
    }
    const c = new Console(opts);
    try {
        await c.init();
    } catch (e) {
        log(`cannot use the database: ${e.message}${e.code ? ` (SQLSTATE ${e.code})` : ''}`);
        await c.pool.end().catch(() => {});
        process.exit(1);
    }
    try {
        await c.listen();
    } catch (e) {
        log(`cannot listen on ${c.bindHost}:${opts.port}: ${e.message}`);
        await c.pool.end().catch(() => {});
        process.exit(1);
    }
    c.startSampling();
    const mode = opts.allowChanges ? 'changes allowed' : 'read-only';
    const shown = c.bindHost.includes(':') ? `[${c.bindHost}]` : c.bindHost;
    // tests and scripts read this line for the port
    process.stdout.write(`sbqueue console listening on http://${shown}:${c.port}/ ` +
        `(${mode}; database ${c.who.database} as ${c.who.role}; sbqueue ${c.who.version} in schema ${c.schema})\n`);
    const stop = () => { c.close().finally(() => process.exit(0)); };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
}

if (require.main === module) main();

module.exports = { parseArgs, parseConninfo, Console };
