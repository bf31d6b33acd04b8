#!/usr/bin/env python3
"""Compares ms-diagnose's GPU readings and probes with the driver's tools and PyTorch.

  diagnose_compare.py smi RECORD.json
      Each GPU of `ms-diagnose gpu-health --record` against `nvidia-smi --query-gpu` (one
      field per call, so a field this driver does not know is "n/a" rather than an error).
  diagnose_compare.py rates CHECK.json TORCH.json
      check's GPU metrics (rank 0 of `ms-diagnose check --json`) against
      diagnose_torch.py's, within 10%.
Prints Markdown tables; exits 1 when a compared field differs or a rate is off by more than 10%.
"""
import json
import subprocess
import sys

MIB = 1 << 20


def smi(index, field):
    try:
        text = subprocess.run(["nvidia-smi", "-i", str(index), "--query-gpu=" + field,
                               "--format=csv,noheader,nounits"], capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return None if not text or "not a valid field" in text or "N/A" in text else text


def number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def on_off(flag):
    return None if flag is None else ("Enabled" if flag else "Disabled")


# (nvidia-smi field, reading -> expected text or number, how to compare)
def checks(r):
    cc = (f"{r['compute_major']}.{r['compute_minor']}" if "compute_major" in r else None)
    return [
        ("name", r.get("name"), "text"),
        ("pci.bus_id", r.get("bus_id"), "text"),
        ("driver_version", r.get("driver_version"), "text"),
        ("compute_cap", cc, "text"),
        ("memory.total", r["memory_total_bytes"] / MIB if "memory_total_bytes" in r else None, 1.0),
        ("clocks.max.sm", r.get("sm_clock_max_mhz"), 0.0),
        ("clocks.max.memory", r.get("memory_clock_max_mhz"), 0.0),
        ("power.limit", r.get("power_limit_w"), 1.0),
        ("power.default_limit", r.get("power_default_limit_w"), 1.0),
        ("temperature.gpu", r.get("temperature_c"), 3.0),
        ("ecc.mode.current", on_off(r.get("ecc_enabled")), "text"),
        ("mig.mode.current", on_off(r.get("mig_enabled")), "text"),
        ("pcie.link.gen.max", r.get("pcie_gen_max"), 0.0),
        ("pcie.link.width.max", r.get("pcie_width_max"), 0.0),
        ("pcie.link.width.current", r.get("pcie_width"), 0.0),
        ("ecc.errors.uncorrected.volatile.total", r.get("ecc_volatile_uncorrected"), 0.0),
        ("ecc.errors.corrected.volatile.total", r.get("ecc_volatile_corrected"), 0.0),
        ("ecc.errors.uncorrected.aggregate.total", r.get("ecc_aggregate_uncorrected"), 0.0),
    ]


def compare_smi(record_path):
    gpus = json.load(open(record_path))["gpus"]
    bad = 0
    print("| gpu | nvidia-smi field | nvidia-smi | ms-diagnose | agree |")
    print("|---|---|---|---|---|")
    for r in gpus:
        if "lost" in r:
            print(f"| {r['index']} | (lost) | | {r['lost']} | |")
            continue
        for field, ours, how in checks(r):
            theirs = smi(r["index"], field)
            if theirs is None or ours is None:
                verdict = "not compared"
            elif how == "text":
                verdict = "yes" if str(ours).strip().lower() == theirs.strip().lower() or (
                    field == "pci.bus_id" and theirs.lower().endswith(str(ours).lower()[-12:])) else "NO"
            else:
                verdict = "yes" if number(theirs) is not None and abs(number(theirs) - ours) <= how else "NO"
            bad += verdict == "NO"
            print(f"| {r['index']} | {field} | {theirs} | {ours} | {verdict} |")
    print(f"\n{bad} field(s) disagree")
    return 1 if bad else 0


def compare_rates(check_path, torch_path):
    metrics = json.load(open(check_path))["ranks"][0]["metrics"]
    peer = json.load(open(torch_path))
    bad = 0
    print(f"PyTorch {peer.get('torch')} on {peer.get('device')}\n")
    print("| metric | ms-diagnose | PyTorch | ours / PyTorch | within 10% |")
    print("|---|---:|---:|---:|---|")
    for name in ("gpu_sgemm_gflops", "gpu_bf16_gemm_gflops", "gpu_read_gbs", "gpu_copy_gbs",
                 "gpu_h2d_gbs", "gpu_d2h_gbs"):
        ours, theirs = metrics.get(name), peer.get(name)
        if ours is None or theirs is None:
            print(f"| {name} | {ours} | {theirs} | | not compared |")
            bad += 1
            continue
        ratio = ours / theirs
        ok = abs(ratio - 1) <= 0.10
        bad += not ok
        print(f"| {name} | {ours:.1f} | {theirs:.1f} | {ratio:.3f} | {'yes' if ok else 'NO'} |")
    for name in ("gpu_sgemm_peak_pct", "gpu_bf16_gemm_peak_pct"):
        if name in metrics:
            print(f"\n{name}: {metrics[name]:.1f}% of the dense peak at the maximum SM clock")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "smi":
        sys.exit(compare_smi(sys.argv[2]))
    if len(sys.argv) == 4 and sys.argv[1] == "rates":
        sys.exit(compare_rates(sys.argv[2], sys.argv[3]))
    print(__doc__)
    sys.exit(2)
