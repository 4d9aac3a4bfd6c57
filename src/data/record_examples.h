// What prepare makes of each record it reads: the kind of the run's records (named with --format, or told by the
// first record's fields), and each record as a tokenized example with its loss mask, its kind checked against the
// run's. The record itself comes from any reader (text_input.h's JSON lines and .txt files, or a row of another
// format given as a JSON object).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/example_tokens.h"
#include "data/records.h"
#include "data/text_input.h"

namespace tk {

struct RunFormat {
  RecordFormat format = RecordFormat::Text;
  std::string told_by;  // "detected from FILE:LINE" or "given by --format"
  bool named = false;
};

// A named format is taken as it is; auto reads the first record of the first input: a .txt file, or a line that is
// no chat, prompt/completion or alpaca record, is text.
RunFormat resolve_record_format(const std::vector<InputFile>& inputs, RecordFormat named, const RecordFields& fields);

// One record as an example of the run's kind: a tk::Error "FILE:LINE: ..." when its fields make it another kind
// (with auto), lack what the kind needs, or when it cannot be rendered or tokenized.
Example record_example(const nlohmann::ordered_json& record, const RunFormat& run, const RecordFields& fields,
                       const std::string& where);

// A record read from a file, tokenized.
ExampleTokens record_tokens(const InputFile& file, Record& record, const RunFormat& run, const RecordFields& fields,
                            const Tokenizer& tokenizer, const ExampleOptions& options);

}  // namespace tk
