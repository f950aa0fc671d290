#!/usr/bin/env python3
"""test/package/validate_meta.py: check a PGXN META.json against Meta Spec 1.0.0.

Offline: the spec is written down as a JSON Schema beside this file
(pgxn-meta-1.0.0.schema.json) and checked with Debian's python3-jsonschema.
On top of the schema, the files that "provides" names (file, docfile) must
exist next to META.json, as PGXN looks for them in the distribution.

    validate_meta.py [META.json]          exits non-zero and names each error
    validate_meta.py --self-test [META.json]
        also checks that the schema rejects META.json broken in each of the
        ways the spec forbids (a missing key, an unknown license, a version
        that is not semver, ...) and accepts what the spec allows (custom
        x_ keys, a list of licenses), so that a schema too lax to catch
        anything cannot pass unnoticed
"""
import copy
import json
import os
import sys

try:
    import jsonschema
except ImportError:
    sys.exit("validate_meta: python3-jsonschema is missing (apt-get install python3-jsonschema)")

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA = os.path.join(HERE, "pgxn-meta-1.0.0.schema.json")


def validator():
    """A Draft 2020-12 validator for the Meta Spec 1.0.0 schema, formats checked."""
    with open(SCHEMA, encoding="utf-8") as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def schema_errors(v, meta):
    """Each schema error as 'path: message', in a stable order."""
    out = []
    for e in sorted(v.iter_errors(meta), key=lambda e: [str(p) for p in e.absolute_path]):
        where = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        out.append(f"{where}: {e.message}")
    return out


def file_errors(meta, root):
    """The files "provides" names that are not in the distribution."""
    out = []
    provides = meta.get("provides")
    if not isinstance(provides, dict):
        return out
    for ext, entry in sorted(provides.items()):
        if not isinstance(entry, dict):
            continue
        for key in ("file", "docfile"):
            path = entry.get(key)
            if isinstance(path, str) and not os.path.isfile(os.path.join(root, path)):
                out.append(f"provides/{ext}/{key}: {path} is not in the distribution")
    return out


def set_path(doc, path, value):
    """doc with the key at path (a list of keys) set to value, or deleted if value is DELETE."""
    doc = copy.deepcopy(doc)
    node = doc
    for key in path[:-1]:
        node = node[key]
    if value is DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


DELETE = object()

# (what is wrong, path, value): each must make the document invalid
BROKEN = [
    ("no name", ["name"], DELETE),
    ("no version", ["version"], DELETE),
    ("no abstract", ["abstract"], DELETE),
    ("no maintainer", ["maintainer"], DELETE),
    ("no license", ["license"], DELETE),
    ("no provides", ["provides"], DELETE),
    ("no meta-spec", ["meta-spec"], DELETE),
    ("a name with a slash", ["name"], "sb/queue"),
    ("a one-character name", ["name"], "s"),
    ("a name with a space", ["name"], "sb queue"),
    ("a version that is not semver", ["version"], "0.11"),
    ("a version with a leading zero", ["version"], "0.011.0"),
    ("a version as a number", ["version"], 0.11),
    ("an empty abstract", ["abstract"], ""),
    ("an empty maintainer list", ["maintainer"], []),
    ("an unknown license", ["license"], "postgres"),
    ("a license in capitals", ["license"], "PostgreSQL"),
    ("an empty license list", ["license"], []),
    ("a license object with a non-URI", ["license"], {"PostgreSQL": "not a uri"}),
    ("an empty provides", ["provides"], {}),
    ("an extension without a version", ["provides", "sbqueue", "version"], DELETE),
    ("an extension without a file", ["provides", "sbqueue", "file"], DELETE),
    ("an extension version that is not semver", ["provides", "sbqueue", "version"], "0.11"),
    ("an unknown key in an extension", ["provides", "sbqueue", "docs"], "README.md"),
    ("an absolute file", ["provides", "sbqueue", "file"], "/sql/sbqueue.sql"),
    ("a file outside the distribution", ["provides", "sbqueue", "file"], "../sbqueue.sql"),
    ("meta-spec 2.0.0", ["meta-spec", "version"], "2.0.0"),
    ("meta-spec 1.0 (not 1.0.0)", ["meta-spec", "version"], "1.0"),
    ("an unknown meta-spec url", ["meta-spec", "url"], "https://pgxn.org/spec"),
    ("an unknown top-level key", ["homepage"], "https://example.org/"),
    ("a top-level key x_ alone", ["x_"], "x"),
    ("an unknown prereqs phase", ["prereqs", "install"], {"requires": {"PostgreSQL": "13.0.0"}}),
    ("an unknown relation", ["prereqs", "runtime", "needs"], {"PostgreSQL": "13.0.0"}),
    ("an empty phase", ["prereqs", "runtime"], {}),
    ("an empty relation", ["prereqs", "runtime", "requires"], {}),
    ("a prereq version that is not semver", ["prereqs", "runtime", "requires", "PostgreSQL"], "13"),
    ("a prereq version with a bad operator", ["prereqs", "runtime", "requires", "PostgreSQL"], "=> 13.0.0"),
    ("a prereq version 1", ["prereqs", "runtime", "requires", "PostgreSQL"], 1),
    ("an unknown release status", ["release_status"], "alpha"),
    ("an empty tag list", ["tags"], []),
    ("a tag with a slash", ["tags"], ["a/b"]),
    ("an empty resources", ["resources"], {}),
    ("a repository with a url and no type", ["resources"], {"repository": {"url": "git://h/r.git"}}),
    ("a homepage that is not a URI", ["resources"], {"homepage": "home page"}),
]

# (what is allowed, path, value): each must keep the document valid
ALLOWED = [
    ("a custom top-level key", ["x_packaging"], "debian"),
    ("a custom top-level key in capitals", ["X_note"], {"any": ["thing"]}),
    ("a list of licenses", ["license"], ["postgresql", "mit"]),
    ("a license object", ["license"], {"PostgreSQL": "https://www.postgresql.org/about/licence"}),
    ("a list of maintainers", ["maintainer"], ["one", "two <two@example.org>"]),
    ("a pre-release version", ["version"], "1.0.0-beta.1"),
    ("a prereq version range", ["prereqs", "runtime", "requires", "PostgreSQL"], ">= 13.0.0, != 14.1.0, < 19.0.0"),
    ("any version of a prereq", ["prereqs", "test"], {"requires": {"pgtap": 0}}),
    ("a custom key in an extension", ["provides", "sbqueue", "x_preload"], True),
    ("no_index", ["no_index"], {"directory": ["bench", "test"], "file": "BENCHMARKS.md"}),
    ("a repository web page", ["resources"], {"repository": {"web": "https://example.org/sbqueue"}}),
]


def self_test(v, meta):
    """Names each mutation the schema judged wrongly; empty when the schema is strict and fair."""
    out = []
    if schema_errors(v, meta):
        return ["the document itself must be valid for the self-test"]
    for what, path, value in BROKEN:
        if not schema_errors(v, set_path(meta, path, value)):
            out.append(f"accepted {what}")
    for what, path, value in ALLOWED:
        errors = schema_errors(v, set_path(meta, path, value))
        if errors:
            out.append(f"refused {what}: {errors[0]}")
    return out


def main(argv):
    args = [a for a in argv if a != "--self-test"]
    path = args[0] if args else "META.json"
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        print(f"validate_meta: {path}: {e}")
        return 1
    v = validator()
    problems = schema_errors(v, meta) + file_errors(meta, os.path.dirname(os.path.abspath(path)))
    for p in problems:
        print(f"validate_meta: {path}: {p}")
    if problems:
        return 1
    if "--self-test" in argv:
        wrong = self_test(v, meta)
        for w in wrong:
            print(f"validate_meta: schema self-test: {w}")
        if wrong:
            return 1
        print(f"validate_meta: schema self-test: {len(BROKEN)} broken documents refused, "
              f"{len(ALLOWED)} allowed variants accepted")
    print(f"validate_meta: {path} is valid (PGXN Meta Spec 1.0.0)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
