// The run's record kind and each record's example (record_examples.h).
#include "data/record_examples.h"

#include <fmt/format.h>

#include "core/error.h"

namespace tk {
namespace {

std::string field_list(const nlohmann::ordered_json& record) {
  std::string keys;
  for (const auto& [k, v] : record.items()) keys += (keys.empty() ? "" : ", ") + k;
  return keys.empty() ? "no fields" : keys;
}

[[noreturn]] void no_kind(const nlohmann::ordered_json& record, const RecordFields& f, const std::string& where) {
  fail("{}: the record has none of the fields prepare reads (it has: {}): \"{}\" (text, --text-field), \"{}\" (chat, "
       "--messages-field), \"{}\" and \"{}\" (prompt-completion), \"{}\" and \"{}\" (alpaca); name them with the "
       "--*-field options",
       where, field_list(record), f.text, f.messages, f.prompt, f.completion, f.instruction, f.output);
}

}  // namespace

RunFormat resolve_record_format(const std::vector<InputFile>& inputs, RecordFormat named, const RecordFields& fields) {
  if (named != RecordFormat::Auto) return {named, "given by --format", true};
  if (inputs.empty() || inputs[0].format == InputFormat::Text)
    return {RecordFormat::Text, inputs.empty() ? "no input" : "detected from " + inputs[0].path + " (a .txt file)", false};
  if (inputs[0].format == InputFormat::Parquet)
    return {RecordFormat::Text, "detected from " + inputs[0].path + " (a Parquet file: its --text-field column)", false};
  RecordReader reader(inputs[0]);
  Record r;
  if (!reader.next(r)) fail("input {} holds no JSON lines", inputs[0].path);
  const std::string where = fmt::format("{}:{}", inputs[0].path, r.line);
  // A line that is no record of the other kinds is read as text, whose errors then say what is wrong with it.
  const auto record = nlohmann::ordered_json::parse(r.data, nullptr, /*allow_exceptions=*/false);
  const std::optional<RecordFormat> kind = record.is_discarded() ? std::nullopt : detect_record_format(record, fields);
  return {kind.value_or(RecordFormat::Text), "detected from " + where, false};
}

Example record_example(const nlohmann::ordered_json& record, const RunFormat& run, const RecordFields& fields,
                       const std::string& where) {
  if (!run.named) {
    const std::optional<RecordFormat> kind = detect_record_format(record, fields);
    if (!kind) no_kind(record, fields, where);
    if (*kind != run.format)
      fail("{}: a {} record, but the input's records are {} ({}): every record of a run is of one kind; name it "
           "with --format",
           where, record_format_name(*kind), record_format_name(run.format), run.told_by);
  }
  return example_of(record, run.format, fields, where);
}

ExampleTokens record_tokens(const InputFile& file, Record& record, const RunFormat& run, const RecordFields& fields,
                            const Tokenizer& tokenizer, const ExampleOptions& options) {
  if (file.format == InputFormat::Text || file.format == InputFormat::Parquet) {
    if (run.format != RecordFormat::Text)
      fail("{}: {}, but the input's records are {} ({}); chat, prompt/completion and alpaca records are read from "
           "JSON Lines",
           file.path,
           file.format == InputFormat::Text ? "a .txt file is one text document"
                                            : "a Parquet file is read as its --text-field column of documents",
           record_format_name(run.format), run.told_by);
    Example e;
    e.text = std::move(record.data);
    return tokenize_example(e, tokenizer, options, file.path);
  }
  const std::string where = fmt::format("{}:{}", file.path, record.line);
  if (run.format == RecordFormat::Text) {  // the text field alone, as train-tokenizer reads it
    Example e;
    e.text = json_document_text(record.data, fields.text, file.path, record.line);
    return tokenize_example(e, tokenizer, options, where);
  }
  const nlohmann::ordered_json object = parse_json_record(record.data, file.path, record.line);
  return tokenize_example(record_example(object, run, fields, where), tokenizer, options, where);
}

}  // namespace tk
