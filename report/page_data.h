// The data a report page is drawn from: one JSON document built from a
// study's stored history (settings, trials, importances, aggregates), read
// by the page's script (report/html.h), which hands it to Plotly.js.
//
// Dense plots are downsampled here, not in the browser, so that a study of
// 100,000 trials gives a page that opens in seconds: the history plots show
// at most `max_points` COMPLETE trials (the best tenth of them, then an even
// stride over the rest), the slice and contour plots at most
// `max_slice_points` of those, the parallel coordinates at most
// `max_parcoords` of those (a study with more COMPLETE trials than
// max_points, the threshold, is "downsampled"; below it every plot has one
// mark per trial), the learning
// curves at most `max_curves` trials, the timeline the `max_timeline` most
// recently started trials; "downsampled" in the document says what was cut.
// The best-so-far lines, counts, importances, contour and top trials always
// use every trial.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "report/importance.h"
#include "search/storage.h"

namespace hps::report {

// A study of at most this many trials is never downsampled: every plot has
// one mark per trial (the browser test checks it). Above it the max_* caps
// below apply. 2,000: about as many SVG marks per plot as headless Chromium
// (software rendering) draws in 0.2 to 0.3 s; a study just above it has
// pages as dense as one of 100,000 trials.
inline constexpr std::size_t kDownsampleAbove = 2000;

struct PageOptions {
  // Trials above which the caps below apply (kDownsampleAbove); 0 applies
  // them to every study.
  std::size_t downsample_above = kDownsampleAbove;
  // Most COMPLETE trials in the history plots. Default 2000 (SVG marks; the
  // page draws more than 2,500 with WebGL, which is slower to start under
  // software rendering); more makes the page slower to open.
  std::size_t max_points = 2000;
  // Most COMPLETE trials in the parallel coordinates (a subset of those of
  // max_points, picked the same way). Default 300: Plotly draws it with
  // WebGL, the page's costliest plot under software rendering (headless
  // Chromium: seconds of set-up, then milliseconds per line).
  std::size_t max_parcoords = 300;
  // Most COMPLETE trials in each slice plot and the contour's points (a
  // subset of those of max_points, picked the same way). Default 1000: six
  // or more small SVG plots, 0.1 to 0.2 s each at 1,000 points in headless
  // Chromium.
  std::size_t max_slice_points = 1000;
  // Most trials whose learning curves are drawn (and sent), one Plotly
  // trace each. Default 150.
  std::size_t max_curves = 150;
  // Most trials in the timeline (the most recently started). Default 2000.
  std::size_t max_timeline = 2000;
  // Cells per continuous axis of the contour. Default 20.
  int contour_bins = 20;
  // Rows of the top trials table. Default 10.
  std::size_t top_k = 10;
  PedAnovaOptions importance;  // the importance estimator's options

  // Throws ConfigError naming the bad field ("report.max_points", ...).
  void validate() const;
};

// The search space of a study: the "space" of its stored space.json when it
// has one that is valid, else one unconditional param per name seen in the
// trials, with the distribution of its most recent trial.
SearchSpace study_space(const StudyInfo& info, const std::vector<TrialPtr>& trials);

// The value of a param with "scale_with" as the objective uses it:
// base * (P / reference)^e (search/search_space.h: ScaleWith); nullopt when
// the param or P is not a finite number in `params`.
std::optional<double> effective_value(const ParamSpec& spec, const Params& params);

// Builds the page's JSON document. Keys (every time in seconds since the
// Unix epoch, every value a finite number or null, non-finite values also
// spelled in "vt": "inf", "-inf"):
//   version 1; generated (ISO 8601); study {name, direction};
//   settings (the stored space.json document, or null); settings_error
//     (only when the stored document could not be read or breaks a rule:
//     stored_settings_error, algorithms/study_setup.h, e.g. "studies row
//     study_id=1: column config_json: invalid JSON ..." (settings is null
//     then) or "... budget.n_trials: must be > 0, got -5"; params then
//     come from the trials when the stored space is not valid);
//   params [{name, kind, log, low, high, step, labels (indexed kinds),
//            when {parent: [labels]} or null, scale_with or null}];
//   counts {state: n}; n_trials;
//   trials [{n, s (state), v, vt, p {param: value, the index for indexed
//            kinds}, t0, t1, w (worker), fr (fail reason),
//            iv [[step, value]] (only trials in the curve sample; "ivn":
//            the number of values, always)}] in number order;
//   history_numbers: numbers of the COMPLETE trials in the dense plots;
//   parcoords_numbers: those in the parallel coordinates when fewer than
//     history_numbers (max_parcoords), else null;
//   slice_numbers: likewise for the slice and contour points
//     (max_slice_points);
//   curve_numbers: numbers of the trials whose curves are sent;
//   best_by_number [[number, best value so far]] at each improvement and at
//     the last COMPLETE trial; best_by_time [[t1, best so far]] likewise;
//   rungs [steps] (ASHA / Hyperband pruners; else empty);
//   importance {method, source, note, n_trials, n_top,
//               values [{param, importance, divergence, n_trials}]};
//   contour null or {x: axis, y: axis, z [[best value in cell or null]]},
//     axis {param, type "linear" | "log" | "category", centers [...]};
//   timeline {workers [names], rows [[worker index, t0, t1 or null, state,
//             number]], shown, total};
//   top [{n, v, vt, params {param: label}, effective {param: value},
//         attrs (the trial's user attrs)}];
//   downsampled {points: [shown, total], slices: [...], parcoords: [...],
//     curves: [...], timeline: [...]}
//     (only the cut ones); downsample_above (the option).
// Throws ConfigError if options are invalid.
Json build_page_data(const StudyInfo& info, const std::vector<TrialPtr>& trials,
                     const PageOptions& options = {});

// As above, with the importances given instead of computed here (the
// dashboard recomputes them only when the COMPLETE trials changed, at most
// every few seconds: ped_anova_importances over 100,000 trials is the
// costliest aggregate). `importances` should come from the same trials.
Json build_page_data(const StudyInfo& info, const std::vector<TrialPtr>& trials,
                     const PageOptions& options, const Importances& importances);

// A 64-bit digest (FNV-1a) of the COMPLETE trials' numbers and values:
// equal digests mean (barring a collision) the same COMPLETE trials with
// the same values, so importances computed from them need not be redone.
std::uint64_t complete_trials_digest(const std::vector<TrialPtr>& trials);

// One trial's record as in "trials" above (with its curve when with_curve).
Json trial_record(const FrozenTrial& trial, const SearchSpace& space, bool with_curve);

// Tracks which trials changed between polls of a running study, for the
// dashboard's JSON endpoint. Not thread-safe (the caller locks).
class TrialRevisions {
 public:
  // Compares `trials` with the last call: each new or changed trial (state,
  // value, intermediate values, completion, params) gets a new revision.
  // Returns the latest revision (0 before any trial).
  std::int64_t update(const std::vector<TrialPtr>& trials);
  // The trials of the last update() whose revision is above `since`, in
  // number order.
  std::vector<TrialPtr> changed_since(std::int64_t since) const;
  std::int64_t revision() const { return revision_; }
  // A new revision for something other than a trial (the dashboard's
  // aggregates: counts, timeline, importances, ...), above every trial's.
  std::int64_t bump() { return ++revision_; }

 private:
  struct Entry {
    std::string signature;
    std::int64_t revision = 0;
    TrialPtr trial;
  };
  std::map<std::int64_t, Entry> by_number_;
  std::int64_t revision_ = 0;
};

}  // namespace hps::report
