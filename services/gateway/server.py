"""The gateway: serves the page, `/ws`, `/healthz` and `/metrics`, and fans turns out to the model services.

Foundation stage: health and metrics are real; the WebSocket turn pipeline arrives with the gateway issue.
"""

from __future__ import annotations

import logging

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.common import config, logs
from services.gateway.dependencies import Dependencies, dependencies_ctx

_LOGGER = logging.getLogger(__name__)

DEPS = web.AppKey("deps", Dependencies)


async def healthz(request: web.Request) -> web.Response:
    deps = request.app[DEPS]
    ok = deps.all_serving()
    body = {"status": "ok" if ok else "degraded", "dependencies": dict(deps.status)}
    return web.json_response(body, status=200 if ok else 503)


async def metrics(_: web.Request) -> web.Response:
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})


def create_app(common: config.CommonConfig, gateway: config.GatewayConfig, vad: config.VadConfig,
               llm: config.LlmConfig, tts: config.TtsConfig) -> web.Application:
    app = web.Application()
    addresses = {
        "vad": config.grpc_address(gateway.vad_addr, common.host, vad.port),
        "llm": config.grpc_address(gateway.llm_addr, common.host, llm.port),
        "tts": config.grpc_address(gateway.tts_addr, common.host, tts.port),
    }
    deps = Dependencies(addresses, common.grpc_max_message_bytes)
    app[DEPS] = deps
    app.cleanup_ctx.append(lambda _app: dependencies_ctx(deps))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    return app


def main() -> None:
    settings = config.exit_on_error(config.load_all)
    logs.setup("gateway", settings.common.log_level)
    app = create_app(settings.common, settings.gateway, settings.vad, settings.llm, settings.tts)
    _LOGGER.info("listening", extra={"address": f"http://{settings.common.host}:{settings.gateway.port}"})
    web.run_app(app, host=settings.common.host, port=settings.gateway.port, print=None,
                shutdown_timeout=settings.common.shutdown_grace_s)


if __name__ == "__main__":
    main()
