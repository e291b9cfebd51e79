"""An OpenAI-compatible HTTP endpoint on the serving engine (lesson 12).

    app = create_app(Engine(model), vocab)        # python -m course_lib.serving serves the shipped GPT
    openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="x").completions.create(
        model="shakespeare-char", prompt="ROMEO:", max_tokens=40, temperature=0)

Routes: GET /v1/models and POST /v1/completions (streamed as server-sent events with
"stream": true). Any bad request gets a 400 in OpenAI's error shape, naming the field and the fix.

The engine is not thread-safe, so one thread owns it: the worker. HTTP handlers never call the
engine; they hand it jobs through an inbox (guarded by one lock, which also wakes the worker), and the
worker, between two `engine.step()`s, submits new requests and releases finished or abandoned ones
(`cancel` frees the KV blocks of a client that went away, `forget` drops the record). Tokens go back
to each request's asyncio queue with `loop.call_soon_threadsafe`. The event loop never waits for a
step, and a step never waits for the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import torch
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from course_lib.data import CharVocab
from course_lib.serving.engine import Engine

__all__ = ["DEFAULT_MODEL_NAME", "BadRequest", "Completion", "EngineWorker", "Job", "create_app", "error_body",
           "parse_completion"]

log = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "shakespeare-char"
DEFAULT_MAX_TOKENS = 16
# OpenAI parameters this server does not implement: a request may send them only with these values.
UNSUPPORTED = {"n": 1, "best_of": 1, "echo": False, "logprobs": None, "stop": None, "suffix": None,
               "logit_bias": None, "presence_penalty": 0, "frequency_penalty": 0}


class BadRequest(Exception):
    """A request the server refuses with a 400: `param` is the field at fault (None: the body)."""

    def __init__(self, message: str, param: str | None) -> None:
        super().__init__(message)
        self.message, self.param = message, param


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None) -> dict:
    """OpenAI's error object."""
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


# --- the request body ---------------------------------------------------------------------------
@dataclass
class Completion:
    """A validated POST /v1/completions body."""

    prompt: list[int]
    max_tokens: int
    strategy: str                       # "greedy" (temperature 0) or "sample"
    temperature: float
    top_p: float | None
    seed: int | None
    stream: bool
    include_usage: bool

    def sampling(self) -> dict:
        """Engine.submit's keyword arguments."""
        if self.strategy == "greedy":
            return {"strategy": "greedy"}
        return {"strategy": "sample", "temperature": self.temperature, "top_p": self.top_p, "seed": self.seed}


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def parse_completion(body, vocab: CharVocab, model_name: str) -> Completion:
    """Check a completion request's JSON body field by field; BadRequest names the first bad one."""
    if not isinstance(body, dict):
        raise BadRequest(f"the body must be a JSON object such as {{\"model\": \"{model_name}\", \"prompt\": "
                         f"\"ROMEO:\"}}, got a JSON {type(body).__name__}.", None)
    model = body.get("model")
    if model != model_name:
        problem = "model is missing" if model is None else f"this server has no model {model!r}"
        raise BadRequest(f"{problem}: set \"model\" to {model_name!r} (GET /v1/models lists it).", "model")

    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise BadRequest("prompt must be a string (or a list holding exactly one string), got "
                         f"{_describe(prompt)}; batches are not supported: send one request per prompt.", "prompt")
    if not prompt:
        raise BadRequest("prompt is empty: give at least one character (a newline will do).", "prompt")
    unknown = sorted(set(prompt) - vocab.stoi.keys())
    if unknown:
        shown = ", ".join(f"{ch!r} (U+{ord(ch):04X})" for ch in unknown[:10])
        more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
        raise BadRequest(f"prompt has characters outside the model's vocabulary: {shown}{more}; remove or "
                         f"replace them. The model knows these {len(vocab)} characters: "
                         f"{''.join(vocab.chars)!r}.", "prompt")

    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if not _is_int(max_tokens) or max_tokens < 0:
        raise BadRequest(f"max_tokens must be an integer >= 0 (tokens to generate), got {max_tokens!r}.",
                         "max_tokens")

    temperature = body.get("temperature")
    if temperature is None:
        temperature = 1.0
    if not _is_number(temperature) or temperature < 0:
        raise BadRequest(f"temperature must be a number >= 0 (0: greedy, the most probable token), got "
                         f"{temperature!r}.", "temperature")

    top_p = body.get("top_p")
    if top_p is not None and (not _is_number(top_p) or not 0 < top_p <= 1):
        raise BadRequest(f"top_p must be a number in (0, 1] (1: no nucleus filter), got {top_p!r}.", "top_p")

    seed = body.get("seed")
    if seed is not None and (not _is_int(seed) or not 0 <= seed < 2**64):
        raise BadRequest(f"seed must be an integer in [0, 2**64) (the same seed gives the same sample), "
                         f"got {seed!r}.", "seed")

    stream = body.get("stream")
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise BadRequest(f"stream must be true or false, got {stream!r}.", "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise BadRequest(f"stream_options must be an object such as {{\"include_usage\": true}}, got {options!r}.",
                         "stream_options")
    include_usage = bool((options or {}).get("include_usage", False))

    for name, allowed in UNSUPPORTED.items():
        value = body.get(name)
        if value is not None and value != allowed and not (name == "stop" and value in ("", [])):
            raise BadRequest(f"{name}={value!r} is not supported by this server: leave {name} out "
                             f"(or set it to {json.dumps(allowed)}).", name)

    greedy = temperature == 0
    return Completion(prompt=vocab.encode(prompt), max_tokens=max_tokens,
                      strategy="greedy" if greedy else "sample", temperature=float(temperature),
                      top_p=None if greedy or top_p is None else float(top_p), seed=None if greedy else seed,
                      stream=stream, include_usage=include_usage)


def _describe(x) -> str:
    if x is None:
        return "nothing"
    if isinstance(x, list):
        return f"a list of {len(x)} item(s)"
    return f"a JSON {type(x).__name__}"


# --- the engine's thread ------------------------------------------------------------------------
@dataclass(eq=False)
class Job:
    """One request's trip through the worker: its tokens (Events) arrive on `queue`, in `loop`."""

    prompt: list[int]
    max_tokens: int
    sampling: dict
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    accepted: asyncio.Future | None = None
    rid: int | None = None              # the engine's request id, once submitted
    released: bool = False


class EngineWorker:
    """The one thread that calls the engine: steps while there is work, sleeps on a condition when not."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._wake = threading.Condition()      # guards _inbox and _stopping
        self._inbox: list[tuple[str, Job]] = []
        self._stopping = False
        self._jobs: dict[int, Job] = {}         # engine request id -> its job; the worker's thread only
        self._thread: threading.Thread | None = None

    # called from the event loop
    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="engine-worker", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the current step, fail the requests still open, and end the thread."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    async def submit(self, job: Job) -> None:
        """Queue job's request in the engine; ValueError if the engine refuses it."""
        job.accepted = job.loop.create_future()
        if not self._post("submit", job):
            raise RuntimeError("the server is shutting down: retry on a running server.")
        await job.accepted

    def release(self, job: Job) -> None:
        """The response is sent or abandoned: cancel the request if it still runs, and forget it."""
        if not job.released and job.accepted is not None:       # None: never submitted (max_tokens 0)
            job.released = True
            self._post("release", job)

    def _post(self, command: str, job: Job) -> bool:
        """Hand the worker a command; False once it is stopping (it then fails what is open itself)."""
        with self._wake:
            if self._stopping:
                return False
            self._inbox.append((command, job))
            self._wake.notify()
            return True

    # the worker's thread
    def _run(self) -> None:
        while True:
            with self._wake:
                while not (self._inbox or self._stopping or self.engine.has_work):
                    self._wake.wait()
                if self._stopping:
                    break
                commands, self._inbox = self._inbox, []
            for command, job in commands:
                if command == "submit":
                    self._submit(job)
                else:
                    self._release(job)
            if self.engine.has_work:
                try:
                    events = self.engine.step()
                except Exception as error:                 # every open request hears of it
                    log.exception("engine.step() failed; failing the open requests")
                    self._fail_all(error)
                    continue
                for event in events:
                    job = self._jobs.get(event.request)
                    if job is not None:
                        _deliver(job.loop, job.queue.put_nowait, event)
        with self._wake:
            commands, self._inbox = self._inbox, []
        for command, job in commands:
            if command == "submit":
                _deliver(job.loop, _settle, job.accepted, RuntimeError("the server is shutting down."))
        self._fail_all(RuntimeError("the server shut down before the request finished."))

    def _submit(self, job: Job) -> None:
        try:
            job.rid = self.engine.submit(torch.tensor(job.prompt, dtype=torch.long), job.max_tokens,
                                         **job.sampling)
        except (ValueError, TypeError) as error:     # the engine keeps no record of a refused request
            _deliver(job.loop, _settle, job.accepted, error)
            return
        self._jobs[job.rid] = job
        _deliver(job.loop, _settle, job.accepted, None)

    def _release(self, job: Job) -> None:
        if job.rid is None:
            return
        self._jobs.pop(job.rid, None)
        if job.rid in self.engine.requests:
            if not self.engine.done(job.rid):
                self.engine.cancel(job.rid)             # frees its KV blocks now
            self.engine.forget(job.rid)

    def _fail_all(self, error: Exception) -> None:
        for rid, job in list(self._jobs.items()):
            _deliver(job.loop, job.queue.put_nowait, error)
            with contextlib.suppress(KeyError, ValueError):
                self.engine.cancel(rid)
                self.engine.forget(rid)
        self._jobs.clear()


def _deliver(loop: asyncio.AbstractEventLoop, callback: Callable, *args) -> None:
    """Run callback(*args) on the event loop's thread (nothing, if that loop has closed)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)


def _settle(future: asyncio.Future, error: BaseException | None) -> None:
    if future.done():                   # its handler was cancelled meanwhile
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


# --- the app ------------------------------------------------------------------------------------
class _EventStream(StreamingResponse):
    """A StreamingResponse that calls `on_close` however it ends: finished, disconnected or cancelled."""

    def __init__(self, content: AsyncIterator[str], on_close: Callable[[], None]) -> None:
        super().__init__(content, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._on_close = on_close

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()


DISCONNECTED = object()     # put on a job's queue when its (non-streaming) client goes away


async def _tell_disconnect(request: Request, queue: asyncio.Queue) -> None:
    """Wait for the client to disconnect (the body is read: only http.disconnect can come), then say so."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    queue.put_nowait(DISCONNECTED)


def _sse(obj) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


def create_app(engine: Engine, vocab: CharVocab, model_name: str = DEFAULT_MODEL_NAME) -> Starlette:
    """A Starlette app serving `engine`'s model as `model_name` (see the module's docstring).

    The worker thread starts with the app (lifespan) and stops with it; app.state.worker is it.
    """
    if not isinstance(engine, Engine):
        raise TypeError(f"engine must be a course_lib.serving.Engine, got {type(engine).__name__}.")
    if not isinstance(vocab, CharVocab) or len(vocab) != engine.model.config.vocab_size:
        raise ValueError(f"vocab must be the model's CharVocab ({engine.model.config.vocab_size} characters), "
                         f"got {type(vocab).__name__}: load both with course_lib.model.load_pretrained.")
    worker = EngineWorker(engine)

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list",
                             "data": [{"id": model_name, "object": "model", "owned_by": "course"}]})

    async def completions(request: Request):
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise BadRequest(f"the body is not valid JSON ({error}): send a JSON object such as "
                             f"{{\"model\": \"{model_name}\", \"prompt\": \"ROMEO:\"}} with "
                             "Content-Type: application/json.", None) from None
        req = parse_completion(body, vocab, model_name)
        head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": model_name}
        usage = {"prompt_tokens": len(req.prompt), "completion_tokens": 0, "total_tokens": len(req.prompt)}

        def choice(text: str, finish: str | None) -> dict:
            return {"text": text, "index": 0, "logprobs": None, "finish_reason": finish}

        job = Job(req.prompt, req.max_tokens, req.sampling(), asyncio.get_running_loop())
        if req.max_tokens > 0:
            try:
                await worker.submit(job)
            except ValueError as error:                 # the pool cannot hold this request
                raise BadRequest(f"the prompt and max_tokens together need more KV cache than this server "
                                 f"has ({error}): lower max_tokens or shorten the prompt.", "max_tokens") from None
            except asyncio.CancelledError:              # the worker may still submit it: release it after
                worker.release(job)
                raise

        if not req.stream:
            tokens: list[int] = []
            watcher = asyncio.create_task(_tell_disconnect(request, job.queue))
            try:
                while len(tokens) < req.max_tokens:
                    event = await job.queue.get()
                    if event is DISCONNECTED:                   # nobody to answer: stop generating
                        return Response(status_code=499)
                    if isinstance(event, Exception):
                        raise event
                    tokens.append(event.token)
                    if event.finished:
                        break
            finally:
                watcher.cancel()
                worker.release(job)
            usage.update(completion_tokens=len(tokens), total_tokens=len(req.prompt) + len(tokens))
            return JSONResponse({**head, "choices": [choice(vocab.decode(tokens), "length")], "usage": usage})

        async def chunks() -> AsyncIterator[str]:
            n = 0
            while n < req.max_tokens:
                event = await job.queue.get()
                if isinstance(event, Exception):
                    yield _sse(error_body(f"the engine failed: {event}", "server_error"))
                    return
                n += 1
                finished = event.finished or n == req.max_tokens
                yield _sse({**head, "choices": [choice(vocab.decode([event.token]), "length" if finished else None)]})
                if finished:
                    break
            if req.max_tokens == 0:
                yield _sse({**head, "choices": [choice("", "length")]})
            if req.include_usage:
                usage.update(completion_tokens=n, total_tokens=len(req.prompt) + n)
                yield _sse({**head, "choices": [], "usage": usage})
            yield "data: [DONE]\n\n"

        return _EventStream(chunks(), on_close=lambda: worker.release(job))

    async def bad_request(request: Request, error: BadRequest) -> JSONResponse:
        return JSONResponse(error_body(error.message, param=error.param), status_code=400)

    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        if error.status_code == 404:
            message = (f"no route {request.method} {request.url.path}: this server has GET /v1/models and "
                       "POST /v1/completions.")
        elif error.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}: use " + (
                "GET." if request.url.path == "/v1/models" else "POST.")
        else:
            message = str(error.detail)
        return JSONResponse(error_body(message), status_code=error.status_code, headers=error.headers)

    async def server_error(request: Request, error: Exception) -> JSONResponse:
        log.error("%s %s failed", request.method, request.url.path, exc_info=error)
        return JSONResponse(error_body(f"the server failed: {error}", "server_error"), status_code=500)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        worker.start()
        try:
            yield
        finally:
            await asyncio.to_thread(worker.stop)

    app = Starlette(routes=[Route("/v1/models", models, methods=["GET"]),
                            Route("/v1/completions", completions, methods=["POST"])],
                    exception_handlers={BadRequest: bad_request, HTTPException: http_error, Exception: server_error},
                    lifespan=lifespan)
    app.state.worker = worker
    app.state.engine = engine
    return app

