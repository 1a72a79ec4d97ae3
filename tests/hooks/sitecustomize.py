"""A test's moment inside a command it starts, exactly: with this folder on ``PYTHONPATH`` and
``TVU_TEST_AT="STEP ACTION"`` in the environment, a process that trains does ACTION right after
it logs the training loss of step STEP: sends itself a signal (``SIGKILL`` as ``kill -9``,
``SIGINT`` as Ctrl-C, ``SIGUSR2`` as SLURM's time-limit warning) or deletes a folder
(``rm:PATH``). A tiny run is over before a test polling from outside could act; this acts at
the same step whatever the machine's load. Python imports ``sitecustomize`` at start-up."""

import os

if os.environ.get("TVU_TEST_AT"):
    import shutil
    import signal

    from tiedvsuntied.results.metrics_log import MetricsLog

    AT, ACTION = os.environ["TVU_TEST_AT"].split(" ", 1)
    write = MetricsLog.log

    def log_then_act(self, metrics: dict, step: int) -> None:
        write(self, metrics, step)
        if int(step) == int(AT) and "train/loss" in metrics:
            if ACTION.startswith("rm:"):
                shutil.rmtree(ACTION.removeprefix("rm:"))
            else:
                os.kill(os.getpid(), getattr(signal, ACTION))

    MetricsLog.log = log_then_act
