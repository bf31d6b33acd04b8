"""The PyTorch yardstick for scripts/bench/train_gpu_bench.sh: the Llama-shaped decoder ms-train
trains (RMSNorm, rotary grouped-query attention, SwiGLU, untied embeddings; the block is
train_bench_torch.py's), AdamW on random tokens, on one device. Eager with
scaled_dot_product_attention (a manual causal softmax where the installed PyTorch lacks it),
optionally torch.compile; f32 (TF32 off, as ms-train) or bf16
autocast. Prints one JSON line: tokens/s and MFU over the timed steps, peak memory."""
import argparse
import json
import time

import torch
import torch.nn.functional as F

from train_bench_torch import Block  # the CPU bench's block: one model definition


class Model(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = torch.nn.Embedding(a.vocab, a.d_model)
        self.blocks = torch.nn.ModuleList(
            Block(a.d_model, a.heads, a.kv_heads, a.d_ff) for _ in range(a.layers))
        self.norm = torch.nn.Parameter(torch.ones(a.d_model))
        self.head = torch.nn.Linear(a.d_model, a.vocab, bias=False)

    def forward(self, ids, cos, sin):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(Block.rms(x, self.norm))


def main():
    p = argparse.ArgumentParser()
    for name, default in [("vocab", 50257), ("d_model", 2048), ("layers", 16), ("heads", 16),
                          ("kv_heads", 8), ("d_ff", 5632), ("seq", 2048), ("batch", 1),
                          ("steps", 8), ("warmup", 2)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--peak_gflops", type=float, default=0.0, help="MFU yardstick; 0: none")
    a = p.parse_args()
    torch.manual_seed(0)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    model = Model(a).to(dev)
    step_fn = torch.compile(model) if a.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    hd = a.d_model // a.heads
    inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, device=dev).float() / hd))
    angles = torch.outer(torch.arange(a.seq, device=dev).float(), inv)
    cos = torch.cat([angles.cos()] * 2, -1)
    sin = torch.cat([angles.sin()] * 2, -1)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=dev)
    params = sum(p.numel() for p in model.parameters())
    # Training FLOPs per token as ms-train counts them (docs/model.md): 6 x the matmul
    # parameters (not the embedding table or the norms) plus 12 L D (T + 1) / 2 for the causal
    # attention products.
    matmul_params = params - a.vocab * a.d_model - (2 * a.layers + 1) * a.d_model
    flops_per_token = 6 * matmul_params + 6 * a.layers * a.d_model * (a.seq + 1)

    def step():
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            logits = step_fn(ids[:, :-1], cos, sin)
            loss = F.cross_entropy(logits.float().view(-1, a.vocab), ids[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(a.warmup):
        step()
    sync()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    sync()
    elapsed = time.perf_counter() - t0
    tokens_per_s = a.steps * a.batch * a.seq / elapsed
    out = {"torch": torch.__version__, "device": a.device, "dtype": a.dtype, "compile": a.compile,
           "params": params, "tokens_per_s": tokens_per_s, "loss": float(loss),
           "step_s": elapsed / a.steps}
    if a.peak_gflops > 0:
        out["mfu"] = tokens_per_s * flops_per_token / (a.peak_gflops * 1e9)
    if dev.type == "cuda":
        out["peak_mem_mib"] = torch.cuda.max_memory_allocated() / 2**20
        out["gpu"] = torch.cuda.get_device_name()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
