"""The gateway: serves the page, `/ws`, `/healthz` and `/metrics`, and fans turns out to the model services.

It knows the model services only through the sotto.v1 contracts; it knows nothing of LiteRT-LM or Kokoro.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import weakref
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.common import config, hardware, logs
from services.gateway.access import is_loopback
from services.gateway.app import DEPS, LIMITS, MODELS, PER_CLIENT, SESSIONS, SETTINGS, Catalogue, LlmInfo
from services.gateway.conversation.settings import SessionSettings
from services.gateway.hosts import host_check
from services.gateway.links.dependencies import Dependencies
from services.gateway.v1_errors import v1_error_shape
from services.gateway.wires import chat_completions as openai_chat
from services.gateway.wires import realtime
from services.gateway.wires.ws import websocket
from sotto.v1 import llm_pb2, llm_pb2_grpc, tts_pb2, tts_pb2_grpc

_LOGGER = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"
VENDOR = Path(__file__).parent / "vendor"  # made by `python -m tools.web_assets`, shipped as package data
# The page needs WASM for the in-page VAD ('wasm-unsafe-eval') and nothing from anywhere else.
PAGE_CSP = ("default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; connect-src 'self'; img-src 'self' data:; "
            "media-src 'self' blob:; style-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")
INFO_TIMEOUT_S = 2.0


async def healthz(request: web.Request) -> web.Response:
    deps = request.app[DEPS]
    ok = deps.all_serving()
    body = {"status": "ok" if ok else "degraded", "dependencies": dict(deps.status)}
    return web.json_response(body, status=200 if ok else 503)


async def metrics(_: web.Request) -> web.Response:
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def index(_: web.Request) -> web.StreamResponse:
    page = STATIC / "index.html"
    if not page.exists():
        return web.Response(text="Sotto gateway: the browser client is not installed.", status=503)
    return web.FileResponse(page, headers={"Content-Security-Policy": PAGE_CSP})


async def refresh_model_info(app: web.Application, service: str, status: str) -> None:
    """What sessions are told in session.ready: the model's modalities and the voices, asked once per start."""
    if status != "SERVING":
        return
    deps, models = app[DEPS], app[MODELS]
    try:
        if service == "llm":
            info = await llm_pb2_grpc.LlmServiceStub(deps.channels["llm"]).GetModelInfo(
                llm_pb2.GetModelInfoRequest(), timeout=INFO_TIMEOUT_S)
            models.update(llm=LlmInfo(name=info.model, backend=info.backend, backend_reason=info.backend_reason,
                                      audio_input=info.audio_input, image_input=info.image_input,
                                      fallback=info.fallback, note=info.note))
        elif service == "tts":
            voices = await tts_pb2_grpc.TtsServiceStub(deps.channels["tts"]).ListVoices(
                tts_pb2.ListVoicesRequest(), timeout=INFO_TIMEOUT_S)
            models.update(voices=tuple(v.name for v in voices.voices), default_voice=voices.default_voice)
    except grpc.aio.AioRpcError as exc:
        _LOGGER.warning("model_info_failed", extra={"dependency": service, "code": exc.code().name})


async def _dependencies(app: web.Application) -> AsyncIterator[None]:
    deps = app[DEPS]
    tasks: set[asyncio.Task] = set()

    def on_change(service: str, status: str) -> None:
        task = asyncio.create_task(refresh_model_info(app, service, status))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    deps.listeners.append(on_change)
    await deps.start()
    yield
    for session in list(app[SESSIONS]):
        await session.output.close(code=1001, message=b"gateway shutting down")
    for task in list(tasks):
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await deps.close()


def create_app(settings: config.Settings) -> web.Application:
    common, gw = settings.common, settings.gateway
    hardware.register()
    app = web.Application(middlewares=[v1_error_shape, host_check(settings)])
    app[SETTINGS] = settings
    app[LIMITS] = SessionSettings.of(gw)
    app[DEPS] = Dependencies(
        addresses={"vad": config.grpc_address(gw.vad_addr, common.host, settings.vad.port),
                   "llm": config.grpc_address(gw.llm_addr, common.host, settings.llm.port),
                   "tts": config.grpc_address(gw.tts_addr, common.host, settings.tts.port),
                   "asr": config.grpc_address(gw.asr_addr, common.host, settings.asr.port)},
        common=common, poll_s=gw.health_poll_ms / 1000,
        hold=lambda: any(session.awaiting_first_audio() for session in app[SESSIONS]))
    app[SESSIONS] = weakref.WeakSet()
    app[PER_CLIENT] = Counter()
    app[MODELS] = Catalogue()
    app.cleanup_ctx.append(_dependencies)
    app.router.add_get("/", index)
    app.router.add_get("/ws", websocket)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    openai_chat.add_routes(app)
    app.router.add_get("/v1/realtime", realtime.websocket)
    app.router.add_static("/static/", STATIC)
    if VENDOR.exists():
        app.router.add_static("/vendor/", VENDOR)
    else:
        _LOGGER.warning("vendor_missing", extra={"path": str(VENDOR), "fix": "python -m tools.web_assets"})
    return app


def check_exposure(settings: config.Settings) -> None:
    """Binding beyond loopback without a token would let anyone on the network use the microphone's owner's
    assistant; refuse to start instead."""
    gw = settings.gateway
    if not is_loopback(settings.common.host) and not gw.token and not gw.allow_unauthenticated:
        raise config.ConfigError(f"SOTTO_HOST={settings.common.host} is not a loopback address: set "
                                 "SOTTO_GATEWAY_TOKEN to a secret that clients must send as ?token=")


def tls_context(gw: config.GatewayConfig) -> ssl.SSLContext | None:
    if gw.tls_cert is None and gw.tls_key is None:
        return None
    if gw.tls_cert is None or gw.tls_key is None:
        raise config.ConfigError("SOTTO_GATEWAY_TLS_CERT and SOTTO_GATEWAY_TLS_KEY must be set together")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(gw.tls_cert, gw.tls_key)
    return context


def main() -> None:
    settings = config.exit_on_error(config.load_all)
    config.exit_on_error(lambda: check_exposure(settings))
    tls = config.exit_on_error(lambda: tls_context(settings.gateway))
    logs.setup("gateway", settings.common.log_level)
    app = create_app(settings)
    scheme = "https" if tls else "http"
    _LOGGER.info("listening", extra={"address": f"{scheme}://{settings.common.host}:{settings.gateway.port}"})
    # handler_cancellation: a client that drops its connection cancels its handler, so an abandoned
    # /v1/chat/completions request cancels its llm call at once instead of generating for nobody (aiohttp's
    # recommended way, and what its test server, which tests/gateway uses, does by default).
    web.run_app(app, host=settings.common.host, port=settings.gateway.port, print=None, ssl_context=tls,
                shutdown_timeout=settings.common.shutdown_grace_s, handle_signals=True, handler_cancellation=True)


if __name__ == "__main__":
    main()
