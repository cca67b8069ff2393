// The reference for test_gpt2_tiktoken: js-tiktoken's "gpt2" encoding of a
// UTF-8 file, printed as its ids, space-separated, on one line.
//
//   node tests/autograd/tiktoken_gpt2.mjs NODE_MODULES FILE
//
// NODE_MODULES is the folder scripts/setup.sh installs the npm peers into
// (.deps/npm/node_modules). "<|endoftext|>" in the file is ordinary text,
// as spmd's Gpt2Tokenizer takes it. A JavaScript string holds code points,
// not bytes: the file must be well-formed UTF-8 (invalid bytes would reach
// js-tiktoken as U+FFFD), so the test gives it only such files.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";

const [modules, file] = process.argv.slice(2);
if (!modules || !file) {
  console.error("usage: node tiktoken_gpt2.mjs NODE_MODULES FILE");
  process.exit(2);
}
const require = createRequire(join(resolve(modules), "resolve-from-here.js"));
const { getEncoding } = require("js-tiktoken");
const text = readFileSync(file, "utf8");
const ids = getEncoding("gpt2").encode(text, [], []);
process.stdout.write(ids.join(" ") + "\n");
