"""Files of the named corpora: where they come from, and a download that never leaves a file
that looks complete but is not.

``multi30k`` (Elliott et al. 2016, image captions in de/en/fr) and the Tatoeba sentence pairs
collected at manythings.org/anki are read from a local ``data_dir`` or downloaded once into a
cache folder, verified by SHA-256.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from ..errors import UserError
from ..files import atomic_write


@dataclass(frozen=True)
class RemoteFile:
    """A file of a named corpus: its public address and the SHA-256 it must have."""

    url: str
    sha256: str


_MULTI30K = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
_MANYTHINGS = "https://www.manythings.org/anki/"

# Keyed by the path inside the cache folder (or inside data_dir). The checksums are those of the
# copies this project was tested with; a file that changed upstream is refused, not trained on.
REMOTE_FILES: dict[str, RemoteFile] = {
    "multi30k/train.de.gz": RemoteFile(
        _MULTI30K + "train.de.gz",
        "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    ),
    "multi30k/train.en.gz": RemoteFile(
        _MULTI30K + "train.en.gz",
        "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    ),
    "multi30k/train.fr.gz": RemoteFile(
        _MULTI30K + "train.fr.gz",
        "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    ),
    "multi30k/val.de.gz": RemoteFile(
        _MULTI30K + "val.de.gz",
        "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    ),
    "multi30k/val.en.gz": RemoteFile(
        _MULTI30K + "val.en.gz",
        "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    ),
    "multi30k/val.fr.gz": RemoteFile(
        _MULTI30K + "val.fr.gz",
        "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    ),
    "multi30k/test_2016_flickr.de.gz": RemoteFile(
        _MULTI30K + "test_2016_flickr.de.gz",
        "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    ),
    "multi30k/test_2016_flickr.en.gz": RemoteFile(
        _MULTI30K + "test_2016_flickr.en.gz",
        "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    ),
    "multi30k/test_2016_flickr.fr.gz": RemoteFile(
        _MULTI30K + "test_2016_flickr.fr.gz",
        "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    ),
    "tatoeba/fra-eng.zip": RemoteFile(
        _MANYTHINGS + "fra-eng.zip",
        "16c4f7d0df9e7c5e6c54cdb0447f3f4a18a55052ff5e2e0b27dd4a06c0e49d04",
    ),
    "tatoeba/deu-eng.zip": RemoteFile(
        _MANYTHINGS + "deu-eng.zip",
        "b7688f84f99fa33c17397c14d8bd9cef1fdeb2ee0bf50074767023aee8926e28",
    ),
}


def cache_dir() -> Path:
    """$TRANSFORMER_DATA, else $XDG_CACHE_HOME/transformer, else ~/.cache/transformer."""
    if os.environ.get("TRANSFORMER_DATA"):
        return Path(os.environ["TRANSFORMER_DATA"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "transformer"


def sha256_of(path: Path) -> str:
    """The hex SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(url: str, dest: Path, sha256: str | None) -> Path:
    """Downloads ``url`` to ``dest`` unless a verified copy is already there.

    The bytes go to a temporary file beside ``dest``, named after this process (several torchrun
    ranks may download at once: ``files.atomic_write``), are hashed on the way, and only a
    verified file is renamed into place, so an interrupted or corrupted download never leaves a
    file that looks complete.

    Args:
        url: any address urllib opens (https://, file://).
        dest: where the file ends up.
        sha256: the expected hex digest; a mismatch is a UserError and nothing is kept.
            None: accept whatever the address serves (data.verify_checksums: false).
    """
    if dest.is_file() and (sha256 is None or sha256_of(dest) == sha256):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    try:
        # manythings.org refuses urllib's default User-Agent.
        request = urllib.request.Request(url, headers={"User-Agent": "transformer/0.1"})
        response = urllib.request.urlopen(request, timeout=60)
        with response, atomic_write(dest, "wb") as out:
            size = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=size, unit="B", unit_scale=True, desc=dest.name, disable=None) as bar:
                for block in iter(lambda: response.read(1 << 16), b""):
                    out.write(block)
                    digest.update(block)
                    bar.update(len(block))
            if sha256 is not None and digest.hexdigest() != sha256:  # nothing is kept
                raise UserError(
                    f"{url}: checksum mismatch (sha256 {digest.hexdigest()}, expected {sha256}); "
                    f"the file changed upstream since this version was tested: pass "
                    f"--verify_checksums false to use it anyway, or put the file you want in a "
                    f"folder as {dest.name} and pass --data_dir FOLDER"
                )
    except (urllib.error.URLError, OSError) as error:
        raise UserError(
            f"could not download {url} to {dest}: {error}; download it yourself, put it in a "
            f"folder as {dest.name} and pass --data_dir FOLDER"
        ) from None
    return dest


def corpus_file(key: str, data_dir: str | None, verify: bool = True) -> Path:
    """The local path of a named corpus file (a key of REMOTE_FILES), downloading it if needed.

    Args:
        key: e.g. ``"multi30k/train.de.gz"``.
        data_dir: a folder holding the file as ``train.de.gz`` or ``multi30k/train.de.gz``;
            nothing is downloaded or verified then. None: the cache folder, filled on demand.
        verify: check the download against the pinned SHA-256.
    """
    if data_dir is not None:
        folder = Path(data_dir).expanduser()
        for path in (folder / Path(key).name, folder / key):
            if path.is_file():
                return path
        raise UserError(
            f"file not found: {folder / Path(key).name} (nor {folder / key}); data_dir must "
            f"hold the files of the corpus under their original names"
        )
    remote = REMOTE_FILES[key]
    return download(remote.url, cache_dir() / key, remote.sha256 if verify else None)
