"""A test's moment inside a command it starts, exactly: with this folder on ``PYTHONPATH`` and
``TVU_TEST_AT="STEP ACTION"`` in the environment, a process that trains does ACTION right after
it logs the training loss of step STEP: sends itself a signal (``SIGKILL`` as ``kill -9``,
``SIGINT`` as Ctrl-C, ``SIGUSR2`` as SLURM's time-limit warning), deletes a folder
(``rm:PATH``) or makes one read-only in place (``ro:PATH``: a read-only bind mount of the folder
over itself; the files the process holds open stay writable, as on a disk remounted read-only
under it; the test unmounts it). A tiny run is over before a test polling from outside could
act; this acts at the same step whatever the machine's load. Python imports ``sitecustomize``
at start-up.

``TVU_TEST_FORBID=PATH``: opening any file under PATH (listing a folder included) raises
PermissionError in the process, as on a machine where PATH does not exist (Python's audit hook
sees every open, tiktoken's and datasets' included)."""

import os
import sys

if os.environ.get("TVU_TEST_FORBID"):
    FORBIDDEN = os.path.realpath(os.environ["TVU_TEST_FORBID"])

    def forbid(event: str, args: tuple) -> None:
        if event in ("open", "os.listdir", "os.scandir") and isinstance(args[0], (str, bytes)):
            path = os.path.realpath(os.fsdecode(args[0]))
            if path == FORBIDDEN or path.startswith(FORBIDDEN + os.sep):
                raise PermissionError(f"TVU_TEST_FORBID: {path}")

    sys.addaudithook(forbid)

if os.environ.get("TVU_TEST_AT"):
    import shutil
    import signal
    import subprocess

    from tiedvsuntied.results.metrics_log import MetricsLog

    AT, ACTION = os.environ["TVU_TEST_AT"].split(" ", 1)
    write = MetricsLog.log

    def log_then_act(self, metrics: dict, step: int) -> None:
        write(self, metrics, step)
        if int(step) == int(AT) and "train/loss" in metrics:
            if ACTION.startswith("rm:"):
                shutil.rmtree(ACTION.removeprefix("rm:"))
            elif ACTION.startswith("ro:"):
                folder = ACTION.removeprefix("ro:")
                subprocess.run(["mount", "--bind", folder, folder], check=True)
                subprocess.run(["mount", "-o", "remount,bind,ro", folder], check=True)
            else:
                os.kill(os.getpid(), getattr(signal, ACTION))

    MetricsLog.log = log_then_act
