"""sam3tiles.model.tokenizer against osam's CLIP tokenizer (the one osam's SAM 3 caller uses), id for id."""

from __future__ import annotations

import gzip
import itertools
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sam3tiles.model import files
from sam3tiles.model import tokenizer as tk
from sam3tiles.errors import ModelError, ModelNotFoundError, PromptError

osam_clip = pytest.importorskip("osam._models.yoloworld.clip")
osam_simple = pytest.importorskip("osam._models.yoloworld.clip.simple_tokenizer")


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    monkeypatch.delenv(tk.VOCAB_ENV, raising=False)
    monkeypatch.delenv("SAM3TILES_MODEL_DIR", raising=False)


def osam_row(text: str) -> np.ndarray:
    return osam_clip.tokenize(texts=[text], context_length=32)


HANDWRITTEN = [
    "red", "blue", "building", "solar panel", "visual", "car", "cars", "a car", "the red car",
    "swimming pool", "swimming-pool", "Swimming Pool", "SWIMMING POOL", "  solar   panel  ", "solar\tpanel",
    "solar\npanel", "road marking", "tree", "trees.", "trees!", "trees?", "tree, bush", "tree; bush",
    "tree: bush", "(tree)", "[tree]", "{tree}", "\"tree\"", "'tree'", "tree's shadow", "don't", "it's",
    "they're", "we've", "I'm", "you'll", "he'd", "rock'n'roll", "o'clock", "3 cars", "10 cars", "100m",
    "2023", "3.14", "1,000", "1/2", "50%", "#1", "a+b", "a&b", "x-ray", "e-mail", "well-known",
    "state-of-the-art", "north--south", "hyphen - dash", "en–dash", "em—dash", "under_score", "a.b.c",
    "U.S.A.", "wind turbine", "wind-turbine", "wind_turbine", "windturbine", "oil tank", "oil-tank",
    "ship", "boat", "airplane", "aeroplane", "helicopter", "tennis court", "baseball diamond",
    "soccer field", "roundabout", "bridge", "harbor", "harbour", "storage tank", "container",
    "shipping container", "greenhouse", "parking lot", "parking-lot", "crosswalk", "zebra crossing",
    "café", "naïve", "façade", "über", "Straße", "STRASSE", "résumé", "coöperation", "piñata",
    "ångström", "smørrebrød", "łódź", "İstanbul", "ΣΑΣ", "σας", "Ελλάδα", "москва", "Россия",
    "日本語", "東京タワー", "한국어", "中文 文本", "हिन्दी", "ไทย", "العربية", "עברית", "tiếng việt",
    "½ cup", "x² + y²", "Ⅻ", "①②③", "🚗", "🚗🚗🚗", "car 🚗", "👍🏽", "🏳️‍🌈", "™", "©2024", "°C",
    "€100", "£5", "¥", "§3", "…", "«quoted»", "„quoted“", "¿qué?", "¡hola!", "a\u00a0b", "a\u2003b",
    "a\u200bb", "tab\tseparated\tvalues", "&amp;", "fish &amp; chips", "&lt;tag&gt;", "&amp;amp;",
    "&#39;quoted&#39;", "&quot;x&quot;", "<b>bold</b>", "a <|startoftext|> b", "<|endoftext|>",
    "x<|endoftext|>y", "<|STARTOFTEXT|>", "<|startoftext", "end|>", "'s", "'", "''", "-", "--", "...",
    "?!", "a", "A", "z", "0", "00000", "123456789", "abc123", "123abc", "a1b2c3", "CamelCaseWord",
    "snake_case_word", "kebab-case-word", "dot.separated.words", "comma,separated,words",
    "supercalifragilisticexpialidocious", "pneumonoultramicroscopicsilicovolcanoconiosis",
    "the quick brown fox jumps over the lazy dog",
    "a photo of a building with a red roof next to a road",
]


def _generated() -> list[str]:
    adjectives = ["red", "small", "large", "white", "damaged", "old", "new", "round", "solar-powered",
                  "two-storey", "blue"]
    nouns = ["building", "roof", "car", "truck", "tree", "pool", "tank", "boat", "field", "road", "panel",
             "house", "tower"]
    out = [f"{a} {n}" for a, n in itertools.product(adjectives, nouns)]
    out += [f"{n}s" for n in nouns] + [f"{n.upper()}!" for n in nouns] + [f"{n}-{m}" for n, m in
                                                                          zip(nouns, reversed(nouns))]
    return out


PHRASES = HANDWRITTEN + _generated()


def test_corpus_is_large_enough():
    assert len(set(PHRASES)) >= 200


@pytest.mark.parametrize("text", PHRASES)
def test_rows_match_osam_id_for_id(text):
    ours = tk.tokenize(text)
    assert ours.dtype == np.int64 and ours.shape == (1, 32)
    np.testing.assert_array_equal(ours, osam_row(text))


def test_contract_example_ids():
    assert tk.tokenize("red")[0, :3].tolist() == [49406, 736, 49407]
    assert tk.tokenize("blue")[0, :3].tolist() == [49406, 1746, 49407]
    assert tk.tokenize("building")[0, :3].tolist() == [49406, 2307, 49407]
    row = tk.tokenize("solar panel")[0]
    assert row[:4].tolist() == [49406, 5199, 3724, 49407]
    assert not row[4:].any()


def test_test_graph_colour_ids_are_single_tokens():
    from sam3tiles.testing.graphs import COLOUR_IDS

    for word, token in COLOUR_IDS.items():
        assert tk.get_tokenizer().encode(word) == [token]


def test_lowercase_and_whitespace_collapse():
    np.testing.assert_array_equal(tk.tokenize("  Solar \t\n PANEL "), tk.tokenize("solar panel"))


def test_nfc_decomposed_text_tokenizes_like_composed():
    # The one deliberate difference from osam (which lacks ftfy's NFC): decomposed accents compose.
    composed, decomposed = "café façade", unicodedata.normalize("NFD", "café façade")
    assert composed != decomposed
    np.testing.assert_array_equal(tk.tokenize(decomposed), tk.tokenize(composed))
    np.testing.assert_array_equal(tk.tokenize(decomposed), osam_row(composed))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=40))
def test_random_text_matches_osam(text):
    # osam has no NFC step: compare on text whose cleaning is NFC-stable (almost all real text).
    import html

    unescaped = html.unescape(html.unescape(text))
    assume(unicodedata.normalize("NFC", unescaped) == unescaped)
    ref = osam_simple_tokenizer().encode(text)
    assert tk.get_tokenizer().encode(text) == ref


_REF = None


def osam_simple_tokenizer():
    global _REF
    if _REF is None:
        _REF = osam_simple.SimpleTokenizer()
    return _REF


def test_thirty_tokens_fit_thirty_one_do_not():
    thirty = " ".join(["car"] * 30)
    row = tk.tokenize(thirty)
    assert row[0, 0] == 49406 and row[0, 31] == 49407
    np.testing.assert_array_equal(row, osam_row(thirty))
    with pytest.raises(PromptError, match="at most 30") as info:
        tk.tokenize(" ".join(["car"] * 31))
    assert "31 tokens" in str(info.value)
    with pytest.raises(RuntimeError):  # osam refuses it too
        osam_row(" ".join(["car"] * 31))


@pytest.mark.parametrize("text", ["", " ", "\t\n  ", "\u3000"])
def test_blank_text_is_a_prompt_error(text):
    with pytest.raises(PromptError, match="empty"):
        tk.tokenize(text)


def test_non_string_is_a_prompt_error():
    with pytest.raises(PromptError):
        tk.tokenize(None)  # type: ignore[arg-type]


def test_tokenizer_is_cached_per_process():
    assert tk.get_tokenizer() is tk.get_tokenizer()


def test_vocab_found_in_osam_without_importing_heavy_modules():
    path = files._osam_vocab()
    assert path is not None and path.name == tk.VOCAB_NAME
    assert tk.find_vocab(Path("/nonexistent-model-dir")) == path


def test_vocab_lookup_order(tmp_path, monkeypatch):
    shipped = files._osam_vocab()
    model_dir = tmp_path / "models"
    model_dir.mkdir()
    (model_dir / tk.VOCAB_NAME).write_bytes(shipped.read_bytes())
    assert tk.find_vocab(model_dir) == model_dir / tk.VOCAB_NAME
    monkeypatch.setenv("SAM3TILES_MODEL_DIR", str(model_dir))
    assert tk.find_vocab() == model_dir / tk.VOCAB_NAME
    env_copy = tmp_path / "elsewhere.txt.gz"
    env_copy.write_bytes(shipped.read_bytes())
    monkeypatch.setenv(tk.VOCAB_ENV, str(env_copy))
    assert tk.find_vocab(model_dir) == env_copy
    np.testing.assert_array_equal(tk.tokenize("solar panel"), osam_row("solar panel"))


def test_env_vocab_that_does_not_exist(tmp_path, monkeypatch):
    monkeypatch.setenv(tk.VOCAB_ENV, str(tmp_path / "nope.txt.gz"))
    with pytest.raises(ModelNotFoundError, match=tk.VOCAB_ENV):
        tk.find_vocab(tmp_path)


def test_no_vocab_anywhere_says_fetch(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "_osam_vocab", lambda: None)
    with pytest.raises(ModelNotFoundError, match="sam3tiles model fetch") as info:
        tk.tokenize("red", model_dir=tmp_path)
    assert str(tmp_path) in str(info.value)


def test_wrong_vocab_file_is_a_model_error(tmp_path, monkeypatch):
    bad = tmp_path / tk.VOCAB_NAME
    bad.write_bytes(gzip.compress(b"#version: 0.2\na b\n"))
    monkeypatch.setenv(tk.VOCAB_ENV, str(bad))
    with pytest.raises(ModelError, match="is not OpenAI CLIP"):
        tk.tokenize("red")
