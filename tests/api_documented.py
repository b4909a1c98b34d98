#!/usr/bin/env python3
"""Every public C function says what it does (CTest `api_documented`): each
MDR_API declaration in include/mdr/*.h is preceded by a comment that ends
on the line above it, or belongs to a run of declarations directly under
one (a group such as the zeroing helpers shares its comment). A function
added without one fails here, in CI.

The scan checks itself first: a header written here with one documented
and one undocumented declaration must give exactly the second.

Usage: api_documented.py INCLUDE_DIR"""
import glob
import os
import sys


def undocumented(lines):
    """The 1-based line numbers of MDR_API declarations with no comment
    above them or above the run of declarations they belong to."""
    bad = []
    for i, line in enumerate(lines):
        if not line.startswith("MDR_API"):
            continue
        j = i - 1
        # walk up over the run: earlier declarations and their continuation
        # lines (indented, not comment text)
        while j >= 0:
            prev = lines[j]
            stripped = prev.strip()
            continuation = prev.startswith(" ") and not stripped.startswith("*") and not stripped.endswith("*/")
            if prev.startswith("MDR_API") or continuation:
                j -= 1
                continue
            break
        if j < 0 or not lines[j].rstrip().endswith("*/"):
            bad.append(i + 1)
    return bad


def self_test():
    header = [
        "/* Documented. */",
        "MDR_API int mdr_probe_documented(void);",
        "MDR_API int mdr_probe_same_group(int a,",
        "                                 int b);",
        "",
        "typedef struct mdr_probe { int x; } mdr_probe;",
        "MDR_API int mdr_probe_undocumented(void);",
    ]
    got = undocumented(header)
    if got != [7]:
        sys.exit("api_documented: the scan is broken: it reported lines %s of its own probe, not [7]" % got)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    self_test()
    headers = sorted(glob.glob(os.path.join(sys.argv[1], "*.h")))
    if not headers:
        sys.exit("api_documented: no header in %s" % sys.argv[1])
    missing, total = [], 0
    for path in headers:
        lines = open(path, encoding="utf-8").read().split("\n")
        total += sum(1 for line in lines if line.startswith("MDR_API"))
        for n in undocumented(lines):
            missing.append("%s:%d: %s" % (os.path.basename(path), n, lines[n - 1].strip()))
    if total == 0:
        sys.exit("api_documented: found no MDR_API declaration: the scan is broken")
    if missing:
        sys.exit("api_documented: declarations without a comment above them:\n  " + "\n  ".join(missing))
    print("api_documented: ok, %d declarations in %d headers, each under its comment" % (total, len(headers)))


if __name__ == "__main__":
    main()
