"""Job kinds for the queue tests, loaded by the test worker through ANISO_JOB_MODULES=jobkinds."""

from __future__ import annotations

import os
import time

from core.base.errors import Cancelled, InputError
from core.entry import job_records, jobs


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


def busy(params: dict, progress, cancel) -> dict:
    """One long step that the job waits for, in a thread pool (as huggingface_hub's downloads and other libraries
    run their work): nothing to probe between steps. A pool's threads are joined when the interpreter exits,
    daemon or not; a plain `threading.Thread` started here would not be: it inherits the daemon flag of the huey
    worker thread that runs the job, and a daemon thread is never waited for (the first version of this job used
    one, and the SIGTERM test passed on the code that waited for the job's threads)."""
    from concurrent.futures import ThreadPoolExecutor

    progress(stage="forward", done=0, total=1, message="one long step")
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="busy") as pool:
        pool.submit(time.sleep, float(params.get("delay", 60))).result()
    return {}


def fail(params: dict, progress, cancel) -> dict:
    raise InputError(params.get("message", "bad input"))


job_records.register("test-steps", "jobkinds:steps")
job_records.register("test-fail", "jobkinds:fail")
job_records.register("test-busy", "jobkinds:busy")


def cancel_at(params: dict, progress, cancel) -> dict | None:
    """Runs the job kind `params["kind"]` on `params["params"]` and cancels itself (core.entry.jobs.cancel, as the
    Cancel button) the first time it reports `params["stage"]` (with done >= `params["done"]` and a message
    starting with `params["message"]`, when given); the instant is written to `params["marker"]` (UNIX s)."""
    from core.base.progress import Progress

    target = job_records.resolve_target(job_records.KINDS[params["kind"]].run)
    me = jobs.job_id("cancel-at", params)
    state = {"set": False}

    def hook(p=None, **kw):
        p = p if p is not None else Progress(**kw)
        if not state["set"] and p.stage == params["stage"] and p.done >= int(params.get("done", 0)) \
                and p.message.startswith(params.get("message", "")):
            state["set"] = True
            tmp = params["marker"] + ".tmp"  # written whole, then renamed: the test never reads it half-written
            with open(tmp, "w") as f:
                f.write(repr(time.time()))
            os.replace(tmp, params["marker"])
            jobs.cancel(me)
        progress(p)

    hook.partial = getattr(progress, "partial", None)
    return target(params["params"], hook, cancel)


job_records.register("cancel-at", "jobkinds:cancel_at")
