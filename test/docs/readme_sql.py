#!/usr/bin/env python3
"""test/docs/readme_sql.py: every SQL block of the README and docs/ runs as written.

Usage: readme_sql.py [MARKDOWN ...] (default: README.md and docs/*.md; libpq
environment: a superuser on a server with sbqueue installed)

Each ```sql block runs statement by statement, in autocommit (a block's own BEGIN
and COMMIT hold), in a database of its own with sbqueue created in schema sbqueue,
as the README installs it. A wrong name, argument or example fails the test. An
HTML comment right before a block (invisible on the page) says what the block
assumes, one directive a line:

  <!-- sql-test
  bare                              the database has no sbqueue yet
  roles: a b                        roles made for the test (dropped at the end)
  setup: SQL                        run first (several lines run in order)
  token: QUEUE 'ph1' '$1'           each place a placeholder stands gets the lock
                                    token of a message sent to QUEUE and received
  bind: $token=session_token        a placeholder takes the first value of that
                                    column of the last statement that returned it
  error: SQLSTATE text              the statement with this text fails so
  skip: why                         not run (say why)
  -->

Exits non-zero on the first block that fails, naming it by its first line.
"""
import glob
import os
import re
import sys

import psycopg
from psycopg import sql

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def fail(msg):
    print("not ok - " + msg)
    sys.exit(1)


def blocks(path):
    """(line, directives, code) of each ```sql block of the file."""
    text = open(path).read()
    out = []
    for m in re.finditer(r"(?:<!-- sql-test\n(.*?)-->[ \t]*\n[ \t]*)?```sql\n(.*?)```", text, re.S):
        line = text.count("\n", 0, m.start(2))
        d = {"setup": [], "roles": [], "token": [], "bind": {}, "error": [], "bare": False, "skip": None}
        for raw in (m.group(1) or "").splitlines():
            key, _, val = raw.strip().partition(":")
            val = val.strip()
            if raw.strip() == "bare":
                d["bare"] = True
            elif key == "setup":
                d["setup"].append(val)
            elif key == "roles":
                d["roles"] += val.split()
            elif key == "token":
                queue, *phs = val.split()
                d["token"] += [(queue, p) for p in phs]
            elif key == "bind":
                for pair in val.split():
                    ph, col = pair.split("=")
                    d["bind"][ph] = col
            elif key == "error":
                state, _, what = val.partition(" ")
                d["error"].append((state, what))
            elif key == "skip":
                d["skip"] = val
            elif raw.strip():
                fail("%s:%d: unknown directive %r" % (path, line, raw))
        out.append((line, d, m.group(2)))
    return out


def statements(code):
    """Split SQL into statements: on ; outside quotes, dollar quotes and comments."""
    out, cur, i, n = [], [], 0, len(code)
    while i < n:
        c = code[i]
        if code.startswith("--", i):
            j = code.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if c == "'":
            j = i + 1
            while j < n:
                if code[j] == "'" and code.startswith("''", j):
                    j += 2
                    continue
                if code[j] == "'":
                    break
                j += 1
            cur.append(code[i:j + 1])
            i = j + 1
            continue
        m = re.match(r"\$[A-Za-z_]*\$", code[i:])
        if m and (i == 0 or not code[i - 1].isalnum()):
            tag = m.group(0)
            j = code.find(tag, i + len(tag))
            j = n if j < 0 else j + len(tag)
            cur.append(code[i:j])
            i = j
            continue
        if c == ";":
            s = "".join(cur).strip()
            if s:
                out.append(s)
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def literal(v):
    return "'" + str(v).replace("'", "''") + "'"


def run_block(admin, name, d, code):
    db = "sbq_docs_block"
    admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
    admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
    try:
        with psycopg.connect(dbname=db, autocommit=True) as conn:
            if not d["bare"]:
                conn.execute("CREATE SCHEMA sbqueue")
                conn.execute("CREATE EXTENSION sbqueue SCHEMA sbqueue")
                conn.execute("GRANT USAGE ON SCHEMA sbqueue TO PUBLIC")
            for s in d["setup"]:
                conn.execute(s)
            bound = {}
            for stmt in statements(code):
                for queue, ph in d["token"]:
                    while ph in stmt:
                        conn.execute("SELECT sbqueue.sbq_send(%s, 'for a token'::text)", (queue,))
                        tok = conn.execute("SELECT lock_token FROM sbqueue.sbq_receive(%s)", (queue,)).fetchone()
                        if tok is None:
                            fail("%s: no message to lock for %s" % (name, ph))
                        stmt = stmt.replace(ph, literal(tok[0]), 1)
                for ph in sorted(bound, key=len, reverse=True):
                    stmt = re.sub(re.escape(ph) + r"(?![A-Za-z0-9_])", lambda _m: literal(bound[ph]), stmt)
                want = [state for state, what in d["error"] if what in stmt]
                try:
                    cur = conn.execute(stmt)
                except psycopg.Error as e:
                    if want and e.sqlstate == want[0]:
                        continue
                    fail("%s: %s\n    failed: %s %s" % (name, stmt, e.sqlstate, str(e).strip()))
                if want:
                    fail("%s: %s\n    should fail with %s" % (name, stmt, want[0]))
                if cur.description:
                    cols = [c.name for c in cur.description]
                    rows = cur.fetchall()
                    for ph, col in d["bind"].items():
                        if col in cols and rows and ph not in bound:
                            bound[ph] = rows[0][cols.index(col)]
    finally:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))


def main():
    paths = sys.argv[1:] or [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    ran = skipped = 0
    roles = set()
    with psycopg.connect(dbname="postgres", autocommit=True) as admin:
        try:
            for path in paths:
                for line, d, code in blocks(path):
                    name = "%s:%d (%s)" % (os.path.relpath(path, ROOT), line + 1, code.strip().splitlines()[0][:60])
                    if d["skip"]:
                        print("ok - %s # skip %s" % (name, d["skip"]))
                        skipped += 1
                        continue
                    for r in d["roles"]:
                        if r not in roles:
                            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(r)))
                            admin.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(r)))
                            roles.add(r)
                    run_block(admin, name, d, code)
                    print("ok - " + name)
                    ran += 1
        finally:
            for r in roles:
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(r)))
    if ran == 0:
        fail("no SQL block ran")
    print("ok - %d SQL blocks ran, %d skipped" % (ran, skipped))


if __name__ == "__main__":
    main()
