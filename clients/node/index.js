// sbqueue: a client for the sbqueue PostgreSQL extension over node-postgres (pg).
//
//   const { Client } = require('sbqueue');
//   const client = await Client.connect();            // pg's config; PG* variables apply
//   await client.sender('orders').send({ id: 42 }, { subject: 'created' });
//   for (const msg of await client.receiver('orders').receive({ maxMessages: 10, maxWait: 5 })) ...
//
// Sequence numbers are BigInt; bodies are Buffers (msg.bodyText(), msg.bodyJson());
// tokens may be messages or strings; a string body is sent as text, a Buffer as bytea,
// anything else as jsonb. A waiting receive or accept ends early when its AbortSignal
// fires (the cancel goes through a side connection) and then returns nothing. Errors
// are the typed errors of errors.js.
//
// A topic is sent to as a queue is (client.sender(topic)); each of its subscriptions is
// received from as a queue, at its address '<topic>/subscriptions/<name>'
// (client.subscriptionReceiver(topic, name)).
'use strict';

const { EventEmitter } = require('node:events');
const pg = require('pg');
const errors = require('./errors');

const { translate } = errors;

// int8 as BigInt; everything else as pg parses it
const TYPES = {
    getTypeParser(oid, format) {
        if (oid === 20 && format !== 'binary') return (v) => BigInt(v);
        return pg.types.getTypeParser(oid, format);
    },
};

// pg reads timestamps only in DateStyle ISO and intervals only in IntervalStyle
// postgres: under any other setting (from the database, the role, PGOPTIONS or the
// config) times came back null and intervals 0. A Client's connection is its own, so
// it sets both when it connects; its calls read every value as pg expects it. (RESET
// and DISCARD ALL go back to the settings of the connection's start, not to these:
// don't run them on a Client's connection, nor change these two settings there.)
const PIN_STYLES = "SELECT pg_catalog.set_config('DateStyle', 'ISO', false), " +
    "pg_catalog.set_config('IntervalStyle', 'postgres', false)";

const SELECT_LIST = [
    'sequence_number', 'message_id', 'lock_token', 'locked_until', 'delivery_count',
    'enqueued_time', 'scheduled_enqueue_time', 'expires_at',
    'extract(epoch FROM time_to_live)::float8 AS time_to_live', 'state', 'session_id',
    'correlation_id', 'subject', 'content_type', 'reply_to', 'reply_to_session_id',
    'to_address', 'application_properties', 'body', 'dead_letter_reason',
    'dead_letter_error_description', 'dead_letter_source',
].join(', ');

// sbq_message's columns, in order, and the message's property for each
const MESSAGE_FIELDS = {
    sequence_number: 'sequenceNumber', message_id: 'messageId', lock_token: 'lockToken',
    locked_until: 'lockedUntil', delivery_count: 'deliveryCount', enqueued_time: 'enqueuedTime',
    scheduled_enqueue_time: 'scheduledEnqueueTime', expires_at: 'expiresAt',
    time_to_live: 'timeToLive', state: 'state', session_id: 'sessionId',
    correlation_id: 'correlationId', subject: 'subject', content_type: 'contentType',
    reply_to: 'replyTo', reply_to_session_id: 'replyToSessionId', to_address: 'toAddress',
    application_properties: 'applicationProperties', body: 'body',
    dead_letter_reason: 'deadLetterReason',
    dead_letter_error_description: 'deadLetterErrorDescription',
    dead_letter_source: 'deadLetterSource',
};

class Message {
    constructor(row) {
        for (const [col, prop] of Object.entries(MESSAGE_FIELDS)) this[prop] = row[col];
        if (this.body == null) this.body = Buffer.alloc(0);
    }

    bodyText(encoding = 'utf8') { return this.body.toString(encoding); }

    bodyJson() { return JSON.parse(this.body.toString('utf8')); }
}

// send options: option -> [argument, SQL type]
const SEND_OPTIONS = {
    messageId: ['message_id', 'text'], sessionId: ['session_id', 'text'],
    correlationId: ['correlation_id', 'text'], subject: ['subject', 'text'],
    contentType: ['content_type', 'text'], replyTo: ['reply_to', 'text'],
    replyToSessionId: ['reply_to_session_id', 'text'], toAddress: ['to_address', 'text'],
    timeToLive: ['time_to_live', 'interval'], scheduledEnqueueTime: ['scheduled_enqueue_time', 'timestamptz'],
    applicationProperties: ['application_properties', 'jsonb'],
};

function bodyOf(body) {
    if (typeof body === 'string') return [body, 'text'];
    if (Buffer.isBuffer(body) || body instanceof Uint8Array) return [Buffer.from(body), 'bytea'];
    return [JSON.stringify(body), 'jsonb'];
}

function tokenOf(t) {
    if (t instanceof Message) {
        if (t.lockToken == null) {
            throw new TypeError(`message ${t.sequenceNumber} has no lock token (peeked, or received and deleted)`);
        }
        return t.lockToken;
    }
    if (typeof t !== 'string') throw new TypeError('a lock token is a message or a string');
    return t;
}

function tokensOf(x) {
    return Array.isArray(x) ? x.map(tokenOf) : [tokenOf(x)];
}

// seconds (a number) as an interval literal
function interval(seconds) {
    return seconds == null ? null : `${Number(seconds)} seconds`;
}

function ident(name) {
    return '"' + String(name).replace(/"/g, '""') + '"';
}

// The name a subscription is received from, peeked at, settled on, counted in
// sbq_queue_stats by, and processed by (Processor): '<topic>/subscriptions/<name>'.
function subscriptionAddress(topic, subscription) {
    return `${topic}/subscriptions/${subscription}`;
}

const snake = (k) => k.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase());
const camel = (k) => k.replace(/_([a-z])/g, (_, c) => c.toUpperCase());

// The named arguments (from $first on) and their values for a management call's
// options: sbqueue's names, in camelCase or snake_case; an interval in seconds (a
// number) or as an interval literal (a string).
function entityArgs(options, first) {
    const names = Object.keys(options || {});
    const args = names.map((k, i) => `${ident(snake(k))} => $${first + i}`);
    const values = names.map((k) => {
        const v = options[k];
        return /(duration|ttl|window|delay)$/.test(snake(k)) && typeof v === 'number' ? interval(v) : v;
    });
    return [args, values];
}

// an interval as pg parses it, in seconds (as extract(epoch FROM ...) counts them)
function intervalSeconds(v) {
    if (typeof v !== 'object') return v;
    return (v.years || 0) * 31557600 + (v.months || 0) * 2592000 + (v.days || 0) * 86400 +
        (v.hours || 0) * 3600 + (v.minutes || 0) * 60 + (v.seconds || 0) + (v.milliseconds || 0) / 1000;
}

const INTERVAL_OID = 1186;

// The rows of a management call or view: camelCase keys, intervals in seconds.
function records(res) {
    const intervals = new Set(res.fields.filter((f) => f.dataTypeID === INTERVAL_OID).map((f) => f.name));
    return res.rows.map((row) => {
        const out = {};
        for (const [k, v] of Object.entries(row)) out[camel(k)] = v != null && intervals.has(k) ? intervalSeconds(v) : v;
        return out;
    });
}

// A correlation filter as sbq_add_rule takes it: its system properties in snake_case
// (correlationId or correlation_id, ...), its application properties as `properties`
// (or `applicationProperties`), unchanged.
function correlationToSql(filter) {
    if (filter == null) return null;
    const out = {};
    for (const [k, v] of Object.entries(filter)) out[k === 'applicationProperties' ? 'properties' : snake(k)] = v;
    return JSON.stringify(out);
}

// ... and back, as rules() shows it: camelCase, application properties as
// applicationProperties (a Message's name for them).
function correlationFromSql(filter) {
    const out = {};
    for (const [k, v] of Object.entries(filter)) out[k === 'properties' ? 'applicationProperties' : camel(k)] = v;
    return out;
}

class Client {
    // config: pg.Client's (or a connection string); schema: where sbqueue's functions are
    constructor(config = {}, { schema } = {}) {
        this.config = typeof config === 'string' ? { connectionString: config } : { ...config };
        this.schema = schema || null;
        this.pg = new pg.Client({ ...this.config, types: TYPES });
        this._gate = null;
        this._depth = 0;            // transaction() calls in progress
        this.broken = false;        // the connection failed: make a new Client
        this.pg.on('error', () => { this.broken = true; });
    }

    static async connect(config = {}, options = {}) {
        const c = new Client(config, options);
        await c.pg.connect();
        try {
            await c.pg.query(PIN_STYLES);
        } catch (err) {
            await c.pg.end().catch(() => {});
            throw translate(err);
        }
        return c;
    }

    async close() { await this.pg.end(); }

    fn(name) { return this.schema ? `${ident(this.schema)}.${name}` : name; }

    // One statement. A Client runs one flow of calls at a time (its calls inside
    // transaction() would take in another flow's); flows that work at once each want a
    // Client of their own.
    async query(sql, params) {
        while (this._gate) await this._gate;
        try {
            return await this.pg.query(sql, params);
        } catch (err) {
            if (!err.code || /^(08|57P)/.test(err.code)) this.broken = true;
            throw translate(err);
        }
    }

    // Runs fn(client) in a transaction: committed when it resolves, rolled back when it
    // throws (nested: a savepoint).
    async transaction(fn) {
        const savepoint = this._depth > 0 ? `sbq_${this._depth}` : null;
        await this.query(savepoint ? `SAVEPOINT ${savepoint}` : 'BEGIN');
        this._depth++;
        try {
            const out = await fn(this);
            this._depth--;
            await this.query(savepoint ? `RELEASE SAVEPOINT ${savepoint}` : 'COMMIT');
            return out;
        } catch (err) {
            if (this._depth > (savepoint ? 1 : 0)) this._depth--;
            if (!this.broken) await this.query(savepoint ? `ROLLBACK TO SAVEPOINT ${savepoint}` : 'ROLLBACK');
            throw err;
        }
    }

    // A query that may wait: signal's abort cancels it (through a side connection) and
    // it resolves to null. Later queries of this client wait for the cancel to arrive, so
    // that it can only end this one (a cancel that finds the server idle is ignored).
    // Inside a transaction a cancelled wait aborts the transaction: it rejects then.
    async waitQuery(sql, params, signal) {
        if (signal && signal.aborted) return null;
        let cancelled = false;
        let over = false;
        let pending;
        const onAbort = () => {
            cancelled = true;
            // a cancel that reaches the server before the statement is lost: send again
            // until the statement is over (for a while)
            this._gate = (async () => {
                for (let i = 0; i < 40 && !over; i++) {
                    await this._cancelBackend().catch(() => {});
                    await Promise.race([pending.catch(() => {}), new Promise((r) => setTimeout(r, 50))]);
                }
            })().finally(() => { this._gate = null; });
        };
        if (signal) signal.addEventListener('abort', onAbort, { once: true });
        try {
            pending = this.query(sql, params);
            return await pending;
        } catch (err) {
            const cause = err.cause || err;
            if (cancelled && cause.code === '57014' && this._depth === 0) return null;
            throw err;
        } finally {
            over = true;
            if (signal) signal.removeEventListener('abort', onAbort);
        }
    }

    async _cancelBackend() {
        const side = new pg.Client(this.config);
        try {
            await side.connect();
            await side.query('SELECT pg_cancel_backend($1)', [this.pg.processID]);
        } finally {
            await side.end().catch(() => {});
        }
    }

    // options: sbq_create_queue's (snake_case or camelCase; intervals in seconds or as
    // interval literals)
    async createQueue(name, options = {}) {
        const [args, values] = entityArgs(options, 2);
        await this.query(`SELECT ${this.fn('sbq_create_queue')}($1${args.map((a) => ', ' + a).join('')})`,
                         [name, ...values]);
    }

    async deleteQueue(name) {
        await this.query(`SELECT ${this.fn('sbq_delete_queue')}($1)`, [name]);
    }

    // The queue's (or subscription's) row of sbq_queue_stats, null when there is none.
    // The name matches in any letter case, as in every other call: the view shows a
    // name as it was created, and names compare by their lower-case form (of ASCII
    // letters only, as lower() folds them under the C collation).
    async queueStats(name) {
        const res = await this.query(
            `SELECT * FROM ${this.fn('sbq_queue_stats')} WHERE pg_catalog.lower(queue COLLATE "C")` +
            ' OPERATOR(pg_catalog.=) pg_catalog.lower($1::text COLLATE "C")', [name]);
        return res.rows[0] || null;
    }

    sender(queue) { return new Sender(this, queue); }

    receiver(queue, { receiveMode = 'peek_lock' } = {}) { return new Receiver(this, queue, receiveMode); }

    deadLetterReceiver(queue) { return new Receiver(this, queue + '/$deadletterqueue'); }

    // The session sessionId, or the next one with available messages; null when none
    // came within maxWait seconds (or signal aborted the wait).
    async acceptSession(queue, { sessionId = null, maxWait = 0, signal } = {}) {
        const res = await this.waitQuery(
            `SELECT session_id, session_token, locked_until FROM ${this.fn('sbq_accept_session')}($1, $2::text, $3::interval)`,
            [queue, sessionId, interval(maxWait)], signal);
        if (!res || res.rows.length === 0) return null;
        const r = res.rows[0];
        return new SessionReceiver(this, queue, r.session_id, r.session_token, r.locked_until);
    }

    // -- topics, subscriptions, rules (sbqueue 0.10)

    // SELECT * FROM fn(names..., options...): its one row, as records() makes it
    async _record(fn, names, options = {}) {
        const [args, values] = entityArgs(options, names.length + 1);
        const params = names.map((_, i) => `$${i + 1}::text`).concat(args);
        const res = await this.query(`SELECT * FROM ${this.fn(fn)}(${params.join(', ')})`, [...names, ...values]);
        return records(res)[0];
    }

    // The rows of view for one topic (or subscription), LEFT JOINed to sbq_get_topic (or
    // sbq_get_subscription): the names in any letter case, and EntityNotFound when there
    // is none (a join whose view side is empty might never call the function).
    async _viewOf(view, names, orderBy) {
        const fn = names.length === 1 ? 'sbq_get_topic' : 'sbq_get_subscription';
        const on = names.length === 1 ? 'v.topic = e.topic' : 'v.topic = e.topic AND v.subscription = e.subscription';
        const res = await this.query(
            `SELECT v.* FROM ${this.fn(fn)}(${names.map((_, i) => `$${i + 1}::text`).join(', ')}) e` +
            ` LEFT JOIN ${this.fn(view)} v ON ${on}${orderBy ? ' ORDER BY ' + orderBy : ''}`, names);
        return records(res).filter((r) => r.topic != null);
    }

    // options: defaultMessageTtl, duplicateDetectionWindow (seconds or interval
    // literals), maxMessageSize (or their snake_case names). The topic's properties.
    async createTopic(name, options = {}) { return this._record('sbq_create_topic', [name], options); }

    // changes the options given, keeps the others
    async updateTopic(name, options = {}) { return this._record('sbq_update_topic', [name], options); }

    // deletes the topic with its subscriptions, their messages, rules and rights
    async deleteTopic(name) {
        await this.query(`SELECT ${this.fn('sbq_delete_topic')}($1)`, [name]);
    }

    // EntityNotFound when there is none
    async getTopic(name) { return this._record('sbq_get_topic', [name]); }

    // the topics the caller holds a right on
    async topics() {
        return records(await this.query(`SELECT * FROM ${this.fn('sbq_topics')} ORDER BY topic`));
    }

    // { topic, subscriptionCount, sent, dropped } (BigInts): the messages sent to it
    // (duplicates not counted), those no subscription took. (A subscription's counts:
    // queueStats(subscriptionAddress(topic, name)).)
    async topicStats(topic) {
        return (await this._viewOf('sbq_topic_stats', [topic]))[0];
    }

    // options: createQueue's but maxMessageSize and duplicateDetectionWindow (the
    // topic's apply), and deadLetteringOnFilterEvaluationExceptions. It starts with the
    // rule $Default (every message). The subscription's properties.
    async createSubscription(topic, name, options = {}) {
        return this._record('sbq_create_subscription', [topic, name], options);
    }

    // changes the options given, keeps the others (requiresSession: at creation only)
    async updateSubscription(topic, name, options = {}) {
        return this._record('sbq_update_subscription', [topic, name], options);
    }

    // deletes the subscription with its messages, rules and rights
    async deleteSubscription(topic, name) {
        await this.query(`SELECT ${this.fn('sbq_delete_subscription')}($1, $2)`, [topic, name]);
    }

    async getSubscription(topic, name) { return this._record('sbq_get_subscription', [topic, name]); }

    // the topic's subscriptions the caller may see, in the order they were made
    async subscriptions(topic) {
        return this._viewOf('sbq_subscriptions', [topic], 'v.created_at, v.subscription');
    }

    // A rule: a SQL filter or a correlation filter ({ correlationId, subject, ...,
    // applicationProperties }: all equal), or neither (the true filter), and an action
    // or none. A filter or action that does not parse is InvalidArgument (the position
    // in err.detail).
    async addRule(topic, subscription, rule, { sqlFilter = null, correlationFilter = null, action = null } = {}) {
        await this.query(`SELECT ${this.fn('sbq_add_rule')}($1, $2, $3, $4::text, $5::jsonb, $6::text)`,
                         [topic, subscription, rule, sqlFilter, correlationToSql(correlationFilter), action]);
    }

    async removeRule(topic, subscription, rule) {
        await this.query(`SELECT ${this.fn('sbq_remove_rule')}($1, $2, $3)`, [topic, subscription, rule]);
    }

    // The subscription's rules, in the order they were added: { topic, subscription,
    // rule, filterType ('sql', 'correlation' or 'true'), filter (the SQL filter; a
    // correlation filter as an object, as addRule takes it; '1=1'), action, createdAt }.
    async rules(topic, subscription) {
        const rows = await this._viewOf('sbq_rules', [topic, subscription], 'v.created_at, v.rule');
        for (const r of rows) if (r.filterType === 'correlation') r.filter = correlationFromSql(JSON.parse(r.filter));
        return rows;
    }

    // sbq_new_message(body, option => value, ...) as SQL from $first on, and its values
    _newMessage(body, options, first) {
        const [value, type] = bodyOf(body);
        const [args, values] = Sender.options(options, first + 1);
        return [`${this.fn('sbq_new_message')}($${first}::${type}${args.map((a) => ', ' + a).join('')})`,
                [value, ...values]];
    }

    // sbq_test_filter: a SQL filter's value on a message (body and send's options): true,
    // false, or null when it is unknown. A filter that does not parse, or that fails to
    // evaluate on the message (a subscription would dead-letter it), rejects with
    // InvalidArgument. Reads and writes no table.
    async testFilter(sqlFilter, body = '', options = {}) {
        const [call, params] = this._newMessage(body, options, 2);
        const res = await this.query(`SELECT ${this.fn('sbq_test_filter')}($1::text, ${call}) AS v`,
                                     [sqlFilter, ...params]);
        return res.rows[0].v;
    }

    // sbq_test_action: the message (body and send's options) after a rule's action, as
    // sendMessages takes one ({ body: Buffer, subject, ..., applicationProperties }: the
    // properties it has).
    async testAction(action, body = '', options = {}) {
        const [call, params] = this._newMessage(body, options, 2);
        const m = records(await this.query(`SELECT * FROM ${this.fn('sbq_test_action')}($1::text, ${call})`,
                                           [action, ...params]))[0];
        return Object.fromEntries(Object.entries(m).filter(([k, v]) => v != null || k === 'body'));
    }

    // sender(topic): a topic is sent to as a queue is
    topicSender(topic) { return new Sender(this, topic); }

    subscriptionReceiver(topic, subscription, { receiveMode = 'peek_lock' } = {}) {
        return new Receiver(this, subscriptionAddress(topic, subscription), receiveMode);
    }

    subscriptionDeadLetterReceiver(topic, subscription) {
        return new Receiver(this, subscriptionAddress(topic, subscription) + '/$deadletterqueue');
    }

    // acceptSession on a subscription (that requires sessions)
    async acceptSubscriptionSession(topic, subscription, options = {}) {
        return this.acceptSession(subscriptionAddress(topic, subscription), options);
    }
}

class Sender {
    constructor(client, queue) {
        this.client = client;
        this.queue = queue;
    }

    static options(options, first) {
        const args = [];
        const values = [];
        for (const [k, v] of Object.entries(options || {})) {
            const spec = SEND_OPTIONS[k];
            if (!spec) throw new TypeError(`unknown send option: ${k}`);
            let value = v;
            if (k === 'timeToLive' && typeof v === 'number') value = interval(v);
            if (k === 'applicationProperties' && v != null) value = JSON.stringify(v);
            if (k === 'scheduledEnqueueTime' && v instanceof Date) value = v.toISOString();
            args.push(`${spec[0]} => $${first + values.length}::${spec[1]}`);
            values.push(value);
        }
        return [args, values];
    }

    // The sequence number (BigInt) of the message sent.
    async send(body, options = {}) {
        const [value, type] = bodyOf(body);
        const [args, values] = Sender.options(options, 3);
        const res = await this.client.query(
            `SELECT ${this.client.fn('sbq_send')}($1, $2::${type}${args.map((a) => ', ' + a).join('')}) AS n`,
            [this.queue, value, ...values]);
        return res.rows[0].n;
    }

    // Sends the bodies (all strings, all Buffers, or all JSON values) in one call.
    async sendBatch(bodies, options = {}) {
        if (bodies.length === 0) return [];
        const typed = bodies.map(bodyOf);
        const kinds = new Set(typed.map((t) => t[1]));
        if (kinds.size !== 1) throw new TypeError("a batch's bodies must be all strings, all Buffers, or all JSON values");
        const [args, values] = Sender.options(options, 3);
        const res = await this.client.query(
            `SELECT n FROM ${this.client.fn('sbq_send_batch')}($1, $2::${typed[0][1]}[]${args.map((a) => ', ' + a).join('')}) n`,
            [this.queue, typed.map((t) => t[0]), ...values]);
        return res.rows.map((r) => r.n);
    }

    // Sends messages that each have properties of their own ({ body, messageId, ... },
    // with send's options), in one call, all or nothing; their sequence numbers, in order.
    async sendMessages(messages) {
        if (messages.length === 0) return [];
        const names = Object.keys(SEND_OPTIONS);
        const cols = { k: [], t: [], j: [], b: [] };
        for (const n of names) cols[n] = [];
        for (const m of messages) {
            const [value, kind] = bodyOf(m.body);
            cols.k.push(kind);
            cols.t.push(kind === 'text' ? value : null);
            cols.j.push(kind === 'jsonb' ? value : null);
            cols.b.push(kind === 'bytea' ? value : null);
            for (const n of names) {
                let v = m[n] === undefined ? null : m[n];
                if (n === 'timeToLive' && typeof v === 'number') v = interval(v);
                if (n === 'applicationProperties' && v != null) v = JSON.stringify(v);
                if (n === 'scheduledEnqueueTime' && v instanceof Date) v = v.toISOString();
                cols[n].push(v);
            }
            for (const k of Object.keys(m)) {
                if (k !== 'body' && !SEND_OPTIONS[k]) throw new TypeError(`unknown send option: ${k}`);
            }
        }
        const make = this.client.fn('sbq_new_message');
        const props = names.map((n) => `u.${SEND_OPTIONS[n][0]}`).join(', ');
        const arrays = ['$2::text[]', '$3::text[]', '$4::jsonb[]', '$5::bytea[]',
                        ...names.map((n, i) => `$${i + 6}::${SEND_OPTIONS[n][1]}[]`)];
        const res = await this.client.query(
            `SELECT n FROM ${this.client.fn('sbq_send_batch')}($1::text, ARRAY(` +
            `SELECT CASE u.k WHEN 'text' THEN ${make}(u.t, ${props})` +
            ` WHEN 'jsonb' THEN ${make}(u.j, ${props}) ELSE ${make}(u.b, ${props}) END` +
            ` FROM unnest(${arrays.join(', ')}) WITH ORDINALITY` +
            ` AS u(k, t, j, b, ${names.map((n) => SEND_OPTIONS[n][0]).join(', ')}, ord)` +
            ' ORDER BY u.ord)) n',
            [this.queue, cols.k, cols.t, cols.j, cols.b, ...names.map((n) => cols[n])]);
        return res.rows.map((r) => r.n);
    }

    async schedule(body, when, options = {}) {
        return this.send(body, { ...options, scheduledEnqueueTime: when });
    }

    async cancelScheduled(sequenceNumber) {
        await this.client.query(`SELECT ${this.client.fn('sbq_cancel_scheduled')}($1, $2::bigint)`,
                                [this.queue, String(sequenceNumber)]);
    }
}

class Receiver {
    constructor(client, queue, receiveMode = 'peek_lock') {
        this.client = client;
        this.queue = queue;
        this.receiveMode = receiveMode;
    }

    async _messages(sql, params, signal) {
        const res = signal === undefined ? await this.client.query(sql, params)
            : await this.client.waitQuery(sql, params, signal);
        return res ? res.rows.map((r) => new Message(r)) : [];
    }

    // Up to maxMessages, waiting up to maxWait seconds for the first (signal: end the wait).
    async receive({ maxMessages = 1, maxWait = 0, signal = null } = {}) {
        return this._messages(
            `SELECT ${SELECT_LIST} FROM ${this.client.fn('sbq_receive')}($1, $2::int, $3::interval, $4::text)`,
            [this.queue, maxMessages, interval(maxWait), this.receiveMode], signal);
    }

    // Every message as it comes (batchSize at a time, each wait up to maxWait), until
    // signal aborts; the caller settles them.
    async *messages({ maxWait = 5, batchSize = 1, signal = null } = {}) {
        while (!(signal && signal.aborted)) {
            for (const m of await this.receive({ maxMessages: batchSize, maxWait, signal })) yield m;
        }
    }

    async peek({ maxMessages = 1, fromSequenceNumber = null } = {}) {
        return this._messages(
            `SELECT ${SELECT_LIST} FROM ${this.client.fn('sbq_peek')}($1, $2::int, $3::bigint)`,
            [this.queue, maxMessages, fromSequenceNumber == null ? null : String(fromSequenceNumber)]);
    }

    async receiveDeferred(sequenceNumbers) {
        return this._messages(
            `SELECT ${SELECT_LIST} FROM ${this.client.fn('sbq_receive_deferred')}($1, $2::bigint[])`,
            [this.queue, sequenceNumbers.map(String)]);
    }

    // Completes one message or many (all or nothing); how many.
    async complete(messages) {
        const res = await this.client.query(`SELECT ${this.client.fn('sbq_complete')}($1, $2::uuid[]) AS n`,
                                            [this.queue, tokensOf(messages)]);
        return res.rows[0].n;
    }

    // One settlement of one message or many, in one call (many: all or nothing).
    async _settle(fn, messages, extra, types) {
        const sql = `SELECT ${this.client.fn(fn)}($1, $2::uuid[]${types.map((t, i) => `, $${i + 3}::${t}`).join('')}) AS r`;
        const res = await this.client.query(sql, [this.queue, tokensOf(messages), ...extra]);
        return res.rows[0].r;
    }

    // delay (seconds): the messages are not received again before it has passed
    async abandon(messages, propertiesToModify = null, { delay = null } = {}) {
        await this._settle('sbq_abandon', messages, [json(propertiesToModify), interval(delay)],
                           ['jsonb', 'interval']);
    }

    async defer(messages, propertiesToModify = null) {
        await this._settle('sbq_defer', messages, [json(propertiesToModify)], ['jsonb']);
    }

    async deadLetter(messages, { reason = null, errorDescription = null, propertiesToModify = null } = {}) {
        await this._settle('sbq_deadletter', messages, [reason, errorDescription, json(propertiesToModify)],
                           ['text', 'text', 'jsonb']);
    }

    // Renews the lock of one message or many; the new locked_until (a Date; for many, the earliest).
    async renew(messages) {
        return this._settle('sbq_renew', messages, [], []);
    }

    // Settles what it can of messages ('complete', 'abandon', 'defer', 'deadletter' or
    // 'renew') and says for each, in order, what became of it: { lockToken, outcome,
    // lockedUntil }, outcome one of completed, abandoned, deferred, dead_lettered,
    // expired, renewed, lock_lost. A lost lock throws nothing.
    async settle(messages, disposition, { reason = null, errorDescription = null, propertiesToModify = null,
                                          delay = null } = {}) {
        const res = await this.client.query(
            `SELECT lock_token, outcome, locked_until FROM ${this.client.fn('sbq_settle')}` +
            '($1, $2::uuid[], $3::text, $4::text, $5::text, $6::jsonb, $7::interval)',
            [this.queue, tokensOf(messages), disposition, reason, errorDescription, json(propertiesToModify),
             interval(delay)]);
        return res.rows.map((r) => ({ lockToken: r.lock_token, outcome: r.outcome, lockedUntil: r.locked_until }));
    }
}

function json(v) {
    return v == null ? null : JSON.stringify(v);
}

class SessionReceiver extends Receiver {
    constructor(client, queue, sessionId, token, lockedUntil) {
        super(client, queue);
        this.sessionId = sessionId;
        this.token = token;
        this.lockedUntil = lockedUntil;
    }

    async receive({ maxMessages = 1, maxWait = 0, signal = null } = {}) {
        return this._messages(
            `SELECT ${SELECT_LIST} FROM ${this.client.fn('sbq_receive_session')}($1, $2::uuid, $3::int, $4::interval)`,
            [this.queue, this.token, maxMessages, interval(maxWait)], signal);
    }

    async receiveDeferred(sequenceNumbers) {
        return this._messages(
            `SELECT ${SELECT_LIST} FROM ${this.client.fn('sbq_receive_deferred')}($1, $2::bigint[], $3::uuid)`,
            [this.queue, sequenceNumbers.map(String), this.token]);
    }

    // The session's messages (sbq_peek of the queue, page by page, kept to this session).
    async peek({ maxMessages = 1, fromSequenceNumber = null } = {}) {
        const out = [];
        let from = fromSequenceNumber;
        while (out.length < maxMessages) {
            const page = await super.peek({ maxMessages: 5000, fromSequenceNumber: from });
            out.push(...page.filter((m) => m.sessionId === this.sessionId));
            if (page.length < 5000) break;
            from = page[page.length - 1].sequenceNumber + 1n;
        }
        return out.slice(0, maxMessages);
    }

    async renewSession() {
        const res = await this.client.query(`SELECT ${this.client.fn('sbq_renew_session')}($1, $2::uuid) AS u`,
                                            [this.queue, this.token]);
        this.lockedUntil = res.rows[0].u;
        return this.lockedUntil;
    }

    async getState() {
        const res = await this.client.query(`SELECT ${this.client.fn('sbq_get_session_state')}($1, $2::uuid) AS s`,
                                            [this.queue, this.token]);
        return res.rows[0].s;
    }

    async setState(state) {
        await this.client.query(`SELECT ${this.client.fn('sbq_set_session_state')}($1, $2::uuid, $3::bytea)`,
                                [this.queue, this.token, state == null ? null : Buffer.from(state)]);
    }

    async release() {
        await this.client.query(`SELECT ${this.client.fn('sbq_release_session')}($1, $2::uuid)`,
                                [this.queue, this.token]);
    }
}

// Raised by a handler: dead-letter the message with this reason and description.
class DeadLetter extends Error {
    constructor(reason = null, description = null) {
        super(reason || 'dead-lettered by its handler');
        this.reason = reason;
        this.description = description;
    }
}

// Runs handler(message) for each message of queue (a queue's name, or a subscription's
// address: subscriptionAddress(topic, name)), concurrency at a time, each loop on
// a connection of its own; a renewer connection renews the lock of every message in a
// handler when half of it has passed. The handler's result settles the message:
// undefined, true or 'complete' completes it; 'abandon', 'defer', 'deadletter' do
// those; throwing DeadLetter dead-letters it; throwing anything else abandons it
// (and emits 'error'). stop() ends the waiting receives at once, lets the handlers in
// flight finish and settle, then closes the connections.
class Processor extends EventEmitter {
    constructor(config, queue, handler, { concurrency = 1, maxWait = 5, renewLocks = true, schema } = {}) {
        super();
        if (concurrency < 1) throw new RangeError('concurrency must be at least 1');
        this.config = config;
        this.queue = queue;
        this.handler = handler;
        this.concurrency = concurrency;
        this.maxWait = maxWait;
        this.renewLocks = renewLocks;
        this.schema = schema;
        this.settled = { complete: 0, abandon: 0, defer: 0, deadletter: 0, lost: 0, failed: 0 };
        this.renewals = 0;
        this._abort = new AbortController();
        this._held = new Map();      // token -> { until: Date, span: ms }
        this._loops = [];
        this._clients = [];
    }

    // Connects and starts the loops. When a connection fails, it closes the ones it
    // made and rejects (the Processor is then done: make a new one to try again); a
    // stop() while it connects ends it the same way, and it resolves.
    async start() {
        if (!this._starting) this._starting = this._start();
        return this._starting;
    }

    async _start() {
        const signal = this._abort.signal;
        try {
            for (let i = 0; i < this.concurrency && !signal.aborted; i++) {
                this._clients.push(await Client.connect(this.config, { schema: this.schema }));
            }
            if (this.renewLocks && !signal.aborted) {
                this._renewer = await Client.connect(this.config, { schema: this.schema });
                this._renewing = false;
                this._timer = setInterval(() => this._renewDue(), 100);
            }
        } catch (err) {
            this._abort.abort();
            await this._shutdown();
            throw err;
        }
        if (signal.aborted) await this._shutdown();
        else this._loops = this._clients.map((c) => this._loop(c));
        return this;
    }

    async stop() {
        this._abort.abort();
        // a start() in progress sees the abort after its current connect and closes
        // what it made
        if (this._starting) await this._starting.catch(() => {});
        await this._shutdown();
    }

    // After the abort: lets the loops finish, then closes every connection.
    async _shutdown() {
        await Promise.allSettled(this._loops);
        if (this._timer) clearInterval(this._timer);
        this._timer = null;
        while (this._renewing) await new Promise((r) => setTimeout(r, 10));
        const all = [...this._clients, ...(this._renewer ? [this._renewer] : [])];
        this._clients = [];
        this._renewer = null;
        await Promise.allSettled(all.map((c) => c.close()));
    }

    // start(), then resolves when stop() has ended it, at any point (during start()
    // as well); SIGTERM and SIGINT call stop(). Rejects when start() does.
    async run() {
        const onSignal = () => { this.stop(); };
        process.once('SIGTERM', onSignal);
        process.once('SIGINT', onSignal);
        try {
            await this.start();
            const signal = this._abort.signal;
            if (!signal.aborted) {
                await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
            }
            await this.stop();
        } finally {
            process.removeListener('SIGTERM', onSignal);
            process.removeListener('SIGINT', onSignal);
        }
    }

    // a new Client in place of a broken one (null when that failed: try again later)
    async _fresh(old) {
        if (old) await old.close().catch(() => {});
        try {
            return await Client.connect(this.config, { schema: this.schema });
        } catch (err) {
            this._warn(err);
            await new Promise((r) => setTimeout(r, 1000));
            return null;
        }
    }

    async _renewDue() {
        if (this._renewing || !this._renewer) return;
        this._renewing = true;
        try {
            if (this._renewer.broken) {
                const fresh = await this._fresh(this._renewer);
                if (!fresh) return;
                this._renewer = fresh;
            }
            const r = this._renewer.receiver(this.queue);
            const now = Date.now();
            for (const [token, h] of this._held) {
                if (h.until.getTime() - now > h.span / 2) continue;
                try {
                    const until = await r.renew(token);
                    this.renewals++;
                    if (this._held.has(token)) this._held.get(token).until = until;
                } catch (err) {
                    if (err instanceof errors.MessageLockLost) {
                        this._held.delete(token);
                        continue;
                    }
                    this._warn(err);
                    break;
                }
            }
        } finally {
            this._renewing = false;
        }
    }

    async _loop(client) {
        const signal = this._abort.signal;
        const slot = this._clients.indexOf(client);
        while (!signal.aborted) {
            if (client.broken) {
                const fresh = await this._fresh(client);
                if (!fresh) continue;
                client = this._clients[slot] = fresh;
            }
            const receiver = client.receiver(this.queue);
            let msgs;
            try {
                msgs = await receiver.receive({ maxMessages: 1, maxWait: this.maxWait, signal });
            } catch (err) {
                this._warn(err);
                if (!client.broken) await new Promise((r) => setTimeout(r, 1000));
                continue;
            }
            for (const m of msgs) {
                try {
                    await this._handle(receiver, m);
                } catch (err) {
                    // a step of its own failed (not the handler, whose errors _handle
                    // reports): say so, and go on with the next message; this one's
                    // lock expires and it comes again
                    this._report(err, m);
                }
            }
        }
    }

    // emits 'error' (err, msg); a listener that throws gets a 'warning' (the loop
    // must go on)
    _report(err, msg) {
        try {
            this.emit('error', err, msg);
        } catch (e) {
            this._warn(e);
        }
    }

    // emits 'warning' (err); a listener that throws goes no further: it would end
    // a loop on its way back, or reject the renewer's timer
    _warn(err) {
        try { this.emit('warning', err); } catch { /* nowhere left to say it */ }
    }

    async _handle(receiver, msg) {
        if (this.renewLocks) {
            this._held.set(msg.lockToken, { until: msg.lockedUntil, span: msg.lockedUntil.getTime() - Date.now() });
        }
        let outcome = 'complete';
        let error = null;
        try {
            const result = await this.handler(msg);
            if (result === undefined || result === null || result === true || result === 'complete') outcome = 'complete';
            else if (['abandon', 'defer', 'deadletter'].includes(result)) outcome = result;
            else throw new TypeError(`a handler returned ${String(result)}`);
        } catch (err) {
            error = err;
            outcome = err instanceof DeadLetter ? 'deadletter' : 'abandon';
        } finally {
            this._held.delete(msg.lockToken);
        }
        try {
            if (outcome === 'complete') await receiver.complete(msg);
            else if (outcome === 'abandon') await receiver.abandon(msg);
            else if (outcome === 'defer') await receiver.defer(msg);
            else await receiver.deadLetter(msg, { reason: error && error.reason, errorDescription: error && error.description });
            this.settled[outcome]++;
        } catch (err) {
            // its lock expires, and it comes again
            if (err instanceof errors.MessageLockLost) this.settled.lost++;
            else {
                this.settled.failed++;
                this._warn(err);
            }
        }
        if (error && !(error instanceof DeadLetter)) this._report(error, msg);
    }
}

module.exports = {
    Client, Sender, Receiver, SessionReceiver, Message, Processor, DeadLetter,
    MESSAGE_FIELDS, subscriptionAddress, ...errors,
};
