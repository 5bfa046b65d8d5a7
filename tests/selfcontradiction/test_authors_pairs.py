"""load_pairs(path=...): the authors' annotated pairs, read from a local copy in their format (a fixture)."""
import json

import pytest

from iclr24.selfcontradiction import load_pairs

TARGET = "Please tell me about Kalo Bridge"


def _pair(orig, alt, tag, triple, prefix=""):
    return {"target": TARGET, "orig": orig, "alt": alt, "prefix": prefix, "triple": triple, "tag": tag,
            "wrong": "none", "orig_tag": None, "explanation": None}


@pytest.fixture
def authors_copy(tmp_path):
    folder = tmp_path / "test" / "test" / "sentences" / "chatgpt" / "Please_tell_me_about_Kalo_Bridge" / "m3"
    folder.mkdir(parents=True)
    files = {
        "0_0_0.txt": _pair("Kalo Bridge opened in 1910.", "Kalo Bridge opened in 1910 after four years.", "ok",
                           [["Kalo Bridge", "opened in", "1910"], "compactie"]),
        "0_1_0.txt": _pair("It spans 300 metres.", "It spans 120 metres.", "strong",
                           [["It", "spans", "300 metres"], "compactie", 412], prefix="Kalo Bridge opened in 1910."),
        "0_2_0.txt": _pair("It is made of stone.", "It is made of steel.", "weak",
                           [["It", "is made of", "stone"], "native"]),
        "m2_0_0_0.txt": _pair("Kalo Bridge opened.", "Kalo Bridge closed.", "strong",   # from a revised answer
                              [["Kalo Bridge", "opened", ""], "compactie"]),
        "_cost_0.txt": {"prompt": TARGET, "cost_user": 100, "cost_model": 10},
    }
    for name, row in files.items():
        (folder / name).write_text(json.dumps(row, indent=2), encoding="utf-8")
    return tmp_path


def test_the_authors_pairs_in_their_format(authors_copy):
    pairs = load_pairs(authors_copy)
    assert [p.id for p in pairs] == ["chatgpt/Please_tell_me_about_Kalo_Bridge/m3/0_0_0",
                                     "chatgpt/Please_tell_me_about_Kalo_Bridge/m3/0_1_0"]   # CompactIE, as Table 3
    assert [p.contradictory for p in pairs] == [False, True]
    assert (pairs[1].a, pairs[1].b) == ("It spans 300 metres.", "It spans 120 metres.")
    assert pairs[0].context == TARGET and pairs[1].context == f"{TARGET} Kalo Bridge opened in 1910."
    every = load_pairs(authors_copy / "test" / "test" / "sentences", triples=None)   # the sentences folder works too
    assert [p.contradictory for p in every] == [False, True, True]                   # 'weak' is contradictory


def test_the_bundled_pairs_stay_the_default():
    pairs = load_pairs()
    assert len(pairs) == 110 and pairs[0].id == "000c"


def test_a_missing_or_wrong_copy_says_what_to_fetch(tmp_path, authors_copy):
    with pytest.raises(FileNotFoundError, match="path=.*expected .*test/test/sentences/chatgpt.*eth-sri/ChatProtect"):
        load_pairs(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=r"sentences for \['chatgpt'\], not generator='gpt4'"):
        load_pairs(authors_copy, generator="gpt4")
    with pytest.raises(ValueError, match="generator must be a non-empty str"):
        load_pairs(authors_copy, generator="")
    with pytest.raises(ValueError, match="no annotated pairs with triples='spacy'"):
        load_pairs(authors_copy, triples="spacy")
    bad = next(authors_copy.rglob("0_0_0.txt"))
    bad.write_text(json.dumps(_pair("a", "b", "maybe", [["a", "b", "c"], "compactie"])), encoding="utf-8")
    with pytest.raises(ValueError, match="tag 'maybe' is not 'ok', 'weak' or 'strong'"):
        load_pairs(authors_copy)
    bad.write_text("not json", encoding="utf-8")
    with pytest.raises(ValueError, match="0_0_0.txt is not an annotated pair"):
        load_pairs(authors_copy)
