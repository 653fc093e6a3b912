#include "cli/progress.h"

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/table.h"
#include "search/printable.h"
#include "search/warm_start.h"

namespace hps::cli {

Progress::Progress(std::FILE* out, bool tty)
    : out_(out), tty_(tty), start_(std::chrono::steady_clock::now()), last_plain_() {}

Progress::~Progress() { finish(); }

double Progress::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::optional<double> time_left_s(const ProgressState& s, double elapsed_s) {
  std::optional<double> left;
  // The rate of this run's trials (a resumed study's earlier trials took
  // none of its time): no estimate before one of them finished.
  const std::int64_t finished_here = s.finished - s.finished_before;
  if (s.n_trials && finished_here > 0 && *s.n_trials > s.finished) {
    const double working = std::max(0.0, elapsed_s - s.work_started_s.value_or(0.0));
    left = working / static_cast<double>(finished_here) *
           static_cast<double>(*s.n_trials - s.finished);
  }
  if (s.timeout_s) {
    double t = std::max(0.0, *s.timeout_s - elapsed_s);
    left = left ? std::min(*left, t) : t;
  }
  return left;
}

void Progress::update(const ProgressState& s, const std::string& last, bool force) {
  if (tty_ && !force) {
    // A fast study finishes thousands of trials a second: redraw at most
    // every 100 ms.
    auto now = std::chrono::steady_clock::now();
    if (drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
  }
  double elapsed = elapsed_s();
  std::string done =
      s.n_trials ? fmt::format("{}/{}", s.finished, *s.n_trials) : fmt::format("{}", s.finished);
  std::string best = s.best_value ? fmt::format("best {} (trial {})", format_value(*s.best_value),
                                                s.best_number.value_or(-1))
                                  : std::string("best -");
  std::string eta;
  const std::optional<double> left = time_left_s(s, elapsed);
  if (left) eta = " | ~" + format_duration(*left) + " left";
  // Text from programs and workers is shown without control characters.
  std::string extra = s.extra.empty() ? "" : " | " + printable(s.extra);
  if (tty_) {
    std::string bar;
    if (s.n_trials && *s.n_trials > 0) {
      const std::size_t w = 20;
      const auto fill = static_cast<std::size_t>(
          20.0 * std::min<double>(
                     1.0, static_cast<double>(s.finished) / static_cast<double>(*s.n_trials)));
      bar = "[" + std::string(fill, '#') + std::string(w - fill, '.') + "] ";
    }
    std::string line = fmt::format("{}{} trials | {} | {}{}{}", bar, done, best,
                                   format_duration(elapsed), eta, extra);
    write("\r\033[2K" + line);
    drawn_ = true;
    return;
  }
  auto now = std::chrono::steady_clock::now();
  // Plain lines: when the count of finished trials changed (at most one a
  // second), else one every 30 s to show the run is alive.
  const auto gap =
      s.finished != last_plain_finished_ ? std::chrono::seconds(1) : std::chrono::seconds(30);
  if (!force && last_plain_.time_since_epoch().count() != 0 && now - last_plain_ < gap) return;
  last_plain_ = now;
  last_plain_finished_ = s.finished;
  write(fmt::format("[{}] {} trials done | {}{}{}{}\n", format_duration(elapsed), done, best, eta,
                    extra, last.empty() ? "" : " | last: " + printable(last)));
}

void Progress::finish() {
  if (tty_ && drawn_) {
    write("\n");
    drawn_ = false;
  }
}

void Progress::write(const std::string& text) {
  // Not fmt::print, which throws when a write fails: a progress line that
  // cannot be written (stdout a pipe whose reader is gone, with SIGPIPE
  // ignored: EPIPE; a full disk) is lost, and the run goes on. The stream's
  // error flag is cleared so that a passing error does not stick.
  if (std::fwrite(text.data(), 1, text.size(), out_) != text.size() || std::fflush(out_) != 0)
    std::clearerr(out_);
}

std::string summary(const Study& study, double elapsed_s, const std::string& end_reason) {
  std::string out;
  Storage& storage = study.storage();
  // Counts from the store's per-state counts (an indexed read), not a load
  // of every trial; the warm-start copies (of an earlier study's trials,
  // search/warm_start.h) from the study's warm_start attr.
  const TrialCounts counts = storage.count_trials_by_state(study.study_id());
  const std::int64_t warm = warm_start_copies(storage.get_study(study.study_id()));
  out += fmt::format("Study '{}' ({}): {} trials in {}{}\n", printable_excerpt(study.name()),
                     to_string(study.direction()), counts.total(), format_duration(elapsed_s),
                     end_reason.empty() ? std::string() : " (" + end_reason + ")");
  std::string by_state;
  for (TrialState st : {TrialState::kComplete, TrialState::kPruned, TrialState::kFail,
                        TrialState::kRunning, TrialState::kWaiting}) {
    if (!by_state.empty()) by_state += ", ";
    by_state += fmt::format("{} {}", counts.count(st), to_string(st));
  }
  out += "  " + by_state + "\n";
  if (warm > 0)
    out += fmt::format(
        "  {} of them warm-start copies of an earlier study (not run here, not the "
        "best)\n",
        warm);
  TrialPtr best;
  try {
    best = study.best_trial();
  } catch (const Error&) {
    out += "  " + no_best_trial_yet(counts.count(TrialState::kComplete)) + "\n";
    return out;
  }
  out += fmt::format("\nBest trial: #{}  value {}\n", best->number, format_value(*best->value));
  Table table({"param", "value"});
  for (const auto& [k, v] : best->params) table.add_row({k, format_param(v)});
  if (best->user_attrs.is_object())
    for (const auto& [k, v] : best->user_attrs.items())
      table.add_row({"(attr) " + k, format_param(v)});
  out += table.render();
  return out;
}

}  // namespace hps::cli
