#!/usr/bin/env python3
"""PyTorch peers of `ms-diagnose check`'s GPU probes, measured in the same run.

Same sizes and the same counting as lib/diag/gpu_check.h: GEMM GFLOP/s of an n x n x n product
(fp32 with TF32 off; bf16 inputs, which PyTorch writes as bf16 where ours writes fp32), device
read (x.sum() over the buffer, bytes read), device copy (y.copy_(x), bytes read plus written:
the cudaMemcpyAsync device-to-device loop), and host-to-device / device-to-host copies from
pinned memory (cudaMemcpyAsync). Each is the best of --reps after one warm-up, timed by CUDA
events around one call. Prints one JSON object keyed like check's metrics.
"""
import argparse
import json

import torch


def best_seconds(fn, reps):
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return best


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sgemm-n", type=int, default=8192)
    parser.add_argument("--bf16-n", type=int, default=8192)
    parser.add_argument("--bytes", type=int, default=1 << 30)
    parser.add_argument("--reps", type=int, default=10)
    a = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda", 0)
    out = {"torch": torch.__version__, "device": torch.cuda.get_device_name(dev)}

    for name, n, dtype in (("gpu_sgemm_gflops", a.sgemm_n, torch.float32),
                           ("gpu_bf16_gemm_gflops", a.bf16_n, torch.bfloat16)):
        x = torch.ones(n, n, dtype=dtype, device=dev)
        y = torch.ones(n, n, dtype=dtype, device=dev)
        out[name] = 2.0 * n ** 3 / best_seconds(lambda: torch.matmul(x, y), a.reps) / 1e9
        del x, y

    floats = a.bytes // 4
    x = torch.zeros(floats, dtype=torch.float32, device=dev)
    out["gpu_read_gbs"] = floats * 4 / best_seconds(lambda: x.sum(), a.reps) / 1e9
    y = torch.empty_like(x)
    out["gpu_copy_gbs"] = 2.0 * floats * 4 / best_seconds(lambda: y.copy_(x), a.reps) / 1e9
    del y
    host = torch.ones(floats, dtype=torch.float32).pin_memory()
    out["gpu_h2d_gbs"] = floats * 4 / best_seconds(lambda: x.copy_(host, non_blocking=True),
                                                  a.reps) / 1e9
    out["gpu_d2h_gbs"] = floats * 4 / best_seconds(lambda: host.copy_(x, non_blocking=True),
                                                  a.reps) / 1e9
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
