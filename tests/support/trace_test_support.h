// SPDX-License-Identifier: Apache-2.0
// Shared by the tests that run a program in a child process with RankLens settings in its environment and then read
// the trace it wrote (tests/record, tests/replay).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ranklens/events.h"
#include "ranklens/trace.h"

namespace trace_test {

struct ChildRun {
  int status = -1;     // exit code; 128 + N when killed by signal N
  std::string output;  // stdout and stderr
};

// A new empty directory under `root`.
inline std::string freshDir(const std::string& root, const std::string& name) {
  const std::string dir = root + "/" + name;
  EXPECT_EQ(system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()), 0);
  return dir;
}

// Runs `command` under `env` (a value "<unset>" removes the variable).
inline ChildRun runWithEnv(const std::map<std::string, std::string>& env, const std::string& command) {
  std::string line = "exec env";  // unsets first: env takes its options before the assignments
  for (const auto& [k, v] : env)
    if (v == "<unset>") line += " -u " + k;
  for (const auto& [k, v] : env)
    if (v != "<unset>") line += " '" + k + "=" + v + "'";
  line += " " + command + " 2>&1";
  ChildRun run;
  FILE* pipe = popen(line.c_str(), "r");
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) run.output.append(buffer, n);
  const int status = pclose(pipe);
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
  return run;
}

// Every record of a rank directory, by type.
struct Trace {
  ranklens::trace::Manifest manifest;
  std::vector<ranklens::events::CommInit> comms;
  std::vector<ranklens::events::CommEnd> ends;
  std::vector<ranklens::events::Call> calls;
  std::vector<ranklens::trace::Timing> timings;
  std::vector<ranklens::trace::PayloadRef> payloads;
  std::vector<ranklens::events::GroupEnd> groups;
  std::vector<ranklens::trace::GroupBegin> groupBegins;
  std::vector<ranklens::events::Stage> stages;
  std::vector<ranklens::trace::CommBinding> bindings;
  std::unique_ptr<ranklens::trace::TraceReader> reader;
  uint64_t counter(const std::string& name) const {  // ~0 where the recording did not set it
    return ranklens::trace::counterValue(manifest, name.c_str()).value_or(~0ull);
  }
};

inline Trace readTrace(const std::string& dir) {
  using ranklens::trace::RecordType;
  Trace t;
  std::string error;
  error = ranklens::trace::TraceReader::open(dir, ranklens::trace::Limits{}, &t.reader).message();
  EXPECT_NE(t.reader, nullptr) << error;
  if (!t.reader) return t;
  t.manifest = t.reader->manifest();
  bool ok = t.reader->scan([&](RecordType type, const msgpack::object& body, const ranklens::trace::Location&) {
    switch (type) {
      case RecordType::kCommInit:
        t.comms.push_back(body.as<ranklens::events::CommInit>());
        break;
      case RecordType::kCommEnd:
        t.ends.push_back(body.as<ranklens::events::CommEnd>());
        break;
      case RecordType::kCall:
        t.calls.push_back(body.as<ranklens::events::Call>());
        break;
      case RecordType::kTiming:
        t.timings.push_back(body.as<ranklens::trace::Timing>());
        break;
      case RecordType::kPayloadRef:
        t.payloads.push_back(body.as<ranklens::trace::PayloadRef>());
        break;
      case RecordType::kGroupEnd:
        t.groups.push_back(body.as<ranklens::events::GroupEnd>());
        break;
      case RecordType::kGroupBegin:
        t.groupBegins.push_back(body.as<ranklens::trace::GroupBegin>());
        break;
      case RecordType::kStage:
        t.stages.push_back(body.as<ranklens::events::Stage>());
        break;
      case RecordType::kCommBinding:
        t.bindings.push_back(body.as<ranklens::trace::CommBinding>());
        break;
      default:
        ADD_FAILURE() << "unexpected record type " << static_cast<int>(type);
    }
    return true;
  });
  EXPECT_TRUE(ok);
  EXPECT_TRUE(t.reader->problems().empty()) << t.reader->problems().front().describe();
  return t;
}

}  // namespace trace_test
