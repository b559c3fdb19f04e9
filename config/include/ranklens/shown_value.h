// SPDX-License-Identifier: Apache-2.0
// A value from the user or a file quoted in an error line, by the settings loader and the tools alike.
#pragma once

#include <cstdio>
#include <string>

namespace ranklens {

// `text` for an error line: at most `limit` bytes of it, each control character (and DEL) as \n, \t, \r or \xNN, and
// when cut, "... (N bytes)" with its whole size, so that a megabyte value or an escape sequence neither floods nor
// rewrites the terminal.
inline std::string shownValue(const std::string& text, size_t limit = 200) {
  std::string out;
  const size_t shown = text.size() > limit ? limit : text.size();
  for (size_t i = 0; i < shown; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (shown < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

}  // namespace ranklens
