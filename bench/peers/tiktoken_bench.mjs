// The peer of spmd-bench-tokenize (bench/tokenize_bench.cpp): js-tiktoken's
// "gpt2" encoding of a text, timed the same way: the encoding built first
// (not timed), one encode to warm up (and let the JIT compile), then
// REPEATS timed encodes of the whole text.
//
//   node bench/peers/tiktoken_bench.mjs NODE_MODULES TEXT [REPEATS]
//
// NODE_MODULES is where scripts/setup.sh installs the npm peers
// (.deps/npm/node_modules). Prints one line in spmd-bench-tokenize's form.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";

const [modules, file, repeatsArg] = process.argv.slice(2);
const repeats = Number(repeatsArg ?? 5);
const require = createRequire(join(resolve(modules), "resolve-from-here.js"));
const { getEncoding } = require("js-tiktoken");
const enc = getEncoding("gpt2");
const bytes = readFileSync(file);
const text = bytes.toString("utf8");
const tokens = enc.encode(text, [], []).length;  // the warm-up
const seconds = [];
for (let r = 0; r < repeats; ++r) {
  const start = process.hrtime.bigint();
  const n = enc.encode(text, [], []).length;
  seconds.push(Number(process.hrtime.bigint() - start) / 1e9);
  if (n !== tokens) throw new Error(`encode gave ${n} tokens, then ${tokens}`);
}
seconds.sort((a, b) => a - b);
const median = seconds[Math.floor(seconds.length / 2)];
console.log(`js-tiktoken tokens=${tokens} bytes=${bytes.length} median_s=${median.toFixed(6)} ` +
            `tokens_per_s=${Math.round(tokens / median)}`);
