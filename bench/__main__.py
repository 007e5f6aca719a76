"""`python -m bench`: run the benchmark and write its sections of BENCHMARKS.md (method: BENCHMARKS.md).

    python -m bench                       # full run (about 20-25 min on 2 quiet CPU cores)
    python -m bench --quick               # every section at tiny sizes (< 1-2 min); prints the markdown
    python -m bench --only overhead,cache # some sections only (each says when and where it was measured)
    python -m bench --device cuda         # the GPU section (refuses without CUDA)
    python -m bench --godey [--one-only]  # Godey et al.'s 14 models in one process vs 14 commands (bench/papers.py)
    python -m bench lab-lr                # the learning rate per family and optimizer (bench/lab_lr.py)
    python -m bench lab [--default]       # the quick lab or the default grid, timed (bench/lab.py)

Each run uses its own empty cache directory, deleted at the end.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

from core.base import settings

settings.export_env(HF_HUB_OFFLINE="1")  # before anything imports huggingface_hub
settings.env_default(TOKENIZERS_PARALLELISM="false")

from bench import __version__  # noqa: E402
from bench.common import BUSY, ROOT, command, cpu_share, link_converted_models, loadavg, log, machine_info  # noqa: E402
from bench.report import TITLES, render_doc  # noqa: E402

SECTION_ORDER = list(TITLES)  # run in the file's order: cache (4) fills what projection (5) and postproc (7) read
MODES = {"lab-lr": "bench.lab_lr", "lab": "bench.lab"}  # `python -m bench MODE ...`: imported only when that mode runs


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="sections: " + ", ".join(SECTION_ORDER))
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks that every section runs")
    p.add_argument("--only", default=None, help="comma-separated sections to run (default: all)")
    p.add_argument("--out", default=None, help="markdown file to write into (default BENCHMARKS.md; --quick: printed)")
    p.add_argument("--json", default=None, help="also write the raw numbers here")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cuda: the GPU section only")
    p.add_argument("--set", action="append", default=[], metavar="SIZE=VALUE",
                   help="override a size of bench.sections.SIZES, e.g. peer_tokens=10000,40000 (repeatable)")
    p.add_argument("--threads", type=int, default=None, help="torch/BLAS threads of every process (--quick: 1)")
    p.add_argument("--gpu-peak-tflops", type=float, default=None, help="--device cuda: the card's dense bf16 peak")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] and argv[0] in MODES:  # the lab's learning-rate sweep (core/data/lab_lr.json), the lab's budget (issue 41)
        return importlib.import_module(MODES[argv[0]]).main(argv[1:])
    if "--godey" in argv:  # Godey et al.'s 14 models, one process vs 14 (tens of minutes)
        from bench.papers import main as papers_main  # lazy: only this mode imports the papers' runs

        return papers_main([x for x in argv if x != "--godey"])
    parser = build_parser()
    a = parser.parse_args(argv)
    if a.device == "cuda":
        from bench.gpu import main as gpu_main  # lazy: torch only for the GPU section

        return gpu_main(a, argv)
    only = SECTION_ORDER if not a.only else [s.strip() for s in a.only.split(",") if s.strip()]
    if any(s not in SECTION_ORDER for s in only):
        parser.error(f"unknown section(s) {[s for s in only if s not in SECTION_ORDER]}; choose from {SECTION_ORDER}")
    a.threads = a.threads or (1 if a.quick else None)  # --quick only checks the code: one thread is the fastest here
    if a.threads:
        settings.export_env(**{var: str(a.threads) for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                                 "OPENBLAS_NUM_THREADS")})  # children inherit it
        import torch  # lazy: torch only in the sections that run a model

        torch.set_num_threads(a.threads)
    # lazy: imported once --threads is applied (numpy reads the thread count when it is imported)
    from bench.sections import SECTIONS, Ctx, make_sizes

    try:
        sizes, overrides = make_sizes(a.quick, a.set)
    except ValueError as e:
        parser.error(str(e))
    machine = machine_info()
    cores = machine.get("usable_cores") or 1
    if machine["loadavg_start"] and machine["loadavg_start"][0] > BUSY * cores:
        log(f"WARNING: the machine is busy (load average {machine['loadavg_start']} on {cores} cores): the figures "
            "will be noisy and the run slow; BENCHMARKS.md will say so")
    cpu_share()  # starts psutil's count of the run's CPU time
    t_start = time.monotonic()
    sections: dict = {}
    with tempfile.TemporaryDirectory(prefix="aniso-bench-", ignore_cleanup_errors=True) as root:
        cache = Path(root) / "cache"
        cache.mkdir()
        linked = link_converted_models(cache)  # before ANISO_CACHE_DIR points at the new cache
        settings.set_cache_dir(cache)
        ctx = Ctx(sizes=sizes, cache=cache, quick=a.quick)
        log(f"{'quick' if a.quick else 'full'} run, sections {only}; cache {cache}"
            + (f" (reusing the converted {linked})" if linked else ""))
        if not a.quick and only == SECTION_ORDER:
            log("a full run takes about 20-25 minutes on 2 quiet CPU cores")
        for name in only:
            log(f"== section {name}")
            t0 = time.monotonic()
            try:
                sections[name] = SECTIONS[name](ctx)
            except Exception as e:  # noqa: BLE001 - recorded in the markdown, the run goes on
                log(f"section {name} failed: {type(e).__name__}: {e}")
                sections[name] = {"section_error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
            log(f"== section {name} done in {time.monotonic() - t0:.1f} s")
    meta = {"command": command("python -m bench", argv), "bench_version": __version__, "quick": a.quick,
            "only": only if only != SECTION_ORDER else None, "machine": machine,
            "duration_s": time.monotonic() - t_start, "loadavg_end": loadavg(), "cpu_share": cpu_share(),
            "sizes": {**vars(sizes), "peer_mem_cap": f"{sizes.peer_mem_cap / 2**30:.2f} GiB"}, "overrides": overrides}
    results = {"meta": meta, "sections": sections}
    out = Path(a.out) if a.out else (None if a.quick else ROOT / "BENCHMARKS.md")
    if out is not None:
        out.write_text(render_doc(results, out.read_text() if out.exists() else None))
        log(f"wrote {out}")
    else:
        sys.stdout.write(render_doc(results) + "\n")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
