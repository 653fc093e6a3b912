// The report page: one self-contained HTML file (the charting library,
// Plotly.js, and the study's data inlined), drawn by the browser with no
// network request; the same page, polling a JSON endpoint, is the
// dashboard's.
#pragma once

#include <string>

#include "search/json_util.h"

namespace hps::report {

// Where the pinned Plotly.js (scripts/fetch-plotly.sh) is looked for: the
// file `plotly.min.js` beside the executable `exe_path` (where the build and
// `make install` put it), then `build_tree_path` (the build's copy, given by
// the build as HPSEARCH_PLOTLY_JS; may be empty). Returns the first that
// exists. Throws Error naming both places and the fix (run
// scripts/fetch-plotly.sh, rebuild) when neither does.
std::string find_plotly_js(const std::string& exe_path, const std::string& build_tree_path);

// Reads the whole file. Throws Error naming it if it cannot be read.
std::string read_text_file(const std::string& path);

// Reads Plotly.js from `path` (find_plotly_js()) and checks that it is the
// library: its banner ("plotly.js v") within the first 512 bytes and at
// least 1 MB (the minified bundle is about 4.5 MB), so an empty or cut-short
// copy is an error, not a page whose plots fail. Throws Error naming the
// file and the fix (scripts/fetch-plotly.sh).
std::string load_plotly_js(const std::string& path);

// The pages' Content-Security-Policy (in a <meta> element; the dashboard
// also sends it as a header, with frame-ancestors 'none'): nothing loaded
// from elsewhere; the report may make no request at all, the dashboard's
// page only to its own origin (its JSON endpoint).
extern const char* const kReportPageCsp;
extern const char* const kLivePageCsp;

struct PageMode {
  // Dashboard: the page polls `poll_url`?since=REV every poll_ms and merges
  // what changed. Report (default): static, every network request refused by
  // the page's Content-Security-Policy.
  bool live = false;
  std::string poll_url = "api/data";
  int poll_ms = 2000;
};

// The page: `data` (report/page_data.h: build_page_data) drawn with
// `plotly_js` (the library's source text, inlined). The data is embedded as
// JSON in a script element, '<' escaped so no text in a study can end it.
// When every plot has drawn, the page adds <div id="hps-ready"
// data-plots="N" data-ms="MS"> (MS: milliseconds since the page started
// loading); each plot's element carries data-marks (the trials it
// shows) and data-ms (milliseconds its drawing call took, the
// synchronous part); scatter plots of more than 2,500 points are drawn
// with WebGL (scattergl), smaller ones in SVG (one element per point).
// Script errors, console.error calls, refused requests and failed
// plots are listed in
// <ul id="hps-errors"> (empty when none).
std::string render_page(const Json& data, const std::string& plotly_js, const PageMode& mode = {});

}  // namespace hps::report
