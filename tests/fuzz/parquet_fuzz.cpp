// Fuzzes the Parquet reader: the input is the file. Every top-level column is read as a string column and as a
// messages column, row group by row group, and the "text" column through the document pipeline's page runs; any
// outcome but values or a tk::Error is a finding. Files whose footer claims more values than a fuzz input can
// honestly hold are read only as far as the footer and schema: what they would decode is bounded, but large.
#include <algorithm>

#include "data/parquet_reader.h"
#include "data/parquet_text.h"
#include "fuzz_support.h"

namespace {

constexpr int64_t kMaxClaimedValues = int64_t(1) << 14;

// More rows or column values than kMaxClaimedValues: each is decoded up to the page limits (parquet_pages.h), and a
// dictionary index or a shared prefix repeated that often makes far more text than the input.
bool claims_too_much(const tk::parquet::ParquetFile& file) {
  int64_t values = file.rows();
  for (const tk::parquet::RowGroup& g : file.metadata().row_groups)
    for (const tk::parquet::ColumnChunk& c : g.columns)
      if (c.meta_data) values += std::min(c.meta_data->num_values, kMaxClaimedValues + 1);
  return values > kMaxClaimedValues;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tk;
  using namespace tk::parquet;
  const std::string path = fuzz::write_file("in.parquet", fuzz::as_text(data, size));
  fuzz::expect_clear_errors([&] {
    const ParquetFile file(path);
    if (claims_too_much(file)) return;
    for (const std::string& name : file.column_names()) {
      fuzz::expect_clear_errors([&] {
        const StringColumn c = file.string_column(name);
        for (size_t g = 0; g < file.row_groups(); g++) {
          const StringValues v = file.read_strings(g, c);
          fuzz::require(v.size() == size_t(file.rows(g)));
        }
      });
      fuzz::expect_clear_errors([&] {
        const MessagesColumn c = file.messages_column(name);
        for (size_t g = 0; g < file.row_groups(); g++) {
          const MessageLists v = file.read_messages(g, c);
          fuzz::require(v.size() == size_t(file.rows(g)));
        }
      });
    }
    read_text_runs(path, "text", 1 << 10,
                   [&](TextRun&& run, uint64_t) { fuzz::expect_clear_errors([&] { text_documents(run); }); });
  });
  return 0;
}
