#include "objectives/persistent_program.h"

#include <algorithm>
#include <utility>

namespace hps {

namespace {

using SteadyClock = std::chrono::steady_clock;

std::chrono::duration<double> seconds(double s) { return std::chrono::duration<double>(s); }

}  // namespace

PersistentProgram::PersistentProgram(SpawnOptions spawn, double grace_s)
    : spawn_(std::move(spawn)), grace_s_(std::max(0.0, grace_s)) {
  spawn_.stdin_pipe = true;
}

PersistentProgram::~PersistentProgram() {
  if (!running()) return;
  try {
    close_stdin();
    const auto deadline =
        SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(seconds(grace_s_));
    while (SteadyClock::now() < deadline) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now());
      if (child_->wait_for_output(std::min(left, std::chrono::milliseconds(100)), {})) return;
    }
    child_->terminate(seconds(grace_s_));
  } catch (...) {
    // ~ChildProcess kills the group
  }
}

bool PersistentProgram::start() {
  if (running()) return false;
  child_.reset();
  child_ = std::make_unique<ChildProcess>(spawn_);
  ++starts_;
  return true;
}

std::string PersistentProgram::send(const Json& message) {
  if (!running()) return "the program is not running";
  std::string line = message.dump(-1, ' ', false, Json::error_handler_t::replace);
  line += '\n';
  return child_->write_stdin(line);
}

bool PersistentProgram::wait_for_output(std::chrono::milliseconds timeout,
                                        const ChildProcess::LineHandler& on_line) {
  if (!child_) return true;
  return child_->wait_for_output(timeout, on_line);
}

void PersistentProgram::stop(std::chrono::duration<double> grace,
                             const ChildProcess::LineHandler& on_line) {
  if (child_ && !child_->finished()) child_->terminate(grace, on_line);
}

void PersistentProgram::close_stdin() {
  if (child_) child_->close_stdin();
}

std::string PersistentProgram::describe_status() const {
  return child_ ? child_->describe_status() : "not started";
}

PersistentProgramPool::PersistentProgramPool(SpawnOptions spawn, double grace_s)
    : spawn_(std::move(spawn)), grace_s_(grace_s) {}

PersistentProgramPool::~PersistentProgramPool() {
  for (auto& program : idle_) program->close_stdin();
  idle_.clear();  // each waits up to grace_s; they all saw end of file already
}

std::unique_ptr<PersistentProgram> PersistentProgramPool::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (idle_.empty()) return std::make_unique<PersistentProgram>(spawn_, grace_s_);
  std::unique_ptr<PersistentProgram> program = std::move(idle_.back());
  idle_.pop_back();
  return program;
}

void PersistentProgramPool::give_back(std::unique_ptr<PersistentProgram> program) {
  if (!program) return;
  std::lock_guard<std::mutex> lock(mutex_);
  idle_.push_back(std::move(program));
}

}  // namespace hps
