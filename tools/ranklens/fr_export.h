// SPDX-License-Identifier: Apache-2.0
// `ranklens export flight-recorder TRACE -o DIR`: a RankLens trace written as PyTorch Flight Recorder dumps (pickle,
// version 2.10 keys, one file DIR/rank_<R> per rank) that torch's analyser reads:
//   python -m torch.distributed.flight_recorder.fr_trace DIR
#pragma once

#include <ostream>
#include <string>

#include "trace_log.h"

namespace CLI {
class App;
}

namespace ranklens {
namespace tools {

// The Flight Recorder dump of one rank's event log: its communicators as process groups (an imported trace's keep
// their names), its calls as entries in order (state "completed", or the imported entry's state), durations from its
// Timing records.
std::string flightRecorderDump(const EventLog& log);

// A minimal pickle writer (protocol 2, the opcodes torch's own pickler uses for a dump): exposed for tests.
class PickleWriter {
 public:
  PickleWriter();
  void none();
  void boolean(bool v);
  void integer(int64_t v);
  void real(double v);
  void str(const std::string& s);
  void beginDict();  // then key/value pairs, then end()
  void beginList();  // then items, then end()
  void end(bool dict);
  void tuple2();         // the two values before it into a tuple
  std::string finish();  // STOP

 private:
  std::string out_;
};

struct ExportOptions {
  std::string trace;
  std::string out;
};
CLI::App* addExportCommand(CLI::App& app, ExportOptions* options);
int runExport(const ExportOptions& options, std::ostream& out, std::ostream& err);

}  // namespace tools
}  // namespace ranklens
