"""The report's comparisons of many arms (issue 21) on small inputs computed by hand: the
multi-arm table, the change of the sub-calls/room-size correlation between arms, sub-calls
against room size in tokens (and its undefined reasons), the depth table and timeout flags.

The episode rows are built directly (no run folders): the sections are pure functions of
``(arms, rows, rooms, ctx)``, so every expected value below follows from the rows by hand.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

import pytest
import scipy.stats

from rlmdistill.analysis import arms as arm_sections
from rlmdistill.analysis import sections
from rlmdistill.analysis.figure_data import report_figures
from rlmdistill.analysis.markdown import render_markdown
from rlmdistill.analysis.metrics import EpisodeMetrics
from rlmdistill.analysis.schema import ArmInfo, ArmTable, ArmTableCell, Report, RoomInfoRow
from rlmdistill.analysis.sections import SectionContext

CTX = SectionContext(resamples=2000, seed=0, confidence=0.95)
T2 = 4.302652729749464
"""t quantile at 0.975 with 2 degrees of freedom (three rooms)."""

# room -> (documents, characters, tokens; None: unknown)
SIZES: dict[str, tuple[int, int, int | None]] = {
    "A": (1, 1000, 250),
    "B": (3, 5000, None),
    "C": (8, 20000, 5000),
    "D": (2, 2000, 400),
}

Episode = tuple[float, float, bool, int, str]
"""(pass rate, coverage, memo written, sub-calls, status) of one episode."""

# arm -> room -> episodes
EPISODES: dict[str, dict[str, list[Episode]]] = {
    "base": {
        "A": [(0.2, 0.5, True, 0, "completed"), (0.4, 0.5, False, 0, "no_memo")],
        "B": [(0.5, 0.4, True, 0, "completed"), (0.5, 0.6, True, 0, "completed")],
        "C": [(0.1, 0.0, False, 0, "timeout"), (0.3, 0.0, False, 0, "timeout")],
    },
    "r1": {
        "A": [(0.6, 0.9, True, 2, "completed"), (0.8, 0.9, True, 4, "completed")],
        "B": [(0.5, 0.8, True, 6, "completed"), (0.7, 0.8, True, 6, "completed")],
        "C": [(0.4, 0.7, True, 10, "completed"), (0.4, 0.7, True, 12, "completed")],
        "D": [(1.0, 1.0, True, 1, "completed"), (1.0, 1.0, True, 1, "completed")],
    },
    "r2": {
        "A": [(0.3, 0.5, True, 1, "completed"), (0.3, 0.5, True, 1, "completed")],
        "B": [(0.2, 0.5, True, 4, "completed"), (0.4, 0.5, True, 4, "completed")],
        "C": [(0.0, 0.5, True, 2, "completed"), (0.2, 0.5, True, 2, "completed")],
    },
}
"""Room means by hand (rooms A, B, C; D is only in r1):

- pass rate: base 0.3, 0.5, 0.2 (mean 1/3); r1 0.7, 0.6, 0.4 (mean 17/30); r2 0.3, 0.3, 0.1
  (mean 7/30). Differences from base: r1 0.4, 0.1, 0.2 (mean 7/30, 3 up); r2 0, -0.2, -0.1
  (mean -0.1, 0 up / 2 down / 1 tied).
- memo rate: base 0.5, 1, 0 (mean 0.5); r1 and r2 1, 1, 1. Difference r1 - base: 0.5, 0, 1.
- read but wrote no memo (coverage > 0, no memo): base 0.5, 0, 0 (the timeouts read nothing).
- sub-calls: base 0 everywhere; r1 3, 6, 11 (D: 1); r2 1, 4, 2.
- timeouts: base C twice (2 of 6 episodes); r1 0 of 8, r2 0 of 6.
"""


def _row(arm: str, room: str, i: int, ep: Episode, depth: int = 1) -> EpisodeMetrics:
    pass_rate, coverage, memo, sub_calls, status = ep
    docs, chars, tokens = SIZES[room]
    return EpisodeMetrics(
        run_id=arm,
        episode_id=f"{arm}-{room}-{i}",
        room_id=room,
        room_hash=f"hash-{room}",
        task_id=f"task-{room}",
        sample_index=i,
        root_model=f"root-{arm}",
        sub_model="sub",
        depth=depth,
        status=status,
        grader="reference",
        pass_rate=pass_rate,
        coverage=coverage,
        docs_read=None,
        docs_read_share=None,
        room_documents=docs,
        room_chars=chars,
        room_tokens=tokens,
        n_turns=3,
        n_sub_calls=sub_calls,
        n_sub_call_errors=0,
        n_sub_batches=1 if sub_calls else 0,
        has_memo=memo,
        memo_chars=100 if memo else 0,
        memo_words=20 if memo else 0,
        early_give_up=not memo,
        read_no_memo=coverage > 0 and not memo,
        root_prompt_tokens=1000,
        root_cached_tokens=0,
        root_completion_tokens=100,
        sub_prompt_tokens=10 * sub_calls,
        sub_cached_tokens=0,
        sub_completion_tokens=sub_calls,
        sub_token_share=None,
        sub_input_share=None,
        sub_output_share=None,
        root_cost_usd=0.0,
        sub_cost_usd=0.0,
        cost_usd=0.0,
        price_table="test",
        wall_time_s=1.0,
    )


def _arm(
    label: str, rows: list[EpisodeMetrics], depth: int = 1, root: str | None = None
) -> ArmInfo:
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    return ArmInfo(
        label=label,
        run_dir=f"runs/{label}",
        run_id=label,
        root=f"openai:{root or label}@http://127.0.0.1:1/v1",
        sub="openai:sub@http://127.0.0.1:1/v1",
        root_name=root or label,
        sub_name="sub",
        depth=depth,
        grader="reference",
        n_episodes=len(rows),
        n_rooms=len({r.room_hash for r in rows}),
        status_counts=statuses,
        n_unscored=0,
    )


def _inputs(
    labels: list[str],
) -> tuple[list[ArmInfo], dict[str, list[EpisodeMetrics]], dict[str, RoomInfoRow]]:
    rows = {
        lab: [
            _row(lab, room, i, ep)
            for room, eps in EPISODES[lab].items()
            for i, ep in enumerate(eps)
        ]
        for lab in labels
    }
    arms = [_arm(lab, rows[lab]) for lab in labels]
    rooms = sections.room_labels(list(rows.values()))
    return arms, rows, rooms


def _cell(table: ArmTable, metric: str, arm: str) -> ArmTableCell:
    row = next(r for r in table.rows if r.metric == metric)
    return next(c for c in row.cells if c.arm == arm)


def test_multi_arm_table_hand_computed():
    arms, rows, rooms = _inputs(["base", "r1", "r2"])
    t = arm_sections.arm_table(arms, rows, rooms, CTX)
    assert t is not None
    assert t.baseline == "base" and t.arms == ["base", "r1", "r2"]
    assert t.rooms == ["A", "B", "C"]
    assert t.rooms_left_out == {"r1": ["D"]}
    assert [r.metric for r in t.rows] == [
        "pass_rate",
        "coverage",
        "has_memo",
        "read_no_memo",
        "n_sub_calls",
        "sub_call_error_share",
        "timeout",
    ]
    assert t.timeouts == {"base": 2, "r1": 0, "r2": 0}
    assert t.n_episodes == {"base": 6, "r1": 6, "r2": 6}  # r1's room D left out

    base = _cell(t, "pass_rate", "base")
    assert base.difference is None and base.n_episodes == 6
    assert base.mean.value == pytest.approx(1 / 3)
    # a rate: the Korn-Graubard interval. Room means 0.2, 0.3, 0.5: s^2 = 0.046667 / 2 =
    # 0.023333, s^2 / 3 = 0.0077778; n_eff = (1/3)(2/3) / 0.0077778 = 28.5714, shrunk by
    # (z / t(2))^2 = (1.959964 / 4.302653)^2 = 0.207503: n* = 5.928646, x* = n* / 3 =
    # 1.976215; Clopper-Pearson limits Beta(0.025; x*, n* - x* + 1) = 0.042431 and
    # Beta(0.975; x* + 1, n* - x*) = 0.779548 (the t interval was [0, 0.712792])
    assert (base.mean.low, base.mean.high) == (
        pytest.approx(0.042431, abs=1e-6),
        pytest.approx(0.779548, abs=1e-6),
    )
    n_star = (1 / 3) * (2 / 3) / (0.07 / 9) * (1.959963985 / T2) ** 2  # s^2 / 3 = 0.07 / 9
    assert base.mean.high == pytest.approx(
        scipy.stats.beta.ppf(0.975, n_star / 3 + 1, n_star * 2 / 3)
    )
    r1 = _cell(t, "pass_rate", "r1")
    assert r1.mean.value == pytest.approx(17 / 30)
    d = r1.difference
    assert d is not None
    assert d.keys == ["A", "B", "C"]
    assert d.differences == pytest.approx([0.4, 0.1, 0.2])
    assert d.mean_difference.value == pytest.approx(7 / 30)
    # differences 0.4, 0.1, 0.2: the same spread as the base's room means (deviations 1/6,
    # -2/15, -1/30), so the same half-width 0.379458 around 7/30 -> [-0.146125, 0.612792]
    assert (d.mean_difference.low, d.mean_difference.high) == (
        pytest.approx(-0.146125, abs=1e-6),
        pytest.approx(0.612792, abs=1e-6),
    )
    assert (d.n_improved, d.n_declined, d.n_tied) == (3, 0, 0)
    # exact Wilcoxon: W- = 0 of 3 positive ranks; two-sided p = 2 * P(W <= 0) = 2 / 8
    assert d.wilcoxon.p_value == pytest.approx(0.25)
    r2 = _cell(t, "pass_rate", "r2").difference
    assert r2 is not None
    assert r2.differences == pytest.approx([0.0, -0.2, -0.1])
    assert r2.mean_difference.value == pytest.approx(-0.1)
    assert (r2.n_improved, r2.n_declined, r2.n_tied) == (0, 2, 1)
    assert r2.wilcoxon.p_value is None
    assert r2.wilcoxon.reason == "needs >= 3 non-zero paired differences (got 2 of 3)"

    memo = _cell(t, "has_memo", "r1")
    assert _cell(t, "has_memo", "base").mean.value == pytest.approx(0.5)
    assert memo.mean.value == 1.0 and memo.difference is not None
    assert memo.difference.differences == pytest.approx([0.5, 0.0, 1.0])
    assert _cell(t, "read_no_memo", "base").mean.value == pytest.approx(1 / 6)
    assert _cell(t, "read_no_memo", "r1").mean.value == 0.0
    subs = _cell(t, "n_sub_calls", "base").mean
    assert (subs.value, subs.low, subs.high) == (0.0, 0.0, 0.0)
    assert subs.reason == "all 3 values equal 0: no spread, so an interval of width 0"
    assert _cell(t, "n_sub_calls", "r1").mean.value == pytest.approx(20 / 3)  # D left out
    timeout = _cell(t, "timeout", "base").mean
    assert timeout.value == pytest.approx(1 / 3)  # rooms 0, 0, 1
    r2_timeout = _cell(t, "timeout", "r2").difference
    assert r2_timeout is not None
    assert r2_timeout.mean_difference.value == pytest.approx(-1 / 3)
    assert arm_sections.arm_table(arms[:1], rows, rooms, CTX) is None


def test_sub_calls_vs_room_size_in_tokens_and_undefined_reasons():
    arms, rows, rooms = _inputs(["base", "r1", "r2"])
    got = {(s.arm, s.x): s for s in sections.size_correlations(arms, rows, rooms, CTX)}
    assert [x for (a, x) in got if a == "base"] == ["room_chars", "room_documents", "room_tokens"]
    for x, what in (("room_chars", "characters"), ("room_documents", "documents")):
        s = got[("base", x)]
        for c in (s.pearson, s.spearman):
            assert c.value is None
            assert c.reason == (
                f"arm base made no sub-calls in any of the 3 rooms: its correlation with room "
                f"size in {what} is undefined"
            )
    tokens = got[("base", "room_tokens")]
    assert tokens.rooms == ["A", "C"] and tokens.rooms_without_size == ["B"]
    assert tokens.xs == [250.0, 5000.0]
    assert tokens.pearson.reason == (
        "room size in tokens unknown for 1 of 3 rooms (counted only when the root model has a "
        "tokenizer at collection); 2 rooms left: a correlation needs at least 3"
    )
    r1 = got[("r1", "room_chars")]
    assert r1.rooms == ["A", "B", "C", "D"] and r1.ys == [3.0, 6.0, 11.0, 1.0]
    # ranks x [1, 3, 4, 2], y [2, 3, 4, 1]: sum d^2 = 2, rho = 1 - 6 * 2 / (4 * 15) = 0.8
    assert r1.spearman.value == pytest.approx(0.8)
    # dx = [-6000, -2000, 13000, -5000], dy = [-2.25, 0.75, 5.75, -4.25]
    assert r1.pearson.value == pytest.approx(108000 / math.sqrt(234e6 * 56.75))
    r1_tokens = got[("r1", "room_tokens")]
    assert r1_tokens.rooms == ["A", "C", "D"] and r1_tokens.rooms_without_size == ["B"]
    # tokens [250, 5000, 400], sub-calls [3, 11, 1]: ranks [1, 3, 2] and [2, 3, 1]: rho = 0.5
    assert r1_tokens.spearman.value == pytest.approx(0.5)
    flat = sections.arm_size_correlations(
        "same", [_row("same", k, 0, (0.5, 0.5, True, 2, "completed")) for k in "ABC"], rooms, CTX
    )
    assert flat[0].pearson.reason == (
        "arm same made the same mean number of sub-calls (2) in all 3 rooms: its correlation "
        "with room size in characters is undefined"
    )


def test_correlation_change_between_arms_hand_computed():
    # baseline r1 (sub-calls 3, 6, 11 on rooms A, B, C; D only in r1), arm r2 (1, 4, 2)
    arms, rows, rooms = _inputs(["r1", "r2"])
    got = {c.x: c for c in arm_sections.size_correlation_changes(arms, rows, rooms, CTX)}
    docs = got["room_documents"]
    assert (docs.a, docs.b) == ("r1", "r2")
    assert docs.rooms == ["A", "B", "C"] and docs.xs == [1.0, 3.0, 8.0]
    assert docs.ys_a == [3.0, 6.0, 11.0] and docs.ys_b == [1.0, 4.0, 2.0]
    rho = docs.spearman
    # rho_a = 1 (same order), rho_b: ranks [1, 3, 2] -> 0.5; change -0.5
    assert (rho.r_a, rho.r_b, rho.value) == (
        pytest.approx(1.0),
        pytest.approx(0.5),
        pytest.approx(-0.5),
    )
    # exhaustive over 27 resamples: 3 one-room (undefined); 6 permutations d = -0.5; two-room
    # resamples: (A, B) and (A, C) both arms rise with size, d = 0 (12); (B, C) r2 falls,
    # d = -1 - 1 = -2 (6). G(-2) = 1/4, G(-0.5) = 1/2, G(0) = 1 -> 95 % [-2, 0];
    # p = 2 min(24, 12) / 24 = 1
    assert rho.exhaustive and (rho.n_resamples, rho.n_undefined) == (27, 3)
    assert (rho.low, rho.high) == (pytest.approx(-2.0), pytest.approx(0.0))
    assert rho.p_value == pytest.approx(1.0)
    # Pearson on documents: r_a = 29 / sqrt(26 * 294/9), r_b = 1 / sqrt(26 * 42/9)
    r_a, r_b = 29 / math.sqrt(26 * 294 / 9), 1 / math.sqrt(26 * 42 / 9)
    assert docs.pearson.value == pytest.approx(r_b - r_a)
    assert (docs.pearson.low, docs.pearson.high) == (
        pytest.approx(-2.0),
        pytest.approx(0.0),
    )
    tokens = got["room_tokens"]
    assert tokens.rooms == ["A", "C"]
    assert tokens.spearman.value is None
    assert tokens.spearman.reason == (
        "room size in tokens unknown for 1 of 3 paired rooms (counted only when the root model "
        "has a tokenizer at collection); 2 rooms left: a correlation needs at least 3"
    )
    # a baseline without sub-calls: undefined, saying why
    arms, rows, rooms = _inputs(["base", "r1"])
    chars = next(
        c
        for c in arm_sections.size_correlation_changes(arms, rows, rooms, CTX)
        if c.x == "room_chars"
    )
    assert chars.pearson.value is None and chars.pearson.r_b == pytest.approx(
        # chars [1000, 5000, 20000], sub-calls [3, 6, 11]: dx = [-7667, -3667, 11333] ...
        # checked against the closed form sum(dx dy) / sqrt(sum dx^2 sum dy^2)
        _pearson([1000, 5000, 20000], [3, 6, 11])
    )
    assert chars.spearman.reason == (
        "arm base made no sub-calls in any of the 3 rooms: its correlation with room size in "
        "characters is undefined"
    )


def test_correlation_change_pairs_of_the_loop_arms_hand_computed():
    """The loop's five arms: base (no sub-calls), r1, r2 at depth 1, base and r2 at depth 2.
    Pairs: the baseline against each arm, round on round at each depth, depth 1 -> 2."""
    rows = {
        lab: [_row(lab, k, i, ep, depth=2 if lab.endswith("-d2") else 1)
              for k, eps in EPISODES[src].items() for i, ep in enumerate(eps)]
        for lab, src in [("base", "base"), ("tuned-r1", "r1"), ("tuned-r2", "r2"),
                         ("base-d2", "base"), ("tuned-r2-d2", "r1")]
    }  # fmt: skip
    roots = {"base": "q", "tuned-r1": "q+r1", "tuned-r2": "q+r2", "base-d2": "q",
             "tuned-r2-d2": "q+r2"}  # fmt: skip
    arms = [_arm(k, v, v[0].depth, root=roots[k]) for k, v in rows.items()]
    pairs = [(a.label, b.label) for a, b in arm_sections.correlation_change_pairs(arms)]
    assert pairs == [
        ("base", "tuned-r1"),
        ("base", "tuned-r2"),
        ("base", "base-d2"),
        ("base", "tuned-r2-d2"),
        ("tuned-r1", "tuned-r2"),  # round on round, depth 1
        ("base-d2", "tuned-r2-d2"),  # round on round, depth 2
        ("tuned-r2", "tuned-r2-d2"),  # depth 1 -> 2, same root
    ]
    rooms = sections.room_labels(list(rows.values()))
    got = {
        (c.a, c.b): c
        for c in arm_sections.size_correlation_changes(arms, rows, rooms, CTX)
        if c.x == "room_documents"
    }
    assert list(got) == pairs
    # tuned-r1 -> tuned-r2: sub-calls 3, 6, 11 -> 1, 4, 2 over documents 1, 3, 8 (as above)
    rho = got[("tuned-r1", "tuned-r2")].spearman
    assert (rho.r_a, rho.r_b, rho.value) == (
        pytest.approx(1.0),
        pytest.approx(0.5),
        pytest.approx(-0.5),
    )
    # tuned-r2 -> tuned-r2-d2 (r1's episodes): the reverse, +0.5; over A, B, C only (D is
    # in tuned-r2-d2 alone), so the same 27 resamples with the sign flipped: [0, 2], p = 1
    up = got[("tuned-r2", "tuned-r2-d2")]
    assert up.rooms == ["A", "B", "C"] and up.ys_b == [3.0, 6.0, 11.0]
    assert up.spearman.value == pytest.approx(0.5)
    assert (up.spearman.low, up.spearman.high) == (pytest.approx(0.0), pytest.approx(2.0))
    r_a, r_b = 1 / math.sqrt(26 * 42 / 9), 29 / math.sqrt(26 * 294 / 9)
    assert up.pearson.value == pytest.approx(r_b - r_a)
    # base-d2 made no sub-calls: its change is undefined, and says why
    assert got[("base-d2", "tuned-r2-d2")].pearson.value is None
    assert got[("base-d2", "tuned-r2-d2")].pearson.reason == (
        "arm base-d2 made no sub-calls in any of the 3 rooms: its correlation with room size "
        "in documents is undefined"
    )
    # base's timeouts (2 of 6) flag its pairs; tuned-r1/tuned-r2 (0 of 8, 0 of 6) are not
    flags = {(f.a, f.b): f.sections for f in arm_sections.timeout_flags(arms, rows)}
    assert ("tuned-r1", "tuned-r2") not in flags
    assert flags[("base-d2", "tuned-r2-d2")] == ["size_correlation_change"]
    assert flags[("base", "tuned-r1")] == ["comparison", "arm_table", "size_correlation_change"]


def test_sub_call_error_share_in_the_arm_table_hand_computed():
    """r1's sub-calls (A: 2, 4; B: 6, 6; C: 10, 12; D: 1, 1) with 1, 4 / 0, 3 / 0, 0 errors:
    shares A 0.5, 1 (room 0.75), B 0, 0.5 (0.25), C 0 (0); D left out (not run by r2)."""
    arms, rows, rooms = _inputs(["r2", "r1"])
    errors = {("A", 0): 1, ("A", 1): 4, ("B", 1): 3}
    rows["r1"] = [
        r.model_copy(update={"n_sub_call_errors": errors.get((r.room_id, r.sample_index), 0)})
        for r in rows["r1"]
    ]
    t = arm_sections.arm_table(arms, rows, rooms, CTX)
    assert t is not None
    cell = _cell(t, "sub_call_error_share", "r1")
    assert cell.mean.value == pytest.approx((0.75 + 0.25 + 0.0) / 3)
    assert cell.n_episodes == 6
    assert cell.difference is not None
    assert cell.difference.differences == pytest.approx([0.75, 0.25, 0.0])
    assert _cell(t, "sub_call_error_share", "r2").mean.value == 0.0
    # an episode without sub-calls has no share (base made none: no rooms, undefined)
    arms, rows, rooms = _inputs(["base", "r1"])
    t = arm_sections.arm_table(arms, rows, rooms, CTX)
    assert t is not None
    base = _cell(t, "sub_call_error_share", "base")
    assert base.mean.value is None and base.n_episodes == 0


def _pearson(x: list[float], y: list[float]) -> float:
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx * syy)


def test_depth_table_hand_computed():
    # depth 1: base's episodes; depth 2: r2's episodes, both under the same root and sub
    d1 = [
        _row("d1", room, i, ep)
        for room, eps in EPISODES["base"].items()
        for i, ep in enumerate(eps)
    ]
    d2 = [
        _row("d2", room, i, ep, depth=2)
        for room, eps in EPISODES["r2"].items()
        for i, ep in enumerate(eps)
    ]
    arms = [_arm("d1", d1, 1, root="root"), _arm("d2", d2, 2, root="root")]
    rows = {"d1": d1, "d2": d2}
    rooms = sections.room_labels([d1, d2])
    (ab,) = sections.depth_ablations(arms, rows, rooms, CTX)
    by = {m.metric: m for m in ab.metrics}
    assert list(by) == [
        "pass_rate",
        "coverage",
        "has_memo",
        "read_no_memo",
        "n_sub_calls",
        "sub_call_error_share",
        "timeout",
    ]
    assert by["pass_rate"].depth1.value == pytest.approx(1 / 3)
    assert by["pass_rate"].depth2.value == pytest.approx(7 / 30)
    assert by["pass_rate"].paired.mean_difference.value == pytest.approx(-0.1)
    assert by["pass_rate"].paired.mean_difference.value == ab.paired.mean_difference.value
    assert by["coverage"].depth1.value == pytest.approx((0.5 + 0.5 + 0.0) / 3)
    assert by["has_memo"].paired.differences == pytest.approx([0.5, 0.0, 1.0])
    assert by["read_no_memo"].depth2.value == 0.0
    assert by["n_sub_calls"].depth2.value == pytest.approx(7 / 3)
    assert by["timeout"].paired.differences == pytest.approx([0.0, 0.0, -1.0])
    assert (by["timeout"].n_episodes_depth1, by["timeout"].n_episodes_depth2) == (6, 6)
    assert ab.timeouts == {"d1": 2, "d2": 0}
    flags = arm_sections.timeout_flags(arms, rows, [ab])
    assert [(f.a, f.b, f.sections) for f in flags] == [
        ("d1", "d2", ["comparison", "arm_table", "size_correlation_change", "depth_ablation"])
    ]


def test_timeout_flags_compare_shares():
    arms, rows, _ = _inputs(["base", "r1", "r2"])
    flags = arm_sections.timeout_flags(arms, rows)
    assert [(f.a, f.b) for f in flags] == [("base", "r1"), ("base", "r2")]
    f = flags[0]
    assert (f.timeouts_a, f.n_episodes_a, f.timeouts_b, f.n_episodes_b) == (2, 6, 0, 8)
    assert f.note == (
        "base and r1 differ in episodes ended by the wall-clock limit (timeout): 2 of 6 vs 0 "
        "of 8; their comparison (comparison, arm_table, size_correlation_change) may reflect "
        "machine load, not only the root"
    )
    assert arm_sections.timeout_flags(arms[1:], rows) == []  # 0 of 8 and 0 of 6: equal shares
    # 1 of 2 and 2 of 4 are the same share: not flagged; 1 of 2 and 1 of 4 are
    one = [
        _row("x", "A", 0, (0.5, 0.5, False, 0, "timeout")),
        _row("x", "A", 1, EPISODES["r2"]["A"][0]),
    ]
    two = [*one, *one]
    half = [one[0], *[_row("z", "A", i, EPISODES["r2"]["A"][0]) for i in range(3)]]
    rows2 = {"x": one, "y": two, "z": half}
    assert arm_sections.timeout_flags([_arm("x", one), _arm("y", two)], rows2) == []
    (flag,) = arm_sections.timeout_flags([_arm("x", one), _arm("z", half)], rows2)
    assert (flag.timeouts_a, flag.n_episodes_a, flag.timeouts_b, flag.n_episodes_b) == (1, 2, 1, 4)


def _report(labels: list[str]) -> Report:
    arms, rows, rooms = _inputs(labels)
    metrics = sections.report_metrics(rows)
    per_arm = sections.per_arm_metrics(arms, rows, rooms, CTX, metrics)
    ablations = sections.depth_ablations(arms, rows, rooms, CTX)
    flags = arm_sections.timeout_flags(arms, rows, ablations)
    sizes = sections.size_correlations(arms, rows, rooms, CTX)
    shares = sections.token_shares(arms, rows)
    figures = report_figures(arms, rows, rooms, sizes, shares, ablations, [], [], "test")
    return Report(
        created_at=dt.datetime(2026, 12, 2, tzinfo=dt.UTC),
        settings={
            "n_resamples": CTX.resamples,
            "seed": CTX.seed,
            "confidence": CTX.confidence,
            "grader": None,
            "price_table": "test",
            "baseline": arms[0].label,
        },
        versions={"rlmdistill": "test"},
        git_commit=None,
        arms=arms,
        rooms=sorted(rooms.values(), key=lambda r: r.label),
        methods={**sections.METHODS, **arm_sections.ARM_METHODS},
        metric_descriptions={m.name: m.description for m in metrics},
        per_arm=per_arm,
        comparisons=sections.comparisons(arms, rows, rooms, CTX, per_arm),
        size_correlations=sizes,
        token_shares=shares,
        depth_ablations=ablations,
        grids=[],
        training=[],
        figures=figures,
        notes=[*sections.report_notes(arms), *(f.note for f in flags)],
        arm_table=arm_sections.arm_table(arms, rows, rooms, CTX),
        size_correlation_changes=arm_sections.size_correlation_changes(arms, rows, rooms, CTX),
        timeouts=arm_sections.timeouts(arms, rows),
        timeout_flags=flags,
    )


def test_markdown_shows_the_new_sections_from_report_json():
    report = _report(["base", "r1", "r2"])
    again = Report.model_validate_json(report.model_dump_json())
    md = render_markdown(again)
    assert md == render_markdown(report)
    assert "## Arms on the same rooms" in md
    assert "| metric | base | r1 | r1 - base | Wilcoxon p | r2 | r2 - base | Wilcoxon p |" in md
    # pass rates: Korn-Graubard intervals, as hand-computed above; differences: Student t
    assert "| pass_rate | 0.3333 [0.04243, 0.7795] (6 ep) | 0.5667 [0.1704, 0.9059] (6 ep) |" in md
    assert "0.2333 [-0.1461, 0.6128] (3/0/0) | 0.25 |" in md  # as hand-computed above
    assert (
        "Intervals: 95%; means: CI (rates: Korn-Graubard; others: t) over rooms; paired "
        "differences: Student t over rooms;"
    ) in md
    # r1's read_no_memo is 0 in all 3 rooms: a one-sided bound 1 - 0.05^(1/3) = 0.6316
    assert "| read_no_memo | 0.1667 [" in md and "| 0 [0, 0.6316] (one-sided) [" in md
    assert "all 3 rooms at 0: one-sided 95% upper bound 1 - 0.05^(1/3)" in md
    assert "rooms left out (not run by every arm): r1: D." in md
    assert "in these rooms: base 2 of 6, r1 0 of 6, r2 0 of 6." in md
    assert "## Change of the sub-calls vs room size correlation between arms" in md
    # r1 -> r2 round on round: r_a = 29 / sqrt(26 * 294/9), r_b = 1 / sqrt(26 * 42/9)
    assert (
        "| r1 | r2 | room_documents | 3 | 0.9951 -> 0.09078: -0.9043 [-2, 0] [7], p = 1; "
        "Zou undefined [5]; Steiger undefined [6] |"
    ) in md
    assert "[5] Zou's interval needs n >= 4 (got 3)" in md  # 3 rooms: the bootstrap's only
    assert "[6] Steiger's test needs n >= 4 (got 3)" in md
    assert (
        "arm base made no sub-calls in any of the 3 rooms: its correlation with room size in "
        "tokens is undefined" not in md  # tokens: too few known sizes is the reason there
    )
    assert (
        "arm base made no sub-calls in any of the 3 rooms: its correlation with room size in "
        "characters is undefined"
    ) in md
    assert "**Timeouts differ:** base and r1 differ in episodes ended by the wall-clock" in md
    assert "- base and r2 differ in episodes ended by the wall-clock limit (timeout)" in md
    assert "| base | room_tokens | 2 (1 of unknown size left out) |" in md
    figs = {f.name: f for f in report.figures}
    tokens = figs["sub_calls_vs_room_tokens"]
    assert [s.label for s in tokens.series] == ["base", "r1", "r2"]
    assert tokens.series[1].x == [250.0, 5000.0, 400.0] and tokens.series[1].ids == ["A", "C", "D"]
    assert tokens.notes[0] == "base: rooms of unknown size left out: B"
    assert figs["sub_calls_vs_room_documents"].series[0].x == [1.0, 3.0, 8.0]


def test_report_json_from_before_issue_21_still_loads_and_renders():
    """The golden fixture's report.json was recorded before issue 21 (no arm table, no
    correlation change, no timeouts, no room_tokens, depth ablations without a table)."""
    expected = Path(__file__).parent / "data" / "golden_expected.json"
    old = json.loads(expected.read_text(encoding="utf-8"))["report"]
    old |= {"created_at": "2026-01-01T00:00:00Z", "versions": {}, "git_commit": None, "figures": []}
    assert "arm_table" not in old and "timeout_flags" not in old
    report = Report.model_validate(old)
    assert report.arm_table is None and report.size_correlation_changes == []
    assert report.timeouts == {} and report.timeout_flags == []
    assert {s.x for s in report.size_correlations} == {"room_chars", "room_documents"}
    assert all(ab.metrics == [] for ab in report.depth_ablations)
    md = render_markdown(report)
    assert "## Arms on the same rooms" not in md and "## Change of the sub-calls" not in md
    assert "## Sub-calls vs room size" in md


def test_a_report_written_before_zou_and_t_renders_as_it_was_computed():
    data = json.loads(_report(["base", "r1", "r2"]).model_dump_json())
    for change in data["size_correlation_changes"]:
        for kind in ("pearson", "spearman"):
            for field in ("r_ab", "zou_low", "zou_high", "zou_reason", "steiger"):
                del change[kind][field]
    # and its means carried percentile bootstrap intervals (as every report before 2026-12-03):
    # the headings say so, not "t"
    data["methods"]["mean"] = "mean of room means; 95% interval by percentile bootstrap ..."
    md = render_markdown(Report.model_validate(data))
    assert "two-sided bootstrap p.\n" in md and "Zou [" not in md and "Zou undefined" not in md
    assert "Intervals: 95%, 2000 bootstrap resamples, seed 0." in md
    assert "## Per-arm means (mean of room means, 95% cluster-bootstrap CI over rooms)" in md
    assert "Student t" not in md.split("## Methods")[0]
    assert "| r1 | r2 | room_documents | 3 | 0.9951 -> 0.09078: -0.9043 [-2, 0] [5], p = 1 |" in md
    assert "Steiger" not in md.split("## Methods")[0]


def _drop_key(node: object, key: str) -> None:
    if isinstance(node, dict):
        node.pop(key, None)
        for v in node.values():
            _drop_key(v, key)
    elif isinstance(node, list):
        for v in node:
            _drop_key(v, key)


def test_a_report_written_with_t_intervals_for_rates_renders_as_it_was_computed():
    """Reports before the Korn-Graubard interval of rates: no ``one_sided`` field, the t
    method in ``methods``; they load and render with "t CI" headings."""
    data = json.loads(_report(["base", "r1", "r2"]).model_dump_json())
    _drop_key(data, "one_sided")
    _drop_key(data, "steiger")
    data["methods"]["mean"] = "mean of room means; interval by Student's t over the room means"
    md = render_markdown(Report.model_validate(data))
    assert "## Per-arm means (mean of room means, 95% t CI over rooms)" in md
    assert "Intervals: 95%; means and paired differences: Student t over rooms;" in md
    body = md.split("## Methods")[0]
    assert "(one-sided)" not in body and "Steiger" not in body and "Korn-Graubard" not in body
