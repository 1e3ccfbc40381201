// Copied from runtime/kernels/rlk_scratch.h by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
#pragma once
// Float32 scratch for every platform's kernels: packed operands, tiles of
// accumulators.  Aligned to a cache line and left uninitialised: a kernel writes every element
// it reads.  Each thread keeps its buffers for its next call, so that a kernel called again
// (a model's next layer, the next step) does not fault fresh pages in and clear them, which
// costs a GEMM of a small model's shapes a tenth of its time; a buffer over kKeepBytes is
// returned at once.  A buffer of kHugeBytes or more (a vocabulary projection's packed weight,
// 64 MB at V = 32000, H = 1024, when more rows than one work item's share it) starts on a
// huge-page boundary and asks Linux for huge pages (madvise; transparent huge pages set to
// "madvise" or "always"), so that its first touch faults a page per 2 MB instead of one per
// 4 kB.  Which memory holds a value never changes a bit of a result.
//
// Scratch objects of one thread are destroyed in the reverse order of their construction
// (they are scoped), so a thread's buffers form a stack: the n-th live Scratch of a thread uses
// its n-th buffer.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "rlk_numerics.h"
#if defined(__linux__)
#include <sys/mman.h>
#endif

#if RLK_DEVICE_CODE
#error "rlk_scratch.h holds the host's scratch buffers; device kernels use shared memory and registers"
#endif

// The platform's namespace, rlk::cpu on the host (rlk_numerics.h names it).
namespace rlk {
namespace RLK_TARGET_NAMESPACE {

class Scratch {
 public:
  explicit Scratch(int64_t n) : depth_(stack().live++) {
    Stack& s = stack();
    if (s.buffers.size() <= depth_) s.buffers.resize(depth_ + 1);
    Buffer& buffer = s.buffers[depth_];
    const size_t floats = static_cast<size_t>(n > 0 ? n : 0) + kAlignFloats;
    if (buffer.floats < floats) {
      buffer.storage.reset();  // before the new one: both at once could double the peak
      buffer.floats = 0;       // and a failed allocation leaves an empty buffer, not a stale size
      try {
        buffer.storage.reset(allocate(floats));
      } catch (...) {
        --s.live;  // no destructor runs for a constructor that throws
        throw;
      }
      buffer.floats = floats;
    }
    void* p = buffer.storage.get();
    size_t space = floats * sizeof(float);
    data_ = static_cast<float*>(std::align(kAlignFloats * sizeof(float), (floats - kAlignFloats) * sizeof(float), p, space));
  }

  ~Scratch() {
    Stack& s = stack();
    --s.live;
    Buffer& buffer = s.buffers[depth_];
    if (buffer.floats * sizeof(float) > kKeepBytes) {
      buffer.storage.reset();
      buffer.floats = 0;
    }
  }

  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  float* data() const { return data_; }

 private:
  static constexpr size_t kAlignFloats = 16;  // 64 bytes
  static constexpr size_t kKeepBytes = size_t{32} << 20;
  static constexpr size_t kHugeBytes = size_t{2} << 20;

  static float* allocate(size_t floats) {
    const size_t bytes = floats * sizeof(float);
    const bool huge = bytes >= kHugeBytes;
    const size_t rounded = huge ? (bytes + kHugeBytes - 1) / kHugeBytes * kHugeBytes : bytes;  // aligned_alloc's size: a multiple
    void* p = huge ? std::aligned_alloc(kHugeBytes, rounded) : std::malloc(bytes);
    if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (huge) madvise(p, rounded, MADV_HUGEPAGE);  // a request only: where it is refused, small pages serve
#endif
    return static_cast<float*>(p);
  }

  struct Free {
    void operator()(float* p) const { std::free(p); }
  };

  struct Buffer {
    std::unique_ptr<float[], Free> storage;
    size_t floats = 0;
  };
  struct Stack {
    std::vector<Buffer> buffers;
    size_t live = 0;
  };
  static Stack& stack() {
    thread_local Stack s;
    return s;
  }

  size_t depth_;
  float* data_;
};

}  // namespace RLK_TARGET_NAMESPACE
}  // namespace rlk
