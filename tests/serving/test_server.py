"""course_lib.serving.server: the OpenAI-compatible endpoint, driven by the official `openai` client
against a real uvicorn server. Every completion is the text `generate` gives alone; bad requests
get 400s that name the field; a client that goes away gets its KV blocks freed."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from types import SimpleNamespace

import httpx
import openai
import pytest
import torch
import uvicorn

from course_lib.generation import generate
from course_lib.model import load_pretrained
from course_lib.serving import Engine
from course_lib.serving.server import create_app

pytestmark = pytest.mark.usefixtures("one_thread")

MODEL = "shakespeare-char"
PROMPTS = [
    "ROMEO:\nBut soft, what light through yonder window breaks?\n",
    "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?\n",
    "First Citizen:\nBefore we proceed any further, hear me speak.\n",
    "KING RICHARD III:\nNow is the winter of our discontent\n",
    "HAMLET:\nTo be, or not to be, that is the question:\n",
    "MENENIUS:\nWhy, masters, my good friends, mine honest neighbours,\n",
    "DUKE VINCENTIO:\nOf government the properties to unfold,\n",
    "LADY MACBETH:\nOut, damned spot! out, I say!\n",
    "GLOUCESTER:\nMade glorious summer by this sun of York;\n",
    "PROSPERO:\nWe are such stuff as dreams are made on,\n",
    "CORIOLANUS:\nWhat's the matter, you dissentious rogues,\n",
    "ISABELLA:\nCould great men thunder as Jove himself does,\n",
    "BRUTUS:\nThere is a tide in the affairs of men,\n",
    "PORTIA:\nThe quality of mercy is not strain'd;\n",
    "KING LEAR:\nBlow, winds, and crack your cheeks! rage! blow!\n",
    "OTHELLO:\nSoft you; a word or two before you go.\n",
]


@pytest.fixture(scope="module")
def served():
    """The shipped model behind a real uvicorn server on a free loopback port, with a small pool
    (64 blocks of 16 tokens) that cannot hold all 16 concurrent requests at once."""
    model, vocab, *_ = load_pretrained("shakespeare_char")
    engine = Engine(model, num_blocks=64)
    app = create_app(engine, vocab, model_name=MODEL)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on",
                                           timeout_graceful_shutdown=5))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            pytest.fail("the server did not start within 30 s (see the log above)")
        time.sleep(0.02)
    url = f"http://127.0.0.1:{port}"
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60)
    yield SimpleNamespace(url=url, engine=engine, model=model, vocab=vocab, client=client)
    client.close()
    server.should_exit = True
    thread.join(30)
    sock.close()
    assert not thread.is_alive(), "the server did not shut down within 30 s"


def _expected(served, prompt: str, n: int, temperature: float = 0.0, top_p: float | None = None,
              seed: int | None = None) -> str:
    """What `generate` gives for this request alone."""
    ids = torch.tensor(served.vocab.encode(prompt))
    if temperature == 0:
        out = generate(served.model, ids[None], n)
    else:
        out = generate(served.model, ids[None], n, strategy="sample", temperature=temperature, top_p=top_p,
                       generator=torch.Generator().manual_seed(seed))
    return served.vocab.decode(out[0, len(ids):])


def _error(exc: openai.APIStatusError) -> dict:
    body = exc.body
    return body.get("error", body) if isinstance(body, dict) else {}


def _drained(engine) -> bool:
    return engine.cache.allocator.num_used == 0 and not engine.requests and not engine.has_work


def test_models_lists_the_model(served):
    models = served.client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert models.data[0].owned_by == "course"


def test_greedy_completion_is_what_generate_gives(served):
    prompt = "ROMEO:\n"
    response = served.client.completions.create(model=MODEL, prompt=prompt, max_tokens=30, temperature=0)
    assert response.object == "text_completion"
    assert response.id.startswith("cmpl-")
    assert response.choices[0].text == _expected(served, prompt, 30)
    assert response.choices[0].finish_reason == "length"
    assert (response.usage.prompt_tokens, response.usage.completion_tokens, response.usage.total_tokens) == (
        len(prompt), 30, len(prompt) + 30)


def test_sixteen_concurrent_streams_each_get_what_they_get_alone(served):
    engine = served.engine
    requests = [dict(prompt=p, max_tokens=24 + 2 * (i % 8),
                     **({"temperature": 0.0} if i % 2 == 0 else
                        {"temperature": 0.8, "seed": 100 + i, **({"top_p": 0.9} if i % 4 == 1 else {})}))
                for i, p in enumerate(PROMPTS)]
    need = sum(-(-(len(r["prompt"]) + r["max_tokens"]) // engine.cache.block_size) for r in requests)
    assert need > engine.cache.num_blocks, "the pool must be too small for all of them at once"
    assert engine.peak_bytes_allocated < 0.75 * engine.cache.nbytes

    async def stream_all():
        async with openai.AsyncOpenAI(base_url=f"{served.url}/v1", api_key="x", max_retries=0,
                                      timeout=120) as client:
            async def one(r):
                chunks = [c async for c in await client.completions.create(model=MODEL, stream=True, **r)]
                return "".join(c.choices[0].text for c in chunks), [c.choices[0].finish_reason for c in chunks]
            return await asyncio.gather(*(one(r) for r in requests))

    streamed = asyncio.run(stream_all())
    peak = engine.peak_bytes_allocated
    assert peak >= 0.75 * engine.cache.nbytes, f"the requests did not fill the pool together (peak {peak} B)"
    for i, (r, (text, finishes)) in enumerate(zip(requests, streamed, strict=True)):
        assert len(text) == r["max_tokens"] == len(finishes), f"request {i}"
        assert finishes == [None] * (r["max_tokens"] - 1) + ["length"], f"request {i}: {finishes}"
        alone = served.client.completions.create(model=MODEL, **r).choices[0].text
        assert text == alone, f"request {i} ({r}): streamed {text!r}, alone {alone!r}"
        assert text == _expected(served, r["prompt"], r["max_tokens"], r["temperature"], r.get("top_p"),
                                 r.get("seed")), f"request {i} ({r})"
    assert _drained(engine), "finished requests stay in the engine"


def test_bad_requests_get_a_400_that_names_the_field_and_the_server_goes_on(served):
    client = served.client
    cases = [(dict(model="gpt-4", prompt="ROMEO:"), "model", "'gpt-4'"),
             (dict(model=MODEL, prompt="ROMEO:", max_tokens=-1), "max_tokens", "max_tokens"),
             (dict(model=MODEL, prompt="h\u00e9llo \u20ac"), "prompt", "'\u00e9' (U+00E9), '\u20ac' (U+20AC)"),
             (dict(model=MODEL, prompt=""), "prompt", "empty"),
             (dict(model=MODEL, prompt="ROMEO:", temperature=-0.5), "temperature", "temperature"),
             (dict(model=MODEL, prompt="ROMEO:", top_p=1.5, temperature=0.8), "top_p", "top_p")]
    for kwargs, param, named in cases:
        with pytest.raises(openai.BadRequestError) as caught:
            client.completions.create(**kwargs)
        error = _error(caught.value)
        assert caught.value.status_code == 400, kwargs
        assert error["type"] == "invalid_request_error", (kwargs, error)
        assert error["param"] == param, (kwargs, error)
        assert named in error["message"], (kwargs, error["message"])

    response = httpx.post(f"{served.url}/v1/completions", content=b"{not json",
                          headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] is None
    assert "not valid JSON" in error["message"]

    response = httpx.get(f"{served.url}/v1/chat/nothing")
    assert response.status_code == 404
    assert "/v1/completions" in response.json()["error"]["message"]

    prompt = "JULIET:\n"
    text = client.completions.create(model=MODEL, prompt=prompt, max_tokens=20, temperature=0).choices[0].text
    assert text == _expected(served, prompt, 20)
    assert _drained(served.engine)


def test_a_client_that_disconnects_mid_stream_gets_its_blocks_freed(served):
    engine = served.engine
    assert _drained(engine)
    steps_before = engine.steps
    body = {"model": MODEL, "prompt": "HAMLET:\n", "max_tokens": 2000, "temperature": 0, "stream": True}
    chunks = []
    with httpx.Client(timeout=30) as http, http.stream("POST", f"{served.url}/v1/completions", json=body) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                chunks.append(line)
            if len(chunks) == 2:
                break
        assert engine.cache.allocator.num_used > 0, "the request should hold blocks while it streams"
    deadline = time.monotonic() + 10
    while not _drained(engine) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _drained(engine), (f"after the client left: {engine.cache.allocator.num_used} blocks used, "
                              f"requests {list(engine.requests)}")
    assert engine.steps - steps_before < 2000, "the request ran to the end instead of being cancelled"


def test_a_client_that_gives_up_on_a_non_streaming_request_gets_its_blocks_freed(served):
    engine = served.engine
    assert _drained(engine)
    steps_before = engine.steps
    body = {"model": MODEL, "prompt": "HAMLET:\n", "max_tokens": 3000, "temperature": 0}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{served.url}/v1/completions", json=body, timeout=httpx.Timeout(5, read=0.5))
    deadline = time.monotonic() + 10
    while not _drained(engine) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _drained(engine), f"after the client left: {engine.cache.allocator.num_used} blocks used"
    assert engine.steps - steps_before < 3000, "the request ran to the end instead of being cancelled"
