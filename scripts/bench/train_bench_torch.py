"""The PyTorch yardstick for scripts/bench/train_bench.sh: the same decoder-only model shape
(RMSNorm, rotary GQA attention, SwiGLU MLP, tied embeddings) trained with AdamW on random tokens
on the CPU with a fixed thread count, reporting tokens/s over the timed steps. Written for
Debian's python3-torch 1.13 (no fused attention), run with /usr/bin/python3; its Block is also
train_gpu_bench_torch.py's, which takes scaled_dot_product_attention where PyTorch has it."""
import argparse
import time

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, d, heads, kv_heads, d_ff):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.norm1 = torch.nn.Parameter(torch.ones(d))
        self.norm2 = torch.nn.Parameter(torch.ones(d))
        self.q = torch.nn.Linear(d, d, bias=False)
        self.kv = torch.nn.Linear(d, 2 * kv_heads * self.hd, bias=False)
        self.o = torch.nn.Linear(d, d, bias=False)
        self.gate_up = torch.nn.Linear(d, 2 * d_ff, bias=False)
        self.down = torch.nn.Linear(d_ff, d, bias=False)

    @staticmethod
    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def attention(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.heads, self.hd).transpose(1, 2)
        k, v = self.kv(x).view(b, t, 2, self.kv_heads, self.hd).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        if hasattr(F, "scaled_dot_product_attention"):  # PyTorch 2 (the GPU bench's)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-1, -2)) / self.hd ** 0.5
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
            out = F.softmax(scores, -1) @ v
        return self.o(out.transpose(1, 2).reshape(b, t, -1))

    def forward(self, x, cos, sin):
        x = x + self.attention(self.rms(x, self.norm1), cos, sin)
        gate, up = self.gate_up(self.rms(x, self.norm2)).chunk(2, -1)
        return x + self.down(F.silu(gate) * up)


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def main():
    p = argparse.ArgumentParser()
    for name, default in [("vocab", 50257), ("d_model", 512), ("layers", 8), ("heads", 8),
                          ("kv_heads", 4), ("d_ff", 1376), ("seq", 256), ("batch", 4),
                          ("steps", 6), ("warmup", 2), ("threads", 2)]:
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    embed = torch.nn.Embedding(a.vocab, a.d_model)
    blocks = torch.nn.ModuleList(
        Block(a.d_model, a.heads, a.kv_heads, a.d_ff) for _ in range(a.layers))
    final = torch.nn.Parameter(torch.ones(a.d_model))
    params = list(embed.parameters()) + list(blocks.parameters()) + [final]
    opt = torch.optim.AdamW(params, lr=3e-4)
    hd = a.d_model // a.heads
    inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
    ang = torch.outer(torch.arange(a.seq).float(), inv)
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
    start = 0.0
    for step in range(a.steps):
        if step == a.warmup:
            start = time.perf_counter()
        x = embed(tokens[:, :-1])
        for block in blocks:
            x = block(x, cos, sin)
        logits = Block.rms(x, final) @ embed.weight.t()
        loss = F.cross_entropy(logits.view(-1, a.vocab), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    elapsed = time.perf_counter() - start
    print("torch_tokens_per_s %.1f" % ((a.steps - a.warmup) * a.batch * a.seq / elapsed))


if __name__ == "__main__":
    main()
