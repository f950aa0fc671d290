#!/usr/bin/python3
"""bench/run.py: the measurements of bench/run.sh (which starts the server and calls this).

Runs every workload for every contender back to back against one server and
prints a Markdown report; see bench/run.sh for the conditions.
"""
import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys
import threading
import time

import psycopg

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
DEEP = int(os.environ.get('BENCH_DEEP_DEPTH', '100000'))    # the deep phase's depth
ZERO_UUID = '00000000-0000-0000-0000-000000000000'
BODY = ('bench message body: 0123456789 abcdefghijklmnopqrstuvwxyz '
        'ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 end')
NAMES = {'limit': 'limit', 'skq': 'SKIP LOCKED', 'pgq': 'PgQ', 'sbq': 'sbqueue'}
TABLES = {'limit': 'lim_messages', 'skq': 'skq_messages', 'sbq': 'sbq.messages'}


def log(*a):
    print(time.strftime('%H:%M:%S'), *a, file=sys.stderr, flush=True)


class Db:
    def __init__(self):
        self.conn = psycopg.connect(autocommit=True)

    def one(self, q, params=None):
        row = self.conn.execute(q, params).fetchone()
        return row[0] if row else None

    def ex(self, q, params=None):
        self.conn.execute(q, params)


db = None


def lsn():
    return int(db.one("SELECT pg_current_wal_lsn() - '0/0'"))


def rows(c):
    return db.one(f'SELECT count(*) FROM {TABLES[c]}')


def reset(c):
    """Empty the contender's queue and analyze it: plans made now see an empty table."""
    if c == 'limit':
        db.ex('TRUNCATE lim_messages RESTART IDENTITY')
        db.ex('ALTER SEQUENCE lim_take_seq RESTART')
        db.ex('ANALYZE lim_messages')
    elif c == 'skq':
        db.ex('TRUNCATE skq_messages')
        db.ex('ANALYZE skq_messages')
    elif c == 'sbq':
        db.ex("SELECT sbq_purge_queue('bench')")
        db.ex('VACUUM ANALYZE sbq.messages')
        db.ex('VACUUM ANALYZE sbq.queue_counters')
    elif c == 'pgq':
        # let the consumer catch up, so a run starts with nothing pending
        for _ in range(400):
            if db.one('SELECT pgq_bench_consume()') == 0:
                if db.one("SELECT pgq.seq_getval(queue_event_seq) FROM pgq.queue"
                          " WHERE queue_name = 'bench'") <= db.one('SELECT pgq_bench_consumed()'):
                    break
                time.sleep(0.03)


def settle(c):
    """Before a cell: what the cells before it left is cleared, whoever ran them.

    Every contender's queue is emptied (so autovacuum has no dead rows of an
    earlier cell to clean while this one runs); PgQ's event tables, which PgQ
    rotates rather than empties, are vacuumed, so that the inserts they took
    do not start autovacuum on them. A checkpoint writes what the cells
    dirtied, and the cell waits (up to 30 s) until no autovacuum worker runs.
    Then the contender's own queue is reset as before.
    """
    for o in ('limit', 'skq', 'sbq'):
        if o != c:
            reset(o)
    for (t,) in db.conn.execute(
            "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables"
            " WHERE schemaname = 'pgq' AND tablename ~ '^event_[0-9]+_[0-9]+$'").fetchall():
        db.ex(f'VACUUM {t}')
    db.ex('CHECKPOINT')
    for _ in range(300):
        if db.one("SELECT count(*) FROM pg_stat_activity"
                  " WHERE backend_type = 'autovacuum worker'") == 0:
            break
        time.sleep(0.1)
    else:
        log('warning: an autovacuum worker still runs 30 s after the checkpoint')
    reset(c)


def fill(c, count, analyze=True):
    """Add count messages to the contender's queue (5,000 per transaction)."""
    left = count
    while left > 0:
        k = min(left, 5000 if c == 'sbq' else 100000)
        if c == 'limit':
            db.ex('INSERT INTO lim_messages (body) SELECT %s FROM generate_series(1, %s)', (BODY, k))
        elif c == 'skq':
            db.ex('INSERT INTO skq_messages (body) SELECT %s FROM generate_series(1, %s)', (BODY, k))
        elif c == 'sbq':
            db.ex("SELECT count(*) FROM sbq_send_batch('bench', array_fill(%s::text, ARRAY[%s::int]))",
                  (BODY, k))
        left -= k
    if analyze:
        db.ex(f'VACUUM ANALYZE {TABLES[c]}')


def pgbench(script, clients, seconds, n, sync_off=False, progress=None, per_client=None):
    length = ['-t', str(per_client)] if per_client else ['-T', str(seconds)]
    cmd = ['pgbench', '-n', '-M', 'prepared', '-c', str(clients), '-j', str(min(clients, 2)),
           *length, '-D', f'n={n}', '-D', f'tok={ZERO_UUID}',
           '-f', os.path.join(BENCH, script)]
    if progress:
        cmd[1:1] = ['-P', str(progress)]
    env = dict(os.environ)
    if sync_off:
        env['PGOPTIONS'] = '-c synchronous_commit=off'
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    out = p.stdout + p.stderr
    txns = re.search(r'number of transactions actually processed: (\d+)', out)
    tps = re.search(r'tps = ([\d.]+) \(without initial connection time\)', out)
    if p.returncode != 0 or not txns or not tps or float(tps.group(1)) == 0:
        raise RuntimeError(f'pgbench {script} failed ({p.returncode}):\n{out[-1500:]}')
    txns, tps = int(txns.group(1)), float(tps.group(1))
    prog = [float(m) for m in re.findall(r'progress: [\d.]+ s, ([\d.]+) tps', out)]
    return {'txns': txns, 'tps': tps, 'elapsed': txns / tps, 'progress': prog}


SCRIPTS = {
    # workload: (script per contender, batch?)
    'send': {'limit': 'limit_send.sql', 'skq': 'skq_send.sql', 'pgq': 'pgq_send.sql',
             'sbq': 'sbq_send.sql'},
    'send_batch': {'limit': 'limit_send_batch.sql', 'skq': 'skq_send_batch.sql',
                   'pgq': 'pgq_send_batch.sql', 'sbq': 'sbq_send_batch.sql'},
    'consume': {'limit': 'limit_consume.sql', 'skq': 'skq_consume.sql', 'sbq': 'sbq_consume.sql'},
    'consume_batch': {'limit': 'limit_consume_batch.sql', 'skq': 'skq_consume_batch.sql',
                      'sbq': 'sbq_consume_batch.sql'},
    'cycle': {'limit': 'limit_cycle.sql', 'skq': 'skq_cycle.sql', 'sbq': 'sbq_cycle.sql'},
    'cycle_batch': {'limit': 'limit_cycle_batch.sql', 'skq': 'skq_cycle_batch.sql',
                    'pgq': 'pgq_send_batch.sql', 'sbq': 'sbq_cycle_batch.sql'},
}


def run_cell(kind, c, clients, n, seconds, prefill=0, sync_off=False):
    """One measurement: messages/s and WAL bytes/message."""
    settle(c)
    if prefill:
        fill(c, prefill)
    script = SCRIPTS[kind][c]
    r0, l0 = (rows(c) if c != 'pgq' else 0), lsn()
    if c == 'pgq' and kind == 'cycle_batch':
        # producers (clients) and the one PgQ consumer run at the same time
        done0 = db.one('SELECT pgq_bench_consumed()')
        cons = {}
        t = threading.Thread(target=lambda: cons.update(
            pgbench('pgq_consume.sql', 1, seconds, n)))
        t.start()
        res = pgbench(script, clients, seconds, n, sync_off)
        t.join()
        msgs = db.one('SELECT pgq_bench_consumed()') - done0
        elapsed = cons['elapsed']
    else:
        per_client = None
        if kind.startswith('consume'):
            # a fixed amount of work that never drains the queue: 95 % of it
            per_client = max(1, int(prefill * 0.95 / (n * clients)))
        res = pgbench(script, clients, seconds, n, sync_off, per_client=per_client)
        elapsed = res['elapsed']
        r1 = rows(c) if c != 'pgq' else 0
        if kind.startswith('send'):
            msgs = res['txns'] * n
        elif kind.startswith('consume'):
            msgs = r0 - r1
            if r1 == 0:
                log(f'warning: {c} {kind} drained its {prefill} messages; raise the prefill')
        else:
            msgs = r0 + res['txns'] * n - r1
    wal = lsn() - l0
    rate = msgs / elapsed
    log(f'{kind:14s} c={clients} {c:6s} {rate:10.0f} msg/s  {wal / max(msgs, 1):7.0f} WAL B/msg')
    return {'rate': rate, 'wal': wal / max(msgs, 1), 'msgs': msgs}


def sizes(c):
    t = TABLES[c]
    db.ex('SELECT pg_stat_force_next_flush()')
    r = db.conn.execute(
        f"SELECT pg_relation_size('{t}'), pg_indexes_size('{t}'),"
        f" coalesce(n_live_tup, 0), coalesce(n_dead_tup, 0)"
        f" FROM pg_stat_user_tables WHERE relid = '{t}'::regclass").fetchone()
    return {'heap': r[0], 'index': r[1], 'live': r[2], 'dead': r[3]}


def classify(plan):
    """What the scans of the queue table in a plan are: 'index scans (with conditions)',
    or how many are sequential scans and full index scans (no Index Cond)."""
    lines = plan.splitlines()
    seq = full = ok = 0
    for k, line in enumerate(lines):
        m = re.search(r'(Seq Scan|Index Scan|Index Only Scan)( using (\w+))? on (skq_)?messages', line)
        if not m:
            continue
        if m.group(1) == 'Seq Scan':
            seq += 1
        elif k + 1 < len(lines) and 'Index Cond' in lines[k + 1]:
            ok += 1
        else:
            full += 1
    if seq == 0 and full == 0:
        return f'{ok} index scans with conditions'
    parts = []
    if seq:
        parts.append(f'{seq} seq scan{"s" if seq > 1 else ""}')
    if full:
        parts.append(f'{full} full index scan{"s" if full > 1 else ""} (no Index Cond)')
    return ', '.join(parts) + f', {ok} with conditions'


def plan_probe(c, fill_to):
    """Plans cached while the table is empty and freshly analyzed, used on a deep queue."""
    reset(c)
    t = TABLES[c]
    db.ex(f'ALTER TABLE {t} SET (autovacuum_enabled = off)')
    try:
        a = psycopg.connect(autocommit=True)
        notices = []
        a.add_notice_handler(lambda d: notices.append(d.message_primary))
        if c == 'skq':
            recv = open(os.path.join(BENCH, 'skq_consume.sql')).read().splitlines()
            recv = [x for x in recv if x.startswith('UPDATE')][0].replace(' \\aset', '')

            def prepare(conn):
                conn.execute(f'PREPARE r AS {recv}')
                conn.execute('PREPARE s AS DELETE FROM skq_messages WHERE id = $1'
                             ' AND lock_token = $2::uuid AND locked_until > clock_timestamp()')

            def cycle(conn):
                row = conn.execute('EXECUTE r').fetchone()
                conn.execute(f"EXECUTE s({int(row[0])}, '{row[1]}')")
        else:
            def prepare(conn):
                pass

            def cycle(conn):
                row = conn.execute("SELECT lock_token FROM sbq_receive('bench')").fetchone()
                conn.execute("SELECT sbq_complete('bench', %s::uuid)", (row[0],))
        prepare(a)
        # prepare and use the plans while the queue is empty (past the 5 custom plans)
        for _ in range(10):
            if c == 'skq':
                a.execute('EXECUTE r').fetchall()
                a.execute(f"EXECUTE s(0, '{ZERO_UUID}')")
            else:
                a.execute("SELECT * FROM sbq_receive('bench')").fetchall()
                try:
                    a.execute("SELECT sbq_complete('bench', %s::uuid)", (ZERO_UUID,))
                except psycopg.Error:
                    pass
        fill(c, fill_to, analyze=False)

        def timed(conn, k=300, limit=3.0):
            # statement_timeout bounds a call that a bad plan makes endless
            conn.execute("SET statement_timeout = '3s'")
            t0 = time.monotonic()
            done = 0
            try:
                while done < k and time.monotonic() - t0 < limit:
                    cycle(conn)
                    done += 1
            except psycopg.errors.QueryCanceled:
                pass
            rate = done / (time.monotonic() - t0)
            conn.execute('RESET statement_timeout')
            return rate
        old = timed(a)
        b = psycopg.connect(autocommit=True)
        prepare(b)
        fresh = timed(b)
        # the plan the old session uses now, through auto_explain at NOTICE level
        a.execute("LOAD 'auto_explain'")
        a.execute("SET auto_explain.log_min_duration = 0")
        a.execute("SET auto_explain.log_nested_statements = on")
        a.execute("SET auto_explain.log_level = 'notice'")
        notices.clear()
        if c == 'skq':
            # EXPLAIN shows the cached generic plan without running it
            plan = '\n'.join(r[0] for r in a.execute('EXPLAIN EXECUTE r').fetchall())
        else:
            a.execute("SELECT * FROM sbq_receive('bench')").fetchall()
            plan = '\n'.join(notices)
        scan = classify(plan)
        a.close()
        b.close()
    finally:
        db.ex(f'ALTER TABLE {t} RESET (autovacuum_enabled)')
    log(f'plan probe {c}: old session {old:.0f}/s, fresh {fresh:.0f}/s, cached plan: {scan}')
    return {'old': old, 'fresh': fresh, 'scan': scan}


def deep(c, minutes, secs, reps):
    """A DEEP-deep queue cycled for `minutes`, then again with a transaction held open;
    then how long after the release its dead rows are gone (at most 2 minutes watched)."""
    out = {}

    def measure():
        return statistics.median(
            run_cell_nr('cycle', c, 4, 1, secs)['rate'] for _ in range(reps))

    reset(c)
    fill(c, 1000)
    out['r1k'] = measure()
    log(f'deep {c}: 1,000 deep {out["r1k"]:.0f}/s; filling to {DEEP:,}')
    fill(c, DEEP - rows(c))
    out['r1m'] = measure()
    out['s0'] = sizes(c)
    log(f'deep {c}: {DEEP:,} deep {out["r1m"]:.0f}/s; cycling {minutes} min')
    out['clean'] = run_cell_nr('cycle', c, 4, 1, int(minutes * 60), progress=30)
    out['s1'] = sizes(c)
    out['r_after'] = measure()
    log(f'deep {c}: clean {out["clean"]["rate"]:.0f}/s, after {out["r_after"]:.0f}/s; '
        f'now {minutes} min with a transaction held open')
    holder = psycopg.connect()
    holder.execute('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ')
    holder.execute('SELECT txid_current(), count(*) FROM sbq.queues').fetchone()
    try:
        out['s2'] = sizes(c)
        out['held'] = run_cell_nr('cycle', c, 4, 1, int(minutes * 60), progress=30)
        out['s3'] = sizes(c)
    finally:
        holder.rollback()
        holder.close()
    released = time.monotonic()
    out['r_released'] = measure()
    # the space given back: the dead rows the held transaction kept, gone
    # (pruned or vacuumed, for the cycle to use again) within 2 minutes?
    while True:
        out['s4'] = sizes(c)
        out['t_back'] = time.monotonic() - released
        if out['s4']['dead'] <= max(out['s3']['dead'] // 10, 20000) or out['t_back'] >= 120:
            break
        time.sleep(5)
    log(f'deep {c}: held {out["held"]["rate"]:.0f}/s, released {out["r_released"]:.0f}/s')
    return out


def run_cell_nr(kind, c, clients, n, seconds, progress=None):
    """A cycle run on the queue as it is (no reset): completed messages/s."""
    r0, l0 = rows(c), lsn()
    res = pgbench(SCRIPTS[kind][c], clients, seconds, n, progress=progress)
    msgs = r0 + res['txns'] * n - rows(c)
    return {'rate': msgs / res['elapsed'], 'wal': (lsn() - l0) / max(msgs, 1),
            'progress': [x * n for x in res['progress']]}


def growth(a, b):
    """Heap + index growth from sizes a to sizes b, in per cent."""
    return 100.0 * (b['heap'] + b['index'] - a['heap'] - a['index']) / (a['heap'] + a['index'])


def table_rows(path, pattern):
    """The matches of pattern on the lines of another script's report, if there is one."""
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return [m for m in (re.match(pattern, line.strip()) for line in f) if m]


def fmt(x):
    return '—' if x is None else f'{x:,.0f}'


def ratio(a, b):
    return '—' if a is None or not b else f'{a / b:.2f}x'


def machine():
    mem = 0
    with open('/proc/meminfo') as f:
        for line in f:
            if line.startswith('MemTotal'):
                mem = int(line.split()[1]) / 1048576
    cpu = ''
    with open('/proc/cpuinfo') as f:
        for line in f:
            if line.startswith('model name'):
                cpu = line.split(':', 1)[1].strip()
                break
    return f'{os.cpu_count()} CPUs ({cpu}), {mem:.0f} GiB RAM'


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--mode', choices=['quick', 'full'], default='quick')
    ap.add_argument('--write', action='store_true')
    ap.add_argument('--command', default='bench/run.sh')
    ap.add_argument('--wakeup', default='')
    ap.add_argument('--deadletters', default='')
    ap.add_argument('--no-preload', dest='no_preload', default='')
    ap.add_argument('--stats', default='')
    ap.add_argument('--background', default='')
    args = ap.parse_args()
    global db
    db = Db()
    started = time.monotonic()
    full = args.mode == 'full'
    secs = 10 if full else 3
    reps = 3 if full else 1
    batch = int(os.environ.get('BENCH_BATCH', '100'))
    deep_minutes = float(os.environ.get('BENCH_DEEP_MINUTES', '5'))

    # (label, kind, clients, n, contenders, prefill per contender, sync off, from empty)
    four = ['limit', 'skq', 'pgq', 'sbq']
    three = ['limit', 'skq', 'sbq']
    pre1 = 60000 if full else 15000
    preb = 600000 if full else 200000
    if full:
        cells = [
            ('send 1 / tx', 'send', 4, 1, four, 0, False),
            (f'send {batch} / tx', 'send_batch', 4, batch, four, 0, False),
            ('receive + complete 1 / tx', 'consume', 4, 1, three, pre1, False),
            (f'receive + complete {batch} / tx', 'consume_batch', 4, batch, three, preb, False),
        ]
        for cl in (1, 4, 8):
            cells.append(('full cycle 1 / tx', 'cycle', cl, 1, three, 0, False))
        for cl in (1, 4, 8):
            cells.append((f'full cycle {batch} / tx', 'cycle_batch', cl, batch, four, 0, False))
        cells.append(('full cycle 1 / tx, synchronous_commit = off', 'cycle', 4, 1, three, 0, True))
    else:
        cells = [
            (f'send {batch} / tx', 'send_batch', 4, batch, four, 0, False),
            ('receive + complete 1 / tx', 'consume', 4, 1, three, pre1, False),
            ('full cycle 1 / tx', 'cycle', 4, 1, three, 0, False),
            (f'full cycle {batch} / tx', 'cycle_batch', 4, batch, four, 0, False),
        ]

    if os.environ.get('BENCH_NO_CELLS') == '1':   # for trying the deep phase out
        cells = []
    # BENCH_ONLY: only the cells whose "label, C clients" matches this regular
    # expression, and no deep phase; BENCH_ROUNDS: that many rounds
    only = os.environ.get('BENCH_ONLY')
    if only:
        cells = [cell for cell in cells if re.search(only, f'{cell[0]}, {cell[2]} clients')]
    rounds = os.environ.get('BENCH_ROUNDS', '')
    if rounds:
        if not rounds.isdigit() or int(rounds) < 1:
            sys.exit(f'BENCH_ROUNDS must be a whole number of rounds, 1 or more (not {rounds!r})')
        reps = int(rounds)
    if only and args.write:
        sys.exit('BENCH_ONLY runs part of the report: it is not written (no --write)')
    results = {}
    for rep in range(reps):
        log(f'--- round {rep + 1} of {reps}')
        for i, (label, kind, cl, n, cs, pre, off) in enumerate(cells):
            for c in cs:
                results.setdefault((i, c), []).append(run_cell(kind, c, cl, n, secs, pre, off))

    probe = {c: plan_probe(c, 100000 if full else 20000) for c in ('skq', 'sbq')}
    deep_res = {}
    if full and not only:
        deep_cs = ['sbq'] + (['skq'] if os.environ.get('BENCH_DEEP_BASELINE') == '1' else [])
        for c in deep_cs:
            deep_res[c] = deep(c, deep_minutes, secs, reps)
    total = time.monotonic() - started

    # ------------------------------------------------------------- the report
    med = {}
    for key, runs in results.items():
        med[key] = {'rate': statistics.median(r['rate'] for r in runs),
                    'wal': statistics.median(r['wal'] for r in runs),
                    'lo': min(r['rate'] for r in runs), 'hi': max(r['rate'] for r in runs)}
    version = db.one('SHOW server_version')
    settings = dict(db.conn.execute(
        "SELECT name, current_setting(name) FROM pg_settings WHERE name IN"
        " ('fsync', 'synchronous_commit', 'shared_buffers', 'max_wal_size', 'wal_level',"
        " 'autovacuum', 'shared_preload_libraries', 'full_page_writes', 'checkpoint_timeout')"
    ).fetchall())
    pgq_version = db.one("SELECT extversion FROM pg_extension WHERE extname = 'pgq'")
    sbq_version = db.one("SELECT extversion FROM pg_extension WHERE extname = 'sbqueue'")
    L = []
    L.append('## Throughput against the baselines\n')
    L.append(f'Measured {datetime.date.today().isoformat()} with `{args.command}` '
             f'({args.mode} mode, {total / 60:.1f} min).\n')
    L.append(f'- Machine: {machine()}; PostgreSQL {version} (Debian package), sbqueue '
             f'{sbq_version}, PgQ {pgq_version} (`postgresql-15-pgq3`); client (pgbench) and '
             f'server on the same machine over a Unix socket.')
    L.append(f'- Server: one throwaway server from `scripts/pgserver.sh start DIR --preload` for '
             f'every contender, with ' + ', '.join(f'`{k} = {v}`' for k, v in sorted(settings.items()))
             + '.')
    if args.background:
        L.append(f'- Also running on the machine: {args.background}')
    L.append(f'- Each cell: `pgbench -n -M prepared -c C -j min(C,2) -T {secs}` with the script '
             f'`bench/<contender>_<workload>.sql`; '
             + (f'the median of {reps} runs, the rounds interleaved (every cell of round 1, then round 2, ...).'
                if reps > 1 else 'one run.'))
    L.append('- A message is sent, received and completed. Send cells count messages sent; the '
             'others count messages completed (rows gone from the queue table; for PgQ, events in '
             'finished batches) per second of pgbench time. Before every cell every contender\'s queue '
             'is emptied (PgQ\'s event tables, which PgQ rotates rather than empties, are vacuumed), '
             'a `CHECKPOINT` runs and the cell waits until no autovacuum worker runs, '
             'so no cell pays for what an earlier one left; then its own queue is analyzed '
             '(`TRUNCATE` + `ANALYZE`, or `sbq_purge_queue` + `VACUUM ANALYZE`), so '
             'every cycle cell starts from an empty, freshly analyzed table and pgbench prepares its '
             f'statements then. Receive + complete cells are filled ({pre1:,} messages, or {preb:,} '
             'for batches), analyzed, and run a fixed number of transactions (`-t`) that takes 95 % '
             'of them, so the queue never runs dry.')
    L.append('- Contenders: **limit** = one `INSERT` and one `DELETE` by primary key per message, '
             'the cycle in one transaction (`bench/limit_*.sql`); **SKIP LOCKED** = the plain-SQL '
             'peek-lock of `bench/baseline_skip_locked.sql` (send, receive, complete: three '
             'transactions, like sbqueue); **PgQ** = `pgq.insert_event`, and for the cycle one '
             'consumer client (`next_batch` / `get_batch_events` / `finish_batch`, ticking itself '
             'through `pgq.ticker`) running beside the C producer clients (`bench/pgq_setup.sql`); '
             '**sbqueue** = `sbq_send` / `sbq_send_batch`, `sbq_receive`, `sbq_complete` on a queue '
             'with default properties (`bench/sbq_*.sql`).')
    L.append('- WAL B/msg: `pg_current_wal_lsn()` advance over the cell divided by its messages '
             '(everything the server wrote meanwhile, autovacuum and the sbqueue worker included).\n')
    L.append('| workload | clients | limit | SKIP LOCKED | PgQ | sbqueue | sbqueue / SKIP LOCKED '
             '| sbqueue / limit | WAL B/msg SKIP LOCKED | WAL B/msg sbqueue |')
    L.append('|---|---|---|---|---|---|---|---|---|---|')
    for i, (label, kind, cl, n, cs, pre, off) in enumerate(cells):
        g = {c: med[(i, c)]['rate'] if (i, c) in med else None for c in four}
        w = {c: med[(i, c)]['wal'] if (i, c) in med else None for c in four}
        L.append(f'| {label} | {cl} | {fmt(g["limit"])} | {fmt(g["skq"])} | {fmt(g["pgq"])} '
                 f'| **{fmt(g["sbq"])}** | {ratio(g["sbq"], g["skq"])} | {ratio(g["sbq"], g["limit"])} '
                 f'| {fmt(w["skq"])} | {fmt(w["sbq"])} |')
    L.append('\nmessages/second; the spread of the runs (min–max) per cell:\n')
    spread = []
    for i, (label, kind, cl, n, cs, pre, off) in enumerate(cells):
        parts = [f'{NAMES[c]} {med[(i, c)]["lo"]:,.0f}–{med[(i, c)]["hi"]:,.0f}' for c in cs]
        spread.append(f'- {label}, {cl} client{"s" if cl > 1 else ""}: ' + '; '.join(parts))
    if reps > 1:
        L.extend(spread)
    else:
        L.append('- one run per cell: no spread.')

    L.append('\n### Plans cached on an empty queue\n')
    L.append('One session prepares and uses its receive and complete plans while the queue is empty '
             'and freshly analyzed (10 calls, past the 5 custom plans of a prepared statement); '
             f'another session then sends {100000 if full else 20000:,} messages (autovacuum off for '
             'the table meanwhile, so nothing re-plans). The old session and a fresh one then time '
             '300 receive + complete each (one message, autocommit, psycopg; at most 3 s, and a statement running over 3 s is '
             'cancelled: 0 msg/s). The plan column counts the scans of the queue table in the plans of '
             'one receive (for sbqueue every statement the call runs: queue lookup, activation of '
             'scheduled messages, the receive), as auto_explain shows them in the '
             'old session.\n')
    L.append('| contender | old session (msg/s) | fresh session (msg/s) | old / fresh | old session\'s receive plan(s) |')
    L.append('|---|---|---|---|---|')
    for c in ('skq', 'sbq'):
        p = probe[c]
        L.append(f'| {NAMES[c]} | {p["old"]:,.0f} | {p["fresh"]:,.0f} | {p["old"] / p["fresh"]:.2f}x | {p["scan"]} |')

    if deep_res:
        L.append(f'\n### A {DEEP:,}-deep queue, cycled\n')
        L.append(f'Full cycle, 1 message per transaction, 4 clients. The queue is filled to 1,000 '
                 f'and measured ({reps} × {secs} s, median), filled to {DEEP:,} and measured, '
                 f'cycled for {deep_minutes:g} min (depth constant: each client sends one, receives '
                 f'the oldest, completes it), measured again; then cycled {deep_minutes:g} min more '
                 'with another session holding a REPEATABLE READ transaction (and the xmin horizon) '
                 'open, and measured once the transaction ended; the sizes are read again once '
                 'the dead rows are down to a tenth of what the held transaction kept (or 20,000), '
                 'or 2 minutes after the release. Sizes from '
                 '`pg_relation_size` / `pg_indexes_size` / `pg_stat_user_tables`.\n')
        L.append(f'| contender | 1,000 deep | {DEEP:,} deep | ratio | clean cycling (avg) | after '
                 '| held xmin cycling (avg) | held / clean | after release |')
        L.append('|---|---|---|---|---|---|---|---|---|')
        for c, d in deep_res.items():
            L.append(f'| {NAMES[c]} | {fmt(d["r1k"])} | {fmt(d["r1m"])} | {d["r1m"] / d["r1k"]:.2f}x '
                     f'| {fmt(d["clean"]["rate"])} | {fmt(d["r_after"])} | {fmt(d["held"]["rate"])} '
                     f'| {d["held"]["rate"] / d["clean"]["rate"]:.2f}x | {fmt(d["r_released"])} |')
        L.append('\n| contender | phase | heap MB | index MB | heap + index growth | live | dead '
                 '| WAL B/msg | msg/s per 30 s |')
        L.append('|---|---|---|---|---|---|---|---|---|')
        for c, d in deep_res.items():
            for name, a, b, run in (('clean', 's0', 's1', d['clean']), ('held xmin', 's2', 's3', d['held'])):
                sa, sb = d[a], d[b]
                prog = ', '.join(f'{x:,.0f}' for x in run['progress'])
                L.append(f'| {NAMES[c]} | {name}: start | {sa["heap"] / 1048576:.1f} | {sa["index"] / 1048576:.1f} '
                         f'| | {sa["live"]:,} | {sa["dead"]:,} | | |')
                L.append(f'| {NAMES[c]} | {name}: end | {sb["heap"] / 1048576:.1f} | {sb["index"] / 1048576:.1f} '
                         f'| {growth(sa, sb):+.1f} % | {sb["live"]:,} | {sb["dead"]:,} '
                         f'| {run["wal"]:,.0f} | {prog} |')
            s4 = d['s4']
            L.append(f'| {NAMES[c]} | released, {d["t_back"]:.0f} s later | {s4["heap"] / 1048576:.1f} '
                     f'| {s4["index"] / 1048576:.1f} | | {s4["live"]:,} | {s4["dead"]:,} | | |')

    # targets
    def find(kind, cl):
        for i, cell in enumerate(cells):
            if cell[1] == kind and cell[2] == cl and not cell[6]:
                return i
        return None
    L.append('\n### Targets\n')
    L.append('| target | measured | met |')
    L.append('|---|---|---|')
    def ratio_of(i, a, b):
        return med[(i, a)]['rate'] / med[(i, b)]['rate']

    def target(text, r, ok, unit='x'):
        shown = {'x': f'{r:.2f}x', '%': f'{r:+.1f} %', 'ms': f'{r:,.1f} ms'}[unit]
        L.append(f'| {text} | {shown} | {"yes" if ok else "no"} |')
    # issue 15's numbering; the first round's targets after them
    i = find('cycle', 4)
    if i is not None:
        r = ratio_of(i, 'sbq', 'skq')
        target('0. full cycle 1 / tx, 4 clients ≥ 1.4x SKIP LOCKED', r, r >= 1.4)
    for kind, label in (('send', 'send 1 / tx'), ('send_batch', f'send {batch} / tx')):
        i = find(kind, 4)
        if i is not None:
            r = ratio_of(i, 'sbq', 'skq')
            target(f'1. {label}, 4 clients ≥ 1.0x the SKIP LOCKED table\'s INSERT', r, r >= 1.0)
    i = find('cycle_batch', 4)
    if i is not None:
        r = ratio_of(i, 'sbq', 'pgq')
        target(f'2. full cycle {batch} / tx, 4 clients ≥ 1.0x PgQ', r, r >= 1.0)
        j = find('cycle_batch', 8)
        if j is not None:
            ours = med[(j, 'sbq')]['rate'] / med[(i, 'sbq')]['rate']
            theirs = med[(j, 'skq')]['rate'] / med[(i, 'skq')]['rate']
            L.append(f'| 2. full cycle {batch} / tx, 8 clients / 4 clients no lower than SKIP LOCKED\'s '
                     f'({theirs:.2f}x) | {ours:.2f}x | {"yes" if ours >= theirs else "no"} |')
        r = ratio_of(i, 'sbq', 'skq')
        target(f'full cycle {batch} / tx, 4 clients ≥ 1.5x SKIP LOCKED (first round)', r, r >= 1.5)
    if 'sbq' in deep_res:
        d = deep_res['sbq']
        g = growth(d['s2'], d['s3'])
        target(f'4. {DEEP:,} deep, a transaction held {deep_minutes:g} min: heap + index growth ≤ 25 %',
               g, g <= 25, unit='%')
        r = d['held']['rate'] / d['clean']['rate']
        target(f'4. ... throughput ≥ 0.9x clean', r, r >= 0.9)
        back = d['s4']['dead'] <= max(d['s3']['dead'] // 10, 20000)
        L.append(f'| 4. ... its dead rows gone within 2 min of the release '
                 f'| {d["s4"]["dead"]:,} left after {d["t_back"]:.0f} s | {"yes" if back else "no"} |')
        r = d['r1m'] / d['r1k']
        target(f'{DEEP:,} deep within 10 % of 1,000 deep (first round)', r, r >= 0.9)
        g = growth(d['s0'], d['s1'])
        target(f'heap + index growth < 5 % over {deep_minutes:g} min of cycling (first round)', g, g < 5, unit='%')
    else:
        L.append('| 4. deep queue, growth, held xmin | only in `--full` without `BENCH_ONLY` | — |')
    # bench/deadletters.sh's table: | workload | none | clean | dead | dead/clean | dead/none |
    for m in table_rows(args.deadletters, r'\| (full cycle \d+ / tx) \|.*\| ([\d.]+)x \| [\d.]+x \|$'):
        r = float(m.group(2))
        target(f'{m.group(1)}, 4 clients, on a queue with 1,000,000 dead letters '
               f'≥ 0.95x the same on one with none', r, r >= 0.95)
    # bench/no_preload.sh's table: | contender | cycles/s | / plain | ...
    for m in table_rows(args.no_preload, r'\| new \| \d+ \| ([\d.]+)x \|'):
        r = float(m.group(1))
        target('3. without the preload: full cycle 1 / tx, 4 clients ≥ 1.0x SKIP LOCKED', r, r >= 1.0)
    # bench/stats.sh's table: | stats, warm | <ms at the lower depth> | <ms at the higher> |
    for m in table_rows(args.stats, r'\| stats, warm \| ([\d.]+) \| ([\d.]+) \|$'):
        low, high = float(m.group(1)), float(m.group(2))
        target(f'5. `sbq_queue_stats` of 100 queues < 5 ms at any depth (warm; {low:,.1f} ms at '
               f'the lower depth, this at the higher)', high, max(low, high) < 5, unit='ms')
    if args.wakeup and os.path.exists(args.wakeup):
        L.append('\n### Wake-up latency of blocking receive (`bench/wakeup.sh`)\n')
        L.append('```')
        with open(args.wakeup) as f:
            L.extend(x.rstrip() for x in f if x.strip())
        L.append('```')
    if args.deadletters and os.path.exists(args.deadletters):
        L.append('\n### The cycle beside 1,000,000 dead letters (`bench/deadletters.sh`)\n')
        with open(args.deadletters) as f:
            L.append(f.read().strip())
    if args.no_preload and os.path.exists(args.no_preload):
        L.append('\n### The cycle without the preload (`bench/no_preload.sh`)\n')
        with open(args.no_preload) as f:
            L.append(f.read().strip())
    if args.stats and os.path.exists(args.stats):
        L.append('\n### Reading the numbers by depth (`bench/stats.sh`)\n')
        with open(args.stats) as f:
            L.append(f.read().strip())
    report = '\n'.join(L) + '\n'
    print(report)
    if args.write:
        path = os.path.join(ROOT, 'BENCHMARKS.md')
        with open(path) as f:
            text = f.read()
        k = text.find('\n## Throughput against the baselines')
        if k >= 0:
            # replace our section, up to the next top-level one
            e = text.find('\n## ', k + 1)
            rest = text[e:] if e >= 0 else ''
            text = text[:k + 1].rstrip('\n') + '\n\n' + report + rest
        else:
            text = text.rstrip('\n') + '\n\n' + report
        with open(path, 'w') as f:
            f.write(text)
        log(f'written to {path}')


if __name__ == '__main__':
    main()
