"""A model whose forward returns no hidden states: a clear InputError, never a traceback."""

from __future__ import annotations

import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from core.base.errors import InputError  # noqa: E402
from core.inputs.modalities.adapters import TextAdapter, hidden_states_of  # noqa: E402


class _LastOnly(torch.nn.Module):
    """Returns only the last hidden state, whatever output_hidden_states says."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)

    def forward(self, input_ids, attention_mask=None, output_hidden_states=False):
        return types.SimpleNamespace(last_hidden_state=self.emb(input_ids), hidden_states=None)


def test_text_adapter_says_the_model_returns_no_hidden_states():
    windows = types.SimpleNamespace(ids=[np.array([1, 2, 3]), np.array([4, 5])])
    with pytest.raises(InputError, match="returned no hidden states"):
        TextAdapter().forward(_LastOnly(), windows, [0, 1], "cpu")


def test_hidden_states_of_accepts_tuples_and_dicts():
    h = (torch.zeros(1, 2, 3), torch.ones(1, 2, 3))
    assert hidden_states_of(types.SimpleNamespace(hidden_states=h)) is h
    assert hidden_states_of({"hidden_states": h}) is h
    with pytest.raises(InputError):
        hidden_states_of({"last_hidden_state": h[0]})
