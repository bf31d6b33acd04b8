// The peer for ms_tokenizer_bench: a JavaScript tiktoken's "gpt2" encoding on the same text, cut
// into the same ~4 KiB documents, single-threaded, best of N, the encoding loaded once before.
// The package is js-tiktoken (a pure JavaScript port) or tiktoken (the WASM build of the Rust core
// that Python's tiktoken wraps). Run from a directory holding node_modules/<package> (npm install
// in a temp dir; never in the repository).
//
//   node tokenizer_bench_js.mjs <text file> [repeats] [js-tiktoken|tiktoken]
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const require = createRequire(join(process.cwd(), "package.json"));
const pkg = process.argv[4] ?? "js-tiktoken";

const text = readFileSync(process.argv[2], "utf8");
const repeats = Number(process.argv[3] ?? 5);
const docs = [];
for (let begin = 0; begin < text.length;) {
  let end = Math.min(text.length, begin + 4096);
  const newline = text.indexOf("\n", end);
  end = newline < 0 ? text.length : newline + 1;
  docs.push(text.slice(begin, end));
  begin = end;
}
const enc =
    pkg === "tiktoken" ? require("tiktoken").get_encoding("gpt2") : require("js-tiktoken").getEncoding("gpt2");
const mb = Buffer.byteLength(text, "utf8") / 1e6;
let best = Infinity, tokens = 0;
for (let r = 0; r < repeats; ++r) {
  const t0 = process.hrtime.bigint();
  let n = 0;
  for (const d of docs) n += enc.encode(d, "all").length;
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  if (s < best) { best = s; tokens = n; }
}
console.log(`  ${pkg} 1 thread: ${tokens} tokens, ${best.toFixed(4)} s, ${(mb / best).toFixed(2)} MB/s`);
console.log(JSON.stringify({ impl: pkg, threads: 1, tokens, seconds: best, mb_per_s: mb / best }));
