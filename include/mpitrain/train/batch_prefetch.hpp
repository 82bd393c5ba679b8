// Reads the next micro-batches in a background thread while the step computes.
//
// A bounded queue of `depth` micro-batches, filled in the order the step loop asks for them
// (micro 0 .. m-1 of consumed, then of consumed + global batch, ...). load() takes the queue's
// head when it is the batch asked for; any other request (the first, a jump) restarts the reader
// there, so the data are those of BatchLoader::load whatever the calls. The reader's exception
// reaches the caller of load(); the destructor stops and joins the thread. Only for files that
// read without HDF5 (TokenSource::concurrent_reads): the HDF5 library stays on the main thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "mpitrain/train/batch_loader.hpp"

namespace mpitrain {

class BatchPrefetcher {
 public:
  BatchPrefetcher(BatchLoader& loader, int depth);  // only the reader uses loader from now on
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // As BatchLoader::load (the same tokens), out of the queue.
  void load(uint64_t consumed, int micro, int32_t* tokens, int32_t* targets,
            int32_t* doc_starts = nullptr);

 private:
  struct Key {
    uint64_t consumed;
    int micro;
    bool operator==(const Key&) const = default;
  };
  struct Batch {
    Key key{0, 0};
    std::vector<int32_t> tokens, targets, doc_starts;  // doc_starts: with document masking
  };
  void start(Key first);
  void stop();
  void read_ahead(Key next);  // the thread's body
  Key after(Key k) const;

  BatchLoader& loader_;
  const size_t depth_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Batch> queue_;
  std::vector<Batch> spare_;  // emptied batches, their buffers reused by the reader
  std::exception_ptr error_;
  bool stopping_ = false;
  bool running_ = false;
  std::thread reader_;
};

}  // namespace mpitrain
