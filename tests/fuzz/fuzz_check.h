// SPDX-License-Identifier: Apache-2.0
// What every fuzz target asserts with: a property that does not hold stops the run as a crash, which libFuzzer
// reports with the input that caused it (assert() would vanish under NDEBUG).
#pragma once

inline void check(bool condition) {
  if (!condition) __builtin_trap();
}
