#!/usr/bin/env python3
"""Summarizes a bench/peers/ddp_run.sh directory: python3 ddp_summarize.py OUT.

Reads OUT/r<round>.<config>.json (the last line of each: ddp_step.py's JSON) and
OUT/load.tsv, prints a markdown table and writes it to OUT/summary.md.
"""
import csv
import glob
import json
import os
import re
import statistics
import sys

NAMES = {"on": "DDP overlap on", "off": "DDP overlap off",
         "single1": "1 process, 1 thread", "single2": "1 process, 2 threads"}


def main():
    out = sys.argv[1]
    rounds = sorted({int(m.group(1)) for f in glob.glob(f"{out}/r*.*.json")
                     if (m := re.match(r"r(\d+)\.", os.path.basename(f)))})
    runs = {c: [json.loads(open(f"{out}/r{r}.{c}.json").read().strip().splitlines()[-1])
                for r in rounds] for c in NAMES}
    load = {}
    if os.path.exists(f"{out}/load.tsv"):
        for row in csv.DictReader(open(f"{out}/load.tsv"), delimiter="\t"):
            load.setdefault(row["config"], []).append(f"{row['load1_before']}->{row['load1_after']}")
    med = {c: statistics.median(d["ms_per_step_median"] for d in runs[c]) for c in NAMES}
    mins = {c: statistics.median(d["ms_per_step_min"] for d in runs[c]) for c in NAMES}
    lines = [
        "| config | ranks x threads | batch/rank | median ms/step (median over rounds) | each round's median | median of the rounds' fastest step | bytes all-reduced/step/rank | all-reduce calls/step | loss after the last step |",
        "|---|---|---|---|---|---|---|---|---|"]
    for c, n in NAMES.items():
        ds = runs[c]
        d = ds[0]
        lines.append(
            f"| {n} | {d['ranks']} x {d['threads_per_rank']} | {d['batch_per_rank']} "
            f"| **{med[c]:.1f}** | " + ", ".join(f"{x['ms_per_step_median']:.1f}" for x in ds)
            + f" | {mins[c]:.1f} | {d['bytes_allreduced_per_step_per_rank']:,} "
            f"| {d['allreduce_calls_per_step']} | {d['loss_last_global']:.6f} |")
    pr = [a["ms_per_step_median"] / b["ms_per_step_median"] for a, b in zip(runs["on"], runs["off"])]
    d0 = runs["on"][0]
    lines += [
        "",
        f"- on/off: ratio of the medians {med['on'] / med['off']:.3f}; per-round (paired) "
        f"ratios " + ", ".join(f"{x:.3f}" for x in pr) + f" (median {statistics.median(pr):.3f}); "
        f"ratio of the fastest-step medians {mins['on'] / mins['off']:.3f}",
        f"- 1 process 1 thread / DDP on: {med['single1'] / med['on']:.3f}; "
        f"1 process 2 threads / DDP on: {med['single2'] / med['on']:.3f}; "
        f"1 process 1 thread / 1 process 2 threads: {med['single1'] / med['single2']:.3f}",
        f"- {len(rounds)} rounds; per run {d0['steps']} timed steps after {d0['warmup']} warm-up "
        f"steps; ms/step is rank 0's (rank medians of the DDP runs agree within "
        f"{max(abs(a - b) / max(a, b) for x in runs['on'] + runs['off'] for a, b in [x['rank_medians']]):.1%})",
        f"- loss: the full batch's after {d0['warmup'] + d0['steps']} steps (DDP: the mean of the "
        f"ranks' shard losses), the same in every run: "
        f"{sorted({round(x['loss_last_global'], 6) for c in NAMES for x in runs[c]})}",
        f"- DDP buckets (overlap on): {d0.get('ddp_buckets')}",
        f"- overlap off all-reduce: {runs['off'][0].get('off_reduce')}"
        + (f"; rank 0's ms in it per step (after its backward, waiting for the other rank "
           f"included), each round's median: "
           + ", ".join(f"{x['allreduce_ms_median_off']:.1f}" for x in runs["off"])
           if all(x.get("allreduce_ms_median_off") is not None for x in runs["off"]) else ""),
        f"- torch {d0['torch']}, interop threads {d0['interop_threads']}, "
        f"env {runs['on'][0]['user_env']} (1 process 2 threads: {runs['single2'][0]['user_env']})",
    ]
    if load:
        lines.append("- load1 before->after each run: " + "; ".join(
            f"{c}: {', '.join(v)}" for c, v in load.items()))
    tide = tide_table(out, rounds)
    if tide:
        lines += [""] + tide
    text = "\n".join(lines)
    print(text)
    with open(f"{out}/summary.md", "w") as f:
        f.write(text + "\n")


def tide_table(out, rounds):
    """tide's tide_bench_dist runs of the same rounds (ddp_run.sh with TIDE_BENCH_DIST)."""
    files = [f"{out}/r{r}.tide.gbench.json" for r in rounds]
    if not all(os.path.exists(f) for f in files):
        return []
    per = {}
    for f in files:
        for b in json.load(open(f))["benchmarks"]:
            per.setdefault(b["name"], []).append(b)
    lines = ["| tide (tide_bench_dist) | median ms/step over rounds | each round | all-reduced MB/step/rank | loss |",
             "|---|---|---|---|---|"]
    med = {}
    for name, bs in per.items():
        med[name] = statistics.median(b["real_time"] for b in bs)
        lines.append(f"| {name.replace('/iterations:30/real_time', '')} | **{med[name]:.1f}** | "
                     + ", ".join(f"{b['real_time']:.1f}" for b in bs)
                     + f" | {bs[0].get('allreduce_MB_per_step', 0):.2f} | {bs[0].get('loss', float('nan')):.6f} |")
    on = [n for n in per if "comm:1/traced:0" in n]
    off = [n for n in per if "comm:2/traced:0" in n]
    none = [n for n in per if "comm:0/traced:0" in n]
    if on and off:
        pr = [a["real_time"] / b["real_time"] for a, b in zip(per[on[0]], per[off[0]])]
        lines.append(f"\n- tide on/off (eager): ratio of the medians {med[on[0]] / med[off[0]]:.3f}; "
                     "per-round ratios " + ", ".join(f"{x:.3f}" for x in pr))
    if on and none:
        lines.append(f"- tide: the step with its all-reduce / without communication (eager): "
                     f"{med[on[0]] / med[none[0]]:.3f}")
    return lines


if __name__ == "__main__":
    main()
