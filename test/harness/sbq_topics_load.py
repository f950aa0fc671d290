#!/usr/bin/env python3
"""sbq_topics_load.py: a producer for test/t/topics_crash_loop.pl.

    sbq_topics_load.py CONNINFO TOPIC OUTFILE SECONDS

Sends messages 1, 2, ... to TOPIC for SECONDS, each alone in its transaction,
with message id m<N> and application properties {"n": N}. After each it
appends to OUTFILE "ok N" once the commit returned, or "unknown N" when the
connection failed before it did (the send may or may not have committed),
and then connects again (the server may be restarting). Exits 0.
"""
import sys
import time

import psycopg


def main():
    conninfo, topic, outfile, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    deadline = time.monotonic() + seconds
    n = 0
    conn = None
    with open(outfile, "a", buffering=1) as out:
        while time.monotonic() < deadline:
            if conn is None:
                try:
                    conn = psycopg.connect(conninfo, connect_timeout=5)
                except psycopg.Error:
                    time.sleep(0.1)
                    continue
            n += 1
            try:
                with conn.transaction():
                    conn.execute("SELECT sbq_send(%s, %s::text, message_id => %s, "
                                 "application_properties => jsonb_build_object('n', %s::int))",
                                 (topic, "body %d" % n, "m%d" % n, n))
                out.write("ok %d\n" % n)
            except psycopg.Error:
                out.write("unknown %d\n" % n)
                try:
                    conn.close()
                except psycopg.Error:
                    pass
                conn = None
    return 0


if __name__ == "__main__":
    sys.exit(main())
