"""``--llm openai:MODEL`` with no server: refused up front by one short request (``check_model_spec(spec,
probe=True)``), naming the URL and what to do, instead of failing after the run has started."""

import socket
import time

import pytest

from iclr24.llm import check_model_spec, check_reachable
from iclr24.llm.openai_backend import probe_server
from tests.http_stub import answering


def _status(code: int, headers: dict | None = None):
    def answer(handler, body):
        handler._send_bytes(code, b'{"object": "list", "data": [{"id": "m", "object": "model"}]}', headers)
    return answer


@pytest.fixture
def closed_port():
    """A loopback port with nothing listening on it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_that_lists_its_models_passes_and_is_asked_once(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with answering(_status(200)) as (url, received):
        monkeypatch.setenv("OPENAI_BASE_URL", url + "/")                 # a trailing slash is the same server
        check_model_spec("openai:m", probe=True)
        check_model_spec("openai/m", probe=True)                          # litellm's spelling
    assert [path for path, _, _ in received] == ["/v1/models", "/v1/models"]
    assert received[0][1]["Authorization"] == "Bearer sk-test"


def test_no_server_is_a_value_error_naming_the_url_and_what_to_do(monkeypatch, closed_port):
    url = f"http://127.0.0.1:{closed_port}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    check_model_spec("openai:m")                                          # without the probe: no request
    with pytest.raises(ValueError, match=rf"cannot reach .* at {url} \(GET {url}/models: .*Refused.*start the "
                                         rf"server, or set \$OPENAI_BASE_URL"):
        check_model_spec("openai:m", probe=True)
    with pytest.raises(ValueError, match="cannot reach"):
        check_reachable("openai:m")


def test_the_other_backends_have_nothing_to_reach(monkeypatch, closed_port):
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{closed_port}/v1")
    for spec in ("embedded", "scripted", "hf:/nowhere", "llamacpp"):
        check_reachable(spec)                                             # no request, so no error


def test_a_server_that_never_answers_is_refused_within_the_timeout(monkeypatch):
    with socket.socket() as listener:                                     # accepts connections, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        start = time.monotonic()
        with pytest.raises(ValueError, match=rf"no answer from {url}/models within 0.3 s"):
            probe_server(url, timeout=0.3)
        assert time.monotonic() - start < 2.0


@pytest.mark.parametrize("code, message", [
    (401, r"refused the API key \(401 for GET .*/v1/models\): set \$OPENAI_API_KEY"),
    (403, r"refused the API key \(403"),
    (404, r"has no model list \(404 .*is the API's path missing from \$OPENAI_BASE_URL\?"),
])
def test_a_refused_key_or_a_url_without_the_api_path_is_named(code, message):
    with answering(_status(code)) as (url, _):
        with pytest.raises(ValueError, match=message):
            probe_server(url)


@pytest.mark.parametrize("code, headers", [(500, None), (503, None), (302, {"Location": "http://example.invalid/"})])
def test_any_other_answer_shows_a_server_there(code, headers):
    with answering(_status(code, headers)) as (url, received):
        probe_server(url)
    assert len(received) == 1                                             # a redirect is not followed


@pytest.mark.parametrize("base_url", ["localhost:8000/v1", "ftp://host/v1", "http:///v1"])
def test_an_address_that_is_not_an_http_url_is_named(base_url):
    with pytest.raises(ValueError, match=r"is not an http\(s\) URL"):
        probe_server(base_url)


def test_the_timeout_must_be_a_positive_number():
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        probe_server("http://127.0.0.1:1/v1", timeout=0)
