"""The openai backend's contract, run against a real OpenAI-compatible server and against the stub.

The real server is ``transformers serve`` (transformers' extra ``serving``: FastAPI and Uvicorn) serving the
embedded SmolLM2 from its local checkpoint, on a free loopback port, on one CPU thread. It shows the three habits
of servers the client must absorb: the matched stop string is sent back with the text, ``n`` is ignored (one choice
comes back), and no log-probabilities are sent. The stub imitates exactly those habits, so the same assertions on
both make any difference between them visible (and the stub alone still pins them where the server cannot run).
"""

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from iclr24.llm import get_model, logprobs_available, require_logprobs
from tests.http_stub import JSONHandler, serving

COUNT = "1. 1\n2. 2\n3. 3\n4. 4\n5. 5\n6. 6\n7. 7\n8. 8\n"  # what the stub "generates", one token per character
CHAT = [{"role": "user", "content": "Count from 1 to 8, one number per line, as '1. 1'."}]


class _LikeTransformersServe(JSONHandler):
    """Includes the stop string it stopped at, sends one choice whatever ``n`` is, and sends no logprobs."""

    requests: list = []

    def do_GET(self):  # noqa: N802  (/health)
        self._send(200, {"status": "ok"})

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _LikeTransformersServe.requests.append(body)
        text, finish = COUNT[: body.get("max_tokens", 16)], "length"
        for stop in body.get("stop") or ():
            at = text.find(stop)
            if at >= 0:
                text, finish = text[: at + len(stop)], "stop"  # the stop string kept, as transformers serve does
        key = "message" if "messages" in body else "text"
        choice = {"index": 0, "finish_reason": finish,
                  key: {"role": "assistant", "content": text} if key == "message" else text}
        self._send(200, {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                         "choices": [choice],
                         "usage": {"prompt_tokens": 9, "completion_tokens": len(text), "total_tokens": 9 + len(text)}})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_health(url: str, process: subprocess.Popen, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"transformers serve exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"transformers serve did not answer {url}/health within {seconds:.0f} s")


def _transformers_serve():
    missing = [m for m in ("fastapi", "uvicorn", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"transformers serve needs {', '.join(missing)} (pip install 'transformers[serving]')")
    from iclr24.llm.hf import embedded_checkpoint

    try:
        folder = embedded_checkpoint()
    except ImportError as err:
        pytest.skip(str(err))
    cli = Path(sys.executable).parent / "transformers"
    if not cli.is_file():
        pytest.skip(f"no transformers command beside {sys.executable}")
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    process = subprocess.Popen([str(cli), "serve", str(folder), "--host", "127.0.0.1", "--port", str(port),
                                "--device", "cpu"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for_health(url, process, seconds=180)
    except (RuntimeError, TimeoutError) as err:
        process.kill()
        raise RuntimeError(f"{err}: {process.stderr.read().decode(errors='replace')[-2000:]}") from None
    return process, f"{url}/v1", str(folder)


@pytest.fixture(scope="module", params=["stub", "transformers serve"])
def served(request):
    """``(kind, base_url, model name)`` of a running server."""
    if request.param == "stub":
        _LikeTransformersServe.requests = []
        with serving(_LikeTransformersServe) as url:
            yield request.param, url, "stub-model"
        return
    process, url, name = _transformers_serve()
    try:
        yield request.param, url, name
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def _model(served, **options):
    _, url, name = served
    return get_model("openai", model=name, base_url=url, max_retries=0, timeout=120, **options)


def test_chat_with_a_system_prompt_and_a_text_completion(served):
    model = _model(served)
    chat, = model.generate(CHAT, max_tokens=8, system="You are terse.")
    assert isinstance(chat.text, str) and chat.text and chat.finish_reason in ("stop", "length")
    assert 0 < chat.completion_tokens <= 8
    text, = model.generate("1, 2, 3,", max_tokens=6)
    assert text.text and text.finish_reason in ("stop", "length")


def test_a_stop_string_is_cut_from_the_text_whatever_the_server_sends(served):
    model = _model(served)
    for prompt in (CHAT, "1, 2, 3, 4,"):
        completion, = model.generate(prompt, max_tokens=24, stop=["5"])
        assert "5" not in completion.text and completion.finish_reason == "stop", completion
    if served[0] == "stub":  # what the server sent: the text up to and with the stop string
        assert _LikeTransformersServe.requests[-1]["stop"] == ["5"]
        assert completion.text == COUNT[: COUNT.index("5")]


def test_n_choices_come_back_even_from_a_server_that_ignores_n(served, caplog):
    model = _model(served)
    with caplog.at_level("WARNING", logger="iclr24.llm.openai_backend"):
        greedy = model.generate(CHAT, max_tokens=6, n=3)
    assert len(greedy) == 3 and len({c.text for c in greedy}) == 1  # temperature 0: three times the same text
    assert "sent 1 choice(s) for n=3; asking for the other 2 one at a time" in caplog.text


def test_a_seed_makes_sampling_repeatable(served):
    model = _model(served)
    first, second = (model.generate(CHAT, max_tokens=8, temperature=1.0, seed=7)[0].text for _ in range(2))
    assert first == second


def test_max_tokens_ends_a_completion_at_length(served):
    completion, = _model(served).generate("1, 2, 3, 4, 5, 6, 7, 8, 9,", max_tokens=3)
    assert completion.finish_reason == "length" and completion.completion_tokens <= 3


def test_logprobs_are_refused_clearly_by_a_server_that_sends_none(served):
    model = _model(served)
    _, url, _ = served
    with pytest.raises(NotImplementedError, match=f"the server at {url}/ sent no log-probabilities"):
        model.generate(CHAT, max_tokens=2, logprobs=True)
    assert not logprobs_available(model) and model.capabilities.top_logprobs_k == 0
    with pytest.raises(ValueError, match="needs per-token log-probabilities, which OpenAIModel"):
        require_logprobs(model, "ContradictionDetector(mode='logprob')")


def test_a_request_past_its_deadline_is_a_timeout(served):
    kind, url, name = served
    if kind == "stub":
        pytest.skip("the stub answers at once")
    model = get_model("openai", model=name, base_url=url, max_retries=0, timeout=0.05, deadline=0.2)
    with pytest.raises(TimeoutError):
        model.generate(CHAT, max_tokens=200)


def test_detectors_and_eft_refuse_a_server_without_logprobs_before_any_work(served):
    from iclr24.eft import EFTModel
    from iclr24.selfcontradiction import ContradictionDetector, SelfCheckDetector

    model = _model(served)
    with pytest.raises(ValueError, match=r"ContradictionDetector\(mode='logprob'\) needs per-token"):
        ContradictionDetector(model, mode="logprob")
    with pytest.raises(ValueError, match=r"SelfCheckDetector\(mode='logprob'\) needs per-token"):
        SelfCheckDetector(model, mode="logprob")
    with pytest.raises(ValueError, match="EFT's base_large needs its next tokens' top log-probabilities"):
        EFTModel(model, model, model)
    ContradictionDetector(model, mode="votes")  # voting needs only text


@pytest.mark.slow  # minutes; the contract above pins each fault the tora loop relies on (stop cut, n, logprobs)
def test_tora_runs_end_to_end_against_the_server(served, tmp_path, monkeypatch):
    kind, url, name = served
    if kind == "stub":
        pytest.skip("the stub only counts")
    from typer.testing import CliRunner

    from iclr24 import cli
    from iclr24.core import latest_run

    monkeypatch.setenv("OPENAI_BASE_URL", url)
    result = CliRunner().invoke(cli.app, ["run", "tora", "-p", "smoke", "--llm", f"openai:{name}", "--out",
                                          str(tmp_path), "--no-report", "--quiet", "--jobs", "1"])
    assert result.exit_code == 0, result.output
    record = latest_run(tmp_path, "tora")
    assert record.result["status"] == "ok" and record.result["claims"]
    assert name in json.dumps(record.result["notes"]) + json.dumps(record.result["metrics"]) + result.output
