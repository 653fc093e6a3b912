// Data parallel training of the built-in LibTorch objectives (issue #45;
// docs "Multi-process trials", built-in objectives): the ranks of one
// trial (Trial::ranks(), search/study.h) join one LibTorch c10d process
// group and all-reduce their gradients. Internal to the hpsearch_torch
// library (it includes LibTorch; not installed).
//
// The group: a c10d::TCPStore served by rank 0 on master_port (every
// address of its host), which the other ranks reach at master_addr; on it,
// c10d::ProcessGroupGloo over TCP (the loopback interface when all ranks
// share one host, else the interface of the host's name), or
// c10d::ProcessGroupNCCL when LibTorch was built with it (USE_C10D_NCCL)
// and the trial's device is a GPU. With Gloo, tensors on a GPU go through
// the host's memory.
//
// Timeouts: joining the group and every collective operation wait at most
// `timeout_s` seconds for the other ranks; past it (or as soon as a peer's
// connection closes: its process died) the operation throws
// Error("data parallel training, rank R of W: <operation> failed (a rank
// was lost, or did not reach it within T s): <LibTorch's message>"), so a
// rank never waits forever for lost peers.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "search/study.h"

namespace hps::torch_dist {

// Whether this build has a process group backend (the Gloo headers were
// found at build time: Debian's libgloo-dev).
bool available();

class ProcessGroup {
 public:
  // Joins the process group of the trial whose place is `ranks`
  // (world_size > 1) with tensors on `device`; waits at most `timeout_s`
  // (> 0) seconds for every rank. Throws Error as above, or Error("data
  // parallel training needs ...") when available() is false.
  static std::unique_ptr<ProcessGroup> join(const Trial::Ranks& ranks, double timeout_s,
                                            const torch::Device& device);
  virtual ~ProcessGroup() = default;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // The timeout of joining and of each operation, seconds.
  double timeout_s() const { return timeout_s_; }
  // "gloo" or "nccl".
  virtual const char* backend() const = 0;

  // Sums `t` over the ranks, in place (every rank gets the same result,
  // bit for bit). `what` names the operation in errors. Throws as above.
  virtual void all_reduce_sum(torch::Tensor& t, const char* what) = 0;
  // Replaces `t` (same shape and dtype on every rank) with rank 0's.
  virtual void broadcast(torch::Tensor& t, const char* what) = 0;

  // Sets every parameter's gradient of `module` to the sum over the ranks
  // of weight * its gradient (a parameter without a gradient counts as
  // zeros), as one flat all-reduce. With weight = the rank's share of the
  // global batch (local images / global images) the result is the
  // gradient of the global batch's mean loss.
  void all_reduce_gradients(torch::nn::Module& module, double weight);
  // Copies rank 0's parameters and buffers of `module` to every rank.
  void broadcast_module(torch::nn::Module& module);
  // Rank 0's `bytes` on every rank (the others' argument is ignored).
  std::string broadcast_bytes(const std::string& bytes, const char* what);
  // Whether an operation of this group failed (the Error above was thrown):
  // a peer was lost or timed out, and the group is not usable any more.
  bool failed() const { return failed_; }

 protected:
  ProcessGroup(int rank, int world_size, double timeout_s)
      : rank_(rank), world_size_(world_size), timeout_s_(timeout_s) {}
  // Runs `op`, turning its exceptions into the Error described above.
  void guarded(const char* what, const std::function<void()>& op);

  int rank_;
  int world_size_;
  double timeout_s_;
  bool failed_ = false;
};

// A 64-bit digest (XXH3) of the bytes of `module`'s parameters and
// buffers, in Module order: equal digests mean identical weights.
std::uint64_t parameter_digest(const torch::nn::Module& module);

}  // namespace hps::torch_dist
