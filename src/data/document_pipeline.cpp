// The document pipeline (document_pipeline.h): a pool of workers takes batches from a queue; the batches
// stay in submission order in a second queue, from which the calling thread takes the oldest once it is done.
// A batch holds raw records (a .txt file, JSON lines) or a run of a Parquet text column's pages, which its
// worker decodes: a Parquet file's row groups and pages are parallel work.
#include "data/document_pipeline.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "core/error.h"
#include "data/parquet_text.h"

namespace tk {
namespace {

// Text per batch: large enough that hand-offs cost nothing next to the work, small enough to keep every core
// busy and memory bounded (a few batches per thread are in flight).
constexpr uint64_t kBatchBytes = 1 << 20;
constexpr size_t kBatchesInFlightPerThread = 4;

struct Batch {
  const InputFile* file = nullptr;
  std::vector<Record> records;
  parquet::TextRun parquet;  // for a Parquet file, instead of records
  uint64_t text_bytes = 0;
  uint64_t disk_bytes = 0;
  std::any result;
  std::exception_ptr error;
  bool done = false;
};

class BatchPool {
 public:
  BatchPool(int threads, const detail::AnyWork& work) : work_(work) {
    for (int i = 0; i < threads; i++) workers_.emplace_back([this, i] { run(i); });
  }

  ~BatchPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  void submit(std::unique_ptr<Batch> b) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(b.get());
      order_.push_back(std::move(b));
    }
    work_cv_.notify_one();
  }

  size_t in_flight() {
    std::lock_guard<std::mutex> lock(mu_);
    return order_.size();
  }

  // The oldest submitted batch once worked on; rethrows its error (so the first error in input order wins).
  std::unique_ptr<Batch> take_oldest() {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return order_.front()->done; });
    std::unique_ptr<Batch> b = std::move(order_.front());
    order_.pop_front();
    if (b->error) std::rethrow_exception(b->error);
    return b;
  }

 private:
  void run(int worker) {
    for (;;) {
      Batch* b = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        b = queue_.front();
        queue_.pop_front();
      }
      try {
        if (b->parquet.chunk) {  // a Parquet run: its rows' texts are the batch's records
          for (std::string& text : parquet::text_documents(b->parquet)) b->records.push_back({std::move(text), 0});
          b->parquet = {};  // the chunk is freed once its last run is decoded
        }
        RecordBatch batch{*b->file, b->records};
        b->result = work_(batch, worker);
        std::vector<Record>().swap(b->records);  // the raw lines are no longer needed while the batch waits its turn
      } catch (...) {
        b->error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        b->done = true;
      }
      done_cv_.notify_all();
    }
  }

  const detail::AnyWork& work_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Batch*> queue_;                  // submitted, not yet picked up by a worker
  std::deque<std::unique_ptr<Batch>> order_;  // submitted, not yet taken back, in submission order
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

int document_pipeline_threads(const DocumentPipelineOptions& opts) {
  TK_CHECK(opts.threads >= 0, "--threads must be positive (or 0 for one per core), not {}", opts.threads);
  return opts.threads > 0 ? opts.threads : int(std::max(1u, std::thread::hardware_concurrency()));
}

namespace detail {

// The text of each record: a .txt file's is the record, a Parquet row's its text column; a JSON line's is its text
// field.
Documents documents_of(RecordBatch& batch, const std::string& text_field) {
  Documents docs;
  docs.reserve(batch.records.size());
  const bool text = batch.file.format == InputFormat::Text || batch.file.format == InputFormat::Parquet;
  for (Record& r : batch.records)
    docs.push_back(text ? std::move(r.data) : json_document_text(r.data, text_field, batch.file.path, r.line));
  return docs;
}

void run_record_pipeline(const std::vector<InputFile>& inputs, const DocumentPipelineOptions& opts,
                         const AnyWork& work, const AnyTake& take) {
  const int threads = document_pipeline_threads(opts);
  BatchPool pool(threads, work);
  auto take_oldest = [&] {
    std::unique_ptr<Batch> b = pool.take_oldest();
    take(b->result, b->disk_bytes);
  };
  auto submit = [&](std::unique_ptr<Batch> b) {
    pool.submit(std::move(b));
    while (pool.in_flight() >= kBatchesInFlightPerThread * size_t(threads)) take_oldest();
  };
  for (const InputFile& file : inputs) {
    if (file.format == InputFormat::Parquet) {
      uint64_t accounted = 0;
      auto submit_run = [&](parquet::TextRun&& run, uint64_t disk_bytes) {
        auto batch = std::make_unique<Batch>();
        batch->file = &file;
        batch->parquet = std::move(run);
        batch->disk_bytes = disk_bytes;
        accounted += disk_bytes;
        submit(std::move(batch));
      };
      parquet::read_text_runs(file.path, opts.text_field, kBatchBytes, submit_run);
      // The footer's bytes: an empty batch, so that the disk bytes add up to the file's size.
      if (accounted < file.bytes) submit_run({}, file.bytes - accounted);
      continue;
    }
    RecordReader reader(file);
    uint64_t accounted = 0;  // disk bytes already given to earlier batches of this file
    auto batch = std::make_unique<Batch>();
    batch->file = &file;
    for (Record r; reader.next(r);) {
      batch->text_bytes += r.data.size();
      batch->records.push_back(std::move(r));
      if (batch->text_bytes < kBatchBytes) continue;
      batch->disk_bytes = reader.bytes_consumed() - accounted;
      accounted += batch->disk_bytes;
      submit(std::exchange(batch, std::make_unique<Batch>()));
      batch->file = &file;
    }
    batch->disk_bytes = file.bytes - std::min(accounted, file.bytes);
    if (!batch->records.empty() || batch->disk_bytes > 0) submit(std::move(batch));
  }
  while (pool.in_flight() > 0) take_oldest();
}

}  // namespace detail
}  // namespace tk
