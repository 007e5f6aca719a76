"""`python -m bench.worker TASK 'JSON'`: the tasks run in a fresh process, each printing `BENCH_RESULT {json}`.
A fresh process makes peak RSS a per-run figure and lets a peer fail with MemoryError under a memory cap; the
tasks import inside their functions (`# lazy`), so each pays its own imports."""

from __future__ import annotations

import functools
import json
import resource
import sys
import time
import traceback

import psutil

from bench.common import RESULT_TAG, RssSampler, cprofile_table, timeit, vm_hwm
from core.base import settings


def _preimport():
    """Import the heavy libraries before any clock starts (both the tool and the peers pay them)."""
    # lazy: see the module's doc (here: before the clocks)
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import core.compute.pipeline  # noqa: F401
    import core.stats.assemble  # noqa: F401


# ----------------------------------------------------------------------------- tasks
def task_tool_e2e(a: dict) -> dict:
    """core.compute.pipeline.analyze on a fresh cache: load, tokenize, extract, metrics, cache write."""
    _preimport()
    from core.base.spec import RunSpec  # lazy: see the module's doc
    from core.compute.pipeline import analyze

    spec = RunSpec(model=a["model"], corpus=a.get("corpus", "wiki-en"), max_tokens=int(a["tokens"]),
                   batch_size=int(a.get("batch_size", 16)), sample=int(a.get("sample", 5000)),
                   seed=int(a.get("seed", 0)), device="cpu", dtype="float32")
    with RssSampler() as rs:
        rs.set("fingerprints")

        def progress(p):
            if p.stage != rs.stage:
                rs.set(p.stage)

        t0 = time.perf_counter()
        res = analyze(spec, cache_dir=a["cache_dir"], progress=progress)
        seconds = time.perf_counter() - t0
        rs.set("end")
    m = res["manifest"]
    return {"seconds": seconds, "n_tokens": int(m["tokens"]["analysed"]), "fed_tokens": int(m["tokens"]["fed_to_model"]),
            "n_sample": int(m["tokens"]["sample"]), "cache_hit": bool(m.get("cache_hit")),
            "forward_s": float(m["timing"]["forward_s"]),
            "mean_cosine": [r["mean_cosine"] for r in res["layers"]], "rss_by_stage": rs.by_stage,
            "seconds_by_stage": {k: v for k, v in rs.seconds.items() if k not in ("start", "end")}}


def task_peer(a: dict) -> dict:
    """The naive peer (bench.peers) end to end, optionally under a memory cap (RLIMIT_AS)."""
    _preimport()
    # lazy: see the module's doc
    import sklearn.metrics.pairwise  # noqa: F401 - a script imports it at the top
    import torch

    from bench.peers import run_peer
    from core.compute.extract import analysed_masks
    from core.inputs.corpora import load_documents, tokenize_budget
    from core.inputs.models import load_model

    cap = a.get("mem_cap_bytes")
    out: dict = {"mode": a["mode"], "mem_cap_bytes": cap}
    with RssSampler() as rs:
        t0 = time.perf_counter()
        try:
            rs.set("load")
            docs = load_documents(a.get("corpus", "wiki-en"))
            lm = load_model(a["model"], device="cpu", dtype="float32", cache_dir=a.get("cache_dir"))
            rs.set("tokenize")
            windows = tokenize_budget(docs, lm.tokenizer, int(a["tokens"]), 512, int(a.get("seed", 0)),
                                      a.get("corpus", "wiki-en"))
            analysed = analysed_masks(windows, "exclude")
            out["n_tokens"] = int(sum(int(m.sum()) for m in analysed))
            if cap:
                # Start the thread pools first, then cap the address space at "now + cap": beyond
                # it, numpy raises MemoryError as the script would on a machine with that much free.
                with torch.no_grad():
                    lm.base(input_ids=torch.as_tensor(windows.ids[0])[None, :])
                import numpy as np

                # ...and BLAS's work buffers (OpenBLAS aborts the process, instead of raising, when it
                # cannot allocate them under the cap).
                sklearn.metrics.pairwise.cosine_similarity(np.ones((512, 64), dtype=np.float32))
                vm_size = psutil.Process().memory_info().vms  # VmSize: the address space in use
                resource.setrlimit(resource.RLIMIT_AS, (vm_size + int(cap), resource.RLIM_INFINITY))
            got = run_peer(lm.base, windows, analysed, a["mode"], n_pairs=int(a.get("pairs", 10_000)),
                           seed=int(a.get("seed", 0)), stage=rs.set)
            out.update(got)
            out["status"] = "ok"
        except MemoryError as e:
            out.update(status="oom", oom_stage=rs.stage, error=f"{type(e).__name__}: {e}"[:300])
        except RuntimeError as e:  # torch's CPU allocator reports a failed allocation this way
            if "alloc" not in str(e).lower() and "memory" not in str(e).lower():
                raise
            out.update(status="oom", oom_stage=rs.stage, error=f"{type(e).__name__}: {e}"[:300])
        out["seconds"] = time.perf_counter() - t0
        rs.set("end")
    out["rss_by_stage"] = rs.by_stage
    out["seconds_by_stage"] = {k: v for k, v in rs.seconds.items() if k not in ("start", "end")}
    return out


def task_umap_fit(a: dict) -> dict:
    """import umap + one fit in a fresh process (cold with an empty NUMBA_CACHE_DIR), then warm fits."""
    import numpy as np

    X = np.load(a["x_path"]).astype(np.float32)
    t0 = time.perf_counter()
    import umap  # noqa: F401  # lazy: see the module's doc

    t1 = time.perf_counter()
    from core.compute.projection import umap_2d  # lazy: see the module's doc

    xy = umap_2d(X, n_neighbors=int(a.get("n_neighbors", 15)))
    t2 = time.perf_counter()
    warm = _warm_fits(a["x_path"], int(a.get("warm_reps", 0)), int(a.get("n_neighbors", 15)))
    return {"import_s": t1 - t0, "fit_s": t2 - t1, "total_s": t2 - t0, "warm_s": warm, "n_points": int(len(X)),
            "finite": bool(np.isfinite(xy).all()), "numba_cache_dir": settings.env_value("NUMBA_CACHE_DIR")}


def task_project(a: dict) -> dict:
    """core.compute.projection.project in a fresh process: first call (computes and stores), then cache hits."""
    from core.base.spec import RunSpec  # lazy: see the module's doc
    from core.compute.projection import project

    spec = RunSpec(model=a["model"], corpus=a.get("corpus", "wiki-en"), max_tokens=int(a["tokens"]))
    out = {}
    for method in a.get("methods", ["umap", "pca"]):
        call = functools.partial(project, spec, int(a["layer"]), method, cache_dir=a["cache_dir"])
        t0 = time.perf_counter()
        first = call()
        t_first = time.perf_counter() - t0
        hits = timeit(call, int(a.get("hit_reps", 3)))
        r = call() if hits else first  # a hit's answer (untimed)
        out[method] = {"first_s": t_first, "first_cached": bool(first["cached"]), "fit_s": first.get("seconds"),
                       "hit_s": hits, "hit_cached": bool(r["cached"]), "n_points": int(r["n_points"])}
    if a.get("warm_x_path"):  # warm UMAP fits in this process (kernels compiled by the first call)
        out["warm_s"] = _warm_fits(a["warm_x_path"], int(a.get("warm_reps", 1)))
    return out


def _warm_fits(x_path: str, reps: int, n_neighbors: int = 15) -> list[float]:
    """Seconds of `reps` UMAP fits of the points saved at x_path, in this process (kernels compiled)."""
    import numpy as np

    from core.compute.projection import umap_2d  # lazy: see the module's doc

    X = np.load(x_path).astype(np.float32)
    return timeit(lambda: umap_2d(X, n_neighbors=n_neighbors), reps)


def task_cli_modules(a: dict) -> dict:
    """Run `python -m core ARGV` in this process; report whether torch/transformers got imported."""
    from core.entry.cli import main  # lazy: see the module's doc

    t0 = time.perf_counter()
    rc = main(a["argv"])
    return {"rc": rc, "seconds": time.perf_counter() - t0, "torch_imported": "torch" in sys.modules,
            "transformers_imported": "transformers" in sys.modules,
            "heavy_modules": sorted(m for m in ("torch", "transformers", "sklearn", "umap", "numba", "plotly",
                                                "streamlit", "pandas") if m in sys.modules)}


def task_cprofile_cli(a: dict) -> dict:
    from core.entry.cli import main  # lazy: see the module's doc

    return {"table": cprofile_table(lambda: main(a["argv"]), top=int(a.get("top", 18)))}


def task_apptest(a: dict) -> dict:
    """The Layers page in streamlit's AppTest, its runs on disk (task analyze_specs), then re-renders (timed after
    the app's UMAP warm-up)."""
    from streamlit.testing.v1 import AppTest

    out = {}
    at = AppTest.from_file(a["app"], default_timeout=float(a.get("timeout", 120)))
    if a.get("selection"):
        # Only for --quick: a smaller run than the app's default, through the app's session key.
        from core.studies.selection import Selection  # lazy: see the module's doc
        from ui.state import KEY

        at.session_state[KEY] = Selection(**a["selection"])
    t0 = time.perf_counter()
    at.run()
    out["app_first_render_s"] = time.perf_counter() - t0
    out["page"] = a["page"]
    t0 = time.perf_counter()
    at.switch_page(a["page"])
    at.run()
    out["page_first_render_s"] = time.perf_counter() - t0
    from core.compute import projection  # lazy: see the module's doc (the app has imported it by now)

    t0 = time.perf_counter()
    if float(a.get("warmup_wait", 240)) > 0:
        projection.umap_warm.wait(timeout=float(a.get("warmup_wait", 240)))
    out["umap_warmup_wait_s"] = time.perf_counter() - t0
    out["umap_warm"] = projection.umap_warm.is_set()
    out["rerender_s"] = timeit(at.run, int(a.get("reps", 3)))
    out["exceptions"] = [str(getattr(e, "value", e))[:300] for e in at.exception]
    out["errors_shown"] = [str(getattr(e, "value", e))[:200] for e in at.error]
    out["n_plotly_charts"] = len(at.get("plotly_chart"))
    out["n_dataframes"] = len(at.get("arrow_data_frame")) + len(at.get("dataframe"))
    out["torch_imported"] = "torch" in sys.modules
    return out


def task_analyze_specs(a: dict) -> dict:
    """core.compute.pipeline.analyze for each RunSpec dict (fills the cache; untimed setup)."""
    from core.base.spec import RunSpec  # lazy: see the module's doc
    from core.compute.pipeline import analyze

    t0 = time.perf_counter()
    for d in a["specs"]:
        analyze(RunSpec.from_dict(d), cache_dir=a.get("cache_dir"))
    return {"seconds": time.perf_counter() - t0}


def task_attention_memory(a: dict) -> dict:
    """core.studies.attention.extract_attention on `tokens` wiki-en tokens; this process's VmHWM before it (after
    loading and tokenizing); the parent reads the peak at the end (peak_rss_bytes)."""
    import torch  # lazy: see the module's doc

    torch.set_num_threads(int(a.get("threads", 2)))
    # lazy: imported once the thread count is set, as the task's own imports in a fresh process
    from core.base.spec import DEFAULT_BATCH_SIZE, DEFAULT_CORPUS, DEFAULT_MAX_SEQ_LEN
    from core.inputs.corpora import load_documents, tokenize_budget
    from core.inputs.models import load_model
    from core.studies.attention import extract_attention

    lm = load_model(a["model"], device="cpu", dtype="float32")
    w = tokenize_budget(load_documents(DEFAULT_CORPUS), lm.tokenizer, int(a["tokens"]), DEFAULT_MAX_SEQ_LEN, 0,
                        DEFAULT_CORPUS)
    before, t0 = vm_hwm() / 2**20, time.perf_counter()
    pad = lm.tokenizer.pad_token_id
    extract_attention(lm.base, w, list(range(10)), batch_size=DEFAULT_BATCH_SIZE, pad_id=int(pad if pad is not None else 0))
    return {"model": a["model"], "tokens": int(a["tokens"]), "tokens_fed": int(sum(len(i) for i in w.ids)),
            "n_windows": len(w.ids), "seconds": time.perf_counter() - t0, "hwm_before_mib": before}


def task_train_one(a: dict) -> dict:
    """One timed training run of bench.training (the tool, the bare loop or the bare loop after the tool's
    malloc setting) in this fresh interpreter."""
    from bench.training import one_run  # lazy: see the module's doc
    from core.studies.train_spec import TrainSpec

    return one_run(TrainSpec.from_dict(a["spec"]), a["which"])


TASKS = {name[5:]: fn for name, fn in globals().items() if name.startswith("task_")}  # task_peer -> "peer"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in TASKS:
        print(f"usage: python -m bench.worker {{{','.join(TASKS)}}} 'JSON'", file=sys.stderr)
        return 2
    settings.env_default(HF_HUB_OFFLINE="1")
    task, args = argv[0], json.loads(argv[1])
    try:
        res = TASKS[task](args)
        res.setdefault("status", "ok")
    except MemoryError as e:
        res = {"status": "oom", "error": f"{type(e).__name__}: {e}"[:300]}
    except Exception as e:  # noqa: BLE001 - reported to the parent, which records it
        res = {"status": "error", "error": f"{type(e).__name__}: {e}"[:500],
               "traceback": traceback.format_exc()[-2000:]}
    res["peak_rss_bytes"] = vm_hwm()
    sys.stdout.write(RESULT_TAG + json.dumps(res, default=float) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
