// Text column runs for the document pipeline (parquet_text.h). A flat column's pages hold whole rows, so any run
// of consecutive data pages decodes on its own, given the chunk's dictionary.
#include "data/parquet_text.h"

#include <algorithm>
#include <mutex>

#include "core/error.h"
#include "data/parquet_reader.h"

namespace tk::parquet {

struct TextChunk {
  ColumnChunkPages pages;
  LeafColumn levels;
  std::string where;  // "FILE: column "NAME", row group N"

  // The dictionary, decoded by the first run that asks (a failed decoding is tried again, and fails again, by the
  // next one); null when the chunk has none.
  const ByteArrays* dictionary() const {
    if (!pages.dictionary) return nullptr;
    std::call_once(dictionary_once_, [&] {
      dictionary_ = decode_dictionary_page(levels, *pages.dictionary, pages.data(*pages.dictionary));
    });
    return &dictionary_;
  }

 private:
  mutable std::once_flag dictionary_once_;
  mutable ByteArrays dictionary_;
};

void read_text_runs(const std::string& path, const std::string& column, uint64_t run_bytes,
                    const std::function<void(TextRun&& run, uint64_t disk_bytes)>& take) {
  const ParquetFile file(path);
  if (!file.has_column(column)) {
    std::string names;
    for (const std::string& n : file.column_names()) names += (names.empty() ? "" : ", ") + n;
    fail("{}: no column \"{}\" (the file has: {}); name the text column with --text-field", path, column,
         names.empty() ? "no columns" : names);
  }
  const StringColumn text = file.string_column(column);
  TK_CHECK(file.rows() > 0, "input {} holds no rows", path);
  uint64_t accounted = 0;  // disk bytes given to runs so far: at most the file's size
  auto give = [&](uint64_t bytes) {
    bytes = std::min(bytes, file.file_bytes() - accounted);
    accounted += bytes;
    return bytes;
  };
  for (size_t g = 0; g < file.row_groups(); g++) {
    auto chunk = std::make_shared<TextChunk>();
    chunk->pages = file.read_chunk(g, text, chunk->levels);
    chunk->where = file.where(column, g);
    const std::vector<Page>& pages = chunk->pages.data_pages;
    uint64_t disk = chunk->pages.dictionary ? chunk->pages.dictionary->stored_bytes() : 0, text_bytes = 0;
    size_t first = 0;
    for (size_t i = 0; i < pages.size(); i++) {
      disk += pages[i].stored_bytes();
      text_bytes += uint64_t(pages[i].header.uncompressed_page_size);
      if (text_bytes < run_bytes && i + 1 < pages.size()) continue;
      // The row group's last run accounts for its other columns too.
      if (i + 1 == pages.size())
        disk += file.stored_bytes(g) - std::min(file.stored_bytes(g), chunk->pages.bytes.size());
      take(TextRun{chunk, first, i + 1}, give(disk));
      first = i + 1;
      disk = text_bytes = 0;
    }
  }
}

std::vector<std::string> text_documents(const TextRun& run) {
  const TextChunk& c = *run.chunk;
  try {
    const DecodedLevels d = decode_data_pages(c.levels, c.pages, c.dictionary(), run.first, run.last);
    std::vector<std::string> docs(d.levels);
    size_t next = 0;
    for (size_t i = 0; i < d.levels; i++)
      if (c.levels.max_definition == 0 || d.definition[i] == c.levels.max_definition) docs[i] = d.values[next++];
    return docs;
  } catch (const Error& e) {
    throw Error(c.where + ": " + e.what());
  }
}

}  // namespace tk::parquet
