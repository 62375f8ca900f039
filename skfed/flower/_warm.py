"""A SuperExec whose ClientApp processes start with their imports done.

A SuperNode of Flower 1.42 has every message it receives answered by a
new ``flwr-clientapp`` process, which imports Flower's ClientApp runtime
and then the app's module (skfed, scikit-learn, SciPy) before the step
runs: seconds per message, most of a deployed round trip. This SuperExec
is Flower's own (``flower-superexec``: the same polling loop, task tokens
and ``flwr-clientapp`` code), except that each ClientApp process is forked
from a server process that imported those modules once
(``multiprocessing``'s fork server, started before any connection is
made). Each message still gets a process of its own, so nothing of one
message's process survives into the next; only the imports are done.

Run one beside each SuperNode started with ``--isolation process``, on the
SuperNode's Runtime API address (its ``--host`` and ``--port``)::

    flower-supernode --insecure --isolation process --host 127.0.0.1 \\
        --port 9101 ...
    python -m skfed.flower.superexec --insecure \\
        --runtime-api-address 127.0.0.1:9101

It relies on Flower's SuperExec internals (``run_superexec`` and its
executor interface, as in Flower 1.42) and on a fork server (not on
Windows). Without either it says so and runs Flower's own
``flower-superexec`` with the same arguments instead, which runs the same
ClientApps, each importing its modules again.
"""

import argparse
import multiprocessing
import multiprocessing.forkserver
import os
import shutil
import sys
import warnings

__all__ = ["fork_server", "main", "run_clientapp"]

# What the fork server imports once, so that every ClientApp process
# starts with it: this module (the processes' entry point), Flower's
# ClientApp runtime, and skfed with what it imports (scikit-learn, SciPy,
# joblib).
PRELOAD = ("skfed.flower._warm", "flwr.supernode.cli", "skfed", "skfed.flower")


def run_clientapp(argv):
    """A forked ClientApp process: ``flwr-clientapp`` with ``argv``."""
    from flwr.supernode.cli import flwr_clientapp

    sys.argv = list(argv)
    flwr_clientapp()


def _flower_internals():
    """What this SuperExec uses of Flower, or None on a release that has
    moved any of it."""
    try:
        from flwr.supercore.constant import TASK_TYPE_TO_COMMAND, TaskType
        from flwr.supercore.superexec import run_superexec as loop
        from flwr.supercore.superexec.executor.subprocess_executor import (
            SubprocessExecutor,
        )
        from flwr.supercore.superexec.executor.types import LaunchResult
    except ImportError:
        return None
    if not (hasattr(loop, "get_executor") and hasattr(loop, "run_superexec")):
        return None
    if not hasattr(TaskType, "CLIENT_APP"):
        return None
    return {
        "command": TASK_TYPE_TO_COMMAND[TaskType.CLIENT_APP],
        "clientapp": TaskType.CLIENT_APP,
        "loop": loop,
        "subprocess_executor": SubprocessExecutor,
        "accepted": LaunchResult.accepted,
    }


def clientapp_argv(command, spec):
    """The ``flwr-clientapp`` command line Flower's subprocess executor
    builds for the execution spec ``spec``."""
    argv = [command, "--runtime-api-address", spec.runtime_api_address]
    argv += ["--token", spec.token]
    if spec.insecure:
        argv.append("--insecure")
    elif spec.root_certificates_path is not None:
        argv += ["--root-certificates", spec.root_certificates_path]
    if spec.parent_pid is not None:
        argv += ["--parent-pid", str(spec.parent_pid)]
    if spec.runtime_dependency_install:
        argv.append("--allow-runtime-dependency-installation")
    return argv


def forking_executor(internals, context):
    """Flower's subprocess executor class, with its ClientApps forked from
    ``context``'s fork server (other task types as Flower starts them)."""

    class ForkingExecutor(internals["subprocess_executor"]):
        def __init__(self):
            super().__init__()
            self._running = []

        def launch(self, spec):
            if spec.task_type != internals["clientapp"]:
                return super().launch(spec)
            argv = clientapp_argv(internals["command"], spec)
            process = context.Process(target=run_clientapp, args=(argv,))
            process.start()
            self._running.append(process)
            return internals["accepted"]()

        def reconcile(self):
            super().reconcile()
            # Forget the ClientApp processes that have ended.
            self._running = [p for p in self._running if p.is_alive()]

    return ForkingExecutor


def fork_server(preload=()):
    """The ``forkserver`` context whose server imports ``PRELOAD`` and
    ``preload``, started now: its imports (seconds) run while the SuperExec
    connects, rather than in the first message's start."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([*PRELOAD, *preload])
    multiprocessing.forkserver.ensure_running()
    return context


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m skfed.flower.superexec",
        description="Flower's SuperExec for one SuperNode started with "
        "--isolation process, its ClientApp processes forked from one that "
        "has imported Flower and skfed.",
    )
    parser.add_argument(
        "--runtime-api-address",
        required=True,
        help="the SuperNode's Runtime API address (its --host and --port), "
        "e.g. 127.0.0.1:9101",
    )
    parser.add_argument(
        "--insecure", action="store_true", help="connect to it without TLS"
    )
    parser.add_argument(
        "--root-certificates",
        default=None,
        help="PEM root certificates to verify its TLS certificate",
    )
    parser.add_argument(
        "--preload",
        nargs="*",
        default=[],
        metavar="MODULE",
        help="more modules for the ClientApp processes to start with (the "
        "app's own heavy imports)",
    )
    return parser


def main(argv=None):
    """``python -m skfed.flower.superexec`` (see the module)."""
    args = _parser().parse_args(argv)
    internals = _flower_internals()
    if "forkserver" not in multiprocessing.get_all_start_methods():
        why = "this platform has no fork server"
    elif internals is None:
        why = "this Flower release has no SuperExec executor interface that skfed knows"
    else:
        why = None
    if why is not None:
        warnings.warn(
            f"{why}: running Flower's own flower-superexec instead (each "
            "ClientApp process imports its modules again)",
            RuntimeWarning,
            stacklevel=2,
        )
        command = [shutil.which("flower-superexec") or "flower-superexec"]
        command += ["--runtime-api-address", args.runtime_api_address]
        if args.insecure:
            command.append("--insecure")
        elif args.root_certificates is not None:
            command += ["--root-certificates", args.root_certificates]
        # Replaces this process; returns only where it is stubbed.
        os.execvp(command[0], command)
        return
    executor = forking_executor(internals, fork_server(args.preload))
    # Flower's loop builds its executor through this module-level name.
    internals["loop"].get_executor = lambda *_, **__: executor()
    internals["loop"].run_superexec(
        runtime_api_address=args.runtime_api_address,
        insecure=args.insecure,
        root_certificates_path=args.root_certificates,
    )
