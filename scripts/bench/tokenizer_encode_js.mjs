// The whole-command peer of `ms-data tokenizer encode --format lines`: js-tiktoken's "gpt2"
// encoding of a whole file, one process from start to exit (load, encode, ids written one per
// line to stdout), so tokenizer_bench.sh can time both commands alike and compare their ids.
// Run from a directory holding node_modules/js-tiktoken (never in the repository).
//
//   node tokenizer_encode_js.mjs <text file>
import { createRequire } from "node:module";
import { readFileSync, writeSync } from "node:fs";
import { join } from "node:path";

const require = createRequire(join(process.cwd(), "package.json"));
const { getEncoding } = require("js-tiktoken");

const ids = getEncoding("gpt2").encode(readFileSync(process.argv[2], "utf8"), "all");
const out = Buffer.from(ids.join("\n") + "\n");
for (let at = 0; at < out.length;) at += writeSync(1, out, at);
