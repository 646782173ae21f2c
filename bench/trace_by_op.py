#!/usr/bin/env python3
"""Sums a Chrome trace written by tide's --trace FILE (`tide gpt memory --trace`, `tide gpt
train --trace`, ...) by event name: the total milliseconds and the count of each op's complete
("X") events, largest first.

Usage: python3 bench/trace_by_op.py TRACE.json [TOP=20]
"""
import collections
import json
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        trace = json.load(f)
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    total, count = collections.Counter(), collections.Counter()
    for e in events:
        if e.get("ph") == "X" and "dur" in e:
            total[e["name"]] += e["dur"]
            count[e["name"]] += 1
    print(f"all ops: {sum(total.values()) / 1e3:.1f} ms")
    for name, us in total.most_common(top):
        print(f"  {name:<40} {us / 1e3:9.1f} ms {count[name]:6d}")


if __name__ == "__main__":
    main()
