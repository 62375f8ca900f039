"""skfed's SuperExec (``python -m skfed.flower.superexec``): Flower's own
loop with its ClientApp processes forked from a process that has imported
Flower and skfed. The deployment test runs it for real; these check what
it takes from Flower and what it does with it."""

import multiprocessing
import subprocess
import sys

import pytest

pytest.importorskip("flwr")

from flwr.supercore.constant import TaskType  # noqa: E402
from flwr.supercore.superexec.executor.subprocess_executor import (  # noqa: E402
    SubprocessExecutor,
)
from flwr.supercore.superexec.executor.types import ExecutionSpec  # noqa: E402

from skfed.flower import _warm  # noqa: E402


def spec(task_type=TaskType.CLIENT_APP, **changes):
    fields = {
        "task_type": task_type,
        "runtime_api_address": "127.0.0.1:9101",
        "token": "token-1",
        "insecure": True,
        "root_certificates_path": None,
        "runtime_dependency_install": False,
        "parent_pid": 4321,
        "suppress_output": False,
        "task_id": 7,
    }
    fields.update(changes)
    return ExecutionSpec(**fields)


def test_the_installed_flower_has_what_it_uses():
    # Else it would fall back to Flower's own SuperExec without telling
    # the test suite.
    internals = _warm._flower_internals()
    assert internals is not None
    assert internals["command"] == "flwr-clientapp"


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"insecure": False, "root_certificates_path": "/certs/ca.pem"},
        {"parent_pid": None, "runtime_dependency_install": True},
    ],
)
def test_clientapp_command_line_is_flowers(monkeypatch, changes):
    # The forked ClientApp gets the command line Flower's own executor
    # would start flwr-clientapp with.
    started = []
    monkeypatch.setattr(
        "flwr.supercore.superexec.executor.subprocess_executor.subprocess.Popen",
        lambda args, **kwargs: started.append(args),
    )
    the_spec = spec(**changes)
    SubprocessExecutor().launch(the_spec)
    assert _warm.clientapp_argv("flwr-clientapp", the_spec) == started[0]


class _Context:
    """Records the processes a fork server would start."""

    def __init__(self):
        self.started = []

    def Process(self, target, args):  # noqa: N802 - multiprocessing's name
        context = self

        class _Process:
            def start(self):
                context.started.append((target, args))

            def is_alive(self):
                return False

        return _Process()


def test_clientapps_are_forked_and_other_tasks_started_as_flower_does(monkeypatch):
    context = _Context()
    executor = _warm.forking_executor(_warm._flower_internals(), context)()
    result = executor.launch(spec())
    assert result.status == "accepted"
    ((target, (argv,)),) = context.started
    assert target is _warm.run_clientapp
    assert argv[0] == "flwr-clientapp" and "token-1" in argv
    executor.reconcile()
    assert executor._running == []
    # A ServerApp task (not a node's) goes to Flower's own executor.
    started = []
    monkeypatch.setattr(
        "flwr.supercore.superexec.executor.subprocess_executor.subprocess.Popen",
        lambda args, **kwargs: started.append(args),
    )
    executor.launch(spec(TaskType.SERVER_APP))
    assert started and started[0][0] == "flwr-serverapp"
    assert len(context.started) == 1


def test_a_forked_process_runs_flowers_clientapp(monkeypatch, tmp_path):
    # run_clientapp is flwr-clientapp's own entry point with the argv.
    seen = []
    monkeypatch.setattr(
        "flwr.supernode.cli.flwr_clientapp", lambda: seen.append(list(sys.argv))
    )
    argv = ["flwr-clientapp", "--runtime-api-address", "127.0.0.1:1", "--token", "t"]
    _warm.run_clientapp(argv)
    assert seen == [argv]


def test_main_runs_flowers_loop_with_the_forking_executor(monkeypatch):
    calls = {}
    internals = _warm._flower_internals()
    loop = internals["loop"]

    def run_superexec(**kwargs):
        calls["kwargs"] = kwargs
        calls["executor"] = loop.get_executor("subprocess")

    monkeypatch.setattr(loop, "run_superexec", run_superexec)
    monkeypatch.setattr(loop, "get_executor", loop.get_executor)
    preloaded = []
    monkeypatch.setattr(
        multiprocessing.context.ForkServerContext,
        "set_forkserver_preload",
        lambda self, names: preloaded.extend(names),
    )
    monkeypatch.setattr(multiprocessing.forkserver, "ensure_running", lambda: None)
    _warm.main(
        ["--insecure", "--runtime-api-address", "127.0.0.1:9", "--preload", "json"]
    )
    assert calls["kwargs"] == {
        "runtime_api_address": "127.0.0.1:9",
        "insecure": True,
        "root_certificates_path": None,
    }
    assert isinstance(calls["executor"], SubprocessExecutor)
    assert type(calls["executor"]).__name__ == "ForkingExecutor"
    assert "skfed" in preloaded and "json" in preloaded


def test_without_flowers_internals_it_runs_flowers_superexec(monkeypatch):
    monkeypatch.setattr(_warm, "_flower_internals", lambda: None)
    executed = []
    monkeypatch.setattr(_warm.os, "execvp", lambda path, argv: executed.append(argv))
    with pytest.warns(RuntimeWarning, match="flower-superexec instead"):
        _warm.main(["--insecure", "--runtime-api-address", "127.0.0.1:9"])
    (argv,) = executed
    assert argv[0].endswith("flower-superexec")
    assert argv[1:] == ["--runtime-api-address", "127.0.0.1:9", "--insecure"]


def test_the_command_line_starts():
    out = subprocess.run(
        [sys.executable, "-m", "skfed.flower.superexec", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--runtime-api-address" in out.stdout


def test_without_a_fork_server_it_runs_flowers_superexec(monkeypatch):
    # Windows has no fork server: Flower's own SuperExec, said so.
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    executed = []
    monkeypatch.setattr(_warm.os, "execvp", lambda path, argv: executed.append(argv))
    with pytest.warns(RuntimeWarning, match="no fork server"):
        _warm.main(["--runtime-api-address", "127.0.0.1:9"])
    assert executed[0][1:] == ["--runtime-api-address", "127.0.0.1:9"]
