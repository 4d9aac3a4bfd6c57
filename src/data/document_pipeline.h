// The one way tokamak reads a corpus (prepare, train-tokenizer): the input files in order, on the calling
// thread, cut into batches of whole documents; each batch's documents worked on by a pool of threads; the
// results handed back on the calling thread in input order, so that what is made of them never depends on
// the thread count, and with few batches in flight, so that a corpus never has to fit in memory.
#pragma once
#include <any>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/text_input.h"

namespace tk {

struct DocumentPipelineOptions {
  std::string text_field = "text";  // a JSON line's document is this string field, a Parquet row's this column
  int threads = 0;                  // workers; 0: one per core
};

// A batch's documents, on a worker: the whole text of a .txt file, the text field of each JSON line, or the text
// column of each Parquet row (a null one as "").
using Documents = std::vector<std::string>;

// A batch's records as read, on a worker, with the file they come from (for records that are more than a text field:
// prepare's chat, prompt/completion and alpaca records).
struct RecordBatch {
  const InputFile& file;
  std::vector<Record>& records;
};

// Runs work(documents, worker) for every batch on worker `worker` (0 <= worker < threads, so that a worker may
// keep state of its own), then take(result, disk_bytes) on the calling thread, batch by batch in input order;
// disk_bytes are the input file's bytes on disk that the batch accounts for (summing to the inputs' sizes: a
// progress bar's measure). A JSON line that is not a document (json_document_text), a corrupt Parquet page, or an
// error thrown by `work`, is rethrown on the calling thread when its batch's turn comes; an error reading a file
// (a Parquet file's footer, a missing column), at once.
template <class Result>
void run_document_pipeline(const std::vector<InputFile>& inputs, const DocumentPipelineOptions& opts,
                           const std::function<Result(Documents& documents, int worker)>& work,
                           const std::function<void(Result& result, uint64_t disk_bytes)>& take);

// As run_document_pipeline, with each batch's records as they were read (opts.text_field is not used).
template <class Result>
void run_record_pipeline(const std::vector<InputFile>& inputs, const DocumentPipelineOptions& opts,
                         const std::function<Result(RecordBatch& batch, int worker)>& work,
                         const std::function<void(Result& result, uint64_t disk_bytes)>& take);

// The worker threads run_document_pipeline starts for opts.threads.
int document_pipeline_threads(const DocumentPipelineOptions& opts);

namespace detail {
using AnyWork = std::function<std::any(RecordBatch&, int)>;
using AnyTake = std::function<void(std::any&, uint64_t)>;
void run_record_pipeline(const std::vector<InputFile>& inputs, const DocumentPipelineOptions& opts,
                         const AnyWork& work, const AnyTake& take);
// The documents of a batch: a .txt file's text, each JSON line's text field.
Documents documents_of(RecordBatch& batch, const std::string& text_field);
}  // namespace detail

template <class Result>
void run_record_pipeline(const std::vector<InputFile>& inputs, const DocumentPipelineOptions& opts,
                         const std::function<Result(RecordBatch& batch, int worker)>& work,
                         const std::function<void(Result& result, uint64_t disk_bytes)>& take) {
  detail::run_record_pipeline(
      inputs, opts, [&](RecordBatch& batch, int worker) { return std::any(work(batch, worker)); },
      [&](std::any& result, uint64_t disk_bytes) { take(*std::any_cast<Result>(&result), disk_bytes); });
}

template <class Result>
void run_document_pipeline(const std::vector<InputFile>& inputs, const DocumentPipelineOptions& opts,
                           const std::function<Result(Documents& documents, int worker)>& work,
                           const std::function<void(Result& result, uint64_t disk_bytes)>& take) {
  detail::run_record_pipeline(
      inputs, opts,
      [&](RecordBatch& batch, int worker) {
        Documents documents = detail::documents_of(batch, opts.text_field);
        return std::any(work(documents, worker));
      },
      [&](std::any& result, uint64_t disk_bytes) { take(*std::any_cast<Result>(&result), disk_bytes); });
}

}  // namespace tk
