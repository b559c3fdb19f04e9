# SPDX-License-Identifier: Apache-2.0
"""The Python adapter (tools/python/ranklens/adapter.py, installed by tools/python/site/sitecustomize.py): it must
not import torch by itself, must host a store that does not wait for peers once torch.distributed is imported,
must count optimizer steps, and must keep the environment's own sitecustomize working."""

import os
import socket
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PY_DIR = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tools", "python")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(code, extra_path=(), **env):
    e = dict(os.environ)
    e.update({"PYTHONPATH": os.pathsep.join([os.path.join(PY_DIR, "site"), PY_DIR, *extra_path]),
              "RANKLENS_ADAPTER": "1", **env})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True, text=True,
                          timeout=120)


def test_adapter_is_installed_without_importing_torch():
    r = run("""
        import sys
        from ranklens import adapter
        print("INSTALLED", adapter.state()["installed"], "TORCH", "torch" in sys.modules)
    """)
    assert r.returncode == 0, r.stderr
    assert "INSTALLED True TORCH False" in r.stdout


def test_the_shadowed_sitecustomize_still_runs(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("print('SHADOWED SITECUSTOMIZE RAN')\n")
    r = run("print('MAIN')", extra_path=[str(tmp_path)])
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["SHADOWED SITECUSTOMIZE RAN", "MAIN"]


def test_store_for_a_lone_rank_and_optimizer_step_marks():
    pytest.importorskip("torch")
    port = free_port()
    r = run("""
        import datetime, os
        import torch, torch.distributed as dist
        from ranklens import adapter
        # A second client: it would time out if the adapter's server waited for the world's other rank.
        s = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=datetime.timedelta(seconds=10))
        s.set("k", "v")
        print("STORE", s.get("k").decode())
        p = torch.nn.Parameter(torch.zeros(2))
        opt = torch.optim.SGD([p], lr=0.1)
        for _ in range(3):
            p.grad = torch.ones(2)
            opt.step()
        print("STEPS", adapter.state()["optimizer_steps"], "ERRORS", adapter.state()["errors"])
    """, RANKLENS_ADAPTER_STORE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2")
    assert r.returncode == 0, r.stderr
    assert "STORE v" in r.stdout
    assert "STEPS 3 ERRORS []" in r.stdout


def test_a_taken_port_is_a_warning_not_a_crash():
    pytest.importorskip("torch")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = run("""
            import torch.distributed as dist
            from ranklens import adapter
            print("ERRORS", len(adapter.state()["errors"]))
        """, RANKLENS_ADAPTER_STORE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2")
    assert r.returncode == 0, r.stderr
    assert "ERRORS 1" in r.stdout
    assert "cannot start the rank's store" in r.stderr


def test_a_gloo_group_in_replay_fails_at_once_with_the_reason():
    pytest.importorskip("torch")
    r = run("""
        import torch.distributed as dist
        from ranklens import adapter
        try:
            dist.init_process_group("gloo")
        except adapter.GlooInReplayError as e:
            print("REFUSED", e)
    """, RANKLENS_ADAPTER_STORE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2", RANK="1",
        TORCHELASTIC_USE_AGENT_STORE="True")
    assert r.returncode == 0, r.stderr
    assert "REFUSED RankLens replay: backend 'gloo' needs Gloo" in r.stdout


def test_forward_and_backward_marks_once_per_step_when_asked():
    pytest.importorskip("torch")
    code = """
        import torch
        from ranklens import adapter
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            model(torch.ones(2, 4)).sum().backward()
            opt.step()
        st = adapter.state()
        print("MARKS", st["forward_marks"], st["backward_marks"], st["optimizer_steps"], st["errors"])
    """
    r = run(code, RANKLENS_ADAPTER_MARKS="all")
    assert r.returncode == 0, r.stderr
    assert "MARKS 3 3 3 []" in r.stdout  # three modules per forward, still one mark per step
    r = run(code)
    assert r.returncode == 0, r.stderr
    assert "MARKS 0 0 3 []" in r.stdout  # off by default


def _fake_deepspeed(root):
    """deepspeed.runtime.zero.{utils,partition_parameters} as far as the adapter's ZeRO-3 hook sees them."""
    zero = root / "deepspeed" / "runtime" / "zero"
    zero.mkdir(parents=True)
    for d in (root / "deepspeed", root / "deepspeed" / "runtime", zero):
        (d / "__init__.py").write_text("")
    (zero / "utils.py").write_text(textwrap.dedent("""
        BROADCASTS = []
        def assert_lst_len_same_as_other_ranks(lst):
            BROADCASTS.append("len")  # rank 0's length; this rank sent -1
            raise RuntimeError("Detected a disagreement on list length between rank0 and rank37")
        def assert_ints_same_as_other_ranks(ints):
            if ints == "other":
                raise RuntimeError("some other failure")
            assert_lst_len_same_as_other_ranks(ints)
            BROADCASTS.append("ints")
            raise RuntimeError("Detected a disagreement on list contents between rank0 and rank37")
    """))
    (zero / "partition_parameters.py").write_text(
        "from deepspeed.runtime.zero.utils import assert_ints_same_as_other_ranks\n")


def test_deepspeed_rank0_checks_are_waived_in_structure_replay_only(tmp_path):
    _fake_deepspeed(tmp_path)
    code = """
        from deepspeed.runtime.zero import partition_parameters, utils
        from ranklens import adapter
        partition_parameters.assert_ints_same_as_other_ranks([1, 2, 3])
        print("BROADCASTS", utils.BROADCASTS, "WAIVED", adapter.state()["deepspeed_checks_waived"])
        try:
            partition_parameters.assert_ints_same_as_other_ranks("other")
        except RuntimeError as e:
            print("PASSED ON", e)
    """
    r = run(code, extra_path=[str(tmp_path)], RANKLENS_MODE="replay", RANKLENS_FIDELITY="structure")
    assert r.returncode == 0, r.stderr
    assert "BROADCASTS ['len', 'ints'] WAIVED 2" in r.stdout  # both broadcasts still issued
    assert "PASSED ON some other failure" in r.stdout
    assert r.stderr.count("check against rank 0's values is waived") == 1
    for fidelity in ("timing", "value"):  # the recorded values arrive: the check stays real
        r = run(code, extra_path=[str(tmp_path)], RANKLENS_MODE="replay", RANKLENS_FIDELITY=fidelity)
        assert r.returncode != 0 and "Detected a disagreement on list length" in r.stderr, r.stderr
