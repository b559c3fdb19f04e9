// SPDX-License-Identifier: Apache-2.0
// rlpayload: list, show, export, edit, compare and verify the payloads of a RankLens trace (docs/rlpayload.md).
// Exit codes: 0 success; 1 problems found, traces differ, or a runtime failure; 2 bad usage.
#include <CLI/CLI.hpp>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "../cli_text.h"
#include "commands.h"

using namespace rlpayload;

namespace {

constexpr const char* kExitCodes =
    "Exit codes: 0 success; 1 problems found, traces differ, or a runtime failure; 2 bad usage.\n"
    "Errors go to stderr as 'error: <path>: <reason>'; --json output goes to stdout only.";

std::string footer(const std::string& examples) { return "Examples:\n" + examples + "\n" + kExitCodes; }

// -r/-c/-s/-t/-p: the call a command works on.
struct SelectionOptions {
  CLI::Option *rank = nullptr, *peer = nullptr;
};
SelectionOptions addSelection(CLI::App* sub, Selection* s) {
  SelectionOptions o;
  sub->add_option("trace", s->trace, "Trace directory (rank<R>/ below it) or one rank directory")->required();
  o.rank = sub->add_option("-r,--rank", s->rank, "Rank (optional when TRACE holds a single rank)");
  sub->add_option("-c,--comm", s->comm, "Communicator id (creation order in the process: 0, 1, ...)")->required();
  sub->add_option("-s,--seq", s->seq, "Sequence number of the call (per communicator; per peer for Send/Recv)")
      ->required();
  sub->add_option("-t,--op", s->op, "Operation, checked against the call; Send/Recv need it (with --peer)")
      ->transform(CLI::IsMember(opNames(), CLI::ignore_case));
  o.peer = sub->add_option("-p,--peer", s->peer, "Peer rank of a Send/Recv");
  return o;
}

void finishSelection(const SelectionOptions& o, Selection* s) {
  s->rankGiven = o.rank->count() > 0;
  s->peerGiven = o.peer->count() > 0;
}

// A declared subcommand: its CLI11 node, and what runs it once parsed (values of optional options are moved into
// the command's options struct first, so that "not given" stays distinguishable from a default).
struct Subcommand {
  CLI::App* cli = nullptr;
  std::function<int()> run;
};

Subcommand declareLs(CLI::App& app) {
  auto ls = std::make_shared<LsOptions>();
  auto rank = std::make_shared<int>(-1);
  auto comm = std::make_shared<uint64_t>(0);
  auto* cmd = app.add_subcommand("ls",
                                 "List the calls that have payloads: rank, communicator, op, peer, seq, "
                                 "datatype, count, bytes, compressed bytes, ratio");
  cmd->set_version_flag("--version", kVersion);
  cmd->add_option("trace", ls->trace, "Trace directory (rank<R>/ below it) or one rank directory")->required();
  auto* rankOpt = cmd->add_option("-r,--rank", *rank, "Only this rank");
  auto* commOpt = cmd->add_option("-c,--comm", *comm, "Only this communicator");
  cmd->add_option("-t,--op", ls->op, "Only this operation (AllReduce, ..., Send, Recv)")
      ->transform(CLI::IsMember(opNames(), CLI::ignore_case));
  cmd->add_option("-s,--seq", ls->seqRange, "Only sequence numbers in A:B (inclusive; also A, A:, :B)");
  cmd->add_flag("-j,--json", ls->json, "Machine-readable output (docs/rlpayload.md)");
  cmd->footer(
      footer("  rlpayload ls trace/\n"
             "  rlpayload ls trace/ --rank 3 --op AllReduce --seq 10:20\n"
             "  rlpayload ls trace/rank3 --comm 1 --json | jq '.payloads[] | .bytes'"));
  return {cmd, [=] {
            if (rankOpt->count()) ls->rank = *rank;
            if (commOpt->count()) ls->comm = *comm;
            return runLs(*ls);
          }};
}

Subcommand declareShow(CLI::App& app) {
  auto show = std::make_shared<ShowOptions>();
  auto* cmd = app.add_subcommand("show",
                                 "Statistics of one call's payload (min/max/mean/std over finite values, "
                                 "NaN/Inf counts and first positions) and its first values");
  cmd->set_version_flag("--version", kVersion);
  const auto sel = addSelection(cmd, &show->selection);
  cmd->add_option("-n,--values", show->values, "How many leading values to print")->capture_default_str();
  cmd->add_flag("-j,--json", show->json, "Machine-readable output (docs/rlpayload.md)");
  cmd->footer(
      footer("  rlpayload show trace/ --rank 0 --comm 0 --seq 3\n"
             "  rlpayload show trace/rank1 -c 2 -s 0 --op Recv --peer 0 -n 32\n"
             "  rlpayload show trace/ -r 0 -c 0 -s 3 --json"));
  return {cmd, [=] {
            finishSelection(sel, &show->selection);
            return runShow(*show);
          }};
}

Subcommand declareExport(CLI::App& app) {
  auto exp = std::make_shared<ExportOptions>();
  auto* cmd = app.add_subcommand("export", "Write one call's payload to a .npy file or raw bytes");
  cmd->set_version_flag("--version", kVersion);
  const auto sel = addSelection(cmd, &exp->selection);
  cmd->add_option("-o,--output", exp->output, "Output file (replaced if it exists)")->required();
  cmd->add_option("-f,--format", exp->format, "npy (NumPy 1.0 header) or raw (little-endian elements only)")
      ->check(CLI::IsMember({"npy", "raw"}))
      ->capture_default_str();
  cmd->add_option("-a,--as", exp->as,
                  "Element type written: native (bfloat16/fp8 as raw bits '<u2'/'|u1'), float32 or float64")
      ->check(CLI::IsMember({"native", "float32", "float64"}))
      ->capture_default_str();
  cmd->footer(
      footer("  rlpayload export trace/ -r 0 -c 0 -s 3 -o allreduce3.npy\n"
             "  rlpayload export trace/ -r 0 -c 1 -s 7 -o grads.npy --as float32   # bfloat16 -> float32\n"
             "  rlpayload export trace/rank1 -c 2 -s 0 -t Recv -p 0 -o recv.bin --format raw"));
  return {cmd, [=] {
            finishSelection(sel, &exp->selection);
            return runExport(*exp);
          }};
}

// inject's options other than the selection: the action (exactly one) and the target (exactly one).
struct InjectValues {
  double scale = 0, noise = 0;
  uint64_t seed = 0;
  int level = 0;
  CLI::Option *scaleOpt = nullptr, *noiseOpt = nullptr, *seedOpt = nullptr, *levelOpt = nullptr;
};

void addInjectOptions(CLI::App* cmd, InjectOptions* inj, InjectValues* v) {
  auto* action = cmd->add_option_group("Action", "What to change (exactly one)");
  action->add_option("-N,--nan", inj->nan, "Set these elements to NaN (IDX[,IDX...]; float types only)")
      ->delimiter(',')
      ->allow_extra_args(false);
  action->add_option("-I,--inf", inj->inf, "Set these elements to +infinity (IDX[,IDX...]; not float8e4m3)")
      ->delimiter(',')
      ->allow_extra_args(false);
  action->add_option("-S,--set", inj->set, "Set one element: IDX=VALUE (repeatable; VALUE may be nan, inf, -inf)")
      ->allow_extra_args(false);
  v->scaleOpt = action->add_option("-x,--scale", v->scale, "Multiply every element by F");
  v->noiseOpt = action->add_option("-g,--noise", v->noise, "Add Gaussian noise with standard deviation STD");
  action->add_option("-F,--from", inj->from, "Replace the payload with this .npy file (same element count)")
      ->check(CLI::ExistingFile);
  action->require_option(1);
  v->seedOpt = cmd->add_option("-e,--seed", v->seed, "Seed for --noise (default: random, recorded in the Edit)");
  auto* target = cmd->add_option_group("Target", "Where the edit goes (exactly one)");
  target->add_option("-o,--output", inj->output, "Copy the trace to this new directory and edit the copy");
  target->add_flag("-i,--in-place", inj->inPlace, "Edit TRACE itself (append-only: the original blob stays)");
  target->require_option(1);
  v->levelOpt = cmd->add_option("-z,--zstd-level", v->level, "zstd level of the new blob (default: the original's)")
                    ->check(CLI::Range(-7, 22));
}

Subcommand declareInject(CLI::App& app, int argc, char** argv) {
  auto inj = std::make_shared<InjectOptions>();
  auto values = std::make_shared<InjectValues>();
  auto* cmd = app.add_subcommand("inject",
                                 "Change one call's payload (a NaN, an infinity, values, scaling, noise or "
                                 "a whole .npy) in a copy of the trace or in place; the original blob is "
                                 "kept and an Edit record says who changed what");
  cmd->set_version_flag("--version", kVersion);
  const auto sel = addSelection(cmd, &inj->selection);
  addInjectOptions(cmd, inj.get(), values.get());
  cmd->footer(
      footer("  rlpayload inject trace/ -r 0 -c 0 -s 3 --nan 5 -o trace-nan/\n"
             "  rlpayload inject trace/ -r 0 -c 0 -s 3 --nan 5,17,99 --in-place\n"
             "  rlpayload inject trace/ -r 0 -c 0 -s 3 --set 0=1e30 --set 1=-inf -o trace-big/\n"
             "  rlpayload inject trace/ -r 2 -c 1 -s 4 --noise 1e-3 --seed 7 -o trace-noisy/\n"
             "  rlpayload inject trace/rank1 -c 2 -s 0 -t Recv -p 0 --from fixed.npy --in-place"));
  return {cmd, [=] {
            finishSelection(sel, &inj->selection);
            const InjectValues& v = *values;
            if (v.scaleOpt->count()) inj->scale = v.scale;
            if (v.noiseOpt->count()) inj->noise = v.noise;
            if (v.seedOpt->count()) inj->seed = v.seed;
            if (v.levelOpt->count()) inj->zstdLevel = v.level;
            inj->commandLine.assign(argv, argv + argc);
            inj->commandLine[0] = "rlpayload";
            return runInject(*inj);
          }};
}

Subcommand declareDiff(CLI::App& app) {
  auto diff = std::make_shared<DiffOptions>();
  auto rank = std::make_shared<int>(-1);
  auto* cmd = app.add_subcommand("diff", "Compare the payloads of two traces call by call; exit 1 if they differ");
  cmd->set_version_flag("--version", kVersion);
  cmd->add_option("trace_a", diff->a, "First trace (or rank directory)")->required();
  cmd->add_option("trace_b", diff->b, "Second trace (or rank directory)")->required();
  auto* rankOpt = cmd->add_option("-r,--rank", *rank, "Only this rank");
  cmd->add_flag("-j,--json", diff->json, "Machine-readable output (docs/rlpayload.md)");
  cmd->footer(
      footer("  rlpayload diff trace/ trace-nan/\n"
             "  rlpayload diff trace/ replay-trace/ --rank 3 --json"));
  return {cmd, [=] {
            if (rankOpt->count()) diff->rank = *rank;
            return runDiff(*diff);
          }};
}

Subcommand declareVerify(CLI::App& app) {
  auto verify = std::make_shared<VerifyOptions>();
  auto rank = std::make_shared<int>(-1);
  auto* cmd = app.add_subcommand("verify",
                                 "Check a trace: manifests, segments (truncation vs corruption), "
                                 "index, every payload's zstd frame and CRC-32, counters");
  cmd->set_version_flag("--version", kVersion);
  cmd->add_option("trace", verify->trace, "Trace directory (rank<R>/ below it) or one rank directory")->required();
  auto* rankOpt = cmd->add_option("-r,--rank", *rank, "Only this rank");
  cmd->add_flag("-j,--json", verify->json, "Machine-readable output (docs/rlpayload.md)");
  cmd->footer(
      footer("  rlpayload verify trace/\n"
             "  rlpayload verify trace/rank3 --json"));
  return {cmd, [=] {
            if (rankOpt->count()) verify->rank = *rank;
            return runVerify(*verify);
          }};
}

void describeApp(CLI::App& app) {
  app.set_version_flag("--version", kVersion);
  app.require_subcommand(1);
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "error: " + std::string(e.what()) + "\nRun with --help for more information.\n";
  });
  app.footer(
      footer("  rlpayload ls trace/\n"
             "  rlpayload show trace/ --rank 3 --comm 0 --seq 12\n"
             "  rlpayload export trace/ -r 3 -c 0 -s 12 -o grad.npy\n"
             "  rlpayload inject trace/ -r 3 -c 0 -s 12 --nan 5 -o trace-nan/\n"
             "  rlpayload diff trace/ trace-nan/\n"
             "  rlpayload verify trace/\n"
             "Run 'rlpayload <command> --help' for each command's options."));
}

// Runs a parsed subcommand. The commands return their failures as Status; an exception (a std::bad_alloc on a
// hostile size) is a failure too, said like every other.
int runParsed(const Subcommand& command) {
  try {
    return command.run();
  } catch (const std::exception& e) {
    return reportFailure(Status::internalError(e.what()));
  }
}

}  // namespace

int main(int argc, char** argv) {
  ranklens::tools::showControlCharactersOnStderr();
  CLI::App app{
      "rlpayload: list, show, export, edit, compare and verify the payloads (received bytes) of a RankLens "
      "trace."};
  describeApp(app);
  const std::vector<Subcommand> commands = {declareLs(app),     declareShow(app),
                                            declareExport(app), declareInject(app, argc, argv),
                                            declareDiff(app),   declareVerify(app)};
  if (!ranklens::tools::knownSubcommands(app, argc, argv)) return kExitUsage;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = ranklens::tools::reportParseError(app, e);  // prints help/version (0) or the parse error
    return code == 0 ? kExitOk : kExitUsage;
  }
  for (const auto& command : commands)
    if (command.cli->parsed()) return runParsed(command);
  return kExitUsage;
}
