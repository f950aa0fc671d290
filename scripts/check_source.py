#!/usr/bin/env python3
"""scripts/check_source.py: the layout rules of src/, checked.

- Every file starts with a header comment naming itself (IDENTIFICATION).
- No file has more than 1,000 lines unless its header says why, in a
  paragraph that starts "Length:".
- No function body has more than 100 lines unless the comment above it
  says it is a table ("(a table)").
- Every SQL-callable function (PG_FUNCTION_INFO_V1) has a comment right
  above its definition.

Exits non-zero and names each breach. Usage: check_source.py [SRC_DIR]
"""
import os
import re
import sys

MAX_FILE_LINES = 1000
MAX_FUNCTION_LINES = 100


def header_of(text):
    """The first comment of a file, or None."""
    m = re.match(r"\s*/\*(.*?)\*/", text, re.S)
    return m.group(1) if m else None


def functions(lines):
    """(name, first line, last line, comment above) of each function definition.

    Functions are written in the house style: the return type on its own
    line, the name at the start of the next, the body between a '{' and a
    '}' in column 0.
    """
    out = []
    i = 0
    while i < len(lines):
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)\(", lines[i])
        if m and i > 0 and lines[i - 1].strip() and not lines[i].rstrip().endswith(";"):
            name = m.group(1)
            j = i
            while j < len(lines) and lines[j] != "{":
                if lines[j].rstrip().endswith(";"):
                    break
                j += 1
            if j < len(lines) and lines[j] == "{":
                k = j
                while k < len(lines) and lines[k] != "}":
                    k += 1
                # the comment above the return type line
                above = ""
                c = i - 2
                if c >= 0 and lines[c].rstrip().endswith("*/"):
                    start = c
                    while start > 0 and "/*" not in lines[start]:
                        start -= 1
                    above = "\n".join(lines[start:c + 1])
                out.append((name, i - 1, k, above))
                i = k
        i += 1
    return out


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")
    problems = []
    for fname in sorted(os.listdir(src)):
        if not fname.endswith((".c", ".h")):
            continue
        path = os.path.join(src, fname)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        lines = text.split("\n")
        header = header_of(text)
        if header is None or ("src/" + fname) not in header:
            problems.append(f"{fname}: no header comment naming src/{fname}")
            header = header or ""
        if len(lines) > MAX_FILE_LINES and "Length:" not in header:
            problems.append(f"{fname}: {len(lines)} lines, and its header does not say why")
        sql_callable = set(re.findall(r"PG_FUNCTION_INFO_V1\((\w+)\)", text))
        for name, first, last, above in functions(lines):
            length = last - first + 1
            if length > MAX_FUNCTION_LINES and "(a table)" not in above:
                problems.append(f"{fname}:{first + 1}: {name} has {length} lines")
            if name in sql_callable and not above:
                problems.append(f"{fname}:{first + 1}: SQL-callable {name} has no comment")
    for p in problems:
        print("check_source: " + p)
    if problems:
        return 1
    print("check_source: src/ follows the layout rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
