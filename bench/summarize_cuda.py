#!/usr/bin/env python3
"""Prints the CUDA targets of the backend issue as met / NOT met, from one run's files:
  tide_bench_cuda.json  (tide_bench_cuda --benchmark_out=... with repetitions)
  torch_cuda.json       (bench/torch_cuda_anchor.py's output)
Usage: python3 bench/summarize_cuda.py DIR
"""
import json
import os
import sys


def medians(path):
    with open(path) as f:
        data = json.load(f)
    out = {}
    for b in data["benchmarks"]:
        name = b.get("run_name", b["name"])
        if b.get("aggregate_name", "median") != "median":
            continue
        out[name.split("/")[0]] = b
    return out, data.get("context", {})


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "."
    tb, ctx = medians(os.path.join(d, "tide_bench_cuda.json"))
    torch_path = os.path.join(d, "torch_cuda.json")
    th = json.load(open(torch_path)) if os.path.exists(torch_path) else {}
    print(f"device: {ctx.get('device', '?')}; PyTorch {th.get('torch', 'not measured')}")

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
    if "BM_CudaGraphTinyAdds" in tb:
        per_node_us = ms("BM_CudaGraphTinyAdds") * 1e3 / 10000
        rows.append(("graph replay per node (10000 tiny adds, us)", f"{per_node_us:.3f}",
                     "<= 1.0", per_node_us <= 1.0))
        t = th.get("tiny_unrolled_graph_ms")
        if t:
            m = ms("BM_CudaGraphTinyAdds")
            rows.append(("unrolled 10000 adds as a graph, tide / PyTorch", f"{m / t:.3f} ({m:.3f} vs {t:.3f} ms)",
                         "reported", None))
    if "BM_CudaWhileTinyAdds" in tb:
        w = ms("BM_CudaWhileTinyAdds")
        if "BM_CudaTinyOpThroughput" in tb:
            r = ms("BM_CudaTinyOpThroughput") / w
            rows.append(("10000 adds: WHILE node speed-up over eager async", f"{r:.1f}x ({w:.3f} ms)",
                         ">= 100x", r >= 100))
        t = th.get("tiny_unrolled_graph_ms")
        if t:
            rows.append(("10000 adds: WHILE node / PyTorch unrolled CUDA graph",
                         f"{w / t:.3f} ({w:.3f} vs {t:.3f} ms)", "< 1.0", w / t < 1.0))
    if "BM_CudaFusedLoopTinyAdds" in tb and "BM_CudaTinyOpThroughput" in tb:
        f = ms("BM_CudaFusedLoopTinyAdds")
        r = ms("BM_CudaTinyOpThroughput") / f
        rows.append(("10000 adds: fused loop (one kernel) speed-up over eager async",
                     f"{r:.1f}x ({f:.3f} ms)", "reported", None))
    for what, value, target, ok in rows:
        verdict = "" if ok is None else ("met" if ok else "NOT met")
        print(f"  {what:55s} {value:32s} target {target:18s} {verdict}")


if __name__ == "__main__":
    main()
