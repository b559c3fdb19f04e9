// SPDX-License-Identifier: Apache-2.0
// Settings loader. One descriptor table (kKeys) drives the YAML keys, the environment overrides, validation and
// describe(), so a knob is added in exactly one place: a row there (its section, names, accepted values, help, parser
// and printer) and a field with its default in config.h's Settings. yaml-cpp throws: every public function catches
// everything, and each parser returns a Status whose message names the value's source.
#include "ranklens/config.h"
#include "ranklens/shown_value.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

extern char** environ;  // POSIX; <unistd.h> declares it only under _GNU_SOURCE

namespace ranklens {
namespace config {
namespace {

// Indexed by the enum's value, so toString and parsing cannot disagree.
constexpr const char* kModeNames[] = {"replay", "record"};
constexpr const char* kFidelityNames[] = {"structure", "timing", "value"};
constexpr const char* kFillNames[] = {"clone", "keep", "zero", "poison"};
constexpr const char* kDeviceNames[] = {"auto", "cuda", "host"};
constexpr const char* kPayloadsNames[] = {"none", "small", "all"};
constexpr const char* kStagingFullNames[] = {"skip", "wait"};
constexpr const char* kPayloadShuffleNames[] = {"auto", "on", "off"};
constexpr const char* kTimingClockNames[] = {"events", "kernel"};
constexpr const char* kCapturedTimingNames[] = {"events", "off"};
constexpr const char* kCopyPriorityNames[] = {"high", "stream"};
constexpr const char* kHoldFromNames[] = {"arrival", "start"};
constexpr const char* kPeerPacingNames[] = {"off", "recorded"};
constexpr const char* kOnMismatchNames[] = {"error", "warn", "estimate"};
constexpr const char* kOnPayloadErrorNames[] = {"error", "warn"};
constexpr const char* kAtHangNames[] = {"stop", "wait", "continue"};
constexpr const char* kCompletionNames[] = {"kernel", "host_callback"};
constexpr const char* kHostTimeNames[] = {"replay", "own", "ignore"};
constexpr const char* kTimingSourceNames[] = {"recorded", "estimated"};
constexpr const char* kEstimateTargetNames[] = {"observed", "transfer"};
constexpr const char* kSectionNames[] = {"common", "record", "replay"};

constexpr const char* kConfigVar = "RANKLENS_CONFIG";
// RANKLENS_* variables that are not settings (docs/config.md, "Variables read from the job"); listed so that they
// are not reported as typos.
constexpr const char* kAllowedVars[] = {"RANKLENS_PROGRESS",  // readContext, for the tools
                                                              // the launcher to the Python adapter (tools/python)
                                        "RANKLENS_ADAPTER", "RANKLENS_ADAPTER_STORE", "RANKLENS_ADAPTER_MARKS",
                                        // the launcher to the placement library (ranklens/share_gpu.h)
                                        "RANKLENS_SHARE_GPU", "RANKLENS_SHARE_GPU_VISIBLE",
                                        "RANKLENS_SHARE_GPU_LOCAL_RANK",
                                        // benchmarks and tests
                                        "RANKLENS_COMMIT", "RANKLENS_CRASH_SEED", "RANKLENS_CRASH_ITERATIONS",
                                        "RANKLENS_KEEP_TEST_DIRS", "RANKLENS_TEST_EDIT_STOP_AFTER"};

template <typename E, size_t N>
const char* enumName(E value, const char* const (&names)[N]) {
  auto i = static_cast<size_t>(value);
  return i < N ? names[i] : "unknown";
}

// "file:line:col" with yaml-cpp's 0-based mark made 1-based; just the origin when the node has no position.
std::string at(const std::string& origin, const YAML::Mark& mark) {
  if (mark.is_null()) return origin;
  return origin + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

// How a value is shown in "bad value ..." messages: quoted text for scalars, its kind otherwise.
std::string shown(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return "'" + node.Scalar() + "'";
    case YAML::NodeType::Sequence:
      return "(a sequence)";
    case YAML::NodeType::Map:
      return "(a map)";
    default:
      return "(empty)";
  }
}

// An empty value ("fill:") carries the mark of whatever token follows it, often on the next line; point at its key.
YAML::Mark valueMark(const YAML::Node& key, const YAML::Node& value) {
  return value.IsNull() || value.Mark().is_null() ? key.Mark() : value.Mark();
}

// A value or key from the file or the environment in an error line, as the tools quote arguments.
std::string shown(const std::string& text) { return ranklens::shownValue(text); }

Status badValue(const std::string& where, const std::string& value, const std::string& key,
                const std::string& expected) {
  const bool quoted = value.size() >= 2 && value.front() == '\'' && value.back() == '\'';
  const std::string text = quoted ? "'" + shown(value.substr(1, value.size() - 2)) + "'" : shown(value);
  return Status::invalidArgument(where + ": bad value " + text + " for '" + shown(key) + "': expected " + expected);
}

// One value to parse: a YAML node (from the file) or the text of an environment variable.
struct Input {
  const YAML::Node* node;  // null for an environment value
  std::string text;        // the environment value
  std::string origin;      // file name / "<string>" / the variable name: prefix for positions inside the value
  std::string where;       // prefix for the value itself: "file:3:7" or "RANKLENS_FILL=xyz"
  const char* key;
};

// The scalar text of `in`, or an error naming what was found instead.
Status scalarText(const Input& in, const std::string& expected, std::string* text) {
  if (!in.node) {
    *text = in.text;
    return Status::ok();
  }
  if (in.node->IsScalar()) {
    *text = in.node->Scalar();
    return Status::ok();
  }
  return badValue(in.where, shown(*in.node), in.key, expected);
}

// Strict decimal: optional '-', digits only, no spaces, no '+', no overflow (strtol accepts all of those).
bool parseInteger(const std::string& text, long long lo, long long hi, long long& out) {
  size_t i = 0;
  bool negative = !text.empty() && text[0] == '-';
  if (negative) i = 1;
  if (i == text.size()) return false;
  long long value = 0;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (c < '0' || c > '9') return false;
    int digit = c - '0';
    if (value > (LLONG_MAX - digit) / 10) return false;
    value = value * 10 + digit;
  }
  if (negative) value = -value;
  if (value < lo || value > hi) return false;
  out = value;
  return true;
}

template <typename E, size_t N>
Status parseEnum(const Input& in, const char* const (&names)[N], E& out) {
  std::string expected = "one of ";
  for (size_t i = 0; i < N; ++i) expected += (i ? "|" : "") + std::string(names[i]);
  std::string text;
  RL_CHECK(scalarText(in, expected, &text));
  for (size_t i = 0; i < N; ++i) {
    if (text == names[i]) {
      out = static_cast<E>(i);
      return Status::ok();
    }
  }
  return badValue(in.where, "'" + text + "'", in.key, expected);
}

Status parseInt(const Input& in, long long lo, long long hi, const std::string& expected, int& out) {
  std::string text;
  RL_CHECK(scalarText(in, expected, &text));
  long long value = 0;
  if (!parseInteger(text, lo, hi, value)) return badValue(in.where, "'" + text + "'", in.key, expected);
  out = static_cast<int>(value);
  return Status::ok();
}

Status parseString(const Input& in, std::string& out) { return scalarText(in, "a string", &out); }

std::string yamlString(const std::string& s);

// "<comm>:<seq>" (both non-negative integers) or empty.
Status parseBreakAt(const Input& in, Settings& s) {
  const std::string expected = "<comm>:<seq>, e.g. 0:120 (communicator creation order, sequence number), or hang";
  std::string text;
  RL_CHECK(scalarText(in, expected, &text));
  s.break_at = text;
  s.break_comm = s.break_seq = -1;
  s.break_hang = text == "hang";
  if (text.empty() || s.break_hang) return Status::ok();
  const size_t colon = text.find(':');
  long long comm = 0, seq = 0;
  if (colon == std::string::npos || !parseInteger(text.substr(0, colon), 0, LLONG_MAX, comm) ||
      !parseInteger(text.substr(colon + 1), 0, LLONG_MAX, seq))
    return badValue(in.where, "'" + text + "'", in.key, expected);
  s.break_comm = comm;
  s.break_seq = seq;
  return Status::ok();
}

// Byte counts: an integer with an optional binary suffix (KiB, MiB, GiB). `orWord`: a word the knob also takes
// (handled by the caller), named in the error.
Status parseBytes(const Input& in, unsigned long long lo, unsigned long long& out, const char* orWord = nullptr) {
  const std::string expected = std::string(orWord ? std::string(orWord) + " or " : "") +
                               "a byte count >= " + std::to_string(lo) + " such as 65536, 64KiB, 256MiB or 2GiB";
  std::string text;
  RL_CHECK(scalarText(in, expected, &text));
  unsigned long long scale = 1;
  std::string digits = text;
  for (auto [suffix, factor] :
       {std::pair<const char*, unsigned long long>{"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}}) {
    const size_t n = strlen(suffix);
    if (text.size() > n && text.compare(text.size() - n, n, suffix) == 0) {
      digits = text.substr(0, text.size() - n);
      scale = factor;
    }
  }
  long long value = 0;
  if (!parseInteger(digits, 0, LLONG_MAX / static_cast<long long>(scale), value) ||
      static_cast<unsigned long long>(value) * scale < lo) {
    return badValue(in.where, "'" + text + "'", in.key, expected);
  }
  out = static_cast<unsigned long long>(value) * scale;
  return Status::ok();
}

// `auto` (stored as `autoValue`, a value no byte count >= lo takes) or a byte count >= lo.
Status parseBytesOrAuto(const Input& in, unsigned long long lo, unsigned long long autoValue, unsigned long long& out) {
  std::string text;
  RL_CHECK(scalarText(in, "auto or a byte count", &text));
  if (text != "auto") return parseBytes(in, lo, out, "auto");
  out = autoValue;
  return Status::ok();
}

// auto | sm | a byte count.
Status parseHoldShared(const Input& in, Settings& s) {
  std::string text;
  RL_CHECK(scalarText(in, "auto, sm or a byte count", &text));
  if (text == "auto" || text == "sm") {
    s.hold_shared_bytes = text == "auto" ? kHoldSharedAuto : kHoldSharedSm;
    return Status::ok();
  }
  unsigned long long bytes = 0;
  if (!parseBytes(in, 0, bytes).isOk())
    return badValue(in.where, "'" + text + "'", in.key, "auto, sm or a byte count such as 49152");
  s.hold_shared_bytes = static_cast<long long>(std::min<unsigned long long>(bytes, 1ull << 30));
  return Status::ok();
}

// A list: a YAML sequence of scalars, or comma-separated text in the environment. Empty entries are refused.
Status parseList(const Input& in, const std::string& expected, std::vector<std::string>& out) {
  std::vector<std::string> items;
  if (in.node && in.node->IsSequence()) {
    for (const YAML::Node& item : *in.node) {
      if (!item.IsScalar() || item.Scalar().empty()) {
        return badValue(at(in.origin, item.Mark()), shown(item), in.key, expected);
      }
      items.push_back(item.Scalar());
    }
  } else {
    std::string text;
    RL_CHECK(scalarText(in, expected, &text));
    size_t start = 0;
    while (start <= text.size() && !text.empty()) {
      size_t comma = text.find(',', start);
      std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      item.erase(0, item.find_first_not_of(' '));
      item.erase(item.find_last_not_of(' ') + 1);
      if (item.empty()) return badValue(in.where, "'" + text + "'", in.key, expected + " (an entry is empty)");
      items.push_back(item);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  out = std::move(items);
  return Status::ok();
}

// "A-B" (inclusive), "A-" (from A on), "A" (just A), or "all".
Status parseRange(const Input& in, Range& out) {
  const std::string expected = "a range such as 10-20 (inclusive), 10- (from 10 on), 7, or all";
  std::string text;
  RL_CHECK(scalarText(in, expected, &text));
  Range range;
  if (text != "all") {
    const size_t dash = text.find('-');
    long long lo = 0, hi = 0;
    bool ok = parseInteger(text.substr(0, dash), 0, LLONG_MAX, lo);
    if (ok && dash == std::string::npos)
      hi = lo;
    else if (ok && dash + 1 == text.size())
      hi = -1;
    else if (ok)
      ok = parseInteger(text.substr(dash + 1), lo, LLONG_MAX, hi);
    if (!ok) return badValue(in.where, "'" + text + "'", in.key, expected);
    range.lo = lo;
    range.hi = hi;
  }
  out = range;
  return Status::ok();
}

std::string showList(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + yamlString(items[i]);
  return out + "]";
}

std::string showRange(const Range& r) {
  if (r.all()) return "all";
  if (r.hi < 0) return std::to_string(r.lo) + "-";
  return std::to_string(r.lo) + "-" + std::to_string(r.hi);
}

std::string showBytes(unsigned long long bytes) {
  for (auto [suffix, factor] :
       {std::pair<const char*, unsigned long long>{"GiB", 1ull << 30}, {"MiB", 1ull << 20}, {"KiB", 1ull << 10}}) {
    if (bytes >= factor && bytes % factor == 0) return std::to_string(bytes / factor) + suffix;
  }
  return std::to_string(bytes);
}

std::string showBytesOrAuto(unsigned long long bytes, unsigned long long autoValue) {
  return bytes == autoValue ? "auto" : showBytes(bytes);
}

constexpr const char* kOpNames[] = {"AllReduce", "Broadcast", "Reduce",  "AllGather", "ReduceScatter",
                                    "AlltoAll",  "Gather",    "Scatter", "Send",      "Recv"};

Status parseOps(const Input& in, std::vector<std::string>& out) {
  std::string expected = "a list of operations among ";
  for (size_t i = 0; i < sizeof(kOpNames) / sizeof(kOpNames[0]); ++i)
    expected += (i ? "|" : "") + std::string(kOpNames[i]);
  std::vector<std::string> items;
  RL_CHECK(parseList(in, expected, items));
  for (const std::string& item : items) {
    if (std::find(std::begin(kOpNames), std::end(kOpNames), item) == std::end(kOpNames)) {
      return badValue(in.where, "'" + item + "'", in.key, expected);
    }
  }
  out = std::move(items);
  return Status::ok();
}

constexpr const char* kGroupExpected = "a sequence of maps {members: [ranks...], color: N, name: S}";
constexpr const char* kMembersExpected = "a non-empty sequence of distinct ranks >= 0";

// Same check for duplicate keys in the top-level map and in a group entry: yaml-cpp keeps both silently.
Status duplicateKey(const std::string& origin, const YAML::Node& key, std::map<std::string, YAML::Mark>& seen) {
  auto [it, inserted] = seen.emplace(key.Scalar(), key.Mark());
  if (inserted) return Status::ok();
  return Status::invalidArgument(at(origin, key.Mark()) + ": duplicate key '" + key.Scalar() + "' (first at " +
                                 at(origin, it->second) + ")");
}

Status parseMembers(const YAML::Node& node, const std::string& origin, const std::string& where,
                    const std::string& name, GroupSpec& group) {
  if (!node.IsSequence() || node.size() == 0) {
    return badValue(where, node.IsSequence() ? "'[]'" : shown(node), name, kMembersExpected);
  }
  std::map<long long, YAML::Mark> firstAt;
  for (const YAML::Node& member : node) {
    long long rank = 0;
    if (!member.IsScalar() || !parseInteger(member.Scalar(), 0, INT_MAX, rank)) {
      return badValue(at(origin, member.Mark()), shown(member), name, kMembersExpected);
    }
    auto [it, inserted] = firstAt.emplace(rank, member.Mark());
    if (!inserted) {
      return Status::invalidArgument(at(origin, member.Mark()) + ": rank " + std::to_string(rank) +
                                     " listed twice in '" + name + "' (first at " + at(origin, it->second) +
                                     "): expected " + kMembersExpected);
    }
    group.members.push_back(static_cast<int>(rank));
  }
  return Status::ok();
}

Status parseGroupEntry(const YAML::Node& entry, const std::string& origin, const std::string& name, GroupSpec& group) {
  group.origin = at(origin, entry.Mark());
  if (!entry.IsMap()) return badValue(group.origin, shown(entry), name, "a map {members: [...], color: N, name: S}");
  bool haveMembers = false;
  std::map<std::string, YAML::Mark> seen;
  for (const auto& kv : entry) {
    const YAML::Node& key = kv.first;
    const YAML::Node& value = kv.second;
    std::string keyName = key.IsScalar() ? key.Scalar() : "";
    std::string where = at(origin, valueMark(key, value));
    if (keyName != "members" && keyName != "color" && keyName != "name") {
      return Status::invalidArgument(at(origin, key.Mark()) + ": unknown key '" + shown(keyName) + "' in '" + name +
                                     "' (known keys: members, color, name)");
    }
    RL_CHECK(duplicateKey(origin, key, seen));
    if (keyName == "members") {
      RL_CHECK(parseMembers(value, origin, where, name + ".members", group));
      haveMembers = true;
    } else if (keyName == "color") {
      long long color = 0;
      if (!value.IsScalar() || !parseInteger(value.Scalar(), 0, INT_MAX, color)) {
        return badValue(where, shown(value), name + ".color", "an integer >= 0");
      }
      group.color = static_cast<int>(color);
    } else {
      if (!value.IsScalar()) return badValue(where, shown(value), name + ".name", "a string");
      group.name = value.Scalar();
    }
  }
  if (!haveMembers)
    return Status::invalidArgument(group.origin + ": '" + name + "' has no 'members': expected " + kMembersExpected);
  return Status::ok();
}

Status parseGroups(const Input& in, std::vector<GroupSpec>& out) {
  YAML::Node root;
  if (in.node) {
    root = *in.node;
  } else {
    // The environment form is YAML flow text; positions inside it are reported as RANKLENS_GROUPS:line:col.
    try {
      root = YAML::Load(in.text);
    } catch (const YAML::Exception& e) {
      return Status::invalidArgument(at(in.origin, e.mark) + ": " + e.msg);
    }
  }
  if (!root.IsSequence()) return badValue(at(in.origin, root.Mark()), shown(root), in.key, kGroupExpected);
  std::vector<GroupSpec> groups;
  for (const YAML::Node& entry : root) {
    GroupSpec group;
    std::string name = std::string(in.key) + "[" + std::to_string(groups.size()) + "]";
    RL_CHECK(parseGroupEntry(entry, in.origin, name, group));
    groups.push_back(std::move(group));
  }
  out = std::move(groups);
  return Status::ok();
}

// A group name is shown bare when YAML would read it back unchanged, quoted otherwise.
std::string yamlString(const std::string& s) {
  bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
  });
  plain = plain && s[0] != '-' && s[0] != '.' && s != "null" && s != "true" && s != "false";
  if (plain) return s;
  std::string quoted = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

std::string showGroups(const std::vector<GroupSpec>& groups) {
  std::string out = "[";
  for (size_t g = 0; g < groups.size(); ++g) {
    out += g ? ", {members: [" : "{members: [";
    for (size_t i = 0; i < groups[g].members.size(); ++i) {
      out += (i ? ", " : "") + std::to_string(groups[g].members[i]);
    }
    out += "]";
    if (groups[g].color) out += ", color: " + std::to_string(*groups[g].color);
    if (!groups[g].name.empty()) out += ", name: " + yamlString(groups[g].name);
    out += "}";
  }
  return out + "]";
}

// A mesh dimension's name: what a user would write for it (dp, tp, pp, cp, ep, dp_shard, ...).
bool meshName(const std::string& name) {
  return !name.empty() && !(name[0] >= '0' && name[0] <= '9') && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

constexpr const char* kMeshExpected =
    "dimensions outermost first as name=size, e.g. dp=8192,tp=2 or pp=4,dp=-1,tp=8 (one size may be -1: what the "
    "world size leaves)";

Status parseMesh(const Input& in, Settings& s) {
  std::vector<std::string> items;
  RL_CHECK(parseList(in, kMeshExpected, items));
  std::vector<MeshDim> dims;
  bool inferred = false;
  long long product = 1;
  for (const std::string& item : items) {
    const size_t eq = item.find('=');
    MeshDim dim;
    dim.name = item.substr(0, eq);
    long long size = 0;
    if (eq == std::string::npos || !meshName(dim.name) || !parseInteger(item.substr(eq + 1), -1, INT_MAX, size) ||
        size == 0) {
      return badValue(in.where, "'" + item + "'", in.key, kMeshExpected);
    }
    for (const MeshDim& other : dims) {
      if (other.name == dim.name) return badValue(in.where, "'" + item + "'", in.key, "each dimension named once");
    }
    if (size < 0 && inferred) return badValue(in.where, "'" + item + "'", in.key, "at most one size of -1");
    inferred = inferred || size < 0;
    if (size > 0) product *= size;
    if (product > INT_MAX) return badValue(in.where, "'" + item + "'", in.key, "a mesh of at most 2^31-1 ranks");
    dim.size = size;
    dims.push_back(dim);
    if (dims.size() > 8) return badValue(in.where, "'" + item + "'", in.key, "at most 8 dimensions");
  }
  s.mesh = std::move(dims);
  return Status::ok();
}

std::string showMesh(const Settings& s) {
  std::string out;
  for (const MeshDim& d : s.mesh) out += (out.empty() ? "" : ",") + d.name + "=" + std::to_string(d.size);
  return out;
}

constexpr const char* kMeshColorsExpected =
    "entries dims=colors, e.g. tp=0-8191,dp=8192- (dims: mesh dimensions joined by +, such as pp+dp; colors: C, "
    "A-B inclusive, A- from A on, or all)";

Status parseMeshColors(const Input& in, Settings& s) {
  std::vector<std::string> items;
  RL_CHECK(parseList(in, kMeshColorsExpected, items));
  std::vector<MeshColors> entries;
  for (const std::string& item : items) {
    const size_t eq = item.rfind('=');
    MeshColors entry;
    entry.text = item;
    bool ok = eq != std::string::npos && eq > 0;
    for (size_t start = 0; ok && start < eq;) {
      const size_t plus = std::min(item.find('+', start), eq);
      entry.dims.push_back(item.substr(start, plus - start));
      ok = meshName(entry.dims.back()) && std::count(entry.dims.begin(), entry.dims.end(), entry.dims.back()) == 1;
      start = plus + 1;
    }
    const std::string colors = ok ? item.substr(eq + 1) : "";
    if (ok && colors != "all") {
      const size_t dash = colors.find('-');
      long long lo = 0, hi = 0;
      ok = parseInteger(colors.substr(0, dash), 0, INT_MAX, lo);
      if (ok && dash == std::string::npos)
        hi = lo;
      else if (ok && dash + 1 == colors.size())
        hi = -1;
      else if (ok)
        ok = parseInteger(colors.substr(dash + 1), lo, INT_MAX, hi);
      entry.colors.lo = lo;
      entry.colors.hi = hi;
    }
    if (!ok) return badValue(in.where, "'" + item + "'", in.key, kMeshColorsExpected);
    entries.push_back(std::move(entry));
  }
  s.mesh_colors = std::move(entries);
  return Status::ok();
}

std::string showMeshColors(const Settings& s) {
  std::string out;
  for (const MeshColors& e : s.mesh_colors) out += (out.empty() ? "" : ",") + e.text;
  return out;
}

// Settings that only make sense together, checked once every source has been read.
Status crossCheck(const Settings& s) {
  if (s.mesh_colors.empty()) return Status::ok();
  const std::string where = s.set_by.count("mesh_colors") ? s.set_by.at("mesh_colors") : "mesh_colors";
  if (s.mesh.empty()) {
    return Status::invalidArgument(where +
                                   ": mesh_colors names mesh dimensions, but no mesh is set: give the mesh "
                                   "too (RANKLENS_MESH, e.g. dp=8192,tp=2; ranklens replay --mesh)");
  }
  for (const MeshColors& e : s.mesh_colors) {
    for (const std::string& dim : e.dims) {
      if (std::none_of(s.mesh.begin(), s.mesh.end(), [&](const MeshDim& d) { return d.name == dim; })) {
        return Status::invalidArgument(where + ": mesh_colors entry '" + e.text + "' names '" + dim +
                                       "', which is not a dimension of the mesh " + showMesh(s) +
                                       ": use the mesh's names");
      }
    }
  }
  return Status::ok();
}

// One setting. Its default is Settings's initialiser, shown by `show`: written once, in config.h.
struct KeyDesc {
  Section section;
  const char* key;
  const char* env;
  const char* values;  // what it accepts, for docs/config.md's tables
  const char* help;    // what it does, in one line; a second sentence only where a user needs the why
  Status (*parse)(const Input& in, Settings& s);
  std::string (*show)(const Settings& s);
};

const KeyDesc kKeys[] = {
    {Section::kCommon, "mode", "RANKLENS_MODE", "replay | record",
     "replay: run one rank alone against virtual peers; record: forward to the real NCCL and write a trace",
     [](const Input& in, Settings& s) { return parseEnum(in, kModeNames, s.mode); },
     [](const Settings& s) { return std::string(toString(s.mode)); }},
    {Section::kCommon, "device", "RANKLENS_DEVICE", "auto | cuda | host",
     "where stream-side effects run: cuda, host (no GPU needed), or auto (cuda when a GPU is usable)",
     [](const Input& in, Settings& s) { return parseEnum(in, kDeviceNames, s.device); },
     [](const Settings& s) { return std::string(toString(s.device)); }},
    {Section::kCommon, "trace_dir", "RANKLENS_TRACE_DIR", "a path",
     "directory for per-rank event logs; empty: no events are written",
     [](const Input& in, Settings& s) { return parseString(in, s.trace_dir); },
     [](const Settings& s) { return s.trace_dir; }},
    {Section::kRecord, "real_nccl", "RANKLENS_REAL_NCCL", "a path",
     "path of the real libnccl.so.2 to forward to; empty: the one already loaded (torch preloads "
     "its wheel's), else the Python environment's, conda's, LD_LIBRARY_PATH's or the system's",
     [](const Input& in, Settings& s) { return parseString(in, s.real_nccl); },
     [](const Settings& s) { return s.real_nccl; }},
    {Section::kRecord, "payloads", "RANKLENS_PAYLOADS", "none | small | all",
     "which received buffers are stored: none (timing only), small (messages up to payload_max_bytes: "
     "the values that steer control flow), all",
     [](const Input& in, Settings& s) { return parseEnum(in, kPayloadsNames, s.payloads); },
     [](const Settings& s) { return std::string(toString(s.payloads)); }},
    {Section::kRecord, "payload_max_bytes", "RANKLENS_PAYLOAD_MAX_BYTES",
     "a byte count: an integer with an optional KiB, MiB or GiB suffix",
     "with payloads=small, the largest message (bytes received by this rank) that is stored",
     [](const Input& in, Settings& s) { return parseBytes(in, 0, s.payload_max_bytes); },
     [](const Settings& s) { return showBytes(s.payload_max_bytes); }},
    {Section::kRecord, "payload_ops", "RANKLENS_PAYLOAD_OPS",
     "a list of operations among AllReduce Broadcast Reduce AllGather ReduceScatter AlltoAll Gather Scatter Send Recv; "
     "in the environment, comma-separated",
     "store payloads only of these operations (e.g. [AllReduce, Recv]); empty: all",
     [](const Input& in, Settings& s) { return parseOps(in, s.payload_ops); },
     [](const Settings& s) { return showList(s.payload_ops); }},
    {Section::kRecord, "payload_comms", "RANKLENS_PAYLOAD_COMMS",
     "a list of communicator ids (creation order, as ranklens trace summary shows them) or commName values; "
     "comma-separated in the environment",
     "store payloads only of these communicators, by id (creation order, as in `ranklens trace summary`) "
     "or by commName; empty: all",
     [](const Input& in, Settings& s) { return parseList(in, "a list of communicator ids or names", s.payload_comms); },
     [](const Settings& s) { return showList(s.payload_comms); }},
    {Section::kRecord, "payload_steps", "RANKLENS_PAYLOAD_STEPS", "A-B (inclusive), A- (from A on), A, or all",
     "store payloads only during these steps (as marked by ranklensMarkStage), e.g. 10-20",
     [](const Input& in, Settings& s) { return parseRange(in, s.payload_steps); },
     [](const Settings& s) { return showRange(s.payload_steps); }},
    {Section::kRecord, "payload_seqs", "RANKLENS_PAYLOAD_SEQS", "as payload_steps",
     "store payloads only of calls whose per-communicator sequence number is in this range",
     [](const Input& in, Settings& s) { return parseRange(in, s.payload_seqs); },
     [](const Settings& s) { return showRange(s.payload_seqs); }},
    {Section::kRecord, "payload_zstd_level", "RANKLENS_PAYLOAD_ZSTD_LEVEL", "-100..19",
     "the zstd level payloads are compressed at (negative: zstd's fast levels); a value replay decodes "
     "them again, so it bounds both full-payload recording and value replay",
     [](const Input& in, Settings& s) {
       return parseInt(in, -100, 19, "a zstd level, -100..19", s.payload_zstd_level);
     },
     [](const Settings& s) { return std::to_string(s.payload_zstd_level); }},
    {Section::kRecord, "payload_threads", "RANKLENS_PAYLOAD_THREADS", "0..64",
     "threads that compress stored payloads and write them (0: half of this rank's share of the host's "
     "cores, 2..8); with payloads all they are what bounds the recording when they are all busy",
     [](const Input& in, Settings& s) {
       return parseInt(in, 0, 64, "threads, 0..64 (0: automatic)", s.payload_threads);
     },
     [](const Settings& s) { return std::to_string(s.payload_threads); }},
    {Section::kRecord, "payload_shuffle", "RANKLENS_PAYLOAD_SHUFFLE", "on | auto | off",
     "store payloads of 2-, 4- and 8-byte elements as byte planes before compressing them, which "
     "compresses floating-point values much faster: always (on), when a sample says it pays (auto), or "
     "never (off)",
     [](const Input& in, Settings& s) { return parseEnum(in, kPayloadShuffleNames, s.payload_shuffle); },
     [](const Settings& s) { return std::string(toString(s.payload_shuffle)); }},
    {Section::kRecord, "payload_queue_bytes", "RANKLENS_PAYLOAD_QUEUE_BYTES", "a byte count ≥ 16 MiB",
     "host memory for payloads taken out of staging that wait for a compression thread or the writer; "
     "when it is full the background thread waits and staging fills (then staging_full applies)",
     [](const Input& in, Settings& s) { return parseBytes(in, 16u << 20, s.payload_queue_bytes); },
     [](const Settings& s) { return showBytes(s.payload_queue_bytes); }},
    {Section::kRecord, "staging_bytes", "RANKLENS_STAGING_BYTES", "auto or a byte count ≥ 1",
     "pinned host memory for payloads copied off the GPU and not yet compressed (allocated at the first "
     "communicator when payloads are on); a larger message is skipped and counted; auto: 256MiB for payloads "
     "small, and for payloads all 2GiB, at most a sixteenth of the host's memory shared by its ranks",
     [](const Input& in, Settings& s) { return parseBytesOrAuto(in, 1, Settings::kAutoStagingBytes, s.staging_bytes); },
     [](const Settings& s) { return showBytesOrAuto(s.staging_bytes, Settings::kAutoStagingBytes); }},
    {Section::kRecord, "staging_full", "RANKLENS_STAGING_FULL", "skip | wait",
     "when staging memory is full, skip the payload (counted in the trace; the job is never slowed) or "
     "wait for space (complete payloads, may slow the job)",
     [](const Input& in, Settings& s) { return parseEnum(in, kStagingFullNames, s.staging_full); },
     [](const Settings& s) { return std::string(toString(s.staging_full)); }},
    {Section::kRecord, "timing_clock", "RANKLENS_TIMING_CLOCK", "events | kernel",
     "where each call's GPU duration comes from: CUDA events around the call, or the timestamps of NCCL's "
     "own kernel (through NCCL's profiler plugin interface; no events on the calling thread)",
     [](const Input& in, Settings& s) { return parseEnum(in, kTimingClockNames, s.timing_clock); },
     [](const Settings& s) { return std::string(toString(s.timing_clock)); }},
    {Section::kRecord, "captured_timing", "RANKLENS_CAPTURED_TIMING", "events | off",
     "a call captured into a CUDA graph is timed by two event nodes added to the graph, at the first launch "
     "of it that completes (events), or has no duration (off: the graph gets nothing of RankLens's)",
     [](const Input& in, Settings& s) { return parseEnum(in, kCapturedTimingNames, s.captured_timing); },
     [](const Settings& s) { return std::string(toString(s.captured_timing)); }},
    {Section::kRecord, "timing_poll_us", "RANKLENS_TIMING_POLL_US", "10..100000",
     "how often (microseconds) the background thread looks for finished calls while some are "
     "pending; longer costs the job's calls less CUDA driver time and keeps staged payloads longer",
     [](const Input& in, Settings& s) {
       return parseInt(in, 10, 100000, "microseconds, 10..100000", s.timing_poll_us);
     },
     [](const Settings& s) { return std::to_string(s.timing_poll_us); }},
    {Section::kRecord, "payload_copy_kernel_bytes", "RANKLENS_PAYLOAD_COPY_KERNEL_BYTES", "a byte count ≥ 0",
     "a stored payload up to this size is copied off the GPU by a one-block kernel on the call's stream, "
     "which signals its own completion (no copy engine round trip, no event); larger ones, and all when 0, by a "
     "copy engine followed by an event",
     [](const Input& in, Settings& s) { return parseBytes(in, 0, s.payload_copy_kernel_bytes); },
     [](const Settings& s) { return showBytes(s.payload_copy_kernel_bytes); }},
    {Section::kRecord, "payload_copy_kernel_bytes_one_rank", "RANKLENS_PAYLOAD_COPY_KERNEL_BYTES_ONE_RANK",
     "a byte count ≥ 0",
     "payload_copy_kernel_bytes for calls on 1-rank communicators, whose stream has no NCCL kernel before "
     "the copy (a copy kernel there waits for an SM when the job's compute fills them; a copy engine does not, and "
     "costs the same otherwise); 0: always the copy engine",
     [](const Input& in, Settings& s) { return parseBytes(in, 0, s.payload_copy_kernel_bytes_one_rank); },
     [](const Settings& s) { return showBytes(s.payload_copy_kernel_bytes_one_rank); }},
    {Section::kRecord, "payload_copy_priority", "RANKLENS_PAYLOAD_COPY_PRIORITY", "high | stream",
     "the launch priority of the payload copy kernel: high (the device's greatest stream priority: it takes "
     "the first free SM slot ahead of the job's pending compute blocks) or stream (its stream's priority)",
     [](const Input& in, Settings& s) { return parseEnum(in, kCopyPriorityNames, s.payload_copy_priority); },
     [](const Settings& s) { return std::string(toString(s.payload_copy_priority)); }},
    {Section::kReplay, "fidelity", "RANKLENS_FIDELITY", "structure | timing | value",
     "structure: calls and communicators only; timing: also hold streams for recorded durations; "
     "value: also restore recorded payloads",
     [](const Input& in, Settings& s) { return parseEnum(in, kFidelityNames, s.fidelity); },
     [](const Settings& s) { return std::string(toString(s.fidelity)); }},
    {Section::kReplay, "fill", "RANKLENS_FILL", "clone | keep | zero | poison",
     "receive-buffer contents when no recorded payload exists: clone (every peer sent what this rank sent), "
     "keep (untouched), zero, poison (a pattern that makes unrestored data stand out)",
     [](const Input& in, Settings& s) { return parseEnum(in, kFillNames, s.fill); },
     [](const Settings& s) { return std::string(toString(s.fill)); }},
    {Section::kReplay, "nccl_version", "RANKLENS_NCCL_VERSION",
     "integer 1..999999, in NCCL's code form major*10000 + minor*100 + patch",
     "NCCL version code reported by ncclGetVersion in replay (major*10000 + minor*100 + patch)",
     [](const Input& in, Settings& s) {
       return parseInt(in, 1, 999999, "an NCCL version code such as 22809 (1..999999)", s.nccl_version);
     },
     [](const Settings& s) { return std::to_string(s.nccl_version); }},
    {Section::kReplay, "ranks_per_node", "RANKLENS_RANKS_PER_NODE", "integer ≥ 1",
     "virtual topology: consecutive world ranks sharing a node (locality, LSA team)",
     [](const Input& in, Settings& s) { return parseInt(in, 1, INT_MAX, "an integer >= 1", s.ranks_per_node); },
     [](const Settings& s) { return std::to_string(s.ranks_per_node); }},
    {Section::kReplay, "groups", "RANKLENS_GROUPS",
     "a sequence of group entries (see below); in the environment, as YAML flow text",
     "split table: the world ranks (in child-rank order) of each communicator ncclCommSplit creates, "
     "optionally per color",
     [](const Input& in, Settings& s) { return parseGroups(in, s.groups); },
     [](const Settings& s) { return showGroups(s.groups); }},
    {Section::kReplay, "mesh", "RANKLENS_MESH",
     "name=size,... outermost first, e.g. dp=8192,tp=2; one size may be -1 (what the world size leaves)",
     "the device mesh from which every ncclCommSplit child is worked out, for any rank at any world size, without a "
     "groups table; the last dimension is contiguous (torch's DeviceMesh order, the reverse of Megatron's order "
     "string)",
     [](const Input& in, Settings& s) { return parseMesh(in, s); }, [](const Settings& s) { return showMesh(s); }},
    {Section::kReplay, "mesh_colors", "RANKLENS_MESH_COLORS",
     "dims=colors,... e.g. tp=0-8191,dp=8192- (dims joined by +; colors C, A-B, A- or all)",
     "which split colors span which mesh dimensions (first match wins); torch's colors are recognised without it",
     [](const Input& in, Settings& s) { return parseMeshColors(in, s); },
     [](const Settings& s) { return showMeshColors(s); }},
    {Section::kReplay, "replay_trace", "RANKLENS_REPLAY_TRACE", "a path",
     "the recorded trace to replay, a rank directory or a trace root holding rank<RANK>; needed for "
     "fidelity timing and value, optional for structure (calls are then checked against it)",
     [](const Input& in, Settings& s) { return parseString(in, s.replay_trace); },
     [](const Settings& s) { return s.replay_trace; }},
    {Section::kReplay, "on_mismatch", "RANKLENS_ON_MISMATCH", "error | warn | estimate",
     "a call that does not match the recording fails with ncclInvalidUsage (error), is logged and "
     "replayed without a hold or payload (warn), or gets an estimated duration and no payload (estimate)",
     [](const Input& in, Settings& s) { return parseEnum(in, kOnMismatchNames, s.on_mismatch); },
     [](const Settings& s) { return std::string(toString(s.on_mismatch)); }},
    {Section::kReplay, "on_payload_error", "RANKLENS_ON_PAYLOAD_ERROR", "error | warn",
     "a call whose recorded payload the fidelity restores but which cannot be read (a damaged or "
     "missing payload file, a reference outside it, a blob larger than it claims) fails with ncclSystemError "
     "naming the call, file, offset and reason (error), or gets the fill semantics with one such line on stderr "
     "per call, counted as replay_payload_failures (warn: the values from that call on are not the recorded run's)",
     [](const Input& in, Settings& s) { return parseEnum(in, kOnPayloadErrorNames, s.on_payload_error); },
     [](const Settings& s) { return std::string(toString(s.on_payload_error)); }},
    {Section::kReplay, "at_hang", "RANKLENS_AT_HANG", "stop | wait | continue",
     "replay of a trace imported from PyTorch Flight Recorder dumps (ranklens import flight-recorder): at the "
     "call the dump left started or scheduled (the hang), print where it is (process group, collective, "
     "sequence number, the ranks that reached it, the recorded Python stack) and fail the call with "
     "ncclInvalidUsage (stop), or block the calling thread there until a debugger clears ranklens_hang_wait "
     "(wait), or replay on (continue)",
     [](const Input& in, Settings& s) { return parseEnum(in, kAtHangNames, s.at_hang); },
     [](const Settings& s) { return std::string(toString(s.at_hang)); }},
    {Section::kReplay, "completion", "RANKLENS_COMPLETION", "kernel | host_callback",
     "how a stream is held for a call's duration: kernel (a 1-thread kernel waiting on the GPU timer, "
     "named ranklens_<Op> in profilers) or host_callback (cudaLaunchHostFunc; serialises streams)",
     [](const Input& in, Settings& s) { return parseEnum(in, kCompletionNames, s.completion); },
     [](const Settings& s) { return std::string(toString(s.completion)); }},
    {Section::kReplay, "host_time", "RANKLENS_HOST_TIME", "replay | own | ignore",
     "(timing, value) a call keeps the calling thread as long as the recorded call did (replay), "
     "at most twice the 10th percentile of its operation's recorded host times (own: the rest was most "
     "likely a wait for a full launch queue, which the replayed program meets by itself), or returns at "
     "once (ignore)",
     [](const Input& in, Settings& s) { return parseEnum(in, kHostTimeNames, s.host_time); },
     [](const Settings& s) { return std::string(toString(s.host_time)); }},
    {Section::kReplay, "timing", "RANKLENS_TIMING", "recorded | estimated",
     "(fidelity timing, value) each call is held for its recorded duration, or for the estimate from "
     "`history` (estimated: what-if runs, calls the recording never saw at this scale)",
     [](const Input& in, Settings& s) { return parseEnum(in, kTimingSourceNames, s.timing); },
     [](const Settings& s) { return std::string(toString(s.timing)); }},
    {Section::kReplay, "history", "RANKLENS_HISTORY", "a path",
     "duration history of recorded runs (ranklens history build) used by timing: estimated and "
     "on_mismatch: estimate; empty: the replayed recording's own timed calls",
     [](const Input& in, Settings& s) { return parseString(in, s.history); },
     [](const Settings& s) { return s.history; }},
    {Section::kReplay, "estimate_target", "RANKLENS_ESTIMATE_TARGET", "transfer | observed",
     "what an estimated duration stands for: observed (what a rank measured, its waits for peers "
     "included) or transfer (the collective's own time, the shortest over the job's ranks; from a history built "
     "by this version)",
     [](const Input& in, Settings& s) { return parseEnum(in, kEstimateTargetNames, s.estimate_target); },
     [](const Settings& s) { return std::string(toString(s.estimate_target)); }},
    {Section::kReplay, "hold_blocks", "RANKLENS_HOLD_BLOCKS", "integer 1..1024",
     "(completion: kernel) SMs each hold kernel occupies; 1 leaves the rest to compute, more (e.g. NCCL's "
     "channel count) reproduce the slowdown of compute that overlaps communication",
     [](const Input& in, Settings& s) { return parseInt(in, 1, 1024, "an integer in 1..1024", s.hold_blocks); },
     [](const Settings& s) { return std::to_string(s.hold_blocks); }},
    {Section::kReplay, "hold_threads", "RANKLENS_HOLD_THREADS", "multiple of 32 in 32..1024",
     "(completion: kernel) threads of each hold block (NCCL's blocks have 512-640), so that a hold takes "
     "the warp slots of an SM that an NCCL block takes",
     [](const Input& in, Settings& s) {
       const std::string expected = "a multiple of 32 in 32..1024";
       RL_CHECK(parseInt(in, 32, 1024, expected, s.hold_threads));
       if (s.hold_threads % 32 != 0)
         return badValue(in.where, "'" + std::to_string(s.hold_threads) + "'", in.key, expected);
       return Status::ok();
     },
     [](const Settings& s) { return std::to_string(s.hold_threads); }},
    {Section::kReplay, "hold_shared_bytes", "RANKLENS_HOLD_SHARED_BYTES", "auto, sm or a byte count",
     "(completion: kernel) dynamic shared memory of each hold block: auto (an SM's whole shared memory "
     "when hold_blocks > 1, so that nothing else runs on a held SM; none for one block), sm (always an SM's "
     "whole), or a byte count (e.g. NCCL's own, from a profile)",
     parseHoldShared,
     [](const Settings& s) {
       return s.hold_shared_bytes == kHoldSharedAuto ? std::string("auto")
              : s.hold_shared_bytes == kHoldSharedSm ? std::string("sm")
                                                     : std::to_string(s.hold_shared_bytes);
     }},
    {Section::kReplay, "hold_from", "RANKLENS_HOLD_FROM", "arrival | start",
     "a hold counts its duration from the moment its stream reached the call (arrival: the call's "
     "copies and any wait for SMs count within it) or from the hold kernel's own start (start: such waits "
     "add to the call, as NCCL's kernel's did in the real run)",
     [](const Input& in, Settings& s) { return parseEnum(in, kHoldFromNames, s.hold_from); },
     [](const Settings& s) { return std::string(toString(s.hold_from)); }},
    {Section::kReplay, "peer_pacing", "RANKLENS_PEER_PACING", "off | recorded",
     "(timing, value; kernel holds) a collective ends when its slowest peer, arriving at its "
     "recorded pace, would have finished it (recorded: needs every rank's recording), instead of this "
     "rank's recorded duration after its own arrival (off)",
     [](const Input& in, Settings& s) { return parseEnum(in, kPeerPacingNames, s.peer_pacing); },
     [](const Settings& s) { return std::string(toString(s.peer_pacing)); }},
    {Section::kReplay, "resync_window", "RANKLENS_RESYNC_WINDOW", "integer 0..1048576",
     "after a mismatch, how many recorded calls of the communicator are searched ahead for the replayed "
     "call (found: the recorded calls in between were skipped by the program; not found: the call is extra)",
     [](const Input& in, Settings& s) { return parseInt(in, 0, 1 << 20, "an integer in 0..1048576", s.resync_window); },
     [](const Settings& s) { return std::to_string(s.resync_window); }},
    {Section::kReplay, "prefetch_bytes", "RANKLENS_PREFETCH_BYTES", "auto | a byte count ≥ 1 MiB",
     "(value) pinned host memory holding payloads decoded ahead of their calls by worker threads; auto: 4x "
     "the recording's largest step of payloads, at least 512MiB, at most 8GiB and an eighth of the host's memory",
     [](const Input& in, Settings& s) { return parseBytesOrAuto(in, 1 << 20, 0, s.prefetch_bytes); },
     [](const Settings& s) { return showBytesOrAuto(s.prefetch_bytes, 0); }},
    {Section::kReplay, "prefetch_threads", "RANKLENS_PREFETCH_THREADS", "0..64",
     "(value) worker threads decoding recorded payloads ahead of their calls; 0: a quarter of the cores, 2..8",
     [](const Input& in, Settings& s) {
       return parseInt(in, 0, 64, "threads, 0..64 (0: automatic)", s.prefetch_threads);
     },
     [](const Settings& s) { return std::to_string(s.prefetch_threads); }},
    {Section::kReplay, "payload_device_bytes", "RANKLENS_PAYLOAD_DEVICE_BYTES", "auto | a byte count | 0",
     "(timing, value) device memory that recorded payloads move into ahead of their calls, so that a "
     "restore is a copy within the GPU; auto: up to two steps of payloads, from what the recorded job left free of "
     "its GPU (256MiB when the recording does not say); 0: restore from pinned host memory",
     [](const Input& in, Settings& s) {
       return parseBytesOrAuto(in, 0, Settings::kAutoDeviceBytes, s.payload_device_bytes);
     },
     [](const Settings& s) { return showBytesOrAuto(s.payload_device_bytes, Settings::kAutoDeviceBytes); }},
    {Section::kReplay, "break_at", "RANKLENS_BREAK_AT", "<comm>:<seq> | hang",
     "raise SIGTRAP (stops under a debugger) when the call <comm>:<seq> is made, comm = creation order "
     "as in `ranklens trace summary`, e.g. 0:120; hang: at the call a Flight Recorder dump left unfinished "
     "(an imported trace), after its report (at_hang then says what the call does)",
     [](const Input& in, Settings& s) { return parseBreakAt(in, s); }, [](const Settings& s) { return s.break_at; }},
};

const KeyDesc* findKey(const std::string& key) {
  for (const KeyDesc& d : kKeys) {
    if (key == d.key) return &d;
  }
  return nullptr;
}

std::string knownKeys() {
  std::string out;
  for (const KeyDesc& d : kKeys) out += (out.empty() ? "" : ", ") + std::string(d.key);
  return out;
}

Settings defaults() {
  Settings s;
  for (const KeyDesc& d : kKeys) s.set_by[d.key] = "default";
  return s;
}

// The YAML file's keys over `s`; the first bad key or value stops it.
Status applyYaml(const std::string& text, const std::string& origin, Settings& s) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return Status::invalidArgument(at(origin, e.mark) + ": " + e.msg);
  }
  if (root.IsNull()) return Status::ok();  // empty file or only comments: all defaults
  if (!root.IsMap()) {
    return Status::invalidArgument(at(origin, root.Mark()) +
                                   ": top level must be a map of settings (key: value), not " +
                                   (root.IsSequence() ? "a sequence" : "a scalar"));
  }
  std::map<std::string, YAML::Mark> seen;
  for (const auto& kv : root) {
    const YAML::Node& key = kv.first;
    const KeyDesc* d = key.IsScalar() ? findKey(key.Scalar()) : nullptr;
    if (!d) {
      return Status::invalidArgument(at(origin, key.Mark()) + ": unknown key '" +
                                     shown(key.IsScalar() ? key.Scalar() : "") + "' (known keys: " + knownKeys() + ")");
    }
    RL_CHECK(duplicateKey(origin, key, seen));
    const YAML::Node& value = kv.second;
    Input in{&value, "", origin, at(origin, valueMark(key, value)), d->key};
    RL_CHECK(d->parse(in, s));
    s.set_by[d->key] = in.where;
  }
  return Status::ok();
}

// Every RANKLENS_<KEY> that is set, over `s`.
Status applyEnvironment(const GetEnv& getenv, Settings& s) {
  for (const KeyDesc& d : kKeys) {
    const char* value = getenv(d.env);
    // Empty counts as unset, as NCCL treats its own NCCL_* variables.
    if (!value || !*value) continue;
    Input in{nullptr, value, d.env, std::string(d.env) + "=" + value, d.key};
    RL_CHECK(d.parse(in, s));
    s.set_by[d.key] = std::string("env ") + d.env;
  }
  return Status::ok();
}

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// A misspelt variable is silently ignored by a plain lookup; say so, naming the nearest real one.
std::vector<std::string> typoWarnings(const std::vector<std::string>& names) {
  std::vector<std::string> known;
  for (const KeyDesc& d : kKeys) known.emplace_back(d.env);
  known.emplace_back(kConfigVar);
  for (const char* v : kAllowedVars) known.emplace_back(v);

  std::vector<std::string> warnings;
  std::set<std::string> reported;
  const std::string prefix = "RANKLENS_";
  for (const std::string& name : names) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    if (!reported.insert(name).second) continue;
    const std::string* closest = &known.front();
    for (const std::string& k : known) {
      if (editDistance(name, k) < editDistance(name, *closest)) closest = &k;
    }
    warnings.push_back(name + " is not a RankLens variable and is ignored; did you mean " + *closest + "?");
  }
  return warnings;
}

std::vector<std::string> processEnvironNames() {
  std::vector<std::string> names;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    names.emplace_back(*e, eq ? static_cast<size_t>(eq - *e) : std::strlen(*e));
  }
  return names;
}

// Shared by both entry points; `yamlText` null means no file. Throws only what the caller catches.
Status load(const std::string* yamlText, const std::string& origin, const GetEnv& getenv,
            const std::vector<std::string>* envNames, Settings* settings, std::vector<std::string>* warnings) {
  GetEnv lookup = getenv ? getenv : GetEnv([](const char*) -> const char* { return nullptr; });
  Settings s = defaults();
  Status status;
  if (yamlText) status = applyYaml(*yamlText, origin, s);
  if (status.isOk()) status = applyEnvironment(lookup, s);
  if (status.isOk()) status = crossCheck(s);
  if (warnings) *warnings = typoWarnings(envNames ? *envNames : processEnvironNames());
  *settings = status.isOk() ? std::move(s) : defaults();
  return status;
}

// What escaped yaml-cpp or the allocator: the settings fall back to the defaults, and the caller gets the reason.
Status internalFailure(const char* what, Settings* settings) {
  try {
    *settings = defaults();
  } catch (...) {
  }
  return Status::internalError(std::string("internal error while loading settings") + (what ? ": " : "") +
                               (what ? what : ""));
}

Status readFile(const std::string& path, std::string* text) {
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f)
    return Status::systemError(std::string(kConfigVar) + "=" + path + ": cannot read file (" + std::strerror(errno) +
                               ")");
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, f)) > 0) text->append(buffer, n);
  // A directory opens fine on Linux and fails at read time with EISDIR.
  const bool ok = !std::ferror(f);
  const int error = ok ? 0 : (errno ? errno : EIO);
  std::fclose(f);
  if (ok) return Status::ok();
  return Status::systemError(std::string(kConfigVar) + "=" + path + ": cannot read file (" + std::strerror(error) +
                             ")");
}

// A count from the launcher's environment: what strtol reads, when that is all of it, >= 0 and below 2^30; else
// `fallback`. As lenient as the launchers that write these (a leading '+' or space passes).
int contextInt(const GetEnv& getenv, const char* name, int fallback) {
  const char* value = getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  return *end == '\0' && n >= 0 && n < (1L << 30) ? static_cast<int>(n) : fallback;
}

}  // namespace

Status loadFromEnvironment(const GetEnv& getenv, Settings* settings, std::vector<std::string>* warnings,
                           const std::vector<std::string>* envNames) {
  try {
    const char* path = getenv ? getenv(kConfigVar) : nullptr;
    if (!path || !*path) return load(nullptr, "", getenv, envNames, settings, warnings);
    std::string text;
    if (Status read = readFile(path, &text); !read.isOk()) {
      *settings = defaults();
      return read;
    }
    return load(&text, path, getenv, envNames, settings, warnings);
  } catch (const std::exception& e) {
    return internalFailure(e.what(), settings);
  } catch (...) {
    return internalFailure(nullptr, settings);
  }
}

Status loadFromYaml(const std::string& yamlText, const std::string& origin, const GetEnv& getenv, Settings* settings,
                    std::vector<std::string>* warnings, const std::vector<std::string>* envNames) {
  try {
    return load(&yamlText, origin, getenv, envNames, settings, warnings);
  } catch (const std::exception& e) {
    return internalFailure(e.what(), settings);
  } catch (...) {
    return internalFailure(nullptr, settings);
  }
}

Context readContext(const GetEnv& getenv) {
  Context c;
  if (!getenv) return c;
  if (const char* rank = getenv("RANK"); rank != nullptr) c.rank = rank;
  c.rank_number = contextInt(getenv, "RANK", -1);
  c.world_size = contextInt(getenv, "WORLD_SIZE", -1);
  c.local_rank = contextInt(getenv, "LOCAL_RANK", -1);
  // torchrun, Open MPI and MPICH/Hydra each name it differently; the first that says >= 1 counts.
  for (const char* name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    const char* value = getenv(name);
    const int n = value ? std::atoi(value) : 0;
    if (n > 0) {
      c.local_ranks = n;
      break;
    }
  }
  if (const char* blocking = getenv("NCCL_COMM_BLOCKING"); blocking != nullptr) {
    if (std::strcmp(blocking, "0") == 0)
      c.comm_blocking = 0;
    else if (std::strcmp(blocking, "1") == 0)
      c.comm_blocking = 1;
  }
  if (const char* progress = getenv("RANKLENS_PROGRESS"); progress != nullptr && *progress != '\0')
    c.progress = std::strcmp(progress, "0") == 0 ? 0 : 1;
  c.shared_gpu_local_rank = contextInt(getenv, "RANKLENS_SHARE_GPU_LOCAL_RANK", -1);
  return c;
}

Context readContext() {
  return readContext([](const char* name) -> const char* { return std::getenv(name); });
}

std::vector<KeyInfo> describe(const Settings& settings) {
  std::vector<KeyInfo> rows;
  try {
    const Settings defaultSettings;
    for (const KeyDesc& d : kKeys) {
      auto it = settings.set_by.find(d.key);
      rows.push_back({d.section, d.key, d.env, d.show(settings), it == settings.set_by.end() ? "default" : it->second,
                      d.show(defaultSettings), d.values, d.help});
    }
  } catch (...) {
    // Only std::bad_alloc can get here; a partial table is better than an exception through the C ABI.
  }
  return rows;
}

const char* toString(Section v) { return enumName(v, kSectionNames); }
const char* toString(Mode v) { return enumName(v, kModeNames); }
const char* toString(Fidelity v) { return enumName(v, kFidelityNames); }
const char* toString(Fill v) { return enumName(v, kFillNames); }
const char* toString(DeviceKind v) { return enumName(v, kDeviceNames); }
const char* toString(Payloads v) { return enumName(v, kPayloadsNames); }
const char* toString(StagingFull v) { return enumName(v, kStagingFullNames); }
const char* toString(PayloadShuffle v) { return enumName(v, kPayloadShuffleNames); }
const char* toString(TimingClock v) { return enumName(v, kTimingClockNames); }
const char* toString(CapturedTiming v) { return enumName(v, kCapturedTimingNames); }
const char* toString(CopyPriority v) { return enumName(v, kCopyPriorityNames); }
const char* toString(HoldFrom v) { return enumName(v, kHoldFromNames); }
const char* toString(PeerPacing v) { return enumName(v, kPeerPacingNames); }
const char* toString(OnMismatch v) { return enumName(v, kOnMismatchNames); }
const char* toString(OnPayloadError v) { return enumName(v, kOnPayloadErrorNames); }
const char* toString(AtHang v) { return enumName(v, kAtHangNames); }
const char* toString(Completion v) { return enumName(v, kCompletionNames); }
const char* toString(HostTime v) { return enumName(v, kHostTimeNames); }
const char* toString(TimingSource v) { return enumName(v, kTimingSourceNames); }
const char* toString(EstimateTarget v) { return enumName(v, kEstimateTargetNames); }

}  // namespace config
}  // namespace ranklens
