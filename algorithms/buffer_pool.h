// A per-thread pool of vectors (private; not installed) for the TPE model's
// per-suggestion arrays. A suggestion fits and drops a few dozen estimators
// of up to n kernels (n the history's size), and without reuse every one of
// their arrays is fresh memory (malloc, and page faults once the heap was
// trimmed), which costs more than the arithmetic. Contents are never read:
// take() hands out a cleared vector that the caller fills.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <utility>
#include <vector>

namespace hps::tpe {

template <class T>
class BufferPool {
 public:
  // At most this many vectors and bytes are kept per thread and element type.
  // A suggestion at 100,000 trials holds about 100 MB of arrays at once
  // (univariate: each param's fitted estimators, kept for its later
  // attempts); a pool smaller than that hands large arrays back to malloc,
  // which returns them to the system, and every suggestion pays page faults
  // for fresh memory (a third of its time, measured with perf). The pool
  // keeps no more than the largest suggestion used.
  static constexpr std::size_t kMaxPooled = 1024;
  static constexpr std::size_t kMaxPooledBytes = std::size_t{256} << 20;

  // An empty vector with capacity >= n: a pooled one from the smallest
  // size class that has one (classes are powers of two of the capacity,
  // so a take costs a few comparisons), or a new one with some slack (the
  // next suggestion's arrays are a few elements longer).
  std::vector<T> take(std::size_t n) {
    for (std::size_t c = size_class(n); c < kClasses; ++c) {
      std::vector<std::vector<T>>& list = free_[c];
      for (std::size_t i = list.size(); i-- > 0;) {
        if (list[i].capacity() < n) continue;
        std::vector<T> v = std::move(list[i]);
        list[i] = std::move(list.back());
        list.pop_back();
        --count_;
        bytes_ -= v.capacity() * sizeof(T);
        v.clear();
        return v;
      }
    }
    std::vector<T> v;
    v.reserve(n + n / 8 + 16);
    return v;
  }

  // Keeps v's storage if the pool has room; v is left empty either way.
  void give(std::vector<T>& v) {
    const std::size_t b = v.capacity() * sizeof(T);
    if (b > 0 && count_ < kMaxPooled && bytes_ + b <= kMaxPooledBytes) {
      bytes_ += b;
      ++count_;
      free_[size_class(v.capacity())].push_back(std::move(v));
    }
    v = std::vector<T>();
  }

 private:
  static constexpr std::size_t kClasses = 64;
  // floor(log2(n)) (0 for n <= 1).
  static std::size_t size_class(std::size_t n) {
    return n <= 1 ? 0 : static_cast<std::size_t>(std::bit_width(n) - 1);
  }

  std::array<std::vector<std::vector<T>>, kClasses> free_;
  std::size_t count_ = 0;
  std::size_t bytes_ = 0;
};

// This thread's pool of vectors of T.
template <class T>
BufferPool<T>& pool() {
  thread_local BufferPool<T> p;
  return p;
}

// A vector of n elements from this thread's pool, each set to `fill`.
template <class T>
std::vector<T> pooled(std::size_t n, T fill = T()) {
  std::vector<T> v = pool<T>().take(n);
  v.assign(n, fill);
  return v;
}

// Gives `v` back to this thread's pool when it goes out of scope.
template <class T>
class PooledScope {
 public:
  explicit PooledScope(std::vector<T>& v) : v_(v) {}
  ~PooledScope() { pool<T>().give(v_); }
  PooledScope(const PooledScope&) = delete;
  PooledScope& operator=(const PooledScope&) = delete;

 private:
  std::vector<T>& v_;
};

}  // namespace hps::tpe
