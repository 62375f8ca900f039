"""Run the deployment page's localhost commands (``localhost.sh``) as they
are written, for the test suite and the benchmarks.

Only what a machine shared by several runs needs is substituted: the
ports (9100-9103) by free ones, the sites' data files (``/data/siteN.npy``)
by the caller's, ``python`` by this interpreter, and ``flwr run .`` runs
in the caller's copy of the app; ``$FLWR_HOME/config.toml`` is written as
the page says.
"""

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
HOST = "127.0.0.1"


def commands():
    """The page's commands: ``(kind, argv or (name, value))`` in order,
    kind one of ``"export"``, ``"superlink"``, ``"supernode"``,
    ``"superexec"``, ``"run"``."""
    text = (HERE / "localhost.sh").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        argv = shlex.split(line)
        if argv[0] == "export":
            out.append(("export", tuple(argv[1].split("=", 1))))
        elif argv[0] == "flower-superlink":
            out.append(("superlink", argv))
        elif argv[0] == "flower-supernode":
            out.append(("supernode", argv))
        elif argv[:3] == ["python", "-m", "skfed.flower.superexec"]:
            out.append(("superexec", argv))
        elif argv[:2] == ["flwr", "run"]:
            out.append(("run", argv))
        else:
            raise ValueError(f"localhost.sh: unexpected command {line!r}")
    return out


def _free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _wait_for_port(port, proc, log, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited early:\n{Path(log).read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {HOST}:{port}")


class LocalFederation:
    """The page's SuperLink and SuperNodes on 127.0.0.1, stopped on exit.

    Parameters
    ----------
    folder : path
        For the logs, ``FLWR_HOME`` and the copy of the app.
    site_files : list of path
        The data file of each SuperNode, in the page's order.
    """

    def __init__(self, folder, site_files):
        self.folder = Path(folder)
        self.site_files = [str(f) for f in site_files]
        bin_dir = Path(sys.executable).parent
        if shutil.which("flower-superlink", path=str(bin_dir)) is None:
            raise FileNotFoundError("Flower's command-line tools are not installed")
        self.env = {
            **os.environ,
            "FLWR_HOME": str(self.folder / "flwr-home"),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        self.processes = {}
        self.ports = {}
        # True: leave out the page's `export` lines (Flower's defaults).
        self.skip_exports = False
        # True: Flower's own SuperExec, which each SuperNode starts (the
        # page's skfed.flower.superexec lines left out, the SuperNodes
        # without --isolation process), to compare with.
        self.flower_superexec = False

    def _argv(self, argv):
        text = " ".join(shlex.quote(a) for a in argv)
        for page_port, port in self.ports.items():
            text = text.replace(str(page_port), str(port))
        for site, path in enumerate(self.site_files):
            text = text.replace(f"/data/site{site}.npy", path)
        return shlex.split(text)

    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self):
        page = commands()
        for _, argv in page:
            for number in re.findall(r"\b(91\d\d)\b", " ".join(map(str, argv))):
                self.ports.setdefault(int(number), _free_port())
        n_nodes = sum(kind == "supernode" for kind, _ in page)
        if n_nodes != len(self.site_files):
            raise ValueError(f"the page starts {n_nodes} SuperNodes")
        node = executors = 0
        for kind, argv in page:
            if kind == "export":
                if not self.skip_exports:
                    self.env[argv[0]] = argv[1]
            elif kind == "superexec":
                if self.flower_superexec:
                    continue
                # It connects to its SuperNode, already listening.
                name = f"superexec{executors}"
                executors += 1
                log = self.folder / f"{name}.log"
                argv = self._argv(argv)
                argv[0] = sys.executable
                with open(log, "w") as out:
                    self.processes[name] = subprocess.Popen(
                        argv,
                        env=dict(self.env),
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        cwd=self.folder,
                    )
            elif kind in ("superlink", "supernode"):
                name = kind if kind == "superlink" else f"supernode{node}"
                node += kind == "supernode"
                argv = self._argv(argv)
                if self.flower_superexec and "--isolation" in argv:
                    at = argv.index("--isolation")
                    del argv[at : at + 2]
                log = self.folder / f"{name}.log"
                with open(log, "w") as out:
                    proc = subprocess.Popen(
                        argv,
                        env=dict(self.env),
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        cwd=self.folder,
                    )
                self.processes[name] = proc
                port = int(argv[argv.index("--port") + 1])
                _wait_for_port(port, proc, log)
            else:
                self.run_argv = argv
        home = self.folder / "flwr-home"
        home.mkdir(exist_ok=True)
        link = self.ports[9100]
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "local"\n\n[superlink.local]\n'
            f'address = "{HOST}:{link}"\ninsecure = true\n'
        )

    def _run_argv(self, run_config, page_config):
        argv = self._argv(self.run_argv)
        if not page_config:
            while "--run-config" in argv:
                at = argv.index("--run-config")
                del argv[at : at + 2]
        for override in run_config:
            argv += ["--run-config", override]
        return argv

    def run(self, app, *run_config, page_config=True, timeout=900):
        """The page's ``flwr run`` in the app folder ``app``, with extra
        ``--run-config`` overrides (and without the page's own when
        ``page_config`` is False: another app may not have its keys);
        returns the CompletedProcess."""
        return subprocess.run(
            self._run_argv(run_config, page_config),
            env=self.env,
            cwd=app,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start_run(self, app, *run_config, page_config=True, log=None):
        """As :meth:`run`, without waiting: the Popen of ``flwr run``, its
        output in the file ``log``."""
        with open(log or self.folder / "flwr-run.log", "w") as out:
            return subprocess.Popen(
                self._run_argv(run_config, page_config),
                env=self.env,
                cwd=app,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def messages_received(self, node):
        """How many messages SuperNode ``node`` (0, 1, ...) has received,
        from its log."""
        log = self.folder / f"supernode{node}.log"
        return log.read_text(errors="replace").count("Received successfully")

    def __exit__(self, *exc_info):
        # The processes Flower started (SuperExecs, ClientApps still
        # importing) are stopped too: on a busy machine a ClientApp can
        # take a minute to notice that its SuperNode is gone.
        started = _descendants(self.processes.values())
        for proc in reversed(list(self.processes.values())):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.processes.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        for child in started:
            try:
                child.kill()
            except Exception:  # already gone
                pass
        return False


def _descendants(processes):
    """The live processes that ``processes`` (Popen objects) started,
    recursively; none without psutil."""
    try:
        import psutil
    except ImportError:
        return []
    found = []
    for proc in processes:
        try:
            found += psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            pass
    return found


def copy_app(folder):
    """A copy of the page's Flower App (pyproject.toml, skfed_app.py) in
    ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "skfed_app.py"):
        shutil.copy(HERE / name, folder / name)
    return folder
