// SPDX-License-Identifier: Apache-2.0
// ranklens: run a program as rank r of an N-rank job on this machine, with RankLens's libnccl.so.2 in place of
// NCCL; summarise the events it wrote; show the effective configuration.
// Exit codes: the program's own exit code for `replay` (1 if it exited 0 but its event log could not be written
// whole; 2 if the event directory cannot be written, before the run); 0 success, 1 runtime failure, 2 bad usage
// otherwise.
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <functional>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "../cli_text.h"
#include "compare.h"
#include "doctor_command.h"
#include "estimate_command.h"
#include "fr_export.h"
#include "fr_import.h"
#include "launch.h"
#include "ranklens/config.h"
#include "record_command.h"
#include "replay_command.h"
#include "summary.h"
#include "timeline.h"
#include "waits_command.h"

namespace {

using ranklens::tools::ReplayOptions;
constexpr const char* kVersion = "0.1.0";

// docs/config.md's tables of settings, one per section, one line per setting (a test holds the two together).
int printSettingsTable() {
  auto cell = [](const std::string& text) {
    std::string out;
    for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
    return out;
  };
  const char* const titles[] = {"Common settings (both modes)", "Record settings", "Replay settings"};  // by Section
  int section = -1;
  for (const auto& row : ranklens::config::describe(ranklens::config::Settings{})) {
    if (static_cast<int>(row.section) != section) {
      section = static_cast<int>(row.section);
      std::cout << (section > 0 ? "\n" : "") << "### " << titles[section]
                << "\n\n| key | environment variable | values | default | what it does |\n"
                << "| --- | --- | --- | --- | --- |\n";
    }
    std::cout << "| `" << row.key << "` | `" << row.env << "` | " << cell(row.values) << " | "
              << (row.default_value.empty() ? std::string("empty") : "`" + row.default_value + "`") << " | "
              << cell(row.help) << " |\n";
  }
  return 0;
}

int runDumpConfig(const std::string& configPath, bool markdown) {
  if (markdown) return printSettingsTable();
  if (!configPath.empty()) setenv("RANKLENS_CONFIG", configPath.c_str(), 1);
  ranklens::config::Settings settings;
  std::vector<std::string> warnings;
  if (const ranklens::Status loaded =
          ranklens::config::loadFromEnvironment([](const char* n) { return getenv(n); }, &settings, &warnings);
      !loaded.isOk()) {
    std::cerr << "error: " << loaded.message() << "\n";
    return 1;
  }
  for (const auto& w : warnings) std::cerr << "warning: " << w << "\n";
  std::cout << std::left;
  int section = -1;
  for (const auto& row : ranklens::config::describe(settings)) {
    if (static_cast<int>(row.section) != section) {
      section = static_cast<int>(row.section);
      std::cout << "# " << ranklens::config::toString(row.section) << "\n";
    }
    std::cout << std::setw(15) << row.key << " = " << std::setw(24) << row.value << "  (" << row.set_by << "; default "
              << (row.default_value.empty() ? "\"\"" : row.default_value) << "; env " << row.env << ")\n";
  }
  return 0;
}

// The top-level --help: every command by example, the exit codes, where the settings are described.
void describeApp(CLI::App& app) {
  app.set_version_flag("--version", kVersion);
  app.require_subcommand(1);
  app.footer(
      "Examples:\n"
      "  ranklens record --trace /scratch/run42 -- torchrun --nproc-per-node 2 train.py\n"
      "  ranklens record --share-gpu --trace /tmp/run4 --payloads all -- torchrun --nproc-per-node 4 train.py\n"
      "  ranklens replay --trace /tmp/run4 --ranks all --fidelity value -- python3 train.py\n"
      "  ranklens replay --rank 3 --world-size 8 -- ./my_nccl_program\n"
      "  ranklens replay --rank 37 --world-size 64 --fill poison -- python3 train.py\n"
      "  ranklens replay --rank 1 --trace /scratch/run42 --fidelity value -- python3 train.py\n"
      "  ranklens trace summary /tmp/ranklens-1700000000-1234\n"
      "  ranklens compare /scratch/run42/rank3 /tmp/ranklens-1700000000-1234/rank3 --json compare.json\n"
      "  ranklens timeline /scratch/run42/rank3 /tmp/ranklens-1700000000-1234/rank3 -o rank3.json\n"
      "  ranklens dump-config --config ranklens.yaml\n"
      "  ranklens doctor --python /opt/venv/bin/python --trace /scratch/run42\n"
      "  ranklens history build /scratch/run42 /scratch/run43 -o cluster.hist\n"
      "  ranklens estimate eval --history cluster.hist --target transfer\n"
      "  ranklens history import-nccl-tests all_reduce_64ranks.log -o cluster.hist --append\n"
      "Exit codes: record and replay return the program's exit code (128+N if killed by signal N; 127 if it cannot "
      "start;\n"
      "  2 for bad usage before it starts); compare 0 match, 1 differ; other commands 0 ok, 1 failure; all 2 for\n"
      "  bad usage (compare and timeline: also for an unreadable trace).\n"
      "Settings: docs/config.md (RANKLENS_* variables > YAML file > defaults).");
}

// A declared subcommand and what runs it once parsed. Each command's options live as long as its runner, which
// CLI11 fills through the addresses the declaration gave it.
struct Command {
  CLI::App* cli = nullptr;
  std::function<int()> run;
};

// `ranklens trace summary` and `ranklens trace waits`.
void declareTraceCommands(CLI::App& app, std::vector<Command>* commands) {
  auto* trace = app.add_subcommand("trace", "Inspect event logs");
  trace->require_subcommand(1);
  struct SummaryOptions {
    std::string dir;
    bool json = false;
  };
  auto summary = std::make_shared<SummaryOptions>();
  auto* summaryCmd = trace->add_subcommand("summary", "Per rank: communicators and call signatures with counts/bytes");
  summaryCmd->add_option("dir", summary->dir, "Trace directory (or one rank<R> directory)")->required();
  summaryCmd->add_flag("--json", summary->json, "Machine-readable output");
  commands->push_back({summaryCmd, [summary] {
                         return ranklens::tools::printTraceSummary(summary->dir, summary->json, std::cout, std::cerr);
                       }});
  auto waits = std::make_shared<ranklens::tools::WaitsOptions>();
  commands->push_back(
      {ranklens::tools::addWaitsCommand(*trace, waits.get()), [waits] { return ranklens::tools::runWaits(*waits); }});
}

void declareDumpConfig(CLI::App& app, std::vector<Command>* commands) {
  struct DumpOptions {
    std::string configPath;
    bool markdown = false;
  };
  auto dump = std::make_shared<DumpOptions>();
  auto* cmd = app.add_subcommand("dump-config", "Show every setting: value, where it came from, default");
  cmd->add_option("-c,--config", dump->configPath, "YAML settings file (else RANKLENS_CONFIG)");
  cmd->add_flag("--markdown", dump->markdown, "Print the table of every setting (docs/config.md's) instead");
  commands->push_back({cmd, [dump] { return runDumpConfig(dump->configPath, dump->markdown); }});
}

// Every subcommand, in the order --help lists them.
std::vector<Command> declareCommands(CLI::App& app) {
  namespace rt = ranklens::tools;
  std::vector<Command> commands;
  auto replay = std::make_shared<ReplayOptions>();
  commands.push_back({rt::addReplayCommand(app, replay.get()), [replay] { return rt::runReplay(*replay); }});
  auto record = std::make_shared<rt::RecordOptions>();
  commands.push_back({rt::addRecordCommand(app, record.get()), [record] { return rt::runRecord(*record); }});
  auto run = std::make_shared<rt::RunOptions>();
  commands.push_back({rt::addRunCommand(app, run.get()), [run] { return rt::runRun(*run); }});
  auto doctor = std::make_shared<rt::DoctorOptions>();
  commands.push_back({rt::addDoctorCommand(app, doctor.get()), [doctor] { return rt::runDoctor(*doctor); }});
  auto estimate = std::make_shared<rt::EstimateOptions>();
  const auto estimateCommands = rt::addEstimateCommands(app, estimate.get());
  commands.push_back({estimateCommands.build, [estimate] { return rt::runHistoryBuild(*estimate); }});
  commands.push_back(
      {estimateCommands.importNcclTests, [estimate] { return rt::runHistoryImportNcclTests(*estimate); }});
  commands.push_back({estimateCommands.eval, [estimate] { return rt::runEstimateEval(*estimate); }});
  commands.push_back({estimateCommands.query, [estimate] { return rt::runEstimateQuery(*estimate); }});
  declareTraceCommands(app, &commands);
  auto compare = std::make_shared<rt::CompareOptions>();
  commands.push_back({rt::addCompareCommand(app, compare.get()),
                      [compare] { return rt::runCompare(*compare, std::cout, std::cerr); }});
  auto importFr = std::make_shared<rt::ImportOptions>();
  commands.push_back({rt::addImportCommand(app, importFr.get()),
                      [importFr] { return rt::runImport(*importFr, std::cout, std::cerr); }});
  auto exportFr = std::make_shared<rt::ExportOptions>();
  commands.push_back({rt::addExportCommand(app, exportFr.get()),
                      [exportFr] { return rt::runExport(*exportFr, std::cout, std::cerr); }});
  auto timeline = std::make_shared<rt::TimelineOptions>();
  commands.push_back(
      {rt::addTimelineCommand(app, timeline.get()), [timeline] { return rt::runTimeline(*timeline, std::cerr); }});
  declareDumpConfig(app, &commands);
  return commands;
}

}  // namespace

int main(int argc, char** argv) {
  ranklens::tools::showControlCharactersOnStderr();
  CLI::App app{
      "RankLens: run one rank of a distributed NCCL job alone, with its peers' effects restored at the "
      "NCCL boundary."};
  describeApp(app);
  const std::vector<Command> commands = declareCommands(app);
  if (!ranklens::tools::knownSubcommands(app, argc, argv)) return 2;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = ranklens::tools::reportParseError(app, e);
    return code == 0 ? 0 : 2;
  }
  try {
    for (const auto& command : commands)
      if (command.cli->parsed()) return command.run();
  } catch (const std::exception& e) {  // a bug, or a record that decodes into nonsense: say so, do not abort
    std::cerr << "error: internal error: " << e.what() << " (please report it with the command line)\n";
    return 1;
  }
  return 2;
}
