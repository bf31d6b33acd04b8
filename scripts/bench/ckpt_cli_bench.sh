#!/usr/bin/env bash
# ms-ckpt command throughput on about 1 GiB of weights, against the raw sequential disk
# bandwidth measured in the same run: `dd ... conv=fsync` for writes, `dd iflag=direct` for cold
# reads. A Llama-shaped model is written as Hugging Face safetensors (Python standard library),
# then timed: import (read safetensors + checkpoint save), verify (read + crc32c of every shard),
# export (checkpoint read + safetensors write, split into 256 MB files), reshard to dp=4,zero=1
# (read + write), diff (two reads). Pages are dropped before each step when possible
# (root + /proc/sys/vm/drop_caches); otherwise the read figures are warm-cache and say so.
# Usage: ckpt_cli_bench.sh <bin dir> [work dir] [layers]
set -euo pipefail
BIN=$1
WORK=${2:-$(mktemp -d /tmp/ms_ckpt_bench_XXXXXX)}
LAYERS=${3:-16}
mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT
ck="$BIN/ms-ckpt"

need=$((4 * 1024 * 1024))  # KiB: ~1 GiB model, up to 4 copies
avail=$(df -k --output=avail "$WORK" | tail -1)
[ "$avail" -gt "$need" ] || { echo "need $need KiB free in $WORK, have $avail"; exit 1; }

drop() { sync; if [ -w /proc/sys/vm/drop_caches ]; then echo 3 > /proc/sys/vm/drop_caches; echo cold; else echo warm; fi; }
secs() { local t0 t1; t0=$(date +%s.%N); "$@" > /dev/null 2>&1; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }
rate() { echo "scale=1; $1 / 1048576 / $2" | bc -l; }

python3 - "$WORK/hf" "$LAYERS" <<'PY'
import json, os, struct, sys
out, layers = sys.argv[1], int(sys.argv[2])
V, D, F, H, KV = 32000, 1024, 2816, 16, 8
hd = D // H
shapes = [("model.embed_tokens.weight", [V, D])]
for l in range(layers):
    p = f"model.layers.{l}."
    shapes += [(p + "input_layernorm.weight", [D]), (p + "self_attn.q_proj.weight", [H * hd, D]),
               (p + "self_attn.k_proj.weight", [KV * hd, D]), (p + "self_attn.v_proj.weight", [KV * hd, D]),
               (p + "self_attn.o_proj.weight", [D, H * hd]), (p + "post_attention_layernorm.weight", [D]),
               (p + "mlp.gate_proj.weight", [F, D]), (p + "mlp.up_proj.weight", [F, D]),
               (p + "mlp.down_proj.weight", [D, F])]
shapes += [("model.norm.weight", [D]), ("lm_head.weight", [V, D])]
header, offset = {}, 0
for name, shape in shapes:
    n = 1
    for s in shape: n *= s
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + 4 * n]}
    offset += 4 * n
h = json.dumps(header).encode()
h += b" " * ((8 - len(h) % 8) % 8)
os.makedirs(out, exist_ok=True)
pattern = struct.pack("<4f", 0.01, -0.02, 0.03, -0.04) * 65536
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    left = offset
    while left > 0:
        chunk = pattern[: min(left, len(pattern))]
        f.write(chunk)
        left -= len(chunk)
json.dump({"architectures": ["LlamaForCausalLM"], "hidden_size": D, "intermediate_size": F,
           "num_hidden_layers": layers, "num_attention_heads": H, "num_key_value_heads": KV,
           "vocab_size": V, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5},
          open(os.path.join(out, "config.json"), "w"))
PY
bytes=$(stat -c %s "$WORK/hf/model.safetensors")
echo "# ms-ckpt command throughput, $(uname -n), $(nproc) CPUs; model $(rate "$bytes" 1) MiB"
dd_w=$(secs dd if=/dev/zero of="$WORK/dd.bin" bs=4M count=$((bytes / 4194304)) conv=fsync)
state=$(drop)
dd_r=$(secs dd if="$WORK/dd.bin" of=/dev/null bs=4M iflag=direct)
rm -f "$WORK/dd.bin"
printf "%-28s %10s %10s %s\n" step seconds MiB/s "vs dd"
printf "%-28s %10.2f %10s\n" "dd write conv=fsync" "$dd_w" "$(rate "$bytes" "$dd_w")"
printf "%-28s %10.2f %10s\n" "dd read iflag=direct" "$dd_r" "$(rate "$bytes" "$dd_r")"
report() {  # report <name> <seconds> <bytes moved> <dd seconds for the same bytes>
  printf "%-28s %10.2f %10s %8.2fx\n" "$1" "$2" "$(rate "$3" "$2")" \
    "$(echo "($3 / $2) / ($bytes / $4)" | bc -l)"
}
state=$(drop); t=$(secs "$ck" import "$WORK/hf" --output "$WORK/ck")
report "import ($state read+write)" "$t" "$bytes" "$dd_w"
state=$(drop); t=$(secs "$ck" verify "$WORK/ck")
report "verify ($state read)" "$t" "$bytes" "$dd_r"
state=$(drop); t=$(secs "$ck" export "$WORK/ck" --output "$WORK/out" --max-shard-bytes 268435456)
report "export ($state read+write)" "$t" "$bytes" "$dd_w"
state=$(drop); t=$(secs "$ck" reshard "$WORK/ck" --to dp=4,zero=1 --output "$WORK/rs")
report "reshard ($state read+write)" "$t" "$bytes" "$dd_w"
state=$(drop); t=$(secs "$ck" diff "$WORK/ck" "$WORK/rs")
report "diff ($state 2 reads)" "$t" "$((2 * bytes))" "$dd_r"
