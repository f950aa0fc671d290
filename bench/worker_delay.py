#!/usr/bin/python3
"""bench/worker_delay.py: the measuring half of bench/worker_delay.sh (see there).

    worker_delay.py run --n N --samples S --isolated I --datadir DIR --log FILE --out FILE
    worker_delay.py report FILE...

`run` works on one server that already listens (PGHOST, PGPORT, PGUSER from the
environment): it creates N databases wd001..wdN, each with sbqueue and the queue
'q1' (lock 5 s, max_delivery_count 1; q2..q8 too where concurrent samples share a
database), waits until the databases have backed off to their idle interval,
measures an idle minute, then the delay from a lock's expiry to the dead letter
it becomes, then the idle cost again with the maintenance workers off, and
writes what it found as JSON. `report` prints the Markdown tables of one or more
such files.

Debian's python3 with python3-psycopg (run it with /usr/bin/python3).
"""
import argparse
import json
import math
import random
import os
import re
import sys
import time

import psycopg

LOCK_S = 5
PREFIX = 'wd'
# how often a waiting sample is polled, and from when (before its lock's expiry)
POLL_S = float(os.environ.get('WD_POLL_MS', '5')) / 1000.0
POLL_FROM_S = 0.2
# a sample whose dead letter has not appeared this long after its lock expired is missing
TIMEOUT_S = float(os.environ.get('WD_TIMEOUT', '90'))
# concurrent samples: one starts every SPACING_S seconds on average
SPACING_S = float(os.environ.get('WD_SPACING', '1'))
# the idle window, and the longest wait for the databases to back off before it
IDLE_S = float(os.environ.get('WD_IDLE_SECS', '60'))
SETTLE_MAX_S = float(os.environ.get('WD_SETTLE_MAX', '150'))
# then, with the maintenance workers turned off, the same for this long (0: not)
BASELINE_S = float(os.environ.get('WD_BASELINE_SECS', '30'))
# at most this many databases take samples (spread evenly over all of them)
MAX_SAMPLED = int(os.environ.get('WD_SAMPLED_DBS', '20'))

POLL_SQL = ("SELECT clock_timestamp(), EXISTS (SELECT 1 FROM sbq_peek(%s, 1, %s) "
            "WHERE sequence_number = %s)")
# queues in a sampled database: enough for the concurrent samples it holds at once
CONCURRENT_QUEUES = 8


def log(msg):
    print('worker_delay: %s %s' % (time.strftime('%H:%M:%S'), msg), file=sys.stderr, flush=True)


def connect(db):
    return psycopg.connect(dbname=db, autocommit=True)


def dbname(i):
    return '%s%03d' % (PREFIX, i)


# ------------------------------------------------------------------ setup

def setup(n, queues):
    """Databases wd001..wdN with sbqueue; queues[db] queues in each (q1, q2, ...)."""
    t = time.time()
    with connect('postgres') as c:
        for i in range(1, n + 1):
            c.execute('CREATE DATABASE %s' % dbname(i))
    for i in range(1, n + 1):
        with connect(dbname(i)) as c:
            c.execute('CREATE EXTENSION sbqueue')
            for q in range(1, queues.get(dbname(i), 1) + 1):
                c.execute("SELECT sbq_create_queue(%s, lock_duration => %s::interval, "
                          "max_delivery_count => 1)", ('q%d' % q, '%d s' % LOCK_S))
    return time.time() - t


# ---------------------------------------------------------------- samples

class Sample:
    def __init__(self, db, conn, queue, mode):
        self.db, self.conn, self.queue, self.mode = db, conn, queue, mode
        self.dlq = queue + '/$deadletterqueue'
        self.seq = self.locked_until = self.seen = None

    def start(self):
        self.seq = self.conn.execute("SELECT sbq_send(%s, 'x')", (self.queue,)).fetchone()[0]
        row = self.conn.execute("SELECT sequence_number, locked_until FROM sbq_receive(%s)",
                                (self.queue,)).fetchone()
        if row is None or row[0] != self.seq:
            raise RuntimeError('%s: received %r, not the message just sent (%d)' % (self.db, row, self.seq))
        self.locked_until = row[1]
        self.expiry = self.locked_until.timestamp()     # same clock as time.time()

    def poll(self):
        """True once the outcome is known (seen, or given up on)."""
        ts, there = self.conn.execute(POLL_SQL, (self.dlq, self.seq, self.seq)).fetchone()
        if there:
            self.seen = ts
            return True
        return time.time() > self.expiry + TIMEOUT_S

    def finish(self):
        """Reads the dead letter's reason and when the pass stamped it."""
        row = None
        if self.seen is not None:
            row = self.conn.execute(
                "SELECT m.dead_letter_reason, d.dead_lettered_at "
                "FROM sbq_peek(%s, 1, %s) m "
                "LEFT JOIN sbq.dead_letters d USING (sequence_number) "
                "WHERE m.sequence_number = %s", (self.dlq, self.seq, self.seq)).fetchone()
        return {
            'db': self.db, 'queue': self.queue, 'mode': self.mode, 'seq': self.seq,
            'locked_until': self.locked_until.isoformat(),
            'delay_ms': None if self.seen is None else (self.seen - self.locked_until).total_seconds() * 1000,
            'stamp_ms': None if row is None or row[1] is None
            else (row[1] - self.locked_until).total_seconds() * 1000,
            'reason': None if row is None else row[0],
        }


def run_samples(conns, dbs, queues, count, mode, first, rng):
    """count samples in the databases dbs, round robin from index first, each on
    a queue of its database that holds no other pending sample (a receive would
    dead-letter that one's message itself).
    concurrent: one starts every SPACING_S on average (0.5x to 1.5x, at random,
    so that the expiries fall at every phase of the workers' 1 s cadence);
    isolated: one at a time, a random 0 to 1 s after the last one ended."""
    results, pending = [], []
    started = 0
    next_at = time.time()
    while started < count or pending:
        now = time.time()
        if started < count and now >= next_at and (mode == 'concurrent' or not pending):
            db = dbs[(first + started) % len(dbs)]
            busy = {s.queue for s in pending if s.db == db}
            free = ['q%d' % q for q in range(1, queues.get(db, 1) + 1) if 'q%d' % q not in busy]
            if free:
                s = Sample(db, conns[db], free[0], mode)
                s.start()
                pending.append(s)
                started += 1
                if mode == 'concurrent':
                    next_at = max(next_at, now - SPACING_S) + rng.uniform(0.5, 1.5) * SPACING_S
        for s in list(pending):
            if time.time() >= s.expiry - POLL_FROM_S and s.poll():
                r = s.finish()
                results.append(r)
                pending.remove(s)
                if mode == 'isolated':
                    next_at = time.time() + rng.uniform(0, 1)
                if r['delay_ms'] is None:
                    log('%s sample in %s: seq %d not dead-lettered %.0f s after its lock expired'
                        % (mode, s.db, s.seq, TIMEOUT_S))
                elif mode == 'isolated' or r['delay_ms'] > 1000:
                    log('%s sample in %s: %.1f ms' % (mode, s.db, r['delay_ms']))
        time.sleep(POLL_S)
    return results


# ------------------------------------------------------------- idle cost

def proc_ticks(pid):
    """ppid, utime+stime, cutime+cstime (clock ticks)."""
    with open('/proc/%d/stat' % pid) as f:
        s = f.read()
    fields = s[s.rindex(')') + 2:].split()
    # fields[0] is field 3 (state): ppid is field 4, utime..cstime fields 14..17
    return int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def server_ticks(pm):
    """The server's CPU in clock ticks: the postmaster's utime+stime+cutime+cstime
    and its live children's (a child's time moves into the postmaster's cutime
    when it is reaped); and, of that, the postmaster's own utime+stime (its forks)
    and the sbqueue launcher's."""
    _, own, reaped = proc_ticks(pm)
    total, launcher = own + reaped, 0
    for d in os.listdir('/proc'):
        if d.isdigit() and int(d) != pm:
            try:
                ppid, t, ct = proc_ticks(int(d))
                if ppid != pm:
                    continue
                with open('/proc/%s/cmdline' % d, 'rb') as f:
                    title = f.read()
            except (OSError, ValueError):
                continue
            total += t + ct
            if b'sbqueue launcher' in title:
                launcher += t + ct
    return {'total': total, 'postmaster': own, 'launcher': launcher}


def status(db):
    with connect(db) as c:
        return c.execute(
            "SELECT database, state, worker_pid, passes, "
            "extract(epoch FROM next_pass_due - last_pass_started), "
            "extract(epoch FROM next_pass_due - clock_timestamp()) "
            "FROM sbq_maintenance_status").fetchall()


def settle(db, n, idle_interval):
    """Waits until every database has backed off to the idle interval."""
    t = time.time()
    while True:
        rows = status(db)
        installed = [r for r in rows if r[1] == 'installed']
        backed = [r for r in installed if r[4] is not None and float(r[4]) >= idle_interval * 0.99]
        if len(installed) >= n and len(backed) == len(installed):
            return time.time() - t, True
        if time.time() - t > SETTLE_MAX_S:
            log('not settled after %.0f s: %d of %d databases backed off to %.0f s'
                % (SETTLE_MAX_S, len(backed), len(installed), idle_interval))
            return time.time() - t, False
        time.sleep(2)


def window(db, datadir, logfile, seconds):
    """seconds with no client connected: the server's CPU, the passes, the
    maintenance workers started and autovacuum's visits to databases."""
    with open(os.path.join(datadir, 'postmaster.pid')) as f:
        pm = int(f.readline())
    passes0 = sum(r[3] or 0 for r in status(db))
    time.sleep(0.5)                       # our backend has exited and been reaped
    off0 = os.path.getsize(logfile)
    c0, t0 = server_ticks(pm), time.time()
    time.sleep(seconds)
    c1, t1 = server_ticks(pm), time.time()
    off1 = os.path.getsize(logfile)
    passes1 = sum(r[3] or 0 for r in status(db))
    with open(logfile, 'rb') as f:
        f.seek(off0)
        text = f.read(off1 - off0).decode('utf-8', 'replace')
    pass_lines = re.findall(r'\[(\d+)\] DEBUG:  sbqueue maintenance: ', text)
    hz = os.sysconf('SC_CLK_TCK')
    return {
        'seconds': t1 - t0,
        'cpu_s': (c1['total'] - c0['total']) / hz,
        'postmaster_cpu_s': (c1['postmaster'] - c0['postmaster']) / hz,
        'launcher_cpu_s': (c1['launcher'] - c0['launcher']) / hz,
        'passes': passes1 - passes0,
        'passes_logged': len(pass_lines),
        'worker_starts': len(re.findall(r'starting background worker process "sbqueue maintenance', text)),
        'worker_pids': len(set(pass_lines)),
        'autovacuum_visits': len(re.findall(r'DEBUG:  autovacuum: processing database', text)),
    }


def workers_off(db):
    """sbqueue.enable_maintenance_worker = off; waits for the workers to leave."""
    with connect(db) as c:
        c.execute('ALTER SYSTEM SET sbqueue.enable_maintenance_worker = off')
        c.execute('SELECT pg_reload_conf()')
        for _ in range(100):
            time.sleep(0.1)
            if c.execute("SELECT count(*) FROM pg_stat_activity "
                         "WHERE backend_type = 'sbqueue maintenance'").fetchone()[0] == 0:
                return
    raise RuntimeError('the maintenance workers did not leave within 10 s of '
                       'sbqueue.enable_maintenance_worker = off')


# -------------------------------------------------------------------- run

def run(a):
    info = {'n': a.n, 'load_start': open('/proc/loadavg').read().split()[:3]}
    with connect('postgres') as c:
        info['server_version'] = c.execute('SHOW server_version').fetchone()[0]
        for g in ('sbqueue.max_workers', 'sbqueue.maintenance_interval',
                  'sbqueue.idle_maintenance_interval', 'sbqueue.memory_locks', 'max_worker_processes',
                  'fsync', 'synchronous_commit', 'autovacuum', 'log_min_messages'):
            info[g] = c.execute('SELECT current_setting(%s)', (g,)).fetchone()[0]
        idle_interval = c.execute(
            "SELECT setting::float / 1000 FROM pg_settings "
            "WHERE name = 'sbqueue.idle_maintenance_interval'").fetchone()[0]
    dbs = [dbname(i) for i in range(1, a.n + 1)]
    k = min(MAX_SAMPLED, a.n)
    sampled = [dbs[(j * a.n) // k] for j in range(k)]
    queues = {db: max(1, math.ceil(CONCURRENT_QUEUES / k)) for db in sampled}
    info['sampled_dbs'] = len(sampled)
    info['queues_per_sampled_db'] = queues[sampled[0]]
    log('N=%d: creating %d databases' % (a.n, a.n))
    info['setup_s'] = setup(a.n, queues)
    log('N=%d: %d databases in %.1f s' % (a.n, a.n, info['setup_s']))

    if IDLE_S > 0:
        log('N=%d: waiting for every database to back off to %.0f s' % (a.n, idle_interval))
        info['settle_s'], info['settled'] = settle(dbs[0], a.n, idle_interval)
        log('N=%d: idle window of %.0f s' % (a.n, IDLE_S))
        info['idle'] = window(dbs[0], a.datadir, a.log, IDLE_S)
        log('N=%d: idle: %s' % (a.n, json.dumps(info['idle'])))

    rng = random.Random(a.n)
    conns = {db: connect(db) for db in sampled}
    samples = []
    try:
        log('N=%d: %d concurrent samples (one every %.1f s on average) in %d databases'
            % (a.n, a.samples, SPACING_S, len(sampled)))
        samples += run_samples(conns, sampled, queues, a.samples, 'concurrent', 0, rng)
        if a.isolated > 0:
            log('N=%d: %d isolated samples' % (a.n, a.isolated))
            samples += run_samples(conns, sampled, queues, a.isolated, 'isolated', a.samples, rng)
    finally:
        for c in conns.values():
            c.close()
    info['samples'] = samples

    if BASELINE_S > 0:
        log('N=%d: sbqueue.enable_maintenance_worker = off, window of %.0f s' % (a.n, BASELINE_S))
        workers_off(dbs[0])
        time.sleep(1)
        info['baseline'] = window(dbs[0], a.datadir, a.log, BASELINE_S)
        log('N=%d: workers off: %s' % (a.n, json.dumps(info['baseline'])))
    info['load_end'] = open('/proc/loadavg').read().split()[:3]
    with open(a.out, 'w') as f:
        json.dump(info, f, indent=1)


# ----------------------------------------------------------------- report

def pct(values, p):
    """Nearest rank."""
    v = sorted(values)
    return v[max(0, math.ceil(p * len(v)) - 1)]


def ms(x):
    return '%.0f ms' % x if abs(x) >= 10 else '%.1f ms' % x


def report(files):
    runs = [json.load(open(f)) for f in files]
    missing_any = False
    print('Delay from a lock\'s expiry (`locked_until`) to its dead letter, as a client polling '
          'every %.0f ms sees it; and to the dead letter\'s `dead_lettered_at` (stamped by the pass):'
          % (POLL_S * 1000))
    print()
    print('| databases | samples | how | arrived | min | p50 | p90 | max | to dead_lettered_at p50 / max |')
    print('|---|---:|---|---:|---:|---:|---:|---:|---:|')
    for mode in ('concurrent', 'isolated'):
        for r in runs:
            ss = [s for s in r['samples'] if s['mode'] == mode]
            if not ss:
                continue
            d = [s['delay_ms'] for s in ss if s['delay_ms'] is not None]
            st = [s['stamp_ms'] for s in ss if s['stamp_ms'] is not None]
            bad = [s for s in ss if s['delay_ms'] is not None and s['reason'] != 'MaxDeliveryCountExceeded']
            missing_any |= len(d) < len(ss) or bool(bad)
            if mode == 'isolated':
                how = 'one at a time, in %d database%s' % (r['sampled_dbs'], 's' if r['sampled_dbs'] > 1 else '')
            elif r['sampled_dbs'] == 1:
                how = 'one a second, all in the one database (a queue each): a busy database'
            else:
                how = 'one a second, round robin over %d databases: each quiet while its lock runs' % r['sampled_dbs']
            if d:
                print('| %d | %d | %s | %d | %s | %s | %s | %s | %s / %s |' % (
                    r['n'], len(ss), how, len(d), ms(min(d)), ms(pct(d, .5)), ms(pct(d, .9)), ms(max(d)),
                    ms(pct(st, .5)) if st else '-', ms(max(st)) if st else '-'))
            else:
                print('| %d | %d | %s | 0 | - | - | - | - | - |' % (r['n'], len(ss), how))
            for s in bad:
                print('\n(%s: seq %d dead-lettered with reason %r)' % (s['db'], s['seq'], s['reason']))
    print()
    print('Background cost of the idle databases, per minute (every database backed off to its idle '
          'interval first; then the same with sbqueue.enable_maintenance_worker = off):')
    print()
    print('| databases | server CPU | of one CPU | passes | worker starts | autovacuum visits '
          '| workers off: server CPU | of one CPU | autovacuum visits | (on - off) CPU / pass |')
    print('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
    for r in runs:
        i, b = r.get('idle'), r.get('baseline')
        if not i:
            continue
        f = 60.0 / i['seconds']
        cells = ['%d%s' % (r['n'], '' if r.get('settled') else ' (not settled)'),
                 '%.2f s' % (i['cpu_s'] * f), '%.2f %%' % (100 * i['cpu_s'] / i['seconds']),
                 '%.0f' % (i['passes'] * f), '%.0f' % (i['worker_starts'] * f),
                 '%.0f' % (i['autovacuum_visits'] * f)]
        if b:
            g = 60.0 / b['seconds']
            per = ((i['cpu_s'] * f - b['cpu_s'] * g) / (i['passes'] * f) * 1000) if i['passes'] else float('nan')
            cells += ['%.2f s' % (b['cpu_s'] * g), '%.2f %%' % (100 * b['cpu_s'] / b['seconds']),
                      '%.0f' % (b['autovacuum_visits'] * g), '%.0f ms' % per]
        else:
            cells += ['-'] * 4
        print('| ' + ' | '.join(cells) + ' |')
    print()
    print('Of the server CPU per minute above, the postmaster\'s own (its forks) and the sbqueue launcher\'s:')
    print()
    print('| databases | workers on: postmaster | launcher | the rest | workers off: postmaster | launcher | the rest |')
    print('|---|---:|---:|---:|---:|---:|---:|')
    for r in runs:
        cells = [str(r['n'])]
        for w in (r.get('idle'), r.get('baseline')):
            if not w or 'postmaster_cpu_s' not in w:
                cells += ['-'] * 3
                continue
            f = 60.0 / w['seconds']
            cells += ['%.2f s' % (w['postmaster_cpu_s'] * f), '%.2f s' % (w['launcher_cpu_s'] * f),
                      '%.2f s' % ((w['cpu_s'] - w['postmaster_cpu_s'] - w['launcher_cpu_s']) * f)]
        print('| ' + ' | '.join(cells) + ' |')
    print()
    print('(windows: %s; the rates are counts over the window scaled to a minute)' % ', '.join(
        '%d: %.0f s on%s' % (r['n'], r['idle']['seconds'],
                             ' / %.0f s off' % r['baseline']['seconds'] if r.get('baseline') else '')
        for r in runs if r.get('idle')))
    print()
    r0 = runs[0]
    print('(PostgreSQL %s; sbqueue.max_workers %s, maintenance_interval %s, idle_maintenance_interval %s, '
          'memory_locks %s; max_worker_processes %s; fsync %s, synchronous_commit %s, autovacuum %s, '
          'log_min_messages %s; %d CPUs; databases created in %s; load average at the start of each N: %s)' % (
              r0['server_version'], r0['sbqueue.max_workers'], r0['sbqueue.maintenance_interval'],
              r0['sbqueue.idle_maintenance_interval'], r0['sbqueue.memory_locks'],
              r0['max_worker_processes'], r0['fsync'], r0['synchronous_commit'], r0['autovacuum'],
              r0['log_min_messages'], os.cpu_count(),
              ', '.join('%d: %.0f s' % (r['n'], r['setup_s']) for r in runs),
              ', '.join('%d: %s' % (r['n'], ' '.join(r['load_start'])) for r in runs)))
    return 3 if missing_any else 0


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest='cmd', required=True)
    r = sub.add_parser('run')
    r.add_argument('--n', type=int, required=True)
    r.add_argument('--samples', type=int, default=30)
    r.add_argument('--isolated', type=int, default=5)
    r.add_argument('--datadir', required=True)
    r.add_argument('--log', required=True)
    r.add_argument('--out', required=True)
    rp = sub.add_parser('report')
    rp.add_argument('files', nargs='+')
    a = p.parse_args()
    if a.cmd == 'run':
        run(a)
        return 0
    return report(a.files)


if __name__ == '__main__':
    sys.exit(main())
