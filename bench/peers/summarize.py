#!/usr/bin/env python3
"""Summarizes a bench/peers/run.sh output directory: ms/step per configuration (the median
over rounds of each round's ms/step), tide/peer ratios, the targets with met / NOT
met, what each framework ran with, the loss check, and the load. Prints plain text and
writes OUT/summary.md (the same as Markdown). Standard library only.

Usage: bench/peers/summarize.py OUT_DIR
"""
import glob
import json
import os
import re
import statistics
import sys

PEERS = ["tf", "torch", "jax"]
TIDE = ["tide-eager", "tide-traced", "tide-traced-s2"]


def load_round_files(out):
    res = {}  # config -> list of (round, record)
    for f in sorted(glob.glob(os.path.join(out, "r*.*.json"))):
        m = re.match(r"r(\d+)\.(.+)\.json$", os.path.basename(f))
        if not m:
            continue
        r, c = int(m.group(1)), m.group(2)
        text = open(f).read().strip()
        if not text:
            print(f"warning: {f} is empty (see {f}.log)", file=sys.stderr)
            continue
        if c.startswith("tide"):
            d = json.loads(text)
            reps = [b for b in d["benchmarks"] if b.get("run_type") == "iteration"]
            rec = {
                "ms": statistics.median(b["real_time"] for b in reps),
                "all": [b["real_time"] for b in reps],
                "steps": sum(b["iterations"] for b in reps),
                "iters_per_rep": reps[-1]["iterations"],
                "loss_last": reps[-1].get("loss"),
                "cpu_ms": statistics.median(b["cpu_ms_per_step"] for b in reps)
                if "cpu_ms_per_step" in reps[0] else None,
                "pool_threads": reps[0].get("pool_threads"),
                "blas_threads": reps[0].get("blas_threads"),
                "context": d["context"],
            }
        else:
            d = json.loads(text.splitlines()[-1])
            rec = {"ms": d["ms_per_step_median"], "all": d["ms_per_step_all"],
                   "steps": d["steps"], "cpu_ms": d["cpu_ms_per_step"], "peer": d}
        res.setdefault(c, []).append((r, rec))
    return res


def fmt(x, nd=2):
    return "-" if x is None else f"{x:.{nd}f}"


def main():
    out = sys.argv[1]
    res = load_round_files(out)
    rounds = sorted({r for v in res.values() for r, _ in v})
    med = {c: statistics.median(rec["ms"] for _, rec in v) for c, v in res.items()}
    per_round = {c: {r: rec["ms"] for r, rec in v} for c, v in res.items()}
    # The least-disturbed round: on a shared machine load only ever adds time.
    best = {c: min(rec["ms"] for _, rec in v) for c, v in res.items()}
    order = [c for c in TIDE + PEERS if c in res]
    lines, md = [], []

    ctx = open(os.path.join(out, "context.txt")).read().rstrip()
    lines += ["", "== context", ctx]

    # ---- what each ran with
    lines += ["", "== settings (as each framework set itself up; no env var set by the user)"]
    md_settings = []
    if "tide-eager" in res:
        rec = res["tide-eager"][0][1]
        c = rec["context"]
        s = (f"tide: pool threads {fmt(rec['pool_threads'], 0)}, OpenBLAS threads "
             f"{fmt(rec['blas_threads'], 0)} (tide_bench context: {c.get('tide_threads', '?')}; "
             f"OPENBLAS_CORETYPE {c.get('OPENBLAS_CORETYPE', '?')}); TIDE_BLAS "
             f"{c.get('tide_blas', '?')}")
        lines.append(s)
        md_settings.append(s)
    for p in PEERS:
        if p not in res:
            continue
        d = res[p][0][1]["peer"]
        if p == "tf":
            s = (f"TensorFlow {d['version']}: tf.function; intra/inter-op threads "
                 f"{d['intra_op_threads']}/{d['inter_op_threads']} (0 = one per core, "
                 f"{d['cpu_count']} cores); oneDNN {'on' if d['onednn_on'] else 'off'} "
                 f"(built with it: {d['onednn_built']}, TF_ENABLE_ONEDNN_OPTS "
                 f"{d['TF_ENABLE_ONEDNN_OPTS'] or 'unset'})")
        elif p == "torch":
            s = (f"PyTorch {d['version']}: eager, torch.get_num_threads() {d['threads']}, "
                 f"interop {d['interop_threads']}; BLAS {d['build'].get('BLAS_INFO', '?')}, "
                 f"oneDNN (mkldnn) {'on' if d['onednn_on'] else 'off'}, "
                 f"{', '.join(x for x in d['parallel'] if x.startswith('ATen'))}")
        else:
            s = (f"JAX {d['version']} (jaxlib {d['jaxlib']}): jax.jit on {d['backend']}, "
                 f"XLA:CPU intra-op pool {d['threads']} (one per core); GEMMs compiled to "
                 f"{', '.join(d['hlo_fusion_kinds']) or 'no custom fusions'} + "
                 f"{d['hlo_plain_dots']} plain dots; oneDNN "
                 f"{'on' if d['onednn_on'] else 'off'}")
        if d.get("user_env"):
            s += f"; env {d['user_env']}"
        lines.append(s)
        md_settings.append(s)

    # ---- loss check
    lines += ["", "== loss check (same model, data distribution, loss and SGD)"]
    md_loss = []
    first = None
    fs = os.path.join(out, "tide_first_step.json")
    if os.path.exists(fs):
        b = json.load(open(fs))["benchmarks"][0]
        if b["iterations"] == 1:
            first = b["loss"]
    peer_first = {p: res[p][0][1]["peer"]["loss_first"] for p in PEERS if p in res}
    s = (f"first step's loss: tide {fmt(first, 4)} (own Philox data and init); "
         + ", ".join(f"{p} {v:.4f}" for p, v in peer_first.items())
         + " (the peers share numpy's data and init)")
    lines.append(s)
    md_loss.append(s)
    if "tide-eager" in res and peer_first:
        rec = res["tide-eager"][-1][1]
        n = rec["iters_per_rep"]
        pl = {p: res[p][-1][1]["peer"]["losses"] for p in PEERS if p in res}
        s = (f"loss at step {n}: tide {fmt(rec['loss_last'], 4)}; "
             + ", ".join(f"{p} {v[n - 1]:.4f}" for p, v in pl.items() if len(v) >= n))
        lines.append(s)
        md_loss.append(s)

    # ---- the table
    lines += ["", "== ms per step (median over rounds of each round's median; best = the "
              "fastest round) and ratios of the medians"]
    hdr = ["config", "ms/step (median)", "best round", "per round", "cpu ms/step",
           "tide-eager / it", "tide-traced / it"]
    md += ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    lines.append(f"{'config':15s} {'ms/step':>9s} {'best':>7s}  {'per round':34s} {'cpu ms/step':>11s}  "
                 f"{'eager/it':>9s} {'traced/it':>9s}")
    for c in order:
        pr = " ".join(fmt(per_round[c].get(r), 1) for r in rounds)
        cpu = statistics.median(rec["cpu_ms"] for _, rec in res[c] if rec["cpu_ms"] is not None) \
            if any(rec["cpu_ms"] is not None for _, rec in res[c]) else None
        re_ = med["tide-eager"] / med[c] if "tide-eager" in med else None
        rt = med["tide-traced"] / med[c] if "tide-traced" in med else None
        lines.append(f"{c:15s} {med[c]:9.2f} {best[c]:7.2f}  {pr:34s} {fmt(cpu, 1):>11s}  "
                     f"{fmt(re_, 3):>9s} {fmt(rt, 3):>9s}")
        md.append(f"| {c} | {med[c]:.2f} | {best[c]:.2f} | {pr} | {fmt(cpu, 1)} | {fmt(re_, 3)} | {fmt(rt, 3)} |")

    # ---- the targets
    def paired(a, b):
        return [per_round[a][r] / per_round[b][r] for r in rounds
                if r in per_round.get(a, {}) and r in per_round.get(b, {})]

    targets = []
    if "tide-eager" in med and "tf" in med:
        targets.append(("tide eager <= 0.95 x TF tf.function", "tide-eager", "tf", 0.95))
    if "tide-traced" in med and "tide-eager" in med:
        targets.append(("tide traced (streams 1) <= tide eager", "tide-traced", "tide-eager", 1.0))
    if "tide-traced-s2" in med and "tide-eager" in med:
        targets.append(("(info) tide traced streams 2 <= tide eager", "tide-traced-s2",
                        "tide-eager", 1.0))
    lines += ["", "== targets"]
    md_t = []
    for name, a, b, lim in targets:
        ratio = med[a] / med[b]
        pr = paired(a, b)
        verdict = "met" if ratio <= lim else "NOT met"
        agree = sum(x <= lim for x in pr)
        bratio = best[a] / best[b]
        bverdict = "met" if bratio <= lim else "NOT met"
        s = (f"{name}: {a}/{b} = {ratio:.3f} (limit {lim}) -> {verdict}; best rounds "
             f"{bratio:.3f} -> {bverdict}; per round "
             f"{' '.join(f'{x:.3f}' for x in pr)} ({agree} of {len(pr)} rounds within the limit)")
        lines.append(s)
        md_t.append(s)

    # ---- load
    lines += ["", "== load (1-min load average before / after each configuration)"]
    md_load = []
    tsv = os.path.join(out, "load.tsv")
    if os.path.exists(tsv):
        rows = [l.split("\t") for l in open(tsv).read().strip().splitlines()[1:]]
        for r in rounds:
            rr = [x for x in rows if int(x[0]) == r]
            s = (f"round {r} ({rr[0][2]}-{rr[-1][2]} UTC): "
                 + ", ".join(f"{x[1]} {x[3]}/{x[4]}" for x in rr))
            lines.append(s)
            md_load.append(s)
    print("\n".join(lines))

    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("```\n" + ctx + "\n```\n\n")
        f.write("\n".join(f"- {s}" for s in md_settings) + "\n\n")
        f.write("\n".join(md) + "\n\n")
        f.write("\n".join(f"- {s}" for s in md_t) + "\n\n")
        f.write("\n".join(f"- {s}" for s in md_loss) + "\n\n")
        f.write("\n".join(f"- {s}" for s in md_load) + "\n")
    print(f"\n(written: {os.path.join(out, 'summary.md')})")


if __name__ == "__main__":
    main()
