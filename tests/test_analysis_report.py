"""``rlmdistill report`` over real runs made by the collector against the fake server.

Every number checked here is recomputed independently from the run files (episodes.jsonl,
verdicts/*.jsonl, task.json) with scipy/numpy, and each figure is checked by its data in
report.json, not by its pixels.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
import typer
from conftest import CUAD_SOURCE, ROOT_SCRIPT
from typer.testing import CliRunner

from rlmdistill.analysis.cli import register
from rlmdistill.analysis.main import ReportConfig
from rlmdistill.analysis.main import run as report_stage
from rlmdistill.collect.config import CollectConfig, EpisodeLimits
from rlmdistill.collect.runner import collect
from rlmdistill.harness.prompts import SUBAGENT_SYSTEM_PROMPT
from rlmdistill.judge.reference import ReferenceGrader
from rlmdistill.judge.run import judge_run
from rlmdistill.models.base import Sampling
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.rooms.cuad import build_cuad_room
from rlmdistill.stats import ema
from rlmdistill.testing.fake_openai import FakeOpenAIServer, conversation_turn


# ----------------------------------------------------------------------------- scripted roots
def _task(room: Path) -> dict:
    return json.loads((room / "task.json").read_text(encoding="utf-8"))


def _gold_memo(task: dict, keep) -> str:  # type: ignore[no-untyped-def]
    """A memo quoting the labelled clause of each kept criterion next to its document."""
    parts = ["# Memo"]
    for i, c in enumerate(task["criteria"]):
        ev = c.get("evidence") or {}
        if keep(i, c) and ev.get("spans"):
            quote = " ".join(ev["spans"][0].split()[:14])  # 8 words make a quote; stay short
            parts.append(f'## {ev["documents"][0]}\n\n{ev["category"]}: "{quote}"')
    return "\n\n".join(parts) + "\n"


class Roots:
    """Scripted models of the fake server, per room (identified by its document ids).

    - ``base``: the conftest root (reads every document in one batch, pastes the answers).
    - ``tuned``: reads every document in one batch, then quotes the gold clause of every
      second criterion (depth 2: only every fourth, since subagent answers come back).
    - ``lazy``: reads only the first document, then quotes the gold clauses of that document.
    - sub models answer with a fixed sentence; depth-2 subagents answer at once.
    """

    def __init__(self, rooms: list[Path]) -> None:
        self.tasks = {}
        for room in rooms:
            task = _task(room)
            docs = sorted({d for c in task["criteria"] for d in c["evidence"]["documents"]})
            self.tasks[tuple(docs)] = task

    def _room_task(self, req: dict) -> dict:
        first_user = conversation_turn(req)[0]
        for docs, task in self.tasks.items():
            if all(d in first_user for d in docs):
                return task
        raise AssertionError("request for an unknown room")

    def __call__(self, req: dict) -> str:
        msgs = req["messages"]
        model = req["model"]
        if msgs[0]["role"] == "system" and msgs[0]["content"] == SUBAGENT_SYSTEM_PROMPT:
            return "```repl\nFINAL('subagent: ' + context[:40])\n```"
        if model.startswith("sub"):
            return "The agreement may not be assigned without prior written consent."
        turn = conversation_turn(req)[1]
        if model == "base":
            return ROOT_SCRIPT[min(turn, len(ROOT_SCRIPT) - 1)]
        task = self._room_task(req)
        if model == "tuned":
            if turn == 0:
                return ROOT_SCRIPT[0]
            full = _gold_memo(task, lambda i, c: i % 2 == 0)
            short = _gold_memo(task, lambda i, c: i % 4 == 0)
            return (
                f"```repl\nmemo = {short!r} if answers[0].startswith('subagent') else {full!r}\n"
                "FINAL_VAR(memo)\n```"
            )
        assert model == "lazy"
        first = sorted({d for c in task["criteria"] for d in c["evidence"]["documents"]})[0]
        if turn == 0:
            return (
                "```repl\ndocs = list_documents()\n"
                f"answers = [llm_query('Quote the assignment clause.\\n' + read({first!r}, 0, 2000))]\n"
                "print(answers)\n```"
            )
        memo = _gold_memo(task, lambda i, c: c["evidence"]["documents"][0] == first)
        return f"```repl\nmemo = {memo!r}\nFINAL_VAR(memo)\n```"


def _collect(
    handler: Roots,
    rooms: list[Path],
    out: Path,
    root: str,
    sub: str = "sub",
    depth: int = 1,
    episodes: int = 2,
) -> Path:
    with FakeOpenAIServer(handler) as server:
        mk = lambda m: OpenAIChatClient(m, server.base_url, api_key="x", max_retries=0)  # noqa: E731
        cfg = CollectConfig(
            rooms=[str(r) for r in rooms],
            root=f"openai:{root}@{server.base_url}",
            sub=f"openai:{sub}@{server.base_url}",
            episodes=episodes,
            depth=depth,  # type: ignore[arg-type]
            limits=EpisodeLimits(max_turns=3),
            # the scripted memos quote whole clauses: never cut them at the default 768 tokens
            root_sampling=Sampling(temperature=0.7, top_p=0.95, max_tokens=16384),
        )
        result = collect(cfg, out, mk(root), mk(sub), progress=False)
    assert {s.status for s in result.summaries} == {"completed"}, [
        (s.room.room_id, s.status_detail) for s in result.summaries if s.status != "completed"
    ]
    judge_run(out, ReferenceGrader())
    return out


# ----------------------------------------------------------------------------- recomputation
def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _episodes(run: Path) -> list[dict]:
    return _lines(run / "episodes.jsonl")


def _pass_rates(run: Path) -> dict[str, float]:
    """Episode id -> PASS verdicts / criteria of the room's task.json (memo hash matched)."""
    verdicts = _lines(run / "verdicts" / "reference.jsonl")
    out = {}
    for e in _episodes(run):
        n = len(_task(Path(e["room"]["path"]))["criteria"])
        ok = [
            v
            for v in verdicts
            if v["episode_id"] == e["episode_id"]
            and v["memo_sha256"] == e["memo_sha256"]
            and v["verdict"] == "PASS"
        ]
        out[e["episode_id"]] = len(ok) / n
    return out


def _room_means(run: Path, values: dict[str, float]) -> dict[str, float]:
    by_room: dict[str, list[float]] = {}
    for e in _episodes(run):
        by_room.setdefault(e["room"]["room_id"], []).append(values[e["episode_id"]])
    return {k: float(np.mean(v)) for k, v in by_room.items()}


def _no_nan_anywhere(out: Path) -> None:
    text = (out / "report.json").read_text(encoding="utf-8")
    assert "NaN" not in text and "Infinity" not in text
    md = (out / "report.md").read_text(encoding="utf-8")
    assert not re.search(r"\b(nan|inf|infinity)\b", md, re.IGNORECASE)


def _metric(report: dict, arm: str, name: str) -> dict:
    return next(m for m in report["per_arm"][arm] if m["metric"] == name)


def _figure(report: dict, name: str) -> dict:
    return next(f for f in report["figures"] if f["name"] == name)


# ----------------------------------------------------------------------------- two runs, one room
@pytest.fixture(scope="module")
def lazy_run(tmp_path_factory: pytest.TempPathFactory, cuad_room3: Path) -> Path:
    """A second real run over the collected_run's room: a root that reads only one document."""
    return _collect(
        Roots([cuad_room3]), [cuad_room3], tmp_path_factory.mktemp("lazy") / "lazy", "lazy"
    )


def test_report_over_two_real_runs(collected_run, lazy_run, tmp_path):
    out = tmp_path / "rep"
    report_stage(ReportConfig(runs=[collected_run, lazy_run], out=out, labels=["base", "lazy"]))
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert [a["label"] for a in report["arms"]] == ["base", "lazy"]
    assert [a["root_name"] for a in report["arms"]] == ["root", "lazy"]
    for fig in report["figures"]:
        png = out / fig["file"]
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", fig["file"]
    assert "![pass_vs_coverage](figures/pass_vs_coverage.png)" in (out / "report.md").read_text()
    _no_nan_anywhere(out)
    # mean pass rate per arm recomputed from the verdict files
    for arm, run in (("base", collected_run), ("lazy", lazy_run)):
        rates = _pass_rates(run)
        want = np.mean(list(_room_means(run, rates).values()))
        m = _metric(report, arm, "pass_rate")
        assert m["mean"]["value"] == pytest.approx(want)
        # one room: the value stands, the interval does not (never a made-up number)
        assert m["mean"]["low"] is None and m["mean"]["high"] is None
        assert m["mean"]["reason"] == "interval needs >= 3 rooms (got 1)"
        assert m["episodes"]["n"] == 2
    assert _metric(report, "lazy", "pass_rate")["mean"]["value"] > 0
    # the lazy root read one of three documents: it gave up early in every episode
    assert _metric(report, "lazy", "docs_read_share")["mean"]["value"] == pytest.approx(1 / 3)
    assert _metric(report, "lazy", "early_give_up")["mean"]["value"] == 1.0
    assert _metric(report, "base", "early_give_up")["mean"]["value"] == 0.0
    # before/after row: one paired room -> difference without CI, Wilcoxon undefined
    (comp,) = report["comparisons"]
    row = next(r for r in comp["rows"] if r["metric"] == "pass_rate")
    base_m = _room_means(collected_run, _pass_rates(collected_run))
    lazy_m = _room_means(lazy_run, _pass_rates(lazy_run))
    assert row["paired"]["differences"] == pytest.approx([lazy_m["cuad3"] - base_m["cuad3"]])
    assert row["paired"]["wilcoxon"]["p_value"] is None
    assert (
        row["paired"]["wilcoxon"]["reason"] == "needs >= 3 non-zero paired differences (got 1 of 1)"
    )
    # criteria that flipped, recomputed from the verdicts (majority over the two episodes)
    memo = {e["episode_id"]: e["memo_sha256"] for e in _episodes(lazy_run)}
    by_c: dict[str, list[bool]] = {}
    for v in _lines(lazy_run / "verdicts" / "reference.jsonl"):
        if v["memo_sha256"] == memo[v["episode_id"]]:
            by_c.setdefault(v["criterion_id"], []).append(v["verdict"] == "PASS")
    want_gained = {c for c, xs in by_c.items() if sum(xs) / len(xs) > 0.5}
    flips = comp["flipped"]
    assert {f["criterion_id"] for f in flips["rows"]} == want_gained  # the base passes nothing
    assert flips["n_gained"] == len(want_gained) > 0 and flips["n_lost"] == 0
    # pass rate vs coverage: one point per episode, (coverage, pass rate) from the files
    fig = _figure(report, "pass_vs_coverage")
    assert fig["x_scale"] == "log"
    for series, run in zip(fig["series"], (collected_run, lazy_run), strict=True):
        rates = _pass_rates(run)
        points = {
            e["episode_id"]: (e["coverage"]["overall"], rates[e["episode_id"]])
            for e in _episodes(run)
        }
        got = {i: (x, y) for i, x, y in zip(series["ids"], series["x"], series["y"], strict=True)}
        assert got == points
    # root vs sub token shares: sums over episodes.jsonl
    fig = _figure(report, "token_shares")
    assert [s["label"] for s in fig["series"]] == [
        "root_input",
        "root_output",
        "sub_input",
        "sub_output",
    ]
    for j, run in enumerate((collected_run, lazy_run)):
        t = [e["tokens"] for e in _episodes(run)]
        parts = [
            sum(x["root"]["prompt_tokens"] for x in t),
            sum(x["root"]["completion_tokens"] for x in t),
            sum(x["sub"]["prompt_tokens"] for x in t),
            sum(x["sub"]["completion_tokens"] for x in t),
        ]
        assert [s["y"][j] for s in fig["series"]] == pytest.approx([p / sum(parts) for p in parts])
    # correlations over one room: undefined with the reason (case A1)
    for s in report["size_correlations"]:
        assert s["pearson"]["value"] is None and s["spearman"]["value"] is None
        if s["x"] == "room_tokens":  # the fake root has no tokenizer: sizes unknown (issue 21)
            assert s["pearson"]["reason"].startswith("room size in tokens unknown for 1 of 1 rooms")
            assert s["rooms"] == [] and len(s["rooms_without_size"]) == 1
        else:
            assert s["pearson"]["reason"] == "n = 1 < 3 points: a correlation needs at least 3"
    # per-episode metrics are written beside the report for traceability
    rows = _lines(out / "metrics" / "lazy.jsonl")
    assert {r["episode_id"] for r in rows} == {e["episode_id"] for e in _episodes(lazy_run)}


# ----------------------------------------------------------------------------- four runs, four rooms
@pytest.fixture(scope="module")
def four_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Four real runs over four CUAD rooms of 1-4 contracts: base, tuned, tuned at depth 2,
    and base with another sub model (for the root x sub grid)."""
    base = tmp_path_factory.mktemp("four")
    rooms = []
    for n in (1, 2, 3, 4):
        room = base / "rooms" / f"cuad{n}"
        build_cuad_room(CUAD_SOURCE, room, n, 10 + n)
        rooms.append(room)
    h = Roots(rooms)
    return {
        "base": _collect(h, rooms, base / "base", "base"),
        "tuned": _collect(h, rooms, base / "tuned", "tuned"),
        "tuned-d2": _collect(h, rooms, base / "tuned-d2", "tuned", depth=2, episodes=1),
        "base-sub2": _collect(h, rooms, base / "base-sub2", "base", sub="sub2", episodes=1),
    }


@pytest.fixture(scope="module")
def adapter_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An adapter folder holding a train_log.jsonl in the SFT contract's format."""
    d = tmp_path_factory.mktemp("adapters") / "tuned-lora"
    d.mkdir()
    losses = [2.0, 1.5, float("nan"), 1.2, 1.0, 0.9]
    with (d / "train_log.jsonl").open("w", encoding="utf-8") as f:
        for i, loss in enumerate(losses, start=1):
            row = {
                "step": i * 10,
                "epoch": i / 6,
                "loss": loss,
                "learning_rate": 1e-4,
                "grad_norm": None,
                "tokens_seen": i * 1000,
                "tokens_per_s": 500.0,
                "time": "2025-01-01T00:00:00Z",
            }
            f.write(json.dumps(row) + "\n")
        f.write('{"step": 70, "lo')  # torn tail of a crashed run
    return d


@pytest.fixture(scope="module")
def four_report(four_runs, adapter_dir, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("reports") / "four"
    runs = [four_runs[k] for k in ("base", "tuned", "tuned-d2", "base-sub2")]
    report_stage(ReportConfig(runs=runs, out=out, sft=[adapter_dir]))
    return out, json.loads((out / "report.json").read_text(encoding="utf-8"))


def test_before_after_statistics_recomputed(four_runs, four_report):
    out, report = four_report
    _no_nan_anywhere(out)
    base, tuned = four_runs["base"], four_runs["tuned"]
    a = _room_means(base, _pass_rates(base))
    b = _room_means(tuned, _pass_rates(tuned))
    assert len(a) == 4 and set(a) == set(b)
    # per-arm mean of a rate: mean of room means. The tuned root passes half of each room's
    # criteria: its 4 room means are 0.5 up to rounding (values equal within 1e-12 are equal),
    # so no spread and an interval of width 0, not a Korn-Graubard interval of rounding noise
    m = _metric(report, "tuned", "pass_rate")["mean"]
    assert m["value"] == pytest.approx(np.mean(list(b.values())))
    assert m["n"] == 4 and m["one_sided"] is False
    if max(abs(v - 0.5) for v in b.values()) < 1e-12:  # rooms with even criteria counts
        assert (m["low"], m["high"]) == (m["value"], m["value"])
        assert m["reason"] == "all 4 values equal 0.5: no spread, so an interval of width 0"
    else:  # the packaged sample's rooms: odd counts, so 3/7, 4/9, ...: a real interval
        assert 0.0 <= m["low"] < m["value"] < m["high"] <= 1.0
        assert "Korn" in m["method"] and m["reason"] is None
    # the base root never passes: all 4 room means 0 -> one-sided upper bound 1 - 0.05^(1/4)
    mb = _metric(report, "base", "pass_rate")["mean"]
    assert (mb["value"], mb["low"], mb["high"]) == (0.0, 0.0, pytest.approx(1 - 0.05**0.25))
    assert mb["one_sided"] is True
    assert mb["reason"] == (
        "all 4 rooms at 0: one-sided 95% upper bound 1 - 0.05^(1/4) (exact Clopper-Pearson, "
        "n = 4 rooms)"
    )
    # paired difference and Wilcoxon over rooms
    comp = next(c for c in report["comparisons"] if c["b"] == "tuned")
    row = next(r for r in comp["rows"] if r["metric"] == "pass_rate")
    keys = row["paired"]["keys"]
    d = [b[k] - a[k] for k in keys]
    assert sorted(keys) == sorted(a)
    assert row["paired"]["differences"] == pytest.approx(d)
    assert row["paired"]["mean_difference"]["value"] == pytest.approx(np.mean(d))
    assert row["paired"]["wilcoxon"]["p_value"] == pytest.approx(scipy.stats.wilcoxon(d).pvalue)
    assert row["paired"]["n_improved"] == sum(x > 0 for x in d) == 4
    assert (row["n_episodes_a"], row["n_episodes_b"]) == (8, 8)
    # sub-calls vs room size, one point per room, recomputed from episodes.jsonl
    for arm, run in four_runs.items():
        eps = _episodes(run)
        subs = _room_means(run, {e["episode_id"]: e["n_sub_calls"] for e in eps})
        chars = {e["room"]["room_id"]: e["room"]["n_chars"] for e in eps}
        sc = next(
            s for s in report["size_correlations"] if s["arm"] == arm and s["x"] == "room_chars"
        )
        assert dict(zip(sc["rooms"], sc["ys"], strict=True)) == pytest.approx(subs)
        xs = [chars[k] for k in sc["rooms"]]
        assert sc["xs"] == xs
        r = scipy.stats.pearsonr(xs, sc["ys"]).statistic
        if math.isclose(abs(r), 1.0):
            assert sc["pearson"]["low"] is None
        else:
            assert sc["pearson"]["value"] == pytest.approx(r)
        assert sc["spearman"]["value"] == pytest.approx(
            scipy.stats.spearmanr(xs, sc["ys"]).statistic
        )
        fig = _figure(report, "sub_calls_vs_room_size")
        series = next(s for s in fig["series"] if s["label"] == arm)
        assert series["x"] == xs and series["y"] == pytest.approx(sc["ys"])


def test_depth_ablation_and_grid(four_runs, four_report):
    _, report = four_report
    (ab,) = report["depth_ablations"]
    assert (ab["depth1_arm"], ab["depth2_arm"], ab["note"]) == ("tuned", "tuned-d2", None)
    d1 = _room_means(four_runs["tuned"], _pass_rates(four_runs["tuned"]))
    d2 = _room_means(four_runs["tuned-d2"], _pass_rates(four_runs["tuned-d2"]))
    assert ab["depth1_room_means"] == pytest.approx(d1)
    assert ab["depth2_room_means"] == pytest.approx(d2)
    diffs = [d2[k] - d1[k] for k in d1]
    p = ab["paired"]
    assert (p["n_improved"], p["n_declined"], p["n_tied"]) == (
        sum(x > 0 for x in diffs),
        sum(x < 0 for x in diffs),
        sum(x == 0 for x in diffs),
    )
    assert p["n_declined"] >= 1  # the depth-2 memo quotes fewer clauses
    assert p["mean_difference"]["value"] == pytest.approx(np.mean(diffs))
    assert ab["read_no_memo"] == {"tuned": 0, "tuned-d2": 0}
    assert ab["n_episodes"] == {"tuned": 8, "tuned-d2": 4}
    fig = _figure(report, "depth_ablation_0")
    assert fig["kind"] == "paired"
    got = {s["label"]: s["y"] for s in fig["series"]}
    assert set(got) == set(d1)
    for k in d1:
        assert got[k] == pytest.approx([d1[k], d2[k]])
    # root x sub grid at depth 1: (base, sub), (tuned, sub), (base, sub2); (tuned, sub2) absent
    (grid,) = report["grids"]
    assert (grid["depth"], grid["roots"], grid["subs"]) == (1, ["base", "tuned"], ["sub", "sub2"])
    cells = {(c["root"], c["sub"]): c["mean"]["value"] for c in grid["cells"]}
    assert set(cells) == {("base", "sub"), ("tuned", "sub"), ("base", "sub2")}
    assert cells[("tuned", "sub")] == pytest.approx(np.mean(list(d1.values())))
    gap_sub = next(g for g in grid["root_gaps"] if g["fixed"] == "sub")
    assert (gap_sub["best"], gap_sub["worst"]) == ("tuned", "base")
    assert gap_sub["gap"] == pytest.approx(cells[("tuned", "sub")] - cells[("base", "sub")])
    gap_sub2 = next(g for g in grid["root_gaps"] if g["fixed"] == "sub2")
    assert gap_sub2["gap"] is None and "got 1" in gap_sub2["reason"]
    fig = _figure(report, "grid_depth1")
    got = {s["label"]: s["y"] for s in fig["series"]}
    assert got == {
        "base": [cells[("base", "sub")], cells[("base", "sub2")]],
        "tuned": [cells[("tuned", "sub")], None],
    }


def test_training_curve_raw_and_ema(four_report, adapter_dir):
    _, report = four_report
    (curve,) = report["training"]
    assert curve["adapter"] == "tuned-lora"
    assert curve["steps"] == [10, 20, 40, 50, 60]
    assert curve["loss"] == [2.0, 1.5, 1.2, 1.0, 0.9]
    assert curve["n_nonfinite"] == 1 and curve["torn_tail"] is True
    # bias-corrected EMA, beta 0.9, by hand for the first two: 2.0; (0.9*0.2 + 0.15)/0.19
    assert curve["ema_loss"][:2] == pytest.approx([2.0, (0.9 * 0.2 + 0.1 * 1.5) / 0.19])
    assert curve["ema_loss"] == pytest.approx(ema([2.0, 1.5, 1.2, 1.0, 0.9], 0.9))
    fig = _figure(report, "training_loss")
    assert [s["y"] for s in fig["series"]] == [curve["loss"], curve["ema_loss"]]
    assert fig["notes"] == ["tuned-lora: 1 non-finite losses left out"]


def test_rl_section_per_step_and_zero_variance_share(four_runs, tmp_path):
    """An RL adapter's rl_log.jsonl (two steps written by rlmdistill rl, one older line
    without the later fields, a torn tail) becomes report.json's rl_training, a table in
    report.md and the reward figure; the zero-variance share is over every logged group:
    (2 + 1) / (2 + 2) = 0.75."""
    rl = tmp_path / "adapters" / "grpo"
    rl.mkdir(parents=True)
    lines = [
        {"step": 2, "loss": 0.01, "kl": 0.002, "reward_mean": 0.25, "reward_std": 0.5,
         "groups": 2, "zero_variance_groups": 1, "rollout_wall_s": 40.5,
         "sub_calls_per_rollout": 1.5, "staleness": 0.0, "stale_token_share": 0.0,
         "trl": {"reward": 0.25}},
        {"step": 1, "loss": 0.0, "kl": None, "reward_mean": 0.0, "reward_std": 0.0,
         "groups": 2, "zero_variance_groups": 2},
    ]  # fmt: skip
    text = "".join(json.dumps(x) + "\n" for x in lines) + '{"step": 3, "rew'
    (rl / "rl_log.jsonl").write_text(text, encoding="utf-8")
    out = tmp_path / "report"
    report_stage(ReportConfig(runs=[four_runs["base"], four_runs["tuned"]], out=out, rl=[rl]))
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    (curve,) = report["rl_training"]
    assert curve["adapter"] == "grpo" and curve["steps"] == [1, 2]
    assert curve["reward_mean"] == [0.0, 0.25] and curve["kl"] == [None, 0.002]
    assert curve["rollout_wall_s"] == [None, 40.5] and curve["staleness"] == [None, 0.0]
    assert curve["zero_variance_share"] == 0.75 and curve["torn_tail"] is True
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "## RL training" in md and "advantage 0, no learning signal): 75%" in md
    assert "| 2 | 0.25 | 0.5 | 1/2 | 0.002 | 0.01 | 0 | 0 | 40.5 | 1.5 |" in md
    fig = _figure(report, "rl_reward")
    assert fig["series"][0]["y"] == [0.0, 0.25]


def test_cli_report_with_prices_and_refusals(collected_run, lazy_run, tmp_path):
    app = typer.Typer()
    register(app)

    @app.command("noop")
    def _noop() -> None:  # a second command keeps typer in sub-command mode
        pass

    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "version: test-1\nprices:\n"
        "  - {pattern: 'openai:root@*', input: 1.0, cached_input: 0.5, output: 2.0}\n"
        "  - {pattern: 'openai:lazy@*', input: 3.0, output: 4.0}\n"
        "  - {pattern: 'openai:sub@*', input: 0.5, output: 1.0}\n",
        encoding="utf-8",
    )
    out = tmp_path / "rep"
    args = ["report", str(collected_run), str(lazy_run), "--out", str(out), "--prices", str(prices)]
    res = CliRunner().invoke(app, [*args, "--resamples", "500"])
    assert res.exit_code == 0, res.output
    assert "report over 2 runs (4 episodes)" in res.output
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["settings"]["price_table"] == "test-1"
    assert report["settings"]["n_resamples"] == 500
    # pass rate vs cost per room: cost recomputed from tokens and the price table
    fig = _figure(report, "pass_vs_cost")
    price = {"root": (1.0, 2.0), "lazy": (3.0, 4.0)}
    for series, run in zip(fig["series"], (collected_run, lazy_run), strict=True):
        eps = _episodes(run)
        root = "lazy" if run == lazy_run else "root"
        costs = [
            (
                e["tokens"]["root"]["prompt_tokens"] * price[root][0]
                + e["tokens"]["root"]["completion_tokens"] * price[root][1]
                + e["tokens"]["sub"]["prompt_tokens"] * 0.5
                + e["tokens"]["sub"]["completion_tokens"] * 1.0
            )
            / 1e6
            for e in eps
        ]
        assert series["x"] == pytest.approx([np.mean(costs)])
        assert series["y"] == pytest.approx(list(_room_means(run, _pass_rates(run)).values()))
    # an existing report is not overwritten silently
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and "already holds a report" in res.output
    assert CliRunner().invoke(app, [*args, "--overwrite", "--resamples", "200"]).exit_code == 0
    res = CliRunner().invoke(app, [*args, "--overwrite", "--label", "only-one"])
    assert res.exit_code == 2 and "1 labels given for 2 runs" in res.output
    res = CliRunner().invoke(app, [*args, "--overwrite", "--grader", "llm"])
    assert res.exit_code == 2 and "grader 'llm' has no verdicts" in res.output
