"""Memory does not grow with the corpus: 400k tokens peak at most 10% above 40k (same model, batch, sample)."""

import json
import subprocess
import sys
import textwrap

import pytest
from foundation_helpers import ROOT, cli_env

RUN = textwrap.dedent("""
    import json, resource, sys
    from core.compute.pipeline import get_stats
    from core.base.spec import RunSpec
    model, corpus, n, cache = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    stats = get_stats(RunSpec(model=model, corpus=corpus, max_tokens=n, max_seq_len=128, batch_size=16,
                              sample=2000, device="cpu", dtype="float32"), cache_dir=cache)
    assert not stats.cached
    print(json.dumps({"peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "n": stats.n_tokens,
                      "sample": int(stats.arrays["sample"].shape[1]), "batches": stats.manifest["timing"]["n_batches"]}))
""")


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_the_corpus(tmp_path, tiny_bert_dir):
    runs = {}
    for corpus in ("uniform-random", "wiki-en"):
        for n in (40_000, 400_000):
            cmd = [sys.executable, "-c", RUN, str(tiny_bert_dir), corpus, str(n), str(tmp_path / f"c-{corpus}-{n}")]
            runs[corpus, n] = subprocess.Popen(cmd, cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE, text=True)
    got = {}
    for k, p in runs.items():
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        got[k] = json.loads(out.strip().splitlines()[-1])
    for corpus in ("uniform-random", "wiki-en"):
        small, large = got[corpus, 40_000], got[corpus, 400_000]
        assert 40_000 <= small["n"] < 41_000 and 400_000 <= large["n"] < 401_000
        assert small["sample"] == large["sample"] == 2000  # only the corpus size differs
        assert large["batches"] > 8 * small["batches"]
        ratio = large["peak_kib"] / small["peak_kib"]
        assert ratio <= 1.10, f"{corpus}: peak {large['peak_kib']} KiB at 400k vs {small['peak_kib']} KiB at 40k"
