# SPDX-License-Identifier: Apache-2.0
"""Is the RankLens libnccl.so.2 the NCCL that torch uses? Then, optionally, run a script.

`python3 bench/preload_check.py LIB [script.py args...]`, under LD_PRELOAD=LIB (as `ranklens replay` sets it):

1. imports torch (libtorch_cuda then binds to the preloaded RankLens libnccl.so.2);
2. checks /proc/self/maps and the symbol binding (`preload_report`), prints the result (a human summary and one
   `PRELOAD_CHECK {json}` line) and exits 3 if LIB is not the one torch uses; with no script it stops there;
3. runs the script with runpy.run_path(script, run_name="__main__") after setting sys.argv = [script, *args] and
   sys.path[0] to the script's directory, as `python3 script.py` would. The script's exit status (SystemExit)
   becomes this process's.

Importable (no side effects), so that bench/structure_replay_torch.py reuses `preload_report`.
"""

from __future__ import annotations

import ctypes
import json
import os
import runpy
import sys

class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def _fail(msg: str, code: int = 2) -> None:
    print(f"[preload-check] error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def mapped_files(name_prefix: str) -> list[str]:
    """Distinct files in /proc/self/maps whose base name starts with name_prefix, in map order."""
    out: list[str] = []
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.rstrip("\n").split(None, 5)
            if len(parts) < 6:
                continue
            path = parts[5]
            if path.endswith(" (deleted)"):
                path = path[: -len(" (deleted)")]
            if os.path.basename(path).startswith(name_prefix) and path not in out:
                out.append(path)
    return out


def _dladdr_file(addr: int) -> str | None:
    for lib in (None, "libdl.so.2"):
        try:
            dladdr = ctypes.CDLL(lib).dladdr
            break
        except (OSError, AttributeError):
            continue
    else:
        return None
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    dladdr.restype = ctypes.c_int
    info = _DlInfo()
    if dladdr(ctypes.c_void_p(addr), ctypes.byref(info)) == 0 or not info.dli_fname:
        return None
    return os.fsdecode(info.dli_fname)


def _nccl_get_version(fn) -> int | None:
    fn.argtypes = [ctypes.POINTER(ctypes.c_int)]
    fn.restype = ctypes.c_int
    ver = ctypes.c_int(-1)
    rc = fn(ctypes.byref(ver))
    return ver.value if rc == 0 else None


def _noload(path: str):
    """Handle of an already loaded object, without loading anything new."""
    return ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)


def preload_report(lib: str | None) -> dict:
    """Which libnccl is mapped and which one NCCL symbols resolve to. Call after `import torch`.

    'bound_to' is the file that defines ncclGetVersion as libtorch_cuda sees it: first the global
    lookup scope (executable, LD_PRELOAD, RTLD_GLOBAL objects), which the dynamic linker searches
    first when it binds libtorch_cuda's NCCL imports, else libtorch_cuda's own dependency scope.
    'runtime_version' is what that ncclGetVersion returns. torch.cuda.nccl.version() is reported
    too, but it is the version torch was COMPILED against, not a call into the loaded library.
    """
    import torch

    report: dict = {"lib": lib, "lib_realpath": os.path.realpath(lib) if lib else None,
                    "torch": torch.__version__, "errors": []}
    mapped = mapped_files("libnccl")
    report["mapped"] = mapped
    want = report["lib_realpath"]
    report["lib_mapped"] = bool(want) and any(os.path.realpath(p) == want for p in mapped)

    try:
        report["torch_cuda_nccl_version"] = list(torch.cuda.nccl.version())
    except Exception as e:  # CPU-only builds have no NCCL
        report["torch_cuda_nccl_version"] = None
        report["errors"].append(f"torch.cuda.nccl.version(): {type(e).__name__}: {e}")

    # Per mapped file: what its own ncclGetVersion says.
    per_file = {}
    for path in mapped:
        try:
            per_file[path] = _nccl_get_version(_noload(path).ncclGetVersion)
        except (OSError, AttributeError) as e:
            per_file[path] = None
            report["errors"].append(f"{path}: ncclGetVersion: {e}")
    report["mapped_versions"] = per_file

    # The binding libtorch_cuda gets.
    fn, scope = None, None
    try:
        fn, scope = ctypes.CDLL(None).ncclGetVersion, "global"
    except AttributeError:
        torch_cuda = [p for p in mapped_files("libtorch_cuda") if p.endswith(".so")]
        if torch_cuda:
            try:
                fn, scope = _noload(torch_cuda[0]).ncclGetVersion, "libtorch_cuda"
            except (OSError, AttributeError) as e:
                report["errors"].append(f"ncclGetVersion from {torch_cuda[0]}: {e}")
    report["bound_scope"] = scope
    report["bound_to"] = None
    report["runtime_version"] = None
    if fn is not None:
        addr = ctypes.cast(fn, ctypes.c_void_p).value
        report["bound_to"] = _dladdr_file(addr) if addr else None
        report["runtime_version"] = _nccl_get_version(fn)
    bound_real = os.path.realpath(report["bound_to"]) if report["bound_to"] else None
    report["lib_bound"] = bool(want) and bound_real == want
    report["ok"] = report["lib_mapped"] and report["lib_bound"]
    return report


def print_report(r: dict) -> None:
    p = lambda s: print(f"[preload-check] {s}", flush=True)  # noqa: E731
    p(f"torch {r['torch']}; libnccl files mapped in /proc/self/maps:")
    for path in r["mapped"]:
        mine = "  <- --lib" if r["lib_realpath"] and os.path.realpath(path) == r["lib_realpath"] else ""
        p(f"  {path} (ncclGetVersion {r['mapped_versions'].get(path)}){mine}")
    if not r["mapped"]:
        p("  (none)")
    p(f"NCCL symbols bind to: {r['bound_to']} (scope: {r['bound_scope']}), ncclGetVersion -> {r['runtime_version']}")
    p(f"torch.cuda.nccl.version() = {r['torch_cuda_nccl_version']} (compile-time version of the torch build)")
    for e in r["errors"]:
        p(f"note: {e}")
    p("preload check: " + ("OK" if r["ok"] else "FAILED"))
    print("PRELOAD_CHECK " + json.dumps(r), flush=True)


def preload_failure_hint(r: dict) -> str:
    if not r["lib_mapped"]:
        return (f"{r['lib']} is not mapped after `import torch`: LD_PRELOAD={os.environ.get('LD_PRELOAD', '')!r} "
                "did not take effect. Check that the file is a shared library with SONAME libnccl.so.2 "
                "(readelf -d), that its dependencies resolve (ldd), and that nothing between the launcher and "
                "Python drops LD_PRELOAD (setuid wrappers, sudo, env -i)")
    return (f"{r['lib']} is mapped, but libtorch_cuda's NCCL symbols bind to {r['bound_to']}. Preload it with "
            "LD_PRELOAD (ranklens replay does) rather than LD_LIBRARY_PATH, and make sure it exports ncclGetVersion")


def _set_path0(directory: str) -> None:
    """Make `directory` sys.path[0], where `python3 script.py` puts the script's directory."""
    if sys.flags.safe_path:  # -P / PYTHONSAFEPATH: this file's directory was not prepended either
        sys.path.insert(0, directory)
    else:
        sys.path[0] = directory


def main() -> None:
    if len(sys.argv) < 2:
        _fail("usage: preload_check.py LIB [script.py args...] (run under LD_PRELOAD=LIB)")
    lib, argv = sys.argv[1], sys.argv[2:]

    import torch  # noqa: F401  (binds libtorch_cuda to the preloaded libnccl.so.2)

    report = preload_report(lib)
    print_report(report)
    if not report["ok"]:
        _fail(preload_failure_hint(report), code=3)
    if not argv:
        sys.exit(0)
    script, args = argv[0], argv[1:]
    if not os.path.isfile(script):
        _fail(f"script {script}: no such file")
    sys.argv = [script, *args]
    _set_path0(os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
