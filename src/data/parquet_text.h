// A Parquet file's text column as the document pipeline reads it (document_pipeline.h): the calling thread reads
// each row group's column chunk as stored and cuts its data pages into runs of about a batch's bytes; the
// workers decode the runs, in parallel, the chunk's dictionary decoded once by the first worker that needs it.
// Each row is one document, a null one "" (so that prepare skips and counts it as an empty document).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tk::parquet {

struct TextChunk;  // one row group's text column chunk, shared by its runs

struct TextRun {
  std::shared_ptr<const TextChunk> chunk;
  size_t first = 0, last = 0;  // the chunk's data pages [first, last)
};

// Reads the text column `column` of the Parquet file `path`, row group by row group, and calls take(run,
// disk_bytes) for each run in order; the runs' disk bytes sum to the row groups' stored bytes. A file without
// the column (the error lists the ones it has) or without rows, and a column that is not a string column, are
// tk::Errors naming the file and column.
void read_text_runs(const std::string& path, const std::string& column, uint64_t run_bytes,
                    const std::function<void(TextRun&& run, uint64_t disk_bytes)>& take);

// The run's documents, one a row (on any thread).
std::vector<std::string> text_documents(const TextRun& run);

}  // namespace tk::parquet
