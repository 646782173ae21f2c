#!/usr/bin/env python3
"""Prints the CUDA targets of the backend, the traced mode and the CNN as
met / NOT met, from one run's files:
  tide_bench_cuda.json  (tide_bench_cuda --benchmark_out=... with repetitions)
  torch_cuda.json       (bench/torch_cuda_anchor.py's output; optional)
A row whose benchmarks or anchor are missing is left out; skipped benchmarks are listed
with their reason at the end.
Usage: python3 bench/summarize_cuda.py DIR
"""
import json
import os
import sys


def medians(path):
    """The median rows by name: the bare function name ("BM_CudaMatmul4096") and the full
    name without "/real_time" ("BM_CudaConv/conv:0/pass:1"); and the skipped ones'
    messages, by full name."""
    with open(path) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            # Google Benchmark writes the file as it goes: a run that aborted leaves it cut.
            sys.exit(f"{path}: not complete JSON ({e}); the benchmark run stopped early, "
                     "see its log (bench_cuda.log) for why")
    out, skipped = {}, {}
    for b in data["benchmarks"]:
        name = b.get("run_name", b["name"])
        full = name[:-len("/real_time")] if name.endswith("/real_time") else name
        if b.get("error_occurred"):
            skipped[full] = b.get("error_message", "?")
            continue
        if b.get("aggregate_name", "median") != "median":
            continue
        out[name.split("/")[0]] = b
        out[full] = b
    return out, skipped, data.get("context", {})


# bench_cuda_cnn.cpp's kConvs (3x3, padding 1) and passes.
CONVS = ["1->32 28x28 b128", "32->64 14x14 b128", "64->64 56x56 b32"]
PASSES = ["forward", "input grad", "weight grad"]
ANCHORS = ((1, "cuDNN determ."), (0, "cuDNN best"))  # algo:1 tide's rule, algo:0 heuristics' first


def conv_rows(tb, ms):
    """Issue 14: per convolution, the three passes together (forward + backward) through
    tide against cuDNN called directly with the algorithm tide's rule picks (the first
    deterministic, "determ.") and with the heuristics' first ("best"); then each pass.
    Ratio = anchor time / tide time (= tide's rate / cuDNN's); target >= 0.95."""
    rows = []
    for i, conv in enumerate(CONVS):
        tide = [f"BM_CudaConv/conv:{i}/pass:{p}" for p in range(3)]
        per_pass = []
        for algo, anchor in ANCHORS:
            cudnn = [f"BM_CudnnConv/conv:{i}/pass:{p}/algo:{algo}" for p in range(3)]
            if all(n in tb for n in tide + cudnn):
                t, a = sum(map(ms, tide)), sum(map(ms, cudnn))
                rows.append((f"conv{i} {conv} fwd+bwd, tide / {anchor}",
                             f"{a / t:.3f} ({t * 1e3:.1f} vs {a * 1e3:.1f} us)", ">= 0.95",
                             a / t >= 0.95))
            for p, pname in enumerate(PASSES):
                if tide[p] in tb and cudnn[p] in tb:
                    t, a = ms(tide[p]), ms(cudnn[p])
                    n = int(tb[cudnn[p]].get("cudnn_algo", -1))
                    per_pass.append((p, algo, (f"  conv{i} {pname}, tide / {anchor} (algo {n})",
                                               f"{a / t:.3f} ({t * 1e3:.1f} vs {a * 1e3:.1f} us)",
                                               ">= 0.95", a / t >= 0.95)))
        rows += [row for _, _, row in sorted(per_pass, key=lambda e: (e[0], -e[1]))]
    return rows


def cnn_rows(tb, th, ms):
    """Issue 14: the Fashion-MNIST CNN step against PyTorch on the same GPU."""
    rows = []
    t, tg = th.get("cnn_step_ms"), th.get("cnn_step_graph_ms")
    for name, mode in (("BM_CudaCnnStep/traced:0", "eager"), ("BM_CudaCnnStep/traced:1", "traced")):
        if name not in tb:
            continue
        m = ms(name)
        rows.append((f"CNN step {mode}, tide / PyTorch eager",
                     f"{m / t:.3f} ({m:.3f} vs {t:.3f} ms)" if t else f"{m:.3f} ms vs ?",
                     "<= 1.0" if mode == "eager" else "reported",
                     (m / t <= 1.0) if t and mode == "eager" else None))
        if mode == "traced" and tg:
            rows.append(("CNN step traced, tide / PyTorch CUDA graph",
                         f"{m / tg:.3f} ({m:.3f} vs {tg:.3f} ms)", "<= 1.0", m / tg <= 1.0))
    return rows


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "."
    bench_path = os.path.join(d, "tide_bench_cuda.json")
    if not os.path.exists(bench_path):
        sys.exit(f"{bench_path}: not found (run tide_bench_cuda with --benchmark_out)")
    tb, skipped, ctx = medians(bench_path)
    th = {}
    try:  # empty or partial when the anchor failed
        with open(os.path.join(d, "torch_cuda.json")) as f:
            th = json.load(f)
    except (OSError, ValueError):
        pass
    print(f"device: {ctx.get('device', '?')}; PyTorch {th.get('torch', 'not measured')}")

    def edges(name):  # the programmatic edges the benchmark's graphs were built with
        return f"{tb[name].get('programmatic_edges', 0):.0f}"

    def ms(name):
        b = tb[name]
        scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ns")]
        return b["real_time"] * scale

    rows = []
    if "BM_CudaEnqueueTinyAdd" in tb and "BM_CpuEnqueueTinyAdd" in tb:
        g, c = ms("BM_CudaEnqueueTinyAdd") * 1e3, ms("BM_CpuEnqueueTinyAdd") * 1e3
        rows.append(("enqueue of a tiny op, cuda vs cpu (us)", f"{g:.3f} vs {c:.3f}",
                     "same frontend cost", g <= 1.5 * c))
    if "BM_CudaTinyOpThroughput" in tb:
        ops = 10000 / (ms("BM_CudaTinyOpThroughput") / 1e3)
        t = th.get("tiny_ops_per_s")
        rows.append(("executed tiny ops per s, tide vs PyTorch eager",
                     f"{ops:,.0f} vs {t:,.0f}" if t else f"{ops:,.0f} vs ?", "reported",
                     None))
    if "BM_CudaMatmul4096" in tb and "BM_CublasSgemm4096" in tb:
        r = ms("BM_CublasSgemm4096") / ms("BM_CudaMatmul4096")
        rows.append(("matmul 4096^3 f32, tide / direct cuBLAS throughput", f"{r:.3f}",
                     ">= 0.95", r >= 0.95))
    if "BM_CudaMatmul4096x8" in tb and "BM_CublasSgemm4096x8" in tb:
        r = ms("BM_CublasSgemm4096x8") / ms("BM_CudaMatmul4096x8")
        rows.append(("  the same, 8 products per wait (the kernels' rate)", f"{r:.3f}",
                     "reported", None))
    # TF32, bfloat16, float16 (bench_cuda.cpp's kFastGemms), 8 per wait, against cublasGemmEx.
    for arg, label in enumerate(["tf32", "bfloat16", "float16"]):
        mine = f"BM_CudaMatmul4096Fastx8/type:{arg}"
        anchor = f"BM_CublasGemmEx4096Fastx8/type:{arg}"
        if mine in tb and anchor in tb:
            r = ms(anchor) / ms(mine)
            tflops = tb[mine].get("TFLOP/s", 0)
            rows.append((f"matmul 4096^3 {label}, tide / direct cublasGemmEx",
                         f"{r:.3f} ({tflops:.0f} TFLOP/s)", ">= 0.95" if label == "bfloat16"
                         else "reported", r >= 0.95 if label == "bfloat16" else None))
    if "BM_CudaAdd64M" in tb and "BM_CudaCopyD2D64M" in tb:
        add_bw = 64 * 2**20 * 12 / (ms("BM_CudaAdd64M") / 1e3)
        copy_bw = 64 * 2**20 * 8 / (ms("BM_CudaCopyD2D64M") / 1e3)
        r = add_bw / copy_bw
        rows.append(("add 64M floats, bandwidth / D2D copy bandwidth",
                     f"{r:.3f} ({add_bw / 1e9:.0f} vs {copy_bw / 1e9:.0f} GB/s)", ">= 0.85",
                     r >= 0.85))
    if "BM_CudaTextbookMlpStep" in tb:
        t = th.get("mlp_step_ms")
        m = ms("BM_CudaTextbookMlpStep")
        rows.append(("textbook MLP step eager, tide / PyTorch eager",
                     f"{m / t:.3f} ({m:.3f} vs {t:.3f} ms)" if t else f"{m:.3f} ms vs ?",
                     "<= 1.0", (m / t <= 1.0) if t else None))
    # Issue 10: traced mode on the GPU.
    if "BM_CudaTracedTextbookMlpStep" in tb and "BM_CudaTextbookMlpStep" in tb:
        tr, ea = ms("BM_CudaTracedTextbookMlpStep"), ms("BM_CudaTextbookMlpStep")
        rows.append(("textbook MLP step traced / eager on cuda", f"{tr / ea:.3f} ({tr:.3f} vs {ea:.3f} ms)",
                     "<= 0.8", tr / ea <= 0.8))
        t = th.get("mlp_step_graph_ms")
        if t:
            rows.append(("MLP step traced, tide / PyTorch CUDA graph", f"{tr / t:.3f} ({tr:.3f} vs {t:.3f} ms)",
                         "<= 1.0", tr / t <= 1.0))
    # Graphs join tide's kernels by programmatic edges by default (TIDE_CUDA_PDL=0: ordinary
    # edges): the targets are on the default, the ordinary edges are reported beside it.
    def default_and_ordinary(programmatic, ordinary):
        if programmatic in tb:
            return ms(programmatic), ms(ordinary) if ordinary in tb else None
        return (ms(ordinary), None) if ordinary in tb else (None, None)
    g, g_ordinary = default_and_ordinary("BM_CudaGraphTinyAddsProgrammatic", "BM_CudaGraphTinyAdds")
    if g is not None:
        per_node_us = g * 1e3 / 10000
        rows.append(("graph replay per node (10000 tiny adds, us)", f"{per_node_us:.3f}",
                     "<= 1.0", per_node_us <= 1.0))
        if g_ordinary is not None:
            rows.append(("  the same with ordinary edges (TIDE_CUDA_PDL=0, us)",
                         f"{g_ordinary * 1e3 / 10000:.3f} (ordinary / programmatic: "
                         f"{g_ordinary / g:.2f}; {edges('BM_CudaGraphTinyAddsProgrammatic')} edges)",
                         "reported", None))
        t = th.get("tiny_unrolled_graph_ms")
        if t:
            rows.append(("unrolled 10000 adds as a graph, tide / PyTorch", f"{g / t:.3f} ({g:.3f} vs {t:.3f} ms)",
                         "reported", None))
    w, w_ordinary = default_and_ordinary("BM_CudaWhileTinyAddsProgrammatic", "BM_CudaWhileTinyAdds")
    if w is not None:
        if "BM_CudaTinyOpThroughput" in tb:
            r = ms("BM_CudaTinyOpThroughput") / w
            rows.append(("10000 adds: WHILE node speed-up over eager async", f"{r:.1f}x ({w:.3f} ms)",
                         ">= 100x", r >= 100))
        t = th.get("tiny_unrolled_graph_ms")
        if t:
            rows.append(("10000 adds: WHILE node / PyTorch unrolled CUDA graph",
                         f"{w / t:.3f} ({w:.3f} vs {t:.3f} ms)", "< 1.0", w / t < 1.0))
        if w_ordinary is not None:
            rows.append(("  the WHILE node per iteration, ordinary edges (TIDE_CUDA_PDL=0, us)",
                         f"{w_ordinary * 1e3 / 10000:.3f} (ordinary / programmatic: {w_ordinary / w:.2f}; "
                         f"{edges('BM_CudaWhileTinyAddsProgrammatic')} edges)", "reported", None))
            if "BM_CudaWhileTinyAddsOnePerLaunch" in tb:
                o = ms("BM_CudaWhileTinyAddsOnePerLaunch")
                rows.append(("  ordinary edges, 16 vs 1 iterations per launch (us)",
                             f"{w_ordinary * 1e3 / 10000:.3f} vs {o * 1e3 / 10000:.3f} ({o / w_ordinary:.2f}x)",
                             "reported", None))
    if "BM_CudaFusedLoopTinyAdds" in tb and "BM_CudaTinyOpThroughput" in tb:
        f = ms("BM_CudaFusedLoopTinyAdds")
        r = ms("BM_CudaTinyOpThroughput") / f
        rows.append(("10000 adds: fused loop (one kernel) speed-up over eager async",
                     f"{r:.1f}x ({f:.3f} ms)", ">= 100x", r >= 100))
        t = th.get("tiny_unrolled_graph_ms")
        if t:
            rows.append(("10000 adds: fused loop / PyTorch unrolled CUDA graph",
                         f"{f / t:.4f} ({f:.3f} vs {t:.3f} ms)", "< 1.0", f / t < 1.0))
    if "BM_CudaFusedLoopThreeSteps" in tb:
        per_it_ns = ms("BM_CudaFusedLoopThreeSteps") * 1e6 / 10000
        compiled = tb["BM_CudaFusedLoopThreeSteps"].get("compiled_chains", 0)
        rows.append((f"fused loop of a 3-step body, per iteration (ns), "
                     f"{'compiled' if compiled else 'interpreted'}", f"{per_it_ns:.1f}",
                     "reported", None))
        if "BM_CudaFusedLoopThreeStepsInterpreted" in tb:
            it_ns = ms("BM_CudaFusedLoopThreeStepsInterpreted") * 1e6 / 10000
            rows.append(("the same through the step interpreter (ns)",
                         f"{it_ns:.1f} ({it_ns / per_it_ns:.1f}x the compiled)", "reported",
                         None))
    rows += conv_rows(tb, ms)
    rows += cnn_rows(tb, th, ms)
    for what, value, target, ok in rows:
        verdict = "" if ok is None else ("met" if ok else "NOT met")
        print(f"  {what:55s} {value:32s} target {target:18s} {verdict}")
    if th.get("cnn_error"):
        print(f"  PyTorch CNN step failed: {th['cnn_error']}")
    for name, why in sorted(skipped.items()):
        print(f"  skipped: {name}: {why}")


if __name__ == "__main__":
    main()
