"""Sampling-truth and draft-health statistics, computed on the device inside verify.

Imports only torch. Every function here is sync-free: it returns device tensors that the
recorder copies out with a non-blocking copy; nothing is read back on the host.
"""

from __future__ import annotations

from typing import Any

import torch

from ..schema import DRAFT_HIST_BINS, SHARP_GRID

# Column layout of the per-request row the recorder copies to the host.
COL_NUM_DRAFTED = 0
COL_NUM_DRAFT_TOKENS = 1
COL_NUM_ACCEPTED = 2
COL_NUM_VERIFIED = 3
COL_NUM_TOP1 = 4
COL_EXPECTED_TOP1 = 5
COL_VAR_TOP1 = 6
COL_HIST = 7
#: the largest target logit margin (argmax minus committed, nats at temperature 1) over the
#: verified positions where the committed token is not the argmax, -1 where there is none; and
#: the position along the verified path where it is
COL_MISMATCH_MARGIN = COL_HIST + DRAFT_HIST_BINS
COL_MISMATCH_POS = COL_MISMATCH_MARGIN + 1
#: the whole-distribution test: over the verified positions, the sum of each committed token's
#: mid-rank probability-integral transform (``pit_columns``; exactly 1/2 per position in
#: expectation under honest sampling) and the sum of each position's variance bound for it
COL_PIT_SUM = COL_MISMATCH_POS + 1
COL_PIT_VAR = COL_PIT_SUM + 1
#: the acceptance rule: over the draft positions verify tested, the sum of the probability an
#: honest verify accepts each draft token and of its variance (``acceptance_columns``)
COL_ACCEPT_EXPECTED = COL_PIT_VAR + 1
COL_ACCEPT_VAR = COL_ACCEPT_EXPECTED + 1
#: verified positions whose committed token lies outside the requested truncation (top-k /
#: top-p) by more than ``OUTSIDE_MARGIN``: impossible under honest sampling
COL_OUTSIDE = COL_ACCEPT_VAR + 1
#: the residual rule at a rejected draft (``residual_columns``): the mid-rank PIT of the token
#: verify committed in its place, in the request's distribution without the draft token, and
#: its variance bound; NaN where the step rejected none (or the draft is not deterministic)
COL_RESID_PIT = COL_OUTSIDE + 1
COL_RESID_VAR = COL_RESID_PIT + 1
#: the sharpness test (``specscope.sharp``): the verified positions it read, then for each
#: alternative temperature on its grid the sum of the log likelihood ratios there
#: (``sharpness_columns``)
COL_SHARP_N = COL_RESID_VAR + 1
COL_SHARP_LLR = COL_SHARP_N + 1
ROW_WIDTH = COL_SHARP_LLR + len(SHARP_GRID)
#: the most probable tokens per position the sharpness test reads (its set S): one top-k over
#: the vocabulary; 16 keeps what the test decides on recorded real-engine traffic within 2% of
#: the whole vocabulary's rate, where 8 lost a fifth
SHARP_K = 16
#: nats (logits at temperature 1): a token counts as outside the truncation only where its
#: logit trails the least one kept by more than this (bfloat16's tie margin: the engine's
#: own cut, in its own arithmetic, may keep a token at the edge that ours drops)
OUTSIDE_MARGIN = 0.25


def expected_top1(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor | None = None,
    top_k: torch.Tensor | None = None,
) -> torch.Tensor:
    """p_max of the distribution each request asked for, per position: shape ``[B, P]``.

    ``p_max = 1 / sum(exp((x - max x) / T))`` over the temperature-scaled target logits, after
    the requested top-k / top-p truncation and renormalisation (both raise p_max). Greedy rows
    (T = 0) get 1. ``top_p``/``top_k`` are None when no request in the batch uses them; then the
    cost is one logsumexp over the vocabulary, else one sort.
    """
    x = logits.float()
    t = temperature.to(x.dtype).clamp_min(1e-6)[:, None, None]
    if top_p is None and top_k is None:
        y = x / t
        # p_max = exp(max y - logsumexp y): one scaled copy, one max pass, one logsumexp
        p_max = torch.exp(y.amax(dim=-1) - torch.logsumexp(y, dim=-1))
    else:
        z = (x - x.amax(dim=-1, keepdim=True)) / t  # max entry is exactly 0
        zs, _ = torch.sort(z, dim=-1, descending=True)
        keep = torch.ones_like(zs, dtype=torch.bool)
        rank = torch.arange(zs.shape[-1], device=zs.device)
        if top_k is not None:
            k = top_k.to(zs.device)
            k = torch.where(k > 0, k, torch.full_like(k, zs.shape[-1]))
            keep &= rank[None, None, :] < k[:, None, None]
        if top_p is not None:
            probs = torch.softmax(zs.masked_fill(~keep, float("-inf")), dim=-1)
            before = torch.cumsum(probs, dim=-1) - probs  # mass strictly above this token
            keep &= before < top_p.to(zs.dtype)[:, None, None]
        p_max = torch.exp(-torch.logsumexp(zs.masked_fill(~keep, float("-inf")), dim=-1))
    greedy = (temperature <= 0)[:, None]
    return torch.where(greedy, torch.ones_like(p_max), p_max)


def pit_columns(weights: torch.Tensor, chosen: torch.Tensor,
                total: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The committed token's mid-rank PIT and a bound on its variance, per position.

    ``weights`` ``[..., V]`` are the position's unnormalised probabilities (0 outside a
    truncation), ``chosen`` ``[...]`` the committed token's weight (its own value, tied tokens
    included), ``total`` the normaliser (by default the weights' sum). Tokens are ranked from
    the most probable down; the transform is the mass ranked above the committed token plus half
    the mass of its tie group: ``u = (sum w[w > c] + sum w[w >= c]) / (2 sum w)``. For a token
    drawn from the distribution, ``E[u] = 1/2`` exactly (ties included) and ``Var[u] = (1 -
    sum g^3) / 12`` over the tie groups' masses g, at most ``(1 - sum p^3) / 12``, the second
    figure returned. A token outside the truncation ranks below all of it: u = 1. Three
    reductions over the vocabulary, no sort."""
    return pit_of(*pit_parts(weights, chosen, total))


def pit_parts(weights: torch.Tensor, chosen: torch.Tensor,
              total: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """What ``pit_columns`` reduces the vocabulary to: the mass ranked above the committed
    token, its tie group's mass, the normaliser and the sum of cubed weights. A token's
    removal from the distribution (``residual_columns``) is a correction of these, no new pass
    over the vocabulary."""
    c = chosen[..., None]
    s = weights.sum(dim=-1) if total is None else total
    # products with the comparison masks, and cubes as products: on a CPU these run several
    # times faster than torch.where over a broadcast zero or a 3-norm
    above = (weights * (weights > c)).sum(dim=-1)
    # the tie group: the committed token and any of exactly its weight
    tie = chosen * (weights == c).sum(dim=-1).to(weights.dtype)
    return above, tie, s, (weights * weights * weights).sum(dim=-1)


def pit_of(above: torch.Tensor, tie: torch.Tensor, s: torch.Tensor,
           cubes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The PIT and its variance bound from ``pit_parts``."""
    return (above + 0.5 * tie) / s, (1.0 - cubes / (s * s * s)).clamp_min(0.0) / 12.0


#: the largest tokens a truncated distribution's p_max is computed from (``expected_top1_topk``)
TOPK_WIDTH = 1024


def expected_top1_topk(logits: torch.Tensor, temperature: torch.Tensor,
                       top_p: torch.Tensor | None, top_k: torch.Tensor | None,
                       width: int = TOPK_WIDTH, committed: torch.Tensor | None = None) -> Any:
    """``expected_top1`` for rows that asked for top-k or top-p, from the ``width`` largest
    logits instead of a sort of the whole vocabulary (top-k then top-p, as ``expected_top1``).
    NaN where that is not enough to know it (a nucleus reaching past ``width`` tokens, or a
    top-k wider than it): the row's statistics are then unknown, never guessed.

    With ``committed`` (``[B, P]`` tokens): (p_max, PIT, PIT variance bound) of those tokens in
    the truncated distribution (``pit_columns``), NaN where p_max is."""
    x = logits.float()
    v = x.shape[-1]
    t = temperature.to(x.dtype).clamp_min(1e-6)[:, None, None]
    z = (x - x.amax(dim=-1, keepdim=True)) / t  # max entry is exactly 0
    w = min(width, v)
    zs = torch.topk(z, w, dim=-1).values  # sorted, largest first
    rows = zs.shape[0]
    k = top_k.to(zs.device) if top_k is not None else torch.zeros(rows, dtype=torch.long,
                                                                   device=zs.device)
    p = top_p.to(zs.device, zs.dtype) if top_p is not None else torch.ones(rows, device=zs.device)
    k_on, p_on = (k > 0) & (k < v), p < 1.0
    rank = torch.arange(w, device=zs.device)
    keep = ~k_on[:, None, None] | (rank[None, None, :] < k[:, None, None])
    whole = torch.exp(z).sum(dim=-1)  # the untruncated normaliser
    e = torch.exp(zs.masked_fill(~keep, float("-inf")))
    # the nucleus is taken from the top-k set (its mass the normaliser), or from the whole
    # vocabulary where top-k is off
    probs = e / torch.where(k_on[:, None], e.sum(dim=-1), whole)[..., None]
    before = torch.cumsum(probs, dim=-1) - probs
    keep = keep & (~p_on[:, None, None] | (before < p[:, None, None]))
    p_max = torch.exp(-torch.logsumexp(zs.masked_fill(~keep, float("-inf")), dim=-1))
    # untruncated rows: the whole vocabulary's p_max
    untruncated = (~k_on & ~p_on)[:, None]
    p_max = torch.where(untruncated, torch.reciprocal(whole), p_max)
    unknown = torch.zeros_like(p_max, dtype=torch.bool)
    if w < v:
        unknown |= (k_on & (k > w))[:, None]  # the top-k set wider than the width
        # top-p over the whole vocabulary whose mass within the width is short of top_p: the
        # nucleus goes on past it
        unknown |= (~k_on & p_on)[:, None] & (probs.sum(dim=-1) < p[:, None])
    nan = torch.full_like(p_max, float("nan"))
    if committed is None:
        return torch.where(unknown, nan, p_max)
    zc = z.gather(-1, committed.clamp(0, v - 1).long()[..., None])[..., 0]
    kept = torch.exp(zs.masked_fill(~keep, float("-inf")))
    # an untruncated row ranks its token against the whole vocabulary's mass; past the width
    # its rank is unknown
    norm = torch.where(untruncated, whole, kept.sum(dim=-1))
    u, var = pit_columns(kept, torch.exp(zc), norm)
    if w < v:
        unknown = unknown | (untruncated & (zc < zs[..., -1]))
    # the smallest weight the truncation keeps (0 where nothing is cut): a token's probability
    # in the truncated distribution is its weight over ``norm`` at or above it, else 0
    floor = torch.where(untruncated, torch.zeros_like(norm),
                        kept.masked_fill(~keep, float("inf")).amin(dim=-1))
    return (torch.where(unknown, nan, p_max), torch.where(unknown, nan, u),
            torch.where(unknown, nan, var), norm, floor)


def truth_columns(
    logits: torch.Tensor,
    committed: torch.Tensor,
    num_accepted: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor | None = None,
    top_k: torch.Tensor | None = None,
) -> torch.Tensor:
    """``[B, 4]``: verified positions, committed == argmax count, sum of p_max, sum of variance.

    ``logits`` is ``[B, P, V]`` (target logits at the P = drafted + 1 positions along the verified
    path), ``committed`` is ``[B, P]`` (the tokens verify committed there; only the first
    ``num_accepted + 1`` count: the accepted drafts plus the bonus/correction token).
    """
    positions = torch.arange(committed.shape[1], device=committed.device)
    valid = (positions[None, :] <= num_accepted[:, None]).to(torch.float32)
    is_top1 = (committed == logits.argmax(dim=-1)).to(torch.float32)
    p_max = expected_top1(logits, temperature, top_p, top_k)
    return torch.stack(
        [
            valid.sum(dim=1),
            (is_top1 * valid).sum(dim=1),
            (p_max * valid).sum(dim=1),
            (p_max * (1.0 - p_max) * valid).sum(dim=1),
        ],
        dim=1,
    )


def mismatch_columns(logits: torch.Tensor, committed: torch.Tensor,
                     num_accepted: torch.Tensor) -> torch.Tensor:
    """``[B, 2]``: the largest logit margin by which a committed token trails its position's
    argmax (nats; -1 where every verified position committed the argmax) and that position.

    A greedy request's mismatch within the dtype's tie margin is a numerical tie; beyond it, the
    target was firmly against the token verify committed. One gather and one max over the
    verified path, no sort."""
    positions = torch.arange(committed.shape[1], device=committed.device)
    valid = positions[None, :] <= num_accepted[:, None]
    x = logits.float()
    top = x.amax(dim=-1)
    safe = committed.clamp(0, x.shape[-1] - 1).long()
    chosen = x.gather(-1, safe[..., None])[..., 0]
    margin = torch.where(valid & (chosen < top), top - chosen, torch.full_like(top, -1.0))
    worst, where = margin.max(dim=1)
    return torch.stack([worst, where.to(worst.dtype)], dim=1)


def verify_columns(
    logits: torch.Tensor,
    committed: torch.Tensor,
    num_accepted: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor | None = None,
    top_k: torch.Tensor | None = None,
    scratch: torch.Tensor | None = None,
    truncated: torch.Tensor | None = None,
    draft_tokens: torch.Tensor | None = None,
    draft_token_probs: torch.Tensor | None = None,
    draft_probs: torch.Tensor | None = None,
) -> torch.Tensor:
    """``truth_columns`` and ``mismatch_columns`` in one, the whole-distribution test and the
    acceptance rule, the residual rule and the sharpness test: ``[B, 13 + len(GRID)]``, the
    columns ``COL_NUM_VERIFIED`` .. ``COL_VAR_TOP1``, ``COL_MISMATCH_MARGIN``,
    ``COL_MISMATCH_POS``, ``COL_PIT_SUM``, ``COL_PIT_VAR``, ``COL_ACCEPT_EXPECTED``,
    ``COL_ACCEPT_VAR``, ``COL_OUTSIDE``, ``COL_RESID_PIT``, ``COL_RESID_VAR``, ``COL_SHARP_N`` and
    the ``COL_SHARP_LLR`` block (``sharpness_columns``; ``acceptance_columns`` and
    ``residual_columns``, with ``draft_probs`` ``[B, P - 1, V]``, the draft's whole
    distribution, where the engine has one; NaN without
    ``draft_tokens``, ``[B, P - 1]``, -1 where a row drafted fewer; ``draft_token_probs``: the
    draft's probability of each, None for a deterministic draft).

    Fewer passes over the ``[B, P, V]`` logits than the parts apart: one max gives both the
    argmax and its logit; without truncation p_max is ``1 / sum(exp((x - max x) / T))``, one
    shifted copy scaled and exponentiated in place and one sum (the same figure as
    ``exp(max y - logsumexp y)``); the committed logit is one gather; the PIT reads the same
    exponentiated copy (``pit_columns``: three more reductions). ``scratch``: a float32 buffer
    of the logits' shape for the shifted copy (else one is allocated). ``truncated``: the rows
    that asked for top-k or top-p (an index on the device), the only ones that take the
    truncated path (``expected_top1_topk``); without it, every row takes the full sort
    (``expected_top1``) when ``top_p`` or ``top_k`` is given."""
    x = logits.float()
    top, arg = x.max(dim=-1)
    positions = torch.arange(committed.shape[1], device=committed.device)
    valid = positions[None, :] <= num_accepted[:, None]
    validf = valid.to(torch.float32)
    safe = committed.clamp(0, x.shape[-1] - 1).long()
    if (top_p is None and top_k is None) or truncated is not None:
        t = temperature.to(x.dtype).clamp_min(1e-6)[:, None, None]
        z = torch.sub(x, top[..., None], out=scratch) if scratch is not None \
            else torch.sub(x, top[..., None])
        z.div_(t).exp_()
        total = z.sum(dim=-1)
        p_max = torch.reciprocal(total)
        p_max = torch.where((temperature <= 0)[:, None], torch.ones_like(p_max), p_max)
        parts = pit_parts(z, z.gather(-1, safe[..., None])[..., 0], total)
        u, u_var = pit_of(*parts)
        norm, floor, weights = total, torch.zeros_like(total), z
        if truncated is not None and truncated.numel():
            cut_max, cut_u, cut_var, cut_norm, cut_floor = expected_top1_topk(
                logits.index_select(0, truncated), temperature.index_select(0, truncated),
                None if top_p is None else top_p.index_select(0, truncated),
                None if top_k is None else top_k.index_select(0, truncated),
                committed=committed.index_select(0, truncated))
            p_max = p_max.index_copy(0, truncated, cut_max)
            u = u.index_copy(0, truncated, cut_u)
            u_var = u_var.index_copy(0, truncated, cut_var)
            norm = norm.index_copy(0, truncated, cut_norm)
            floor = floor.index_copy(0, truncated, cut_floor)
    else:
        weights = parts = None
        p_max = expected_top1(logits, temperature, top_p, top_k)
        _, u, u_var, norm, floor = expected_top1_topk(logits, temperature, top_p, top_k,
                                                      width=x.shape[-1], committed=committed)
    chosen = x.gather(-1, safe[..., None])[..., 0]
    is_top1 = (committed == arg).to(torch.float32)
    margin = torch.where(valid & (chosen < top), top - chosen, torch.full_like(top, -1.0))
    worst, where = margin.max(dim=1)
    zero = torch.zeros_like(p_max)
    pv = torch.where(valid, p_max, zero)  # NaN (unknown) only where verified
    # a committed token below the truncation's least kept weight by more than the margin
    t_cols = temperature.to(x.dtype).clamp_min(1e-6)[:, None]
    w_c = torch.exp((chosen - top) / t_cols)
    outside = valid & (w_c < floor * torch.exp(-OUTSIDE_MARGIN / t_cols)) & \
        (temperature > 0)[:, None]
    if draft_tokens is None:
        accept = torch.full((x.shape[0], 2), float("nan"), device=x.device)
    else:
        accept = acceptance_columns(x, top, temperature, norm, floor, draft_tokens,
                                    draft_token_probs, num_accepted)
    if draft_tokens is None:
        resid = torch.full((x.shape[0], 2), float("nan"), device=x.device)
    else:
        resid = residual_columns(x, top, temperature, norm, floor, draft_tokens,
                                 draft_token_probs, draft_probs, safe, num_accepted,
                                 torch.isfinite(p_max), weights, parts, truncated)
    sharp = sharpness_columns(x, top, temperature, floor, safe, valid)
    return torch.cat([torch.stack([validf.sum(dim=1), (is_top1 * validf).sum(dim=1),
                                   pv.sum(dim=1), (pv * (1.0 - pv)).sum(dim=1), worst,
                                   where.to(worst.dtype), torch.where(valid, u, zero).sum(dim=1),
                                   torch.where(valid, u_var, zero).sum(dim=1)], dim=1),
                      accept, outside.to(torch.float32).sum(dim=1, keepdim=True), resid, sharp],
                     dim=1)


def acceptance_columns(x: torch.Tensor, top: torch.Tensor, temperature: torch.Tensor,
                       norm: torch.Tensor, floor: torch.Tensor, draft_tokens: torch.Tensor,
                       draft_token_probs: torch.Tensor | None,
                       num_accepted: torch.Tensor) -> torch.Tensor:
    """``[B, 2]``: over the draft positions verify tested (each row's first ``num_accepted +
    1``, at most its drafts), the sum of the probability an honest verify accepts each draft
    token, a = min(1, p / q), and of a (1 - a). p: the token's probability in the distribution
    the request asked for (weights ``exp((x - top) / T)`` over ``norm``, 0 below the
    truncation's ``floor``); q: the draft's probability of it (1 for a deterministic draft:
    n-gram, greedy drafting; and where verify accepts a draft only when a sample of p equals
    it). The accepted count is then Poisson-binomial with these probabilities. Greedy rows
    are NaN (their acceptance is not random). One gather over the logits."""
    d = x.shape[1] - 1
    tok = draft_tokens[:, :d]
    drafted = tok >= 0
    t = temperature.to(x.dtype).clamp_min(1e-6)[:, None]
    w = torch.exp((x[:, :d].gather(-1, tok.clamp(0, x.shape[-1] - 1).long()[..., None])[..., 0]
                   - top[:, :d]) / t)
    p = torch.where(w >= floor[:, :d], w / norm[:, :d], torch.zeros_like(w))
    q = torch.ones_like(p) if draft_token_probs is None else \
        draft_token_probs[:, :d].to(p.dtype).clamp_min(1e-30)
    a = torch.clamp(p / q, max=1.0)
    positions = torch.arange(d, device=x.device)
    tried = drafted & (positions[None, :] <= num_accepted[:, None])
    zero = torch.zeros_like(a)
    out = torch.stack([torch.where(tried, a, zero).sum(dim=1),
                       torch.where(tried, a * (1.0 - a), zero).sum(dim=1)], dim=1)
    return torch.where((temperature > 0)[:, None], out, torch.full_like(out, float("nan")))


def residual_columns(x: torch.Tensor, top: torch.Tensor, temperature: torch.Tensor,
                     norm: torch.Tensor, floor: torch.Tensor, draft_tokens: torch.Tensor,
                     draft_token_probs: torch.Tensor | None, draft_probs: torch.Tensor | None,
                     committed: torch.Tensor, num_accepted: torch.Tensor,
                     known: torch.Tensor, weights: torch.Tensor | None = None,
                     parts: tuple[torch.Tensor, ...] | None = None,
                     truncated: torch.Tensor | None = None) -> torch.Tensor:
    """``[B, 2]``: where verify rejected a draft (a row that accepted fewer than it drafted),
    the mid-rank PIT of the token it committed in the draft's place and the PIT's variance
    bound (``pit_columns``), in the residual distribution max(p - q, 0) normalised. p: the
    request's distribution (weights ``exp((x - top) / T)`` over ``norm``, 0 below the
    truncation's ``floor``); q: the draft's, ``draft_probs`` ``[B, D, V]`` where given, else
    one-hot at the draft token d (a deterministic draft, ``draft_token_probs`` None: n-gram,
    greedy drafting; or rows whose draft probability is 1: a verify that accepts a draft only
    where a sample of p equals it), where the residual is p without d. Under honest verify the
    PIT's mean is 1/2 exactly; a residual drawn as the argmax, from the untruncated or untempered
    distribution, or with d left in, moves it. A committed token with no residual mass (d
    itself) has PIT 1. NaN where there is no rejection, the row is greedy, its q is unknown or
    its distribution at the rejected position is not ``known`` (``[B, P]``). ``weights``: the ``[B, P, V]`` weights at the requested
    temperature where the caller has them already (``verify_columns``), else computed here from
    one position's logits per row. ``parts``: ``pit_parts`` of the committed tokens in those
    weights, untruncated; with them, a row that asked for no truncation (not in ``truncated``)
    under a one-hot q takes its residual PIT as their correction for the draft token removed,
    O(1) a row; the others cost one position's PIT, a pass over the vocabulary, taken only where
    a row of the step needs it (a sampled draft's q, a truncation)."""
    d = x.shape[1] - 1
    if d < 1:
        return torch.full((x.shape[0], 2), float("nan"), device=x.device)
    rows = torch.arange(x.shape[0], device=x.device)
    drafted = (draft_tokens[:, :d] >= 0).sum(dim=1)
    j = num_accepted.clamp(0, d - 1).long()  # the first rejected position, where there is one
    use = (num_accepted < drafted) & (temperature > 0) & known[rows, j]
    tok = draft_tokens[rows, j].clamp(0, x.shape[-1] - 1).long()
    c = committed[rows, j]
    # q is one-hot only where the draft's probability of its token is 1
    if draft_token_probs is not None:
        one_hot = draft_token_probs[rows, j] >= 1.0
    elif draft_probs is not None:
        one_hot = draft_probs[rows, j, tok] >= 1.0
    else:
        one_hot = torch.ones_like(use)
    if draft_probs is None:
        use = use & one_hot
    out = None
    if parts is not None and weights is not None:
        # p without d, as a correction of the committed token's PIT parts at j
        above, tie, s, cubes = (part[rows, j] for part in parts)
        w_d = weights[rows, j, tok]
        w_c = weights[rows, j, c]
        u, var = pit_of(above - w_d * (w_d > w_c), tie - w_c * (w_d == w_c), s - w_d,
                        cubes - w_d * w_d * w_d)
        u = torch.where(c == tok, torch.ones_like(u), u)  # d itself: no residual mass
        # where d held nearly all the mass, the cubes' difference is float32 rounding: the
        # variance takes its bound for any distribution, 1/12, never an understatement
        var = torch.where(w_d > 0.9 * s, torch.full_like(var, 1.0 / 12.0), var)
        out = torch.stack([u, var], dim=1)
    exact = torch.zeros_like(use) if out is None else one_hot
    if out is None or draft_probs is not None or (truncated is not None and truncated.numel()):
        # a pass over one position's vocabulary: the rows the correction does not cover
        if weights is not None:
            w = weights[rows, j]
        else:
            t = temperature.to(x.dtype).clamp_min(1e-6)[:, None]
            w = torch.exp((x[rows, j] - top[rows, j][:, None]) / t)
        w = w * (w >= floor[rows, j][:, None])
        r = w.scatter(1, tok[:, None], 0.0)  # q one-hot at d: p without d
        if draft_probs is not None:
            full = (w / norm[rows, j][:, None] - draft_probs[rows, j].to(w.dtype)).clamp_min(0.0)
            r = torch.where(one_hot[:, None], r, full)
        u, var = pit_columns(r, r.gather(1, c[:, None])[:, 0])
        slow = torch.stack([u, var], dim=1)
        if truncated is not None and truncated.numel():
            exact = exact.index_fill(0, truncated, False)
        out = slow if out is None else torch.where(exact[:, None], out, slow)
    return torch.where(use[:, None], out, torch.full_like(out, float("nan")))


def sharpness_columns(x: torch.Tensor, top: torch.Tensor, temperature: torch.Tensor,
                      floor: torch.Tensor, committed: torch.Tensor,
                      valid: torch.Tensor) -> torch.Tensor:
    """``[B, 1 + len(GRID)]``: the verified positions the sharpness test read (``specscope.sharp``)
    and, for each alternative c on its grid, the sum over them of log p_c(x | S) - log p_1(x | S),
    where p_1 is the distribution the request asked for, p_c the same at c times its temperature,
    x the committed token and S the position's ``SHARP_K`` most probable tokens less any at the
    edge of the truncation (weight within ``OUTSIDE_MARGIN`` of ``floor``, the least kept weight
    at the request's temperature; 0 where nothing is cut): a set fixed before the draw and inside
    what the engine samples from, so the ratio has mean 1 under honest sampling whatever the
    rest of the vocabulary holds. A position counts only where x lies in S (S of two tokens or
    more); greedy rows read nothing. One top-k over the vocabulary, the rest on ``SHARP_K``
    tokens a position."""
    k = min(SHARP_K, x.shape[-1])
    vals, idx = torch.topk(x, k, dim=-1)
    t = temperature.to(x.dtype).clamp_min(1e-6)[:, None, None]
    y = (vals - top[..., None]) / t  # log weights at the requested temperature, top at 0
    edge = torch.log(floor.clamp_min(1e-38))[..., None] + OUTSIDE_MARGIN / t
    in_s = torch.isfinite(y) & ((floor <= 0)[..., None] | (y > edge))
    hit = in_s & (idx == committed[..., None])
    use = valid & hit.any(dim=-1) & (in_s.sum(dim=-1) >= 2) & (temperature > 0)[:, None]
    yc = torch.where(hit, y, torch.zeros_like(y)).sum(dim=-1)  # the committed token's
    ym = y.masked_fill(~in_s, float("-inf"))
    grid = torch.tensor(SHARP_GRID, dtype=x.dtype, device=x.device)
    lse = torch.logsumexp(ym[..., None, :] / grid[:, None], dim=-1)  # [B, P, G]
    base = yc - torch.logsumexp(ym, dim=-1)
    llr = yc[..., None] / grid - lse - base[..., None]
    llr = torch.where(use[..., None], llr, torch.zeros_like(llr))
    return torch.cat([use.to(x.dtype).sum(dim=1, keepdim=True), llr.sum(dim=1)], dim=1)


def draft_hist_columns(draft_top1: torch.Tensor) -> torch.Tensor:
    """``[B, DRAFT_HIST_BINS]`` counts of the draft's top-1 probability per drafted position.

    Ten equal bins on [0, 1) and a last bin for exactly 1.0, so a draft whose probabilities were
    hard-coded rather than computed stands out. NaN lands in bin 0. A negative entry marks a
    position the row did not draft (rows of one step may draft different numbers of tokens) and
    is not counted.
    """
    raw = draft_top1.float()
    p = torch.nan_to_num(raw, nan=0.0)
    bins = (p * 10).floor().clamp(0, 9).long()
    bins = torch.where(p >= 1.0, torch.full_like(bins, DRAFT_HIST_BINS - 1), bins)
    counts = torch.zeros(p.shape[0], DRAFT_HIST_BINS, device=p.device, dtype=torch.float32)
    return counts.scatter_add_(1, bins, (p >= 0).to(torch.float32))
