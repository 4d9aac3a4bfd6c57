// Fuzzes prepare's input readers: the first byte picks the format (.txt, .jsonl, .jsonl.gz, .jsonl.zst),
// the rest is the file. Every record is read, and every JSON line's "text" field extracted.
#include "data/text_input.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tk;
  if (size == 0) return 0;
  static const char* const kNames[] = {"in.txt", "in.jsonl", "in.jsonl.gz", "in.jsonl.zst"};
  static const InputFormat kFormats[] = {InputFormat::Text, InputFormat::Jsonl, InputFormat::JsonlGzip,
                                         InputFormat::JsonlZstd};
  const int which = data[0] % 4;
  const std::string path = fuzz::write_file(std::string("text/") + kNames[which], fuzz::as_text(data + 1, size - 1));
  fuzz::expect_clear_errors([&] {
    RecordReader reader({path, kFormats[which], size - 1});
    Record r;
    while (reader.next(r)) {
      if (kFormats[which] != InputFormat::Text)
        fuzz::expect_clear_errors([&] { json_document_text(r.data, "text", path, r.line); });
      fuzz::require(reader.bytes_consumed() <= size - 1);
    }
  });
  return 0;
}
