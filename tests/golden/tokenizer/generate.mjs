// Generates gpt2_golden.json: the GPT-2 token ids of every text in texts.json, computed by an
// independent implementation of the same BPE, the npm package js-tiktoken ("gpt2" encoding,
// special tokens allowed). The C++ test (tests/data/tokenizer_golden_test.cc) reads only the
// JSON, so CI needs neither node nor the package. Regenerate after changing texts.json:
//
//   mkdir -p /tmp/jstk && cd /tmp/jstk && npm install js-tiktoken
//   node /path/to/repo/tests/golden/tokenizer/generate.mjs
//
// (run from the directory holding node_modules; never commit node_modules).
import { createRequire } from "node:module";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const require = createRequire(join(process.cwd(), "package.json"));
const { getEncoding } = require("js-tiktoken");
const version = JSON.parse(
  readFileSync(join(process.cwd(), "node_modules/js-tiktoken/package.json"), "utf8")).version;

const here = dirname(fileURLToPath(import.meta.url));
const texts = JSON.parse(readFileSync(join(here, "texts.json"), "utf8"));
const enc = getEncoding("gpt2");

const cases = texts.map(({ name, text }) => ({ name, text, ids: enc.encode(text, "all") }));
const golden = {
  generator: `js-tiktoken ${version}, encoding gpt2, allowedSpecial "all"`,
  cases,
};
writeFileSync(join(here, "gpt2_golden.json"), JSON.stringify(golden, null, 0) + "\n");
console.log(`wrote ${cases.length} cases to gpt2_golden.json`);
