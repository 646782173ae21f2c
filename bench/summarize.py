#!/usr/bin/env python3
"""Medians and the target ratios from the Google Benchmark JSON files bench/run.sh writes.

Usage: bench/summarize.py OUT_DIR
Reads OUT_DIR/*.json. The MLP comparison's rounds are mlp_<binary>.<env>_r<round>.json
(tag "mlp:<env>"; <env> is a libtorch environment of run.sh, "default" for tide); the full
passes are <binary>.json (tag "default"). A benchmark's median is taken over every
repetition of it in every file with the same tag. Prints the medians, then each target
with the ratio and whether it is met: the MLP ratios from the rounds only, the trainer's
from the full pass.
"""
import glob
import json
import os
import re
import statistics
import sys


def load(out_dir):
    runs = {}  # (tag, name) -> [real_time in ms]
    rates = {}  # (tag, name) -> [items_per_second]
    for path in sorted(glob.glob(os.path.join(out_dir, "*.json"))):
        # mlp_<binary>.<env>_r<round>.json (the rounds) or <binary>.json (one full pass).
        base = os.path.basename(path)
        parts = base.split(".")
        env = re.sub(r"_?r\d+$", "", parts[1]) if len(parts) == 3 else ""
        tag = ("mlp:" if base.startswith("mlp_") else "") + (env or "default")
        with open(path) as f:
            data = json.load(f)
        for b in data.get("benchmarks", []):
            if b.get("run_type") != "iteration" or b.get("error_occurred"):
                continue
            scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ns")]
            key = (tag, b["run_name"])
            runs.setdefault(key, []).append(b["real_time"] * scale)
            if "items_per_second" in b:
                rates.setdefault(key, []).append(b["items_per_second"])
    return runs, rates


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
    runs, rates = load(out_dir)
    if not runs:
        print("summarize: no benchmark results in", out_dir)
        return 1
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(f"{'tag':<22} {'benchmark':<58} {'n':>3} {'median ms':>10} {'min':>9} {'max':>9}")
    for (tag, name), v in sorted(runs.items()):
        print(f"{tag:<22} {name:<58} {len(v):>3} {med[(tag, name)]:>10.3f} {min(v):>9.3f} "
              f"{max(v):>9.3f}")

    def get(name, tag="default"):
        return med.get((tag, name))

    print("\nengine and MLP targets (medians, ratios within this run):")
    tide = get("BM_TextbookMlpStep/pool:0/blas:0/real_time", "mlp:default")
    floor = get("BM_TextbookGemmFloor/with_dX:0/real_time", "mlp:default")
    floor_dx = get("BM_TextbookGemmFloor/with_dX:1/real_time", "mlp:default")
    # Other tide variants measured in the rounds (e.g. a build with a proposed patch, files
    # mlp_<name>.<tag>_r<round>.json): their own step against their own floor.
    for (tag, name), t in sorted(med.items()):
        if tag != "mlp:default" and name == "BM_TextbookMlpStep/pool:0/blas:0/real_time":
            f = get("BM_TextbookGemmFloor/with_dX:0/real_time", tag)
            if f:
                print(f"  [{tag}] GEMM floor / tide step {f:8.2f} / {t:8.2f} ms = {f / t:.3f}")
    if tide and floor:
        r = floor / tide
        print(f"  GEMM floor / tide step      {floor:8.2f} / {tide:8.2f} ms = {r:.3f}  "
              f"(target >= 0.93: {'met' if r >= 0.93 else 'NOT met'})")
        if floor_dx:
            print(f"  floor with dX / tide step   {floor_dx:8.2f} / {tide:8.2f} ms = "
                  f"{floor_dx / tide:.3f}  (the GEMMs tide's step runs today)")
    torch = {(tag, name): t for (tag, name), t in med.items()
             if tag.startswith("mlp:") and name.startswith("BM_TorchTextbookMlpStep/")}
    if tide and torch:
        (btag, bname), best = min(torch.items(), key=lambda kv: kv[1])
        r = tide / best
        for (tag, name), t in sorted(torch.items()):
            print(f"  libtorch {tag:<20} {name.split('/', 1)[1]:<28} {t:8.2f} ms  "
                  f"tide/this = {tide / t:.3f}")
        print(f"  tide / libtorch best        {tide:8.2f} / {best:8.2f} ms = {r:.3f}  "
              f"(best: {btag} {bname.split('/', 1)[1]}; target <= 0.95: "
              f"{'met' if r <= 0.95 else 'NOT met'})")
        if floor:
            print(f"  GEMM floor / libtorch best  {floor / best:.3f}")
    none = rates.get(("default", "BM_TrainerPolicy/none/manual_time"))
    if none:
        n = statistics.median(none)
        print(f"  trainer none                {n:8.2f} minibatches/s")
        for p in ("bounded_2", "bounded_4", "per_batch"):
            v = rates.get(("default", f"BM_TrainerPolicy/{p}/manual_time"))
            if not v:
                continue
            m = statistics.median(v)
            verdict = ""
            if p.startswith("bounded"):
                verdict = f"(target >= 0.97: {'met' if m / n >= 0.97 else 'NOT met'})"
            print(f"  trainer {p:<19} {m:8.2f} minibatches/s = {m / n:.3f} x none {verdict}")

    print("\ntraced-mode targets (medians, ratios within this run):")
    eager = get("BM_ChainEagerOneSync/real_time")
    unrolled = get("BM_ChainTracedUnrolled/real_time")
    if unrolled:
        per_node = unrolled * 1e6 / 10000
        print(f"  replay, 10000 tiny adds      {per_node:8.1f} ns per node "
              f"(target <= 30: {'met' if per_node <= 30 else 'NOT met'})")
    for name, what in (("BM_ChainTracedFused/real_time", "traced, fused"),
                       ("BM_ChainTracedLoopNode/fused:1/real_time", "traced, loop node fused"),
                       ("BM_ChainTracedLoopNode/fused:0/real_time", "traced, loop node"),
                       ("BM_ChainTracedUnrolled/real_time", "traced, unrolled")):
        t = get(name)
        if eager and t:
            r = eager / t
            print(f"  10000 x (y + 1): {what:<24} {t * 1e3:8.1f} us, {r:6.1f}x eager async "
                  f"({eager * 1e3:.0f} us) (target >= 50x: {'met' if r >= 50 else 'NOT met'})")
    te = get("BM_TextbookStepEager/real_time")
    tt = get("BM_TextbookStepTraced/streams:1/real_time")
    tt2 = get("BM_TextbookStepTraced/streams:2/real_time")
    t1 = get("BM_TowersReplay/streams:1/real_time")
    t2 = get("BM_TowersReplay/streams:2/real_time")
    if t1 and t2:
        print(f"  4 towers replay, streams 1 / 2 {t1 * 1e3:8.1f} / {t2 * 1e3:8.1f} us = "
              f"{t1 / t2:.2f}x with parallel branches")
    if tt and tt2:
        print(f"  MLP step traced, streams 2   {tt2:8.2f} ms = {tt2 / tt:.3f} x streams 1")
    if te and tt:
        print(f"  MLP step traced / eager      {tt:8.2f} / {te:8.2f} ms = {tt / te:.3f} "
              f"(target <= 1: {'met' if tt <= te else 'NOT met'}); peak memory: see the "
              f"peak_MB counters in tide_bench.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
