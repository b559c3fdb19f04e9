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

// A duration in seconds at a scale that shows it: "2.35 s", "1.2 ms", "45 us".
inline std::string durationText(double seconds) {
  std::ostringstream text;
  if (seconds >= 1)
    text << std::fixed << std::setprecision(2) << seconds << " s";
  else if (seconds >= 1e-3)
    text << std::fixed << std::setprecision(1) << seconds * 1e3 << " ms";
  else
    text << std::fixed << std::setprecision(0) << seconds * 1e6 << " us";
  return text.str();
}

}  // namespace tools
}  // namespace ranklens
