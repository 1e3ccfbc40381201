// Copied from runtime/csrc/rlk_abi.h by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
#pragma once
// The calling convention shared by the torch bindings and every kernel launcher.
// Launchers take raw pointers, sizes and a stream, so kernel files never include torch.

#include <cstdint>

namespace rlk {

// Storage dtype of a tensor argument, as the launchers see it.
enum class Dtype : int32_t {
  float32 = 0,
  float16 = 1,
  bfloat16 = 2,
};

// Host kernels share their work out on threads the bindings lend them (torch's intra-op
// pool), so that kernel files never include torch and never start threads of their own.
// run_host_workers calls task(context, worker) once for each worker in [0, workers),
// concurrently on up to that many of the pool's threads, the caller's included, and returns
// when every call has.
using HostTask = void (*)(void* context, int64_t worker);
void run_host_workers(int64_t workers, HostTask task, void* context);

}  // namespace rlk
