"""The anisotropy workbench from Python (docs/python.md): `import aniso as aw`.

    run = aw.analyze("minilm-l6", "wiki-en", max_tokens=40_000)   # a progress bar; a cache hit the second time
    run.layers                       # pandas DataFrame: one row per layer, the registry's columns
    run.figure("mean_cosine")        # the Layers page's Plotly figure
    X, tokens = run.sample(layer=3)  # (K, d) hidden states and the sampled tokens
    aw.compare([run, aw.analyze("untrained-minilm-l6", "wiki-en")]).figure()
    run.outliers(), run.ablation(), run.attention(), run.chain(), run.link()
    aw.load("results.json")

`aniso` is the stable public name of the workbench's API (core/entry/api.py): the modules under core/ may move, these
names stay. The same cache and run keys as the dashboard and `aniso analyze`: what one computed, the others read.
Every function raises `aniso.InputError` (core.base.errors.InputError) with a message a person can act on.
"""

from ._paths import ensure_core

_core = ensure_core()

from core.base.errors import InputError  # noqa: E402
from core.entry.api import (  # noqa: E402
    DEFAULT_PORT,
    Ablation,
    Comparison,
    Outliers,
    Run,
    Sample,
    analyze,
    compare,
    load,
)
from core.inputs.models import list_models  # noqa: E402

__version__ = _core.__version__


def models() -> list[dict]:
    """The built-in model identifiers (and models trained here), as `aniso models` lists them."""
    return list_models()


def corpora() -> list[dict]:
    """The built-in corpus identifiers (text, images, speech), as `aniso corpora` lists them."""
    # lazy: the corpus registries only when they are listed
    from core.inputs.corpora import list_corpora
    from core.inputs.modalities import list_modal_corpora

    return [{**c, "modality": "text"} for c in list_corpora()] + list_modal_corpora()


__all__ = ["analyze", "compare", "load", "models", "corpora", "Run", "Comparison", "Sample", "Outliers", "Ablation",
           "InputError", "DEFAULT_PORT", "__version__"]
