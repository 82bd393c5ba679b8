#include "mpitrain/train/batch_prefetch.hpp"

#include <algorithm>

namespace mpitrain {

BatchPrefetcher::BatchPrefetcher(BatchLoader& loader, int depth)
    : loader_(loader), depth_(static_cast<size_t>(std::max(1, depth))) {}

BatchPrefetcher::~BatchPrefetcher() { stop(); }

BatchPrefetcher::Key BatchPrefetcher::after(Key k) const {
  if (++k.micro < loader_.micro_batches()) return k;
  return {k.consumed + static_cast<uint64_t>(loader_.global_batch()), 0};
}

void BatchPrefetcher::start(Key first) {
  stopping_ = false;
  error_ = nullptr;
  queue_.clear();
  running_ = true;
  reader_ = std::thread([this, first] { read_ahead(first); });
}

void BatchPrefetcher::stop() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (reader_.joinable()) reader_.join();
  running_ = false;
}

void BatchPrefetcher::read_ahead(Key next) {
  const size_t n = static_cast<size_t>(loader_.micro_batch()) * loader_.seq_len();
  try {
    for (;; next = after(next)) {
      Batch b;
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return stopping_ || queue_.size() < depth_; });
        if (stopping_) return;
        if (!spare_.empty()) {  // a buffer load() has emptied: no allocation in the steady state
          b = std::move(spare_.back());
          spare_.pop_back();
        }
      }
      b.key = next;
      b.tokens.resize(n);
      b.targets.resize(n);
      b.doc_starts.resize(loader_.masks_documents() ? n : 0);
      loader_.load(next.consumed, next.micro, b.tokens.data(), b.targets.data(),
                   b.doc_starts.data());
      {
        const std::lock_guard lock(mutex_);
        queue_.push_back(std::move(b));
      }
      changed_.notify_all();
    }
  } catch (...) {
    {
      const std::lock_guard lock(mutex_);
      error_ = std::current_exception();
    }
    changed_.notify_all();
  }
}

void BatchPrefetcher::load(uint64_t consumed, int micro, int32_t* tokens, int32_t* targets,
                           int32_t* doc_starts) {
  const Key want{consumed, micro};
  if (!running_) start(want);
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return !queue_.empty() || error_; });
  if (queue_.empty()) std::rethrow_exception(error_);
  Batch b = std::move(queue_.front());
  queue_.pop_front();
  lock.unlock();
  changed_.notify_all();
  if (!(b.key == want)) {  // asked out of the predicted order: the reader starts over from here
    stop();
    start(want);
    load(consumed, micro, tokens, targets, doc_starts);
    return;
  }
  std::copy(b.tokens.begin(), b.tokens.end(), tokens);
  std::copy(b.targets.begin(), b.targets.end(), targets);
  std::copy(b.doc_starts.begin(), b.doc_starts.end(), doc_starts);
  const std::lock_guard spare_lock(mutex_);
  spare_.push_back(std::move(b));
}

}  // namespace mpitrain
