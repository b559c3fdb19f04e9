// SPDX-License-Identifier: Apache-2.0
// The rlpayload subcommands. Each returns an exit code (common.h: 0 ok, 1 problems/differences/failure, 2 a
// command-line mistake found after parsing), having said any failure through reportFailure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common.h"

namespace rlpayload {

struct LsOptions {
  std::string trace;
  std::optional<int> rank;
  std::optional<uint64_t> comm;
  std::string op;
  std::string seqRange;  // "A:B" inclusive; "A", "A:", ":B"
  bool json = false;
};
int runLs(const LsOptions& options);

struct ShowOptions {
  Selection selection;
  uint64_t values = 10;
  bool json = false;
};
int runShow(const ShowOptions& options);

struct ExportOptions {
  Selection selection;
  std::string output;
  std::string format = "npy";  // npy | raw
  std::string as = "native";   // native | float32 | float64
};
int runExport(const ExportOptions& options);

struct InjectOptions {
  Selection selection;
  std::vector<std::string> nan, inf, set;  // index lists (comma-separated allowed), IDX=VALUE
  std::optional<double> scale, noise;
  std::optional<uint64_t> seed;
  std::string from;
  std::string output;  // -o NEWTRACE
  bool inPlace = false;
  std::optional<int> zstdLevel;
  std::vector<std::string> commandLine;  // recorded in the Edit record
};
int runInject(const InjectOptions& options);

struct DiffOptions {
  std::string a, b;
  std::optional<int> rank;
  bool json = false;
};
int runDiff(const DiffOptions& options);

struct VerifyOptions {
  std::string trace;
  std::optional<int> rank;
  bool json = false;
};
int runVerify(const VerifyOptions& options);

// Parses "A:B", "A", "A:", ":B" into an inclusive range; invalidArgument when it is none.
Status parseSeqRange(const std::string& text, std::pair<uint64_t, uint64_t>* range);

}  // namespace rlpayload
