"""What every servicer would otherwise repeat, done once per RPC of a service's own methods.

For each call to one of the service's methods (health and reflection are left alone, so probes work while the
model loads) the interceptor binds the caller's session/turn ids for the RPC's log lines, answers UNAVAILABLE
until the service's load step has finished, and counts the call in `sotto_rpc_total` / `sotto_rpc_seconds`
by its bare method name (`Generate`, `StreamAudio`, ...) and the status it ended with: the code a handler aborted
with, CANCELLED when the call went away (client cancel, deadline, server stopping), UNKNOWN for an uncaught error.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable

import grpc

from services.common import logs, metrics

LOADING_DETAILS = "the model is still loading; retry once health reports SERVING"


class ServiceInterceptor(grpc.aio.ServerInterceptor):
    """Wraps the handlers of `service_names` (full proto names, e.g. "sotto.v1.VadService")."""

    def __init__(self, service_names: Iterable[str], *, loaded: bool = False) -> None:
        self._prefixes = tuple(f"/{name}/" for name in service_names)
        self.loaded = loaded  # set by the bootstrap once the service's load step finished

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or not handler_call_details.method.startswith(self._prefixes):
            return handler
        method = handler_call_details.method.rsplit("/", 1)[-1]
        if handler.response_streaming:
            wrap, behaviour = self._streaming, handler.stream_stream or handler.unary_stream
            make = grpc.stream_stream_rpc_method_handler if handler.request_streaming \
                else grpc.unary_stream_rpc_method_handler
        else:
            wrap, behaviour = self._unary, handler.stream_unary or handler.unary_unary
            make = grpc.stream_unary_rpc_method_handler if handler.request_streaming \
                else grpc.unary_unary_rpc_method_handler
        return make(wrap(method, behaviour), request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer)

    def _unary(self, method: str, behaviour: Callable):
        async def unary(request, context: grpc.aio.ServicerContext):
            with _Counted(method, context):
                await self._enter(context)
                return await behaviour(request, context)

        return unary

    def _streaming(self, method: str, behaviour: Callable):
        async def streaming(request, context: grpc.aio.ServicerContext):
            with _Counted(method, context):
                await self._enter(context)
                # aclosing: when the call ends while we wait at `yield`, the handler's own clean-up runs now.
                async with contextlib.aclosing(behaviour(request, context)) as responses:
                    async for response in responses:
                        yield response

        return streaming

    async def _enter(self, context: grpc.aio.ServicerContext) -> None:
        logs.bind_from_grpc(context.invocation_metadata())
        if not self.loaded:
            await context.abort(grpc.StatusCode.UNAVAILABLE, LOADING_DETAILS)


class _Counted:
    """Counts one RPC with the status it ended with, and its duration."""

    def __init__(self, method: str, context: grpc.aio.ServicerContext) -> None:
        self._method = method
        self._context = context
        self._started = time.monotonic()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, traceback) -> None:
        metrics.RPC_TOTAL.labels(self._method, self._code(kind).name).inc()
        metrics.RPC_SECONDS.labels(self._method).observe(time.monotonic() - self._started)

    def _code(self, kind: type[BaseException] | None) -> grpc.StatusCode:
        if kind is not None and issubclass(kind, (asyncio.CancelledError, GeneratorExit)):
            return grpc.StatusCode.CANCELLED
        code = self._context.code()
        if isinstance(code, grpc.StatusCode):
            return code
        return grpc.StatusCode.OK if kind is None else grpc.StatusCode.UNKNOWN
