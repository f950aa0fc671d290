// The sbqueue console's page. Everything a message brings (bodies, properties,
// names) reaches the page through textContent or setAttribute, never as HTML.
'use strict';

const REFRESH_MS = 2000;
const TOKEN_HEADER = 'x-sbq-console-token';

const state = {
    config: null,
    token: null,
    rows: new Map(),            // queue -> its <tr>
    history: new Map(),         // queue -> its samples, oldest first
    since: 0,                   // the newest sample's time (ms) the page has
    peek: null,                 // { queue, deadLetters, from, max, messages }
    selected: null,             // the message shown in detail
    view: null,                 // 'text' | 'json' | 'hex'
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
        if (k === 'text') e.textContent = v;
        else if (k === 'class') e.className = v;
        else e.setAttribute(k, v);
    }
    for (const c of children) e.append(c);
    return e;
}

function showError(msg) {
    const e = $('error');
    e.textContent = msg;
    e.hidden = false;
}

function clearError() { $('error').hidden = true; $('error').textContent = ''; }

function showNotice(msg) {
    const e = $('notice');
    e.textContent = msg;
    e.hidden = false;
}

// An error answer of the API as one line: SQLSTATE, message, detail
function describeError(body, status) {
    if (!body || typeof body !== 'object') return `HTTP ${status}`;
    let s = body.sqlstate ? `${body.sqlstate}: ${body.error}` : `${body.error} (HTTP ${status})`;
    if (body.detail) s += ` (${body.detail})`;
    return s;
}

async function api(path, options = {}) {
    const res = await fetch(path, options);
    let body = null;
    try { body = await res.json(); } catch (e) { body = null; }
    if (!res.ok) {
        // a console started again has a new token: this page's is stale
        const stale = body && body.code === 'token' ? ' (the console was restarted: reload the page)' : '';
        const err = new Error(describeError(body, res.status) + stale);
        err.status = res.status;
        err.body = body;
        throw err;
    }
    return body;
}

async function post(path, payload) {
    return api(path, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', [TOKEN_HEADER]: state.token },
        body: JSON.stringify(payload),
    });
}

function fmtTime(v) {
    if (!v) return '';
    const d = new Date(v);
    return isNaN(d) ? String(v) : d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

// --- queue list ---------------------------------------------------------

const COUNT_CELLS = ['active', 'locked', 'deferred', 'scheduled', 'deadLetters'];

function queueRow(q) {
    const tr = el('tr');
    tr.setAttribute('data-queue', q.queue);
    tr.append(el('td', { class: 'name', text: q.queue }));
    for (const c of COUNT_CELLS) tr.append(el('td', { class: `num ${c}` }));
    tr.append(el('td', { class: 'spark' }));
    const peek = el('button', { type: 'button', class: 'peek', text: 'Peek' });
    peek.addEventListener('click', () => openPeek(q.queue, false));
    const dlq = el('button', { type: 'button', class: 'dead-letters', text: 'Dead letters' });
    dlq.addEventListener('click', () => openPeek(q.queue, true));
    tr.append(el('td', { class: 'actions' }, peek, ' ', dlq));
    return tr;
}

const SVG = 'http://www.w3.org/2000/svg';

// Depth (active + locked + deferred + scheduled) and dead letters over the
// samples the server kept, as one inline SVG
function sparkline(history) {
    const w = 160, h = 28, pad = 2;
    const svg = document.createElementNS(SVG, 'svg');
    svg.setAttribute('width', w);
    svg.setAttribute('height', h);
    svg.setAttribute('viewBox', `0 0 ${w} ${h}`);
    svg.setAttribute('class', 'sparkline');
    svg.setAttribute('data-points', history.length);
    const depth = history.map((s) => s[1] + s[2] + s[3] + s[4]);
    const dead = history.map((s) => s[5]);
    const max = Math.max(1, ...depth, ...dead);
    const n = history.length;
    const x = (i) => (n <= 1 ? w - pad : pad + (i * (w - 2 * pad)) / (n - 1));
    const y = (v) => h - pad - (v * (h - 2 * pad)) / max;
    const title = document.createElementNS(SVG, 'title');
    title.textContent = n === 0 ? 'no sample yet'
        : `depth ${depth[n - 1]} and ${dead[n - 1]} dead letters now; ${n} samples, at most ${max}`;
    svg.append(title);
    for (const [cls, values] of [['dead', dead], ['depth', depth]]) {
        if (n === 0) continue;
        if (n === 1) {
            const c = document.createElementNS(SVG, 'circle');
            c.setAttribute('cx', x(0));
            c.setAttribute('cy', y(values[0]));
            c.setAttribute('r', 1.5);
            c.setAttribute('class', cls);
            svg.append(c);
            continue;
        }
        const line = document.createElementNS(SVG, 'polyline');
        line.setAttribute('points', values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(' '));
        line.setAttribute('class', cls);
        svg.append(line);
    }
    return svg;
}

// A row's sparkline is drawn when the row is on the screen, or comes onto it:
// with thousands of queues, drawing every one at each refresh kept the page
// busy for half a second in every two
const visibleRows = new Set();
let rowObserver = null;

function drawSpark(tr) {
    tr.sbqSparkDirty = false;
    tr.querySelector('td.spark').replaceChildren(sparkline(state.history.get(tr.getAttribute('data-queue')) || []));
}

function observeRow(tr) {
    if (!rowObserver && typeof IntersectionObserver === 'function') {
        rowObserver = new IntersectionObserver((entries) => {
            for (const e of entries) {
                if (e.isIntersecting) {
                    visibleRows.add(e.target);
                    if (e.target.sbqSparkDirty) drawSpark(e.target);
                } else {
                    visibleRows.delete(e.target);
                }
            }
        }, { rootMargin: '300px 0px' });
    }
    if (rowObserver) rowObserver.observe(tr);
    else visibleRows.add(tr);
}

function setText(td, text) {
    if (td.textContent !== text) td.textContent = text;
}

// The name filter: a row shows when its name holds the text, in any letter case
function applyFilter() {
    const f = $('queue-filter').value.trim().toLowerCase();
    let shown = 0;
    for (const [name, tr] of state.rows) {
        const hide = f !== '' && !name.toLowerCase().includes(f);
        if (tr.hidden !== hide) tr.hidden = hide;
        if (!hide) shown++;
    }
    $('queues-shown').textContent = f === '' ? '' : `${shown} of ${state.rows.size} shown`;
}

function renderQueues(data) {
    const tbody = $('queues').tBodies[0];
    const seen = new Set(data.queues.map((q) => q.queue));
    for (const [name, tr] of state.rows) {
        if (!seen.has(name)) {
            tr.remove();
            if (rowObserver) rowObserver.unobserve(tr);
            visibleRows.delete(tr);
            state.rows.delete(name);
            state.history.delete(name);
        }
    }
    let newest = 0;
    let added = false;
    // the server's order; a row is moved only when it is out of place, as
    // moving all of them made the browser lay out the whole table again
    let next = tbody.firstChild;
    for (const q of data.queues) {
        let tr = state.rows.get(q.queue);
        if (!tr) {
            tr = queueRow(q);
            state.rows.set(q.queue, tr);
            tr.sbqSparkDirty = true;
            added = true;
        }
        if (tr === next) next = tr.nextSibling;
        else tbody.insertBefore(tr, next);
        for (const c of COUNT_CELLS) setText(tr.querySelector(`td.${c}`), String(q[c]));
        tr.querySelector('td.deadLetters').classList.toggle('nonzero', q.deadLetters > 0);
        // the server sends the samples since the last it sent: added to those kept here
        if (q.history.length > 0 || !state.history.has(q.queue)) {
            const history = (state.history.get(q.queue) || []).concat(q.history).slice(-data.samplesKept);
            state.history.set(q.queue, history);
            for (const s of q.history) if (s[0] > newest) newest = s[0];
            tr.sbqSparkDirty = true;
        }
    }
    for (const tr of state.rows.values()) {
        if (tr.sbqSparkDirty && !tr.sbqObserved) { tr.sbqObserved = true; observeRow(tr); }
        else if (tr.sbqSparkDirty && visibleRows.has(tr)) drawSpark(tr);
    }
    state.since = Math.max(state.since, newest);
    if (added) applyFilter();
    $('queues-empty').hidden = data.queues.length > 0;
    const tt = $('topics').tBodies[0];
    tt.replaceChildren(...data.topics.map((t) => {
        const tr = el('tr', {}, el('td', { class: 'name', text: t.topic }),
            el('td', { class: 'num subscriptions', text: String(t.subscriptions) }),
            el('td', { class: 'num sent', text: String(t.sent) }),
            el('td', { class: 'num dropped', text: String(t.dropped) }));
        tr.setAttribute('data-topic', t.topic);
        return tr;
    }));
    $('topics-section').hidden = data.topics.length === 0;
    $('queues-updated').textContent = `updated ${fmtTime(data.now)}, a sample every ${data.sampleSeconds} s` +
        (data.samplerError ? ` (last sample failed: ${data.samplerError.sqlstate || ''} ${data.samplerError.error})` : '');
}

async function refreshQueues() {
    try {
        renderQueues(await api(`/api/queues?since=${state.since}`));
        // the list is back: its earlier error is stale
        if ($('error').textContent.startsWith('queue list: ')) clearError();
    } catch (e) {
        showError(`queue list: ${e.message}`);
    }
}

// --- peek ---------------------------------------------------------------

const DL_COLUMNS = [['dead_letter_reason', 'reason'], ['dead_letter_error_description', 'description'],
    ['dead_letter_source', 'source']];

function openPeek(queue, deadLetters) {
    clearError();
    $('notice').hidden = true;
    state.peek = { queue, deadLetters, from: null, max: Number($('peek-max').value), messages: [] };
    $('peek-from').value = '';
    $('peek-section').hidden = false;
    $('peek-title').textContent = deadLetters ? `Dead letters of ${queue}` : `Messages of ${queue}`;
    $('peek-section').setAttribute('data-entity', deadLetters ? `${queue}/$deadletterqueue` : queue);
    renderDeadLetterActions();
    // below a long list of queues it would open out of sight
    $('peek-section').scrollIntoView({ block: 'start' });
    loadPeek();
}

function renderDeadLetterActions() {
    const box = $('dl-actions');
    box.replaceChildren();
    // read-only: no change buttons at all
    if (!state.peek || !state.peek.deadLetters || !state.config.allowChanges) { box.hidden = true; return; }
    const sel = el('button', { type: 'button', id: 'dl-resubmit-selected', text: 'Resubmit selected' });
    sel.addEventListener('click', resubmitSelected);
    const all = el('button', { type: 'button', id: 'dl-resubmit-all', text: 'Resubmit all' });
    all.addEventListener('click', resubmitAll);
    const purge = el('button', { type: 'button', id: 'dl-purge', class: 'danger', text: 'Purge dead letters' });
    purge.addEventListener('click', purgeDeadLetters);
    box.append(sel, ' ', all, ' ', purge);
    box.hidden = false;
}

async function loadPeek() {
    const p = state.peek;
    if (!p) return;
    // only the latest request's answer is shown: an earlier one (another page
    // size or start) may come back after it
    const gen = (p.gen = (p.gen || 0) + 1);
    const params = new URLSearchParams({ queue: p.queue, max: String(p.max) });
    if (p.deadLetters) params.set('deadletters', '1');
    if (p.from !== null) params.set('from', p.from);
    try {
        const data = await api(`/api/peek?${params}`);
        if (state.peek !== p || p.gen !== gen) return;
        p.messages = data.messages;
        renderMessages();
    } catch (e) {
        if (state.peek !== p || p.gen !== gen) return;
        p.messages = [];
        renderMessages();
        showError(`peek ${p.deadLetters ? `${p.queue}/$deadletterqueue` : p.queue}: ${e.message}`);
    }
}

function renderMessages() {
    const p = state.peek;
    const table = $('messages');
    const changes = p.deadLetters && state.config.allowChanges;
    const cols = ['sequence', 'message id', 'state', 'enqueued', 'deliveries', 'subject', 'content type', 'size'];
    if (p.deadLetters) cols.push(...DL_COLUMNS.map((c) => c[1]));
    const head = el('tr');
    if (changes) {
        const all = el('input', { type: 'checkbox', id: 'dl-select-all', title: 'select all on this page' });
        all.addEventListener('change', () => {
            for (const b of table.querySelectorAll('tbody input.select')) b.checked = all.checked;
        });
        head.append(el('th', {}, all));
    }
    for (const c of cols) head.append(el('th', { text: c }));
    table.tHead.replaceChildren(head);
    const rows = p.messages.map((m) => {
        const tr = el('tr', { class: 'message' });
        tr.setAttribute('data-seq', m.sequence_number);
        if (changes) {
            const box = el('input', { type: 'checkbox', class: 'select' });
            box.setAttribute('data-seq', m.sequence_number);
            box.addEventListener('click', (ev) => ev.stopPropagation());
            tr.append(el('td', {}, box));
        }
        const cells = [m.sequence_number, m.message_id, m.state, fmtTime(m.enqueued_time), m.delivery_count,
            m.subject, m.content_type, m.bodySize === null ? '' : `${m.bodySize} B`];
        if (p.deadLetters) cells.push(...DL_COLUMNS.map((c) => m[c[0]]));
        const names = ['seq', 'message-id', 'state', 'enqueued', 'deliveries', 'subject', 'content-type', 'size',
            'reason', 'description', 'source'];
        cells.forEach((v, i) => tr.append(el('td', { class: names[i], text: v === null || v === undefined ? '' : String(v) })));
        tr.addEventListener('click', () => showMessage(m));
        return tr;
    });
    table.tBodies[0].replaceChildren(...rows);
    $('messages-empty').hidden = p.messages.length > 0;
    $('peek-next').disabled = p.messages.length < p.max;
    if (state.selected && !p.messages.some((m) => m.sequence_number === state.selected.sequence_number)) {
        $('message-detail').hidden = true;
        state.selected = null;
    }
}

function nextPage() {
    const p = state.peek;
    if (!p || p.messages.length === 0) return;
    const last = BigInt(p.messages[p.messages.length - 1].sequence_number);
    p.from = String(last + 1n);
    $('peek-from').value = p.from;
    loadPeek();
}

// --- one message ----------------------------------------------------------

function bodyBytes(m) {
    if (m.body === null) return null;
    const bin = atob(m.body);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
}

function defaultView(m, bytes) {
    const ct = (m.content_type || '').toLowerCase();
    if (ct.includes('json')) return 'json';
    if (ct.startsWith('text/')) return 'text';
    if (bytes === null) return 'text';
    try {
        const s = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
        // control characters other than tab, newline, return: binary
        return /[\u0000-\u0008\u000e-\u001f\u007f]/.test(s) ? 'hex' : 'text';
    } catch (e) {
        return 'hex';
    }
}

function hexDump(bytes) {
    const lines = [];
    for (let off = 0; off < bytes.length; off += 16) {
        const chunk = bytes.subarray(off, off + 16);
        const hex = Array.from(chunk, (b) => b.toString(16).padStart(2, '0'));
        const left = hex.slice(0, 8).join(' ');
        const right = hex.slice(8).join(' ');
        const ascii = Array.from(chunk, (b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : '.')).join('');
        lines.push(`${off.toString(16).padStart(8, '0')}  ${left.padEnd(23)}  ${right.padEnd(23)}  |${ascii}|`);
    }
    return lines.join('\n');
}

function showMessage(m) {
    state.selected = m;
    for (const tr of $('messages').tBodies[0].rows) {
        tr.classList.toggle('selected', tr.getAttribute('data-seq') === m.sequence_number);
    }
    $('detail-seq').textContent = m.sequence_number;
    const props = [];
    for (const [k, v] of Object.entries(m)) {
        if (k === 'body' || k === 'bodyTruncated' || k === 'bodySize') continue;
        if (!state.peek.deadLetters && k.startsWith('dead_letter_')) continue;
        // the properties and times as the server wrote them: every digit, every microsecond
        const text = v === null || v === undefined ? '' : String(v);
        const tr = el('tr', {}, el('th', { text: k }), el('td', { text }));
        tr.setAttribute('data-prop', k);
        props.push(tr);
    }
    $('detail-props').tBodies[0].replaceChildren(...props);
    const bytes = bodyBytes(m);
    $('body-size').textContent = m.bodySize === null ? 'no body' : `${m.bodySize} bytes`;
    const cut = $('body-cut');
    cut.hidden = !m.bodyTruncated;
    cut.textContent = m.bodyTruncated
        ? `The body is cut: ${m.bodySize} bytes, the first ${bytes.length} shown.` : '';
    state.view = defaultView(m, bytes);
    $('message-detail').hidden = false;
    renderBody();
}

// JSON text laid out as JSON.stringify(value, null, 2) lays it out, but with every
// number and string as written: a value parsed and written again loses what a double
// cannot hold (12345678901234567890 came back as 12345678901234567000, 1e400 as null).
// text must be JSON.
function indentJson(text) {
    const space = ' \t\n\r';
    const ends = space + ',:{}[]"';     // where a number, true, false or null ends
    const pad = (depth) => '\n' + '  '.repeat(depth);
    let out = '';
    let depth = 0;
    let i = 0;
    while (i < text.length) {
        const c = text[i];
        if (space.includes(c)) {
            i++;
        } else if (c === '"') {
            let j = i + 1;
            while (text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
            out += text.slice(i, j + 1);
            i = j + 1;
        } else if (c === '{' || c === '[') {
            const close = c === '{' ? '}' : ']';
            let j = i + 1;
            while (j < text.length && space.includes(text[j])) j++;
            if (text[j] === close) {
                out += c + close;
                i = j + 1;
            } else {
                depth++;
                out += c + pad(depth);
                i++;
            }
        } else if (c === '}' || c === ']') {
            depth--;
            out += pad(depth) + c;
            i++;
        } else if (c === ',') {
            out += ',' + pad(depth);
            i++;
        } else if (c === ':') {
            out += ': ';
            i++;
        } else {
            let j = i;
            while (j < text.length && !ends.includes(text[j])) j++;
            out += text.slice(i, j);
            i = j;
        }
    }
    return out;
}

function renderBody() {
    const m = state.selected;
    if (!m) return;
    const bytes = bodyBytes(m) || new Uint8Array(0);
    const note = $('body-note');
    note.hidden = true;
    note.textContent = '';
    let text;
    if (state.view === 'hex') {
        text = hexDump(bytes);
    } else {
        text = new TextDecoder('utf-8').decode(bytes);
        if (state.view === 'json') {
            try {
                JSON.parse(text);        // whether it is JSON; its values are not used
                text = indentJson(text);
            } catch (e) {
                note.textContent = `Not JSON${m.bodyTruncated ? ' (the body is cut)' : ''}: ${e.message}. Shown as text.`;
                note.hidden = false;
            }
        }
    }
    const pre = $('body');
    pre.textContent = text;          // never as HTML
    pre.setAttribute('data-view', state.view);
    for (const b of $('body-views').querySelectorAll('button')) {
        b.classList.toggle('active', b.getAttribute('data-view') === state.view);
    }
}

// --- dead letters: resubmit, purge ---------------------------------------

async function afterChange(msg) {
    await Promise.all([refreshQueues(), loadPeek()]);
    showNotice(msg);
}

async function resubmitSelected() {
    const seqs = Array.from($('messages').querySelectorAll('tbody input.select:checked'), (b) => b.getAttribute('data-seq'));
    if (seqs.length === 0) { showError('select the dead letters to resubmit'); return; }
    clearError();
    const queue = state.peek.queue;
    try {
        const r = await post('/api/resubmit', { queue, sequenceNumbers: seqs });
        await afterChange(`Resubmitted ${r.resubmitted} of ${seqs.length} dead letters to ${queue}.`);
    } catch (e) {
        showError(`resubmit: ${e.message}`);
        // a selection of dead letters someone else resubmitted or purged: show
        // what is left, or the same error comes back at every try
        loadPeek();
    }
}

async function resubmitAll() {
    const queue = state.peek.queue;
    if (!confirm(`Resubmit every dead letter of ${queue} to the queue?`)) return;
    clearError();
    try {
        const r = await post('/api/resubmit', { queue, sequenceNumbers: null });
        await afterChange(`Resubmitted ${r.resubmitted} dead letters to ${queue}.`);
    } catch (e) {
        showError(`resubmit: ${e.message}`);
    }
}

async function purgeDeadLetters() {
    const queue = state.peek.queue;
    if (!confirm(`Delete every dead letter of ${queue}? This cannot be undone.`)) return;
    clearError();
    try {
        const r = await post('/api/purge-dead-letters', { queue });
        await afterChange(`Purged ${r.purged} dead letters of ${queue}.`);
    } catch (e) {
        showError(`purge: ${e.message}`);
    }
}

// --- start ----------------------------------------------------------------

async function start() {
    try {
        const res = await fetch('/api/config');
        state.config = await res.json();
        if (!res.ok) throw new Error(describeError(state.config, res.status));
        state.token = res.headers.get(TOKEN_HEADER);
    } catch (e) {
        showError(`cannot reach the console: ${e.message}`);
        return;
    }
    const c = state.config;
    $('conn').textContent = `${c.database} as ${c.role} (sbqueue ${c.version})`;
    $('mode').textContent = c.allowChanges ? 'changes allowed' : 'read-only';
    $('mode').classList.add(c.allowChanges ? 'changes' : 'readonly');
    document.body.setAttribute('data-mode', c.allowChanges ? 'changes' : 'read-only');
    $('peek-go').addEventListener('click', () => {
        const v = $('peek-from').value.trim();
        if (v !== '' && !/^\d{1,19}$/.test(v)) { showError('from: a sequence number'); return; }
        clearError();
        state.peek.from = v === '' ? null : v;
        state.peek.max = Number($('peek-max').value);
        loadPeek();
    });
    $('peek-first').addEventListener('click', () => {
        state.peek.from = null;
        $('peek-from').value = '';
        loadPeek();
    });
    $('peek-next').addEventListener('click', nextPage);
    $('peek-max').addEventListener('change', () => {
        if (!state.peek) return;
        state.peek.max = Number($('peek-max').value);
        loadPeek();
    });
    $('peek-close').addEventListener('click', () => {
        state.peek = null;
        state.selected = null;
        $('peek-section').hidden = true;
        $('message-detail').hidden = true;
    });
    for (const b of $('body-views').querySelectorAll('button')) {
        b.addEventListener('click', () => { state.view = b.getAttribute('data-view'); renderBody(); });
    }
    $('queue-filter').addEventListener('input', applyFilter);
    await refreshQueues();
    // the next refresh is due REFRESH_MS after the last one ended: on a slow
    // database they do not pile up, nor come back out of order
    const tick = async () => {
        await refreshQueues();
        setTimeout(tick, REFRESH_MS);
    };
    setTimeout(tick, REFRESH_MS);
    document.body.setAttribute('data-ready', '1');
}

document.addEventListener('DOMContentLoaded', start);
