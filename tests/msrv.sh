#!/usr/bin/env bash
# The declared MSRV (workspace `rust-version`) must be at least what every dependency of the
# published crates declares; clippy's `incompatible_msrv` lint checks our own use of std.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo metadata --format-version 1 --locked | python3 -c '
import json, sys
m = json.load(sys.stdin)
packages = {p["id"]: p for p in m["packages"]}
nodes = {n["id"]: n for n in m["resolve"]["nodes"]}
def version(v):
    return tuple(int(x) for x in (v or "0").split("."))
roots = [p["id"] for p in m["packages"] if p["name"] in ("distlock", "distlock-macros")]
declared = version(packages[roots[0]]["rust_version"])
seen, stack = set(), list(roots)
while stack:
    i = stack.pop()
    if i in seen:
        continue
    seen.add(i)
    stack += [d["pkg"] for d in nodes[i]["deps"] if any(k["kind"] is None for k in d["dep_kinds"])]
worst = max(seen - set(roots), key=lambda i: version(packages[i].get("rust_version")))
need = version(packages[worst].get("rust_version"))
if need > declared:
    sys.exit("MSRV %s is below what %s %s needs (%s)" % (".".join(map(str, declared)), packages[worst]["name"], packages[worst]["version"], packages[worst]["rust_version"]))
print("MSRV %s covers every dependency (highest: %s %s)" % (".".join(map(str, declared)), packages[worst]["name"], packages[worst]["rust_version"]))
'
