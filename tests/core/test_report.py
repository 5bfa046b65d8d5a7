import html
import json
from html.parser import HTMLParser

from iclr24.core import list_experiments, run
from iclr24.core.report import build_report
from iclr24.core.runner import latest_runs, run_time


class _Collector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.cells, self.images, self.ids = [], [], []
        self._in_cell = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self._in_cell = tag == "td"
        if tag == "img":
            self.images.append(attrs["src"])
        if "id" in attrs:
            self.ids.append(attrs["id"])

    def handle_data(self, data):
        if self._in_cell:
            self.cells.append(data)


def test_report_holds_every_claim_and_embeds_figures(toys, tmp_path):
    runs = tmp_path / "runs"
    run("toy", preset="smoke", runs_dir=runs, quiet=True)
    run("toy_forgetful", preset="smoke", runs_dir=runs, quiet=True)  # a failed run
    index = build_report(runs, tmp_path / "report", list_experiments())
    parser = _Collector()
    parser.feed(index.read_text())
    assert "mean is small" in parser.cells and "|mean| < 3" in parser.cells
    assert any(c.startswith("run failed") for c in parser.cells)
    # hyperattention is registered but has no run here
    assert "not run yet (<code>iclr24 run hyperattention</code>)" in index.read_text()
    assert {"summary", "toy", "toy_forgetful", "hyperattention"} <= set(parser.ids)
    assert len(parser.images) == 2 and parser.images[0].startswith("data:image/png;base64,")  # + the forest plot
    assert "holds" in parser.cells and any(c.endswith("n=4 draws, vs < 3") for c in parser.cells)
    assert "paper claims: 1 hold, 0 fail, 0 inconclusive, 0 not run" in index.read_text()
    toy_time = run_time(latest_runs(runs)["toy"].result)
    assert index.read_text().count(toy_time) == 2  # once in the summary (per method, not per claim), in its section
    assert "sanity checks" in index.read_text() and "the draws are finite" in index.read_text()
    assert "http" not in "".join(parser.images)  # self-contained
    readme = (tmp_path / "report" / "README.md").read_text()
    assert "| mean is small (margin from the spec) | \\|mean\\| < 3 |" in readme and "| holds | " in readme
    assert "](figures/toy/samples.png)" in readme and (tmp_path / "report/figures/toy/samples.png").is_file()


def test_report_escapes_html(toys, tmp_path):
    runs = tmp_path / "runs"
    run("toy", preset="smoke", overrides=["fail=true"], runs_dir=runs, quiet=True)
    text = build_report(runs, tmp_path / "out").read_text()
    assert "<script" not in text and "RuntimeError: the toy failed on purpose" in text


def test_weak_isolation_is_on_the_banner(toys, tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    run("toy", preset="smoke", runs_dir=runs, quiet=True)
    assert "WEAK isolation" not in build_report(runs, tmp_path / "a").read_text()
    monkeypatch.setenv("ICLR24_SANDBOX", "weak")
    record = run("toy", preset="smoke", runs_dir=runs, quiet=True)
    assert json.loads((record.run_dir / "environment.json").read_text())["sandbox_isolation"] == "weak"
    assert "Generated code ran with WEAK isolation" in build_report(runs, tmp_path / "b").read_text()


def _planted(runs, claims):
    """A run folder of the toy experiment whose result.json holds the given claims."""
    record = run("toy", preset="smoke", runs_dir=runs, quiet=True)
    path = record.run_dir / "result.json"
    result = json.loads(path.read_text())
    result["claims"] = claims
    path.write_text(json.dumps(result))
    return record


def _claim(evidence, **extra):
    return {"statement": "planted", "paper": "p", "measured": "m", "criterion": "", "verdict": evidence.verdict,
            "evidence": evidence.to_dict(), **extra}


def test_a_planted_record_that_does_not_rederive_is_shown_as_damaged(toys, tmp_path):
    from iclr24.core.evidence import against, compare

    one = against([0.9], 0.5).to_dict()  # one replicate, then edited to say n = 3 and "holds"
    planted = {"statement": "planted", "paper": "p", "measured": "m", "verdict": "holds",
               "evidence": {**one, "n": 3, "interval": [0.8, 1.0], "verdict": "holds"}}
    honest = _claim(compare([0.4, 0.5, 0.6], [0.0, 0.1, 0.0]))
    edited = {**honest, "statement": "edited", "verdict": "fails"}
    runs = tmp_path / "runs"
    _planted(runs, [planted, honest, edited, "not a claim"])
    text = build_report(runs, tmp_path / "report").read_text()
    assert text.count(">damaged<") == 6  # in the summary and in the method's section
    assert html.escape("stored verdict 'holds', its samples give 'inconclusive'") in text
    assert html.escape("stored verdict 'fails', its samples give 'holds'") in text
    assert "paper claims: 1 hold, 0 fail, 0 inconclusive, 0 not run; 3 damaged records" in text


def test_every_part_of_a_combined_claim_is_a_sub_row_and_stand_ins_are_tallied_apart(toys, tmp_path):
    from iclr24.core.evidence import against, all_of, compare, given

    gain = compare([0.4, 0.5, 0.6], [0.0, 0.1, 0.0], label="gain")
    short = against([0.91, 0.93, 0.92, 0.90], 0.95, label="accuracy")
    combined = _claim(all_of(gain, short), statement="combined", provenance="spec")
    untested = _claim(given(short, gain), statement="untested", provenance="paper", subject="stand-in",
                      stand_in="a scripted model stands in for GPT-4")
    revised = _claim(gain, statement="revised", provenance="revised", revision="bar moved after a pilot",
                     original=against([0.4, 0.5, 0.6], 1.0).to_dict())
    runs = tmp_path / "runs"
    _planted(runs, [combined, untested, revised])
    index = build_report(runs, tmp_path / "report")
    text = index.read_text()
    parser = _Collector()
    parser.feed(text)
    assert "all of 2 parts (below)" in parser.cells
    assert any("part 1: gain" in c for c in parser.cells) and any("part 2: accuracy" in c for c in parser.cells)
    assert "(decides)" in text and text.count("0.467 [") >= 3  # each part's own interval, in the summary too
    assert any(c.endswith("n=4 seeds, vs > 0.95") for c in parser.cells)  # the failing part's own n and bar
    assert "requirement: accuracy" in text
    assert "stand-in: a scripted model stands in for GPT-4" in text
    assert "margin revised: bar moved after a pilot" in text and "under the first definition: fails" in text
    assert ("paper claims: 1 hold, 1 fail, 0 inconclusive, 0 not run; stand-ins: 0 hold, 0 fail, 1 inconclusive, "
            "0 not run") in text
