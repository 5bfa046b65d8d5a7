import pytest

from iclr24.selfcontradiction import Triple, parse_triples, rule_based_triple, split_sentences


@pytest.mark.parametrize("text, expected", [
    ("Dr. Kreet won in 1998. He left.", ["Dr. Kreet won in 1998.", "He left."]),
    ("J. R. R. Tolkien wrote it. It sold.", ["J. R. R. Tolkien wrote it.", "It sold."]),
    ("It costs 3.5 euros. Cheap!", ["It costs 3.5 euros.", "Cheap!"]),
    ('He said "It works!" Then he left.', ['He said "It works!"', "Then he left."]),
    ("It moved to the U.S. in 1990. Later, e.g. in 2000, it grew.",
     ["It moved to the U.S. in 1990.", "Later, e.g. in 2000, it grew."]),
    ("Wait... what? Yes.", ["Wait... what?", "Yes."]),
    ("First line\n\nsecond paragraph without a period", ["First line", "second paragraph without a period"]),
    ("A sentence with   extra\nspaces.", ["A sentence with extra spaces."]),
    ("It ended (in 1990.) Then more.", ["It ended (in 1990.)", "Then more."]),
    ("lower case. after a period stays", ["lower case. after a period stays"]),
    ("", []),
])
def test_split_sentences_on_tricky_text(text, expected):
    assert split_sentences(text) == expected


def test_split_sentences_rejects_non_text():
    with pytest.raises(TypeError, match="text must be a str"):
        split_sentences(["a."])


def test_parse_triples_reads_llm_lines_and_skips_junk():
    reply = ("Here are the triples:\n1. (Velmora; was founded in; 1642)\n"
             "2. ( Velmora ;was founded by ; fishermen. )\n( ; no subject; x)\n(Velmora; was founded in; 1642)\n"
             "(Velmora; lies in; )\nnot a triple (a; b)")
    assert parse_triples(reply) == [Triple("Velmora", "was founded in", "1642"),
                                    Triple("Velmora", "was founded by", "fishermen"),
                                    Triple("Velmora", "lies in", "")]
    assert str(Triple("a", "b", "c")) == "(a; b; c)"


@pytest.mark.parametrize("sentence, expected", [
    ("Velmora was founded in 1642.", ("Velmora", "was founded in", "1642")),
    ("Kreet received the Halvorsen Prize in 1998.", ("Kreet", "received", "the Halvorsen Prize in 1998")),
    ("Lanner has never been to space.", ("Lanner", "has never been to", "space")),
    ("Her debut novel, The Salt Orchard, was published in 2006.",
     ("Her debut novel, The Salt Orchard", "was published in", "2006")),
    ("Kalo was named after Ida Pellam.", ("Kalo", "was named after", "Ida Pellam")),
    ("The tower is known for its clock.", ("The tower", "is known for", "its clock")),
])
def test_rule_based_triple(sentence, expected):
    assert rule_based_triple(sentence) == Triple(*expected)


@pytest.mark.parametrize("sentence", ["Hello there.", "He was.", "Yes"])
def test_rule_based_triple_gives_none_without_a_verb_and_object(sentence):
    assert rule_based_triple(sentence) is None
