"""Router, dispatcher, experts and model: shapes, hand-computed losses, dropping, backends, parameter counts.

Legend: T tokens, D width, E experts, K top-k, B batch, S positions, V vocabulary.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from runners.moe.configs import ConfigError, apply_overrides, get_config, tiny
from runners.moe.dispatcher import Dispatcher, DispatcherConfig, _regroup, capacity
from runners.moe.experts import Experts, ExpertsConfig
from runners.moe.model import Transformer, param_counts
from runners.moe.router import Router, RouterConfig, load_balancing_loss
from runners.moe.timing import PhaseTimer

TIMER = PhaseTimer(enabled=False, device=torch.device("cpu"))


def test_forward_backward_shapes(kit: Any) -> None:
    torch.manual_seed(0)
    cfg = get_config("tiny", kit.MICRO)
    model = Transformer(cfg, 64, timer=TIMER)
    idx_BS = torch.randint(0, 64, (3, cfg.model.seq_len))
    logits_BSV = model(idx_BS)
    assert logits_BSV.shape == (3, cfg.model.seq_len, 64)
    stats = [layer.stats for layer in model.moe_layers]
    assert len(stats) == cfg.model.layers and all(s is not None for s in stats)
    loss = logits_BSV.logsumexp(-1).mean() + sum(s.aux_loss + s.z_loss for s in stats if s is not None)
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert missing == []
    layer = model.moe_layers[0]
    assert layer.experts.w_gate_LDF.shape == (4, 32, cfg.expert_hidden)
    assert layer.router.weight_ED is not None and layer.router.weight_ED.grad is not None


def test_aux_and_z_loss_equal_hand_computed_values() -> None:
    E, K = 4, 2
    router = Router(E, RouterConfig(num_experts=E, top_k=K))
    with torch.no_grad():
        router.weight_ED.copy_(torch.eye(E))  # type: ignore[union-attr]
    logits = [[2.0, 1.0, 0.0, 0.0], [0.0, 3.0, 1.0, 0.0], [1.0, 0.0, 0.0, 2.0]]
    routing = router(torch.tensor(logits))

    probs = [[math.exp(v) / sum(math.exp(u) for u in row) for v in row] for row in logits]
    top2 = [sorted(range(E), key=lambda e: -row[e])[:K] for row in probs]  # [[0,1],[1,2],[3,0]]
    assert [sorted(t) for t in routing.experts_TK.tolist()] == [sorted(t) for t in top2]
    n = [sum(e in t for t in top2) for e in range(E)]  # [2, 2, 1, 1]
    f = [c / (3 * K) for c in n]
    P = [sum(row[e] for row in probs) / 3 for e in range(E)]
    expected_aux = E * sum(fe * pe for fe, pe in zip(f, P, strict=True))
    expected_z = sum(math.log(sum(math.exp(v) for v in row)) ** 2 for row in logits) / 3
    assert routing.counts_E.tolist() == n
    assert routing.aux_loss.item() == pytest.approx(expected_aux, rel=1e-6)
    assert routing.z_loss.item() == pytest.approx(expected_z, rel=1e-6)
    # weights are the chosen probabilities renormalised over the k
    w0 = routing.weights_TK[0].tolist()
    assert w0 == pytest.approx(
        [probs[0][0] / (probs[0][0] + probs[0][1]), probs[0][1] / (probs[0][0] + probs[0][1])]
    )
    # a perfectly even router scores exactly 1
    even = load_balancing_loss(torch.full((8, E), 1 / E), torch.full((E,), 4))
    assert even.item() == pytest.approx(1.0)


def test_expert_bias_moves_choice_not_weights() -> None:
    router = Router(4, RouterConfig(num_experts=4, top_k=1, expert_bias=True, bias_update_rate=0.5))
    with torch.no_grad():
        router.weight_ED.copy_(torch.eye(4))  # type: ignore[union-attr]
    x_TD = torch.tensor([[1.0, 0.9, 0.0, 0.0]] * 4)
    assert router(x_TD).experts_TK.flatten().tolist() == [0, 0, 0, 0]
    router.update_bias(torch.tensor([4, 0, 0, 0]))  # expert 0 overloaded: its bias goes down
    assert router.expert_bias_E.tolist() == [-0.5, 0.5, 0.5, 0.5]
    routing = router(x_TD)
    assert routing.experts_TK.flatten().tolist() == [1, 1, 1, 1]
    p1 = math.exp(0.9) / (math.exp(1.0) + math.exp(0.9) + 2)  # the unbiased probability (top-1: Switch)
    assert routing.weights_TK.flatten().tolist() == pytest.approx([p1] * 4)


def _identity_experts(rows: torch.Tensor, per_expert: list[int]) -> torch.Tensor:
    return rows


@pytest.mark.parametrize("policy", ["position", "probs"])
def test_capacity_drops_by_policy(policy: str) -> None:
    T, D, E = 6, 3, 2
    x_TD = torch.arange(T * D, dtype=torch.float32).view(T, D) + 1
    experts_TK = torch.tensor([[0], [0], [0], [1], [0], [0]])
    weights_TK = torch.tensor([[0.1], [0.9], [0.5], [0.7], [0.8], [0.2]])
    d = Dispatcher(DispatcherConfig(E, 1, capacity_factor=1.0, drop_policy=policy), None, TIMER)  # type: ignore[arg-type]
    rows, plan = d.dispatch(x_TD, experts_TK, weights_TK)
    assert plan.capacity == capacity(1.0, T, 1, E) == 3
    assert plan.counts_E.tolist() == [5, 1]
    assert plan.dropped_E.tolist() == [2, 0]
    assert plan.rows_per_local_expert == [3, 1]
    y_TD = d.combine(_identity_experts(rows, plan.rows_per_local_expert), plan, weights_TK)
    kept = {"position": {0, 1, 2, 3}, "probs": {1, 2, 4, 3}}[policy]
    for t in range(T):
        want = x_TD[t] * weights_TK[t] if t in kept else torch.zeros(D)
        assert torch.equal(y_TD[t], want), (policy, t)


def test_topk_counts_and_dropless_keeps_everything() -> None:
    torch.manual_seed(0)
    T, D, E, K = 40, 8, 4, 2
    x_TD = torch.randn(T, D)
    router = Router(D, RouterConfig(E, K))
    routing = router(x_TD)
    assert routing.experts_TK.shape == (T, K)
    assert all(len(set(row)) == K for row in routing.experts_TK.tolist())  # k distinct experts per token
    assert int(routing.counts_E.sum()) == T * K
    d = Dispatcher(DispatcherConfig(E, K), None, TIMER)
    rows, plan = d.dispatch(x_TD, routing.experts_TK, routing.weights_TK)
    assert rows.shape == (T * K, D) and plan.dropped_E.tolist() == [0] * E
    y_TD = d.combine(rows, plan, routing.weights_TK)  # identity experts: weights sum to 1 -> y == x
    torch.testing.assert_close(y_TD, x_TD)
    d1 = Dispatcher(DispatcherConfig(E, K, capacity_factor=0.5), None, TIMER)
    _, plan1 = d1.dispatch(x_TD, routing.experts_TK, routing.weights_TK)
    C = capacity(0.5, T, K, E)
    assert (plan1.counts_E - plan1.dropped_E).tolist() == plan1.counts_E.clamp(max=C).tolist()
    assert int(plan1.dropped_E.sum()) == T * K - int(plan1.counts_E.clamp(max=C).sum()) > 0


def _experts(backend: str, L: int = 3, D: int = 8, Fe: int = 16) -> Experts:
    g = torch.Generator().manual_seed(1)
    w = (
        torch.randn(L, D, Fe, generator=g),
        torch.randn(L, D, Fe, generator=g),
        torch.randn(L, Fe, D, generator=g),
    )
    return Experts(ExpertsConfig(L, D, Fe, backend), w)  # type: ignore[arg-type]


def test_backends_compute_the_same_function() -> None:
    """loop == grouped (torch._grouped_mm, which has a CPU reference path) == padded, values and gradients."""
    torch.manual_seed(0)
    T, D, E, K = 24, 8, 3, 2
    x_TD = torch.randn(T, D)
    experts_TK = torch.stack([torch.randperm(E)[:K] for _ in range(T)])
    weights_TK = torch.softmax(torch.randn(T, K), -1)
    outs, grads = {}, {}
    for backend, cf, pad in (("loop", 4.0, False), ("grouped", 4.0, False), ("padded", 4.0, True)):
        ex = _experts(backend)
        x = x_TD.clone().requires_grad_()
        d = Dispatcher(DispatcherConfig(E, K, capacity_factor=cf, pad_to_capacity=pad), None, TIMER)
        rows, plan = d.dispatch(x, experts_TK, weights_TK)
        y = d.combine(ex(rows, plan.rows_per_local_expert), plan, weights_TK)
        y.square().sum().backward()
        outs[backend], grads[backend] = y.detach(), (x.grad, ex.w_down_LFD.grad)
    for backend in ("grouped", "padded"):
        torch.testing.assert_close(outs[backend], outs["loop"], rtol=1e-5, atol=1e-5)
        for a, b in zip(grads[backend], grads["loop"], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_regroup_source_major_to_expert_major() -> None:
    counts_RL = torch.tensor([[2, 1], [0, 3]])  # rows from rank 0: e0 x2, e1 x1; from rank 1: e1 x3
    # received order: [r0e0, r0e0, r0e1, r1e1, r1e1, r1e1] -> want [r0e0 x2, r0e1, r1e1 x3]
    assert _regroup(counts_RL).tolist() == [0, 1, 2, 3, 4, 5]
    counts_RL = torch.tensor([[1, 2], [3, 1]])  # received [a | b b | c c c | d]; expert-major: a c c c b b d
    assert _regroup(counts_RL).tolist() == [0, 3, 4, 5, 1, 2, 6]


@pytest.mark.parametrize("name", ["tiny", "tiny_dense", "tiny_shared", "tiny_g4"])
def test_param_counts_match_the_model(name: str) -> None:
    cfg = apply_overrides(get_config(name), ["moe.layer_freq=2", "model.layers=4"])
    model = Transformer(cfg, 64, timer=TIMER)
    counts = param_counts(cfg, 64)
    assert counts.total == sum(p.numel() for p in model.parameters())
    assert counts.active <= counts.total - counts.embedding


def test_dense_variant_has_the_same_active_parameters() -> None:
    moe, dense = param_counts(get_config("tiny"), 64), param_counts(get_config("tiny_dense"), 64)
    router = tiny().model.layers * tiny().model.hidden * tiny().moe.num_experts
    assert moe.active - router == dense.active
    assert moe.total > dense.total


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: RouterConfig(num_experts=4, top_k=5), "top_k"),
        (lambda: RouterConfig(num_experts=4, top_k=1, score_function="relu"), "score_function"),  # type: ignore[arg-type]
        (lambda: DispatcherConfig(4, 2, capacity_factor=0.0), "capacity_factor"),
        (lambda: DispatcherConfig(4, 2, capacity_factor=-1.0), "capacity_factor"),
        (lambda: DispatcherConfig(4, 2, pad_to_capacity=True), "pad_to_capacity"),
        (lambda: DispatcherConfig(6, 2, ep_size=4), "divisible"),
        (lambda: DispatcherConfig(4, 2, drop_policy="random"), "drop_policy"),  # type: ignore[arg-type]
        (lambda: ExpertsConfig(2, 8, 0), "expert_hidden"),
        (lambda: ExpertsConfig(2, 8, 4, backend="magic"), "backend"),  # type: ignore[arg-type]
    ],
)
def test_component_configs_reject_invalid_values(make, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        make()


def test_overrides_apply_together_and_validate() -> None:
    cfg = get_config("tiny", ["moe.num_experts=1", "moe.top_k=1", "moe.capacity_factor=none", "timing=off"])
    assert (cfg.moe.num_experts, cfg.moe.top_k, cfg.moe.capacity_factor, cfg.timing) == (1, 1, None, False)
    assert get_config("tiny", ["moe.granularity=4"]).expert_hidden == 64
    with pytest.raises(ConfigError, match="unknown override key 'moe.nope'; valid keys: .*moe.top_k"):
        get_config("tiny", ["moe.nope=1"])
    with pytest.raises(ConfigError, match="moe.top_k .* must be <= moe.num_experts"):
        get_config("tiny", ["moe.top_k=9"])
    with pytest.raises(ConfigError, match="granularity"):
        get_config("tiny", ["moe.granularity=3"])
    with pytest.raises(ConfigError, match="steps must be an integer"):
        get_config("tiny", ["steps=1.5"])
    with pytest.raises(ConfigError, match="precision must be one of fp32, bf16, fp8"):
        get_config("tiny", ["precision=fp16"])
