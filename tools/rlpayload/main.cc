// SPDX-License-Identifier: Apache-2.0
// rlpayload: list, show, export, edit, compare and verify the payloads of a RankLens trace (docs/rlpayload.md).
// Exit codes: 0 success; 1 problems found, traces differ, or a runtime failure; 2 bad usage.
#include <CLI/CLI.hpp>
#include <iostream>
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "rlpayload: list, show, export, edit, compare and verify the payloads (received bytes) of a RankLens "
      "trace."};
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

  // ---- ls
  LsOptions ls;
  int lsRank = -1;
  uint64_t lsComm = 0;
  auto* lsCmd = app.add_subcommand("ls",
                                   "List the calls that have payloads: rank, communicator, op, peer, seq, "
                                   "datatype, count, bytes, compressed bytes, ratio");
  lsCmd->set_version_flag("--version", kVersion);
  lsCmd->add_option("trace", ls.trace, "Trace directory (rank<R>/ below it) or one rank directory")->required();
  auto* lsRankOpt = lsCmd->add_option("-r,--rank", lsRank, "Only this rank");
  auto* lsCommOpt = lsCmd->add_option("-c,--comm", lsComm, "Only this communicator");
  lsCmd->add_option("-t,--op", ls.op, "Only this operation (AllReduce, ..., Send, Recv)")
      ->transform(CLI::IsMember(opNames(), CLI::ignore_case));
  lsCmd->add_option("-s,--seq", ls.seqRange, "Only sequence numbers in A:B (inclusive; also A, A:, :B)");
  lsCmd->add_flag("-j,--json", ls.json, "Machine-readable output (docs/rlpayload.md)");
  lsCmd->footer(
      footer("  rlpayload ls trace/\n"
             "  rlpayload ls trace/ --rank 3 --op AllReduce --seq 10:20\n"
             "  rlpayload ls trace/rank3 --comm 1 --json | jq '.payloads[] | .bytes'"));

  // ---- show
  ShowOptions show;
  auto* showCmd = app.add_subcommand("show",
                                     "Statistics of one call's payload (min/max/mean/std over finite values, "
                                     "NaN/Inf counts and first positions) and its first values");
  showCmd->set_version_flag("--version", kVersion);
  auto showSel = addSelection(showCmd, &show.selection);
  showCmd->add_option("-n,--values", show.values, "How many leading values to print")->capture_default_str();
  showCmd->add_flag("-j,--json", show.json, "Machine-readable output (docs/rlpayload.md)");
  showCmd->footer(
      footer("  rlpayload show trace/ --rank 0 --comm 0 --seq 3\n"
             "  rlpayload show trace/rank1 -c 2 -s 0 --op Recv --peer 0 -n 32\n"
             "  rlpayload show trace/ -r 0 -c 0 -s 3 --json"));

  // ---- export
  ExportOptions exp;
  auto* expCmd = app.add_subcommand("export", "Write one call's payload to a .npy file or raw bytes");
  expCmd->set_version_flag("--version", kVersion);
  auto expSel = addSelection(expCmd, &exp.selection);
  expCmd->add_option("-o,--output", exp.output, "Output file (replaced if it exists)")->required();
  expCmd->add_option("-f,--format", exp.format, "npy (NumPy 1.0 header) or raw (little-endian elements only)")
      ->check(CLI::IsMember({"npy", "raw"}))
      ->capture_default_str();
  expCmd
      ->add_option("-a,--as", exp.as,
                   "Element type written: native (bfloat16/fp8 as raw bits '<u2'/'|u1'), float32 or float64")
      ->check(CLI::IsMember({"native", "float32", "float64"}))
      ->capture_default_str();
  expCmd->footer(
      footer("  rlpayload export trace/ -r 0 -c 0 -s 3 -o allreduce3.npy\n"
             "  rlpayload export trace/ -r 0 -c 1 -s 7 -o grads.npy --as float32   # bfloat16 -> float32\n"
             "  rlpayload export trace/rank1 -c 2 -s 0 -t Recv -p 0 -o recv.bin --format raw"));

  // ---- inject
  InjectOptions inj;
  double scale = 0, noise = 0;
  uint64_t seed = 0;
  int level = 0;
  auto* injCmd = app.add_subcommand("inject",
                                    "Change one call's payload (a NaN, an infinity, values, scaling, noise or "
                                    "a whole .npy) in a copy of the trace or in place; the original blob is "
                                    "kept and an Edit record says who changed what");
  injCmd->set_version_flag("--version", kVersion);
  auto injSel = addSelection(injCmd, &inj.selection);
  auto* action = injCmd->add_option_group("Action", "What to change (exactly one)");
  action->add_option("-N,--nan", inj.nan, "Set these elements to NaN (IDX[,IDX...]; float types only)")
      ->delimiter(',')
      ->allow_extra_args(false);
  action->add_option("-I,--inf", inj.inf, "Set these elements to +infinity (IDX[,IDX...]; not float8e4m3)")
      ->delimiter(',')
      ->allow_extra_args(false);
  action->add_option("-S,--set", inj.set, "Set one element: IDX=VALUE (repeatable; VALUE may be nan, inf, -inf)")
      ->allow_extra_args(false);
  auto* scaleOpt = action->add_option("-x,--scale", scale, "Multiply every element by F");
  auto* noiseOpt = action->add_option("-g,--noise", noise, "Add Gaussian noise with standard deviation STD");
  action->add_option("-F,--from", inj.from, "Replace the payload with this .npy file (same element count)")
      ->check(CLI::ExistingFile);
  action->require_option(1);
  auto* seedOpt = injCmd->add_option("-e,--seed", seed, "Seed for --noise (default: random, recorded in the Edit)");
  auto* target = injCmd->add_option_group("Target", "Where the edit goes (exactly one)");
  target->add_option("-o,--output", inj.output, "Copy the trace to this new directory and edit the copy");
  target->add_flag("-i,--in-place", inj.inPlace, "Edit TRACE itself (append-only: the original blob stays)");
  target->require_option(1);
  auto* levelOpt = injCmd->add_option("-z,--zstd-level", level, "zstd level of the new blob (default: the original's)")
                       ->check(CLI::Range(-7, 22));
  injCmd->footer(
      footer("  rlpayload inject trace/ -r 0 -c 0 -s 3 --nan 5 -o trace-nan/\n"
             "  rlpayload inject trace/ -r 0 -c 0 -s 3 --nan 5,17,99 --in-place\n"
             "  rlpayload inject trace/ -r 0 -c 0 -s 3 --set 0=1e30 --set 1=-inf -o trace-big/\n"
             "  rlpayload inject trace/ -r 2 -c 1 -s 4 --noise 1e-3 --seed 7 -o trace-noisy/\n"
             "  rlpayload inject trace/rank1 -c 2 -s 0 -t Recv -p 0 --from fixed.npy --in-place"));

  // ---- diff
  DiffOptions diff;
  int diffRank = -1;
  auto* diffCmd = app.add_subcommand("diff", "Compare the payloads of two traces call by call; exit 1 if they differ");
  diffCmd->set_version_flag("--version", kVersion);
  diffCmd->add_option("trace_a", diff.a, "First trace (or rank directory)")->required();
  diffCmd->add_option("trace_b", diff.b, "Second trace (or rank directory)")->required();
  auto* diffRankOpt = diffCmd->add_option("-r,--rank", diffRank, "Only this rank");
  diffCmd->add_flag("-j,--json", diff.json, "Machine-readable output (docs/rlpayload.md)");
  diffCmd->footer(
      footer("  rlpayload diff trace/ trace-nan/\n"
             "  rlpayload diff trace/ replay-trace/ --rank 3 --json"));

  // ---- verify
  VerifyOptions verify;
  int verifyRankNumber = -1;
  auto* verifyCmd = app.add_subcommand("verify",
                                       "Check a trace: manifests, segments (truncation vs corruption), "
                                       "index, every payload's zstd frame and CRC-32, counters");
  verifyCmd->set_version_flag("--version", kVersion);
  verifyCmd->add_option("trace", verify.trace, "Trace directory (rank<R>/ below it) or one rank directory")->required();
  auto* verifyRankOpt = verifyCmd->add_option("-r,--rank", verifyRankNumber, "Only this rank");
  verifyCmd->add_flag("-j,--json", verify.json, "Machine-readable output (docs/rlpayload.md)");
  verifyCmd->footer(
      footer("  rlpayload verify trace/\n"
             "  rlpayload verify trace/rank3 --json"));

  if (!ranklens::tools::knownSubcommands(app, argc, argv)) return kExitUsage;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = ranklens::tools::reportParseError(app, e);  // prints help/version (0) or the parse error
    return code == 0 ? kExitOk : kExitUsage;
  }

  try {
    if (lsCmd->parsed()) {
      if (lsRankOpt->count()) ls.rank = lsRank;
      if (lsCommOpt->count()) ls.comm = lsComm;
      return runLs(ls);
    }
    if (showCmd->parsed()) {
      finishSelection(showSel, &show.selection);
      return runShow(show);
    }
    if (expCmd->parsed()) {
      finishSelection(expSel, &exp.selection);
      return runExport(exp);
    }
    if (injCmd->parsed()) {
      finishSelection(injSel, &inj.selection);
      if (scaleOpt->count()) inj.scale = scale;
      if (noiseOpt->count()) inj.noise = noise;
      if (seedOpt->count()) inj.seed = seed;
      if (levelOpt->count()) inj.zstdLevel = level;
      inj.commandLine.assign(argv, argv + argc);
      inj.commandLine[0] = "rlpayload";
      return runInject(inj);
    }
    if (diffCmd->parsed()) {
      if (diffRankOpt->count()) diff.rank = diffRank;
      return runDiff(diff);
    }
    if (verifyCmd->parsed()) {
      if (verifyRankOpt->count()) verify.rank = verifyRankNumber;
      return runVerify(verify);
    }
  } catch (const UsageError& e) {
    std::cerr << "error: " << e.message << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitFailure;
  }
  return kExitUsage;
}
