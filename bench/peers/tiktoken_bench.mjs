// The peers of spmd-bench-tokenize (bench/tokenize_bench.cpp): tiktoken's
// "gpt2" encoding of a text, timed the same way: the encoding built first
// (not timed), one encode to warm up (and let the JIT compile), then
// REPEATS timed encodes of the whole text.
//
//   node bench/peers/tiktoken_bench.mjs NODE_MODULES TEXT ENGINE [REPEATS]
//
// ENGINE: "js-tiktoken" (tiktoken ported to JavaScript) or "tiktoken"
// (tiktoken's Rust core compiled to WebAssembly; its ids are copied out of
// WebAssembly's memory as part of the encode). NODE_MODULES is where
// scripts/setup.sh installs the npm peers (.peers/npm/node_modules). Prints
// one line in spmd-bench-tokenize's form.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";

const [modules, file, engine, repeatsArg] = process.argv.slice(2);
const repeats = Number(repeatsArg ?? 5);
const require = createRequire(join(resolve(modules), "resolve-from-here.js"));
let encode;
if (engine === "js-tiktoken") {
  const encoding = require("js-tiktoken").getEncoding("gpt2");
  encode = (text) => encoding.encode(text, [], []);
} else if (engine === "tiktoken") {
  const encoding = require("tiktoken").get_encoding("gpt2");
  encode = (text) => encoding.encode(text, [], []);
} else {
  console.error("usage: node tiktoken_bench.mjs NODE_MODULES TEXT js-tiktoken|tiktoken [REPEATS]");
  process.exit(2);
}
const bytes = readFileSync(file);
const text = bytes.toString("utf8");
const tokens = encode(text).length;  // the warm-up
const seconds = [];
for (let r = 0; r < repeats; ++r) {
  const start = process.hrtime.bigint();
  const n = encode(text).length;
  seconds.push(Number(process.hrtime.bigint() - start) / 1e9);
  if (n !== tokens) throw new Error(`encode gave ${n} tokens, then ${tokens}`);
}
seconds.sort((a, b) => a - b);
const median = seconds[Math.floor(seconds.length / 2)];
console.log(`${engine} tokens=${tokens} bytes=${bytes.length} median_s=${median.toFixed(6)} ` +
            `tokens_per_s=${Math.round(tokens / median)}`);
