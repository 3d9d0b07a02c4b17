"""A training run's folder: its paths, its lock, ``--overwrite``, and its log read back.

A run is a model directory (layout.py) that ``train`` writes into: ``OUT/.lock`` is held (flock)
by the training that writes into OUT, and ``OUT/.staging/`` holds a new run that ``--overwrite``
builds aside, swapped in at its first checkpoint.

Nothing a user has is lost: OUT may not lie inside another project folder nor be one of another
kind (``files.check_replaceable``), a training takes the lock before it looks at anything,
validates everything before it writes anything, and ``--overwrite`` builds the new run in
``.staging`` while the old one stays in place. Only once the new run has a checkpoint are the
entries swapped, with a marker file that lets the next start finish a swap that a crash
interrupted. Only a run's own entries are ever replaced: a folder that holds one of them
without being a run is refused, and other files in OUT are never touched. Every write goes
through the write gate (``files.py``), naming OUT as its owner.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from .. import reading
from ..config import RunConfig, build_config, load_config, merge
from ..errors import UserError
from ..files import (
    check_replaceable,
    link_tree,
    mark_folder,
    move,
    remove_tree,
    write_json_atomic,
)
from ..temporaries import clean_leftovers, fsync_dir
from . import layout
from .checkpoints import step_checkpoints
from .locks import Busy, exclusive_lock

log = logging.getLogger(__name__)


def default_run_folder(config: RunConfig) -> Path:
    """Where a run trains when no ``--out`` is given: ``runs/CORPUS-SRC-TGT``."""
    d = config.data
    return Path("runs") / f"{d.corpus or 'custom'}-{d.src_lang}-{d.tgt_lang}"


def resumed_config(out: str | Path) -> RunConfig:
    """The config saved in the run ``out``, which ``--resume`` continues; ``out`` must be a place
    a run may be (``files.check_replaceable``), checked before anything in it is read."""
    check_replaceable(out, "run")
    return RunDir(out).saved_config()


def run_config(
    config: str | None, out: str | None, resume: bool, given: dict[str, dict]
) -> tuple[RunConfig, Path]:
    """The config a ``train`` runs and its model directory: ``config`` (a YAML file or a
    built-in name) with the ``given`` options on top, or on ``resume`` without a config the one
    saved in ``out``, with them on top; ``out`` defaults to ``runs/CORPUS-SRC-TGT``."""
    data = given.get("data", {})
    if "src" in data and "corpus" not in data:
        data["corpus"] = None  # files given: no named corpus
    if resume and config is None:
        if out is None:
            raise UserError("--resume needs --out DIR (the run to continue)")
        saved = resumed_config(out).to_dict()
        built = build_config(merge(saved, given), f"{out} with the options", given)
    else:
        built = load_config(config, given)
    return built, Path(out) if out is not None else default_run_folder(built)


def read_metrics(out: Path) -> list[dict]:
    """All rows of a run's ``metrics.jsonl`` (training/metrics.py writes it); a line that is not
    a JSON object is an error naming it (a NaN loss is not: it is what a diverged step logs)."""
    return [row for _, row in metrics_lines(out)]


def metrics_lines(out: Path) -> list[tuple[str, dict]]:
    """``read_metrics``' rows, each with its origin for messages: "OUT/metrics.jsonl line 4"."""
    path = RunDir(out).metrics
    lines = reading.read_bytes(path).splitlines()
    return [(f"{path} line {i}", reading.parse_json(line, f"{path} line {i}", dict, finite=False))
            for i, line in enumerate(lines, 1) if line.strip()]  # fmt: skip


class RunDir:
    """The paths of one training run's folder (names: layout.py), and what may be done with
    them."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"RunDir({str(self.root)!r})"

    @property
    def config(self) -> Path:
        return self.root / layout.CONFIG

    @property
    def tokenizer(self) -> Path:
        return self.root / layout.TOKENIZER

    @property
    def metrics(self) -> Path:
        return self.root / layout.METRICS

    @property
    def tensorboard(self) -> Path:
        return self.root / layout.TENSORBOARD

    @property
    def checkpoints(self) -> Path:
        return self.root / layout.CHECKPOINTS

    @property
    def data(self) -> Path:
        """The binarized training set (data/binarized.py)."""
        return self.root / layout.DATA / "train"

    @property
    def scratch(self) -> Path:
        return self.root / layout.SCRATCH

    def adopt_data(self, scratch: Path, owner: Path | None = None) -> None:
        """Moves a binarized training set made in ``scratch`` into place (nothing to do if none
        was made); memory maps of its files stay valid. ``owner``: the folder holding both (this
        one; for a run built in ``.staging``, the run's folder, where ``scratch`` is)."""
        if not scratch.exists():
            return
        owner = owner or self.root
        self.data.parent.mkdir(parents=True, exist_ok=True)
        remove_tree(self.data, owner=owner)
        move(scratch, self.data, owner=owner)

    def has_run(self) -> bool:
        """Whether this folder is a training run (its marker)."""
        return layout.folder_kind(self.root) == "run"

    def has_checkpoint(self) -> bool:
        return bool(step_checkpoints(self.checkpoints))

    def saved_config(self) -> RunConfig:
        """The RunConfig of the run in this folder."""
        if not self.config.exists():
            raise UserError(f"{self.root} holds no run to resume ({self.config} is missing)")
        return build_config(reading.read_json(self.config), str(self.config))

    def check_start(self, resume: bool, overwrite: bool) -> None:
        """Refuses a start that could lose a run, with the way out in the message."""
        if resume and overwrite:
            raise UserError("--resume and --overwrite contradict each other; choose one")
        if not self.has_run():
            taken = [name for name in layout.RUN_ENTRIES if (self.root / name).exists()]
            if taken:
                raise UserError(
                    f"{self.root} is not a training run but holds {', '.join(taken)}, which a "
                    "run would replace; nothing in it is touched: choose another --out"
                )
        if resume or overwrite or not self.has_run():
            return
        if self.has_checkpoint():
            raise UserError(
                f"{self.root} already holds a training run; use --resume to continue it, "
                "--overwrite to replace it, or choose another --out"
            )
        raise UserError(
            f"{self.root} holds a run that stopped before its first checkpoint; --resume starts "
            "it again from step 0 with its saved config, --overwrite replaces it"
        )

    # ----------------------------------------------------------------------------- the lock
    @contextmanager
    def locked(self) -> Iterator[None]:
        """Holds ``OUT/.lock`` for a training; a second training into OUT is refused.

        The lock is an flock, released by the kernel when the process ends however it ends, so
        a killed training never leaves OUT locked. A folder that did not exist and holds nothing
        but the lock file afterwards (validation failed before anything was written) is removed.
        """
        created = not self.root.exists()
        try:
            with ExitStack() as lock:
                try:
                    self.root.mkdir(parents=True, exist_ok=True)
                    lock.enter_context(exclusive_lock(self.root / layout.LOCK, owner=self.root))
                except Busy as busy:
                    raise UserError(
                        f"{self.root} is in use by another training (process {busy.holder}); "
                        "wait for it to finish or choose another --out"
                    ) from None
                except OSError as error:
                    raise UserError(
                        f"cannot create the model directory {self.root}: {error.strerror}"
                    ) from None
                yield
        finally:
            if (
                created
                and self.root.is_dir()
                and [p.name for p in self.root.iterdir()] == [layout.LOCK]
            ):
                remove_tree(self.root, owner=self.root)

    # ------------------------------------------------------------------- overwrite, safely
    def destination(self, resume: bool, settings: dict | None = None) -> Destination:
        """Where a training writes: into this folder, or, when it starts afresh over a run that
        is already here (``--overwrite``), into the staging folder until its first checkpoint.
        ``settings``: a resumed run's config, which replaces its ``config.json`` at its first
        checkpoint (new train limits, the search its commands run: settings.py)."""
        return Destination(self, staged=self.has_run() and not resume,
                           settings=settings if resume else None)  # fmt: skip

    def staging(self) -> RunDir:
        """Where ``--overwrite`` builds the new run (empty)."""
        staged = RunDir(self.root / layout.STAGING)
        remove_tree(staged.root, owner=self.root)
        staged.root.mkdir(parents=True)
        return staged

    def adopt(self, staged: RunDir) -> None:
        """Replaces this run's entries by those of ``staged`` (which has a checkpoint).

        The READY marker lists the new run's entries and is written first: if a crash
        interrupts the swap, ``recover`` finishes it from there.
        """
        entries = [name for name in layout.RUN_ENTRIES if (staged.root / name).exists()]
        write_json_atomic(staged.root / layout.READY, entries, owner=staged.root)
        self._finish_swap(staged)

    def _finish_swap(self, staged: RunDir) -> None:
        """Moves the old entries aside and the new ones in; safe to run again after a crash."""
        new_entries = reading.read_json(staged.root / layout.READY, list)
        replaced = self.root / layout.REPLACED
        replaced.mkdir(exist_ok=True)
        for name in layout.RUN_ENTRIES:
            new, current = staged.root / name, self.root / name
            if name in new_entries and not new.exists():
                continue  # swapped before the crash: current is the new run's
            if current.exists():
                remove_tree(replaced / name, owner=self.root)
                move(current, replaced / name, owner=self.root)
            if new.exists():
                move(new, current, owner=self.root)
        fsync_dir(self.root)
        remove_tree(staged.root, owner=self.root)
        remove_tree(replaced, owner=self.root)

    def recover(self) -> None:
        """Called under the lock before anything else: finishes a swap that a crash interrupted,
        drops a staged run that never reached its first checkpoint, and removes the leftovers of
        interrupted saves and prunes."""
        staged = RunDir(self.root / layout.STAGING)
        if (staged.root / layout.READY).exists():
            log.warning(f"finishing the replacement of {self.root} that was interrupted")
            self._finish_swap(staged)
        elif staged.root.exists():
            remove_tree(staged.root, owner=self.root)
            log.warning(
                f"removed {staged.root}: an --overwrite run that stopped before its first "
                f"checkpoint (the run in {self.root} was kept)"
            )
        remove_tree(self.root / layout.REPLACED, owner=self.root)
        remove_tree(self.scratch, owner=self.root)
        for line in clean_leftovers(self.root):  # of this folder's own files
            log.warning(line)
        if self.checkpoints.exists():
            said = clean_leftovers(self.checkpoints)
            if said:
                log.warning(f"finished what an interrupted save or prune left in "
                            f"{self.checkpoints}: {'; '.join(said)}")  # fmt: skip

    def mark(self, made_by: str = "train") -> None:
        """Makes this folder a run (its marker, which says which command made it: ``train``, or
        ``demo``, which replaces only its own runs): written before any of the run's entries,
        so that a start interrupted half-way leaves a run that ``--overwrite`` may replace."""
        mark_folder(self.root, "run", made_by=made_by)

    def made_by(self) -> str | None:
        """The command that made this run, as its marker says (None: a run made before markers
        said, or a damaged marker)."""
        made = layout.marker_field(self.root, "run", "made_by")
        return made if isinstance(made, str) else None

    def save_config(self, values: dict) -> None:
        write_json_atomic(self.config, values, owner=self.root)


class Destination:
    """The folder a training writes into right now, and the swap that ``--overwrite`` makes.

    A fresh run over an existing one is built in ``.staging``; once its first checkpoint is
    saved (``checkpoint_saved``) it replaces the old run, and from then on the training writes
    into the run's own folder. Stopped before that (``discard``), the old run stays as it was.
    A resumed run's settings replace its ``config.json`` at the same moment.
    """

    def __init__(self, run: RunDir, staged: bool, settings: dict | None = None) -> None:
        self.run = run
        self.current = run.staging() if staged else run
        self.settings = settings  # the run's config.json at its first checkpoint, if given

    @property
    def staged(self) -> bool:
        return self.current is not self.run

    def take_data(self, scratch: Path) -> None:
        """Puts the binarized training set into the folder the training writes: the one made in
        ``scratch`` (moved), or, for a run built aside that reuses the old run's (made from the
        same data and tokenizers), the old one's files, linked: the old run keeps its own until
        the swap, and the new run has its own after it (it had none, and lost the old one's)."""
        if scratch.exists():
            self.current.adopt_data(scratch, owner=self.run.root)
        elif self.staged and self.run.data.exists():
            link_tree(self.run.data, self.current.data, owner=self.run.root)

    def checkpoint_saved(self) -> None:
        """The new run has a checkpoint: it may replace the old one; a resumed run's settings
        replace its config.json (a resume stopped before then changes nothing)."""
        if self.staged:
            self.run.adopt(self.current)
            self.current = self.run
        if self.settings is not None:
            self.run.save_config(self.settings)
            self.settings = None

    def discard(self) -> None:
        """Drops a staged run that never reached its first checkpoint."""
        if self.staged:
            remove_tree(self.current.root, owner=self.run.root)
