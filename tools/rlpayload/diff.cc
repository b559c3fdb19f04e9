// SPDX-License-Identifier: Apache-2.0
// rlpayload diff: compare the payloads of two traces call by call (same rank, communicator, op, peer, sequence).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <tuple>

#include "commands.h"
#include "dtype.h"

namespace rlpayload {

using ranklens::trace::PayloadRef;

namespace {

// (rank, comm, op, peer, seq)
using Key = std::tuple<int, uint64_t, int, int, uint64_t>;

// Directories without a known rank (ranklens-pid<P>) are paired by directory name: they get ids below -1, shared by
// both sides, and are shown by name.
std::map<std::string, int> unknownRankIds;
std::map<int, std::string> unknownRankNames;
int rankId(const RankTrace& rank) {
  if (rank.rank >= 0) return rank.rank;
  const std::string name = std::filesystem::path(rank.dir).lexically_normal().filename().string();
  auto [it, inserted] = unknownRankIds.emplace(name, -2 - static_cast<int>(unknownRankIds.size()));
  if (inserted) unknownRankNames[it->second] = name;
  return it->second;
}

struct Side {
  std::map<int, std::unique_ptr<RankTrace>> ranks;
  std::map<Key, PayloadRef> refs;
  bool incomplete = false;  // damage, a skipped record or an interrupted edit, said on stderr: the answer is not whole
};

struct CallDiff {
  Key key;
  std::string reason;  // "values", "datatype", "count", or a read error
  uint64_t firstElement = 0, differing = 0, nanMismatches = 0, count = 0;
  uint64_t numeric = 0;  // differing elements that are numbers in both (the ones max |a-b| and ULP are taken over)
  int dtype = 0;
  double maxAbs = 0;
  uint64_t maxUlp = 0;
  std::string valueA, valueB;  // at the first differing element
  int64_t timeNs = INT64_MAX;  // of the Call record in A: differing calls are reported in call order per rank
};

Status loadSide(const std::string& trace, std::optional<int> onlyRank, Side* side, bool* singleRankDir) {
  std::string error;
  auto dirs = findRankDirectories(trace, &error);
  if (dirs.empty()) return Status::systemError(error);
  *singleRankDir = dirs.size() == 1 && dirs[0] == trace;
  for (const auto& dir : dirs) {
    const int named = rankFromDirectoryName(dir);
    if (onlyRank && !*singleRankDir && named >= 0 && named != *onlyRank) continue;
    auto rank = openRank(dir, &error);
    if (!rank) return Status::corrupt(error);
    if (onlyRank && rank->rank != *onlyRank) continue;
    const int r = rankId(*rank);
    for (const auto& ref : rank->reader->payloads()) side->refs[{r, ref.commId, ref.op, ref.peer, ref.seq}] = ref;
    // After payloads(): it may rebuild the index and meet damage.
    for (const auto& p : rank->reader->problems()) {
      printWarning(p.describe() + (p.truncated ? " (truncated)" : "") +
                   (p.skipped ? "; it is skipped" : "; payloads after it are not compared"));
      side->incomplete = true;
    }
    if (ranklens::trace::InterruptedEdit edit; ranklens::trace::findInterruptedEdit(dir, &edit)) {
      printWarning(edit.describe());
      side->incomplete = true;
    }
    side->ranks[r] = std::move(rank);
  }
  return Status::ok();
}

nlohmann::json keyJson(const Key& k) {
  return {{"rank", std::get<0>(k)},
          {"comm", std::get<1>(k)},
          {"op", opName(std::get<2>(k))},
          {"peer", std::get<3>(k)},
          {"seq", std::get<4>(k)}};
}

std::string keyText(const Key& k) {
  return "rank " + std::to_string(std::get<0>(k)) + " " +
         describeCall(std::get<1>(k), std::get<2>(k), std::get<3>(k), std::get<4>(k));
}

// Compares two decoded payloads of one call; false when they are bit for bit identical.
bool compare(const PayloadRef& ra, const std::vector<uint8_t>& a, const PayloadRef& rb, const std::vector<uint8_t>& b,
             CallDiff* d) {
  d->dtype = ra.datatype;
  if (ra.datatype != rb.datatype) {
    d->reason = "datatype " + dtypeName(ra.datatype) + " vs " + dtypeName(rb.datatype);
    return true;
  }
  const DtypeInfo* info = dtypeInfo(ra.datatype);
  if (info == nullptr) {
    if (a == b) return false;
    d->reason = "bytes (unknown datatype " + std::to_string(ra.datatype) + ")";
    return true;
  }
  if (a.size() != b.size()) {
    d->reason = "count " + std::to_string(a.size() / info->size) + " vs " + std::to_string(b.size() / info->size);
    return true;
  }
  if (a == b) return false;
  d->reason = "values";
  d->count = a.size() / info->size;
  bool first = true;
  for (uint64_t i = 0; i < d->count; ++i) {
    const uint8_t* pa = a.data() + i * info->size;
    const uint8_t* pb = b.data() + i * info->size;
    if (memcmp(pa, pb, info->size) == 0) continue;
    ++d->differing;
    if (first) {
      d->firstElement = i;
      d->valueA = formatElement(ra.datatype, pa);
      d->valueB = formatElement(ra.datatype, pb);
      first = false;
    }
    if (!info->isFloat) {
      const double diff = info->isSigned ? std::fabs(static_cast<double>(loadSigned(ra.datatype, pa)) -
                                                     static_cast<double>(loadSigned(ra.datatype, pb)))
                                         : std::fabs(static_cast<double>(loadUnsigned(ra.datatype, pa)) -
                                                     static_cast<double>(loadUnsigned(ra.datatype, pb)));
      d->maxAbs = std::max(d->maxAbs, diff);
      ++d->numeric;
      continue;
    }
    const bool nanA = isNan(ra.datatype, pa), nanB = isNan(ra.datatype, pb);
    if (nanA || nanB) {
      if (nanA != nanB) ++d->nanMismatches;  // two NaNs with different bits are not counted as a value difference
      continue;
    }
    ++d->numeric;
    const double va = loadDouble(ra.datatype, pa), vb = loadDouble(ra.datatype, pb);
    const double diff = va == vb ? 0.0 : std::fabs(va - vb);  // inf vs inf: 0; inf vs finite: inf
    if (!(diff <= d->maxAbs)) d->maxAbs = diff;
    d->maxUlp = std::max(d->maxUlp, ulpDistance(ra.datatype, pa, pb));
  }
  return true;
}

// Both sides of a diff. Two rank directories given directly are compared with each other whatever their rank
// numbers: B's is renamed to A's.
Status loadSides(const DiffOptions& o, Side* sa, Side* sb) {
  bool singleA = false, singleB = false;
  RL_CHECK(loadSide(o.a, o.rank, sa, &singleA));
  RL_CHECK(loadSide(o.b, o.rank, sb, &singleB));
  if (singleA && singleB && sa->ranks.size() == 1 && sb->ranks.size() == 1 &&
      sa->ranks.begin()->first != sb->ranks.begin()->first) {
    const int ra = sa->ranks.begin()->first;
    std::map<Key, PayloadRef> renamed;
    for (auto& [k, v] : sb->refs) renamed[{ra, std::get<1>(k), std::get<2>(k), std::get<3>(k), std::get<4>(k)}] = v;
    sb->refs.swap(renamed);
    auto node = std::move(sb->ranks.begin()->second);
    sb->ranks.clear();
    sb->ranks[ra] = std::move(node);
  }
  return Status::ok();
}

struct DiffResult {
  std::vector<Key> onlyA, onlyB, both;
  std::vector<CallDiff> diffs;  // in call order per rank
  uint64_t errors = 0;          // payloads that could not be read
  double maxAbs = 0;
  uint64_t maxUlp = 0, numeric = 0;
  bool identical() const { return diffs.empty() && onlyA.empty() && onlyB.empty(); }
  int exitStatus() const { return identical() && errors == 0 ? kExitOk : kExitFailure; }
};

DiffResult compareSides(const Side& sa, const Side& sb, bool json) {
  DiffResult r;
  for (const auto& [k, v] : sa.refs) (sb.refs.count(k) ? r.both : r.onlyA).push_back(k);
  for (const auto& [k, v] : sb.refs)
    if (!sa.refs.count(k)) r.onlyB.push_back(k);
  Progress progress("diff: calls", r.both.size(), !json);
  for (const Key& k : r.both) {
    progress.tick();
    const PayloadRef& ra = sa.refs.at(k);
    const PayloadRef& rb = sb.refs.at(k);
    CallDiff d;
    d.key = k;
    std::vector<uint8_t> a, b;
    ranklens::trace::Problem problem;
    if (!sa.ranks.at(std::get<0>(k))->reader->readPayload(ra, &a, &problem) ||
        !sb.ranks.at(std::get<0>(k))->reader->readPayload(rb, &b, &problem)) {
      progress.done();
      std::cerr << "error: " << problem.describe() << "\n";  // one unreadable payload does not end the diff
      ++r.errors;
      d.reason = "unreadable: " + problem.describe();
      r.diffs.push_back(d);
      continue;
    }
    if (compare(ra, a, rb, b, &d)) {
      if (!(d.maxAbs <= r.maxAbs)) r.maxAbs = d.maxAbs;
      r.maxUlp = std::max(r.maxUlp, d.maxUlp);
      r.numeric += d.numeric;
      r.diffs.push_back(d);
    }
  }
  progress.done();
  for (auto& d : r.diffs) {
    const auto& [rank, comm, op, peer, seq] = d.key;
    if (auto call = sa.ranks.at(rank)->reader->call(comm, op, peer, seq)) d.timeNs = call->timeNs;
  }
  std::stable_sort(r.diffs.begin(), r.diffs.end(), [](const CallDiff& x, const CallDiff& y) {
    return std::make_tuple(std::get<0>(x.key), x.timeNs) < std::make_tuple(std::get<0>(y.key), y.timeNs);
  });
  return r;
}

nlohmann::json callDiffJson(const CallDiff& d) {
  nlohmann::json j = keyJson(d.key);
  j["dtype"] = dtypeName(d.dtype);
  j["reason"] = d.reason;
  if (d.reason == "values") {
    j["count"] = d.count;
    j["first_element"] = d.firstElement;
    j["a"] = d.valueA;
    j["b"] = d.valueB;
    j["differing_elements"] = d.differing;
    j["nan_mismatches"] = d.nanMismatches;
    j["max_abs_diff"] = d.numeric ? jsonNumber(d.maxAbs) : nlohmann::json(nullptr);
    j["max_ulp_diff"] = d.numeric && dtypeInfo(d.dtype) && dtypeInfo(d.dtype)->isFloat ? nlohmann::json(d.maxUlp)
                                                                                       : nlohmann::json(nullptr);
  }
  return j;
}

void printDiffJson(const DiffOptions& o, const DiffResult& r) {
  nlohmann::json calls = nlohmann::json::array(), ja = nlohmann::json::array(), jb = nlohmann::json::array();
  for (const auto& d : r.diffs) calls.push_back(callDiffJson(d));
  for (const auto& k : r.onlyA) ja.push_back(keyJson(k));
  for (const auto& k : r.onlyB) jb.push_back(keyJson(k));
  nlohmann::json first = nullptr;
  if (!r.diffs.empty()) {
    first = keyJson(r.diffs.front().key);
    first["element"] =
        r.diffs.front().reason == "values" ? nlohmann::json(r.diffs.front().firstElement) : nlohmann::json(nullptr);
  }
  nlohmann::json doc = {{"format_version", kJsonFormatVersion},
                        {"a", o.a},
                        {"b", o.b},
                        {"identical", r.identical()},
                        {"compared", r.both.size()},
                        {"differing_calls", r.diffs.size()},
                        {"first_difference", first},
                        {"max_abs_diff", r.numeric ? jsonNumber(r.maxAbs) : nlohmann::json(nullptr)},
                        {"max_ulp_diff", r.numeric ? nlohmann::json(r.maxUlp) : nlohmann::json(nullptr)},
                        {"calls", calls},
                        {"only_in_a", ja},
                        {"only_in_b", jb},
                        {"errors", r.errors}};
  std::cout << doc.dump(2) << "\n";
}

void printDiffText(const DiffOptions& o, const DiffResult& r, bool incomplete) {
  for (const auto& d : r.diffs) {
    std::cout << keyText(d.key) << ": ";
    if (d.reason != "values") {
      std::cout << d.reason << "\n";
      continue;
    }
    std::cout << dtypeName(d.dtype) << ", first difference at element " << d.firstElement << ": " << d.valueA << " vs "
              << d.valueB << "; " << d.differing << " of " << d.count << " elements differ";
    if (d.nanMismatches) std::cout << " (" << d.nanMismatches << " NaN in only one)";
    if (d.numeric) {
      std::cout << "; max |a-b| " << formatElement(kFloat64, reinterpret_cast<const uint8_t*>(&d.maxAbs));
      if (dtypeInfo(d.dtype)->isFloat) std::cout << ", max ULP " << d.maxUlp;
    }
    std::cout << "\n";
  }
  for (const auto& k : r.onlyA) std::cout << keyText(k) << ": only in " << o.a << "\n";
  for (const auto& k : r.onlyB) std::cout << keyText(k) << ": only in " << o.b << "\n";
  std::cout << r.both.size() << " call" << (r.both.size() == 1 ? "" : "s") << " with payloads in both compared, "
            << r.diffs.size() << " differ";
  if (!r.diffs.empty()) {
    std::cout << " (first: " << keyText(r.diffs.front().key);
    if (r.diffs.front().reason == "values") std::cout << ", element " << r.diffs.front().firstElement;
    if (r.numeric)
      std::cout << "; max |a-b| " << formatElement(kFloat64, reinterpret_cast<const uint8_t*>(&r.maxAbs))
                << ", max ULP " << r.maxUlp;
    std::cout << ")";
  }
  std::cout << "; " << r.onlyA.size() << " only in A, " << r.onlyB.size() << " only in B\n";
  std::cout << (r.exitStatus() == kExitOk ? "identical" : "different")
            << (incomplete ? " (of what could be read: a trace is incomplete, see the warnings)\n" : "\n");
}

}  // namespace

int runDiff(const DiffOptions& o) {
  Side sa, sb;
  if (Status loaded = loadSides(o, &sa, &sb); !loaded.isOk()) return reportFailure(loaded);
  const DiffResult r = compareSides(sa, sb, o.json);
  // Damage in either trace makes the answer incomplete: exit 1, as every command that reads a trace does.
  const bool incomplete = sa.incomplete || sb.incomplete;
  if (o.json)
    printDiffJson(o, r);
  else
    printDiffText(o, r, incomplete);
  return incomplete ? kExitFailure : r.exitStatus();
}

}  // namespace rlpayload
