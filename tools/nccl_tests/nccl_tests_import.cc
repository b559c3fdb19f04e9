// SPDX-License-Identifier: Apache-2.0
// nccl-tests output read into history samples (nccl_tests_import.h). The text is untrusted (pasted, concatenated
// from many processes' logs): every number is checked, the columns are found by name in the header line, and any
// row that cannot be read stops the import with its line and the reason.
#include "ranklens/nccl_tests_import.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ranklens/duration_fit.h"
#include "ranklens/events.h"

namespace ranklens {
namespace timing {

namespace {

using events::Op;

// The tests whose calls map to one NCCL operation. sendrecv_perf's iteration is a group of one send and one receive
// on the stream: a grouped sample with both calls' bytes, as `history build` keeps a recorded group.
struct TestOp {
  const char* stem;
  Op op;
  bool sendRecv = false;  // an iteration is a group of a send and a receive of `size` each
};
constexpr TestOp kTests[] = {
    {"all_reduce", Op::kAllReduce}, {"all_gather", Op::kAllGather}, {"reduce_scatter", Op::kReduceScatter},
    {"alltoall", Op::kAlltoAll},    {"broadcast", Op::kBroadcast},  {"reduce", Op::kReduce},
    {"gather", Op::kGather},        {"scatter", Op::kScatter},      {"sendrecv", Op::kSend, true}};

// nccl-tests' type names (its test_typenames), as ncclDataType_t values.
int datatypeOf(const std::string& name) {
  static const std::map<std::string, int> kTypes = {
      {"int8", 0},   {"char", 0}, {"uint8", 1}, {"int32", 2},  {"int", 2},      {"uint32", 3},  {"int64", 4},
      {"uint64", 5}, {"half", 6}, {"float", 7}, {"double", 8}, {"bfloat16", 9}, {"f8e4m3", 10}, {"f8e5m2", 11}};
  auto it = kTypes.find(name);
  return it == kTypes.end() ? -1 : it->second;
}

std::vector<std::string> tokens(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

bool parseUnsigned(const std::string& s, uint64_t* value) {
  if (s.empty() || s[0] < '0' || s[0] > '9') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *value = v;
  return true;
}

bool parseInt(const std::string& s, int* value) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || errno != 0 || *end != '\0' || v < -1 || v > (1 << 30)) return false;
  *value = static_cast<int>(v);
  return true;
}

// `mpirun --tag-output` prefixes every line with "[job,rank]<stdout>:".
std::string withoutTag(const std::string& line) {
  if (line.empty() || line[0] != '[') return line;
  const size_t close = line.find("]<std");
  if (close == std::string::npos) return line;
  const size_t colon = line.find(':', close);
  return colon == std::string::npos ? line : line.substr(colon + 1);
}

struct Columns {
  size_t size = 0, count = 0, type = 0;
  std::vector<size_t> times, wrongs;  // out-of-place, in-place
  size_t needed = 0;                  // tokens a row needs
};

struct RankLine {
  int rank = 0, group = 0;
  std::string host;
};

class Importer {
 public:
  // `labels`: where each line of `text` came from, when it was made from another format (JSON), else empty.
  Importer(const std::string& name, const NcclTestsOptions& options, const History& history,
           std::vector<std::string> labels = {})
      : name_(name), options_(options), history_(history), labels_(std::move(labels)) {}

  bool run(const std::string& text, History* out, std::vector<NcclTestsRun>* runs, std::string* error) {
    std::istringstream in(text);
    std::string raw;
    while (std::getline(in, raw)) {
      ++lineNo_;
      if (!raw.empty() && raw.back() == '\r') raw.pop_back();
      const std::string line = withoutTag(raw);
      const size_t hash = line.find_first_not_of(" \t");
      if (hash != std::string::npos && line[hash] == '#') {
        if (!headerLine(line.substr(hash + 1))) return fail(error);
      } else if (!resultLine(tokens(line))) {
        return fail(error);
      }
    }
    finishBlock();
    if (samples_.empty()) {
      *error = name_ +
               ": no nccl-tests results to import (expected a test's output: '# Collective test starting: "
               "all_reduce_perf', its device list and a table of size, count, type, redop, root, time, "
               "algbw, busbw rows)";
      return false;
    }
    for (const NcclTestsRun& r : done_) {
      const std::string run = runName(r);
      if (std::find(history_.runs.begin(), history_.runs.end(), run) != history_.runs.end()) {
        *error = name_ + ":" + std::to_string(r.line) + ": " + r.test + " of this file is already in the history";
        return false;
      }
      out->runs.push_back(run);
    }
    out->samples.insert(out->samples.end(), samples_.begin(), samples_.end());
    runs->insert(runs->end(), done_.begin(), done_.end());
    return true;
  }

 private:
  bool fail(std::string* error) {
    *error = name_ +
             (labels_.empty() ? ":" + std::to_string(lineNo_)
                              : " (" + labels_.at(std::min<size_t>(lineNo_, labels_.size()) - 1) + ")") +
             ": " + why_;
    return false;
  }
  bool refuse(const std::string& why) {
    why_ = why;
    return false;
  }

  std::string runName(const NcclTestsRun& r) const {
    return std::string(kNcclTestsRunPrefix) + name_ + ":" + r.test + ":" + std::to_string(r.line);
  }

  void startBlock(const std::string& test) {
    finishBlock();
    open_ = true;
    current_ = NcclTestsRun{};
    current_.test = test;
    current_.line = lineNo_;
    ranks_.clear();
    columns_.reset();
    layoutKnown_ = false;
    truncatedDevices_ = false;
    sendRecv_ = false;
  }

  void finishBlock() {
    if (open_ && current_.rows > 0) done_.push_back(current_);
    open_ = false;
  }

  // Lines of a test without "Collective test starting" (older nccl-tests, a pasted table) open one.
  void ensureBlock() {
    if (!open_) startBlock("");
  }

  bool headerLine(const std::string& content) {
    const std::vector<std::string> t = tokens(content);
    if (t.empty()) return true;
    static const std::string kStarting = "Collective test starting:";
    if (const size_t at = content.find(kStarting); at != std::string::npos) {
      const std::vector<std::string> name = tokens(content.substr(at + kStarting.size()));
      startBlock(name.empty() ? "" : name[0]);
      return true;
    }
    if (content.find("Collective test concluded:") != std::string::npos) {
      finishBlock();
      return true;
    }
    if (t[0] == "nThread") return runParameters(content);
    if (t[0] == "Rank" && t.size() >= 8 && t[2] == "Group" && t[6] == "on") return rankLine(t, content);
    if (std::find(t.begin(), t.end(), "size") != t.end() && std::find(t.begin(), t.end(), "count") != t.end() &&
        std::find(t.begin(), t.end(), "type") != t.end())
      return columnHeader(t);
    return true;  // "Using devices", bandwidth summaries, "(B) (elements)", ...
  }

  // "# nThread 1 nGpus 2 minBytes 8 ... agg iters: 1 validation: 1 graph: 0 unalign: 0"
  bool runParameters(const std::string& content) {
    ensureBlock();
    auto valueAfter = [&](const std::string& key, int* value) {
      const size_t at = content.find(key);
      if (at == std::string::npos) return true;
      const std::vector<std::string> t = tokens(content.substr(at + key.size()));
      return !t.empty() && parseInt(t[0], value);
    };
    int agg = 1, graph = 0;
    if (!valueAfter("agg iters:", &agg) || !valueAfter("graph:", &graph))
      return refuse("cannot read the run parameters line ('agg iters: N', 'graph: N')");
    if (agg != 1)
      return refuse("agg iters " + std::to_string(agg) + ": each time is of a group of " + std::to_string(agg) +
                    " calls, not of one call; rerun nccl-tests with -m 1 (the default) to import it");
    current_.graph = graph > 0;
    return true;
  }

  // "#  Rank  0 Group  0 Pid    662 on         vm device  0 [0000:00:06] NVIDIA H200"
  bool rankLine(const std::vector<std::string>& t, const std::string& content) {
    ensureBlock();
    if (layoutKnown_) return refuse("a device list line after the results of its test began");
    RankLine r;
    if (!parseInt(t[1], &r.rank) || r.rank < 0 || !parseInt(t[3], &r.group))
      return refuse("cannot read the rank and group of this device list line");
    r.host = t[7];
    for (const RankLine& other : ranks_)
      if (other.rank == r.rank && other.group == r.group)
        return refuse("rank " + std::to_string(r.rank) +
                      " is listed twice: nccl-tests built without MPI runs every "
                      "process as its own job of rank 0 (build it with `make MPI=1` and launch it with mpirun or "
                      "srun), so these times are not of one communicator");
    ranks_.push_back(r);
    if (content.size() >= 3 && content.compare(content.size() - 3, 3, "...") == 0) truncatedDevices_ = true;
    return true;
  }

  bool columnHeader(const std::vector<std::string>& t) {
    ensureBlock();
    Columns c;
    bool haveSize = false, haveCount = false, haveType = false;
    for (size_t i = 0; i < t.size(); ++i) {
      const std::string& name = t[i];
      if (name == "size" && !haveSize)
        c.size = i, haveSize = true;
      else if (name == "count" && !haveCount)
        c.count = i, haveCount = true;
      else if (name == "type" && !haveType)
        c.type = i, haveType = true;
      else if (name == "cputime")
        return refuse("the times are CPU times (nccl-tests -C 1): rerun without -C for the GPU times to import");
      else if (name == "time")
        c.times.push_back(i);
      else if (name == "#wrong")
        c.wrongs.push_back(i);
    }
    if (c.times.empty() || c.times.size() > 2)
      return refuse("a column header with " + std::to_string(c.times.size()) +
                    " time columns (nccl-tests prints one out-of-place and one in-place)");
    c.needed = std::max({c.size, c.count, c.type, *std::max_element(c.times.begin(), c.times.end())}) + 1;
    for (size_t w : c.wrongs) c.needed = std::max(c.needed, w + 1);
    columns_ = c;
    return true;
  }

  // Communicator size and placement: from the options, else the device list (the ranks of group 0).
  bool layout() {
    if (layoutKnown_) return true;
    std::map<std::string, int> perHost;
    int listed = 0;
    for (const RankLine& r : ranks_) {
      if (r.group != 0) continue;
      ++listed;
      perHost[r.host]++;
    }
    const bool fromList = listed > 0 && !truncatedDevices_;
    if (fromList && options_.nranks > 0 && options_.nranks != listed)
      return refuse("the device list shows " + std::to_string(listed) + " ranks, --nranks says " +
                    std::to_string(options_.nranks) + " (--nranks is for output without a device list)");
    if (!fromList && options_.nranks < 0)
      return refuse(std::string(listed == 0 ? "results without a device list ('#  Rank  0 Group  0 Pid ... on HOST "
                                              "device ...')"
                                            : "the device list was cut short ('...')") +
                    ": pass --nranks and --ranks-per-node");
    current_.nranks = fromList ? listed : options_.nranks;
    int most = 0;
    for (const auto& [host, count] : perHost) most = std::max(most, count);
    current_.ranksPerNode = options_.ranksPerNode > 0 ? options_.ranksPerNode : most > 0 ? most : current_.nranks;
    current_.nodes = (current_.nranks + current_.ranksPerNode - 1) / current_.ranksPerNode;
    current_.crossesNodes = crossesNodes(current_.ranksPerNode, current_.nranks);
    if (current_.test.empty()) {  // a table without its test's name: the operation given
      int op = -1;
      for (int i = 0; i <= static_cast<int>(Op::kRecv); ++i)
        if (options_.op == events::opName(static_cast<Op>(i))) op = i;
      if (op < 0)
        return refuse(options_.op.empty()
                          ? "results without the test's name ('# Collective test starting: all_reduce_perf'): pass --op"
                          : "unknown operation '" + options_.op + "'");
      current_.op = op;
    } else {
      const TestOp* found = nullptr;
      for (const TestOp& t : kTests)
        if (current_.test.rfind(std::string(t.stem) + "_perf", 0) == 0) found = &t;
      if (found == nullptr)
        return refuse("test '" + current_.test +
                      "' is not one call of one operation (importable: all_reduce_perf, "
                      "all_gather_perf, reduce_scatter_perf, alltoall_perf, broadcast_perf, reduce_perf, "
                      "gather_perf, scatter_perf, sendrecv_perf)");
      current_.op = static_cast<int>(found->op);
      sendRecv_ = found->sendRecv;
    }
    layoutKnown_ = true;
    return true;
  }

  bool resultLine(std::vector<std::string> t) {
    if (!open_ || !columns_ || t.empty()) return true;
    const Columns& c = *columns_;
    // A launcher's label before the row ("0: ", srun --label) makes it one token longer than the header.
    uint64_t ignored = 0;
    if (!parseUnsigned(t[0], &ignored) && t.size() > c.needed) t.erase(t.begin());
    uint64_t size = 0, count = 0;
    if (t.size() < c.needed || !parseUnsigned(t[c.size], &size) || !parseUnsigned(t[c.count], &count))
      return true;  // not a result row: launcher or library messages between the rows
    const int datatype = datatypeOf(t[c.type]);
    if (datatype < 0)
      return refuse("unknown data type '" + t[c.type] +
                    "' (known: int8, uint8, int32, uint32, int64, uint64, half, "
                    "float, double, bfloat16, f8e4m3, f8e5m2); leave such rows out of the file to import the rest");
    if (!layout()) return false;
    current_.rows++;
    if (size == 0) {
      current_.rowsEmpty++;
      return true;
    }
    const uint64_t n = static_cast<uint64_t>(current_.nranks);
    const Op op = static_cast<Op>(current_.op);
    const bool sendRecv = sendRecv_;
    // Received bytes (Call.bytes) from nccl-tests' size column: the whole buffer, of which a reduce-scatter or a
    // scatter receives one rank's share; a sendrecv iteration sends and receives `size`.
    uint64_t bytes = size;
    if (op == Op::kReduceScatter || op == Op::kScatter) bytes = size / n;
    if (sendRecv) {
      if (size > UINT64_MAX / 2) return refuse("size " + t[c.size] + " out of range");
      bytes = 2 * size;
    }
    for (size_t placement = 0; placement < c.times.size(); ++placement) {
      const std::string& timeText = t[c.times[placement]];
      if (timeText == "N/A") continue;  // that placement was not run (JSON: null)
      char* end = nullptr;
      const double us = std::strtod(timeText.c_str(), &end);
      if (timeText.empty() || *end != '\0' || !std::isfinite(us) || us <= 0 || us > 1e12)
        return refuse("time '" + timeText + "' is not a duration in microseconds");
      if (placement < c.wrongs.size()) {
        const std::string& wrong = t[c.wrongs[placement]];
        uint64_t wrongCount = 0;
        if (wrong != "N/A" && !parseUnsigned(wrong, &wrongCount))
          return refuse("#wrong '" + wrong + "' is not a count");
        if (wrongCount > 0) {  // NCCL gave wrong results: the time is not of a working collective
          current_.rowsWrong++;
          continue;
        }
      }
      HistorySample s;
      s.op = current_.op;
      s.datatype = datatype;
      s.bytes = bytes;
      s.nranks = current_.nranks;
      s.crossesNodes = current_.crossesNodes;
      s.grouped = sendRecv;
      s.durationNs = std::llround(us * 1000.0);
      s.transferNs = s.durationNs;
      s.run = static_cast<uint32_t>(history_.runs.size() + done_.size());
      s.benchmark = true;
      if (s.durationNs <= 0) continue;  // below a nanosecond: nothing to hold
      samples_.push_back(s);
      current_.samples++;
      current_.minBytes = current_.samples == 1 ? bytes : std::min(current_.minBytes, bytes);
      current_.maxBytes = std::max(current_.maxBytes, bytes);
      // nccl-tests' busbw: bus bytes over the time (a sendrecv's, its size: what each direction moves).
      const double bus = sendRecv ? static_cast<double>(size) : busBytes(s.op, s.nranks, s.bytes);
      current_.peakBusGBps = std::max(current_.peakBusGBps, bus / static_cast<double>(s.durationNs));
    }
    return true;
  }

  const std::string name_;
  const NcclTestsOptions options_;
  const History& history_;
  const std::vector<std::string> labels_;
  int lineNo_ = 0;
  std::string why_;
  bool open_ = false, layoutKnown_ = false, truncatedDevices_ = false;
  bool sendRecv_ = false;  // the open test is sendrecv_perf (from kTests)
  NcclTestsRun current_;
  std::vector<RankLine> ranks_;
  std::optional<Columns> columns_;
  std::vector<NcclTestsRun> done_;
  std::vector<HistorySample> samples_;
};

}  // namespace

namespace {

// nccl-tests' JSON output (-J FILE / --output_file FILE.json, 2.17 and later) as the text it stands for, with each
// line's place in the JSON for messages: the same checks then apply to both. Empty with `error` set when it is not
// such a file.
bool jsonAsText(const std::string& json, std::string* text, std::vector<std::string>* labels, std::string* error) {
  const nlohmann::json doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    *error = "not JSON nccl-tests wrote (a JSON object with 'results')";
    return false;
  }
  auto line = [&](const std::string& content, const std::string& label) {
    *text += content + "\n";
    labels->push_back(label);
  };
  auto string = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  std::string test;
  auto args = doc.find("args");
  if (args != doc.end() && args->is_array() && !args->empty() && (*args)[0].is_string()) {
    test = (*args)[0].get<std::string>();
    test = test.substr(test.find_last_of('/') == std::string::npos ? 0 : test.find_last_of('/') + 1);
  }
  line("# Collective test starting: " + test, "args[0]");
  const nlohmann::json* devices = nullptr;  // "config": {"devices": [...]} (JSON version 3), or at the top level
  if (auto config = doc.find("config"); config != doc.end() && config->is_object()) {
    const auto agg = config->value("aggregated_iterations", nlohmann::json(1));
    const auto graph = config->value("graph", nlohmann::json(0));
    line("# nThread 1 agg iters: " + string(agg) + " graph: " + string(graph), "config");
    if (auto d = config->find("devices"); d != config->end()) devices = &*d;
  }
  if (auto d = doc.find("devices"); devices == nullptr && d != doc.end()) devices = &*d;
  if (devices != nullptr && devices->is_array()) {
    for (size_t i = 0; i < devices->size(); ++i) {
      const nlohmann::json& d = (*devices)[i];
      if (!d.is_object()) continue;
      line("# Rank " + string(d.value("rank", nlohmann::json(-1))) + " Group " +
               string(d.value("group", nlohmann::json(0))) + " Pid 0 on " +
               string(d.value("hostname", nlohmann::json("?"))) + " device 0",
           "config.devices[" + std::to_string(i) + "]");
    }
  }
  auto results = doc.find("results");
  if (results == doc.end() || !results->is_array()) {
    *error = "no 'results' list (nccl-tests' JSON output has one per run)";
    return false;
  }
  bool cpu = false;
  for (const auto& r : *results)
    for (const char* place : {"out_of_place", "in_place"})
      if (r.is_object() && r.contains(place) && r[place].is_object() && r[place].contains("cpu_time")) cpu = true;
  line(std::string("# size count type redop root ") + (cpu ? "cputime" : "time") + " algbw busbw #wrong " +
           (cpu ? "cputime" : "time") + " algbw busbw #wrong",
       "results");
  for (size_t i = 0; i < results->size(); ++i) {
    const nlohmann::json& r = (*results)[i];
    const std::string label = "results[" + std::to_string(i) + "]";
    if (!r.is_object()) {
      *error = label + " is not an object";
      return false;
    }
    std::string row =
        string(r.value("size", nlohmann::json("?"))) + " " + string(r.value("count", nlohmann::json("?"))) + " " +
        string(r.value("type", nlohmann::json("?"))) + " " + string(r.value("redop", nlohmann::json("none"))) + " " +
        string(r.value("root", nlohmann::json(-1)));
    for (const char* place : {"out_of_place", "in_place"}) {
      const auto p = r.find(place);
      if (p == r.end() || !p->is_object()) {  // null: that placement was not run
        row += " N/A 0 0 N/A";
        continue;
      }
      const nlohmann::json time = p->value("time", p->value("cpu_time", nlohmann::json("N/A")));
      const nlohmann::json wrong = p->value("nwrong", nlohmann::json(nullptr));
      row += " " + string(time) + " 0 0 " +
             (wrong.is_number() ? std::to_string(static_cast<long long>(wrong.get<double>())) : std::string("N/A"));
    }
    line(row, label);
  }
  return true;
}

}  // namespace

bool importNcclTests(const std::string& text, const std::string& name, const NcclTestsOptions& options,
                     History* history, std::vector<NcclTestsRun>* runs, std::string* error) {
  History added;
  std::vector<NcclTestsRun> found;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {  // nccl-tests' JSON output
    std::string asText, why;
    std::vector<std::string> labels;
    bool converted = false;
    try {
      converted = jsonAsText(text, &asText, &labels, &why);
    } catch (const std::exception& e) {  // a value of an unexpected type
      why = std::string("unexpected JSON (") + e.what() + ")";
    }
    if (!converted) {
      *error = name + ": " + why;
      return false;
    }
    Importer importer(name, options, *history, std::move(labels));
    if (!importer.run(asText, &added, &found, error)) return false;
  } else {
    Importer importer(name, options, *history);
    if (!importer.run(text, &added, &found, error)) return false;
  }
  history->runs.insert(history->runs.end(), added.runs.begin(), added.runs.end());
  history->samples.insert(history->samples.end(), added.samples.begin(), added.samples.end());
  runs->insert(runs->end(), found.begin(), found.end());
  return true;
}

}  // namespace timing
}  // namespace ranklens
