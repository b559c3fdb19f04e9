// SPDX-License-Identifier: Apache-2.0
// What a process of a --share-gpu job sees, and what a child forked from it (without exec) sees: one line each,
// "<who> pid=<pid> hostid=<NCCL_HOSTID> lr=<LOCAL_RANK> orig=<RANKLENS_SHARE_GPU_LOCAL_RANK> dev=<NCCL_TESTS_DEVICE>".
// NCCL reads NCCL_HOSTID with getenv, so this does too.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace {
const char* env(const char* name) {
  const char* v = getenv(name);
  return v ? v : "-";
}
void say(const char* who) {
  printf("%s pid=%d hostid=%s lr=%s orig=%s dev=%s\n", who, static_cast<int>(getpid()), env("NCCL_HOSTID"),
         env("LOCAL_RANK"), env("RANKLENS_SHARE_GPU_LOCAL_RANK"), env("NCCL_TESTS_DEVICE"));
  fflush(stdout);
}
}  // namespace

int main() {
  say("parent");
  const pid_t child = fork();
  if (child == 0) {
    say("child");
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
