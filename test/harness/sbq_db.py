"""
sbq_db.py: how sbqueue's Python tests reach the server, defined once.

Imported by test/concurrency/concurrency_test.py, test/clients/python_client_test.py
and test/harness/sbq_load.py. It imports psycopg 3 (Debian: python3-psycopg): when
the python3 that runs the test lacks it (a pyenv or venv python3 shadowing Debian's),
it runs the test again under /usr/bin/python3, which has it.
"""

import os
import sys

try:
    import psycopg
except ImportError:
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != \
            os.path.realpath("/usr/bin/python3") and not os.environ.get("SBQ_REEXEC"):
        os.environ["SBQ_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("psycopg 3 is required (apt-get install python3-psycopg)")


def add_connection_args(parser):
    """--host, --port, --dbname (PGHOST, PGPORT, PGDATABASE by default) and --user."""
    parser.add_argument("--host", default=os.environ.get("PGHOST", "/tmp/sbq-conc"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PGPORT", "54402")))
    parser.add_argument("--dbname", default=os.environ.get("PGDATABASE", "postgres"))
    parser.add_argument("--user", default="postgres")


def connect(args=None, conninfo="", statement_timeout=30, connect_timeout=10, **kwargs):
    """An autocommit connection, to the server of args (from add_connection_args) or
    of conninfo, on which no statement outlives statement_timeout seconds. Other
    keyword arguments go to psycopg.connect (application_name, row_factory, ...)."""
    if args is not None:
        kwargs.update(host=args.host, port=args.port, dbname=args.dbname, user=args.user)
    conn = psycopg.connect(conninfo, autocommit=True, connect_timeout=connect_timeout, **kwargs)
    conn.execute("SET statement_timeout = '%ds'" % statement_timeout)
    return conn
