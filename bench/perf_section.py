#!/usr/bin/env python3
"""Replace one named section of docs/perf.md with the Markdown read from stdin.

Each benchmark owns a section delimited by `<!-- BEGIN name -->` / `<!-- END name -->`;
the section is appended when it does not exist yet. Usage: perf_section.py NAME < body.md
"""
import pathlib
import sys

name = sys.argv[1]
body = sys.stdin.read().rstrip() + "\n"
path = pathlib.Path(__file__).resolve().parent.parent / "docs" / "perf.md"
text = path.read_text() if path.exists() else "# Performance\n"
begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
block = f"{begin}\n{body}{end}"
if begin in text and end in text:
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    text = head + block + tail
else:
    text = text.rstrip() + "\n\n" + block + "\n"
path.write_text(text)
