# SPDX-License-Identifier: Apache-2.0
# Put on PYTHONPATH by `ranklens replay` / `ranklens record`: installs RankLens's adapter (tools/python/ranklens)
# when RANKLENS_ADAPTER=1, then runs the sitecustomize this file shadows, if any, so the environment's own still
# applies.
import importlib.util
import os
import sys


def _ranklens_install() -> None:
    if os.environ.get("RANKLENS_ADAPTER") != "1":
        return
    try:
        from ranklens import adapter
        adapter.install()
    except Exception as e:  # the user's program must start anyway
        print(f"[ranklens] warning: adapter not installed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)


def _run_shadowed() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        candidate = os.path.join(entry or os.getcwd(), "sitecustomize.py")
        if os.path.dirname(os.path.abspath(candidate)) == here or not os.path.isfile(candidate):
            continue
        spec = importlib.util.spec_from_file_location("_ranklens_shadowed_sitecustomize", candidate)
        if spec and spec.loader:
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
        return


_ranklens_install()
_run_shadowed()
