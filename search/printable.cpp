#include "search/printable.h"

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
      } else if (c == 0xc2 && static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
        const auto c1 = static_cast<unsigned char>(text[i + 1]);  // a C1 control
        out += "\\u00";
        out += kHex[c1 >> 4];
        out += kHex[c1 & 15];
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

}  // namespace hps
