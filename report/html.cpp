#include "report/html.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "search/errors.h"
#include "search/printable.h"

namespace hps::report {

// report/page_template.cpp
extern const char* const kPageHead;
extern const char* const kPageEarlyScript;
extern const char* const kPageScript;

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw Error("cannot read " + path);
  return s.str();
}

std::string find_plotly_js(const std::string& exe_path, const std::string& build_tree_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path exe = fs::weakly_canonical(fs::path(exe_path), ec);
  if (ec) exe = fs::path(exe_path);
  fs::path beside = exe.parent_path() / "plotly.min.js";
  if (fs::is_regular_file(beside, ec)) return beside.string();
  if (!build_tree_path.empty() && fs::is_regular_file(build_tree_path, ec)) return build_tree_path;
  throw Error("the charting library Plotly.js is missing: no " + beside.string() +
              (build_tree_path.empty() ? std::string() : " nor " + build_tree_path) +
              "; run scripts/fetch-plotly.sh (or scripts/install-deps.sh), then rebuild");
}

std::string load_plotly_js(const std::string& path) {
  std::string text = read_text_file(path);
  constexpr std::size_t kMinBytes = 1'000'000;
  if (text.size() < kMinBytes || text.substr(0, 512).find("plotly.js v") == std::string::npos)
    throw Error(path + " is not the Plotly.js bundle (" + std::to_string(text.size()) +
                " bytes, no 'plotly.js v' banner): a copy cut short or replaced; run "
                "scripts/fetch-plotly.sh (or scripts/install-deps.sh), then rebuild");
  return text;
}

#define HPS_PAGE_CSP_COMMON                                                  \
  "default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src " \
  "'unsafe-inline'; img-src data: blob:; font-src data:; "
const char* const kReportPageCsp = HPS_PAGE_CSP_COMMON "connect-src 'none'";
const char* const kLivePageCsp = HPS_PAGE_CSP_COMMON "connect-src 'self'";
#undef HPS_PAGE_CSP_COMMON

namespace {

// JSON for a <script type="application/json"> element: '<' as \u003c (only
// inside strings in JSON), so "</script>" in a study's text cannot close it.
std::string embed_json(const Json& data) {
  std::string text = data.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size() + text.size() / 64);
  for (char c : text) {
    if (c == '<')
      out += "\\u003c";
    else
      out += c;
  }
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

std::string render_page(const Json& data, const std::string& plotly_js, const PageMode& mode) {
  if (plotly_js.find("</script") != std::string::npos)
    throw Error("the Plotly.js text holds \"</script\" and cannot be inlined");
  std::string title = "hpsearch report";
  if (data.contains("study") && data["study"].contains("name"))
    // Escaped as the CLI prints it: a bidirectional override in a stored
    // name would reorder the browser tab's title.
    title += ": " + printable_excerpt(data["study"]["name"].get<std::string>());
  // The report may load nothing; the dashboard only its own endpoint.
  std::string csp = mode.live ? kLivePageCsp : kReportPageCsp;
  Json config{{"live", mode.live}, {"poll_url", mode.poll_url}, {"poll_ms", mode.poll_ms}};
  std::string page;
  page.reserve(plotly_js.size() + 200000);
  page += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  page += "<meta name=\"generator\" content=\"hpsearch report\">\n";  // what report -o may replace
  page += "<meta http-equiv=\"Content-Security-Policy\" content=\"" + csp + "\">\n";
  page += "<title>" + html_escape(title) + "</title>\n";
  page += kPageHead;
  page += "<script>\n";
  page += kPageEarlyScript;
  page += "\n</script>\n<script>\n";
  page += plotly_js;
  page += "\n</script>\n<script type=\"application/json\" id=\"hps-data\">";
  page += embed_json(data);
  page += "</script>\n<script type=\"application/json\" id=\"hps-mode\">";
  page += embed_json(config);
  page += "</script>\n<script>\n";
  page += kPageScript;
  page += "\n</script>\n</body></html>\n";
  return page;
}

}  // namespace hps::report
