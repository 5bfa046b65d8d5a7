import json
from html.parser import HTMLParser

from iclr24.core import list_experiments, run
from iclr24.core.report import build_report


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
    assert "run failed" in parser.cells
    assert "(not run yet)" in parser.cells  # hyperattention is registered but has no run here
    assert {"summary", "toy", "toy_forgetful", "hyperattention"} <= set(parser.ids)
    assert len(parser.images) == 2 and parser.images[0].startswith("data:image/png;base64,")  # + the forest plot
    assert "holds" in parser.cells and any(c.endswith("n=4 draws") for c in parser.cells)
    assert "1 hold, 0 fail, 0 inconclusive, 0 not run" in index.read_text()
    assert "sanity checks" in index.read_text() and "the draws are finite" in index.read_text()
    assert "http" not in "".join(parser.images)  # self-contained
    readme = (tmp_path / "report" / "README.md").read_text()
    assert "| toy | mean is small | \\|mean\\| < 3 |" in readme and "| holds | " in readme
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
