"""The text ``chargpt`` learns: numpy's own documentation - the docstrings of the pinned numpy's
``_core/_add_newdocs.py`` and ``_core/fromnumeric.py`` (about 275,000 characters, 202
docstrings; nothing is downloaded) - its character vocabulary and one fixed train / held-out
split by docstring.

The text is read from the source files with :mod:`ast` (not from ``__doc__``, which Python 3.13
dedents differently), so it is the same on every Python version; it is pinned by its SHA-256
(:data:`CORPUS_SHA256`), and another numpy's text is refused (:class:`CorpusError`).
"""

from __future__ import annotations

import ast
import hashlib
import textwrap
from pathlib import Path
from typing import NamedTuple

import numpy as np

__all__ = [
    "CORPUS_SHA256",
    "HELD_OUT_DOCS",
    "SPLIT_SEED",
    "VOCAB",
    "Corpus",
    "CorpusError",
    "decode",
    "encode",
    "load",
    "windows",
]

#: The characters the model knows, id = index: newline, then printable ASCII (space .. ~).
VOCAB = "\n" + "".join(chr(c) for c in range(32, 127))
_IDS = {ch: i for i, ch in enumerate(VOCAB)}
_SPACE = _IDS[" "]
#: The source files (in numpy's package) whose docstrings are the corpus, in this order.
SOURCES = ("_core/_add_newdocs.py", "_core/fromnumeric.py")
_MIN_DOC = 200  # shorter string constants are names and messages, not prose
#: SHA-256 of the corpus text (numpy 2.4.6's); another text is refused.
CORPUS_SHA256 = "af77b386d713c973564b8ead0fcf4690aa99e428440aa1d9b967a480d2e1204d"
#: Seed of the permutation of the docstrings; the first HELD_OUT_DOCS are held out.
SPLIT_SEED = 0
HELD_OUT_DOCS = 20


class CorpusError(ValueError):
    """The corpus text is not the pinned one (another numpy)."""


class Corpus(NamedTuple):
    """Token ids (int64) of the training text and of the held-out text."""

    train: np.ndarray
    held_out: np.ndarray


def encode(text: str) -> np.ndarray:
    """The ids of ``text`` (int64); a character outside :data:`VOCAB` becomes a space."""
    return np.fromiter((_IDS.get(ch, _SPACE) for ch in text), np.int64, len(text))


def decode(ids: np.ndarray | list[int]) -> str:
    """The text of ``ids``."""
    return "".join(VOCAB[int(i)] for i in np.asarray(ids).reshape(-1))


def docstrings(root: Path) -> list[str]:
    """The long string constants of :data:`SOURCES` under numpy's package ``root``, dedented,
    in the order :func:`ast.walk` meets them."""
    docs: list[str] = []
    for name in SOURCES:
        tree = ast.parse((root / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and len(text) > _MIN_DOC:
                docs.append(textwrap.dedent(text).strip())
    return docs


def load() -> Corpus:
    """The train and held-out ids, the same on every call, machine and Python version;
    :class:`CorpusError` if numpy's text is not the pinned one."""
    root = Path(np.__file__).parent
    docs = docstrings(root)
    digest = hashlib.sha256("\n\n".join(docs).encode()).hexdigest()
    if digest != CORPUS_SHA256:
        raise CorpusError(
            f"chargpt's corpus (docstrings of numpy {np.__version__}'s {', '.join(SOURCES)}) "
            f"has sha256 {digest[:16]}..., not the pinned {CORPUS_SHA256[:16]}... of numpy "
            "2.4.6: install the pinned numpy (requirements.lock)"
        )
    order = np.random.default_rng(SPLIT_SEED).permutation(len(docs))
    held = set(order[:HELD_OUT_DOCS].tolist())
    join = "\n\n".join
    train = join(d for i, d in enumerate(docs) if i not in held)
    test = join(d for i, d in enumerate(docs) if i in held)
    return Corpus(encode(train), encode(test))


def windows(ids: np.ndarray, length: int, count: int, stride: int | None = None) -> np.ndarray:
    """``count`` windows of ``length + 1`` ids (inputs and next-character targets), starting
    every ``stride`` ids (default ``length``) from the start: (count, length + 1). Fewer when
    the text ends first."""
    step = length if stride is None else stride
    starts = range(0, len(ids) - length - 1 + 1, step)
    picked = [ids[s : s + length + 1] for s in list(starts)[:count]]
    return np.stack(picked) if picked else np.zeros((0, length + 1), np.int64)
