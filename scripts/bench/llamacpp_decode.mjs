// llama.cpp's CPU decode of a GGUF file (scripts/bench/llamacpp_gguf.py writes ms-infer's model
// as one), timed as ms-infer bench times its batch-1 row: a prompt of --input-len random token
// ids prefilled in one evaluation, then --output-len - 1 decode steps of one token each (see
// timed() below), after one untimed warm-up run. llama.cpp runs through node-llama-cpp's prebuilt CPU binaries (the npm registry's
// @node-llama-cpp/linux-x64; llama.cpp picks its CPU backend for this CPU at load), with
// --threads threads. Prints `llamacpp_sweep PP .. TG .. T_PP .. T_TG .. median_step_ms ..
// steps/s ..` per run (steps/s over the whole T_TG, as ms-infer bench counts), and
// with --greedy-ids '[ids]' the --greedy-tokens greedy continuation of those ids as a JSON
// array, for a cross-check against ms-infer's own greedy tokens.
// Usage: node llamacpp_decode.mjs --node-modules DIR --gguf FILE [--threads 2] [--input-len 64]
//          [--output-len 64] [--runs 2] [--greedy-ids '[1,2,3]' --greedy-tokens 8]
import { pathToFileURL } from "node:url";
import path from "node:path";

function parseArgs(argv) {
  const args = { threads: 2, inputLen: 64, outputLen: 64, runs: 2, greedyTokens: 8 };
  const names = {
    "--node-modules": "nodeModules", "--gguf": "gguf", "--threads": "threads",
    "--input-len": "inputLen", "--output-len": "outputLen", "--runs": "runs",
    "--greedy-ids": "greedyIds", "--greedy-tokens": "greedyTokens",
  };
  for (let i = 0; i < argv.length; i += 2) {
    const key = names[argv[i]];
    if (!key || i + 1 >= argv.length) throw new Error(`unknown or valueless option ${argv[i]}`);
    args[key] = ["nodeModules", "gguf", "greedyIds"].includes(key) ? argv[i + 1] : Number(argv[i + 1]);
  }
  if (!args.nodeModules || !args.gguf) throw new Error("--node-modules and --gguf are required");
  return args;
}

// Token ids of a prompt: a fixed linear congruential sequence, so every run and every format
// prefills the same ids.
function promptIds(n, vocab, seed) {
  const ids = [];
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    ids.push(s % vocab);
  }
  return ids;
}

// Prefills `prompt` and takes `steps` greedy tokens after the first; returns the seconds of the
// prefill (to the first token) and of the steps, and the tokens.
async function greedy(sequence, prompt, steps) {
  await sequence.clearHistory();
  const tokens = [];
  const start = performance.now();
  let firstAt = 0;
  for await (const token of sequence.evaluate(prompt, { temperature: 0 })) {
    tokens.push(token);
    if (tokens.length === 1) firstAt = performance.now();
    if (tokens.length === steps + 1) break;
  }
  const end = performance.now();
  return { prefill: (firstAt - start) / 1e3, decode: (end - firstAt) / 1e3, tokens };
}

// The timed form: `prompt` in one evaluation, then one evaluation of one token for each of
// `ids`, with no sampling, each step timed alone. Through node-llama-cpp a step is a hop to a
// libuv worker and back around llama_decode: on a 56 MB model (ms_infer_make_tiny_model,
// d_model 256, 2 layers) its steps took 2.1 ms at least, 3-4 ms at the median and up to 37 ms,
// where ms-infer's took 1.0 ms, so the median step is printed beside the total.
async function timed(sequence, prompt, ids) {
  await sequence.clearHistory();
  const start = performance.now();
  await sequence.evaluateWithoutGeneratingNewTokens(prompt);
  const prefilled = performance.now();
  const steps = [];
  for (const id of ids) {
    const t = performance.now();
    await sequence.evaluateWithoutGeneratingNewTokens([id]);
    steps.push(performance.now() - t);
  }
  const end = performance.now();
  steps.sort((a, b) => a - b);
  return { prefill: (prefilled - start) / 1e3, decode: (end - prefilled) / 1e3,
           median: steps[Math.floor(steps.length / 2)] / 1e3 };
}

const args = parseArgs(process.argv.slice(2));
const entry = path.join(args.nodeModules, "node-llama-cpp", "dist", "index.js");
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(entry).href);
const llama = await getLlama({
  gpu: false, build: "never", maxThreads: args.threads, logLevel: LlamaLogLevel.error,
});
const model = await llama.loadModel({ modelPath: args.gguf, gpuLayers: 0 });
const context = await model.createContext({
  contextSize: Math.max(256, args.inputLen + args.outputLen), batchSize: args.inputLen,
  threads: { ideal: args.threads, min: args.threads }, sequences: 1,
});
const sequence = context.getSequence();
const vocab = model.tokens.count ?? 50257;
console.log(`llamacpp: ${path.basename(args.gguf)}, ${args.threads} threads, CPU backend`);

if (args.greedyIds) {
  const { tokens } = await greedy(sequence, JSON.parse(args.greedyIds), args.greedyTokens - 1);
  console.log(`llamacpp_greedy ${JSON.stringify(tokens)}`);
}
const steps = args.outputLen - 1;
await timed(sequence, promptIds(args.inputLen, vocab, 999), promptIds(8, vocab, 998));  // warm-up
for (let r = 0; r < args.runs; r++) {
  const { prefill, decode, median } = await timed(sequence, promptIds(args.inputLen, vocab, 1000 + r),
                                          promptIds(steps, vocab, 2000 + r));
  console.log(`llamacpp_sweep PP ${args.inputLen} TG ${args.outputLen} T_PP ${prefill.toFixed(3)} ` +
              `T_TG ${decode.toFixed(3)} median_step_ms ${(median * 1e3).toFixed(2)} ` +
              `steps/s ${(steps / decode).toFixed(1)}`);
}
await context.dispose();
await model.dispose();
await llama.dispose();
