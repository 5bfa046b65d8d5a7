"""ChatProtect: self-contradictory hallucinations of language models, triggered, detected and mitigated.

Niels Mündler, Jingxuan He, Slobodan Jenko, Martin Vechev. "Self-contradictory Hallucinations of Large
Language Models: Evaluation, Detection and Mitigation". ICLR 2024. https://arxiv.org/abs/2305.15852

    from iclr24.llm import get_model
    from iclr24.selfcontradiction import ChatProtect
    protect = ChatProtect(get_model("openai:gpt-4o-mini"), n_votes=10)   # any iclr24.llm LanguageModel
    report = protect.protect("Please tell me about the Eiffel Tower.")
    report.text, [(c.trigger.sentence, c.trigger.alternative, c.detection.score, c.action) for c in report.checks]

    protect.detect(context, "It opened in 1889.", "It opened in 1901.").score   # fraction of Yes votes

``SelfCheckDetector`` is the SelfCheckGPT-style baseline with the same ``detect`` interface;
``load_pairs()`` gives the 110 labelled pairs to measure a detector on; ``load_pairs(path=...)`` the
authors' annotated pairs from a local copy of eth-sri/ChatProtect. ``SimulatedGenerator`` and
``SimulatedAnalyzer`` are SIMULATED models over a ``FictionalWorld`` with known ground truth.
"""

from iclr24.selfcontradiction.chatprotect import (
    ChatProtect,
    ContradictionDetector,
    Detection,
    ProtectReport,
    SentenceCheck,
    Trigger,
    parse_yes_no,
    yes_probability,
)
from iclr24.selfcontradiction.evaluation import (
    LabelledPair,
    SelfCheckDetector,
    load_pairs,
    precision_recall_f1,
    score_pairs,
)
from iclr24.selfcontradiction.sentences import Triple, parse_triples, rule_based_triple, split_sentences
from iclr24.selfcontradiction.simulation import FictionalWorld, SimulatedAnalyzer, SimulatedGenerator, prompt_text

__all__ = ["ChatProtect", "ContradictionDetector", "Detection", "FictionalWorld", "LabelledPair", "ProtectReport",
           "SelfCheckDetector", "SentenceCheck", "SimulatedAnalyzer", "SimulatedGenerator", "Trigger", "Triple",
           "load_pairs", "parse_triples", "parse_yes_no", "precision_recall_f1", "prompt_text", "rule_based_triple",
           "score_pairs", "split_sentences", "yes_probability"]
