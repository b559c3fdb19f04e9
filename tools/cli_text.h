// SPDX-License-Identifier: Apache-2.0
// Command-line text shared by ranklens and rlpayload: a value from the user or a file shown in an error line (cut,
// control characters escaped, so that an 8 MiB argument or an escape sequence cannot flood or rewrite a terminal),
// and the unknown-subcommand check that CLI11 answers only with "A subcommand is required".
#pragma once

#include <CLI/CLI.hpp>

#include "ranklens/shown_value.h"

#include <cstdio>
#include <iostream>
#include <streambuf>
#include <string>
#include <vector>

namespace ranklens::tools {

using ranklens::shownValue;

// The tools' std::cerr passes through this: every control character but \n, \t and \r is shown as \xNN. Messages
// quote paths and values from the user and from trace files in many places; this is the one place they all pass, so
// that an escape sequence in a file name cannot rewrite the terminal. (The child a command runs writes to the real
// stderr, untouched.)
class ShownStreambuf : public std::streambuf {
 public:
  explicit ShownStreambuf(std::streambuf* to) : to_(to) {}

 protected:
  int overflow(int c) override {
    if (c == EOF) return 0;
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && u != '\n' && u != '\t' && u != '\r') || u == 0x7f) {
      char hex[8];
      snprintf(hex, sizeof hex, "\\x%02x", u);
      return to_->sputn(hex, 4) == 4 ? c : EOF;
    }
    return to_->sputc(static_cast<char>(c));
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    for (std::streamsize i = 0; i < n; ++i)
      if (overflow(static_cast<unsigned char>(s[i])) == EOF) return i;
    return n;
  }
  int sync() override { return to_->pubsync(); }

 private:
  std::streambuf* to_;
};

// Installs ShownStreambuf on std::cerr for the rest of the process (a tool's main calls it first).
inline void showControlCharactersOnStderr() {
  static ShownStreambuf shown(std::cerr.rdbuf());
  std::cerr.rdbuf(&shown);
}

// An error message that may quote values (CLI11's do): every word (a run without spaces) cut and escaped as
// shownValue does, so that the message around a huge or hostile value stays readable.
inline std::string shownMessage(const std::string& text, size_t wordLimit = 200) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t end = text.find(' ', i);
    const size_t stop = end == std::string::npos ? text.size() : end;
    out += shownValue(text.substr(i, stop - i), wordLimit);
    if (stop < text.size()) out += ' ';
    i = stop + 1;
  }
  return out;
}

// What CLI11's App::exit does, with the message through shownMessage; the exit code: 0 for --help and --version.
inline int reportParseError(CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == 0) return app.exit(e);
  std::cerr << shownMessage(e.what()) << "\nRun with --help for more information.\n";
  return e.get_exit_code();
}

// The first word after the options of `app` (argv[first...]) when it names no subcommand of it: says so with the
// list and returns false. A word that names one is followed into that subcommand's own subcommands. `command`: how
// `app` is called (argv[0]'s name, then the subcommands so far).
inline bool knownSubcommands(const CLI::App& app, int argc, char** argv, int first = 1, std::string command = "") {
  if (command.empty()) {
    command = argc > 0 ? argv[0] : "";
    command = command.substr(command.find_last_of('/') + 1);
  }
  // Option groups are Apps among the subcommands too; only real subcommands count.
  std::vector<const CLI::App*> subs;
  for (const CLI::App* sub : app.get_subcommands({}))
    if (dynamic_cast<const CLI::Option_group*>(sub) == nullptr && !sub->get_name().empty()) subs.push_back(sub);
  if (subs.empty()) return true;
  for (int i = first; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") return true;
    if (!word.empty() && word[0] == '-') return true;  // options first: CLI11 judges those
    for (const CLI::App* sub : subs)
      if (sub->check_name(word)) return knownSubcommands(*sub, argc, argv, i + 1, command + " " + sub->get_name());
    std::string names;
    for (const CLI::App* sub : subs) names += (names.empty() ? "" : ", ") + sub->get_name();
    std::cerr << "error: unknown subcommand '" << shownValue(word) << "' of " << command
              << "; the subcommands are: " << names << " (" << command << " --help says what each does)\n";
    return false;
  }
  return true;
}

}  // namespace ranklens::tools
