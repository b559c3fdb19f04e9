// SPDX-License-Identifier: Apache-2.0
// rlpayload ls: the calls that have payloads (their effective reference), with sizes and compression.
#include <cstdio>
#include <iostream>
#include <limits>

#include "commands.h"
#include "dtype.h"

namespace rlpayload {

using ranklens::trace::PayloadRef;

std::pair<uint64_t, uint64_t> parseSeqRange(const std::string& text) {
  auto number = [&](const std::string& part, uint64_t fallback) -> uint64_t {
    if (part.empty()) return fallback;
    if (part.find_first_not_of("0123456789") != std::string::npos || part.size() > 19)
      throw UsageError{"--seq " + text + ": expected A:B, A, A: or :B with non-negative integers"};
    return std::stoull(part);
  };
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    const uint64_t v = number(text, 0);
    if (text.empty()) throw UsageError{"--seq: empty range"};
    return {v, v};
  }
  const uint64_t lo = number(text.substr(0, colon), 0);
  const uint64_t hi = number(text.substr(colon + 1), std::numeric_limits<uint64_t>::max());
  if (lo > hi) throw UsageError{"--seq " + text + ": the range is empty (A > B)"};
  return {lo, hi};
}

int runLs(const LsOptions& o) {
  std::optional<int> op;
  if (!o.op.empty()) {
    op = opFromName(o.op);
    if (!op) throw UsageError{"--op " + o.op + ": not an operation"};
  }
  const auto seqs = o.seqRange.empty() ? std::make_pair(uint64_t{0}, std::numeric_limits<uint64_t>::max())
                                       : parseSeqRange(o.seqRange);
  std::string error;
  auto dirs = findRankDirectories(o.trace, &error);
  if (dirs.empty()) {
    std::cerr << "error: " << error << "\n";
    return kExitFailure;
  }
  int status = kExitOk;
  nlohmann::json rows = nlohmann::json::array(), problems = nlohmann::json::array();
  uint64_t totalRaw = 0, totalCompressed = 0, listed = 0;
  bool header = false;
  Progress progress("ls: ranks", dirs.size(), !o.json);
  for (const auto& dir : dirs) {
    progress.tick();
    const int named = rankFromDirectoryName(dir);
    if (o.rank && named >= 0 && named != *o.rank && !(dirs.size() == 1 && dir == o.trace)) continue;
    auto rank = openRank(dir, &error);
    if (!rank) {
      std::cerr << "error: " << error << "\n";
      problems.push_back({{"file", dir}, {"reason", error}});
      status = kExitFailure;
      continue;
    }
    if (o.rank && rank->rank != *o.rank) continue;
    // payloads() may rebuild the index (a stale entry): read the problems after it.
    const std::vector<PayloadRef> refs = rank->reader->payloads();
    // Damage makes the listing incomplete (nothing after a damaged frame is listed): said, and exit 1 as verify's.
    for (const auto& p : rank->reader->problems()) {
      status = kExitFailure;
      printWarning(p.describe() + (p.truncated ? " (truncated)" : "") + "; records after it are not listed");
      problems.push_back({{"file", p.file}, {"offset", p.offset}, {"reason", p.reason}, {"truncated", p.truncated}});
    }
    for (const PayloadRef& ref : refs) {
      if (o.comm && ref.commId != *o.comm) continue;
      if (op && ref.op != *op) continue;
      if (ref.seq < seqs.first || ref.seq > seqs.second) continue;
      const double ratio = ref.compressedBytes ? static_cast<double>(ref.rawBytes) / ref.compressedBytes : 0.0;
      totalRaw += ref.rawBytes;
      totalCompressed += ref.compressedBytes;
      ++listed;
      if (o.json) {
        rows.push_back({{"rank", rank->rank},
                        {"rank_dir", dir},
                        {"comm", ref.commId},
                        {"op", opName(ref.op)},
                        {"peer", ref.peer},
                        {"seq", ref.seq},
                        {"dtype", dtypeName(ref.datatype)},
                        {"count", ref.count},
                        {"bytes", ref.rawBytes},
                        {"compressed_bytes", ref.compressedBytes},
                        {"ratio", ratio},
                        {"shuffle", ref.shuffle},
                        {"file", ranklens::trace::payloadName(ref.file)},
                        {"offset", ref.offset}});
        continue;
      }
      if (!header) {
        progress.done();
        std::printf("%5s %5s %-13s %5s %8s %-10s %12s %14s %14s %7s %-7s\n", "rank", "comm", "op", "peer", "seq",
                    "dtype", "count", "bytes", "compressed", "ratio", "stored");
        header = true;
      }
      const std::string stored = ref.shuffle ? "planes" + std::to_string(ref.shuffle) : "as-is";
      std::printf("%5d %5llu %-13s %5s %8llu %-10s %12llu %14llu %14llu %7.2f %-7s\n", rank->rank,
                  static_cast<unsigned long long>(ref.commId), opName(ref.op).c_str(),
                  isP2pOp(ref.op) ? std::to_string(ref.peer).c_str() : "-", static_cast<unsigned long long>(ref.seq),
                  dtypeName(ref.datatype).c_str(), static_cast<unsigned long long>(ref.count),
                  static_cast<unsigned long long>(ref.rawBytes), static_cast<unsigned long long>(ref.compressedBytes),
                  ratio, stored.c_str());
    }
  }
  progress.done();
  const double ratio = totalCompressed ? static_cast<double>(totalRaw) / totalCompressed : 0.0;
  if (o.json) {
    nlohmann::json doc = {
        {"format_version", kJsonFormatVersion},
        {"trace", o.trace},
        {"payloads", rows},
        {"totals",
         {{"payloads", listed}, {"bytes", totalRaw}, {"compressed_bytes", totalCompressed}, {"ratio", ratio}}},
        {"problems", problems}};
    std::cout << doc.dump(2) << "\n";
  } else {
    std::printf("%llu payload%s, %llu bytes, %llu compressed (ratio %.2f)\n", static_cast<unsigned long long>(listed),
                listed == 1 ? "" : "s", static_cast<unsigned long long>(totalRaw),
                static_cast<unsigned long long>(totalCompressed), ratio);
  }
  return status;
}

}  // namespace rlpayload
