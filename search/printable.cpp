#include "search/printable.h"

#include <algorithm>
#include <string>
#include <vector>

namespace hps {

std::size_t utf8_sequence_length(std::string_view text, std::size_t at) {
  auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(at);
  std::size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c < 0x80)
    return 1;
  else if (c >= 0xC2 && c <= 0xDF)
    len = 2;
  else if (c == 0xE0) {
    len = 3;
    lo = 0xA0;
  } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
    len = 3;
  else if (c == 0xED) {
    len = 3;
    hi = 0x9F;
  } else if (c == 0xF0) {
    len = 4;
    lo = 0x90;
  } else if (c >= 0xF1 && c <= 0xF3)
    len = 4;
  else if (c == 0xF4) {
    len = 4;
    hi = 0x8F;
  }
  if (len == 0 || at + len > text.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    const unsigned char b = byte(at + k);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
  }
  return len;
}

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '\0') {
      out += "\\0";
      ++i;
    } else if (const std::size_t len = utf8_sequence_length(text, i); len > 0) {
      out.append(text.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

namespace {

// The code point of the well-formed UTF-8 sequence `seq` (1 to 4 bytes).
char32_t code_point(std::string_view seq) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(seq[k]); };
  static constexpr unsigned char kLeadBits[] = {0x7f, 0x1f, 0x0f, 0x07};
  char32_t cp = byte(0) & kLeadBits[seq.size() - 1];
  for (std::size_t k = 1; k < seq.size(); ++k) cp = (cp << 6) | (byte(k) & 0x3f);
  return cp;
}

// Whether `cp` is a C1 control (U+0080..U+009F, e.g. the one-byte CSI
// U+009B) or a character that changes how the text around it shows while
// showing nothing itself: the bidirectional embeddings and overrides
// (U+202A..U+202E), isolates (U+2066..U+2069), the zero-width space, joiners
// and direction marks (U+200B..U+200F) and the zero-width no-break space /
// byte order mark (U+FEFF). A name holding U+202E shows its text backwards.
bool hidden_format(char32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || (cp >= 0x200b && cp <= 0x200f) ||
         (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0xfeff;
}

}  // namespace

std::string printable(std::string_view text) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else if (c >= 0x80) {
      const std::size_t len = utf8_sequence_length(text, i);
      if (len == 0) {
        out += "\xEF\xBF\xBD";
      } else if (const char32_t cp = code_point(text.substr(i, len)); hidden_format(cp)) {
        out += "\\u";
        for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(cp >> shift) & 15];
      } else {
        out.append(text.substr(i, len));
      }
      i += len == 0 ? 1 : len;
      continue;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out;
}

std::string printable_lines(std::string_view text, std::string_view indent) {
  std::string out;
  out.reserve(text.size());
  std::size_t from = 0;
  while (true) {
    const std::size_t nl = text.find('\n', from);
    std::string_view line = text.substr(from, nl == std::string_view::npos ? nl : nl - from);
    if (nl != std::string_view::npos && !line.empty() && line.back() == '\r')
      line.remove_suffix(1);  // "\r\n": one line break
    out += printable(line);
    if (nl == std::string_view::npos) return out;
    out += '\n';
    out.append(indent);
    from = nl + 1;
  }
}

namespace {

constexpr std::size_t kReasonLineBytes = 150;

// A line cut to about kReasonLineBytes: its first 90 and last 55 bytes
// around " ... " (the end of a reason often holds the hint: "did you mean
// 'val_loss'?"), never inside a UTF-8 sequence.
std::string cut_line(std::string_view line) {
  if (line.size() <= kReasonLineBytes) return std::string(line);
  const auto continuation = [&](std::size_t i) {
    return (static_cast<unsigned char>(line[i]) & 0xC0) == 0x80;
  };
  std::size_t head = 90;
  while (head > 0 && continuation(head)) --head;
  std::size_t tail = line.size() - 55;
  while (tail < line.size() && continuation(tail)) ++tail;
  return std::string(line.substr(0, head)) + " ... " + std::string(line.substr(tail));
}

}  // namespace

std::string one_line_reason(std::string_view reason) {
  std::vector<std::string_view> lines;
  std::size_t from = 0;
  while (from <= reason.size()) {
    const std::size_t to = std::min(reason.find('\n', from), reason.size());
    std::string_view line = reason.substr(from, to - from);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") != std::string_view::npos) lines.push_back(line);
    from = to + 1;
  }
  if (lines.empty()) return "(none given)";
  std::string text = cut_line(lines.front());
  if (lines.size() > 1) text += (lines.size() > 2 ? " ... " : " ") + cut_line(lines.back());
  return printable(text);
}

std::string printable_excerpt(std::string_view text) {
  std::size_t end = 0;
  for (std::size_t chars = 0; end < text.size() && chars < kMaxQuotedChars; ++chars)
    end += std::max<std::size_t>(1, utf8_sequence_length(text, end));
  if (end >= text.size()) return printable(text);
  return printable(text.substr(0, end)) + "... (" + std::to_string(text.size()) + " bytes in all)";
}

}  // namespace hps
