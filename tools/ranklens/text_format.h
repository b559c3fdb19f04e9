// SPDX-License-Identifier: Apache-2.0
// How the ranklens commands print percentages and milliseconds in their tables, in one place so they read alike.
#pragma once

#include <cstdint>
#include <iomanip>
#include <sstream>
#include <string>

namespace ranklens {
namespace tools {

// 0.0123 -> "1.23%" ("+1.23%" with the sign).
inline std::string percentText(double fraction, bool withSign = false) {
  std::ostringstream text;
  if (withSign) text << std::showpos;
  text << std::fixed << std::setprecision(2) << fraction * 100 << "%";
  return text.str();
}

// Nanoseconds as milliseconds with `decimals` places: "12.345 ms".
inline std::string msText(double ns, int decimals = 3) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(decimals) << ns / 1e6 << " ms";
  return text.str();
}

}  // namespace tools
}  // namespace ranklens
