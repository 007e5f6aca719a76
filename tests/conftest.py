"""Shared fixtures. Tests never reach a model hub: HF_HUB_OFFLINE=1 before anything imports it.

Tiers (directories; `./dev.sh test --fast` is `pytest -m fast tests/unit tests/integration core`):
- tests/unit         numpy only (tests/unit/conftest.py enforces it); every test not marked `slow` is `fast`.
- tests/integration  real torch models: tiny random ones and the built-ins. The tests of the pipeline on
                     tiny random models carry `@pytest.mark.fast` (or a fast fixture param).
- tests/app          every page through Streamlit's AppTest, on synthetic results written into the test cache
                     (tests/app/synthetic_cache.py): no model is loaded.
- tests/browser      `streamlit run` driven by Chromium, real models (marker `browser`).
- core/ doctests     `fast`.
The markers and the order (the unit tier first) are set in the repository's conftest.py.
"""

import os
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Test machines are shared: OpenBLAS/OpenMP pools that busy-wait on a contended CPU make a 768x768
# eigh or a torch index_add_ ~100x slower (6 s instead of 0.05 s). One thread each, unless set.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
# The job workers (and UMAP processes) that tests start run at niceness 0 (the worker's default; the UMAP
# process's is 10): a niced worker leads its own autogroup, and against the other pytest-xdist worker at full
# priority it gets about a tenth of a core, so a test waiting on its job mostly waits (the default browser flow
# took 263 s in the suite against 152 s alone). test_jobs checks that ANISO_WORKER_NICE=10 is honoured.
os.environ.setdefault("ANISO_WORKER_NICE", "0")
os.environ.setdefault("ANISO_UMAP_NICE", "0")
# The app's UMAP process compiles umap's kernels as the app starts (about a minute of CPU): in the tests each
# pytest-xdist worker that runs an AppTest, and the browser tier's server, did it beside the other tests, mostly
# for nothing. Off here: the tests that fit a UMAP compile what their fit needs when they fit.
os.environ.setdefault("ANISO_UMAP_WARM", "0")
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One cache for the whole session, so real-model runs are computed once and shared."""
    d = tmp_path_factory.mktemp("cache")
    os.environ["ANISO_CACHE_DIR"] = str(d)
    return d


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A tiny randomly initialised BERT saved as a local model folder (MiniLM's real tokenizer)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from core.inputs.models import minilm_folder

    d = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                     max_position_embeddings=128)
    BertModel(cfg).save_pretrained(d)
    AutoTokenizer.from_pretrained(str(minilm_folder())).save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory) -> Path:
    """A tiny randomly initialised GPT-2 causal LM saved as a local folder (GPT-2 BPE tokenizer)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from core.inputs.models import gpt2_tokenizer

    d = tmp_path_factory.mktemp("tiny-gpt2")
    torch.manual_seed(0)
    cfg = GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=128)
    GPT2LMHeadModel(cfg).save_pretrained(d)
    gpt2_tokenizer().save_pretrained(d)
    return d


def _tiny_llama(d: Path, seed: int, heads: int, kv_heads: int) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from core.inputs.models import gpt2_tokenizer

    torch.manual_seed(seed)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, vocab_size=50257, max_position_embeddings=128,
                      bos_token_id=50256, eos_token_id=50256, pad_token_id=50256)
    LlamaForCausalLM(cfg).save_pretrained(d)
    gpt2_tokenizer().save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> Path:
    """A tiny randomly initialised LLaMA causal LM (RMSNorm, rotary) as a local folder (GPT-2 BPE tokenizer)."""
    return _tiny_llama(tmp_path_factory.mktemp("tiny-llama"), seed=0, heads=2, kv_heads=2)


@pytest.fixture(scope="session")
def tiny_llama_gqa_dir(tmp_path_factory) -> Path:
    """A tiny random LLaMA with grouped-query attention (4 query heads, 2 key/value heads)."""
    return _tiny_llama(tmp_path_factory.mktemp("tiny-llama-gqa"), seed=1, heads=4, kv_heads=2)


@pytest.fixture(scope="session")
def tiny_neox_dir(tmp_path_factory) -> Path:
    """A tiny random GPT-NeoX (the Pythia architecture: fused per-head query_key_value, rotary on the
    first quarter of each head's dims, parallel residual) as a local folder (GPT-2 BPE tokenizer)."""
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from core.inputs.models import gpt2_tokenizer

    d = tmp_path_factory.mktemp("tiny-neox")
    torch.manual_seed(2)
    cfg = GPTNeoXConfig(vocab_size=50257, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, bos_token_id=50256, eos_token_id=50256,
                        pad_token_id=50256)
    GPTNeoXForCausalLM(cfg).save_pretrained(d)
    gpt2_tokenizer().save_pretrained(d)
    return d
