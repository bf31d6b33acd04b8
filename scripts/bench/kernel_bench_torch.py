#!/usr/bin/env python3
"""PyTorch on the shapes and with the method of kernel_bench (the peer in the same run).

Device-to-device copy of 1 GiB (bytes read plus written); GEMV at batch 1 through F.linear with
f32 and bf16 weights, and with int4 weights through torch._weight_int4pack_mm (tinygemm, the
kernel gpt-fast uses) where this PyTorch has it on CUDA, each rotating over copies of the matrix
whose total exceeds --set-mib so the L2 cannot serve them; GEMM rates for fp32 without TF32 and
bf16. Times are wall-clock over back-to-back calls after a warm-up pass, as in kernel_bench.
Prints Markdown.
"""
import argparse
import time

import torch
import torch.nn.functional as F

SHAPES = [("attn q/o 4096x4096", 4096, 4096), ("mlp up 14336x4096", 14336, 4096),
          ("mlp down 4096x14336", 4096, 14336), ("lm head 32000x4096", 32000, 4096)]


def seconds_per_call(fn, warm, reps):
    for i in range(warm):
        fn(i)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(reps):
        fn(i)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps


def copy_gbs(nbytes):
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    s = seconds_per_call(lambda i: dst.copy_(src), 2, 20)
    return 2 * nbytes / s / 1e9


def rotating(make, bytes_each, set_bytes):
    return [make() for _ in range(max(1, set_bytes // bytes_each))]


def gemv_dense(rows, cols, dtype, set_bytes, reps):
    w0 = torch.rand(rows, cols, device="cuda", dtype=torch.float32).mul_(2).sub_(1).to(dtype)
    ws = rotating(lambda: w0.clone(), w0.numel() * w0.element_size(), set_bytes)
    x = torch.rand(1, cols, device="cuda", dtype=dtype)
    s = seconds_per_call(lambda i: F.linear(x, ws[i % len(ws)]), len(ws), reps)
    nbytes = w0.numel() * w0.element_size() + (rows + cols) * w0.element_size()
    return s * 1e6, nbytes / s / 1e9


def gemv_int4(rows, cols, group, set_bytes, reps):
    codes = torch.randint(0, 16, (rows, cols // 2), dtype=torch.uint8, device="cuda")
    packed0 = torch._convert_weight_to_int4pack(codes, 2)
    sz0 = torch.rand(cols // group, rows, 2, device="cuda", dtype=torch.bfloat16)
    nbytes_each = rows * cols // 2 + sz0.numel() * 2
    pairs = rotating(lambda: (packed0.clone(), sz0.clone()), nbytes_each, set_bytes)
    x = torch.rand(1, cols, device="cuda", dtype=torch.bfloat16)

    def call(i):
        packed, sz = pairs[i % len(pairs)]
        return torch._weight_int4pack_mm(x, packed, group, sz)

    s = seconds_per_call(call, len(pairs), reps)
    return s * 1e6, (nbytes_each + 2 * (rows + cols)) / s / 1e9


def gemm_tflops(n, dtype, reps):
    a = torch.ones(n, n, device="cuda", dtype=dtype)
    s = seconds_per_call(lambda i: a @ a, 2, reps)
    return 2 * n ** 3 / s / 1e12


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--set-mib", type=int, default=1024)
    parser.add_argument("--gemm-n", type=int, default=8192)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    set_bytes = args.set_mib << 20
    print(f"# PyTorch {torch.__version__} on {torch.cuda.get_device_name(0)}\n")
    copy = copy_gbs(1 << 30)
    print(f"device-to-device copy of 1 GiB: {copy:.0f} GB/s (read + written)\n")
    print("| shape | format | GEMV us | GEMV GB/s | of copy bw |")
    print("|---|---|---:|---:|---:|")
    for name, rows, cols in SHAPES:
        rows_out = [("f32", lambda: gemv_dense(rows, cols, torch.float32, set_bytes, args.reps)),
                    ("bf16", lambda: gemv_dense(rows, cols, torch.bfloat16, set_bytes, args.reps))]
        for group in (32, 64, 128):
            rows_out.append((f"int4 g{group} (tinygemm)",
                             lambda g=group: gemv_int4(rows, cols, g, set_bytes, args.reps)))
        for label, run in rows_out:
            try:
                us, gbs = run()
                print(f"| {name} | {label} | {us:.1f} | {gbs:.0f} | {100 * gbs / copy:.1f}% |",
                      flush=True)
            except (RuntimeError, AttributeError) as err:
                first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
                print(f"| {name} | {label} | unavailable: {first_line[:80]} | | |", flush=True)
            torch.cuda.empty_cache()
    n = args.gemm_n
    print(f"\ntorch.matmul {n}x{n}x{n}: fp32 (no TF32) {gemm_tflops(n, torch.float32, 10):.1f} "
          f"TFLOP/s, bf16 {gemm_tflops(n, torch.bfloat16, 20):.1f} TFLOP/s")


if __name__ == "__main__":
    main()
