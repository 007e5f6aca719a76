"""Benchmark of the anisotropy workbench: `python -m bench` writes BENCHMARKS.md.

Every figure is a ratio (or a pair of numbers) measured in ONE run on ONE machine, so that the machine's
speed cancels out. See `python -m bench --help`; `--quick` runs every section at tiny sizes.

Modules:
    __main__   argument parsing, the run, the markdown file
    common     machine and process figures (psutil), A B B A timing, fresh-process timings (pyperf),
               the subprocess runner (per-run peak RSS), profiles, and the markdown every module
               writes: the one table renderer and the marked-section writer of BENCHMARKS.md
    peers      the naive peer (one forward per document, hidden states to numpy, sklearn cosine)
    worker     `python -m bench.worker TASK JSON`: the tasks run in a fresh process
    sections   one function per section, each returning a dict of numbers
    gpu        the `--device cuda` section (random-init models of real sizes in bf16)
    report     the markdown writer
"""

__all__ = ["__version__"]
__version__ = "1"
