// Data parallel training of the built-in LibTorch objectives: the process
// group of a multi-process trial (objectives/torch_distributed.h).
#include "objectives/torch_distributed.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "search/errors.h"

// HPSEARCH_HAVE_GLOO: CMake found the Gloo headers (USE_C10D_GLOO comes
// from Torch's CMake config, whether they are installed or not).
#if defined(HPSEARCH_HAVE_GLOO) && defined(USE_C10D_GLOO)
#define HPSEARCH_C10D 1
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#endif

namespace hps::torch_dist {

void ProcessGroup::guarded(const char* what, const std::function<void()>& op) {
  try {
    op();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    failed_ = true;
    std::string msg = e.what();
    msg = msg.substr(0, msg.find('\n'));
    throw Error(fmt::format(
        "data parallel training, rank {} of {}: {} failed (a rank was lost, or did not reach it "
        "within {:g} s): {}",
        rank_, world_size_, what, timeout_s_, msg));
  }
}

void ProcessGroup::all_reduce_gradients(torch::nn::Module& module, double weight) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> params = module.parameters();
  if (params.empty()) return;
  std::vector<torch::Tensor> flat;
  flat.reserve(params.size());
  for (const auto& p : params) {
    const torch::Tensor& g = p.grad();
    flat.push_back(g.defined() ? g.reshape({-1}) * weight : torch::zeros({p.numel()}, p.options()));
  }
  torch::Tensor buffer = torch::cat(flat);
  all_reduce_sum(buffer, "gradient all-reduce");
  std::int64_t offset = 0;
  for (auto& p : params) {
    torch::Tensor part = buffer.slice(0, offset, offset + p.numel()).view(p.sizes());
    offset += p.numel();
    if (p.grad().defined())
      p.mutable_grad().copy_(part);
    else
      p.mutable_grad() = part.clone();
  }
}

void ProcessGroup::broadcast_module(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> tensors = module.parameters();
  for (const auto& b : module.buffers()) tensors.push_back(b);
  if (tensors.empty()) return;
  std::vector<torch::Tensor> flat;
  flat.reserve(tensors.size());
  // One broadcast per dtype would be needed for mixed dtypes; the
  // objectives' modules hold float32 only, others go one by one.
  for (auto& t : tensors) {
    if (t.scalar_type() != torch::kFloat32) {
      torch::Tensor copy = t.contiguous();
      broadcast(copy, "parameter broadcast");
      t.copy_(copy);
      continue;
    }
    flat.push_back(t.reshape({-1}));
  }
  if (flat.empty()) return;
  torch::Tensor buffer = torch::cat(flat);
  broadcast(buffer, "parameter broadcast");
  std::int64_t offset = 0;
  for (auto& t : tensors) {
    if (t.scalar_type() != torch::kFloat32) continue;
    t.copy_(buffer.slice(0, offset, offset + t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

std::string ProcessGroup::broadcast_bytes(const std::string& bytes, const char* what) {
  torch::Tensor size =
      torch::full({1}, rank_ == 0 ? static_cast<std::int64_t>(bytes.size()) : 0, torch::kInt64);
  broadcast(size, what);
  const std::int64_t n = size.item<std::int64_t>();
  if (n <= 0) return {};
  torch::Tensor data = torch::empty({n}, torch::kUInt8);
  if (rank_ == 0) std::memcpy(data.data_ptr(), bytes.data(), bytes.size());
  broadcast(data, what);
  return {static_cast<const char*>(data.data_ptr()), static_cast<std::size_t>(n)};
}

std::uint64_t parameter_digest(const torch::nn::Module& module) {
  XXH3_state_t* state = XXH3_createState();
  if (!state) throw std::bad_alloc();
  XXH3_64bits_reset(state);
  auto add = [&](const torch::Tensor& t) {
    torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
    XXH3_64bits_update(state, c.data_ptr(), c.nbytes());
  };
  for (const auto& p : module.parameters()) add(p);
  for (const auto& b : module.buffers()) add(b);
  const std::uint64_t digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return digest;
}

#ifdef HPSEARCH_C10D

namespace {

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000.0)));
}

// A c10d process group (Gloo or NCCL) on a TCPStore.
class C10dGroup final : public ProcessGroup {
 public:
  C10dGroup(const Trial::Ranks& ranks, double timeout_s, const torch::Device& device)
      : ProcessGroup(ranks.rank, ranks.world_size, timeout_s), device_(device) {
    guarded("joining the process group", [&] { join(ranks); });
  }
  ~C10dGroup() override {
    group_.reset();  // before the store it rendezvoused on
    store_.reset();
  }
  const char* backend() const override { return nccl_ ? "nccl" : "gloo"; }

  void all_reduce_sum(torch::Tensor& t, const char* what) override {
    guarded(what, [&] {
      torch::Tensor io = staged(t);
      std::vector<at::Tensor> v{io};
      group_->allreduce(v)->wait();
      if (!io.is_same(t)) t.copy_(io);
    });
  }
  void broadcast(torch::Tensor& t, const char* what) override {
    guarded(what, [&] {
      torch::Tensor io = staged(t);
      std::vector<at::Tensor> v{io};
      group_->broadcast(v)->wait();
      if (!io.is_same(t)) t.copy_(io);
    });
  }

 private:
  void join(const Trial::Ranks& ranks) {
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(ranks.master_port);
    so.isServer = ranks.rank == 0;
    so.numWorkers = static_cast<std::size_t>(ranks.world_size);
    so.waitWorkers = true;
    so.timeout = to_ms(timeout_s_);
    store_ = c10::make_intrusive<c10d::TCPStore>(ranks.master_addr, so);
#ifdef USE_C10D_NCCL
    if (device_.is_cuda()) {
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = to_ms(timeout_s_);
      group_ =
          c10::make_intrusive<c10d::ProcessGroupNCCL>(store_, ranks.rank, ranks.world_size, opts);
      nccl_ = true;
      return;
    }
#endif
    auto opts = c10d::ProcessGroupGloo::Options::create(to_ms(timeout_s_));
    // One host: the loopback interface; else the interface of the host's name.
    opts->devices.push_back(ranks.local_world_size == ranks.world_size
                                ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                : c10d::ProcessGroupGloo::createDefaultDevice());
    group_ =
        c10::make_intrusive<c10d::ProcessGroupGloo>(store_, ranks.rank, ranks.world_size, opts);
  }

  // The tensor the backend works on: `t` itself (contiguous, on a device
  // the backend takes), else a contiguous copy on the CPU.
  torch::Tensor staged(const torch::Tensor& t) const {
    if (t.is_contiguous() && (nccl_ || t.is_cpu())) return t;
    return t.to(torch::kCPU).contiguous();
  }

  torch::Device device_;
  bool nccl_ = false;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
};

}  // namespace

bool available() { return true; }

std::unique_ptr<ProcessGroup> ProcessGroup::join(const Trial::Ranks& ranks, double timeout_s,
                                                 const torch::Device& device) {
  if (!(timeout_s > 0)) throw Error("data parallel training: the timeout must be > 0 seconds");
  auto group = std::make_unique<C10dGroup>(ranks, timeout_s, device);
  spdlog::info("data parallel training: rank {} of {} joined the {} process group at {}:{}",
               ranks.rank, ranks.world_size, group->backend(), ranks.master_addr,
               ranks.master_port);
  return group;
}

#else  // no Gloo headers at build time

bool available() { return false; }

std::unique_ptr<ProcessGroup> ProcessGroup::join(const Trial::Ranks& ranks, double,
                                                 const torch::Device&) {
  throw Error(fmt::format(
      "data parallel training (rank {} of {}) needs LibTorch's ProcessGroupGloo, and this build "
      "of hpsearch-torch was made without the Gloo headers (Debian: libgloo-dev)",
      ranks.rank, ranks.world_size));
}

#endif

}  // namespace hps::torch_dist
