"""L2MAC's Features % by differential testing: the hidden tests are call scripts whose expected answers stay in
this process. Each forgery of the second review scores 0; honest code scores full marks; generated names and
contents never crash the scorer."""

import pytest

from iclr24.l2mac.evaluate import features_percent
from iclr24.l2mac.tasks import BOOKSHOP, ONE_STEP_TASKS
from iclr24.sandbox import score_pytest

ADD = ONE_STEP_TASKS[0]  # calc.add, one hidden test of two calls
HONEST = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return 5\n"  # right on the first call only


def bookshop(bugs=()):
    """The reference codebase, with the named functions' known bugs put in."""
    files = {}
    for module in BOOKSHOP.modules:
        sources = []
        for function in module.functions:
            source = function.source
            if function.name in bugs:
                source = source.replace(*function.bug, 1)
            sources.append(source)
        files[module.name] = f'"""{module.doc}"""\n{module.imports}\n\n' + "\n\n".join(sources)
    return files


def test_honest_code_scores_full_marks_and_wrong_code_does_not():
    assert features_percent({"calc.py": HONEST}, ADD).percent == 100.0
    assert features_percent({"calc.py": WRONG}, ADD).percent == 0.0
    full = features_percent(bookshop(), BOOKSHOP)
    assert (full.passed, full.total) == (27, 27)
    # an empty root __init__.py beside the modules scored 0/2 under the old pytest scorer; it changes nothing now
    assert features_percent({**bookshop(), "__init__.py": ""}, BOOKSHOP).passed == 27


@pytest.mark.parametrize("bug", ["price_of", "cart_total", "reserve", "place_order", "free_shipping"])
def test_the_call_scripts_agree_with_the_pytest_files_on_each_known_bug(bug):
    """The hidden tests as call scripts and as pytest files give the same count on the reference with one
    function's bug (all 24 agree: docs/l2mac.md)."""
    files = bookshop((bug,))
    assert features_percent(files, BOOKSHOP).passed == score_pytest(files, BOOKSHOP.hidden_tests).passed < 27


@pytest.mark.parametrize("forgery", [
    # a generated package named like the hidden test module, standing in for it (2/2 under the old scorer)
    {"test_hidden_calc/__init__.py": "__file__ = '/sandbox/test_hidden_calc.py'\ndef test_add():\n    pass\n"},
    # builtins patched so that assertions cannot fail, the originals put back in sys.modules
    {"sitecustomize.py": "import builtins\nbuiltins.AssertionError = type('Never', (BaseException,), {})\n",
     "conftest.py": "import pytest\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
                    "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"},
    # reading the hidden tests at run time to answer from them
    {"cheat.py": "import glob\nFOUND = glob.glob('/**/test_hidden*', recursive=True)\n"},
])
def test_forgeries_beside_wrong_code_score_zero(forgery):
    assert features_percent({"calc.py": WRONG, **forgery}, ADD).passed == 0


def test_an_answer_equal_to_everything_scores_zero():
    equal_to_all = ("class Anything:\n    def __eq__(self, other):\n        return True\n"
                    "def add(a, b):\n    return Anything()\n")
    assert features_percent({"calc.py": equal_to_all}, ADD).passed == 0


@pytest.mark.parametrize("files", [
    {"test_hidden_calc.py/notes.txt": "a folder named like a test file"},  # IsADirectoryError under the old scorer
    {"a" * 4200 + ".py": "x = 1"},  # a path no file system takes
    {"notes.py": "s = '\udcff'\n"},  # a lone surrogate
])
def test_generated_names_and_contents_are_scored_not_crashed_on(files):
    score = features_percent({"calc.py": HONEST, **files}, ADD)
    assert score.total == 1 and score.passed in (0, 1)
    if score.passed == 0:
        assert score.rejected.startswith("the codebase cannot be run")


def test_every_hidden_test_file_has_its_call_scripts():
    assert set(BOOKSHOP.hidden_cases) == set(BOOKSHOP.hidden_tests)
    for task in ONE_STEP_TASKS:
        assert set(task.hidden_cases) == set(task.hidden_tests)
    for file, text in BOOKSHOP.hidden_tests.items():  # one script per pytest function
        tests = {line[4:].split("(")[0] for line in text.splitlines() if line.startswith("def test_")}
        assert tests == set(BOOKSHOP.hidden_cases[file]), file
