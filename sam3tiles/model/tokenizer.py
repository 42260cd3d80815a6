"""The CLIP tokenizer that turns a text prompt into the SAM 3 language encoder's `tokens` input.

SAM 3's language encoder reads OpenAI CLIP's byte-level BPE: the row is 49406 (start of text), the
word-piece ids, 49407 (end of text), then zeros, 32 ids in all (so at most 30 word pieces).

This module rebuilds that tokenizer with the Hugging Face `tokenizers` package (a `BPE` model over
the byte-level alphabet, `</w>` end-of-word suffix) and reproduces, id for id, the reference caller
`osam/_models/yoloworld/clip/simple_tokenizer.py` (a copy of OpenAI's `clip/simple_tokenizer.py`):

* text cleaning: `html.unescape` twice, strip, Unicode NFC, every run of whitespace to one space,
  Python's `str.lower()`. NFC is the one step osam lacks (OpenAI's original gets it from `ftfy`): it
  only changes text typed in decomposed form ("e" + U+0301), which then tokenizes like "é".
* word splitting with CLIP's pattern ``<|startoftext|>|<|endoftext|>|'s|'t|'re|'ve|'m|'ll|'d|\\w+|
  \\d+|[^\\s\\w]+`` using Python's `re`. The splitting is done in Python on purpose: Python's `\\w`
  differs from the Oniguruma `\\w` inside `tokenizers` for combining marks and some numerals
  (Devanagari, Thai, decomposed accents, "½"), and the model was fed Python's split.
* each word is then encoded by the `tokenizers` BPE model (`is_pretokenized=True`).

Vocabulary (`bpe_simple_vocab_16e6.txt.gz`, 1.3 MB, sha256 `VOCAB_SHA256` below): OpenAI's CLIP
vocabulary, https://github.com/openai/CLIP (clip/bpe_simple_vocab_16e6.txt.gz), MIT License,
Copyright (c) 2021 OpenAI. It is data from elsewhere, not part of this repository. Looked up in order:

1. the path in the environment variable ``SAM3TILES_VOCAB``;
2. ``<model dir>/bpe_simple_vocab_16e6.txt.gz`` (``sam3tiles model fetch`` downloads it there);
3. the identical file shipped inside an installed ``osam`` package (located with
   ``importlib.util.find_spec``, never imported).

The built tokenizer is cached per process and per vocabulary file.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import html
import os
import re
import threading
import unicodedata
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers

from ..errors import ModelError, PromptError
from .files import VOCAB_ENV, VOCAB_NAME, VOCAB_SHA256, find_vocab, resolve_model_dir  # noqa: F401


CONTEXT_LENGTH = 32
START_OF_TEXT = 49406
END_OF_TEXT = 49407
VOCAB_SIZE = 49408
#: Word pieces that fit in one row: the context less the start and end ids.
MAX_WORD_TOKENS = CONTEXT_LENGTH - 2

_SPECIAL = {"<|startoftext|>": START_OF_TEXT, "<|endoftext|>": END_OF_TEXT}
_PATTERN = re.compile(r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|\w+|\d+|[^\s\w]+""",
                      re.IGNORECASE)
_WHITESPACE = re.compile(r"\s+")


def _bytes_to_unicode() -> dict[int, str]:
    """CLIP's (and GPT-2's) reversible map from the 256 byte values to printable characters."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def clean_text(text: str) -> str:
    """The text as the tokenizer sees it: unescaped, NFC, whitespace collapsed, lower-cased."""
    text = html.unescape(html.unescape(text))
    text = unicodedata.normalize("NFC", text)
    text = _WHITESPACE.sub(" ", text.strip()).strip()
    return text.lower()


class ClipTokenizer:
    """OpenAI CLIP's BPE tokenizer, built with `tokenizers` from one vocabulary file."""

    def __init__(self, vocab_path: str | os.PathLike[str]):
        self.vocab_path = Path(vocab_path)
        try:
            raw = self.vocab_path.read_bytes()
            digest = hashlib.sha256(raw).hexdigest()
            lines = gzip.decompress(raw).decode("utf-8").split("\n")
        except (OSError, EOFError, UnicodeDecodeError) as exc:
            raise ModelError(f"cannot read the CLIP vocabulary {self.vocab_path}: {exc}. Delete it and "
                             f"run `sam3tiles model fetch` to download it again") from exc
        if digest != VOCAB_SHA256:
            raise ModelError(
                f"{self.vocab_path} is not OpenAI CLIP's {VOCAB_NAME} (sha256 {digest[:16]}..., expected "
                f"{VOCAB_SHA256[:16]}...): delete it and run `sam3tiles model fetch`")
        # The same slice as CLIP: skip the header line, keep 49152 - 256 - 2 merges.
        merges = [tuple(line.split()) for line in lines[1:49152 - 256 - 2 + 1]]
        alphabet = list(_bytes_to_unicode().values())
        vocab = alphabet + [c + "</w>" for c in alphabet] + ["".join(m) for m in merges]
        vocab += list(_SPECIAL)
        self.encoder = {piece: i for i, piece in enumerate(vocab)}
        if len(self.encoder) != VOCAB_SIZE:
            raise ModelError(f"{self.vocab_path} gives {len(self.encoder)} tokens, expected {VOCAB_SIZE}: "
                             f"delete it and run `sam3tiles model fetch`")
        bpe = models.BPE(vocab=self.encoder, merges=merges, end_of_word_suffix="</w>")
        self._tokenizer = Tokenizer(bpe)
        # Words arrive already split (see the module docstring); only the byte-level mapping remains.
        self._tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        self._lock = threading.Lock()

    def encode(self, text: str) -> list[int]:
        """The word-piece ids of `text`, without the start and end ids."""
        ids: list[int] = []
        words: list[str] = []
        for piece in _PATTERN.findall(clean_text(text)):
            special = _SPECIAL.get(piece)
            if special is None:
                words.append(piece)
                continue
            ids.extend(self._encode_words(words))
            words = []
            ids.append(special)
        ids.extend(self._encode_words(words))
        return ids

    def _encode_words(self, words: list[str]) -> list[int]:
        if not words:
            return []
        with self._lock:  # a Tokenizer is not documented as safe to share between threads
            return list(self._tokenizer.encode(words, is_pretokenized=True, add_special_tokens=False).ids)

    def tokenize(self, text: str) -> np.ndarray:
        """int64 [1, 32]: start id, word ids, end id, zero padding. PromptError for blank or long text."""
        if not isinstance(text, str):
            raise PromptError(f"a text prompt must be a string, got {type(text).__name__}: pass the "
                              f"words as text, e.g. \"building\"")
        ids = self.encode(text)
        if not ids:
            raise PromptError("the text prompt is empty: give at least one word, e.g. \"building\" (use "
                              "\"visual\" for a prompt made only of example boxes)")
        if len(ids) > MAX_WORD_TOKENS:
            raise PromptError(
                f"the text prompt {text[:60]!r}{'...' if len(text) > 60 else ''} is {len(ids)} tokens "
                f"long; SAM 3 takes at most {MAX_WORD_TOKENS} (a {CONTEXT_LENGTH}-token context less the "
                f"start and end): shorten it to a few words, e.g. a noun phrase like \"solar panel\"")
        row = np.zeros((1, CONTEXT_LENGTH), dtype=np.int64)
        row[0, 0] = START_OF_TEXT
        row[0, 1:len(ids) + 1] = ids
        row[0, len(ids) + 1] = END_OF_TEXT
        return row


@functools.lru_cache(maxsize=4)
def _load(path: str) -> ClipTokenizer:
    return ClipTokenizer(path)


def get_tokenizer(model_dir: str | os.PathLike[str] | None = None) -> ClipTokenizer:
    """The process-wide tokenizer for the vocabulary `find_vocab(model_dir)` picks (built once)."""
    return _load(str(find_vocab(model_dir).resolve()))


def tokenize(text: str, model_dir: str | os.PathLike[str] | None = None) -> np.ndarray:
    """The SAM 3 language encoder's `tokens` input for `text`: int64 [1, 32].

    Raises PromptError for blank text or more than 30 word tokens, ModelNotFoundError when no
    vocabulary file is found.
    """
    return get_tokenizer(model_dir).tokenize(text)
