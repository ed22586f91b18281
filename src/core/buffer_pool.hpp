// A pool of device buffers reused across calls, for backends' host-in/host-out paths: operands
// and results lease a buffer and give it back when the lease ends, so steady work allocates no
// device memory. Reuse takes the smallest free buffer that fits and wastes at most half of it;
// the pool keeps at most `keep_bytes` (the largest go first). Not thread-safe: the owning device
// calls it under its own lock.
#pragma once

#include <cstddef>
#include <iterator>
#include <map>
#include <memory>
#include <utility>

namespace portmat::core {

template <class Buf>  // a device buffer type with bytes()
class BufferPool {
 public:
  class Lease {
   public:
    Lease(BufferPool* pool, std::unique_ptr<Buf> buf) : pool_(pool), buf_(std::move(buf)) {}
    Lease(Lease&&) = default;
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (buf_) pool_->give_back(std::move(buf_));
    }
    Buf* get() const { return buf_.get(); }
    Buf* operator->() const { return buf_.get(); }

   private:
    BufferPool* pool_;
    std::unique_ptr<Buf> buf_;
  };

  explicit BufferPool(std::size_t keep_bytes = 0) : keep_bytes_(keep_bytes) {}
  void set_keep_bytes(std::size_t keep_bytes) { keep_bytes_ = keep_bytes; }

  // A buffer of at least `bytes`: a pooled one, else create() (which may throw).
  template <class Create>
  Lease lease(std::size_t bytes, Create&& create) {
    auto it = free_.lower_bound(bytes);
    if (it != free_.end() && it->first <= 2 * bytes) {
      auto buf = std::move(it->second);
      free_bytes_ -= it->first;
      free_.erase(it);
      return Lease(this, std::move(buf));
    }
    return Lease(this, create());
  }

  // Frees pooled buffers until at most `keep_bytes` remain (0: all, e.g. to retry an allocation).
  void trim(std::size_t keep_bytes) {
    while (free_bytes_ > keep_bytes && !free_.empty()) {
      auto largest = std::prev(free_.end());
      free_bytes_ -= largest->first;
      free_.erase(largest);
    }
  }

  bool empty() const { return free_.empty(); }
  std::size_t free_bytes() const { return free_bytes_; }  // held in free buffers

 private:
  void give_back(std::unique_ptr<Buf> buf) {
    free_bytes_ += buf->bytes();
    free_.emplace(buf->bytes(), std::move(buf));
    trim(keep_bytes_);
  }

  std::size_t keep_bytes_;
  std::multimap<std::size_t, std::unique_ptr<Buf>> free_;
  std::size_t free_bytes_ = 0;
};

}  // namespace portmat::core
