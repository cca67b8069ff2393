// The references for test_gpt2_tiktoken: tiktoken's "gpt2" encoding of a
// UTF-8 file, printed as its ids, space-separated, on one line.
//
//   node tests/autograd/tiktoken_gpt2.mjs NODE_MODULES FILE [ENGINE]
//
// ENGINE: "js-tiktoken" (the default; tiktoken ported to JavaScript, its
// regular expression run by JavaScript's engine) or "tiktoken" (tiktoken's
// Rust core compiled to WebAssembly). NODE_MODULES is the folder
// scripts/setup.sh installs the npm peers into (.peers/npm/node_modules).
// "<|endoftext|>" in the file is ordinary text, as spmd's Gpt2Tokenizer
// takes it. A JavaScript string holds code points, not bytes: the file must
// be well-formed UTF-8 (invalid bytes would reach the encoder as U+FFFD),
// so the test gives it only such files.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";

const [modules, file, engine = "js-tiktoken"] = process.argv.slice(2);
if (!modules || !file || !["js-tiktoken", "tiktoken"].includes(engine)) {
  console.error("usage: node tiktoken_gpt2.mjs NODE_MODULES FILE [js-tiktoken|tiktoken]");
  process.exit(2);
}
const require = createRequire(join(resolve(modules), "resolve-from-here.js"));
const text = readFileSync(file, "utf8");
let ids;
if (engine === "js-tiktoken") {
  ids = require("js-tiktoken").getEncoding("gpt2").encode(text, [], []);
} else {
  const encoding = require("tiktoken").get_encoding("gpt2");
  ids = Array.from(encoding.encode(text, [], []));
  encoding.free();
}
process.stdout.write(ids.join(" ") + "\n");
