"""`python -m bench.worker TASK 'JSON'`: the tasks run in a fresh process (the JSON holds the task's keyword arguments),
each printing `BENCH_RESULT {json}`. A fresh process makes peak RSS a per-run figure and lets a peer fail with
MemoryError under a memory cap; the tasks import inside their functions (`# lazy`), so each pays its own imports."""

from __future__ import annotations

import functools
import json
import resource
import sys
import time
import traceback

import psutil

from bench.common import RESULT_TAG, RssSampler, cprofile_table, seconds, timeit
from core.base import settings
from core.base.procfs import status_bytes


def _preimport():
    """Import the heavy libraries before any clock starts (both the tool and the peers pay them)."""
    # lazy: see the module's doc (here: before the clocks)
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import core.compute.pipeline  # noqa: F401
    import core.stats.assemble  # noqa: F401


# ----------------------------------------------------------------------------- tasks
def task_tool_e2e(model: str, tokens: int, cache_dir: str) -> dict:
    """core.compute.pipeline.analyze on a fresh cache, default batch and sample: load, tokenize, extract, metrics, cache."""
    _preimport()
    from core.base.spec import RunSpec  # lazy: see the module's doc
    from core.compute.pipeline import analyze

    spec = RunSpec(model=model, corpus="wiki-en", max_tokens=tokens, seed=0, device="cpu", dtype="float32")
    with RssSampler() as rs:
        rs.set("fingerprints")
        t0 = time.perf_counter()
        res = analyze(spec, cache_dir=cache_dir, progress=lambda p: rs.set(p.stage))  # a stage's later steps add up
        seconds = time.perf_counter() - t0
    m = res["manifest"]
    return {"seconds": seconds, "n_tokens": int(m["tokens"]["analysed"]), "forward_s": float(m["timing"]["forward_s"]),
            "mean_cosine": [r["mean_cosine"] for r in res["layers"]], **rs.report()}


def task_peer(model: str, tokens: int, mode: str, cache_dir: str, pairs: int = 10_000, mem_cap_bytes: int = 0) -> dict:
    """The naive peer (bench.peers) end to end, optionally under a memory cap (RLIMIT_AS)."""
    _preimport()
    # lazy: see the module's doc
    import numpy as np
    import sklearn.metrics.pairwise  # noqa: F401 - a script imports it at the top
    import torch

    from bench.peers import run_peer
    from core.compute.extract import analysed_masks
    from core.inputs.corpora import load_documents, tokenize_budget
    from core.inputs.models import load_model

    out: dict = {"mode": mode, "mem_cap_bytes": mem_cap_bytes}
    with RssSampler() as rs:
        t0 = time.perf_counter()
        try:
            rs.set("load")
            docs = load_documents("wiki-en")
            lm = load_model(model, device="cpu", dtype="float32", cache_dir=cache_dir)
            rs.set("tokenize")
            windows = tokenize_budget(docs, lm.tokenizer, tokens, 512, 0, "wiki-en")
            analysed = analysed_masks(windows, "exclude")
            out["n_tokens"] = int(sum(int(m.sum()) for m in analysed))
            if mem_cap_bytes:
                # Start the thread pools first, then cap the address space at "now + cap": beyond it, numpy raises
                # MemoryError as the script would on a machine with that much free...
                with torch.no_grad():
                    lm.base(input_ids=torch.as_tensor(windows.ids[0])[None, :])
                # ...and BLAS's work buffers (OpenBLAS aborts the process, instead of raising, when it cannot allocate
                # them under the cap).
                sklearn.metrics.pairwise.cosine_similarity(np.ones((512, 64), dtype=np.float32))
                vm_size = psutil.Process().memory_info().vms  # VmSize: the address space in use
                resource.setrlimit(resource.RLIMIT_AS, (vm_size + int(mem_cap_bytes), resource.RLIM_INFINITY))
            out.update(run_peer(lm.base, windows, analysed, mode, n_pairs=pairs, stage=rs.set), status="ok")
        except (MemoryError, RuntimeError) as e:  # torch's CPU allocator reports a failed allocation as a RuntimeError
            if isinstance(e, RuntimeError) and "alloc" not in str(e).lower() and "memory" not in str(e).lower():
                raise
            out.update(status="oom", oom_stage=rs.stage, error=f"{type(e).__name__}: {e}"[:300])
        out["seconds"] = time.perf_counter() - t0
    return {**out, **rs.report()}


def task_umap(x_path: str, warm_reps: int, cold: bool = False, project_layer: int | None = None, model: str = "",
              tokens: int = 0, cache_dir: str = "") -> dict:
    """UMAP in a fresh process: with `cold`, `import umap` and a first fit (cold with an empty NUMBA_CACHE_DIR); with
    `project_layer`, core.compute.projection.project's first call (computes and stores) and cache hits for UMAP and
    PCA (3 hits each); then `warm_reps` fits of the points saved at x_path (kernels compiled)."""
    import numpy as np  # lazy: see the module's doc

    X, out, t0 = np.load(x_path).astype(np.float32), {}, time.perf_counter()
    if cold:
        import umap  # noqa: F401  # lazy: see the module's doc

        out["import_s"] = time.perf_counter() - t0
    from core.compute.projection import project, umap_2d  # lazy: see the module's doc

    if cold:
        out["fit_s"] = seconds(lambda: umap_2d(X, n_neighbors=15))
        out["total_s"] = time.perf_counter() - t0
    if project_layer is not None:
        from core.base.spec import RunSpec  # lazy: see the module's doc

        for method in ("umap", "pca"):
            call = functools.partial(project, RunSpec(model=model, corpus="wiki-en", max_tokens=tokens), project_layer,
                                     method, cache_dir=cache_dir)
            t0 = time.perf_counter()
            first = call()
            t_first = time.perf_counter() - t0
            hits = timeit(call, 3)
            r = call()  # a hit's answer (untimed)
            out[method] = {"first_s": t_first, "first_cached": bool(first["cached"]), "fit_s": first.get("seconds"),
                           "hit_s": hits, "hit_cached": bool(r["cached"]), "n_points": int(r["n_points"])}
    out["warm_s"] = timeit(lambda: umap_2d(X, n_neighbors=15), warm_reps)
    return out


def task_cli(argv: list[str], profile: bool = False) -> dict:
    """Run `python -m core ARGV` in this process: which heavy modules it imported, or with `profile` the top functions
    of a cProfile of it by cumulative time."""
    from core.entry.cli import main  # lazy: see the module's doc

    if profile:
        return {"table": cprofile_table(lambda: main(argv), top=18)}
    return {"rc": main(argv), "torch_imported": "torch" in sys.modules,
            "heavy_modules": sorted(m for m in ("torch", "transformers", "sklearn", "umap", "numba", "plotly",
                                                "streamlit", "pandas") if m in sys.modules)}


def task_apptest(app: str, page: str, reps: int, timeout: float, selection: dict | None, warmup_wait: float) -> dict:
    """The Layers page in streamlit's AppTest, its runs on disk (task analyze_specs), then re-renders (timed after
    the app's UMAP warm-up)."""
    from streamlit.testing.v1 import AppTest  # lazy: see the module's doc

    at = AppTest.from_file(app, default_timeout=timeout)
    if selection:
        # Only for --quick: a smaller run than the app's default, through the app's session key.
        from core.studies.selection import Selection  # lazy: see the module's doc
        from ui.state import KEY

        at.session_state[KEY] = Selection(**selection)
    out = {"page": page, "app_first_render_s": seconds(at.run)}
    at.switch_page(page)
    out["page_first_render_s"] = seconds(at.run)
    from core.compute import projection  # lazy: see the module's doc (the app has imported it by now)

    t0 = time.perf_counter()
    if warmup_wait > 0:
        projection.umap_warm.wait(timeout=warmup_wait)
    return {**out, "umap_warmup_wait_s": time.perf_counter() - t0, "umap_warm": projection.umap_warm.is_set(),
            "rerender_s": timeit(at.run, reps), "exceptions": [str(getattr(e, "value", e))[:300] for e in at.exception],
            "errors_shown": [str(getattr(e, "value", e))[:200] for e in at.error],
            "n_plotly_charts": len(at.get("plotly_chart")),
            "n_dataframes": len(at.get("arrow_data_frame")) + len(at.get("dataframe")), "torch_imported": "torch" in sys.modules}


def task_attention_memory(model: str, tokens: int) -> dict:
    """core.studies.attention.extract_attention on `tokens` wiki-en tokens; this process's VmHWM before it (after
    loading and tokenizing); the parent reads the peak at the end (peak_rss_bytes)."""
    # lazy: see the module's doc
    from core.base.spec import DEFAULT_BATCH_SIZE, DEFAULT_CORPUS, DEFAULT_MAX_SEQ_LEN
    from core.inputs.corpora import load_documents, tokenize_budget
    from core.inputs.models import load_model
    from core.studies.attention import extract_attention

    lm = load_model(model, device="cpu", dtype="float32")
    w = tokenize_budget(load_documents(DEFAULT_CORPUS), lm.tokenizer, tokens, DEFAULT_MAX_SEQ_LEN, 0, DEFAULT_CORPUS)
    before, t0 = status_bytes("VmHWM"), time.perf_counter()  # the peak so far (psutil has no VmHWM)
    extract_attention(lm.base, w, list(range(10)), batch_size=DEFAULT_BATCH_SIZE, pad_id=int(lm.tokenizer.pad_token_id or 0))
    return {"model": model, "tokens": tokens, "tokens_fed": int(sum(len(i) for i in w.ids)), "n_windows": len(w.ids),
            "longest_window": max(map(len, w.ids)), "seconds": time.perf_counter() - t0, "hwm_before_bytes": before}


def task_train_one(spec: dict, which: str) -> dict:
    """One timed training run of bench.training (the tool, the bare loop or the bare loop after the tool's
    malloc setting) in this fresh interpreter."""
    from bench.training import one_run  # lazy: see the module's doc
    from core.studies.train_spec import TrainSpec

    return one_run(TrainSpec.from_dict(spec), which)


TASKS = {name[5:]: fn for name, fn in globals().items() if name.startswith("task_")}  # task_peer -> "peer"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in TASKS:
        print(f"usage: python -m bench.worker {{{','.join(TASKS)}}} 'JSON'", file=sys.stderr)
        return 2
    settings.env_default(HF_HUB_OFFLINE="1")
    try:
        res = {"status": "ok", **TASKS[argv[0]](**json.loads(argv[1]))}
    except MemoryError as e:
        res = {"status": "oom", "error": f"{type(e).__name__}: {e}"[:300]}
    except Exception as e:  # noqa: BLE001 - reported to the parent, which records it
        res = {"status": "error", "error": f"{type(e).__name__}: {e}"[:500], "traceback": traceback.format_exc()[-2000:]}
    sys.stdout.write(RESULT_TAG + json.dumps({**res, "peak_rss_bytes": status_bytes("VmHWM")}, default=float) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
