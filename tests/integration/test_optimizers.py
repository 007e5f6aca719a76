"""The optimizers of a training (core/studies/optimizers.py): Coupled Adam against the paper's equations written
out naively, its plain parameters against torch's AdamW, SGD as torch's, and resumes that continue identically."""

import numpy as np
import pytest
import torch
from foundation_helpers import tiny_train_spec, zipf_corpus
from torch import nn

from core.studies.optimizers import SGD_MOMENTUM, CoupledAdamW, embedding_matrices

pytestmark = pytest.mark.fast

V, D, LR, WD, B1, B2, EPS = 11, 6, 0.05, 0.1, 0.9, 0.999, 1e-8


class Toy(nn.Module):
    """An embedding, a hidden linear layer and an untied output matrix (V x D, coupled too)."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.emb = nn.Embedding(V, D)
        self.hid = nn.Linear(D, D)
        self.out = nn.Linear(D, V, bias=False)
        self.double()

    def forward(self, ids):
        return self.out(torch.tanh(self.hid(self.emb(ids))))


def toy_batches(n):
    g = torch.Generator().manual_seed(3)
    ids = [torch.randint(0, V // 2, (16,), generator=g) for _ in range(n)]  # half the vocabulary never occurs
    return [(x, (x * 3 + 1) % V) for x in ids]


def groups(model):
    """The Trainer's groups: weight decay on matrices, none on biases."""
    decay = [p for n, p in model.named_parameters() if not n.endswith("bias")]
    other = [p for n, p in model.named_parameters() if n.endswith("bias")]
    return [{"params": decay, "weight_decay": WD}, {"params": other, "weight_decay": 0.0}]


def coupled(model, **kw):
    return CoupledAdamW(groups(model), coupled=[model.emb.weight, model.out.weight], lr=LR, betas=(B1, B2), eps=EPS, **kw)


def loss_of(model, batch):
    x, y = batch
    return nn.functional.cross_entropy(model(x), y)


def naive_coupled_adam(model, batches, lrs):
    """Stollenwerk & Stollenwerk's Coupled Adam written out with numpy loops over rows: per row i,
    m_i <- b1 m_i + (1-b1) g_i, v_i <- b2 v_i + (1-b2) g_i^2; then the shared v = (1/V) sum_j v_j / (1-b2^t)
    and theta_i <- theta_i (1 - lr wd) - lr (m_i / (1-b1^t)) / (sqrt(v) + eps). Other parameters: AdamW."""
    names = dict(model.named_parameters())
    theta = {n: p.detach().numpy().copy() for n, p in names.items()}
    m = {n: np.zeros_like(t) for n, t in theta.items()}
    v = {n: np.zeros_like(t) for n, t in theta.items()}
    for t, (batch, lr) in enumerate(zip(batches, lrs), start=1):
        with torch.no_grad():
            for n, p in names.items():
                p.copy_(torch.from_numpy(theta[n]))
        model.zero_grad()
        loss_of(model, batch).backward()
        for n, p in names.items():
            g = p.grad.numpy()
            wd = 0.0 if n.endswith("bias") else WD
            theta[n] *= 1 - lr * wd
            if n in ("emb.weight", "out.weight"):
                for i in range(V):
                    m[n][i] = B1 * m[n][i] + (1 - B1) * g[i]
                    v[n][i] = B2 * v[n][i] + (1 - B2) * g[i] ** 2
                shared = sum(v[n][j] for j in range(V)) / V / (1 - B2**t)
                for i in range(V):
                    theta[n][i] -= lr * (m[n][i] / (1 - B1**t)) / (np.sqrt(shared) + EPS)
            else:
                m[n] = B1 * m[n] + (1 - B1) * g
                v[n] = B2 * v[n] + (1 - B2) * g**2
                theta[n] -= lr * (m[n] / (1 - B1**t)) / (np.sqrt(v[n] / (1 - B2**t)) + EPS)
    return theta


def run(model, opt, batches, lrs):
    for batch, lr in zip(batches, lrs):
        for g in opt.param_groups:
            g["lr"] = lr  # what the Trainer's schedule does between steps
        opt.zero_grad()
        loss_of(model, batch).backward()
        opt.step()
    return {n: p.detach().numpy().copy() for n, p in model.named_parameters()}


LRS = [LR, LR, 0.5 * LR, 0.25 * LR, 0.1 * LR]


@pytest.mark.parametrize("fused", [False, True])
def test_coupled_adam_is_the_papers_definition(fused):
    batches = toy_batches(len(LRS))
    model = Toy()
    got = run(model, coupled(model, fused=fused), batches, LRS)
    want = naive_coupled_adam(Toy(), batches, LRS)
    for n in want:
        np.testing.assert_allclose(got[n], want[n], rtol=0, atol=1e-6, err_msg=n)
    # the coupling matters: rows of tokens that never occur get no first moment, those that do all share
    # one denominator; plain AdamW gives a different embedding
    plain = Toy()
    adamw = run(plain, torch.optim.AdamW(groups(plain), lr=LR, betas=(B1, B2), eps=EPS), batches, LRS)
    assert np.abs(adamw["emb.weight"] - got["emb.weight"]).max() > 1e-3


def test_coupled_adam_leaves_other_parameters_to_adamw():
    """Driven by the same gradients, the non-embedding parameters move exactly as under torch's AdamW."""
    a, b = Toy(), Toy()
    opt_a = coupled(a, fused=True)
    opt_b = torch.optim.AdamW(groups(b), lr=LR, betas=(B1, B2), eps=EPS, fused=True)
    g = torch.Generator().manual_seed(5)
    for _ in range(6):
        for pa, pb in zip(a.parameters(), b.parameters()):
            pa.grad = torch.randn(pa.shape, generator=g, dtype=pa.dtype)
            pb.grad = pa.grad.clone()
        opt_a.step()
        opt_b.step()
    for (n, pa), pb in zip(a.named_parameters(), b.parameters()):
        if n in ("emb.weight", "out.weight"):
            assert not torch.allclose(pa, pb)
        else:
            assert torch.equal(pa, pb), n


def test_coupled_adam_resumes_from_its_state_dict():
    """A state_dict round trip (what the Trainer's optimizer.pt is) continues exactly as without the stop."""
    batches = toy_batches(6)
    straight = Toy()
    want = run(straight, coupled(straight), batches, [LR] * 6)
    first = Toy()
    opt = coupled(first)
    run(first, opt, batches[:3], [LR] * 3)
    saved = {k: v for k, v in opt.state_dict().items()}
    torch.save(saved, buf := __import__("io").BytesIO())
    second = Toy(seed=9)  # other weights: all of them come from the first model and the saved state
    second.load_state_dict(first.state_dict())
    opt2 = coupled(second)
    buf.seek(0)
    opt2.load_state_dict(torch.load(buf, weights_only=True))
    assert [g["coupled"] for g in opt2.param_groups] == [False, True, False]
    got = run(second, opt2, batches[3:], [LR] * 3)
    for n in want:
        assert np.array_equal(got[n], want[n]), n


def test_coupled_adam_refuses_what_is_not_a_matrix():
    model = Toy()
    with pytest.raises(ValueError, match="V x d"):
        CoupledAdamW(model.parameters(), coupled=[model.hid.bias], lr=LR)


def test_embedding_matrices_tied_and_untied():
    import transformers as tf

    cfg = dict(vocab_size=64, n_positions=16, n_embd=8, n_layer=1, n_head=2)
    tied = tf.GPT2LMHeadModel(tf.GPT2Config(**cfg))
    assert [tuple(p.shape) for p in embedding_matrices(tied)] == [(64, 8)]  # wte only: wpe is not a token matrix
    untied = tf.GPT2LMHeadModel(tf.GPT2Config(**cfg, tie_word_embeddings=False))
    mats = embedding_matrices(untied)
    assert len(mats) == 2 and mats[0] is untied.transformer.wte.weight and mats[1] is untied.lm_head.weight


# ----------------------------------------------------------------------------- through the Trainer
@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    return zipf_corpus(tmp_path_factory.mktemp("corpus") / "tiny.txt", n_docs=200)


tiny = tiny_train_spec


@pytest.mark.parametrize("optimizer", ["sgd", "coupled-adam"])
def test_trainer_uses_the_optimizer_and_resumes_it(corpus_file, tmp_path, optimizer):
    """Cancelled at step 3 and resumed from the Trainer's optimizer.pt: the same weights as a straight run; the
    saved state is the chosen optimizer's (SGD's momentum buffers; Coupled Adam's coupled group)."""
    from core.base.errors import Cancelled
    from core.inputs import checkpoints
    from core.studies.training import train

    spec = tiny(corpus_file, optimizer=optimizer, lr=0.05 if optimizer == "sgd" else 3e-3)
    calls = {"n": 0}

    def cancel():
        calls["n"] += 1
        return calls["n"] >= 3

    with pytest.raises(Cancelled):
        train(spec, cache_dir=tmp_path, cancel=cancel)
    folder = checkpoints.trained_dir(tmp_path) / spec.run_name()
    state = torch.load(next(folder.glob("trainer/checkpoint-*/optimizer.pt")), weights_only=True)
    if optimizer == "sgd":
        assert all(g["momentum"] == SGD_MOMENTUM for g in state["param_groups"])
        assert {g["weight_decay"] for g in state["param_groups"]} == {spec.weight_decay, 0.0}
        assert all("momentum_buffer" in s for s in state["state"].values())
    else:
        assert [g["coupled"] for g in state["param_groups"]] == [False, True, False]  # wte alone: tied head
    done = train(spec, cache_dir=tmp_path)
    straight = train(spec, cache_dir=tmp_path / "straight")
    assert done["checkpoints"][-1]["sha256"] == straight["checkpoints"][-1]["sha256"]
    assert done["optimizer"] == optimizer and done["lr"] == spec.lr and done["lr_source"] == "set by hand (--lr)"
    adamw = train(spec.replace(optimizer="adamw"), cache_dir=tmp_path / "adamw")
    assert adamw["checkpoints"][-1]["sha256"] != done["checkpoints"][-1]["sha256"]


def test_run_record_flags_a_run_that_did_not_learn(corpus_file, tmp_path):
    """unigram_entropy is the training rows' unigram entropy; a run that cannot learn (SGD at a tiny rate, 8
    steps) stays above it and is flagged; one that learns (AdamW, 120 steps) is below it."""
    from core.studies.train_spec import learned_note, unigram_entropy
    from core.studies.training import build_data, make_tokenizer, train

    stuck_spec = tiny(corpus_file, optimizer="sgd", lr=1e-4)
    stuck = train(stuck_spec, cache_dir=tmp_path)
    data = build_data(stuck_spec, make_tokenizer(stuck_spec))
    _, counts = np.unique(data.train, return_counts=True)
    p = counts / counts.sum()
    assert stuck["unigram_entropy"] == pytest.approx(-(p * np.log(p)).sum(), rel=1e-12)
    assert stuck["learned"] is False
    assert stuck["checkpoints"][-1]["held_out_loss"] >= stuck["unigram_entropy"]
    assert "not below the corpus's unigram entropy" in learned_note(stuck)
    spec = tiny(corpus_file, steps=120, lr=1e-2)
    learned = train(spec, cache_dir=tmp_path)
    assert learned["checkpoints"][-1]["held_out_loss"] < learned["unigram_entropy"]
    assert learned["learned"] is True and learned_note(learned) is None
    data = build_data(spec, make_tokenizer(spec))
    assert unigram_entropy(data.train, data.vocab_size) == learned["unigram_entropy"]
