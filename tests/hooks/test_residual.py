"""The residual rule in-engine: the token verify commits in place of a rejected draft follows
max(p - q, 0) normalised. Its PIT there has mean 1/2 for honest draws, whatever q; a residual
drawn as its argmax (the reference decoder's ``residual_argmax``) FAILs the pooled test, and the
clean decoder never does."""

from __future__ import annotations

import torch

from specscope.collector import build_report, format_report
from specscope.collector.detectors import SamplingTruthDetector
from specscope.collector.stats import SpecStats
from specscope.engine.decoder import SpecConfig
from specscope.engine.workload import WorkloadSpec, run_workload
from specscope.hooks.stats import residual_columns
from specscope.io.trace import read_trace


def _rejections(rows: int, vocab: int, seed: int, q_full: bool, how: str):
    """Rows that each rejected their first draft: logits of 2 positions, the draft token, the
    draft's distribution (or one-hot), and the token committed in its place."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 2, vocab, generator=g) * 2.0
    p = torch.softmax(x[:, 0], dim=-1)
    q = torch.softmax(torch.randn(rows, vocab, generator=g) * 2.0, dim=-1) if q_full else None
    d = torch.multinomial(q if q is not None else p, 1, generator=g)[:, 0]
    r = (p - q).clamp_min(0.0) if q is not None else p.scatter(1, d[:, None], 0.0)
    c = r.argmax(dim=-1) if how == "argmax" else torch.multinomial(r, 1, generator=g)[:, 0]
    committed = torch.stack([c, c], dim=1)
    top = x.amax(dim=-1)
    norm = torch.exp(x - top[..., None]).sum(dim=-1)
    q_d = None if q is None else q.gather(1, d[:, None])
    out = residual_columns(x, top, torch.ones(rows), norm, torch.zeros(rows, 2), d[:, None],
                           q_d, None if q is None else q[:, None], committed,
                           torch.zeros(rows, dtype=torch.long), torch.ones(rows, 2, dtype=torch.bool))
    return out, d, committed


def test_honest_residual_draws_have_mean_pit_one_half_and_the_argmax_does_not():
    for q_full in (False, True):
        honest, _, _ = _rejections(4000, 50, 0, q_full, "sample")
        mean, sd = honest[:, 0].mean().item(), (honest[:, 1].sum().item() ** 0.5) / 4000
        assert abs(mean - 0.5) < 4 * sd, (q_full, mean, sd)
        argmax, _, _ = _rejections(4000, 50, 0, q_full, "argmax")
        assert argmax[:, 0].mean().item() < 0.3, q_full  # the most probable residual token


def test_a_row_without_a_rejection_or_greedy_or_its_draft_kept_has_no_figure_and_d_is_pit_1():
    out, d, committed = _rejections(4, 20, 1, False, "sample")
    x = torch.randn(4, 2, 20)
    top = x.amax(dim=-1)
    norm = torch.exp(x - top[..., None]).sum(dim=-1)
    args = dict(norm=norm, floor=torch.zeros(4, 2), draft_tokens=d[:, None],
                draft_token_probs=None, draft_probs=None, known=torch.ones(4, 2, dtype=torch.bool))
    accepted = torch.tensor([1, 0, 0, 0])  # row 0 accepted its one draft: no rejection
    temps = torch.tensor([1.0, 0.0, 1.0, 1.0])  # row 1 greedy
    same = torch.stack([d, d], dim=1)  # the draft committed where it was rejected: impossible
    got = residual_columns(x, top, temps, committed=same, num_accepted=accepted, **args)
    assert torch.isnan(got[:2]).all() and (got[2:, 0] == 1.0).all()
    # a sampled draft known only by its own probability: no residual without its distribution
    got = residual_columns(x, top, torch.ones(4), committed=committed, num_accepted=accepted,
                           **{**args, "draft_token_probs": torch.full((4, 1), 0.4)})
    assert torch.isnan(got).all()


def _assess(tiny, tmp_path, fault: str, rounds: int):
    records: list = []
    found: list = []
    for i in range(rounds):
        spec = WorkloadSpec(requests=16, concurrency=16, max_new_tokens=96, temperature=0.8,
                            seed=i, reference=False)
        path = run_workload(tiny, SpecConfig(num_steps=3, fault=fault), spec,
                            tmp_path / f"{fault}-{i}.jsonl", progress=False)
        records += read_trace(path).records
        checks = [a for a in SamplingTruthDetector().assess(SpecStats().observe_all(records))
                  if a.evidence.get("resid_positions")]
        found = checks
        if any(a.evidence["resid_state"] == "fail" for a in checks):
            break
    return found, records


def test_the_residual_argmax_fails_the_residual_rule_in_engine_and_the_clean_decoder_does_not(
        tiny, tmp_path):
    faulty, records = _assess(tiny, tmp_path, "residual_argmax", 12)
    assert any(a.evidence["resid_state"] == "fail" for a in faulty), [a.evidence for a in faulty]
    (a,) = [a for a in faulty if a.evidence["resid_state"] == "fail"]
    assert a.evidence["resid_mean"] < 0.5 and a.state == "fail"
    text = format_report(build_report(records))  # the report names the figure beside the rest
    assert f"residual PIT {a.evidence['resid_mean']:.3f} (honest 0.500, n " in text, text
    assert "residual_mismatch" in text
    clean, _ = _assess(tiny, tmp_path, "", 3)
    assert clean and all(a.evidence["resid_state"] != "fail" for a in clean)
    assert all(a.state != "fail" for a in clean), [a.evidence for a in clean]
    print(f"residual_argmax: FAIL over {a.evidence['resid_positions']} rejections, mean "
          f"{a.evidence['resid_mean']:.3f}; clean: {clean[0].evidence['resid_positions']} "
          f"rejections, mean {clean[0].evidence['resid_mean']:.3f}")


def test_the_residual_from_the_committed_tokens_pit_parts_equals_a_pass_over_the_vocabulary():
    """verify_columns corrects the committed token's PIT parts for the draft token removed
    (O(1) a row) where the row is untruncated and q one-hot; the same figures as a pass."""
    from specscope.hooks.stats import pit_parts

    g = torch.Generator().manual_seed(3)
    rows, vocab = 64, 40
    x = (torch.randn(rows, 3, vocab, generator=g) * 2.0).round(decimals=1)  # some exact ties
    top = x.amax(dim=-1)
    t = torch.full((rows,), 0.7)
    z = torch.exp((x - top[..., None]) / 0.7)
    d = torch.randint(0, vocab, (rows, 2), generator=g)
    committed = torch.randint(0, vocab, (rows, 3), generator=g)
    committed[:4, 1] = d[:4, 1]  # the draft itself committed at its rejection: PIT 1
    accepted = torch.tensor([1] * rows)
    parts = pit_parts(z, z.gather(-1, committed[..., None])[..., 0])
    args = dict(norm=z.sum(dim=-1), floor=torch.zeros(rows, 3), draft_tokens=d,
                draft_token_probs=None, draft_probs=None, committed=committed,
                num_accepted=accepted, known=torch.ones(rows, 3, dtype=torch.bool))
    fast = residual_columns(x, top, t, weights=z, parts=parts, **args)
    slow = residual_columns(x, top, t, **args)
    assert torch.allclose(fast, slow, atol=1e-5), (fast - slow).abs().max()
    assert (fast[:4, 0] == 1.0).all()
    # a row that asked for a truncation takes the pass (its parts are of the whole vocabulary)
    floor = torch.zeros(rows, 3)
    floor[5] = z[5].sort(dim=-1, descending=True).values[:, 9:10].squeeze(-1)  # its top 10
    cut = residual_columns(x, top, t, weights=z, parts=parts, truncated=torch.tensor([5]),
                           **{**args, "floor": floor})
    ref = residual_columns(x, top, t, **{**args, "floor": floor})
    assert torch.allclose(cut, ref, atol=1e-5, equal_nan=True)
