// SPDX-License-Identifier: Apache-2.0
#include "estimate_command.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "ranklens/estimator.h"
#include "ranklens/events.h"
#include "ranklens/nccl_tests_import.h"
#include "ranklens/trace.h"
#include "text_format.h"
#include "trace_log.h"

namespace ranklens {
namespace tools {

namespace fs = std::filesystem;

namespace {

// `ranklens history build` and `ranklens history import-nccl-tests`: the history file's two sources.
void addHistoryCommands(CLI::App& app, EstimateOptions* o, EstimateCommands* commands) {
  EstimateCommands& c = *commands;
  auto* history = app.add_subcommand("history", "Duration history of recorded runs, for the estimator");
  history->require_subcommand(1);
  c.build = history->add_subcommand(
      "build",
      "Collect every timed call of recorded runs into a history file; the ranks of one job (a trace "
      "directory holding rank<R>/) also give each collective's transfer time, the shortest over the ranks");
  c.build
      ->add_option("traces", o->traces,
                   "Recorded trace directories (their rank<R> directories) or rank "
                   "directories")
      ->required();
  c.build->add_option("-o,--output", o->output, "History file to write")->required();
  c.build->add_flag("-a,--append", o->append, "Add to an existing history file (a run already in it is refused)");
  c.build->footer(
      "Example: ranklens history build /scratch/run42 /scratch/run43 -o cluster.hist\n"
      "         ranklens history build /scratch/run44 -o cluster.hist --append");
  c.importNcclTests = history->add_subcommand(
      "import-nccl-tests",
      "Add the cluster's nccl-tests results (the text all_reduce_perf & co. print) to a history: each size's "
      "out-of-place and in-place time becomes a transfer time of a communicator of the listed ranks, spanning nodes "
      "when they sit on several hosts. Calls of communicators or sizes that no recording has (a job across nodes "
      "never recorded) are then estimated from the cluster's own bandwidth");
  c.importNcclTests
      ->add_option("logs", o->logs,
                   "nccl-tests output files: the text they print (several tests one "
                   "after another are fine; mpirun --tag-output prefixes too), or "
                   "their JSON output (-J FILE.json)")
      ->required()
      ->check(CLI::ExistingFile);
  c.importNcclTests->add_option("-o,--output", o->output, "History file to write")->required();
  c.importNcclTests->add_flag("-a,--append", o->append,
                              "Add to an existing history file (a test of a file already in it is refused)");
  c.importNcclTests
      ->add_option("--op", o->importOp,
                   "Operation of a test whose name the output lacks ('# Collective test starting: "
                   "...'); a named test's is its own")
      ->check(CLI::IsMember(
          {"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AlltoAll", "Gather", "Scatter", "Send"}));
  c.importNcclTests
      ->add_option("--nranks", o->importNranks,
                   "Communicator size of a test whose device list the output lacks (else the ranks "
                   "listed)")
      ->check(CLI::PositiveNumber);
  c.importNcclTests
      ->add_option("--ranks-per-node", o->importRanksPerNode,
                   "GPUs per node (default: the most ranks listed on one host)")
      ->check(CLI::PositiveNumber);
  c.importNcclTests->footer(
      "Example: mpirun -np 64 -N 8 ./all_reduce_perf -b 8 -e 8G -f 2 -g 1 > ar64.log\n"
      "         ranklens history import-nccl-tests ar64.log ag64.log rs64.log -o cluster.hist --append\n"
      "         ranklens estimate query --history cluster.hist --op AllReduce --bytes 1073741824 --nranks 64 "
      "--crosses-nodes");
}

// `ranklens estimate eval` and `ranklens estimate query`: what the estimator makes of a history.
void addEstimatorCommands(CLI::App& app, EstimateOptions* o, EstimateCommands* commands) {
  EstimateCommands& c = *commands;
  auto* estimate = app.add_subcommand("estimate", "Estimated durations from a history");
  estimate->require_subcommand(1);
  c.eval = estimate->add_subcommand(
      "eval",
      "Leave-one-out over calls and leave-one-run-out over recorded jobs: median and p90 relative error "
      "per op and size class");
  c.query = estimate->add_subcommand("query", "One estimate, with its neighbourhood distance and method");
  for (CLI::App* cmd : {c.eval, c.query}) {
    cmd->add_option("--history", o->history, "History file (ranklens history build)")->required();
    cmd->add_option("-k,--neighbours", o->neighbours, "Nearest samples used (default 8)")->check(CLI::Range(1, 1024));
    cmd->add_option("--max-distance", o->maxDistance,
                    "Beyond this distance (log2 of the byte ratio; 1 = 2x) the latency-bandwidth fit is used "
                    "(default 1)");
    cmd->add_option("--json", o->json, "Also write the result as JSON to this file ('-': stdout)");
    cmd->add_option("--target", o->target,
                    "transfer: the collective's own time, the shortest over the job's ranks (what replay holds by "
                    "default); observed: the duration a rank measured, waiting for its peers included (default "
                    "transfer)")
        ->check(CLI::IsMember({"observed", "transfer"}));
  }
  c.eval
      ->add_option("--against", o->against,
                   "Estimate every sample of this other history from --history instead (no leaving out): how well "
                   "one history, e.g. nccl-tests imports, predicts another job's calls")
      ->check(CLI::ExistingFile);
  c.eval->footer(
      "Example: ranklens estimate eval --history cluster.hist --json eval.json\n"
      "         ranklens estimate eval --history nccl-tests.hist --against run42.hist");
  c.query->add_option("--op", o->op, "Operation (AllReduce, AllGather, ...)")
      ->check(CLI::IsMember({"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AlltoAll", "Gather",
                             "Scatter", "Send", "Recv"}));
  c.query->add_option("--bytes", o->bytes, "Bytes this rank receives (Call.bytes)")->required();
  c.query->add_option("--nranks", o->nranks, "Communicator size (default 2)");
  c.query->add_flag("--crosses-nodes", o->crossesNodes, "The communicator spans nodes");
  c.query->add_option("--role", o->role, "Communicator name (commName), preferred neighbourhood");
  CLI::Option* occurrence =
      c.query
          ->add_option("--step-occurrence", o->stepOccurrence,
                       "Which call of this op and size in its step (0 = the first): samples made at the same place "
                       "of their steps are preferred when there are at least 3")
          ->check(CLI::NonNegativeNumber);
  c.query
      ->add_option("--step-phase", o->stepPhase,
                   "Where in its step the call is made (0 = at the step marker, 1 = at the next): with "
                   "--step-occurrence, the samples of that place made within 0.02 of it are preferred (or the 3 "
                   "nearest): those of the same configuration")
      ->check(CLI::Range(0.0, 1.0))
      ->needs(occurrence);
  c.query->footer("Example: ranklens estimate query --history cluster.hist --op AllReduce --bytes 26214400");
}

}  // namespace

EstimateCommands addEstimateCommands(CLI::App& app, EstimateOptions* o) {
  EstimateCommands c;
  addHistoryCommands(app, o, &c);
  addEstimatorCommands(app, o, &c);
  return c;
}

namespace {

bool writeJson(const std::string& path, const nlohmann::json& doc) { return writeOutput(path, doc.dump(2) + "\n"); }

// Rank directories under each argument (itself when it is one).
std::vector<std::string> rankDirectories(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (const auto& a : args) {
    std::vector<std::string> ranks = trace::rankDirectories(a);
    if (ranks.empty()) ranks.push_back(a);  // let the reader say what is wrong with it
    out.insert(out.end(), ranks.begin(), ranks.end());
  }
  return out;
}

bool loadHistoryOrSay(const std::string& path, timing::History* history) {
  std::string error;
  if ((error = timing::loadHistory(path, history).message()).empty()) return true;
  std::cerr << "error: " << error << "\n";
  return false;
}

// The target asked for, else transfer when the history has transfer times (as replay does). Empty after an error.
std::string targetFor(const EstimateOptions& o, const timing::History& history) {
  if (timing::hasTransferTimes(history)) return o.target.empty() ? "transfer" : o.target;
  const char* why = " has no transfer times (each job recorded on one rank only, or a history older than format 2)";
  if (o.target == "transfer") {
    std::cerr << "error: --target transfer: " << o.history << why
              << "; rebuild it with `ranklens history build` from every rank's trace of each job, or use --target "
                 "observed\n";
    return "";
  }
  if (o.target.empty()) std::cerr << "ranklens: " << o.history << why << ": target observed\n";
  return "observed";
}

timing::Estimator::Options estimatorOptions(const EstimateOptions& o, const std::string& target) {
  timing::Estimator::Options options;
  options.neighbours = o.neighbours;
  options.maxDistance = o.maxDistance;
  options.target = target == "transfer" ? timing::EstimateTarget::kTransfer : timing::EstimateTarget::kObserved;
  return options;
}

// The history `--output` names, loaded when appending: 0, or the exit code after saying why not.
int historyToWrite(const EstimateOptions& o, timing::History* history) {
  std::string error;
  if (o.append && fs::exists(o.output) && !(error = timing::loadHistory(o.output, history).message()).empty()) {
    std::cerr << "error: " << error << "\n";
    return 1;
  }
  if (!o.append && fs::exists(o.output)) {
    std::cerr << "error: " << o.output << " exists; pass --append to add runs to it, or choose another file\n";
    return 2;
  }
  history->version = timing::kHistoryVersion;  // an appended older history gains the newer fields for the new jobs
  return 0;
}

bool saveHistoryOrSay(const std::string& path, const timing::History& history) {
  std::string error;
  if ((error = timing::saveHistory(path, history).message()).empty()) {
    std::cout << path << ": " << history.runs.size() << " runs, " << history.samples.size() << " samples\n";
    return true;
  }
  std::cerr << "error: " << error << "\n";
  return false;
}

}  // namespace

int runHistoryBuild(const EstimateOptions& o) {
  timing::History history;
  std::string error;
  if (const int rc = historyToWrite(o, &history)) return rc;
  // The rank directories of each recorded job together: their calls are paired for the transfer times.
  std::map<std::string, std::vector<std::string>> jobs;
  std::vector<std::string> order;
  for (const auto& dir : rankDirectories(o.traces)) {
    auto& ranks = jobs[timing::jobOf(dir)];
    if (ranks.empty()) order.push_back(timing::jobOf(dir));
    ranks.push_back(dir);
  }
  int failures = 0;
  for (const auto& job : order) {
    const size_t before = history.samples.size();
    if (!(error = timing::addRecordedJob(jobs[job], &history).message()).empty()) {
      std::cerr << "error: " << error << "\n";
      ++failures;
      continue;
    }
    size_t transfer = 0;
    for (size_t i = before; i < history.samples.size(); ++i) transfer += history.samples[i].transferNs > 0;
    std::cerr << "ranklens: " << job << ": " << jobs[job].size() << " rank(s), " << history.samples.size() - before
              << " samples, " << transfer << " with a transfer time\n";
  }
  if (!saveHistoryOrSay(o.output, history)) return 1;
  return failures ? 1 : 0;
}

int runHistoryImportNcclTests(const EstimateOptions& o) {
  timing::History history;
  if (const int rc = historyToWrite(o, &history)) return rc;
  timing::NcclTestsOptions options;
  options.op = o.importOp;
  options.nranks = o.importNranks;
  options.ranksPerNode = o.importRanksPerNode;
  for (const std::string& log : o.logs) {
    std::ifstream in(log, std::ios::binary);
    if (!in) {
      std::cerr << "error: " << log << ": cannot open it\n";
      return 1;
    }
    std::stringstream text;
    text << in.rdbuf();
    std::vector<timing::NcclTestsRun> runs;
    std::string error;
    // Absolute: the run names the file wherever the history is used next.
    if (!timing::importNcclTests(text.str(), fs::absolute(log).string(), options, &history, &runs, &error)) {
      std::cerr << "error: " << error << "\nnothing written to " << o.output << "\n";
      return 1;
    }
    for (const timing::NcclTestsRun& r : runs) {
      std::cerr << "ranklens: " << log << ":" << r.line << ": " << (r.test.empty() ? "(unnamed test)" : r.test)
                << " as " << events::opName(static_cast<events::Op>(r.op))
                << (r.op == static_cast<int>(events::Op::kSend) ? " (grouped with a Recv)" : "") << ", " << r.nranks
                << " ranks on " << r.nodes << " node(s)" << (r.crossesNodes ? " (spans nodes)" : "") << ": " << r.rows
                << " sizes, " << r.samples << " samples, " << r.minBytes << " to " << r.maxBytes
                << " bytes received, peak bus bandwidth " << std::fixed << std::setprecision(1) << r.peakBusGBps
                << " GB/s" << (r.graph ? ", CUDA graph launches" : "");
      if (r.rowsWrong) std::cerr << "; " << r.rowsWrong << " time(s) left out: nccl-tests found wrong results";
      if (r.rowsEmpty) std::cerr << "; " << r.rowsEmpty << " row(s) of 0 bytes left out";
      std::cerr << "\n";
    }
  }
  return saveHistoryOrSay(o.output, history) ? 0 : 1;
}

namespace {

// eval --against: every sample of another history estimated from this one.
int runEstimateEvalAgainst(const EstimateOptions& o, const timing::History& history, const std::string& target) {
  timing::History judged;
  if (!loadHistoryOrSay(o.against, &judged)) return 1;
  if (target == "transfer" && !timing::hasTransferTimes(judged)) {
    std::cerr << "error: --against " << o.against << " has no transfer times to judge (each job recorded on one "
              << "rank only); rebuild it from every rank's trace, or pass --target observed\n";
    return 1;
  }
  const timing::Estimator estimator(history, estimatorOptions(o, target));
  size_t extrapolated = 0;
  const auto errors = timing::evaluateAgainst(estimator, judged, estimatorOptions(o, target).target, &extrapolated);
  nlohmann::json doc = {{"history", o.history},
                        {"history_version", history.version},
                        {"against", o.against},
                        {"against_samples", judged.samples.size()},
                        {"samples", history.samples.size()},
                        {"target", target},
                        {"neighbours", o.neighbours},
                        {"max_distance", o.maxDistance},
                        {"extrapolated", extrapolated}};
  std::cout << o.against << " (" << judged.samples.size() << " samples) estimated from " << o.history << " ("
            << history.samples.size() << " samples); target: " << target << "\n\n"
            << std::left << std::setw(28) << "op / size class" << std::right << std::setw(9) << "calls" << std::setw(10)
            << "median" << std::setw(10) << "p90"
            << "\n";
  for (const auto& [key, stats] : errors) {
    std::cout << std::left << std::setw(28) << key << std::right << std::setw(9) << stats.count << std::setw(10)
              << percentText(stats.median) << std::setw(10) << percentText(stats.p90) << "\n";
    doc["errors"][key] = {{"count", stats.count}, {"median", stats.median}, {"p90", stats.p90}};
  }
  std::cout << "\nrelative error |estimate - recorded| / recorded (" << target
            << "); extrapolated estimates: " << extrapolated << "\n";
  return writeJson(o.json, doc) ? 0 : 1;
}

}  // namespace

int runEstimateEval(const EstimateOptions& o) {
  timing::History history;
  if (!loadHistoryOrSay(o.history, &history)) return 1;
  const std::string target = targetFor(o, history);
  if (target.empty()) return 1;
  if (!o.against.empty()) return runEstimateEvalAgainst(o, history, target);
  const timing::Evaluation ev = timing::evaluate(history, estimatorOptions(o, target));
  nlohmann::json doc = {{"history", o.history},
                        {"history_version", history.version},
                        {"runs", history.runs.size()},
                        {"jobs", ev.jobs},
                        {"benchmark_runs", ev.benchmarkRuns},
                        {"samples", history.samples.size()},
                        {"target", target},
                        {"neighbours", o.neighbours},
                        {"max_distance", o.maxDistance},
                        {"extrapolated_leave_one_out", ev.extrapolatedLoo},
                        {"extrapolated_leave_one_run_out", ev.extrapolatedLoro}};
  std::cout << o.history << ": " << ev.jobs << " recorded jobs (" << history.runs.size() - ev.benchmarkRuns
            << " ranks)";
  if (ev.benchmarkRuns > 0) std::cout << " and " << ev.benchmarkRuns << " nccl-tests runs (neighbours, not judged)";
  std::cout << ", " << history.samples.size() << " samples; target: " << target << "\n\n"
            << std::left << std::setw(28) << "op / size class" << std::right << std::setw(9) << "calls" << std::setw(10)
            << "median" << std::setw(10) << "p90"
            << "   | " << std::setw(9) << "calls" << std::setw(10) << "median" << std::setw(10) << "p90"
            << "\n"
            << std::left << std::setw(28) << "" << std::right << std::setw(29) << "leave one call out"
            << "   | " << std::setw(29) << "leave one job out"
            << "\n";
  for (const auto& [key, loo] : ev.leaveOneOut) {
    auto it = ev.leaveOneRunOut.find(key);
    std::cout << std::left << std::setw(28) << key << std::right << std::setw(9) << loo.count << std::setw(10)
              << percentText(loo.median) << std::setw(10) << percentText(loo.p90) << "   | ";
    if (it != ev.leaveOneRunOut.end())
      std::cout << std::setw(9) << it->second.count << std::setw(10) << percentText(it->second.median) << std::setw(10)
                << percentText(it->second.p90);
    else
      std::cout << std::setw(29) << "(one job)";
    std::cout << "\n";
    doc["leave_one_out"][key] = {{"count", loo.count}, {"median", loo.median}, {"p90", loo.p90}};
    if (it != ev.leaveOneRunOut.end())
      doc["leave_one_run_out"][key] = {
          {"count", it->second.count}, {"median", it->second.median}, {"p90", it->second.p90}};
  }
  std::cout << "\nrelative error |estimate - recorded| / recorded (" << target
            << "); extrapolated estimates: " << ev.extrapolatedLoo << " (leave one call out), " << ev.extrapolatedLoro
            << " (leave one job out)\n";
  if (ev.leaveOneOut.empty() && ev.benchmarkRuns > 0)
    std::cout << "note: no recorded call to judge (nccl-tests samples only); to see how well they predict a job, "
                 "ranklens estimate eval --history "
              << o.history << " --against JOB.hist\n";
  return writeJson(o.json, doc) ? 0 : 1;
}

int runEstimateQuery(const EstimateOptions& o) {
  timing::History history;
  if (!loadHistoryOrSay(o.history, &history)) return 1;
  int op = 0;
  for (int i = 0; i <= static_cast<int>(events::Op::kRecv); ++i)
    if (o.op == events::opName(static_cast<events::Op>(i))) op = i;
  const std::string target = targetFor(o, history);
  if (target.empty()) return 1;
  const timing::Estimator estimator(history, estimatorOptions(o, target));
  const timing::Estimate e =
      estimator.estimate(op, o.nranks, o.crossesNodes, o.bytes, o.role, false, o.stepOccurrence, o.stepPhase);
  std::cout << o.op << " " << o.bytes << " bytes, " << o.nranks << " ranks: " << std::fixed << std::setprecision(1)
            << e.durationNs / 1000.0 << " us (" << e.method << ", " << e.neighbours << " neighbours, distance "
            << std::setprecision(2) << e.distance << (e.extrapolated ? ", extrapolated" : "") << ")\n";
  return writeJson(o.json, {{"op", o.op},
                            {"bytes", o.bytes},
                            {"nranks", o.nranks},
                            {"duration_ns", e.durationNs},
                            {"method", e.method},
                            {"neighbours", e.neighbours},
                            {"distance", e.distance},
                            {"extrapolated", e.extrapolated}})
             ? 0
             : 1;
}

}  // namespace tools
}  // namespace ranklens
