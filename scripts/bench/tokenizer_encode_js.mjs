// The whole-command peer of `ms-data tokenizer encode --format lines`: a JavaScript tiktoken's
// "gpt2" encoding of a whole file, one process from start to exit (load, encode, ids written one
// per line to stdout), so tokenizer_bench.sh can time both commands alike and compare their ids.
// The package is js-tiktoken (a pure JavaScript port) or tiktoken (the WASM build of the Rust
// core that Python's tiktoken wraps). Run from a directory holding node_modules/<package>
// (never in the repository).
//
//   node tokenizer_encode_js.mjs <text file> [js-tiktoken|tiktoken]
import { createRequire } from "node:module";
import { readFileSync, writeSync } from "node:fs";
import { join } from "node:path";

const require = createRequire(join(process.cwd(), "package.json"));
const pkg = process.argv[3] ?? "js-tiktoken";
const encoding =
    pkg === "tiktoken" ? require("tiktoken").get_encoding("gpt2") : require("js-tiktoken").getEncoding("gpt2");

const ids = encoding.encode(readFileSync(process.argv[2], "utf8"), "all");
const out = Buffer.from(Array.from(ids).join("\n") + "\n");
for (let at = 0; at < out.length;) at += writeSync(1, out, at);
