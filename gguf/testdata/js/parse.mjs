// Parses a GGUF file with @huggingface/gguf (an independent parser) and
// prints what it read as JSON: node parse.mjs FILE, with GGUF_JS naming
// the directory whose node_modules holds the package.
import { pathToFileURL } from "node:url";
import path from "node:path";

const lib = path.join(process.env.GGUF_JS, "node_modules", "@huggingface", "gguf", "dist", "index.mjs");
const { gguf } = await import(pathToFileURL(lib).href);
const file = path.resolve(process.argv[2]);
const out = await gguf(file, { allowLocalFile: true, typedMetadata: true });
const json = JSON.stringify(
  {
    version: out.metadata.version,
    tensorDataOffset: out.tensorDataOffset,
    littleEndian: out.littleEndian,
    metadata: out.typedMetadata,
    tensors: out.tensorInfos,
  },
  (_, v) => (typeof v === "bigint" ? v.toString() : v),
);
process.stdout.write(json);
