"""The PyTorch yardstick for scripts/bench/infer_bench.sh: the same Llama/Mixtral model that
ms-infer serves, read from its Hugging Face directory (config.json + *.safetensors, parsed here
with json/struct so no safetensors package is needed), run in plain torch on the CPU with a
fixed thread count and a preallocated KV cache, as docs/model.md defines it (RMSNorm, half-split
RoPE, grouped-query attention, SwiGLU, top-k MoE with renormalized weights).

Two jobs, both on the same weights as ms-infer:
  * greedy generation for token-id prompts (--prompt-ids, one JSON array per line), written to
    --out, and, with --check, compared token by token with `ms-infer generate` output: an
    independent cross-check of the engine's correctness;
  * the batched-bench timing ms-infer bench prints: B sequences of --input-len random tokens
    prefilled in one forward, then --output-len - 1 batched decode steps (after one untimed
    warm-up at the same shapes, so PyTorch's first-call costs are not counted); printed as
    `torch_sweep B S_PP S_TG` lines (prompt and decode tokens/s).
Written for Debian's python3-torch 1.13, run with /usr/bin/python3."""
import argparse
import json
import os
import struct
import time

import torch
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def read_safetensors(path):
    """name -> f32 tensor for every tensor in one .safetensors file."""
    with open(path, "rb") as f:
        blob = bytearray(f.read())
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_len].decode("utf-8"))
    base = 8 + header_len
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry["dtype"] not in DTYPES:
            raise SystemExit("%s: tensor %s has dtype %s; expected F32, BF16 or F16"
                             % (path, name, entry["dtype"]))
        begin, end = entry["data_offsets"]
        dtype = DTYPES[entry["dtype"]]
        count = (end - begin) // torch.tensor([], dtype=dtype).element_size()
        flat = torch.frombuffer(blob, dtype=dtype, count=count, offset=base + begin)
        tensors[name] = flat.reshape(entry["shape"]).float().clone()
    return tensors


def linear_op(w, fmt):
    """y = x @ w.T for x of shape (..., in) in f32, with w held as `fmt` says (main()'s --weights)."""
    if fmt == "f32":
        return lambda x: F.linear(x, w)
    if fmt == "bf16":
        wb = w.bfloat16()
        return lambda x: F.linear(x.bfloat16(), wb).float()
    scales = (w.abs().amax(1) / 127).clamp(min=1e-12).double()
    codes = torch.quantize_per_channel(w, scales, torch.zeros(w.shape[0], dtype=torch.long), 0,
                                       torch.qint8)
    packed = torch.ops.quantized.linear_prepack(codes, None)
    return lambda x: torch.ops.quantized.linear_dynamic(x.reshape(-1, w.shape[1]), packed).view(
        *x.shape[:-1], w.shape[0])


def load_model(model_dir, weights_format="f32"):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    weights = {}
    for name in sorted(os.listdir(model_dir)):
        if name.endswith(".safetensors"):
            weights.update(read_safetensors(os.path.join(model_dir, name)))
    if not weights:
        raise SystemExit(model_dir + ": no *.safetensors weight file")
    return Model(cfg, weights, weights_format)


class Model:
    """The forward of docs/model.md over a KV cache of shape (layers, B, KV, max_len, hd)."""

    def __init__(self, cfg, w, weights_format="f32"):
        self.w = w
        self.d = cfg["hidden_size"]
        self.layers = cfg["num_hidden_layers"]
        self.heads = cfg["num_attention_heads"]
        self.kv_heads = cfg.get("num_key_value_heads", self.heads)
        self.hd = self.d // self.heads
        self.eps = cfg.get("rms_norm_eps", 1e-5)
        self.window = cfg.get("sliding_window") or 0
        self.parallel = cfg.get("ms_parallel_block", False)
        self.experts = cfg.get("num_local_experts", 0)
        self.top_k = cfg.get("num_experts_per_tok", 2)
        self.max_len = cfg["max_position_embeddings"]
        self.embed = w["model.embed_tokens.weight"]
        lm_head = self.embed if cfg.get("tie_word_embeddings", False) else w["lm_head.weight"]
        # Every 2-D weight but the embedding table is a linear layer's; the f32 tensors are
        # dropped once their op holds them in its own format. A MoE router stays f32, as in
        # ms-infer, whose --weights converts the experts' and the dense layers' matrices only.
        self.linears = {name: linear_op(t, "f32" if name.endswith("block_sparse_moe.gate.weight")
                                        else weights_format)
                        for name, t in w.items()
                        if t.dim() == 2 and name != "model.embed_tokens.weight"}
        self.lm_head = self.linears.get("lm_head.weight") or linear_op(lm_head, weights_format)
        if weights_format != "f32":
            for name in self.linears:
                del w[name]
        theta = cfg.get("rope_theta", 10000.0)
        inv = 1.0 / (theta ** (torch.arange(0, self.hd, 2, dtype=torch.float64) / self.hd))
        ang = torch.outer(torch.arange(self.max_len, dtype=torch.float64), inv)
        self.cos = torch.cat([ang.cos()] * 2, -1).float()
        self.sin = torch.cat([ang.sin()] * 2, -1).float()

    def new_cache(self, batch):
        shape = (self.layers, batch, self.kv_heads, self.max_len, self.hd)
        return torch.zeros(shape), torch.zeros(shape)

    def rms(self, x, name):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.w[name]

    def rope(self, x, pos):
        """x is (B, heads, T, hd) at positions pos..pos+T-1."""
        t, half = x.shape[2], self.hd // 2
        cos, sin = self.cos[pos:pos + t], self.sin[pos:pos + t]
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    def attention(self, l, x, pos, cache, mask):
        """x is (B, T, D), the normed input; keys/values go to cache[l][:, :, pos:pos+T]; mask
        is (T, pos+T)."""
        b, t, _ = x.shape
        p = "model.layers.%d.self_attn." % l
        q = self.linears[p + "q_proj.weight"](x).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.linears[p + "k_proj.weight"](x).view(b, t, self.kv_heads, self.hd)
        v = self.linears[p + "v_proj.weight"](x).view(b, t, self.kv_heads, self.hd)
        keys, values = cache
        keys[l, :, :, pos:pos + t] = self.rope(k.transpose(1, 2), pos)
        values[l, :, :, pos:pos + t] = v.transpose(1, 2)
        q = self.rope(q, pos)
        n = pos + t
        rep = self.heads // self.kv_heads
        # Query heads grouped by their KV head: (B, KV, rep*T, hd) against (B, KV, n, hd).
        qg = q.reshape(b, self.kv_heads, rep * t, self.hd)
        scores = qg @ keys[l, :, :, :n].transpose(-1, -2) / self.hd ** 0.5
        scores = scores.view(b, self.kv_heads, rep, t, n) + mask
        out = F.softmax(scores, -1).view(b, self.kv_heads, rep * t, n) @ values[l, :, :, :n]
        out = out.view(b, self.heads, t, self.hd).transpose(1, 2).reshape(b, t, self.d)
        return self.linears[p + "o_proj.weight"](out)

    def mask(self, pos, t, n):
        """(T, n) additive mask: query pos+i sees keys j <= pos+i (and > pos+i-W windowed)."""
        qi = torch.arange(pos, pos + t).unsqueeze(1)
        kj = torch.arange(n).unsqueeze(0)
        hidden = kj > qi
        if self.window > 0:
            hidden |= kj <= qi - self.window
        return torch.zeros(t, n).masked_fill(hidden, float("-inf"))

    def swiglu(self, x, gate, up, down):
        """gate, up and down name their weights."""
        lin = self.linears
        return lin[down](F.silu(lin[gate](x)) * lin[up](x))

    def ffn(self, l, x):
        """x is (B, T, D), the normed input."""
        p = "model.layers.%d." % l
        if self.experts == 0:
            return self.swiglu(x, *(p + "mlp.%s_proj.weight" % n
                                    for n in ("gate", "up", "down")))
        flat = x.reshape(-1, self.d)
        probs = F.softmax(self.linears[p + "block_sparse_moe.gate.weight"](flat), -1)
        top_p, top_e = probs.topk(self.top_k, -1)
        top_p = top_p / top_p.sum(-1, keepdim=True)
        out = torch.zeros_like(flat)
        for e in range(self.experts):
            rows, slot = (top_e == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            ep = p + "block_sparse_moe.experts.%d." % e
            y = self.swiglu(flat[rows], *(ep + n + ".weight" for n in ("w1", "w3", "w2")))
            out.index_add_(0, rows, y * top_p[rows, slot].unsqueeze(1))
        shared = p + "mlp.shared_expert."
        if shared + "gate_proj.weight" in self.linears:
            out += self.swiglu(flat, *(shared + "%s_proj.weight" % n
                                       for n in ("gate", "up", "down")))
        return out.view_as(x)

    def forward(self, tokens, pos, cache):
        """tokens is (B, T) at positions pos..pos+T-1; returns the last position's logits (B, V)."""
        x = self.embed[tokens]
        mask = self.mask(pos, tokens.shape[1], pos + tokens.shape[1])
        for l in range(self.layers):
            p = "model.layers.%d." % l
            n1 = self.rms(x, p + "input_layernorm.weight")
            if self.parallel:
                x = x + self.attention(l, n1, pos, cache, mask) + self.ffn(l, n1)
            else:
                h = x + self.attention(l, n1, pos, cache, mask)
                x = h + self.ffn(l, self.rms(h, p + "post_attention_layernorm.weight"))
        return self.lm_head(self.rms(x[:, -1], "model.norm.weight"))


def greedy(model, prompt, max_tokens):
    """max_tokens greedy ids after `prompt` (a list of ids); end-of-text does not stop it."""
    cache = model.new_cache(1)
    logits = model.forward(torch.tensor([prompt]), 0, cache)
    out = []
    for i in range(max_tokens):
        out.append(int(logits[0].argmax()))
        if i + 1 < max_tokens:
            logits = model.forward(torch.tensor([[out[-1]]]), len(prompt) + i, cache)
    return out


def time_batch(model, batch, input_len, output_len):
    """Seconds of one prefill of (batch, input_len) random tokens and of output_len - 1 decodes."""
    gen = torch.Generator().manual_seed(1000 + batch)
    tokens = torch.randint(0, model.embed.shape[0], (batch, input_len), generator=gen)
    cache = model.new_cache(batch)
    start = time.perf_counter()
    logits = model.forward(tokens, 0, cache)
    t_pp = time.perf_counter() - start
    start = time.perf_counter()
    for step in range(1, output_len):
        logits = model.forward(logits.argmax(-1, keepdim=True), input_len + step - 1, cache)
    return t_pp, time.perf_counter() - start


def check(ours, theirs_path, eos_ids):
    """Compares our greedy ids with `ms-infer generate` output lines (same order): every token
    ms-infer generated, and for a completion that stopped early, that ours has end-of-text
    there. Prints where each mismatching prompt diverges and the counts; True when all match."""
    with open(theirs_path) as f:
        theirs = [json.loads(line) for line in f if line.strip()]
    if len(theirs) != len(ours):
        raise SystemExit("%s has %d completions for %d prompts"
                         % (theirs_path, len(theirs), len(ours)))
    match = total = identical = 0
    for i, (mine, c) in enumerate(zip(ours, theirs)):
        same = [a == b for a, b in zip(mine, c["tokens"])]
        if len(c["tokens"]) < len(mine):
            same.append(c["finish_reason"] == "stop" and mine[len(c["tokens"])] in eos_ids)
        match += sum(same)
        total += len(same)
        identical += all(same)
        if not all(same):
            print("greedy mismatch: prompt %d (id %s) diverges at generated token %d"
                  % (i, c["id"], same.index(False)))
    print("greedy check vs ms-infer: %d/%d tokens match, %d/%d prompts identical, %d mismatched"
          % (match, total, identical, len(ours), total - match))
    return match == total


def special_ids(model_dir):
    with open(os.path.join(model_dir, "tokenizer.json")) as f:
        tok = json.load(f)
    return {t["id"] for t in tok.get("added_tokens", []) if t.get("special")}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="Hugging Face model directory")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt-ids", help="token-id prompts, one JSON array per line")
    p.add_argument("--max-tokens", type=int, default=16, help="greedy tokens per prompt")
    p.add_argument("--out", help="greedy ids written here, one JSON array per line")
    p.add_argument("--check", help="ms-infer generate output (JSON lines) to compare with")
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--batch-sizes", default="1,4,16")
    p.add_argument("--weights", choices=("f32", "bf16", "int8"), default="f32",
                   help="how the linear layers hold their weights (see above)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    if a.weights == "int8":
        if "onednn" not in torch.backends.quantized.supported_engines:
            raise SystemExit("--weights int8: this PyTorch has no oneDNN quantized engine")
        torch.backends.quantized.engine = "onednn"
    model = load_model(a.model, a.weights)
    ok = True
    with torch.inference_mode():
        if a.prompt_ids:
            with open(a.prompt_ids) as f:
                prompts = [json.loads(line) for line in f if line.strip()]
            ours = [greedy(model, prompt, a.max_tokens) for prompt in prompts]
            if a.out:
                with open(a.out, "w") as f:
                    f.writelines(json.dumps(ids) + "\n" for ids in ours)
            if a.check:
                ok = check(ours, a.check, special_ids(a.model))
        for batch in (int(b) for b in a.batch_sizes.split(",")):
            time_batch(model, batch, a.input_len, 3)  # warm-up at these shapes, untimed
            t_pp, t_tg = time_batch(model, batch, a.input_len, a.output_len)
            print("torch_sweep B %d PP %d TG %d T_PP %.3f S_PP %.1f T_TG %.3f S_TG %.1f W %s"
                  % (batch, a.input_len, a.output_len, t_pp, batch * a.input_len / t_pp, t_tg,
                     batch * (a.output_len - 1) / t_tg, a.weights))
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
