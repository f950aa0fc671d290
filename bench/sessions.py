#!/usr/bin/python3
"""bench/sessions.py: the measuring half of bench/sessions.sh (see there).

    sessions.py [--rounds R] [--sessions S] [--per-session M] [--clients C]
                [--big N] [--held H] [--accepts A] [--command TEXT] [--conditions TEXT]

Works on one server that already listens (PGHOST, PGPORT, PGUSER from the
environment; the databases postgres, b10 and b100k exist with sbqueue and
pg_stat_statements and the queues plain, sess, batchplain, batchsess (postgres)
and sq (b10, b100k), see sessions.sh) and prints a Markdown report.

Debian's python3 with python3-psycopg (run it with /usr/bin/python3).
"""
import argparse
import math
import multiprocessing
import os
import statistics
import sys
import time

import psycopg

BODY = ('bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz '
        'ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end')
BATCH = 10

PLAIN_RECEIVE = 'SELECT sequence_number, lock_token, body FROM sbq_receive(%s, %s)'
COMPLETE = 'SELECT sbq_complete(%s, %s::uuid[])'
ACCEPT = 'SELECT session_id, session_token FROM sbq_accept_session(%s)'
SESSION_RECEIVE = ('SELECT sequence_number, lock_token, body '
                   'FROM sbq_receive_session(%s, %s, %s)')
RELEASE = 'SELECT sbq_release_session(%s, %s)'
# the fused client: the next session and its first batch in one call; then
# the completion of a batch with the next batch in one call, which releases
# the session when that batch is empty (so a session of 10 takes two calls).
# Their rows are the plain receive's (sequence number, lock token, body), and
# the session token comes once, in a row of its own.
FUSED_ACCEPT = ('WITH a AS MATERIALIZED (SELECT session_token FROM sbq_accept_session(%s))'
                ' SELECT m.sequence_number, m.lock_token, m.body, NULL::uuid FROM a,'
                '        LATERAL sbq_receive_session(%s, a.session_token, %s) m'
                ' UNION ALL SELECT NULL, NULL, NULL, a.session_token FROM a')
FUSED_NEXT = ('WITH c AS MATERIALIZED (SELECT sbq_complete(%(q)s, %(toks)s::uuid[]) AS n),'
              ' r AS MATERIALIZED (SELECT m.sequence_number, m.lock_token, m.body FROM c,'
              '        LATERAL sbq_receive_session(%(q)s, %(tok)s, %(n)s) m),'
              ' x AS MATERIALIZED (SELECT sbq_release_session(%(q)s, %(tok)s) AS released'
              '        WHERE NOT EXISTS (SELECT FROM r))'
              ' SELECT r.sequence_number, r.lock_token, r.body, (SELECT count(*) FROM x)'
              '   FROM (SELECT 1) one LEFT JOIN r ON true')


def log(msg):
    print('sessions: %s %s' % (time.strftime('%H:%M:%S'), msg), file=sys.stderr, flush=True)


def connect(db='postgres', track_all=False, sync='on'):
    opts = []
    if track_all:
        opts.append('-c pg_stat_statements.track=all')
    if sync != 'on':
        opts.append('-c synchronous_commit=%s' % sync)
    kw = {'dbname': db, 'autocommit': True}
    if opts:
        kw['options'] = ' '.join(opts)
    conn = psycopg.connect(**kw)
    conn.prepare_threshold = 0          # server-side prepared, like pgbench -M prepared
    return conn


def one(conn, sql, params=None):
    row = conn.execute(sql, params).fetchone()
    return row[0] if row else None


def lsn(conn):
    return int(one(conn, "SELECT pg_current_wal_lsn() - '0/0'"))


def wal_syncs(conn):
    return int(one(conn, 'SELECT wal_sync FROM pg_stat_wal'))


def lsn_text(conn):
    return one(conn, 'SELECT pg_current_wal_lsn()::text')


def wal_between(conn, start, end):
    """(all bytes, full-page image bytes) of the WAL from start to end (pg_walinspect),
    once end has been flushed (by the WAL writer after an asynchronous commit)."""
    for _ in range(200):
        if one(conn, 'SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn', (end,)):
            break
        time.sleep(0.02)
    gap = one(conn, 'SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)', (end, start))
    if gap < 1024:
        return max(int(gap), 0), 0  # no record, or a page header at most
    try:
        row = conn.execute('SELECT sum(combined_size), sum(fpi_size)'
                           '  FROM pg_get_wal_stats(%s::pg_lsn, %s::pg_lsn)', (start, end)).fetchone()
    except psycopg.errors.InternalError:
        return 0, 0                 # no whole record in the range
    return int(row[0] or 0), int(row[1] or 0)


def clients_gone(conn, db):
    """Waits until the clients' backends have exited (and so flushed their statistics)."""
    for _ in range(100):
        if one(conn, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
                     " AND datname = %s AND pid <> pg_backend_pid()", (db,)) == 0:
            break
        time.sleep(0.05)


def pct(values, p):
    """Nearest rank."""
    v = sorted(values)
    return v[max(0, math.ceil(p * len(v)) - 1)]


def fmt(x):
    return '{:,.0f}'.format(x)


def short(q, n=110):
    q = q.replace('|', '\\|')
    return q if len(q) <= n else q[:n - 1] + '…'


# ------------------------------------------------------------ A: throughput

def worker(mode, queue, sync, track_all, barrier, out):
    """One client: drains the queue in its mode, reports what it did."""
    calls = {}

    def call(kind, sql, params):
        t = time.monotonic()
        rows = conn.execute(sql, params).fetchall()
        if kind == 'receive' and not rows:
            kind = 'receive (nothing left)'
        c = calls.setdefault(kind, [0, 0.0])
        c[0] += 1
        c[1] += time.monotonic() - t
        return rows

    try:
        conn = connect('postgres', track_all, sync)
        done = 0
        sessions = 0
        barrier.wait()
        cpu0 = time.process_time()
        start = time.monotonic()
        if mode == 'plain':
            while True:
                rows = call('receive', PLAIN_RECEIVE, (queue, BATCH))
                if not rows:
                    break
                call('complete', COMPLETE, (queue, [r[1] for r in rows]))
                done += len(rows)
        elif mode == 'fused':
            while True:
                rows = call('accept + receive', FUSED_ACCEPT, (queue, queue, BATCH))
                if not rows:
                    break
                token = [r[3] for r in rows if r[3] is not None][0]
                toks = [r[1] for r in rows if r[1] is not None]
                sessions += 1
                while True:
                    rows = call('complete + receive (+ release)', FUSED_NEXT,
                                {'q': queue, 'toks': toks, 'tok': token, 'n': BATCH})
                    done += len(toks)
                    toks = [r[1] for r in rows if r[1] is not None]
                    if rows[0][3] == 1:
                        break
        else:
            while True:
                acc = call('accept', ACCEPT, (queue,))
                if not acc:
                    break
                token = acc[0][1]
                sessions += 1
                while True:
                    rows = call('receive', SESSION_RECEIVE, (queue, token, BATCH))
                    if rows:
                        call('complete', COMPLETE, (queue, [r[1] for r in rows]))
                        done += len(rows)
                    if len(rows) < BATCH:
                        break
                call('release', RELEASE, (queue, token))
        end = time.monotonic()
        out.put({'start': start, 'end': end, 'done': done, 'sessions': sessions,
                 'cpu': time.process_time() - cpu0, 'calls': calls})
        conn.close()
    except Exception as e:      # noqa: BLE001 - reported by the parent
        out.put({'error': '%s: %s' % (type(e).__name__, e)})
        try:
            barrier.abort()
        except Exception:       # noqa: BLE001
            pass


def fill_a(conn, mode, queue, sessions, per_session):
    """The messages of one A run (not timed), then VACUUM ANALYZE and a checkpoint."""
    if mode == 'plain':
        conn.execute("SELECT count(sbq_send(%s, %s::text)) FROM generate_series(1, %s)",
                     (queue, BODY, sessions * per_session))
    else:
        # interleaved, as sessions' messages arrive: round r sends one to every session
        conn.execute("SELECT count(sbq_send(%s, %s::text, session_id => 's' || lpad(i::text, 6, '0')))"
                     "  FROM (SELECT i FROM generate_series(1, %s) r, generate_series(1, %s) i"
                     "        ORDER BY r, i) x", (queue, BODY, per_session, sessions))
    for t in ('sbq.messages', 'sbq.sessions', 'sbq.queue_counters'):
        conn.execute('VACUUM ANALYZE ' + t)
    conn.execute('CHECKPOINT')


def left_over(conn, queue):
    qid = one(conn, 'SELECT queue_id FROM sbq.queues WHERE name = %s', (queue,))
    return (one(conn, 'SELECT count(*) FROM sbq.messages WHERE queue_id = %s', (qid,)),
            one(conn, 'SELECT count(*) FROM sbq.sessions WHERE queue_id = %s', (qid,)))


def run_a(conn, mode, sync, a, track_all=False, per_session=None):
    queue = 'plain' if mode == 'plain' else 'sess'
    total = a.sessions * a.per_session
    per_session = per_session or a.per_session
    fill_a(conn, mode, queue, total // per_session, per_session)
    ctx = multiprocessing.get_context('fork')
    barrier = ctx.Barrier(a.clients + 1)
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(mode, queue, sync, track_all, barrier, out))
             for _ in range(a.clients)]
    for p in procs:
        p.start()
    w0, s0, t0 = lsn(conn), wal_syncs(conn), lsn_text(conn)
    barrier.wait(timeout=60)
    res = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    w1, t1 = lsn(conn), lsn_text(conn)
    clients_gone(conn, 'postgres')
    s1 = wal_syncs(conn)
    _, fpi = wal_between(conn, t0, t1)
    errors = [r['error'] for r in res if 'error' in r]
    if errors:
        raise RuntimeError('A %s: %s' % (mode, '; '.join(errors)))
    elapsed = max(r['end'] for r in res) - min(r['start'] for r in res)
    done = sum(r['done'] for r in res)
    msgs, sess = left_over(conn, queue)
    calls = {}
    for r in res:
        for k, (n, s) in r['calls'].items():
            c = calls.setdefault(k, [0, 0.0])
            c[0] += n
            c[1] += s
    problem = None
    if done != total or msgs != 0 or sess != 0:
        problem = ('%s: %d of %d messages completed, %d messages and %d session rows left'
                   % (mode, done, total, msgs, sess))
    return {'mode': mode, 'sync': sync, 'elapsed': elapsed, 'done': done, 'rate': done / elapsed,
            'wal': (w1 - w0) / max(done, 1), 'syncs': (s1 - s0) / max(done, 1),
            'fpi': fpi / max(done, 1),
            'cpu': sum(r['cpu'] for r in res), 'sessions': sum(r['sessions'] for r in res),
            'calls': calls, 'problem': problem, 'per_client': [r['done'] for r in res]}


def stat_statements(conn, limit=14):
    return conn.execute(
        "SELECT toplevel, calls, total_exec_time, mean_exec_time, shared_blks_hit + shared_blks_read,"
        "       wal_bytes, regexp_replace(query, '\\s+', ' ', 'g')"
        "  FROM pg_stat_statements"
        " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
        "   AND query !~* 'pg_stat_statements|pg_current_wal_lsn|pg_stat_wal'"
        " ORDER BY total_exec_time DESC LIMIT %s", (limit,)).fetchall()


# --------------------------------------------------------- B: accept-next

# a session row whose lock holds: in shared memory (preloaded, 0.8 on), or in the row
HELD = ("(sbq.session_until(session_key) > now()"
        " OR (session_token IS NOT NULL AND locked_until > now()))")

def hold(c, big, held):
    """Accepts by name every session but each (big / (big - held))th, in one transaction."""
    every = big // (big - held)      # 100: s000100, s000200, ... stay free
    t = time.monotonic()
    n = one(c, "SELECT count(*) FROM generate_series(1, %s) i,"
               " LATERAL sbq_accept_session('sq', 's' || lpad(i::text, 6, '0')) a"
               " WHERE i %% %s <> 0", (big, every))
    return n, time.monotonic() - t


def send_b(c, n):
    t = time.monotonic()
    c.execute("SELECT count(sbq_send('sq', %s::text, session_id => 's' || lpad(i::text, 6, '0')))"
              "  FROM generate_series(1, %s) i", (BODY, n))
    return time.monotonic() - t


def cycle3(conn, n, lat):
    """n x (accept next, receive_session 10, release): the latencies into lat."""
    for _ in range(n):
        t0 = time.monotonic()
        row = conn.execute(ACCEPT, ('sq',)).fetchone()
        t1 = time.monotonic()
        conn.execute(SESSION_RECEIVE, ('sq', row[1], BATCH)).fetchall()
        t2 = time.monotonic()
        conn.execute(RELEASE, ('sq', row[1])).fetchone()
        t3 = time.monotonic()
        lat['accept'].append((t1 - t0) * 1000)
        lat['receive'].append((t2 - t1) * 1000)
        lat['release'].append((t3 - t2) * 1000)


def accept_release(conn, n, samples, wal_samples):
    """n x (accept next, release); latencies into samples, WAL per call into wal_samples
    (pg_current_wal_lsn() read before and after each call, outside the timing)."""
    for _ in range(n):
        w0 = lsn(conn)
        t0 = time.monotonic()
        row = conn.execute(ACCEPT, ('sq',)).fetchone()
        t1 = time.monotonic()
        if row is None:
            raise RuntimeError('accept-next found no session')
        w1 = lsn(conn)
        t2 = time.monotonic()
        conn.execute(RELEASE, ('sq', row[1])).fetchone()
        t3 = time.monotonic()
        w2 = lsn(conn)
        samples['accept'].append((t1 - t0) * 1000)
        samples['release'].append((t3 - t2) * 1000)
        wal_samples['accept'].append(w1 - w0)
        wal_samples['release'].append(w2 - w1)


def empty():
    return {'accept': [], 'receive': [], 'release': []}


def run_b(a):
    info = {}
    with connect('b10') as c:
        send_b(c, 10)
        c.execute('VACUUM ANALYZE sbq.sessions')
        c.execute('VACUUM ANALYZE sbq.messages')
    c = connect('b100k')
    info['send_s'] = send_b(c, a.big)
    # statistics taken while nothing is held, kept until the stale block has run
    c.execute('ALTER TABLE sbq.sessions SET (autovacuum_enabled = off)')
    c.execute('VACUUM ANALYZE sbq.sessions')
    c.execute('VACUUM ANALYZE sbq.messages')
    info['held'], info['hold_s'] = hold(c, a.big, a.held)
    held_at = time.monotonic()
    info['counts'] = c.execute(
        "SELECT count(*), count(*) FILTER (WHERE " + HELD + "),"
        "       count(*) FILTER (WHERE ready_seq IS NOT NULL) FROM sbq.sessions").fetchone()
    log('B: %s sends in %.1f s, %s held in %.1f s; sessions / held / ready: %s'
        % (fmt(a.big), info['send_s'], fmt(info['held']), info['hold_s'], info['counts']))
    stale = empty()
    with connect('b100k') as s:
        cycle3(s, 10, empty())
        cycle3(s, 100, stale)
    c.execute('ALTER TABLE sbq.sessions RESET (autovacuum_enabled)')
    c.execute('VACUUM ANALYZE sbq.sessions')
    c.execute('VACUUM ANALYZE sbq.messages')
    # no autovacuum while the accepts are timed (everything was just vacuumed): its WAL
    # would count in the WAL per call, which is read server-wide
    c.execute('ALTER SYSTEM SET autovacuum = off')
    c.execute('SELECT pg_reload_conf()')
    for _ in range(600):
        if one(c, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'") == 0:
            break
        time.sleep(0.1)
    c.execute('CHECKPOINT')
    c.close()
    log('B: timed accepts')

    conns = {db: connect(db) for db in ('b10', 'b100k')}
    lat = {db: {'accept': [], 'release': []} for db in conns}
    wal = {db: {'accept': [], 'release': []} for db in conns}
    for db, conn in conns.items():              # warm up: plans made, caches filled
        accept_release(conn, 50, {'accept': [], 'release': []}, {'accept': [], 'release': []})
    block = 100
    block_wal = {db: [0, 0, 0] for db in conns}
    for b in range(max(1, a.accepts // block)):
        for db in (('b10', 'b100k') if b % 2 == 0 else ('b100k', 'b10')):
            t0 = lsn_text(conns[db])
            accept_release(conns[db], block, lat[db], wal[db])
            total, fpi = wal_between(conns[db], t0, lsn_text(conns[db]))
            block_wal[db][0] += total
            block_wal[db][1] += fpi
            block_wal[db][2] += block
    held_age = time.monotonic() - held_at
    # the same three calls as the stale block, now with fresh statistics
    fresh_stats = empty()
    cycle3(conns['b100k'], 100, fresh_stats)
    # fresh accepts: the next free session each time, none released until the end
    fresh, fresh_wal, tokens = [], [], []
    conn = conns['b100k']
    f0 = lsn_text(conn)
    for _ in range(min(a.accepts, a.big - a.held)):
        w0 = lsn(conn)
        t0 = time.monotonic()
        row = conn.execute(ACCEPT, ('sq',)).fetchone()
        fresh.append((time.monotonic() - t0) * 1000)
        fresh_wal.append(lsn(conn) - w0)
        if row is None:
            raise RuntimeError('fresh accept found no session')
        tokens.append(row[1])
    info['fresh_wal_fpi'] = wal_between(conn, f0, lsn_text(conn))
    for t in tokens:
        conn.execute(RELEASE, ('sq', t))
    still_held = one(conn, "SELECT count(*) FROM sbq.sessions WHERE " + HELD)
    conn.execute('ALTER SYSTEM RESET autovacuum')
    conn.execute('SELECT pg_reload_conf()')
    for conn in conns.values():
        conn.close()
    info.update({'lat': lat, 'wal': wal, 'block_wal': block_wal, 'fresh': fresh,
                 'fresh_wal': fresh_wal, 'held_age': held_age, 'still_held': still_held,
                 'stale': stale, 'fresh_stats': fresh_stats})
    return info


def diag_b(n=100):
    """pg_stat_statements (track = all) over n accept+release per database, and the
    plans of accept-next's statements in b100k."""
    out = {}
    for db in ('b10', 'b100k'):
        with connect(db) as c:
            c.execute('SELECT pg_stat_statements_reset()')
        with connect(db, track_all=True) as c:
            accept_release(c, n, {'accept': [], 'release': []}, {'accept': [], 'release': []})
        with connect(db) as c:
            out[db] = stat_statements(c, 30)
    plans = {}
    with connect('b100k') as c:
        qid = one(c, "SELECT queue_id FROM sbq.queues WHERE name = 'sq'")
        stmts = {
            'expired sessions (accept-next runs it first)':
                "SELECT s.session_key FROM sbq.sessions s WHERE s.queue_id = %d"
                " AND s.session_token IS NOT NULL AND s.locked_until <= now()"
                " ORDER BY s.queue_id, s.locked_until LIMIT 16 FOR UPDATE SKIP LOCKED" % qid,
            'sessions in line (the next 16, locking nothing: held ones are passed over'
            ' by a look in shared memory)':
                "SELECT s.session_key, s.ready_seq FROM sbq.sessions s WHERE s.queue_id = %d"
                " AND s.ready_seq IS NOT NULL AND s.ready_seq > -9223372036854775808"
                " ORDER BY s.queue_id, s.ready_seq LIMIT 16" % qid,
        }
        for name, sql in stmts.items():
            with c.transaction(force_rollback=True):
                plans[name] = [r[0] for r in c.execute(
                    'EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF) ' + sql)]
    return out, plans


# ------------------------------------------------ C: receive batch size

def run_c(sizes=(10, 100, 1000, 3000)):
    """One receive of each size: sbq_receive_session on one session (of a queue where
    1,000 other sessions have 10 messages each) against sbq_receive on a plain queue
    (memory_locks on, and off: locks in the rows as sessions keep them)."""
    res = {}
    total = sum(sizes)
    with connect() as c:
        # other sessions waiting in the queue, as in a queue in use: 1,000 x 10 messages
        c.execute("SELECT count(sbq_send('batchsess', %s::text, session_id => 's' || lpad(i::text, 6, '0')))"
                  "  FROM generate_series(1, 10) r, generate_series(1, 1000) i", (BODY,))
        for left in range(total, 0, -5000):
            c.execute("SELECT count(*) FROM sbq_send_batch('batchsess', array_fill(%s::text, ARRAY[%s]),"
                      " session_id => 'one')", (BODY, min(left, 5000)))
        for left in range(2 * total, 0, -5000):
            c.execute("SELECT count(*) FROM sbq_send_batch('batchplain', array_fill(%s::text, ARRAY[%s]))",
                      (BODY, min(left, 5000)))
        c.execute('VACUUM ANALYZE sbq.messages')
        c.execute('VACUUM ANALYZE sbq.sessions')
        tok = one(c, "SELECT session_token FROM sbq_accept_session('batchsess', 'one')")
        for n in sizes:
            t = time.monotonic()
            got = len(c.execute(SESSION_RECEIVE, ('batchsess', tok, n)).fetchall())
            res[('session', n)] = ((time.monotonic() - t) * 1000, got)
        for ml in ('on', 'off'):
            c.execute('SET sbqueue.memory_locks = ' + ml)
            for n in sizes:
                t = time.monotonic()
                got = len(c.execute(PLAIN_RECEIVE, ('batchplain', n)).fetchall())
                res[('plain ' + ml, n)] = ((time.monotonic() - t) * 1000, got)
        c.execute("SELECT sbq_release_session('batchsess', %s)", (tok,))
        c.execute("SELECT sbq_purge_queue('batchsess'), sbq_purge_queue('batchplain')")
    return res


# ------------------------------------------------------------------ report

def main():
    p = argparse.ArgumentParser()
    p.add_argument('--rounds', type=int, default=5)
    p.add_argument('--sessions', type=int, default=1000)
    p.add_argument('--per-session', type=int, default=10)
    p.add_argument('--long-per-session', type=int, default=100)
    p.add_argument('--clients', type=int, default=4)
    p.add_argument('--big', type=int, default=100000)
    p.add_argument('--held', type=int, default=99000)
    p.add_argument('--accepts', type=int, default=500)
    p.add_argument('--command', default='bench/sessions.sh')
    p.add_argument('--conditions', default='')
    a = p.parse_args()
    t_start = time.monotonic()
    admin = connect()
    settings = {g: one(admin, 'SELECT current_setting(%s)', (g,)) for g in (
        'server_version', 'fsync', 'synchronous_commit', 'full_page_writes', 'wal_sync_method',
        'shared_buffers', 'max_wal_size', 'autovacuum', 'shared_preload_libraries',
        'sbqueue.memory_locks', 'sbqueue.maintenance_interval')}
    load0 = open('/proc/loadavg').read().split()[:3]
    total = a.sessions * a.per_session

    # ---- A
    # (contender, synchronous_commit, messages per session)
    cells = [('plain', 'on', 0), ('session', 'on', a.per_session), ('plain', 'off', 0),
             ('session', 'off', a.per_session), ('session', 'on', a.long_per_session),
             ('fused', 'on', a.per_session)]
    runs = {cell: [] for cell in cells}
    problems = []
    for r in range(a.rounds):
        for cell in (cells if r % 2 == 0 else cells[::-1]):
            res = run_a(admin, cell[0], cell[1], a, per_session=cell[2])
            runs[cell].append(res)
            if res['problem']:
                problems.append(res['problem'])
            log('A %-7s %3s sync %-3s %6.0f msg/s  (%.2f s, WAL %.0f B/msg, %.2f WAL syncs/msg, '
                'client CPU %.2f s, per client %s)' % (cell[0], cell[2] or '', cell[1], res['rate'], res['elapsed'],
                                                       res['wal'], res['syncs'], res['cpu'],
                                                       res['per_client']))
    # one more of each with pg_stat_statements tracking nested statements (not in the figures)
    diag_a = {}
    for mode in ('plain', 'session'):
        admin.execute('SELECT pg_stat_statements_reset()')
        res = run_a(admin, mode, 'on', a, track_all=True)
        diag_a[mode] = (res, stat_statements(admin, 14))
        if res['problem']:
            problems.append(res['problem'] + ' (diagnostic run)')
    t_a = time.monotonic() - t_start

    # ---- B, C
    log('B: setting up %d sessions, %d of them held' % (a.big, a.held))
    b = run_b(a)
    diag, plans = diag_b()
    log('B: done, the held locks %.0f s old at the end of the timed part' % b['held_age'])
    log('C: receive batch sizes')
    c_res = run_c()
    load1 = open('/proc/loadavg').read().split()[:3]
    total_s = time.monotonic() - t_start

    # ---- report
    med = {cell: statistics.median(x['rate'] for x in runs[cell]) for cell in cells}
    L = []
    L.append('Measured with `%s` (%.1f min in all).' % (a.command, total_s / 60))
    L.append('')
    L.append('#### A. Throughput: %s sessions x %d messages against the plain queue\'s cycle of the same %s'
             % (fmt(a.sessions), a.per_session, fmt(total)))
    L.append('')
    L.append('| contender | synchronous_commit | msg/s (median) | runs | calls per %d msgs | '
             'WAL flushes per %d msgs | WAL B/msg | of it full-page images | client CPU µs/msg |'
             % (a.per_session, a.per_session))
    L.append('|---|---|---:|---|---:|---:|---:|---:|---:|')
    def label(cell):
        if cell[0] == 'plain':
            return 'plain: `sbq_receive(q, 10)`, `sbq_complete(q, uuid[])`'
        if cell[0] == 'fused':
            return ('session, %s x %d, fused calls: accept next + its first batch in one call; '
                    'complete + the next batch, + release when that is empty, in one call'
                    % (fmt(total // cell[2]), cell[2]))
        return ('session, %s x %d: `sbq_accept_session(q)`, `sbq_receive_session(q, token, 10)` '
                'until a short batch, `sbq_complete(q, uuid[])`, `sbq_release_session`'
                % (fmt(total // cell[2]), cell[2]))
    for cell in cells:
        rs = runs[cell]
        n_calls = statistics.median(sum(c[0] for c in x['calls'].values()) for x in rs)
        L.append('| %s | %s | **%s** | %s | %.1f | %s | %.0f | %.0f | %.0f |' % (
            label(cell), cell[1], fmt(med[cell]), ', '.join(fmt(x['rate']) for x in rs),
            n_calls * a.per_session / total,
            '%.1f' % (statistics.median(x['syncs'] for x in rs) * a.per_session)
            if cell[1] == 'on' else '(WAL writer)',
            statistics.median(x['wal'] for x in rs), statistics.median(x['fpi'] for x in rs),
            statistics.median(x['cpu'] for x in rs) / total * 1e6))
    L.append('')
    S_ON, S_OFF, P_ON, P_OFF = (('session', 'on', a.per_session), ('session', 'off', a.per_session),
                                ('plain', 'on', 0), ('plain', 'off', 0))
    S_LONG = ('session', 'on', a.long_per_session)
    F_ON = ('fused', 'on', a.per_session)
    def paired(sc, pc):
        """the median of the rounds' ratios (each round's two runs back to back, so a
        drift of the machine over the run weighs on both), and the ratio of the medians"""
        return (statistics.median(runs[sc][i]['rate'] / runs[pc][i]['rate'] for i in range(a.rounds)),
                med[sc] / med[pc])
    ratio_fused, of_medians_fused = paired(F_ON, P_ON)
    ratio_on, of_medians_on = paired(S_ON, P_ON)
    ratio_off, _ = paired(S_OFF, P_OFF)
    ratio_long, _ = paired(S_LONG, P_ON)
    L.append('Ratios are the median of the rounds\' ratios (the two runs of a round are back to '
             'back); the ratio of the medians above is given too.')
    L.append('')
    L.append('**session / plain = %.2fx** with synchronous_commit on (target >= 0.8x: %s; ratio of '
             'the medians %.2fx); %.2fx with it off; %.2fx with %d messages per session '
             '(synchronous_commit on).'
             % (ratio_on, 'met' if ratio_on >= 0.8 else '**missed**', of_medians_on, ratio_off,
                ratio_long, a.long_per_session))
    L.append('')
    L.append('**fused session calls / plain = %.2fx** with synchronous_commit on (target >= 0.8x: %s; '
             'ratio of the medians %.2fx); round by round %s.'
             % (ratio_fused, 'met' if ratio_fused >= 0.8 else '**missed**', of_medians_fused,
                ', '.join('%.2fx' % (runs[F_ON][i]['rate'] / runs[P_ON][i]['rate'])
                          for i in range(a.rounds))))
    L.append('')
    L.append('Round by round (each round has its six runs back to back): session / plain %s with '
             'synchronous_commit on, %s with it off, %s with %d messages per session.' % (tuple(
                 ', '.join('%.2fx' % (runs[sc][i]['rate'] / runs[pc][i]['rate']) for i in range(a.rounds))
                 for sc, pc in ((S_ON, P_ON), (S_OFF, P_OFF), (S_LONG, P_ON))) + (a.long_per_session,)))
    L.append('')
    L.append('Time per call as the clients saw it (synchronous_commit on, the median run):')
    L.append('')
    L.append('| contender | call | calls | mean ms | share of the clients\' time |')
    L.append('|---|---|---:|---:|---:|')
    for m in ('plain', 'session'):
        rs = runs[P_ON if m == 'plain' else S_ON]
        x = sorted(rs, key=lambda x: x['rate'])[len(rs) // 2]
        tot = sum(c[1] for c in x['calls'].values())
        for k, (n, s) in x['calls'].items():
            L.append('| %s | %s | %s | %.3f | %.0f %% |' % (m, k, fmt(n), s / n * 1000, 100 * s / tot))
    L.append('')
    for m in ('plain', 'session'):
        res, st = diag_a[m]
        L.append('pg_stat_statements (`track = all`: the statements run inside the calls too), one '
                 'more %s run (%s msg/s with the tracking; not in the figures above), by total '
                 'execution time:' % (m, fmt(res['rate'])))
        L.append('')
        L.append('| top level | calls | total ms | mean ms | blocks | WAL bytes | statement |')
        L.append('|---|---:|---:|---:|---:|---:|---|')
        for top, calls, tot, mean, blks, walb, q in st:
            L.append('| %s | %s | %.0f | %.3f | %s | %s | `%s` |' % (
                'yes' if top else '', fmt(calls), tot, mean, fmt(blks), fmt(walb or 0), short(q)))
        L.append('')

    L.append('#### B. Accept-next: 10 sessions against 100,000 with 99,000 held')
    L.append('')
    L.append('b100k: %s sends (a session each) in one transaction took %.1f s, accepting %s of them by '
             'name in one transaction %.1f s; sessions / held / ready then: %s. The held locks were '
             '%.0f s old at the end of the timed accepts (lock_duration 5 min; %s still held after '
             'everything).' % (fmt(a.big), b['send_s'], fmt(b['held']), b['hold_s'],
                               ' / '.join(fmt(x) for x in b['counts']), b['held_age'],
                               fmt(b['still_held'])))
    L.append('')
    L.append('| database | call | n | p50 ms | p95 ms | p99 ms | mean ms | WAL B/call p50 | WAL B/call mean |')
    L.append('|---|---|---:|---:|---:|---:|---:|---:|---:|')
    for db, label in (('b10', '10 sessions, all free'),
                      ('b100k', '100,000 sessions, 99,000 held, 1,000 free')):
        for k in ('accept', 'release'):
            v, w = b['lat'][db][k], b['wal'][db][k]
            L.append('| %s | %s | %d | %.3f | %.3f | %.3f | %.3f | %s | %s |' % (
                label, 'accept next' if k == 'accept' else 'release', len(v), pct(v, .5),
                pct(v, .95), pct(v, .99), statistics.mean(v), fmt(pct(w, .5)), fmt(statistics.mean(w))))
    v, w = b['fresh'], b['fresh_wal']
    L.append('| 100,000 sessions, 99,000 held | accept next, none released (a new session each time) '
             '| %d | %.3f | %.3f | %.3f | %.3f | %s | %s |' % (
                 len(v), pct(v, .5), pct(v, .95), pct(v, .99), statistics.mean(v),
                 fmt(pct(w, .5)), fmt(statistics.mean(w))))
    L.append('')
    acc10, acc100 = b['lat']['b10']['accept'], b['lat']['b100k']['accept']
    r50 = pct(acc100, .5) / pct(acc10, .5)
    r95 = pct(acc100, .95) / pct(acc10, .95)
    ok = r50 <= 1.2 and r95 <= 1.2
    L.append('**accept next, 100,000 / 10: p50 %.2fx, p95 %.2fx** (target: no more than 20 %% '
             'slower: %s)' % (r50, r95, 'met' if ok else '**missed**'))
    L.append('')
    L.append('WAL over the timed blocks (pg_walinspect\'s `pg_get_wal_stats` between the LSNs before '
             'and after each block of 100 accept + release; everything the server wrote meanwhile, '
             'autovacuum off from a checkpoint just before the blocks to the end of the fresh accepts): %s. The %d accepts of a new session: '
             '%s B each, %s B of it full-page images (each touches pages not written since the '
             'checkpoint that ended the setup).' % ('; '.join(
                 '%s %s B per accept + release (%s B full-page images)' % (
                     db, fmt(bw[0] / bw[2]), fmt(bw[1] / bw[2])) for db, bw in b['block_wal'].items()),
                 len(b['fresh']), fmt(b['fresh_wal_fpi'][0] / len(b['fresh'])), fmt(b['fresh_wal_fpi'][1] / len(b['fresh']))))
    L.append('')
    L.append('The same b100k with the statistics of `sbq.sessions` from before the 99,000 were held '
             '(analyzed with none held, autovacuum off for the table until this block ended, as until '
             'auto-analyze comes round), 100 x (accept next, `sbq_receive_session(q, token, 10)`, '
             'release) on a new connection; then the same after `VACUUM ANALYZE`:')
    L.append('')
    L.append('| statistics | call | p50 ms | p95 ms | mean ms |')
    L.append('|---|---|---:|---:|---:|')
    for label, d in (('from before the hold', b['stale']), ('fresh', b['fresh_stats'])):
        for k in ('accept', 'receive', 'release'):
            v = d[k]
            L.append('| %s | %s | %.3f | %.3f | %.3f |' % (label, k, pct(v, .5), pct(v, .95), statistics.mean(v)))
    L.append('')
    L.append('pg_stat_statements (`track = all`) over 100 more accept + release per database, mean ms:')
    L.append('')
    st10 = {q: (calls, mean) for top, calls, tot, mean, blks, walb, q in diag['b10']}
    st100 = {q: (calls, mean) for top, calls, tot, mean, blks, walb, q in diag['b100k']}
    L.append('| statement | calls b10 | mean ms b10 | calls b100k | mean ms b100k |')
    L.append('|---|---:|---:|---:|---:|')
    for q in sorted(set(st10) | set(st100),
                    key=lambda q: -(st100.get(q, (0, 0))[0] * st100.get(q, (0, 0))[1])):
        c10, m10 = st10.get(q, (0, float('nan')))
        c100, m100 = st100.get(q, (0, float('nan')))
        L.append('| `%s` | %s | %.3f | %s | %.3f |' % (short(q, 120), fmt(c10), m10, fmt(c100), m100))
    L.append('')
    L.append('Plans in b100k (EXPLAIN ANALYZE, rolled back):')
    L.append('')
    L.append('```')
    for name, plan in plans.items():
        L.append('-- ' + name)
        L.extend(plan)
    L.append('```')
    L.append('')
    L.append('#### C. One receive of n messages: a session against a plain queue')
    L.append('')
    L.append('`sbq_receive_session(q, token, n)` on one session of a queue where 1,000 other sessions '
             'wait with 10 messages each; `sbq_receive(q, n)` on a plain queue, with the locks in '
             'shared memory (the default) and in the rows (`SET sbqueue.memory_locks = off`); one '
             'connection, after `VACUUM ANALYZE`:')
    L.append('')
    L.append('| n | `sbq_receive_session` ms | `sbq_receive`, memory_locks on, ms | '
             '`sbq_receive`, memory_locks off, ms |')
    L.append('|---:|---:|---:|---:|')
    for n in sorted({k[1] for k in c_res}):
        row = []
        for who in ('session', 'plain on', 'plain off'):
            ms, got = c_res[(who, n)]
            row.append('%.1f%s' % (ms, '' if got == n else ' (%d rows)' % got))
            if got != n:
                problems.append('C: %s receive of %d returned %d' % (who, n, got))
        L.append('| %s | %s |' % (fmt(n), ' | '.join(row)))
    L.append('')
    if problems:
        L.append('**Problems:** ' + '; '.join(problems))
        L.append('')
    L.append('Conditions: %d CPUs, PostgreSQL %s; fsync %s (wal_sync_method %s), synchronous_commit %s '
             '(off where the table says so, set per connection), full_page_writes %s, shared_buffers %s, '
             'max_wal_size %s, autovacuum %s, shared_preload_libraries %s (pg_stat_statements.track = '
             'none except in the diagnostic runs), sbqueue.memory_locks %s, maintenance_interval %s; '
             'clients: %d processes of Debian\'s python3 with psycopg %s (libpq through ctypes), a '
             'connection each, autocommit (one transaction per call), statements prepared; client and '
             'server on the same machine over a Unix socket; load average %s at the start, %s at the '
             'end; part A %.0f s. %s' % (
                 os.cpu_count(), settings['server_version'], settings['fsync'], settings['wal_sync_method'],
                 settings['synchronous_commit'], settings['full_page_writes'], settings['shared_buffers'],
                 settings['max_wal_size'], settings['autovacuum'], settings['shared_preload_libraries'],
                 settings['sbqueue.memory_locks'], settings['sbqueue.maintenance_interval'], a.clients,
                 psycopg.__version__, ' '.join(load0), ' '.join(load1), t_a, a.conditions))
    print('\n'.join(L))
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
