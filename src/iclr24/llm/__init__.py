"""One language-model protocol, several backends, chosen by name.

    from iclr24.llm import get_model
    llm = get_model()                       # $ICLR24_LLM, else "embedded" (SmolLM2-135M-Instruct, CPU, offline)
    llm.generate([{"role": "user", "content": "2 + 2 = ?"}], max_tokens=16)[0].text
    llm.generate("The capital of France is", max_tokens=4, logprobs=True)[0].logprobs   # per generated token
    llm.next_token_logprobs(llm.tokenize("The capital of France is"))   # full vocabulary (local backends)

Backends: ``embedded`` (default), ``hf`` (a local checkpoint folder), ``openai`` (any
OpenAI-compatible server; litellm-style ``openai/MODEL`` names work too), ``scripted`` (tests only).
``generate`` takes ``temperature``, ``top_p``, ``seed``, ``n``, ``stop``, ``system`` (chat prompts)
``logprobs`` and ``response_format`` (a JSON schema, a pydantic class or a regex the output is forced into; with
a class each completion's ``.parsed`` is the reply as an instance of it; ``choose(llm, prompt, options)`` picks one
of a menu). ``check_model_spec(spec, probe=True)`` refuses a spec that cannot run, a served model's unreachable
server included, before any work. ``LoggedModel`` records every call;
``generate_batch(llm, prompts)`` decodes many prompts together where the backend can, and
``format_chat(llm, messages)`` renders chat messages into the text a model continues, and
``load_torch_model()`` gives the embedded model's torch module and tokenizer (for ``iclr24.interp``).
"""

from iclr24.llm.base import (
    BACKENDS,
    Capabilities,
    Completion,
    LanguageModel,
    LoggedModel,
    apply_stop,
    check_messages,
    check_model_spec,
    check_reachable,
    format_chat,
    generate_batch,
    get_model,
    load_torch_model,
    logprobs_available,
    reply_logprobs,
    require_logprobs,
    stand_in_reason,
    with_system,
)
from iclr24.llm.structured import Choice, OutputFormat, choose, output_format

__all__ = ["BACKENDS", "Capabilities", "Choice", "Completion", "LanguageModel", "LoggedModel", "OutputFormat",
           "apply_stop", "check_messages", "check_model_spec", "check_reachable", "choose", "format_chat",
           "generate_batch", "get_model", "load_torch_model", "logprobs_available", "output_format", "reply_logprobs",
           "require_logprobs", "stand_in_reason", "with_system"]
