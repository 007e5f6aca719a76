"""Smoke test of the benchmark's helpers at tiny sizes (no timing assertions).

The benchmark itself is `python -m bench` (see bench/__init__.py); here (numpy only): the markdown
writer, the pair estimators and the subprocess protocol. What runs a tiny random model (the naive peer
against the tool's exact mean cosine, the GPU section's code path on the CPU) is in
tests/integration/test_bench_models.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench import common, report
from bench.common import median, met, run_task
from bench.peers import all_pairs_mean_cosine, sampled_pairs_mean_cosine


def _meta(**kw):
    m = {"command": "python -m bench --quick", "bench_version": "1", "quick": True, "only": None,
         "machine": {"cpu_model": "test cpu", "logical_cores": 2, "usable_cores": 2, "torch_threads": 2,
                     "ram_bytes": 8 * 2**30, "os": "linux", "versions": {"torch": "x"}, "date_utc": "today",
                     "loadavg_start": [3.0, 2.0, 1.0]},
         "duration_s": 12.0, "loadavg_end": [1.0, 1.0, 1.0], "cpu_share": {"steal": 0.0, "idle": 0.5},
         "sizes": {"minilm_tokens": 600}, "gpu_reason": "no GPU here"}
    m.update(kw)
    return m


def _sections():
    """Sections as bench.sections hands them over: markdown blocks and summary rows, made with bench.common's helpers."""
    oom = {"status": "oom", "oom_stage": "similarity", "seconds": 1.0, "peak_rss_bytes": 6e8}
    return {
        "overhead": {"md": [(["Model", "Ratio (range)", "Goal >= 0.90"], [["Model M", "**0.800** (0.800-0.800)", met(False)]]),
                            "**Why Model M misses the goal** - cProfile (cumulative):",
                            common.code(common.cprofile_table(lambda: sorted(range(1000), key=abs), top=5))],
                     "summary": [["Extraction vs bare forward, Model M (580 tokens)", ">= 0.90", "0.800", met(False)]]},
        "peers": {"md": [(["Tokens", "Run", "Status", "Time", "Peak RSS"], [
            ["400", "peer, all pairs", common.status(oom), common.fs(oom["seconds"]), common.fb(oom["peak_rss_bytes"])]])],
            "summary": [["Tool end to end vs per-document peer, speed (400 tokens)", ">= 1.0", "0.50", met(0.5 >= 1.0)]]},
        "memory": {"md": ["Batch 16, sample 5000."], "summary": [["Peak RSS 4,000 / 400 tokens", "<= 1.10", "1.040", met(True)]]},
        "cache": {"md": [(["Model"], [["minilm-l6"]]),
                         f"**Page re-render from cache.** {common.status({'status': 'skipped', 'reason': 'no app'})}."]},
        "projection": {"md": ["600 points at d=384 (s)."]},
        "batching": {"md": ["580 analysed tokens in 8 windows, 1 alternating repetition(s)."]},
        "postproc": {"md": ["X = 200 x 576 float32, s, layer 15; median of 2 runs.",
                            (["Post-processing", "Time", "Goal < 0.5 s"], [["raw", common.fs(0.1, 3), met(True)]])],
                     "summary": [["All sample metrics of one layer after post-processing (200 x 576), slowest choice (raw)",
                                  "< 0.5 s", "0.100 s", met(True)]]},
    }


def test_markdown_writer_renders_every_section_and_flags_misses():
    md = report.render_doc({"meta": _meta(), "sections": _sections()})
    for head in ("# Benchmarks", "## Machine", "## Summary", "## 1.", "## 2.", "## 3.", "## 4.", "## 5.", "## 6.", "## 7."):
        assert head in md
    for name in ("run", *_sections()):  # each section's figures between its markers
        assert md.count(common.markers(name)[0]) == md.count(common.markers(name)[1]) == 1
    assert "QUICK MODE" in md
    assert "**MISSED**" in md and "ncalls" in md and "{built-in method builtins.sorted}" in md  # the profile explains it
    assert "| Extraction vs bare forward, Model M (580 tokens) | >= 0.90 | 0.800 | **MISSED** |" in md  # in the summary
    assert "out of memory during similarity" in md and "not run: no app" in md
    assert "not quiet" in md  # load average 3.0 on 2 cores
    assert "## GPU" not in md  # a CPU run leaves the GPU section alone
    summary = md[md.index("## Summary"):md.index("Sizes:")]  # the sections' rows in their order
    assert summary.index("Model M") < summary.index("(400 tokens)") < summary.index("4,000 / 400") < summary.index("(raw)")


def test_section_error_is_rendered():
    md = report.render_doc({"meta": _meta(quick=False), "sections": {"memory": {"section_error": "Boom: x",
                                                                                 "traceback": "tb"}}})
    assert "This section failed" in md and "Boom" in md


def test_a_run_rewrites_only_its_figures_and_a_partial_run_says_when():
    doc = ("# Benchmarks\n\nintro\n\n<!-- bench:run:start -->\nold run\n<!-- bench:run:end -->\n\n## 7. Post\n\n"
           "Method, written once.\n\n<!-- bench:postproc:start -->\nold figures\n<!-- bench:postproc:end -->\n\n"
           "## GPU\n\nHow.\n\n<!-- bench:gpu:start -->\nNot measured yet.\n<!-- bench:gpu:end -->\n")
    sec = {"postproc": _sections()["postproc"]}
    full = report.render_doc({"meta": _meta(), "sections": sec}, doc)
    assert "old run" not in full and "old figures" not in full and "| raw | 0.100 s | met |" in full
    assert "Method, written once." in full and "How." in full and "Not measured yet." in full and "intro" in full
    part = report.render_doc({"meta": _meta(only=["postproc"]), "sections": sec}, doc)
    assert "old run" in part  # the machine and summary stay the full run's
    assert "Measured today by `python -m bench --quick` on test cpu, 2 usable cores" in part
    assert part.index("Method, written once.") < part.index("Measured today") < part.index("| raw |")


def test_gpu_block_is_replaced_in_place_and_kept_by_a_cpu_run():
    cpu_doc = report.render_doc({"meta": _meta(), "sections": {}})
    g = {"device": "Fake GPU", "dtype": "bfloat16", "tokens_requested": 100, "batch_size": 16, "reps": 1,
         "peak_tflops": 100.0, "meta": {"command": "python -m bench --device cuda"},
         "models": [{"model": "BERT-base", "status": "ok", "n_params": 110e6, "tokens_analysed": 100,
                     "bare_tokens_per_s": 1e5, "tool_tokens_per_s": 9e4, "ratio": 0.9, "tflops": 20.0,
                     "tflops_non_embedding": 15.0, "mfu": 0.2, "max_memory_allocated_bytes": 2**30}]}
    block = report.render_gpu(g)
    with_gpu = common.put_section(cpu_doc, "gpu", block, report.GPU_TITLE)
    assert "## GPU\n\n<!-- bench:gpu:start -->\nMeasured on Fake GPU" in with_gpu
    assert "Fake GPU" in report.render_doc({"meta": _meta(), "sections": {}}, with_gpu)  # a later CPU run keeps it
    again = common.put_section(with_gpu, "gpu", block.replace("Fake", "Other"), "GPU")
    assert "Other GPU" in again and "Fake GPU" not in again and again.count("## GPU") == 1
    assert common.put_section(None, "gpu", block, "GPU").startswith("# Benchmarks\n\n## GPU\n\n<!-- bench:gpu:start -->")


def exact_mean_cosine(H: np.ndarray) -> float:
    """(||sum u||^2 - N) / (N (N - 1)): the reference the tool streams."""
    U = H.astype(np.float64)
    U = U / np.maximum(np.linalg.norm(U, axis=1, keepdims=True), 1e-30)
    s = U.sum(0)
    return float((s @ s - len(U)) / (len(U) * (len(U) - 1)))


def test_pair_estimators_on_random_data():
    rng = np.random.default_rng(0)
    H = (rng.normal(size=(300, 16)) + 2.0).astype(np.float32)
    ex = exact_mean_cosine(H)
    assert abs(all_pairs_mean_cosine(H) - ex) < 1e-5
    assert abs(sampled_pairs_mean_cosine(H, 20_000, seed=1) - ex) < 0.05


def test_median_of_an_odd_count():
    assert median([3, 1, 2]) == 2


def test_subprocess_protocol_reports_peak_and_modules(tmp_path):
    r = run_task("cli", {"argv": ["models"]}, cache_dir=tmp_path, timeout=120)
    assert r["status"] == "ok" and r["rc"] == 0
    assert r["torch_imported"] is False  # listing models never imports torch
    assert r["peak_rss_bytes"] > 0 and r["wall_s"] > 0
    bad = run_task("no-such-task", {}, cache_dir=tmp_path, timeout=60)
    assert bad["status"] == "error"


def test_load_section_is_replaced_in_place_and_survives_a_bench_rewrite(tmp_path):
    from bench.load import TITLE, render

    s = {"n": 40, "p50": 0.8, "p95": 1.5, "max": 2.5, "errors": [], "peak_server": 300 * 2**20, "load": (1.0, 1, 1),
         "per_page": {"Layers": 1.2, "Outliers": 1.6, "Projection": 0.9, "Compare": 1.4}, "slow": [],
         "max_page": {"Layers": 2.5, "Outliers": 1.9, "Projection": 1.0, "Compare": 1.5},
         "open_p50": 9.0, "open_max": 12.5}
    r = {"users": 8, "seconds": 60, "load_before": (1.0, 1, 1), "idle": s,
         "job": {**s, "p95": 2.4, "peak_worker": 900 * 2**20, "job_tokens_per_s": 5000.0, "job_done": 120000,
                 "slow": ["Compare: not ready after 10 s [at /compare, traces per figure [], running True, says []]"],
                 "cpu": {"server": 8.0, "browsers": 28.0, "harness": 4.0, "busy": 180.0, "niced": 60.0,
                         "stolen": 12.0, "t": 120.0}}}
    md = render(r, "python -m bench.load")
    assert "| job running | 40 | 0.80 / 2.40 / 2.50 | 0 | 9.00 s / 12.50 s |" in md and "**not met** (2.40 s)" in md
    assert "| 300 MiB | 900 MiB |" in md and "| 300 MiB | (no job) |" in md
    assert "| no job | 40 | 0.80 / 1.50 / 2.50 | 0 | 9.00 s / 12.50 s | 1.20 s / 1.60 s / 0.90 s / 1.40 s | 2.50 s / " in md
    assert "| 0.20 / 0.70 / 0.10 | 1.50 / 0.50 / 0.10 | 1.0 |" in md  # CPU-s per view; cores busy / niced / stolen
    assert "| n/a | n/a | 1.0 |" in md  # no CPU measured in phase 1
    assert "Views not ready after 10 s (job running, 1): Compare: not ready" in md and "(no job, " not in md
    doc = tmp_path / "B.md"
    doc.write_text("# Benchmarks\n\nbody\n")
    common.publish(md, "load", TITLE, doc)
    common.publish(md.replace("2.40", "1.90"), "load", TITLE, doc)
    text = doc.read_text()
    start, end = common.markers("load")
    assert text.count(start) == 1 and "1.90" in text and text.startswith("# Benchmarks\n\nbody\n\n## Load: browser")
    rewritten = report.render_doc({"meta": _meta(), "sections": {}}, text)  # a later `python -m bench`
    assert rewritten.count(end) == 1 and "1.90" in rewritten


def test_load_first_loads_are_the_ramp_up_not_views():
    """The users' first page loads are reported on their own (bench.load.run_phase starts the timed views once all
    have one)."""
    from bench.load import summarize

    s = summarize([("open", 12.0), ("open", 8.0), ("Layers", 1.0), ("Outliers", 3.0)], [],
                 ["first load: not ready after 10 s [...]", "Layers: not ready after 10 s [...]"])
    assert s["n"] == 2 and s["max"] == 3.0 and s["open_max"] == 12.0 and s["open_p50"] == 10.0
    assert s["slow"] == ["Layers: not ready after 10 s [...]"]


def test_the_one_table_renderer_against_a_hand_written_table():
    md = common.table(["Model", "Ratio", ""], [["MiniLM-L6", 0.95, "a|b"], ["SmolLM2", "n/a", "two\nlines"]])
    assert md == ("| Model | Ratio |  |\n"
                  "|---|---|---|\n"
                  "| MiniLM-L6 | 0.95 | a\\|b |\n"
                  "| SmolLM2 | n/a | two lines |")
    assert common.table(["a"], []) == "| a |\n|---|"


def test_marked_sections_are_replaced_or_appended_and_the_rest_kept(capsys):
    assert common.markers("x") == ("<!-- bench:x:start -->", "<!-- bench:x:end -->")
    doc = "# Benchmarks\n\n## X\n\nmethod\n\n<!-- bench:x:start -->\nold\n<!-- bench:x:end -->\n\ntail\n"
    assert common.put_section(doc, "x", "new", "X") == doc.replace("old", "new")
    assert common.put_section("# Benchmarks\n\nintro\n\n", "x", "new", "X") == (
        "# Benchmarks\n\nintro\n\n## X\n\n<!-- bench:x:start -->\nnew\n<!-- bench:x:end -->\n")
    assert common.put_section(None, "x", "new") == "# Benchmarks\n\n<!-- bench:x:start -->\nnew\n<!-- bench:x:end -->\n"
    common.publish("figures", "x", "X", None)  # no file: printed under its title
    assert capsys.readouterr().out == "## X\n\nfigures\n"


def test_cpu_shares_since_the_previous_call():
    import time

    common.cpu_share()  # starts the count
    time.sleep(0.3)
    share = common.cpu_share()
    assert set(share) == {"steal", "idle"} and 0 <= share["steal"] <= share["steal"] + share["idle"] <= 1


def test_process_figures_from_psutil():
    import os
    import subprocess
    import sys

    spin = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                             "while time.process_time() - t < 0.3: pass\ntime.sleep(30)"])
    try:
        deadline = __import__("time").monotonic() + 20
        while common.proc_cpu_s(spin.pid) < 0.25 and __import__("time").monotonic() < deadline:
            __import__("time").sleep(0.05)
        assert 0.25 <= common.proc_cpu_s(spin.pid) < 5  # it spun 0.3 CPU-s, then sleeps
        assert common.proc_cpu_s(os.getpid(), tree=True) >= common.proc_cpu_s(os.getpid()) + 0.25  # its child
        from bench.load import _cpu_s

        got = _cpu_s(spin.pid)  # the load test's account, with the child as the "server"
        assert got["server"] >= 0.25 and got["harness"] >= common.proc_cpu_s(os.getpid()) * 0.9
        assert got["busy"] > got["niced"] >= 0 and got["t"] > 0
        assert common.rss(spin.pid) > 1_000_000 and common.rss() > common.rss(spin.pid) / 10
    finally:
        spin.kill()
        spin.wait()
    assert common.proc_cpu_s(spin.pid) == 0.0 and common.rss(spin.pid) == 0  # gone
    assert common.proc_cpu_s(None) == 0.0 and common.rss(0) == 0
    assert len(common.loadavg()) == 3 and common.usable_cores() >= 1


def test_fresh_process_times_come_from_pyperf(tmp_path):
    import sys

    marks = tmp_path / "marks"
    code = f"open({str(marks)!r}, 'a').write('x')"
    got = common.fresh_process_times([sys.executable, "-c", code], 2, tmp_path)
    assert len(got) == 2 and all(0 < t < 60 for t in got)
    assert marks.read_text() == "xx"  # one run per process, no warm-up run
    with pytest.raises(RuntimeError, match="pyperf command failed"):
        common.fresh_process_times([sys.executable, "-c", "raise SystemExit(3)"], 1, tmp_path)


def test_alternate_runs_in_a_b_b_a_order():
    calls = []
    runs = common.alternate(3, {"a": lambda: calls.append("a") or 1.0, "b": lambda: calls.append("b") or (2.0, "x")})
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert runs == {"a": [1.0, 1.0, 1.0], "b": [(2.0, "x")] * 3}


def test_the_one_renderer_turns_blocks_into_hand_written_markdown():
    md = report.blocks(["X = 200 x 576 float32, SmolLM2 sample, layer 15; median of 2 runs.",
                        (["Post-processing", "Time", "Goal < 0.5 s"], [["raw", common.fs(0.1234, 3), met(True)],
                                                                      ["whitening", common.fs(float("nan"), 3), met(False)]])])
    assert md == (  # the method is BENCHMARKS.md's, above the section's markers: here the figures only
        "X = 200 x 576 float32, SmolLM2 sample, layer 15; median of 2 runs.\n\n"
        "| Post-processing | Time | Goal < 0.5 s |\n"
        "|---|---|---|\n"
        "| raw | 0.123 s | met |\n"
        "| whitening | n/a | **MISSED** |")
    assert common.fi(1234.6) == "1,235" and common.fb(3 * 2**29) == "1.50 GiB" and common.fr(None) == "n/a"
    assert common.status({"status": "oom", "oom_stage": "forward", "error": "MemoryError: x"}) == \
        "out of memory during forward (`MemoryError: x`)"
    assert common.status({"status": "killed", "error": "Killed"}) == "killed: Killed"


def test_ab_alternates_the_revisions_and_reports_the_cost(monkeypatch, capsys):
    """bench.ab's wiring without a model: base and head alternate (A B B A), each revision's median tool/bare ratio
    and the cost of the change come out of the measured times, and the exported trees are deleted."""
    from bench import ab

    made, calls = [], []
    monkeypatch.setattr(ab, "export", lambda rev, dest: made.append(dest) or dest.mkdir(parents=True) or dest)
    ratios = {"base": iter([1.0, 0.8]), "head": iter([0.9, 0.7])}  # tool/bare per process: bare 1 s, tool 1/ratio

    def measure(tree, args):
        calls.append(tree.name)
        r = next(ratios[tree.name])
        return 1.0, {"n": 1000, "windows": 4, "bare_s": [1.0], "tool_s": [1.0 / r], "ratio": r}

    monkeypatch.setattr(ab, "measure", measure)
    assert ab.main(["--base", "abc123", "--head", "def456", "--rounds", "2", "--reps", "1", "--tokens", "1000"]) == 0
    out = capsys.readouterr().out
    assert calls == ["base", "head", "head", "base"]
    assert "| base (abc123) | 1,000 | 1.000, 0.800 | **0.900** | **1.000** |" in out
    assert "| head (def456) | 1,000 | 0.900, 0.700 | **0.800** | **0.900** |" in out
    assert "1 - 0.800 / 0.900 = **11.1%**" in out and "best-of: 1 - 0.900 / 1.000 = **10.0%**" in out
    assert made and not any(d.exists() for d in made)
