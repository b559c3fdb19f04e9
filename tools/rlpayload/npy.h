// SPDX-License-Identifier: Apache-2.0
// NumPy .npy files (format version 1.0 written; 1.0, 2.0 and 3.0 read), one-dimensional or any C-order shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rlpayload {

// The header text of a version 1.0 file: magic, version, length, dict padded with spaces to a multiple of 64 bytes
// and ended by '\n'.
std::string npyHeader(const std::string& descr, uint64_t count);

struct NpyArray {
  std::string descr;  // e.g. "<f4"
  bool fortranOrder = false;
  std::vector<uint64_t> shape;
  uint64_t count = 1;         // product of shape
  std::vector<uint8_t> data;  // count x item size, as stored
};

// Parses a whole .npy image; `reason` explains a refusal (bad magic, unsupported version, malformed header,
// data size that does not match the shape). A bool and a reason, not a ranklens::Status: this file is the standard
// library only, so that fuzz_npy builds it alone; inject.cc turns the reason into its Status.
bool parseNpy(const std::vector<uint8_t>& image, NpyArray* out, std::string* reason);
// Item size of a numpy dtype string of the kinds rlpayload writes and reads ("<f4", "|u1", ...); 0 if unsupported.
size_t npyItemSize(const std::string& descr);

}  // namespace rlpayload
