"""SFT jobs page: start ``rlmdistill sft`` from a config as a background subprocess, follow its
log and loss curve live, and list the adapters of the workspace.

A job runs ``python -m rlmdistill.sft --dataset D --base B --out adapters/NAME [--config F]``
(the same command group as ``rlmdistill sft``) through :mod:`rlmdistill.dashboard.jobs`; the
loss curve is read from ``adapters/NAME/train_log.jsonl`` (the SFT stage's log, see the
contract in ``docs/dashboard.md``).

With a Ray address in the form, the job is ``rlmdistill sft ...`` submitted to that cluster
through Ray Jobs (:func:`rlmdistill.dashboard.jobs.submit_remote`, ``files="shared"``): it
runs in this workspace's path on the head, so the loss curve is read from the same adapter
folder, which assumes the head sees this workspace (a shared filesystem, or the head on this
machine). Its state and log come from the cluster (:func:`rlmdistill.dashboard.jobs.refresh`
on each refresh of the page).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from rlmdistill.cluster.jobs import RayJobsError
from rlmdistill.dashboard import data, jobs
from rlmdistill.dashboard.data import Workspace
from rlmdistill.dashboard.widgets import fmt_num
from rlmdistill.traces.artefacts import read_experiment_record

REFRESH_S = 2.0
"""Seconds between refreshes of a running job's log and loss curve."""


def config_files(ws: Workspace) -> list[Path]:
    """SFT config candidates: ``*.yaml``, ``*.yml``, ``*.toml`` in the workspace folder and in
    ``DIR/configs/``, sorted."""
    out: list[Path] = []
    for folder in (ws.root, ws.root / "configs"):
        for pattern in ("*.yaml", "*.yml", "*.toml"):
            out += folder.glob(pattern)
    return sorted(out)


FALLBACK_BASE = "smollm2-135m"
"""Base model the SFT form offers when the workspace trained none."""


def workspace_base(ws: Workspace) -> str:
    """The base model the workspace trained: the ``base`` of its newest adapter's
    ``sft.json`` (by ``created_at``), else the loop's ``experiment.json`` ``base``, else
    :data:`FALLBACK_BASE`."""
    newest: tuple[Any, str] | None = None
    for a in data.list_adapters(ws):
        m = data.adapter_info(a).manifest
        base = m.config.get("base") if m is not None else None
        if m is not None and base and (newest is None or m.created_at > newest[0]):
            newest = (m.created_at, str(base))
    if newest is not None:
        return newest[1]
    try:
        base = read_experiment_record(ws.root).base
    except ValueError:  # no experiment.json (not a loop workspace) or not a valid one
        base = None
    return base or FALLBACK_BASE


def sft_args(dataset: Path, base: str, out: Path, config: Path | None, max_steps: int) -> list[str]:
    """The ``rlmdistill sft`` arguments for a job (``max_steps`` 0 = the config's own)."""
    args = ["--dataset", str(dataset), "--base", base, "--out", str(out)]
    if config is not None:
        args += ["--config", str(config)]
    if max_steps > 0:
        args += ["--max-steps", str(max_steps)]
    return args


def adapters_frame(ws: Workspace) -> pd.DataFrame:
    """One row per adapter folder: ``adapter, status, log steps, last loss, weights, base,
    dataset`` (from ``sft.json`` and ``train_log.jsonl``)."""
    rows = []
    for a in data.list_adapters(ws):
        info = data.adapter_info(a)
        m = info.manifest
        cfg: dict[str, Any] = m.config if m is not None else {}
        rows.append(
            {
                "adapter": info.name,
                "status": info.status,
                "log steps": info.n_log_steps,
                "last loss": info.last_loss,
                "weights": info.has_weights,
                "base": cfg.get("base") or (m.base_path if m else None),
                "dataset": (m.dataset_path if m else None) or cfg.get("dataset"),
            }
        )
    return pd.DataFrame(
        rows, columns=["adapter", "status", "log steps", "last loss", "weights", "base", "dataset"]
    )


def _rl_curves(adapter_dir: Path, log: pd.DataFrame) -> None:
    """An RL adapter's per-step log: reward mean and spread, zero-variance groups, KL and
    loss, staleness and stale-token share, rollout wall time, sub-calls per rollout."""
    last = log.iloc[-1]
    c = st.columns(4)
    c[0].metric("step", int(last["step"]))
    c[1].metric("reward mean", fmt_num(_num(last["reward_mean"]), 3))
    c[2].metric("zero-variance groups", fmt_num(_num(last["zero_variance_share"]), 2))
    c[3].metric("rollout s", fmt_num(_num(last["rollout_wall_s"]), 1))
    band = log.assign(
        low=log["reward_mean"] - log["reward_std"], high=log["reward_mean"] + log["reward_std"]
    )
    charts = [
        ("Reward: mean and mean +- sd", band, ["reward_mean", "low", "high"]),
        ("Zero-variance groups (share)", log, ["zero_variance_share"]),
        ("KL and loss", log, ["kl", "loss"]),
        ("Staleness (versions) and stale-token share", log, ["staleness", "stale_token_share"]),
        ("Rollout wall time (s)", log, ["rollout_wall_s"]),
        ("Sub-calls per rollout", log, ["sub_calls_per_rollout"]),
    ]
    for i in range(0, len(charts), 2):
        cols = st.columns(2)
        for col, (title, frame, ys) in zip(cols, charts[i : i + 2], strict=False):
            with col:
                st.markdown(f"**{title}**")
                st.line_chart(frame, x="step", y=ys)


def _curves(adapter_dir: Path) -> None:
    rl = data.rl_log(adapter_dir)
    if not rl.empty:
        _rl_curves(adapter_dir, rl)
        return
    log = data.train_log(adapter_dir)
    if log.empty:
        st.caption(f"No training log yet ({adapter_dir.name}/train_log.jsonl).")
        return
    last = log.iloc[-1]
    c = st.columns(4)
    c[0].metric("step", int(last["step"]))
    c[1].metric("loss", fmt_num(_num(last["loss"]), 4))
    c[2].metric("tokens seen", f"{int(_num(last['tokens_seen']) or 0):,}")
    c[3].metric("tokens/s", fmt_num(_num(last["tokens_per_s"]), 1))
    left, right = st.columns(2)
    with left:
        st.markdown("**Loss**")
        st.line_chart(log, x="step", y="loss")
    with right:
        st.markdown("**Learning rate**")
        st.line_chart(log, x="step", y="learning_rate")


def _num(x: object) -> float | None:
    v = pd.to_numeric(pd.Series([x]), errors="coerce").iloc[0]
    return None if pd.isna(v) else float(v)


def _start_form(ws: Workspace) -> None:
    datasets = data.list_datasets(ws)
    configs = config_files(ws)
    with st.form("sft_start"):
        st.markdown("**Start an SFT job** (`rlmdistill sft` in the background)")
        ds = st.selectbox("Dataset", [d.name for d in datasets], key="sft_dataset")
        base = st.text_input("Base model", value=workspace_base(ws), key="sft_base")
        name = st.text_input("Adapter name (adapters/NAME)", key="sft_name")
        cfg = st.selectbox(
            "Config file",
            ["(none)"] + [str(c.relative_to(ws.root)) for c in configs],
            key="sft_config",
        )
        steps = st.number_input(
            "Max steps (0: from the config)", min_value=0, value=0, key="sft_steps"
        )
        ray_address = st.text_input(
            "Ray address (http://HEAD:8265, the head's dashboard; empty: run on this machine)",
            key="sft_ray_address",
            help="Submitted through Ray Jobs; the job runs in this workspace's path on the "
            "head (a shared filesystem, or the head on this machine) with `python` there.",
        )
        go = st.form_submit_button("Start SFT job")
    if not go:
        return
    if ds is None or not name.strip():
        st.error("Pick a dataset and give the adapter a name.")
        return
    out = Path("adapters") / name.strip()
    args = sft_args(
        ws.datasets / str(ds),
        base.strip(),
        out,
        None if cfg == "(none)" else ws.root / cfg,
        int(steps),
    )
    try:
        if ray_address.strip():
            job = jobs.submit_remote(
                ws.root, name.strip(), ray_address.strip(), ["sft", *args], out_dir=str(out)
            )
        else:
            job = jobs.start_job(
                ws.root, name.strip(), args, module="rlmdistill.sft", out_dir=str(out)
            )
    except (jobs.JobError, RayJobsError) as exc:
        st.error(str(exc))
        return
    st.session_state["sft_job"] = job.name
    if job.remote:
        st.success(f"submitted job {job.name} to {job.where} (Ray job {job.ray_job_id})")
    else:
        st.success(f"started job {job.name} (pid {job.pid})")


def _job_view(ws: Workspace, name: str) -> None:
    @st.fragment(run_every=REFRESH_S)
    def live() -> None:
        job = next((j for j in jobs.list_jobs(ws.root) if j.name == name), None)
        if job is None:
            st.warning(f"job {name} not found")
            return
        jobs.refresh(job)  # a Ray job: state and log from its cluster; local: nothing to do
        state, rc = jobs.job_state(job)
        st.markdown(
            f"**Job {job.name}**: `{state}`" + (f" (exit status {rc})" if rc is not None else "")
        )
        if job.remote:
            st.caption(f"Ray job `{job.ray_job_id}` at {job.where}")
            if state in ("pending", "running") and st.button("Stop job", key=f"stop_{name}"):
                try:
                    jobs.stop_job(job)
                except RayJobsError as exc:
                    st.error(str(exc))
        st.caption(" ".join(job.command[1:]))
        st.code(jobs.read_log(job, 8000) or "(no output yet)", language="text")
        if job.out_dir and job.files == "upload":
            st.caption(f"{job.out_dir} was written on the cluster (the workspace was uploaded).")
        elif job.out_dir:
            _curves(Path(job.cwd) / job.out_dir)

    live()


def render(ws: Workspace) -> None:
    """Render the SFT jobs page."""
    _start_form(ws)
    all_jobs = jobs.list_jobs(ws.root)
    for j in all_jobs:
        jobs.refresh(j)  # Ray jobs still running: ask their cluster once per page run
    st.subheader("Jobs")
    if not all_jobs:
        st.caption("No job started from the dashboard yet.")
    else:
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "job": j.name,
                        "state": jobs.job_state(j)[0],
                        "exit status": jobs.job_state(j)[1],
                        "started": j.started_at.strftime("%Y-%m-%d %H:%M:%S"),
                        "where": j.where,
                        "out": j.out_dir,
                    }
                    for j in all_jobs
                ]
            ),
            hide_index=True,
            width="stretch",
        )
        names = [j.name for j in all_jobs]
        if st.session_state.get("sft_job") not in names:
            st.session_state["sft_job"] = names[0]
        _job_view(ws, str(st.selectbox("Follow job", names, key="sft_job")))
    st.subheader("Adapters")
    table = adapters_frame(ws)
    if table.empty:
        st.caption(f"No adapters in `adapters/` of workspace {ws.root.name}.")
        return
    st.dataframe(table, hide_index=True, width="stretch")
    chosen = st.selectbox("Adapter", list(table["adapter"]), key="sft_adapter")
    adapter_dir = ws.adapters / str(chosen)
    _curves(adapter_dir)
    info = data.adapter_info(adapter_dir)
    if info.error is not None:
        st.error(info.error)
    if info.manifest is not None:
        with st.expander("sft.json"):
            st.json(info.manifest.model_dump(mode="json"))
