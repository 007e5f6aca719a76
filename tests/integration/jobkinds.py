"""Job kinds for the queue tests, loaded by the test worker through ANISO_JOB_MODULES=jobkinds."""

from __future__ import annotations

import time

from core import jobs
from core.errors import Cancelled, InputError


def steps(params: dict, progress, cancel) -> dict:
    """`n` steps of `delay` seconds with progress; each run appends a line to `marker` when done."""
    n, delay = int(params["n"]), float(params.get("delay", 0.1))
    for i in range(n):
        if cancel():
            raise Cancelled("stopped between steps")
        progress(stage="forward", done=i, total=n, rate=1 / delay, eta_s=(n - i) * delay, message="step")
        time.sleep(delay)
    if params.get("marker"):
        with open(params["marker"], "a") as f:
            f.write("done\n")
    return {"n": n}


def fail(params: dict, progress, cancel) -> dict:
    raise InputError(params.get("message", "bad input"))


jobs.register("test-steps", "jobkinds:steps")
jobs.register("test-fail", "jobkinds:fail")
